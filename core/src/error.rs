//! Errors: configuration, acquisition and the reasons carried by outcomes.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

/// A configuration value outside its allowed range. The message names the
/// field, the value given and the range allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    field: &'static str,
    value: String,
    allowed: Cow<'static, str>,
}

impl ConfigError {
    /// `field` was given `value`; `allowed` describes what is accepted.
    pub fn new(
        field: &'static str,
        value: impl Into<String>,
        allowed: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self {
            field,
            value: value.into(),
            allowed: allowed.into(),
        }
    }

    /// The configuration field that was rejected (`ttl`, `pool_size`, ...).
    pub fn field(&self) -> &'static str {
        self.field
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid `{}`: {} is not allowed; use {}",
            self.field, self.value, self.allowed
        )
    }
}

impl std::error::Error for ConfigError {}

/// Why a renewal was lost or must be retried: a short human-readable text.
///
/// The *kind* of outcome is the [`Renewal`](crate::Renewal) variant; the reason
/// only explains it to a person.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reason(Cow<'static, str>);

impl Reason {
    /// A reason from text.
    pub fn new(text: impl Into<Cow<'static, str>>) -> Self {
        Self(text.into())
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&'static str> for Reason {
    fn from(s: &'static str) -> Self {
        Self(Cow::Borrowed(s))
    }
}

impl From<String> for Reason {
    fn from(s: String) -> Self {
        Self(Cow::Owned(s))
    }
}

/// Why an acquisition failed.
///
/// [`AcquireError::is_retryable`] splits the variants: the store being
/// unreachable, contention and an exhausted pool may succeed later; the rest are
/// misconfigurations that no retry fixes, and their messages say what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AcquireError {
    /// The store did not answer, or the answer was lost. Retryable.
    Unreachable(Reason),
    /// Other acquirers won every slot tried this time. Retryable.
    Contention(Reason),
    /// Every slot of the pool is held. Retryable: a slot frees when a holder
    /// releases or its lease expires.
    PoolExhausted {
        /// The pool.
        pool: String,
        /// Its size.
        size: u32,
    },
    /// A name (table, key prefix, pool) is not a valid identifier. Final.
    BadIdentifier {
        /// What was rejected.
        what: String,
        /// How to fix it.
        fix: String,
    },
    /// The store lacks the schema the strategy needs. Final.
    MissingSchema {
        /// What is missing.
        what: String,
        /// The call or migration that creates it.
        fix: String,
    },
    /// The server is too old or lacks a feature the strategy was told to use. Final.
    UnsupportedServer {
        /// What the server is and lacks.
        what: String,
        /// How to fix it.
        fix: String,
    },
    /// A setting the store rejects (for example a TTL below its minimum). Final.
    Misconfigured {
        /// What is wrong.
        what: String,
        /// How to fix it.
        fix: String,
    },
}

impl AcquireError {
    /// True when trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Unreachable(_) | Self::Contention(_) | Self::PoolExhausted { .. }
        )
    }
}

impl fmt::Display for AcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreachable(r) => write!(f, "lease store unreachable: {r} (will retry)"),
            Self::Contention(r) => write!(f, "contention on the pool: {r} (will retry)"),
            Self::PoolExhausted { pool, size } => write!(
                f,
                "pool {pool:?} is exhausted: all {size} slots are held; a slot frees when a holder \
                 releases or its lease expires (will retry); if this persists, raise the pool size"
            ),
            Self::BadIdentifier { what, fix }
            | Self::MissingSchema { what, fix }
            | Self::UnsupportedServer { what, fix }
            | Self::Misconfigured { what, fix } => write!(f, "{what}; {fix}"),
        }
    }
}

impl std::error::Error for AcquireError {}

/// Why [`LeaseManager::start`](crate::LeaseManager) gave up.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StartError {
    /// A final acquisition error: fix the configuration.
    Acquire(AcquireError),
    /// No lease within the acquire timeout; `last` is the last retryable error.
    Timeout {
        /// The configured acquire timeout.
        waited: Duration,
        /// The last error seen.
        last: Option<AcquireError>,
    },
    /// The configuration does not fit the store (a pool larger than it
    /// supports, a safety margin below the minimum for its time resolution).
    Config(ConfigError),
    /// The driver panicked before a lease was held (a bug in a strategy or in
    /// leasehold): the message is the panic's.
    Panicked(String),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Acquire(e) => write!(f, "cannot acquire a lease: {e}"),
            Self::Config(e) => write!(f, "cannot start the lease manager: {e}"),
            Self::Panicked(msg) => write!(
                f,
                "the lease driver panicked before a lease was held: {msg}; this is a bug, please \
                 report it"
            ),
            Self::Timeout { waited, last } => {
                write!(f, "no lease acquired within {waited:?} (acquire_timeout)")?;
                if let Some(e) = last {
                    write!(f, "; last error: {e}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for StartError {}
