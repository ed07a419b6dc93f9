//! Monotonic time as plain numbers, so the state machine and the gate can be
//! driven by a virtual clock in tests and read cheaply in the generation path,
//! and the process-wide mapping from it to Unix time.

use std::ops::{Add, Sub};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How far this host's clock may be behind a slot's floor before generation
/// refuses, unless configured otherwise (`LeaseConfig::max_clock_skew`). It
/// also bounds the wall-clock steps the Unix offset follows at once (rule 10).
pub const DEFAULT_MAX_CLOCK_SKEW: Duration = Duration::from_secs(1);

/// A point on a monotonic clock: nanoseconds since an arbitrary anchor.
///
/// For [`SystemClock`] with `CLOCK_BOOTTIME` the anchor is the machine's boot
/// (so times compare across the processes of one machine); otherwise the first
/// use in this process. Arithmetic saturates, so `MonoTime::ZERO - d` is
/// `ZERO`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MonoTime(u64);

impl MonoTime {
    /// The anchor.
    pub const ZERO: Self = Self(0);
    /// Later than every reachable time.
    pub const MAX: Self = Self(u64::MAX);

    /// From nanoseconds since the anchor.
    pub const fn from_nanos(nanos: u64) -> Self {
        Self(nanos)
    }

    /// Nanoseconds since the anchor.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self - earlier`, or zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Self) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// The current time of the process-wide [`SystemClock`].
    #[inline]
    pub fn now() -> Self {
        Self(system_nanos())
    }

    /// This [`SystemClock`] time as a `std::time::Instant`, for timers.
    ///
    /// The conversion is made relative to now, so it stays right after a
    /// suspend (when the system clock has counted time that `Instant` did
    /// not). A timer set before a suspend may fire late; the gate does not
    /// depend on it (DESIGN.md, timing rule 5).
    pub fn to_instant(self) -> Instant {
        let (now, instant) = (Self::now(), Instant::now());
        if self >= now {
            instant + self.saturating_since(now)
        } else {
            instant
                .checked_sub(now.saturating_since(self))
                .unwrap_or(instant)
        }
    }
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Add<Duration> for MonoTime {
    type Output = Self;
    fn add(self, rhs: Duration) -> Self {
        Self(self.0.saturating_add(duration_nanos(rhs)))
    }
}

impl Sub<Duration> for MonoTime {
    type Output = Self;
    fn sub(self, rhs: Duration) -> Self {
        Self(self.0.saturating_sub(duration_nanos(rhs)))
    }
}

/// A source of [`MonoTime`], and the wall clock that maps it to Unix time.
///
/// The lease manager takes one ([`LeaseConfigBuilder::clock`]) for the wall
/// clock only: it computes the ceilings and floors it reports to the store
/// as `MonoTime + unix_offset`. Give it the wall clock your generators use
/// (with `leasehold-nonce`: `AsClock(time_source)`), or a generator whose
/// clock runs ahead of the manager's stamps past the reported ceiling and
/// refuses (`PastCeiling`). Deadlines stay on [`MonoTime::now`], the gate's
/// clock, whatever the clock's `now` says.
///
/// [`LeaseConfigBuilder::clock`]: crate::LeaseConfigBuilder::clock
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> MonoTime;

    /// Unix time minus [`MonoTime`], in nanoseconds: `MonoTime + offset` is
    /// a Unix time. `fresh` asks for a new measurement (the driver asks with
    /// every request it reports a ceiling with). It must never go down
    /// (DESIGN.md, rules 8 and 10). The default is the process's offset,
    /// [`SystemClock::unix_offset`].
    fn unix_offset(&self, fresh: bool) -> u64 {
        if fresh {
            SystemClock::resync_unix_offset()
        } else {
            SystemClock::unix_offset()
        }
    }
}

/// The clock behind [`SystemClock`]: `CLOCK_BOOTTIME` on Linux with the
/// `boottime` feature (on by default through `tokio`), else `Instant`.
#[cfg(all(feature = "boottime", target_os = "linux"))]
#[inline]
fn system_nanos() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    // BOOTTIME counts from boot: never negative, far from overflowing.
    (t.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(t.tv_nsec as u64)
}

