//! Time sources for generation: one cheap monotonic reading per call (for the
//! gate's deadline and the timestamp), a precise reading for the rare paths,
//! and the mapping of monotonic time to Unix time (the process-wide offset of
//! [`SystemClock`] for the real clocks).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold_core::{Clock, MonoTime, SystemClock, UnixOffset};

/// One reading of the monotonic clock ([`MonoTime`], the gate's clock), as an
/// interval that holds the true time: `earliest <= true now <= latest`.
///
/// The gate is checked with `latest` (so it closes early rather than late) and
/// timestamps are taken from `earliest` (so they never pass real time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// No later than the true time.
    pub earliest: MonoTime,
    /// No earlier than the true time (for a coarse clock: unless its ticks
    /// stalled; see [`TimeSource::guard`]).
    pub latest: MonoTime,
}

impl Reading {
    /// An exact reading.
    pub const fn exact(t: MonoTime) -> Self {
        Self {
            earliest: t,
            latest: t,
        }
    }
}

/// Where a generator gets its time. Implement it to inject time in tests
/// ([`ManualTime`] does) or to model a skewed host.
pub trait TimeSource: Send + Sync + 'static {
    /// The hot-path reading, once per generated nonce.
    fn now(&self) -> Reading;
    /// A precise reading, for the rare paths (waiting for the next
    /// millisecond, checking a deadline that is near).
    fn precise(&self) -> MonoTime;
    /// Unix time minus monotonic time, in nanoseconds: `now + offset` is a
    /// Unix time. `fresh` asks for a new measurement (about once a second and
    /// on every new lease); otherwise the last one will do. The real clocks
    /// return [`SystemClock::unix_offset`], one offset for the whole process.
    fn unix_offset(&self, fresh: bool) -> u64;
    /// A forward step of the wall clock that the offset has not followed
    /// (yet): how far the wall clock is ahead of `now + offset`. While it is
    /// `Some`, generation refuses with
    /// [`GenerateError::ClockStepped`](crate::GenerateError::ClockStepped).
    /// The real clocks and [`ManualTime`] return what their
    /// [`UnixOffset`] saw at the last fresh measurement
    /// ([`SystemClock::wall_clock_step`]); the default, `None`, is for time
    /// sources that never step. A source that wraps another (to skew it,
    /// say) delegates this too, or generation follows steps at once.
    fn wall_clock_step(&self) -> Option<Duration> {
        None
    }
    /// How close to the gate's deadline a [`TimeSource::now`] reading is
    /// trusted: nearer than this, generation checks the deadline again with
    /// [`TimeSource::precise`]. Zero for exact clocks.
    fn guard(&self) -> Duration {
        Duration::ZERO
    }
}

/// A [`TimeSource`] as the lease manager's wall clock ([`Clock`]), so that
/// the ceilings the manager reports to the store and the timestamps the
/// generators stamp read **one** clock. Hand the manager the time source the
/// generators are built with (clones share it):
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use leasehold_core::{LeaseConfig, LeaseManager, Memory};
/// use leasehold_nonce::{AsClock, Layout, PreciseClock, Sortable64};
/// let time = PreciseClock; // or a time source of your own
/// let config = LeaseConfig::builder("ids").clock(AsClock(time)).build()?;
/// let manager = LeaseManager::start(Memory::new(), config).await?;
/// let ids = Sortable64::with_time(manager.gate(), Layout::default64(), time)?;
/// # Ok(()) }
/// ```
///
/// Without it the manager computes ceilings on the process's wall clock
/// ([`SystemClock`]), and a generator whose time source runs ahead of it by
/// more than the time left to the deadline refuses with
/// [`GenerateError::PastCeiling`](crate::GenerateError::PastCeiling). The
/// manager uses only [`TimeSource::unix_offset`]; its deadlines stay on
/// [`MonoTime`], which every time source reads too.
#[derive(Clone, Copy, Debug, Default)]
pub struct AsClock<T>(pub T);

impl<T: TimeSource> Clock for AsClock<T> {
    fn now(&self) -> MonoTime {
        self.0.precise()
    }
    fn unix_offset(&self, fresh: bool) -> u64 {
        self.0.unix_offset(fresh)
    }
}

