//! Validated lease configuration.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::ConfigError;
use crate::pool::{PoolName, PoolSpec, check_size, default_holder};

/// The shortest TTL accepted.
pub const MIN_TTL: Duration = Duration::from_millis(100);
/// The longest TTL accepted.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

pub(crate) fn check_ttl(ttl: Duration) -> Result<(), ConfigError> {
    if (MIN_TTL..=MAX_TTL).contains(&ttl) {
        Ok(())
    } else {
        Err(ConfigError::new("ttl", format!("{ttl:?}"), "100ms to 24h"))
    }
}

/// Called after generation has stopped, when a lease is lost.
pub type OnLost = Arc<dyn Fn(&crate::machine::LossEvent) + Send + Sync>;

/// The lease timings, validated. Build one with [`LeaseConfig::builder`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timing {
    /// The lease time asked of the store.
    pub ttl: Duration,
    /// Renew this long after the last renewal was sent.
    pub renew_interval: Duration,
    /// Stop generating this long before the store-side expiry could be reached.
    pub safety_margin: Duration,
    /// How long `start` waits for the first lease.
    pub acquire_timeout: Duration,
    /// The first retry delay; doubles per attempt.
    pub backoff_initial: Duration,
    /// The largest retry delay.
    pub backoff_max: Duration,
}

/// A validated configuration: pool, size, holder, timings, loss callback.
///
/// ```
/// use leasehold_core::LeaseConfig;
/// use std::time::Duration;
/// let config = LeaseConfig::builder("machine-ids")
///     .pool_size(512)
///     .ttl(Duration::from_secs(30))
///     .build()
///     .unwrap();
/// assert_eq!(config.timing().renew_interval, Duration::from_secs(10));
///
/// let err = LeaseConfig::builder("ids").pool_size(0).build().unwrap_err();
/// assert_eq!(err.field(), "pool_size");
/// assert!(err.to_string().contains("1 to"));
/// ```
#[derive(Clone)]
pub struct LeaseConfig {
    pub(crate) pool: PoolSpec,
    pub(crate) timing: Timing,
    pub(crate) on_lost: Option<OnLost>,
}

impl LeaseConfig {
    /// Starts a configuration for the pool `name`.
    pub fn builder(name: impl Into<String>) -> LeaseConfigBuilder {
        LeaseConfigBuilder {
            name: name.into(),
            size: 512,
            holder: None,
            ttl: Duration::from_secs(30),
            renew_interval: None,
            safety_margin: None,
            acquire_timeout: Duration::from_secs(30),
            backoff_initial: Duration::from_millis(100),
            backoff_max: None,
            on_lost: None,
        }
    }

    /// The pool.
    pub fn pool(&self) -> &PoolSpec {
        &self.pool
    }

    /// The timings.
    pub fn timing(&self) -> &Timing {
        &self.timing
    }
}

impl fmt::Debug for LeaseConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseConfig")
            .field("pool", &self.pool)
            .field("timing", &self.timing)
            .field("on_lost", &self.on_lost.is_some())
            .finish()
    }
}

/// Builds a [`LeaseConfig`]; [`LeaseConfigBuilder::build`] validates every field.
#[must_use]
pub struct LeaseConfigBuilder {
    name: String,
    size: u32,
    holder: Option<String>,
    ttl: Duration,
    renew_interval: Option<Duration>,
    safety_margin: Option<Duration>,
    acquire_timeout: Duration,
    backoff_initial: Duration,
    backoff_max: Option<Duration>,
    on_lost: Option<OnLost>,
}

