//! Monotonic time as plain numbers, so the state machine and the gate can be
//! driven by a virtual clock in tests and read cheaply in the generation path.

use std::ops::{Add, Sub};
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A point on a monotonic clock: nanoseconds since an arbitrary anchor.
///
/// For [`SystemClock`] the anchor is the first use in this process. Arithmetic
/// saturates, so `MonoTime::ZERO - d` is `ZERO`.
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
    pub fn now() -> Self {
        SystemClock.now()
    }

    /// This time as a `std::time::Instant` (for timers), for [`SystemClock`] times.
    pub fn to_instant(self) -> Instant {
        anchor() + Duration::from_nanos(self.0)
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

fn anchor() -> Instant {
    static ANCHOR: OnceLock<Instant> = OnceLock::new();
    *ANCHOR.get_or_init(Instant::now)
}

/// The process's monotonic clock (`std::time::Instant`), anchored at first use.
///
/// It keeps counting while the process is frozen (SIGSTOP, VM pause) on Linux's
/// `CLOCK_MONOTONIC`, which is what lets the gate close by itself after a pause.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> MonoTime {
        MonoTime(duration_nanos(anchor().elapsed()))
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
