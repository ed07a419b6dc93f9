//! Waiting, in async code, until generation can go on.

use std::fmt;
use std::time::Duration;

use crate::clock::{MonoTime, SystemClock};
use crate::gate::LeaseGate;

/// How often a waiting task looks at the gate again: the gate has no
/// notifications (the generation path takes no lock and wakes nobody), so a
/// waiter polls it, each look two atomic loads.
const POLL: Duration = Duration::from_millis(5);

/// [`LeaseGate::wait_ready`] gave up: generation still could not go on.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NotReady {
    /// How long it waited.
    pub waited: Duration,
    /// `Some` when a lease is held but this host's clock is still this far
    /// behind the slot's floor (the highest timestamp a previous holder may
    /// have used); `None` when no lease is held.
    pub behind_floor: Option<Duration>,
}

impl fmt::Display for NotReady {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.behind_floor {
            None => write!(
                f,
                "no lease held after waiting {:?}: generation is refused until the lease manager \
                 acquires or renews one; answer 503 with Retry-After, or wait longer",
                self.waited
            ),
            Some(behind) => write!(
                f,
                "a lease is held, but after waiting {:?} this host's clock is still {behind:?} \
                 behind the slot's floor (the highest timestamp a previous holder may have \
                 used); generation waits for it, and refuses beyond max_clock_skew: fix the \
                 clock synchronisation (NTP)",
                self.waited
            ),
        }
    }
}

impl std::error::Error for NotReady {}

impl LeaseGate {
    /// Waits, without blocking the runtime's thread, until generation can go
    /// on: a lease is held (the gate is open on the clock now) and this
    /// host's clock has passed the grant's floor. A generator's `next()`
    /// then neither refuses for want of a lease nor waits for the floor
    /// (which it does by spinning on the calling thread, up to the lease's
    /// `max_clock_skew`); at most it waits for the next millisecond.
    ///
    /// Returns at once when generation can go on; otherwise looks again
    /// every few milliseconds until `timeout` has passed, then answers
    /// [`NotReady`], which says what is missing. The lease may be lost again
    /// at any moment: `next()` still checks the gate on every call.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use leasehold_core::{LeaseConfig, LeaseManager, Memory};
    /// use std::time::Duration;
    /// let manager = LeaseManager::start(Memory::new(), LeaseConfig::builder("ids").build()?).await?;
    /// let gate = manager.gate();
    /// // In a request handler, before taking IDs:
    /// match gate.wait_ready(Duration::from_millis(200)).await {
    ///     Ok(()) => { /* generator.next() */ }
    ///     Err(not_ready) => { /* answer 503 with Retry-After: {not_ready} */ }
    /// }
    /// manager.shutdown().await;
    /// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
    /// ```
    pub async fn wait_ready(&self, timeout: Duration) -> Result<(), NotReady> {
        let start = tokio::time::Instant::now();
        let give_up = start + timeout;
        loop {
            let now = MonoTime::now();
            let behind_floor = if self.check(now).is_ok() {
                let floor = self.view().floor.0;
                let clock = SystemClock::unix_millis_at(now);
                if clock >= floor {
                    return Ok(());
                }
                Some(Duration::from_millis(floor - clock))
            } else {
                None
            };
            let left = give_up.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Err(NotReady {
                    waited: start.elapsed(),
                    behind_floor,
                });
            }
            // Until the clock passes the floor, or the next look at the gate.
            let pause =
                behind_floor.map_or(POLL, |b| b.min(POLL * 20).max(Duration::from_millis(1)));
            tokio::time::sleep(pause.min(left)).await;
        }
    }
}