#[cfg(not(all(feature = "boottime", target_os = "linux")))]
#[inline]
fn system_nanos() -> u64 {
    static ANCHOR: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    duration_nanos(ANCHOR.get_or_init(Instant::now).elapsed())
}

/// The process's clock for leases and generation.
///
/// On Linux with the `boottime` feature (which the `tokio` driver turns on,
/// and which `leasehold-nonce` needs) it is `CLOCK_BOOTTIME`: it keeps
/// counting while the machine is suspended, so a holder that resumes after a
/// suspend finds its gate closed. Without it, it is `std::time::Instant`
/// (`CLOCK_MONOTONIC` on Linux), which **stops during suspend**: a process
/// resumed from one would keep an open gate past its deadline. Both keep
/// counting while the process alone is frozen (SIGSTOP, a long GC-like
/// pause). Neither sees a pause of the whole VM by its hypervisor unless the
/// guest's clock source follows the host's time across it (KVM's kvmclock
/// does); where it does not, only the store-side expiry covers that case
/// (DESIGN.md, rule 5). See [`SystemClock::SOURCE`].
///
/// It also holds the process-wide mapping from its time to Unix time
/// ([`SystemClock::unix_offset`]), shared by every lease and generator in the
/// process.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

/// The process-wide mapping from [`SystemClock`] time to Unix time.
static UNIX_OFFSET: UnixOffset = UnixOffset::new();

/// A bracket of the wall-clock read no wider than this is taken at once.
const TIGHT_BRACKET_NANOS: u64 = 20_000;

impl SystemClock {
    /// The kernel clock behind [`MonoTime::now`].
    pub const SOURCE: &'static str = if cfg!(all(feature = "boottime", target_os = "linux")) {
        "CLOCK_BOOTTIME"
    } else {
        "std::time::Instant"
    };

    /// True when the clock counts time the machine spent suspended.
    pub const fn counts_suspend() -> bool {
        cfg!(all(feature = "boottime", target_os = "linux"))
    }

    /// Unix time minus [`MonoTime`], in nanoseconds: `MonoTime + offset` is a
    /// Unix time. Process-wide, measured on first use; see
    /// [`SystemClock::resync_unix_offset`].
    #[inline]
    pub fn unix_offset() -> u64 {
        match UNIX_OFFSET.get() {
            0 => Self::resync_unix_offset(),
            offset => offset,
        }
    }

    /// Measures the offset again and returns the process-wide value.
    ///
    /// Each measurement brackets a wall-clock read between two monotonic ones
    /// (mono, wall, mono) and takes `wall − second mono`: a lower bound that a
    /// stall anywhere between the reads can only lower, never raise. Up to
    /// eight brackets are taken (fewer when one is tight) and the best lower
    /// bound kept. The measurement goes through [`UnixOffset::observe`]: the
    /// process-wide offset only grows, so timestamps never go backwards when
    /// the wall clock does, and a forward step larger than the process's
    /// step limit is followed only once it has lasted [`UnixOffset::SETTLE`]
    /// (see [`SystemClock::wall_clock_step`]).
    pub fn resync_unix_offset() -> u64 {
        let best = measure_offset(|| {
            let m1 = system_nanos();
            let wall = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, duration_nanos);
            (m1, wall, system_nanos())
        });
        UNIX_OFFSET.observe(best, MonoTime::now())
    }

    /// How far the wall clock was ahead of [`SystemClock::unix_offset`] at
    /// the last measurement, when that is a forward step not followed yet
    /// (more than the step limit, for less than [`UnixOffset::SETTLE`]).
    /// Generators refuse while it is `Some`; see [`UnixOffset`].
    pub fn wall_clock_step() -> Option<Duration> {
        UNIX_OFFSET.step()
    }

    /// Lowers the process's step limit to `max_clock_skew` (never below
    /// [`UnixOffset::MIN_STEP_LIMIT`]): the lease gate calls it with every
    /// grant, so no forward step larger than the smallest `max_clock_skew`
    /// of the process's leases is followed before it has settled.
    pub fn limit_wall_clock_steps(max_clock_skew: Duration) {
        UNIX_OFFSET.limit_steps(max_clock_skew);
    }

    /// The process's step limit: forward moves of the wall clock up to this
    /// are followed at once, larger ones once settled.
    pub fn wall_clock_step_limit() -> Duration {
        UNIX_OFFSET.step_limit()
    }

    /// The Unix time, in milliseconds, of the [`MonoTime`] `t` (rounded down),
    /// with the process-wide offset.
    #[inline]
    pub fn unix_millis_at(t: MonoTime) -> u64 {
        t.0.saturating_add(Self::unix_offset()) / 1_000_000
    }
}