fn system_offset(fresh: bool) -> u64 {
    if fresh {
        SystemClock::resync_unix_offset()
    } else {
        SystemClock::unix_offset()
    }
}

/// `std::time::Instant` (via [`MonoTime::now`]) on every call: exact to the
/// nanosecond, about 25–40 ns a read on a VM.
#[derive(Clone, Copy, Debug, Default)]
pub struct PreciseClock;

impl TimeSource for PreciseClock {
    #[inline]
    fn now(&self) -> Reading {
        Reading::exact(MonoTime::now())
    }
    fn precise(&self) -> MonoTime {
        MonoTime::now()
    }
    fn unix_offset(&self, fresh: bool) -> u64 {
        system_offset(fresh)
    }
    fn wall_clock_step(&self) -> Option<Duration> {
        SystemClock::wall_clock_step()
    }
}

/// The default: on Linux, `CLOCK_MONOTONIC_COARSE` through the vDSO (about
/// 6 ns a read instead of 20–40), mapped onto [`MonoTime`] (the gate's clock,
/// `CLOCK_BOOTTIME`). Each reading is widened by the tick (`clock_getres`,
/// typically 1–4 ms), so the gate closes up to one tick *before* the deadline,
/// and timestamps lag real time by the coarse clock's own lag: usually under
/// a tick, but measured at up to 7.5 ms with 4 ms ticks on a loaded VM.
///
/// The mapping is checked again on every new tick, with precise reads, so a
/// suspend (after which `CLOCK_BOOTTIME` is ahead of the coarse clock by the
/// time suspended) is noticed at the first call after it. A coarse clock can
/// also lag more than a tick when the kernel's timekeeping is delayed, so
/// readings within [`FastClock::GUARD`] (or eight ticks) of the gate's
/// deadline are not trusted: generation re-checks with the precise clock.
///
/// Elsewhere, or when the coarse clock cannot be lined up with `MonoTime`, or
/// ticks slower than 10 ms, it is [`PreciseClock`].
#[derive(Clone, Debug)]
pub struct FastClock {
    coarse: Option<Arc<coarse::Coarse>>,
}

impl Default for FastClock {
    fn default() -> Self {
        Self::new()
    }
}

impl FastClock {
    /// The least distance from a deadline at which a coarse reading is
    /// trusted (more when eight ticks are longer).
    pub const GUARD: Duration = Duration::from_millis(50);

    /// Calibrates against `MonoTime` (a few clock reads).
    pub fn new() -> Self {
        Self {
            coarse: coarse::Coarse::calibrate().map(Arc::new),
        }
    }

    /// True when readings come from the coarse clock.
    pub fn is_coarse(&self) -> bool {
        self.coarse.is_some()
    }

    /// The width of a reading (`latest − earliest`): zero when precise.
    pub fn resolution(&self) -> Duration {
        Duration::from_nanos(self.coarse.as_ref().map_or(0, |c| c.span()))
    }
}

impl TimeSource for FastClock {
    #[inline(always)]
    fn now(&self) -> Reading {
        match &self.coarse {
            Some(c) => c.now(),
            None => PreciseClock.now(),
        }
    }
    fn precise(&self) -> MonoTime {
        MonoTime::now()
    }
    fn unix_offset(&self, fresh: bool) -> u64 {
        system_offset(fresh)
    }
    fn wall_clock_step(&self) -> Option<Duration> {
        SystemClock::wall_clock_step()
    }
    fn guard(&self) -> Duration {
        match &self.coarse {
            Some(c) => Self::GUARD.max(Duration::from_nanos(c.span()) * 8),
            None => Duration::ZERO,
        }
    }
}

#[cfg(target_os = "linux")]
mod coarse {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::Reading;
    use leasehold_core::MonoTime;
    use rustix::time::{ClockId, Timespec, clock_getres, clock_gettime};

    /// The most a mapping measurement may be off; a wider bracket is retried.
    const MAX_ERR: u64 = 20_000;

