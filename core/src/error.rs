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

    /// `field` is invalid, as `text` says in full (what is wrong and what
    /// is accepted), for a mistake that is not one value outside a range,
    /// such as a store URL's unknown scheme.
    pub fn described(field: &'static str, text: impl Into<String>) -> Self {
        Self {
            field,
            value: text.into(),
            allowed: Cow::Borrowed(""),
        }
    }

    /// The configuration field that was rejected (`ttl`, `pool_size`, ...).
    pub fn field(&self) -> &'static str {
        self.field
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.allowed.is_empty() {
            return write!(f, "invalid `{}`: {}", self.field, self.value);
        }
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
/// A message says "(retryable)", never that a retry will come: the lease
/// manager retries, but the same error reaches callers that do not (a
/// strategy called directly, `ensure_table`, the last error of a
/// [`StartError::Timeout`] after the manager gave up).
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
    /// The store restarted, or failed over to a replica, recently, or lost
    /// the pool's records (SQL: a truncated or emptied table), and may have
    /// forgotten leases it had acknowledged: no slot is granted until every
    /// lease granted before has expired (the restart guard, the promotion
    /// guard, SQL's wipe guard). Retryable.
    StoreRestarted {
        /// How long until grants resume.
        resume_in: Duration,
    },
    /// The pool's holders generate another ID format than this claim
    /// declares ([`PoolSpec::with_id_format`](crate::PoolSpec::with_id_format)):
    /// values of two formats for one pool can be equal. Final.
    OtherIdFormat {
        /// The pool.
        pool: String,
        /// The format the store recorded for the pool.
        recorded: String,
        /// The format this claim declared.
        ours: String,
    },
    /// A record the store keeps for a slot or its pool holds a value no
    /// claim can trust: a floor that is unreadable or negative (an earlier
    /// holder's timestamps could be issued again), a fence at the largest
    /// value the store can hold (the next holder's could not be bigger), an
    /// unreadable restart span. Nothing was claimed and the record was left
    /// as found, so every claim refuses until an operator repairs it (`fix`
    /// says how). Final.
    DamagedRecord {
        /// The pool.
        pool: String,
        /// The slot whose record it is; `None` for a record of the whole
        /// pool.
        slot: Option<u32>,
        /// What is stored, and why it cannot be used.
        what: String,
        /// How to repair it.
        fix: String,
    },
}

impl AcquireError {
    /// True when trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Unreachable(_)
                | Self::Contention(_)
                | Self::PoolExhausted { .. }
                | Self::StoreRestarted { .. }
        )
    }
}

