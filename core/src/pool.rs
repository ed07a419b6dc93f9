//! Pool names and pool specifications.

use std::fmt;
use std::time::Duration;

use crate::error::ConfigError;
use crate::gate::DEFAULT_MAX_CLOCK_SKEW;

/// The largest pool a [`PoolSpec`] accepts.
pub const MAX_POOL_SIZE: u32 = 1 << 20;

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

/// A validated pool name: 1 to 64 characters of `A-Z a-z 0-9 _ - .`.
///
/// Names reach SQL tables, Redis keys and etcd prefixes, so the alphabet is kept
/// small enough to be safe in all of them without quoting.
///
/// ```
/// use leasehold_core::PoolName;
/// assert!(PoolName::new("machine-ids").is_ok());
/// assert!(PoolName::new("no spaces").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolName(String);

impl PoolName {
    /// Validates `name`.
    pub fn new(name: impl Into<String>) -> Result<Self, ConfigError> {
        let name = name.into();
        let ok_len = (1..=64).contains(&name.len());
        let ok_chars = name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if ok_len && ok_chars {
            Ok(Self(name))
        } else {
            Err(ConfigError::new(
                "pool",
                format!("{name:?}"),
                "1 to 64 characters of A-Z, a-z, 0-9, '_', '-' or '.'",
            ))
        }
    }

    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PoolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for PoolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PoolName({:?})", self.0)
    }
}

/// What a strategy needs to know to acquire a slot: which pool, how big, for how
/// long, and who is asking.
///
/// Validated on construction; read it through its getters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolSpec {
    pub(crate) name: PoolName,
    pub(crate) size: u32,
    pub(crate) ttl: Duration,
    pub(crate) holder: String,
    pub(crate) max_clock_skew: Duration,
}

impl PoolSpec {
    /// A spec for `name` with `size` slots, a TTL of `ttl` and the default holder
    /// identity ([`default_holder`]).
    pub fn new(name: PoolName, size: u32, ttl: Duration) -> Result<Self, ConfigError> {
        check_size(size)?;
        check_ttl(ttl)?;
        Ok(Self {
            name,
            size,
            ttl,
            holder: default_holder(),
            max_clock_skew: DEFAULT_MAX_CLOCK_SKEW.min(ttl),
        })
    }

    /// Replaces the largest clock skew this holder allows between hosts
    /// (default [`DEFAULT_MAX_CLOCK_SKEW`], at most the TTL); the lease
    /// manager sets it from [`LeaseConfig`](crate::LeaseConfig). A store
    /// that can forget waits it out twice after a restart (DESIGN.md rule 12).
    pub fn with_max_clock_skew(mut self, skew: Duration) -> Result<Self, ConfigError> {
        if skew > self.ttl {
            return Err(ConfigError::new(
                "max_clock_skew",
                format!("{skew:?}"),
                format!("0 to the ttl ({:?})", self.ttl),
            ));
        }
        self.max_clock_skew = skew;
        Ok(self)
    }

    /// Replaces the holder identity.
    pub fn with_holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = holder.into();
        self
    }

    /// The pool.
    pub fn name(&self) -> &PoolName {
        &self.name
    }

    /// Slots are `0..size`.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The lease time asked of the store on acquire and on every renewal.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Who holds the lease, for people inspecting the store (host/pid by default).
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The largest clock skew between hosts this holder allows (the wait
    /// for a clock behind the slot's floor, DESIGN.md rule 8).
    pub fn max_clock_skew(&self) -> Duration {
        self.max_clock_skew
    }

    /// How long a store that has forgotten its leases must grant nothing so
    /// that this holder cannot overlap a successor: its TTL (its lease has
    /// passed its deadline by then) plus twice its `max_clock_skew` (its
    /// floor may be forgotten too, so a successor's clock must be past
    /// anything it stamped, on clocks up to the skew apart). DESIGN.md
    /// rule 12: a store that can forget keeps the largest of these over
    /// every holder of the pool.
    pub fn restart_span(&self) -> Duration {
        self.ttl
            .saturating_add(self.max_clock_skew.saturating_mul(2))
    }
}

pub(crate) fn check_size(size: u32) -> Result<(), ConfigError> {
    if (1..=MAX_POOL_SIZE).contains(&size) {
        Ok(())
    } else {
        Err(ConfigError::new(
            "pool_size",
            size.to_string(),
            format!("1 to {MAX_POOL_SIZE}"),
        ))
    }
}

/// `host/pid`, read from `HOSTNAME` (or `/etc/hostname`) and the process id.
pub fn default_holder() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned());
    format!("{host}/{}", std::process::id())
}
