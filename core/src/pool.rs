//! Pool names and pool specifications.

use std::fmt;
use std::time::Duration;

use crate::clock::DEFAULT_MAX_CLOCK_SKEW;
use crate::error::ConfigError;

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
    pub(crate) id_format: Option<IdFormat>,
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
            id_format: None,
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

    /// Declares the ID format this holder generates in the pool. Stores record
    /// the first declared format of a pool for the pool's life and refuse a
    /// claim that declares another one ([`AcquireError::OtherIdFormat`]):
    /// values of two layouts for one pool can be equal even on different
    /// slots. A claim that declares nothing is neither checked nor recorded.
    ///
    /// [`AcquireError::OtherIdFormat`]: crate::AcquireError::OtherIdFormat
    pub fn with_id_format(mut self, format: IdFormat) -> Self {
        self.id_format = Some(format);
        self
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

    /// The ID format this holder declared, if any.
    pub fn id_format(&self) -> Option<&IdFormat> {
        self.id_format.as_ref()
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

/// The ID format (layout and epoch) a pool's holders generate, as a store
/// records it: a canonical text that names every field, and a short code for
/// in-process comparison. Two formats are the same exactly when their texts
/// are equal. `leasehold-nonce` makes one from a layout
/// (`Layout::id_format`); a custom generator makes its own.
///
/// ```
/// use leasehold_core::IdFormat;
/// let f = IdFormat::new(7, "my-ids/v1: 41-bit ms since 2024-01-01, 10-bit slot, 12-bit counter")?;
/// assert_eq!(f.text(), "my-ids/v1: 41-bit ms since 2024-01-01, 10-bit slot, 12-bit counter");
/// # Ok::<(), leasehold_core::ConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IdFormat {
    code: u64,
    text: String,
}

impl IdFormat {
    /// The longest text a store records.
    pub const MAX_TEXT: usize = 200;

    /// A format with `code` (what a generation state reports as its form,
    /// [`GenerationState::form`](crate::GenerationState::form)) and its
    /// canonical `text`: 1 to [`Self::MAX_TEXT`] printable ASCII characters.
    pub fn new(code: u64, text: impl Into<String>) -> Result<Self, ConfigError> {
        let text = text.into();
        let ok = (1..=Self::MAX_TEXT).contains(&text.len())
            && text.bytes().all(|b| (b' '..=b'~').contains(&b));
        if ok {
            Ok(Self { code, text })
        } else {
            Err(ConfigError::new(
                "id_format",
                format!("{text:?}"),
                format!("1 to {} printable ASCII characters", Self::MAX_TEXT),
            ))
        }
    }

    /// The code generation states of this format report.
    pub fn code(&self) -> u64 {
        self.code
    }

    /// The canonical text a store records and compares.
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for IdFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
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
