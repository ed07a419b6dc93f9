//! Opening a store that may not be up yet: a process that starts before its
//! store (a pod scheduled before the database, a whole cluster booting)
//! tries again, with exponential backoff and jitter, while the store is not
//! reachable, and stops at once when the store refuses.
//!
//! [`OpenStore`] is what [`LeaseManager::start`](crate::LeaseManager::start)
//! and [`Leader::builder`](crate::Leader::builder) take: a strategy that is
//! already connected opens as itself; a store not yet connected (the
//! `leasehold` crate's `StoreConfig`) connects, waiting as [`StoreWait`]
//! says. [`wait_for_store`] is the loop itself, for a backend's own connect.

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

use crate::error::{Reason, StartError};
use crate::rand::SplitMix;
use crate::strategy::{BoxFuture, Strategy};

/// How long, and how patiently, to wait for a store that is not reachable
/// yet: a deadline (or none: as long as the caller lets the future run) and
/// exponential backoff with "equal jitter" between attempts (half of each
/// delay fixed, half random, so processes that start together spread out).
///
/// ```
/// use std::time::Duration;
/// use leasehold_core::opening::StoreWait;
/// let wait = StoreWait::within(Duration::from_secs(120))
///     .backoff(Duration::from_millis(200), Duration::from_secs(10));
/// assert_eq!(wait.deadline(), Some(Duration::from_secs(120)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreWait {
    deadline: Option<Duration>,
    backoff_initial: Duration,
    backoff_max: Duration,
}

impl StoreWait {
    /// The first delay between attempts, by default.
    pub const DEFAULT_BACKOFF_INITIAL: Duration = Duration::from_millis(100);
    /// The longest delay between attempts, by default.
    pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(5);

    /// Tries until the store is reached, it refuses, or `deadline` (counted
    /// from the first attempt) has passed.
    pub const fn within(deadline: Duration) -> Self {
        Self {
            deadline: Some(deadline),
            backoff_initial: Self::DEFAULT_BACKOFF_INITIAL,
            backoff_max: Self::DEFAULT_BACKOFF_MAX,
        }
    }

    /// Tries until the store is reached or refuses, with no deadline: for
    /// a caller that stops waiting by dropping the future (an elector that
    /// shuts down).
    pub const fn until_reached() -> Self {
        Self {
            deadline: None,
            backoff_initial: Self::DEFAULT_BACKOFF_INITIAL,
            backoff_max: Self::DEFAULT_BACKOFF_MAX,
        }
    }

    /// The delays between attempts: `initial`, doubling up to `max` (each
    /// with equal jitter). `max` below `initial` is read as `initial`.
    #[must_use]
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.backoff_initial = initial;
        self.backoff_max = max.max(initial);
        self
    }

    /// The deadline, counted from the first attempt; `None`: no deadline.
    pub fn deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// The delay before attempt `attempt + 1` (after `attempt` failed).
    fn delay(&self, attempt: u32, rng: &mut SplitMix) -> Duration {
        let exp = attempt.saturating_sub(1).min(30);
        let base = self
            .backoff_initial
            .saturating_mul(1u32 << exp)
            .min(self.backoff_max);
        let half = base / 2;
        let half_nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        let jitter = if half_nanos == 0 {
            0
        } else {
            rng.next_u64() % (half_nanos + 1)
        };
        half + Duration::from_nanos(jitter)
    }
}

/// Why [`wait_for_store`] gave up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaitError<E> {
    /// The store answered with a refusal no retry fixes (bad credentials,
    /// a bad URL, missing permissions, a server that can lose leases): it
    /// was not tried again.
    Refused(E),
    /// The store was not reachable before the deadline.
    NotReachable {
        /// The deadline that passed.
        waited: Duration,
        /// How many attempts were made.
        attempts: u32,
        /// What the last attempt answered (an attempt cut short by the
        /// deadline says so).
        last: String,
    },
}

/// Calls `attempt` until it succeeds, fails with an error `retryable` calls
/// final, or `wait`'s deadline passes; sleeps between attempts with
/// exponential backoff and jitter. Each attempt is bounded by the time left
/// to the deadline.
///
/// Every failed attempt is logged once (feature `tracing`, at warn, with
/// `store` as [`url::redacted`](crate::url::redacted) shows it and the
/// reason) and counted (feature `metrics`:
/// `leasehold_store_connect_attempts_total{store, outcome}`, outcome
/// `unreachable`, `refused` or `connected`).
pub async fn wait_for_store<T, E, F, Fut>(
    store: &str,
    wait: StoreWait,
    retryable: impl Fn(&E) -> bool,
    mut attempt: F,
) -> Result<T, WaitError<E>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: fmt::Display,
{
    let shown = crate::url::redacted(store);
    let began = Instant::now();
    let ends = wait.deadline.map(|d| began + d);
    let mut rng = SplitMix::from_os();
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let answer = match ends {
            Some(ends) => {
                let left = ends.saturating_duration_since(Instant::now());
                tokio::time::timeout(left, attempt()).await.ok()
            }
            None => Some(attempt().await),
        };
        let last = match answer {
            Some(Ok(v)) => {
                telemetry::connected(&shown, attempts, began.elapsed());
                return Ok(v);
            }
            Some(Err(e)) if !retryable(&e) => {
                telemetry::refused(&shown, attempts, &e);
                return Err(WaitError::Refused(e));
            }
            Some(Err(e)) => e.to_string(),
            None => format!(
                "the attempt was still waiting for an answer when the deadline of {:?} passed",
                wait.deadline.unwrap_or_default()
            ),
        };
        let delay = wait.delay(attempts, &mut rng);
        let left = ends.map(|ends| ends.saturating_duration_since(Instant::now()));
        if left == Some(Duration::ZERO) {
            telemetry::unreachable(&shown, attempts, &last, None);
            return Err(WaitError::NotReachable {
                waited: wait.deadline.unwrap_or_default(),
                attempts,
                last,
            });
        }
        let sleep = left.map_or(delay, |left| delay.min(left));
        telemetry::unreachable(&shown, attempts, &last, Some(sleep));
        tokio::time::sleep(sleep).await;
    }
}