impl fmt::Display for AcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreachable(r) => write!(f, "lease store unreachable: {r} (retryable)"),
            Self::Contention(r) => write!(f, "contention on the pool: {r} (retryable)"),
            Self::PoolExhausted { pool, size } => write!(
                f,
                "pool {pool:?} is exhausted: all {size} slots are held; a slot frees when a holder \
                 releases or its lease expires (retryable); if this persists, raise the pool size"
            ),
            Self::StoreRestarted { resume_in } => write!(
                f,
                "the lease store restarted or failed over to a replica recently, or lost the \
                 pool's records (a wiped table), and may have lost leases it had acknowledged; \
                 no slot is granted for another {resume_in:?}, until every lease from before \
                 has expired (retryable)"
            ),
            Self::OtherIdFormat {
                pool,
                recorded,
                ours,
            } => write!(
                f,
                "pool {pool:?} generates IDs in another format: the store recorded \"{recorded}\", \
                 this process declares \"{ours}\"; values of two formats for one pool can be \
                 equal, so keep one layout and epoch for a pool for its whole life: configure \
                 this process like the others, or give the new format its own pool name"
            ),
            Self::DamagedRecord {
                pool,
                slot: Some(slot),
                what,
                fix,
            } => write!(
                f,
                "slot {slot} of pool {pool:?} is not granted: {what}; a claim never passes over \
                 a damaged record, so repair it: {fix}"
            ),
            Self::DamagedRecord {
                pool,
                slot: None,
                what,
                fix,
            } => write!(
                f,
                "pool {pool:?} grants no slot: {what}; a claim never passes over a damaged \
                 record, so repair it: {fix}"
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
        /// How long startup waited: the acquire timeout, counted again from
        /// when a restart guard the store announced opens
        /// ([`AcquireError::StoreRestarted`]).
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
    /// The store refused the connection ([`OpenStore`](crate::opening::OpenStore)):
    /// credentials, permissions, a bad URL, settings that can lose leases.
    /// Final until fixed: the reason names the store and the fix.
    StoreRefused(Reason),
    /// The store was not reachable before the deadline of the wait for it
    /// ([`StoreWait`](crate::opening::StoreWait)).
    StoreUnreachable {
        /// The store, as [`url::redacted`](crate::url::redacted) shows it.
        store: String,
        /// The deadline that passed.
        waited: Duration,
        /// How many attempts were made.
        attempts: u32,
        /// What the last attempt answered.
        last: Reason,
    },
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Acquire(e) => write!(f, "cannot acquire a lease: {e}"),
            Self::Config(e) => write!(f, "cannot start the lease manager: {e}"),
            Self::Panicked(msg) => write!(
                f,
                "the lease manager's task panicked before a lease was held: {msg}; this is a bug, please \
                 report it"
            ),
            Self::StoreRefused(reason) => write!(f, "cannot open the store: {reason}"),
            Self::StoreUnreachable {
                store,
                waited,
                attempts,
                last,
            } => write!(
                f,
                "the store {store} was not reachable within {waited:?}, the deadline of the wait \
                 for it ({attempts} attempts); the last: {last}. Check that the store runs and \
                 that this host can reach it, or wait longer"
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

/// What a store keeps of writes it has acknowledged, as read from its
/// settings when a strategy connects. A store that can forget an
/// acknowledged renewal (a crash before it reached the disk, an asynchronous
/// replica promoted) can grant a slot that a live holder still uses; the
/// restart guard covers restarts it can see, nothing covers a silent loss.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Durability {
    /// Every setting that lets the store lose an acknowledged write; empty
    /// when it keeps them all.
    pub risks: Vec<DurabilityRisk>,
}

/// One store setting that can lose an acknowledged write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DurabilityRisk {
    /// The setting, as the store names it (`synchronous_commit`, `appendfsync`).
    pub setting: String,
    /// Its value on this server.
    pub value: String,
    /// What it can lose.
    pub loses: String,
    /// How to fix it.
    pub fix: String,
}

impl Durability {
    /// True when no setting can lose an acknowledged write.
    pub fn is_durable(&self) -> bool {
        self.risks.is_empty()
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.risks.is_empty() {
            return f.write_str("durable: acknowledged writes survive a crash");
        }
        f.write_str("can forget acknowledged writes:")?;
        for r in &self.risks {
            write!(f, " {} = {} ({}; {});", r.setting, r.value, r.loses, r.fix)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that leaves the manager, after it gave up, or a strategy
    /// called directly, reaches code that does not retry: it must not say
    /// that a retry will come.
    #[test]
    fn retryable_errors_do_not_promise_a_retry() {
        let unreachable = AcquireError::Unreachable(Reason::new("connection refused"));
        let given_up = StartError::Timeout {
            waited: Duration::from_secs(5),
            last: Some(unreachable.clone()),
        };
        for text in [unreachable.to_string(), given_up.to_string()] {
            assert!(!text.contains("will retry"), "{text}");
            assert!(text.contains("(retryable)"), "{text}");
        }
        let exhausted = AcquireError::PoolExhausted {
            pool: "ids".into(),
            size: 2,
        };
        assert!(!exhausted.to_string().contains("will retry"), "{exhausted}");
    }

    /// A damaged record is the operator's to repair: no retry changes what
    /// the store holds, so it is final, and it names the pool, the slot and
    /// the fix.
    #[test]
    fn a_damaged_record_is_final_and_names_the_pool_the_slot_and_the_fix() {
        let slot = AcquireError::DamagedRecord {
            pool: "ids".into(),
            slot: Some(3),
            what: "its floor is -5".into(),
            fix: "set it to 1764000000000".into(),
        };
        assert!(!slot.is_retryable());
        let text = slot.to_string();
        for needle in [
            "slot 3",
            "\"ids\"",
            "floor is -5",
            "set it to 1764000000000",
        ] {
            assert!(text.contains(needle), "{needle} missing: {text}");
        }
        let pool = AcquireError::DamagedRecord {
            pool: "ids".into(),
            slot: None,
            what: "its span is x".into(),
            fix: "delete it".into(),
        };
        assert!(!pool.is_retryable());
        let text = pool.to_string();
        assert!(
            text.starts_with("pool \"ids\"") && text.contains("delete it"),
            "{text}"
        );
    }
}
