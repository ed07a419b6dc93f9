//! The configuration of a leader pool: a pool of exactly one slot.

use std::fmt;
use std::time::Duration;

use crate::config::{LeaseConfig, LeaseConfigBuilder, Timing};
use crate::error::ConfigError;
use crate::pool::PoolSpec;

/// The configuration of a [`Leader`](crate::Leader) election: the pool's
/// name, the holder identity and the lease timings, and no size. A leader
/// pool has exactly one slot, so at most one elector holds it: an election
/// on a pool of several slots would elect one leader per slot.
///
/// ```
/// use leasehold_core::{LeaderConfig, LeaseConfig};
/// use std::time::Duration;
/// let config = LeaderConfig::builder("scheduler")
///     .ttl(Duration::from_secs(15))
///     .build()?;
/// assert_eq!(config.pool().size(), 1);
///
/// // A lease configuration converts only when it has one slot.
/// let ids = LeaseConfig::builder("scheduler").build()?; // 512 slots
/// let err = LeaderConfig::try_from(ids).unwrap_err();
/// assert_eq!(err.field(), "pool_size");
/// assert!(err.to_string().contains("LeaderConfig::builder"));
/// # Ok::<(), leasehold_core::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct LeaderConfig {
    lease: LeaseConfig,
}

impl LeaderConfig {
    /// Starts the configuration of the leader pool `name`.
    pub fn builder(name: impl Into<String>) -> LeaderConfigBuilder {
        LeaderConfigBuilder {
            inner: LeaseConfig::builder(name),
        }
    }

    /// The pool (one slot).
    pub fn pool(&self) -> &PoolSpec {
        &self.lease.pool
    }

    /// The timings.
    pub fn timing(&self) -> &Timing {
        &self.lease.timing
    }

    /// The lease configuration the elector's lease manager runs with.
    pub(crate) fn lease(&self) -> &LeaseConfig {
        &self.lease
    }
}

impl TryFrom<LeaseConfig> for LeaderConfig {
    type Error = ConfigError;

    /// Accepts a lease configuration of one slot; any other size is refused:
    /// every slot of a bigger pool would have a leader of its own.
    fn try_from(lease: LeaseConfig) -> Result<Self, ConfigError> {
        if lease.pool.size != 1 {
            return Err(ConfigError::new(
                "pool_size",
                lease.pool.size.to_string(),
                "1 for leader election: a pool of several slots would have one leader per slot \
                 (LeaseConfig::builder defaults to 512, for machine IDs); build the leader's \
                 configuration with LeaderConfig::builder, which has no size",
            ));
        }
        Ok(Self { lease })
    }
}

impl fmt::Debug for LeaderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderConfig")
            .field("pool", &self.lease.pool)
            .field("timing", &self.lease.timing)
            .finish()
    }
}

/// Builds a [`LeaderConfig`]; [`LeaderConfigBuilder::build`] validates every
/// field as [`LeaseConfigBuilder::build`] does.
#[must_use]
pub struct LeaderConfigBuilder {
    inner: LeaseConfigBuilder,
}

impl LeaderConfigBuilder {
    /// The holder identity stored with the lease, which followers see as the
    /// leader's name (default `host/pid`).
    pub fn holder(self, holder: impl Into<String>) -> Self {
        Self {
            inner: self.inner.holder(holder),
        }
    }
    /// Lease time asked of the store (default 30 s; 100 ms to 24 h): a leader
    /// that dies without releasing is replaced about this long after.
    pub fn ttl(self, ttl: Duration) -> Self {
        Self {
            inner: self.inner.ttl(ttl),
        }
    }
    /// Renewal period (default ttl/3; 10 ms to ttl/2, and below ttl − safety margin).
    pub fn renew_interval(self, every: Duration) -> Self {
        Self {
            inner: self.inner.renew_interval(every),
        }
    }
    /// Margin kept below the store's expiry (default ttl/10, at least 50 ms;
    /// see [`LeaseConfigBuilder::safety_margin`]).
    pub fn safety_margin(self, margin: Duration) -> Self {
        Self {
            inner: self.inner.safety_margin(margin),
        }
    }
    /// How long one attempt to win the lease waits before the elector asks
    /// again (default 30 s; 1 ms to 24 h). Followers keep campaigning.
    pub fn acquire_timeout(self, timeout: Duration) -> Self {
        Self {
            inner: self.inner.acquire_timeout(timeout),
        }
    }
    /// First retry delay (default 100 ms; 1 ms to the maximum backoff).
    pub fn backoff_initial(self, delay: Duration) -> Self {
        Self {
            inner: self.inner.backoff_initial(delay),
        }
    }
    /// Largest retry delay (default min(ttl/4, 5 s); up to the ttl): how
    /// long a follower may take to notice that the leader's lease is free.
    pub fn backoff_max(self, delay: Duration) -> Self {
        Self {
            inner: self.inner.backoff_max(delay),
        }
    }

    /// Also report every confirmed renewal of the leader's lease
    /// ([`LeaseEvent::Renewed`](crate::LeaseEvent::Renewed)) to
    /// [`Elector::events`](crate::Elector::events) and
    /// [`LeaderBuilder::on_event`](crate::LeaderBuilder::on_event). Off by
    /// default.
    pub fn report_renewals(self, on: bool) -> Self {
        Self {
            inner: self.inner.report_renewals(on),
        }
    }

    /// Validates and builds. The error names the field and its allowed range.
    pub fn build(self) -> Result<LeaderConfig, ConfigError> {
        Ok(LeaderConfig {
            lease: self.inner.pool_size(1).build()?,
        })
    }
}
