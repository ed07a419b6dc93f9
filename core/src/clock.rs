//! Monotonic time as plain numbers, so the state machine and the gate can be
//! driven by a virtual clock in tests and read cheaply in the generation path,
//! and the process-wide mapping from it to Unix time.

use std::ops::{Add, Sub};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

/// A source of [`MonoTime`].
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> MonoTime;
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

/// Unix nanoseconds minus [`SystemClock`] nanoseconds; 0 until first measured.
static UNIX_OFFSET: AtomicU64 = AtomicU64::new(0);

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
        match UNIX_OFFSET.load(Ordering::Acquire) {
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
    /// bound kept. The process-wide offset only grows, so timestamps never go
    /// backwards when the wall clock does; forward steps are followed.
    pub fn resync_unix_offset() -> u64 {
        let best = measure_offset(|| {
            let m1 = system_nanos();
            let wall = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, duration_nanos);
            (m1, wall, system_nanos())
        });
        UNIX_OFFSET.fetch_max(best, Ordering::AcqRel).max(best)
    }

    /// The Unix time, in milliseconds, of the [`MonoTime`] `t` (rounded down),
    /// with the process-wide offset.
    #[inline]
    pub fn unix_millis_at(t: MonoTime) -> u64 {
        t.0.saturating_add(Self::unix_offset()) / 1_000_000
    }
}

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

    #[test]
    fn the_process_offset_only_grows() {
        let a = SystemClock::unix_offset();
        let b = SystemClock::resync_unix_offset();
        assert!(a > 0 && b >= a);
        assert!(SystemClock::unix_offset() >= b);
    }
}