    fn nanos(t: Timespec) -> u64 {
        (t.tv_sec as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(t.tv_nsec as u64)
    }

    #[inline]
    fn raw() -> u64 {
        nanos(clock_gettime(ClockId::MonotonicCoarse))
    }

    /// The coarse clock's mapping onto `MonoTime`, checked once per tick.
    #[derive(Debug)]
    #[repr(align(64))]
    pub(super) struct Coarse {
        /// The tick (`clock_getres`), in ns.
        res: u64,
        /// The raw coarse reading the mapping was last checked at.
        tick: AtomicU64,
        /// `MonoTime` minus raw `CLOCK_MONOTONIC`, as two's complement.
        shift: AtomicU64,
    }

    impl Coarse {
        pub(super) fn calibrate() -> Option<Self> {
            let res = nanos(clock_getres(ClockId::MonotonicCoarse));
            if res == 0 || res > 10_000_000 {
                return None;
            }
            let c = Self {
                res,
                tick: AtomicU64::new(0),
                shift: AtomicU64::new(measure_shift()?),
            };
            // Check that the clocks really line up (they would not if
            // MonoTime stopped being a CLOCK_MONOTONIC-rate clock).
            for _ in 0..4 {
                let before = MonoTime::now();
                let r = c.now();
                let after = MonoTime::now();
                if r.earliest > after || r.latest + super::FastClock::GUARD < before {
                    return None;
                }
            }
            Some(c)
        }

        pub(super) fn span(&self) -> u64 {
            self.res + 2 * MAX_ERR
        }

        #[inline(always)]
        pub(super) fn now(&self) -> Reading {
            let raw = raw();
            if raw != self.tick.load(Ordering::Acquire) && !self.recheck(raw) {
                return Reading::exact(MonoTime::now());
            }
            let base = raw.wrapping_add(self.shift.load(Ordering::Acquire));
            let earliest = base.saturating_sub(MAX_ERR);
            Reading {
                earliest: MonoTime::from_nanos(earliest),
                latest: MonoTime::from_nanos(earliest + self.span()),
            }
        }

        /// A new tick: measure the mapping again (a suspend moves it). False
        /// when no tight measurement could be made.
        #[cold]
        #[inline(never)]
        fn recheck(&self, raw: u64) -> bool {
            match measure_shift() {
                Some(shift) => {
                    self.shift.store(shift, Ordering::Release);
                    self.tick.store(raw, Ordering::Release);
                    true
                }
                None => false,
            }
        }
    }

    /// `MonoTime − CLOCK_MONOTONIC` by bracketing a `MonoTime` read between
    /// two precise `CLOCK_MONOTONIC` reads; `None` when no bracket of 16 was
    /// tighter than `2 × MAX_ERR`.
    fn measure_shift() -> Option<u64> {
        for _ in 0..16 {
            let a = nanos(clock_gettime(ClockId::Monotonic));
            let m = MonoTime::now().as_nanos();
            let b = nanos(clock_gettime(ClockId::Monotonic));
            if b.wrapping_sub(a) <= 2 * MAX_ERR {
                return Some(m.wrapping_sub(a + (b - a) / 2));
            }
        }
        None
    }
}

#[cfg(not(target_os = "linux"))]
mod coarse {
    use super::Reading;

    #[derive(Debug)]
    pub(super) struct Coarse;