/// Unix time minus [`MonoTime`], in nanoseconds, that follows the wall clock
/// without ever going backwards and without following a wall-clock step that
/// may be corrected a moment later.
///
/// [`SystemClock`] keeps one for the process ([`SystemClock::unix_offset`]);
/// virtual clocks in tests keep their own. Every re-measurement of
/// `wall − mono` goes through [`UnixOffset::observe`]:
///
/// - **Backwards** (the wall clock stepped or slewed back): ignored. The
///   offset only grows, so timestamps never go backwards (DESIGN.md,
///   rule 10).
/// - **Forward by at most the step limit** (NTP slewing, drift, a small
///   step): followed at once.
/// - **Forward by more than the step limit** (a step): not followed at
///   once. It is *pending* ([`UnixOffset::step`] is `Some`) and generators
///   refuse, because the time they would stamp is in doubt: the step may be
///   a mistake corrected a minute later, and once followed it could never be
///   undone (the offset only grows, and the ceilings reported to the store
///   with it would hold the slot's floor that far ahead of every later
///   holder's clock). A pending step ends when the wall clock comes back
///   within the limit of the offset (the step was corrected: nothing was
///   stamped or reported with it), or once it has lasted
///   [`UnixOffset::SETTLE`] (measured within the limit of where it stepped
///   to): then it is followed.
///
/// The step limit is the smallest `max_clock_skew` of the leases that used
/// it ([`UnixOffset::limit_steps`]), at most [`DEFAULT_MAX_CLOCK_SKEW`] and
/// at least [`UnixOffset::MIN_STEP_LIMIT`]: a step that is followed and
/// corrected later moves the slot's floor at most that much further ahead
/// of the next holder's clock, which it waits out instead of refusing
/// (rule 8).
///
/// [`DEFAULT_MAX_CLOCK_SKEW`]: crate::DEFAULT_MAX_CLOCK_SKEW
///
/// ```
/// use leasehold_core::{MonoTime, UnixOffset};
/// use std::time::Duration;
/// let hour = 3_600_000_000_000;
/// let offset = UnixOffset::new();
/// let t = MonoTime::from_nanos(5_000_000_000);
/// assert_eq!(offset.observe(1_000, t), 1_000);
/// // The wall clock steps an hour forward: not followed, generation refuses.
/// assert_eq!(offset.observe(1_000 + hour, t), 1_000);
/// assert!(offset.step().is_some());
/// // Corrected a minute later: the offset never moved.
/// let later = t + Duration::from_secs(60);
/// assert_eq!(offset.observe(1_000, later), 1_000);
/// assert_eq!(offset.step(), None);
/// ```
#[derive(Debug)]
pub struct UnixOffset {
    /// The offset in use, in ns; 0 until first measured. Only grows.
    adopted: AtomicU64,
    /// Forward moves larger than this (ns) are steps.
    limit: AtomicU64,
    /// A forward step not followed yet. Changed only under the lock.
    pending: Mutex<Option<Pending>>,
    /// The offset of the pending step, 0 when none: read by
    /// [`UnixOffset::step`] without the lock.
    pending_offset: AtomicU64,
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    /// The offset the wall clock stepped to.
    offset: u64,
    /// When it was first seen (MonoTime ns).
    since: u64,
}

