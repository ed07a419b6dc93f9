//! What the driver tells the world: `tracing` events (feature `tracing`) and
//! metrics through the `metrics` facade (feature `metrics`). Never the
//! token, never a credential: fields are the pool, slot, fence, floor,
//! outcome, latency and the time left to the local deadline.
//!
//! Metrics (every one labelled with `pool`):
//!
//! | name | kind | labels |
//! |---|---|---|
//! | `leasehold_acquisitions_total` | counter | `outcome`: acquired, exhausted, contention, unreachable, restarted, final |
//! | `leasehold_renewals_total` | counter | `outcome`: renewed, lost, retry |
//! | `leasehold_losses_total` | counter | `cause`: rejected, deadline, store_clock_jump |
//! | `leasehold_releases_total` | counter | `outcome`: released, not_held, retry |
//! | `leasehold_refused_generations_total` | counter | |
//! | `leasehold_acquire_latency_seconds` | histogram | |
//! | `leasehold_renewal_latency_seconds` | histogram | |
//! | `leasehold_deadline_seconds` | gauge | time left to the local deadline (0 when not held) |
//! | `leasehold_campaigns_stopped_total` | counter | a leader election stopped by a final error |
//! | `leasehold_restart_guard_seconds` | gauge | time until the store's restart guard opens, as the store last announced it (0 once a slot is granted) |
//!
//! Waiting for a store that is not up yet (`opening::wait_for_store`) counts
//! `leasehold_store_connect_attempts_total`, labelled `store` (the URL,
//! redacted) and `outcome` (unreachable, refused, connected), not `pool`.

// Each sink uses some of the arguments; with one or none enabled, the rest go
// unused.
#![allow(unused_variables)]
#![cfg_attr(not(any(feature = "tracing", feature = "metrics")), allow(dead_code))]

use std::time::Duration;

use crate::error::AcquireError;
use crate::loss::{LossCause, LossEvent};
use crate::strategy::{Fence, Floor, Release, Renewal};

/// The driver's telemetry for one pool.
#[derive(Clone, Debug)]
pub(crate) struct Telemetry {
    #[cfg_attr(not(any(feature = "tracing", feature = "metrics")), allow(dead_code))]
    pool: String,
}

fn acquire_outcome(e: &AcquireError) -> &'static str {
    match e {
        AcquireError::PoolExhausted { .. } => "exhausted",
        AcquireError::Contention(_) => "contention",
        AcquireError::Unreachable(_) => "unreachable",
        AcquireError::StoreRestarted { .. } => "restarted",
        _ => "final",
    }
}

fn renew_outcome(r: &Renewal) -> &'static str {
    match r {
        Renewal::Renewed { .. } => "renewed",
        Renewal::Lost(_) => "lost",
        Renewal::Retry(_) => "retry",
    }
}

fn release_outcome(r: &Release) -> &'static str {
    match r {
        Release::Released => "released",
        Release::NotHeld => "not_held",
        Release::Retry(_) => "retry",
    }
}

fn loss_cause(c: &LossCause) -> &'static str {
    match c {
        LossCause::Rejected(_) => "rejected",
        LossCause::DeadlinePassed { .. } => "deadline",
        LossCause::StoreClockJumped { .. } => "store_clock_jump",
    }
}

#[cfg(feature = "metrics")]
macro_rules! count {
    ($self:ident, $name:literal $(, $k:literal => $v:expr)*) => {
        metrics::counter!($name, "pool" => $self.pool.clone() $(, $k => $v)*).increment(1)
    };
}

impl Telemetry {
    pub(crate) fn new(pool: &crate::PoolSpec) -> Self {
        Self {
            pool: pool.name().to_string(),
        }
    }

    /// A `tracing` span for the driver of this pool.
    #[cfg(feature = "tracing")]
    pub(crate) fn span(&self) -> tracing::Span {
        tracing::info_span!("leasehold.lease", pool = %self.pool)
    }

    pub(crate) fn acquired(
        &self,
        slot: u32,
        fence: Fence,
        floor: Floor,
        latency: Duration,
        left: Duration,
    ) {
        #[cfg(feature = "tracing")]
        tracing::info!(
            pool = %self.pool,
            slot,
            fence = fence.0,
            floor = floor.0,
            outcome = "acquired",
            latency_ms = latency.as_secs_f64() * 1e3,
            deadline_in_ms = left.as_millis() as u64,
            "lease acquired"
        );
        #[cfg(feature = "metrics")]
        {
            count!(self, "leasehold_acquisitions_total", "outcome" => "acquired");
            metrics::gauge!("leasehold_restart_guard_seconds", "pool" => self.pool.clone())
                .set(0.0);
            metrics::histogram!("leasehold_acquire_latency_seconds", "pool" => self.pool.clone())
                .record(latency.as_secs_f64());
        }
        self.deadline(left);
    }