    impl Coarse {
        pub(super) fn calibrate() -> Option<Self> {
            None
        }
        pub(super) fn span(&self) -> u64 {
            0
        }
        pub(super) fn now(&self) -> Reading {
            unreachable!("never calibrated off Linux")
        }
    }
}

/// A time source moved by hand, for tests: a monotonic time and a wall clock
/// that can be set independently (so the wall clock can step backwards or
/// forwards). Cloning shares the times.
///
/// Its Unix offset follows the wall clock as the process's does: through a
/// [`UnixOffset`] of its own (with the default step limit,
/// [`DEFAULT_MAX_CLOCK_SKEW`](leasehold_core::DEFAULT_MAX_CLOCK_SKEW)),
/// measured at the first use and on every fresh read. It never goes back,
/// and a forward step of more than a second is followed only once it has
/// lasted [`UnixOffset::SETTLE`].
///
/// ```
/// use leasehold_nonce::ManualTime;
/// use std::time::Duration;
/// let t = ManualTime::new();
/// let w = t.wall();
/// t.advance(Duration::from_millis(5));
/// assert_eq!(t.wall(), w + Duration::from_millis(5));
/// t.set_wall(w - Duration::from_secs(10)); // a backward step
/// assert!(t.wall() < w);
/// ```
#[derive(Clone, Debug)]
pub struct ManualTime(Arc<ManualInner>);

#[derive(Debug)]
struct ManualInner {
    mono: AtomicU64,
    wall: AtomicU64,
    /// Added to the monotonic time on every `precise` read (simulates time
    /// passing while a generator waits).
    step: AtomicU64,
    /// The offset generators use, measured from `wall − mono`.
    offset: UnixOffset,
}

impl Default for ManualTime {
    fn default() -> Self {
        Self::new()
    }
}

impl ManualTime {
    /// Monotonic time 1 s, wall clock the real current time.
    pub fn new() -> Self {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        Self(Arc::new(ManualInner {
            mono: AtomicU64::new(1_000_000_000),
            wall: AtomicU64::new(wall),
            step: AtomicU64::new(0),
            offset: UnixOffset::new(),
        }))
    }

    /// Moves both clocks forward.
    pub fn advance(&self, by: Duration) {
        let ns = by.as_nanos() as u64;
        self.0.mono.fetch_add(ns, Ordering::SeqCst);
        self.0.wall.fetch_add(ns, Ordering::SeqCst);
    }

    /// Sets the wall clock (time since the UNIX epoch), e.g. backwards.
    pub fn set_wall(&self, since_unix_epoch: Duration) {
        self.0
            .wall
            .store(since_unix_epoch.as_nanos() as u64, Ordering::SeqCst);
    }

    /// Makes every `precise` read advance both clocks by `step`, so a waiting
    /// generator makes progress without another thread.
    pub fn auto_advance(&self, step: Duration) {
        self.0.step.store(step.as_nanos() as u64, Ordering::SeqCst);
    }

    /// The monotonic time.
    pub fn mono(&self) -> MonoTime {
        MonoTime::from_nanos(self.0.mono.load(Ordering::SeqCst))
    }

    /// The wall clock, as time since the UNIX epoch.
    pub fn wall(&self) -> Duration {
        Duration::from_nanos(self.0.wall.load(Ordering::SeqCst))
    }
}

impl TimeSource for ManualTime {
    fn now(&self) -> Reading {
        Reading::exact(self.mono())
    }
    fn precise(&self) -> MonoTime {
        let step = self.0.step.load(Ordering::SeqCst);
        if step > 0 {
            self.advance(Duration::from_nanos(step));
        }
        self.mono()
    }
    fn unix_offset(&self, fresh: bool) -> u64 {
        match self.0.offset.get() {
            0 => self.measure(),
            _ if fresh => self.measure(),
            offset => offset,
        }
    }
    fn wall_clock_step(&self) -> Option<Duration> {
        self.0.offset.step()
    }
}

impl ManualTime {
    fn measure(&self) -> u64 {
        let mono = self.0.mono.load(Ordering::SeqCst);
        let wall = self.0.wall.load(Ordering::SeqCst);
        self.0
            .offset
            .observe(wall.saturating_sub(mono), MonoTime::from_nanos(mono))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reading brackets the true time; `latest` can lag only when the
    /// kernel's ticks stall, and never by more than the guard (past which the
    /// gate is checked with the precise clock).
    #[test]
    fn fast_clock_brackets_the_true_time() {
        let c = FastClock::new();
        for _ in 0..1000 {
            let before = MonoTime::now();
            let r = c.now();
            let after = MonoTime::now();
            assert!(r.earliest <= after, "{r:?} {after:?}");
            assert!(r.latest + c.guard() >= before, "{r:?} {before:?}");
        }
        #[cfg(target_os = "linux")]
        assert!(c.is_coarse() || c.resolution().is_zero());
    }
}
