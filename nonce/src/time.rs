//! Time sources for generation: one cheap monotonic reading per call (for the
//! gate's deadline and the timestamp), a precise reading for the rare waits,
//! and the wall clock for anchoring timestamps to real time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold_core::MonoTime;

/// One reading of the monotonic clock ([`MonoTime`], the gate's clock), as an
/// interval that holds the true time: `earliest <= true now <= latest`.
///
/// The gate is checked with `latest` (so it closes early rather than late) and
/// timestamps are taken from `earliest` (so they never pass real time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// No later than the true time.
    pub earliest: MonoTime,
    /// No earlier than the true time.
    pub latest: MonoTime,
}

/// Where a generator gets its time. Implement it to inject time in tests
/// ([`ManualTime`] does).
pub trait TimeSource: Send + Sync + 'static {
    /// The hot-path reading, once per generated nonce.
    fn now(&self) -> Reading;
    /// A precise reading, for the rare paths (waiting for the next millisecond).
    fn precise(&self) -> MonoTime;
    /// The wall clock, as time since the UNIX epoch. Read only when a new
    /// lease is seen and about once a second, to anchor timestamps.
    fn wall(&self) -> Duration;
}

/// `std::time::Instant` (via [`MonoTime::now`]) on every call: exact to the
/// nanosecond, about 25–40 ns a read on a VM.
#[derive(Clone, Copy, Debug, Default)]
pub struct PreciseClock;

impl TimeSource for PreciseClock {
    #[inline]
    fn now(&self) -> Reading {
        let t = MonoTime::now();
        Reading {
            earliest: t,
            latest: t,
        }
    }
    fn precise(&self) -> MonoTime {
        MonoTime::now()
    }
    fn wall(&self) -> Duration {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
    }
}

/// The default: on Linux, `CLOCK_MONOTONIC_COARSE` through the vDSO (about
/// 6 ns a read instead of 30), which is `CLOCK_MONOTONIC` — the clock of
/// [`MonoTime`] — as of the last kernel tick. Each reading is widened by the
/// tick (`clock_getres`, typically 1–4 ms), so the gate closes up to one tick
/// *before* the deadline, never after, and timestamps lag real time by at most
/// one tick. Elsewhere, or when the coarse clock does not line up with
/// `MonoTime` at startup, or ticks slower than 10 ms, it is [`PreciseClock`].
#[derive(Clone, Copy, Debug)]
pub struct FastClock {
    /// `MonoTime` = raw coarse nanoseconds − `shift`; `None` means precise.
    coarse: Option<Coarse>,
}

#[derive(Clone, Copy, Debug)]
struct Coarse {
    shift: u64,
    span: u64,
}

impl Default for FastClock {
    fn default() -> Self {
        Self::new()
    }
}

impl FastClock {
    /// Calibrates against `MonoTime` (a few clock reads).
    pub fn new() -> Self {
        Self {
            coarse: coarse::calibrate(),
        }
    }

    /// True when readings come from the coarse clock.
    pub fn is_coarse(&self) -> bool {
        self.coarse.is_some()
    }

    /// The width of a reading (`latest − earliest`): zero when precise.
    pub fn resolution(&self) -> Duration {
        Duration::from_nanos(self.coarse.map_or(0, |c| c.span))
    }
}

impl TimeSource for FastClock {
    #[inline]
    fn now(&self) -> Reading {
        match self.coarse {
            Some(c) => {
                let earliest = coarse::raw().saturating_sub(c.shift);
                Reading {
                    earliest: MonoTime::from_nanos(earliest),
                    latest: MonoTime::from_nanos(earliest + c.span),
                }
            }
            None => PreciseClock.now(),
        }
    }
    fn precise(&self) -> MonoTime {
        MonoTime::now()
    }
    fn wall(&self) -> Duration {
        PreciseClock.wall()
    }
}

#[cfg(target_os = "linux")]
mod coarse {
    use super::Coarse;
    use leasehold_core::MonoTime;
    use rustix::time::{ClockId, Timespec, clock_getres, clock_gettime};

    fn nanos(t: Timespec) -> u64 {
        (t.tv_sec as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(t.tv_nsec as u64)
    }

    #[inline]
    pub(super) fn raw() -> u64 {
        nanos(clock_gettime(ClockId::MonotonicCoarse))
    }

    pub(super) fn calibrate() -> Option<Coarse> {
        let res = nanos(clock_getres(ClockId::MonotonicCoarse));
        if res == 0 || res > 10_000_000 {
            return None;
        }
        // MonoTime counts CLOCK_MONOTONIC nanoseconds from a process anchor:
        // find the anchor by bracketing a MonoTime read between raw reads.
        let mut best: Option<(u64, u64)> = None; // (shift, error)
        for _ in 0..16 {
            let a = nanos(clock_gettime(ClockId::Monotonic));
            let m = MonoTime::now().as_nanos();
            let b = nanos(clock_gettime(ClockId::Monotonic));
            let err = (b - a) / 2 + 1;
            let shift = (a + (b - a) / 2).checked_sub(m)?;
            if best.is_none_or(|(_, e)| err < e) {
                best = Some((shift, err));
            }
        }
        let (shift, err) = best?;
        if err > 20_000 {
            return None;
        }
        let c = Coarse {
            shift: shift + err,
            span: res + 2 * err,
        };
        // Check that the clocks really line up (they would not if std's
        // Instant stopped being CLOCK_MONOTONIC): earliest <= MonoTime <= latest.
        for _ in 0..4 {
            let earliest = raw().saturating_sub(c.shift);
            let m = MonoTime::now().as_nanos();
            if earliest > m || m > earliest + c.span + 1_000_000 {
                return None;
            }
        }
        Some(c)
    }
}

#[cfg(not(target_os = "linux"))]
mod coarse {
    use super::Coarse;
    #[inline]
    pub(super) fn raw() -> u64 {
        0
    }
    pub(super) fn calibrate() -> Option<Coarse> {
        None
    }
}

/// A time source moved by hand, for tests: a monotonic time and a wall clock
/// that can be set independently (so the wall clock can go backwards).
/// Cloning shares the times.
///
/// ```
/// use leasehold_nonce::{ManualTime, TimeSource};
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
}

impl Default for ManualTime {
    fn default() -> Self {
        Self::new()
    }
}

impl ManualTime {
    /// Monotonic time 1 s, wall clock the real current time.
    pub fn new() -> Self {
        let wall = PreciseClock.wall().as_nanos() as u64;
        Self(Arc::new(ManualInner {
            mono: AtomicU64::new(1_000_000_000),
            wall: AtomicU64::new(wall),
            step: AtomicU64::new(0),
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
}

impl TimeSource for ManualTime {
    fn now(&self) -> Reading {
        let t = self.mono();
        Reading {
            earliest: t,
            latest: t,
        }
    }
    fn precise(&self) -> MonoTime {
        let step = self.0.step.load(Ordering::SeqCst);
        if step > 0 {
            self.advance(Duration::from_nanos(step));
        }
        self.mono()
    }
    fn wall(&self) -> Duration {
        Duration::from_nanos(self.0.wall.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_clock_brackets_the_true_time() {
        let c = FastClock::new();
        for _ in 0..1000 {
            let before = MonoTime::now();
            let r = c.now();
            let after = MonoTime::now();
            assert!(r.earliest <= after, "{r:?} {after:?}");
            assert!(r.latest >= before, "{r:?} {before:?}");
        }
        #[cfg(target_os = "linux")]
        assert!(c.is_coarse() || c.resolution().is_zero());
    }
}