    pub(crate) fn acquire_failed(&self, error: &AcquireError, latency: Duration) {
        #[cfg(feature = "tracing")]
        tracing::info!(
            pool = %self.pool,
            outcome = acquire_outcome(error),
            latency_ms = latency.as_secs_f64() * 1e3,
            retryable = error.is_retryable(),
            error = %error,
            "lease acquisition failed"
        );
        #[cfg(feature = "metrics")]
        count!(self, "leasehold_acquisitions_total", "outcome" => acquire_outcome(error));
    }

    pub(crate) fn renewal(&self, slot: u32, answer: &Renewal, latency: Duration, left: Duration) {
        #[cfg(feature = "tracing")]
        match answer {
            Renewal::Renewed { .. } => tracing::debug!(
                pool = %self.pool,
                slot,
                outcome = "renewed",
                latency_ms = latency.as_secs_f64() * 1e3,
                deadline_in_ms = left.as_millis() as u64,
                "lease renewed"
            ),
            Renewal::Retry(reason) | Renewal::Lost(reason) => tracing::warn!(
                pool = %self.pool,
                slot,
                outcome = renew_outcome(answer),
                latency_ms = latency.as_secs_f64() * 1e3,
                deadline_in_ms = left.as_millis() as u64,
                reason = %reason,
                "lease renewal not confirmed"
            ),
        }
        #[cfg(feature = "metrics")]
        {
            count!(self, "leasehold_renewals_total", "outcome" => renew_outcome(answer));
            metrics::histogram!("leasehold_renewal_latency_seconds", "pool" => self.pool.clone())
                .record(latency.as_secs_f64());
        }
        self.deadline(left);
    }

    pub(crate) fn lost(&self, event: &LossEvent) {
        #[cfg(feature = "tracing")]
        tracing::warn!(
            pool = %self.pool,
            slot = event.slot,
            fence = event.fence.0,
            outcome = "lost",
            cause = loss_cause(&event.cause),
            detail = ?event.cause,
            reacquiring = event.reacquiring,
            "lease lost; generation stopped"
        );
        #[cfg(feature = "metrics")]
        count!(self, "leasehold_losses_total", "cause" => loss_cause(&event.cause));
        self.deadline(Duration::ZERO);
    }

    /// A callback of `kind` (`"lost"`, `"acquired"`...) panicked.
    pub(crate) fn callback_panicked(&self, kind: &str, message: &str) {
        #[cfg(feature = "tracing")]
        tracing::error!(
            pool = %self.pool,
            event = kind,
            panic = message,
            "a lease event callback (the {kind} event) panicked; the driver goes on"
        );
    }

    pub(crate) fn released(&self, slot: u32, outcome: &Release, issued: Floor, latency: Duration) {
        #[cfg(feature = "tracing")]
        tracing::info!(
            pool = %self.pool,
            slot,
            outcome = release_outcome(outcome),
            floor = issued.0,
            latency_ms = latency.as_secs_f64() * 1e3,
            "lease released"
        );
        #[cfg(feature = "metrics")]
        count!(self, "leasehold_releases_total", "outcome" => release_outcome(outcome));
        self.deadline(Duration::ZERO);
    }

    /// A leader election stopped for good on a final error.
    pub(crate) fn campaign_stopped(&self, error: &crate::StartError) {
        #[cfg(feature = "tracing")]
        tracing::error!(
            pool = %self.pool,
            error = %error,
            "leader election stopped: this elector can never lead"
        );
        #[cfg(feature = "metrics")]
        count!(self, "leasehold_campaigns_stopped_total");
    }

    /// The gate's count of refused generations so far.
    pub(crate) fn refused(&self, total: u64) {
        #[cfg(feature = "metrics")]
        metrics::counter!("leasehold_refused_generations_total", "pool" => self.pool.clone())
            .absolute(total);
    }

    /// The store holds grants back for `opens_in` (its restart or promotion
    /// guard): said once per announcement, with when it opens, because the
    /// acquire timeout counts only from then.
    pub(crate) fn guard_waiting(&self, opens_in: Duration) {
        #[cfg(feature = "tracing")]
        {
            let opens_at_unix_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| (d + opens_in).as_millis() as u64);
            tracing::warn!(
                pool = %self.pool,
                opens_in_ms = opens_in.as_millis() as u64,
                opens_at_unix_ms,
                "the store's restart guard grants no slot for another {opens_in:?}: waiting until \
                 it opens (the acquire timeout counts from then)"
            );
        }
        #[cfg(feature = "metrics")]
        metrics::gauge!("leasehold_restart_guard_seconds", "pool" => self.pool.clone())
            .set(opens_in.as_secs_f64());
    }

    fn deadline(&self, left: Duration) {
        #[cfg(feature = "metrics")]
        metrics::gauge!("leasehold_deadline_seconds", "pool" => self.pool.clone())
            .set(left.as_secs_f64());
    }
}