impl LeaseConfigBuilder {
    /// Slots are `0..size` (default 512, the default nonce layout's 9 bits).
    pub fn pool_size(mut self, size: u32) -> Self {
        self.size = size;
        self
    }
    /// The holder identity stored with the lease (default `host/pid`).
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = Some(holder.into());
        self
    }
    /// Lease time asked of the store (default 30 s; 100 ms to 24 h).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }
    /// Renewal period (default ttl/3; 10 ms to ttl/2, and below ttl − safety margin).
    pub fn renew_interval(mut self, every: Duration) -> Self {
        self.renew_interval = Some(every);
        self
    }
    /// Margin kept below the store's expiry (default ttl/10, at least 50 ms;
    /// 1 ms to ttl/2).
    pub fn safety_margin(mut self, margin: Duration) -> Self {
        self.safety_margin = Some(margin);
        self
    }
    /// How long `start` waits for the first lease (default 30 s; 1 ms to 24 h).
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }
    /// First retry delay (default 100 ms; 1 ms to the maximum backoff).
    pub fn backoff_initial(mut self, delay: Duration) -> Self {
        self.backoff_initial = delay;
        self
    }
    /// Largest retry delay (default min(ttl/4, 5 s); up to the ttl).
    pub fn backoff_max(mut self, delay: Duration) -> Self {
        self.backoff_max = Some(delay);
        self
    }
    /// Called when a lease is lost, after generation has stopped.
    pub fn on_lost(
        mut self,
        f: impl Fn(&crate::machine::LossEvent) + Send + Sync + 'static,
    ) -> Self {
        self.on_lost = Some(Arc::new(f));
        self
    }

    /// Validates and builds. The error names the field and its allowed range.
    pub fn build(self) -> Result<LeaseConfig, ConfigError> {
        let name = PoolName::new(self.name)?;
        check_size(self.size)?;
        check_ttl(self.ttl)?;
        let ttl = self.ttl;
        let margin = self
            .safety_margin
            .unwrap_or_else(|| (ttl / 10).max(Duration::from_millis(50)).min(ttl / 2));
        if margin < Duration::from_millis(1) || margin > ttl / 2 {
            return Err(ConfigError::new(
                "safety_margin",
                format!("{margin:?}"),
                format!("1ms to ttl/2 ({:?})", ttl / 2),
            ));
        }
        let renew = self.renew_interval.unwrap_or(ttl / 3);
        if renew < Duration::from_millis(10) || renew > ttl / 2 || renew >= ttl - margin {
            return Err(ConfigError::new(
                "renew_interval",
                format!("{renew:?}"),
                format!(
                    "10ms to ttl/2 ({:?}) and below ttl - safety_margin ({:?})",
                    ttl / 2,
                    ttl - margin
                ),
            ));
        }
        if !(Duration::from_millis(1)..=MAX_TTL).contains(&self.acquire_timeout) {
            return Err(ConfigError::new(
                "acquire_timeout",
                format!("{:?}", self.acquire_timeout),
                "1ms to 24h",
            ));
        }
        let backoff_max = self.backoff_max.unwrap_or_else(|| {
            (ttl / 4)
                .min(Duration::from_secs(5))
                .max(self.backoff_initial)
        });
        if backoff_max > ttl.max(self.backoff_initial) {
            return Err(ConfigError::new(
                "backoff_max",
                format!("{backoff_max:?}"),
                format!("backoff_initial to ttl ({ttl:?})"),
            ));
        }
        if self.backoff_initial < Duration::from_millis(1) || self.backoff_initial > backoff_max {
            return Err(ConfigError::new(
                "backoff_initial",
                format!("{:?}", self.backoff_initial),
                format!("1ms to backoff_max ({backoff_max:?})"),
            ));
        }
        Ok(LeaseConfig {
            pool: PoolSpec {
                name,
                size: self.size,
                ttl,
                holder: self.holder.unwrap_or_else(default_holder),
            },
            timing: Timing {
                ttl,
                renew_interval: renew,
                safety_margin: margin,
                acquire_timeout: self.acquire_timeout,
                backoff_initial: self.backoff_initial,
                backoff_max,
            },
            on_lost: self.on_lost,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(b: LeaseConfigBuilder) -> &'static str {
        b.build().unwrap_err().field()
    }

    #[test]
    fn every_bad_value_names_its_field() {
        let b = || LeaseConfig::builder("p");
        assert_eq!(field_of(LeaseConfig::builder("bad name")), "pool");
        assert_eq!(field_of(b().pool_size(0)), "pool_size");
        assert_eq!(field_of(b().pool_size(u32::MAX)), "pool_size");
        assert_eq!(field_of(b().ttl(Duration::from_millis(5))), "ttl");
        assert_eq!(field_of(b().safety_margin(Duration::ZERO)), "safety_margin");
        assert_eq!(
            field_of(b().safety_margin(Duration::from_secs(20))),
            "safety_margin"
        );
        assert_eq!(
            field_of(b().renew_interval(Duration::from_secs(20))),
            "renew_interval"
        );
        assert_eq!(
            field_of(b().acquire_timeout(Duration::ZERO)),
            "acquire_timeout"
        );
        assert_eq!(
            field_of(b().backoff_max(Duration::from_secs(60))),
            "backoff_max"
        );
        assert_eq!(
            field_of(b().backoff_initial(Duration::ZERO)),
            "backoff_initial"
        );
        let msg = b()
            .ttl(Duration::from_millis(5))
            .build()
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("`ttl`") && msg.contains("100ms to 24h"),
            "{msg}"
        );
    }

    #[test]
    fn defaults_are_consistent() {
        let c = LeaseConfig::builder("p").build().unwrap();
        let t = c.timing();
        assert!(t.renew_interval < t.ttl - t.safety_margin);
        assert!(t.backoff_initial <= t.backoff_max);
        assert_eq!(c.pool().size, 512);
    }
}