impl Default for UnixOffset {
    fn default() -> Self {
        Self::new()
    }
}

impl UnixOffset {
    /// How long a forward step must last before it is followed. Longer than
    /// the minute or two in which a mistaken step is usually put right (an
    /// operator's `date`, systemd-timesyncd's first polls); the price is that
    /// generation stops this long after a genuine step.
    pub const SETTLE: Duration = Duration::from_secs(120);

    /// The least step limit: forward moves this small are followed at once
    /// (NTP daemons slew, not step, corrections below 128 ms, and a
    /// measurement stalled by the scheduler must not look like a step).
    pub const MIN_STEP_LIMIT: Duration = Duration::from_millis(100);

    /// Not measured yet; the step limit [`DEFAULT_MAX_CLOCK_SKEW`](crate::DEFAULT_MAX_CLOCK_SKEW).
    pub const fn new() -> Self {
        Self {
            adopted: AtomicU64::new(0),
            limit: AtomicU64::new(DEFAULT_SKEW_NANOS),
            pending: Mutex::new(None),
            pending_offset: AtomicU64::new(0),
        }
    }

    /// The offset in use, in ns (0 until the first [`UnixOffset::observe`]).
    /// One atomic load.
    #[inline]
    pub fn get(&self) -> u64 {
        self.adopted.load(Ordering::Acquire)
    }

    /// Lowers the step limit to `max_clock_skew`, but not below
    /// [`UnixOffset::MIN_STEP_LIMIT`]. It never rises again.
    pub fn limit_steps(&self, max_clock_skew: Duration) {
        let limit = duration_nanos(max_clock_skew.max(Self::MIN_STEP_LIMIT));
        self.limit.fetch_min(limit, Ordering::AcqRel);
    }

    /// The step limit.
    pub fn step_limit(&self) -> Duration {
        Duration::from_nanos(self.limit.load(Ordering::Acquire))
    }

    /// Takes a measurement `measured` of `wall − mono` (a lower bound) made
    /// at `now` and returns the offset in use afterwards (see the type's
    /// docs for what is followed).
    pub fn observe(&self, measured: u64, now: MonoTime) -> u64 {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let adopted = self.observe_locked(&mut pending, measured, now);
        self.pending_offset
            .store(pending.map_or(0, |p| p.offset), Ordering::Release);
        adopted
    }

    fn observe_locked(&self, pending: &mut Option<Pending>, measured: u64, now: MonoTime) -> u64 {
        let adopted = self.adopted.load(Ordering::Acquire);
        let limit = self.limit.load(Ordering::Acquire);
        if adopted == 0 || measured <= adopted.saturating_add(limit) {
            // First measurement, a small forward move, or a backward one.
            *pending = None;
            if crate::plant::active(crate::plant::Plant::OffsetFollowsStepsBack)
                && measured < adopted
            {
                self.adopted.store(measured, Ordering::Release);
                return measured;
            }
            return self
                .adopted
                .fetch_max(measured, Ordering::AcqRel)
                .max(measured);
        }
        match *pending {
            Some(p) if p.offset.abs_diff(measured) <= limit => {
                if now.as_nanos().saturating_sub(p.since) >= duration_nanos(Self::SETTLE) {
                    *pending = None;
                    return self
                        .adopted
                        .fetch_max(measured, Ordering::AcqRel)
                        .max(measured);
                }
            }
            _ => {
                *pending = Some(Pending {
                    offset: measured,
                    since: now.as_nanos(),
                });
            }
        }
        adopted
    }

    /// How far ahead of the offset in use the wall clock was at the last
    /// [`UnixOffset::observe`], when that is a step not followed yet.
    /// Two atomic loads, no lock.
    pub fn step(&self) -> Option<Duration> {
        match self.pending_offset.load(Ordering::Acquire) {
            0 => None,
            offset => Some(Duration::from_nanos(offset.saturating_sub(self.get()))),
        }
    }
}