/// A store to hold leases in, connected or to be connected: what
/// [`LeaseManager::start`](crate::LeaseManager::start) and
/// [`Leader::builder`](crate::Leader::builder) take.
///
/// Every [`Strategy`] is one, already open. A store not yet connected (the
/// `leasehold` crate's `StoreConfig`) connects in [`OpenStore::open`],
/// waiting for a store that is not reachable yet as `wait` says (unless it
/// carries a wait of its own), and gives up at once when the store refuses.
pub trait OpenStore: Send + 'static {
    /// The strategy it opens as.
    type Strategy: Strategy;

    /// Opens the store: connects, trying again while it is not reachable
    /// and `wait` allows. A refusal is [`StartError::StoreRefused`], a
    /// deadline that passed [`StartError::StoreUnreachable`].
    ///
    /// (A boxed future: the lease manager's own future stays `Send` for
    /// every strategy, trait objects included.)
    fn open(self, wait: StoreWait) -> BoxFuture<'static, Result<Self::Strategy, StartError>>;
}

impl<S: Strategy> OpenStore for S {
    type Strategy = S;

    fn open(self, _wait: StoreWait) -> BoxFuture<'static, Result<S, StartError>> {
        Box::pin(std::future::ready(Ok(self)))
    }
}

impl<E: fmt::Display> WaitError<E> {
    /// As a [`StartError`], for `store` (redacted here).
    pub fn into_start_error(self, store: &str) -> StartError {
        let store = crate::url::redacted(store);
        match self {
            Self::Refused(e) => StartError::StoreRefused(Reason::new(e.to_string())),
            Self::NotReachable {
                waited,
                attempts,
                last,
            } => StartError::StoreUnreachable {
                store,
                waited,
                attempts,
                last: Reason::new(last),
            },
        }
    }
}

mod telemetry {
    //! The waiting loop's log lines and metric.
    #![allow(unused_variables)]

    use std::time::Duration;

    #[cfg(feature = "metrics")]
    fn count(store: &str, outcome: &'static str) {
        metrics::counter!(
            "leasehold_store_connect_attempts_total",
            "store" => store.to_owned(),
            "outcome" => outcome
        )
        .increment(1);
    }

    pub(super) fn connected(store: &str, attempts: u32, after: Duration) {
        #[cfg(feature = "tracing")]
        if attempts > 1 {
            tracing::info!(
                store,
                attempt = attempts,
                waited_ms = after.as_millis() as u64,
                "store reachable"
            );
        }
        #[cfg(feature = "metrics")]
        count(store, "connected");
    }

    pub(super) fn refused(store: &str, attempts: u32, reason: &dyn std::fmt::Display) {
        #[cfg(feature = "tracing")]
        tracing::warn!(
            store,
            attempt = attempts,
            reason = %reason,
            "store refused the connection; not trying again"
        );
        #[cfg(feature = "metrics")]
        count(store, "refused");
    }

    pub(super) fn unreachable(store: &str, attempts: u32, reason: &str, next: Option<Duration>) {
        #[cfg(feature = "tracing")]
        match next {
            Some(next) => tracing::warn!(
                store,
                attempt = attempts,
                reason,
                retry_in_ms = next.as_millis() as u64,
                "store not reachable yet; trying again"
            ),
            None => tracing::warn!(
                store,
                attempt = attempts,
                reason,
                "store not reachable; giving up: the deadline has passed"
            ),
        }
        #[cfg(feature = "metrics")]
        count(store, "unreachable");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_max_with_half_fixed() {
        let wait = StoreWait::within(Duration::from_secs(60))
            .backoff(Duration::from_millis(100), Duration::from_millis(800));
        let mut rng = SplitMix::new(1);
        for (attempt, base_ms) in [(1, 100), (2, 200), (3, 400), (4, 800), (9, 800)] {
            let d = wait.delay(attempt, &mut rng);
            let base = Duration::from_millis(base_ms);
            assert!(d >= base / 2 && d <= base, "attempt {attempt}: {d:?}");
        }
    }
}