const DEFAULT_SKEW_NANOS: u64 = DEFAULT_MAX_CLOCK_SKEW.as_nanos() as u64;

/// The best lower bound of `wall − mono` from up to eight brackets
/// `(mono before, wall, mono after)`; at least 1 (0 means "not measured").
fn measure_offset(mut bracket: impl FnMut() -> (u64, u64, u64)) -> u64 {
    let mut best = 0;
    for _ in 0..8 {
        let (m1, wall, m2) = bracket();
        best = best.max(wall.saturating_sub(m2));
        if m2.saturating_sub(m1) <= TIGHT_BRACKET_NANOS {
            break;
        }
    }
    best.max(1)
}

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> MonoTime {
        MonoTime::now()
    }
}

/// A clock that moves only when told to. Cloning shares the time.
///
/// ```
/// use leasehold_core::{Clock, ManualClock};
/// use std::time::Duration;
/// let clock = ManualClock::new();
/// let t0 = clock.now();
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(clock.now().saturating_since(t0), Duration::from_secs(1));
/// ```
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock at an arbitrary non-zero time.
    pub fn new() -> Self {
        Self(Arc::new(AtomicU64::new(1_000_000_000)))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(duration_nanos(by), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> MonoTime {
        MonoTime(self.0.load(Ordering::SeqCst))
    }
}

/// Wall-clock microseconds since the Unix epoch, strictly growing within
/// the process: two calls never return the same number, even when the wall
/// clock stands still or steps back (then it counts on from the last one).
/// For values that must change on every write (a Kubernetes `renewTime`,
/// a fixed slot's fence), never for deciding expiry.
pub fn unique_wall_micros() -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    let prev = LAST
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
            Some(now.max(last + 1))
        })
        .unwrap_or(0);
    now.max(prev + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stall between the first monotonic read and the wall read delays both
    /// later reads alike; a stall after the wall read delays only the last.
    /// Neither may raise the measured offset above the true one.
    #[test]
    fn a_stall_never_raises_the_offset() {
        const TRUE_OFFSET: u64 = 1_000_000_000_000;
        let stall = 50_000_000; // 50 ms
        // (mono before, wall, mono after) around a true offset, with a stall
        // placed before the wall read (case 0) or after it (case 1).
        for case in 0..2 {
            let mut t = 5_000_000_000u64;
            let got = measure_offset(|| {
                let m1 = t;
                t += 100;
                if case == 0 {
                    t += stall;
                }
                let wall = t + TRUE_OFFSET;
                t += 100;
                if case == 1 {
                    t += stall;
                }
                let m2 = t;
                t += 1_000;
                (m1, wall, m2)
            });
            assert!(got <= TRUE_OFFSET, "case {case}: {got} > {TRUE_OFFSET}");
        }
        // Tight brackets measure it to within the bracket.
        let mut t = 1u64;
        let got = measure_offset(|| {
            t += 1_000;
            (t, t + 50 + TRUE_OFFSET, t + 100)
        });
        assert!(TRUE_OFFSET - got <= 100, "{got}");
    }

    #[test]
    fn wide_brackets_are_retried_and_the_best_kept() {
        let mut calls = 0;
        let got = measure_offset(|| {
            calls += 1;
            // Every bracket is wide; the third has the best lower bound.
            let slack = if calls == 3 { 10 } else { 40_000 };
            (0, 1_000_000 + 100_000, 100_000 + slack)
        });
        assert_eq!(calls, 8);
        assert_eq!(got, 1_000_000 - 10);
    }

    const HOUR: u64 = 3_600_000_000_000;
    const SEC: u64 = 1_000_000_000;

    /// A forward step of an hour corrected a minute later never moves the
    /// offset: nothing is stamped, and no ceiling is reported, an hour ahead.
    /// While it lasts the step is reported, so generators refuse.
    #[test]
    fn a_forward_step_corrected_before_it_settles_is_never_followed() {
        let o = UnixOffset::new();
        let t0 = MonoTime::from_nanos(10 * SEC);
        let base = 1_700_000_000 * SEC;
        assert_eq!(o.observe(base, t0), base);
        for s in 0..60 {
            let at = t0 + Duration::from_secs(s);
            assert_eq!(o.observe(base + HOUR, at), base, "followed after {s} s");
            assert_eq!(o.step(), Some(Duration::from_nanos(HOUR)));
        }
        // Corrected: drift within the limit is followed again at once.
        let back = t0 + Duration::from_secs(61);
        assert_eq!(o.observe(base + 3_000_000, back), base + 3_000_000);
        assert_eq!(o.step(), None);
        assert!(o.get() < base + o.step_limit().as_nanos() as u64);
    }

    /// A step that lasts is followed once it has lasted `SETTLE`, and a step
    /// back afterwards (or any backward move) never lowers the offset.
    #[test]
    fn a_lasting_step_is_followed_and_the_offset_never_comes_back_down() {
        let o = UnixOffset::new();
        let t0 = MonoTime::from_nanos(10 * SEC);
        let base = 1_700_000_000 * SEC;
        o.observe(base, t0);
        o.observe(base + HOUR, t0 + Duration::from_secs(1));
        let almost = t0 + Duration::from_secs(1) + UnixOffset::SETTLE - Duration::from_millis(1);
        assert_eq!(o.observe(base + HOUR + 5, almost), base);
        let settled = almost + Duration::from_millis(1);
        assert_eq!(o.observe(base + HOUR + 7, settled), base + HOUR + 7);
        assert_eq!(o.step(), None);
        assert_eq!(
            o.observe(base, settled + Duration::from_secs(1)),
            base + HOUR + 7
        );
        assert_eq!(o.step(), None);
    }

    /// A second, different step while one is pending starts the wait over.
    #[test]
    fn a_different_step_restarts_the_wait() {
        let o = UnixOffset::new();
        let t0 = MonoTime::from_nanos(10 * SEC);
        let base = 1_700_000_000 * SEC;
        o.observe(base, t0);
        o.observe(base + HOUR, t0);
        let later = t0 + UnixOffset::SETTLE - Duration::from_secs(1);
        assert_eq!(o.observe(base + 2 * HOUR, later), base);
        assert_eq!(o.observe(base + 2 * HOUR, t0 + UnixOffset::SETTLE), base);
        assert_eq!(
            o.observe(base + 2 * HOUR, later + UnixOffset::SETTLE),
            base + 2 * HOUR
        );
    }

    /// The step limit follows the smallest `max_clock_skew`, within bounds.
    #[test]
    fn the_step_limit_is_the_smallest_skew_within_bounds() {
        let o = UnixOffset::new();
        assert_eq!(o.step_limit(), crate::DEFAULT_MAX_CLOCK_SKEW);
        o.limit_steps(Duration::from_secs(30));
        assert_eq!(o.step_limit(), crate::DEFAULT_MAX_CLOCK_SKEW);
        o.limit_steps(Duration::from_millis(300));
        assert_eq!(o.step_limit(), Duration::from_millis(300));
        o.limit_steps(Duration::ZERO);
        assert_eq!(o.step_limit(), UnixOffset::MIN_STEP_LIMIT);
        // A move within the limit is followed at once; beyond it, it waits.
        let t0 = MonoTime::from_nanos(10 * SEC);
        let base = 1_700_000_000 * SEC;
        o.observe(base, t0);
        assert_eq!(o.observe(base + 90_000_000, t0), base + 90_000_000);
        assert_eq!(o.observe(base + 300_000_000, t0), base + 90_000_000);
        assert!(o.step().is_some());
    }

    #[test]
    fn the_process_offset_only_grows() {
        let a = SystemClock::unix_offset();
        let b = SystemClock::resync_unix_offset();
        assert!(a > 0 && b >= a);
        assert!(SystemClock::unix_offset() >= b);
    }
}
