//! The one error of every public call of the crate: connecting, the
//! schema and operator calls, and fenced writes.

use std::time::Duration;

use leasehold_core::{AcquireError, ConfigError, Fence, FenceStamp, Reason};

/// Why a call of this crate failed: [`SqlStrategy::connect`](crate::SqlStrategy::connect),
/// [`SqlStrategy::ping`](crate::SqlStrategy::ping), the schema calls
/// ([`SqlStrategy::ensure_table`](crate::SqlStrategy::ensure_table),
/// [`SqlStrategy::check_schema`](crate::SqlStrategy::check_schema),
/// [`SqlStrategy::ensure_pool`](crate::SqlStrategy::ensure_pool)),
/// [`SqlStrategy::revoke`](crate::SqlStrategy::revoke), or the fence table
/// ([`FenceTable`](crate::FenceTable): a refused fenced write is
/// [`SqlError::Stale`] or [`SqlError::OtherWriter`]).
/// [`SqlError::is_retryable`] tells the cases a retry may fix. Acquisition
/// itself answers `leasehold_core::AcquireError`, the contract of every
/// strategy.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqlError {
    /// A setting is invalid (URL, table name, an engine this build leaves
    /// out). Final.
    #[error("invalid SQL lease configuration: {0}")]
    Config(#[from] ConfigError),
    /// The database did not answer, or the connection broke. Retryable:
    /// nothing retries a failed `connect`, `ping`, schema or operator call
    /// by itself, so the message says what to check before trying again.
    #[error(
        "cannot reach the database: {0}; check that it runs and that the URL's host and port \
         are right, then try again"
    )]
    Unreachable(Reason),
    /// The database answered the connection, a ping or a schema call with
    /// an error no retry fixes (credentials, database name, privileges).
    /// Final.
    #[error("{what}; {fix}")]
    Refused {
        /// What the database answered.
        what: String,
        /// How to fix it.
        fix: String,
    },
    /// TLS with the database failed, or is not what the URL asks for: the
    /// server's certificate is not signed by a trusted CA, has expired, or
    /// is for another host; the server refused this client's certificate,
    /// or wants one the URL does not give; the server takes no TLS, and a
    /// URL that asks for verified TLS never falls back to plain text. Final:
    /// `fix` says what to change (see the crate README, "TLS").
    #[error("{what}; {fix}")]
    Tls {
        /// What failed, naming the URL (without credentials) and the cause.
        what: String,
        /// How to fix it.
        fix: String,
    },
    /// The server is too old for the statements. Final.
    #[error("{what}; {fix}")]
    UnsupportedServer {
        /// What the server is and lacks.
        what: String,
        /// How to fix it.
        fix: String,
    },
    /// The server can forget writes it acknowledged, and the deprecated
    /// [`SqlConfig::require_durable`](crate::SqlConfig::require_durable)`(true)`
    /// is set (the durable policy refuses such a server as
    /// [`SqlError::Forgetful`]). Final: the message names each setting and its fix.
    /// The message is a short first line, then each setting found and its
    /// fix, one per line.
    #[error("{}", forgetful_text(.0, true))]
    NotDurable(leasehold_core::Durability),
    /// The server can forget writes it acknowledged, and nothing in the
    /// configuration accepts that. Such a server can lose, in one crash, a
    /// claim and the record of the longest TTL and clock skew its pool's
    /// holders use, so the restart guard could not know how long to wait
    /// for a holder that still generates. Final: the message names each
    /// setting, its fix, and the two opt-ins
    /// ([`SqlConfig::durability`](crate::SqlConfig::durability) with
    /// `OneTimingPerPool` or `Throwaway`).
    /// The message is a short first line, then each setting found and its
    /// fix, and the opt-ins, one per line.
    #[error("{}", forgetful_text(.0, false))]
    Forgetful(leasehold_core::Durability),
    /// The server is a replica: a PostgreSQL standby (in recovery), a
    /// MySQL/MariaDB server that is read-only (`read_only`,
    /// `super_read_only`) or replicates from another. Leases written there
    /// are not the primary's (a MySQL/MariaDB user with SUPER or
    /// `READ_ONLY ADMIN` can still write to a read-only replica, and its
    /// claims would then go unseen by every client of the primary),
    /// whatever the user's privileges. Final: `fix` says where to point
    /// the URL. The message is a first line, then the fix.
    #[error("{what}\n  - fix: {fix}")]
    Replica {
        /// What the server is, as read at connect.
        what: String,
        /// Where to point the URL instead.
        fix: String,
    },
    /// The server is a primary whose replicas can split brain (an old
    /// primary, after a failover, goes on confirming claims and renewals to
    /// the clients a partition left with it), and
    /// [`SqlConfig::refuse_split_brain`](crate::SqlConfig::refuse_split_brain)
    /// is set. Final: the message names the setting that closes it. The
    /// message is a first line, then what was found and the fix.
    #[error("{}", split_brain_text(.0))]
    SplitBrain(leasehold_core::Replication),
    /// The database refused the credentials (PostgreSQL `28P01` or `28000`,
    /// MySQL/MariaDB `1045`): a wrong user or password, or a user the server
    /// does not let in from this host. Final until the URL, its
    /// `password_file`, the credentials callback or the server's users
    /// change.
    #[error("{what}; {fix}")]
    Authentication {
        /// What the database answered, naming the URL (without credentials).
        what: String,
        /// What to check.
        fix: String,
    },
    /// The database answered an operator call or a fenced write with an
    /// error.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The database did not answer an operator call within the operation
    /// timeout. Retryable.
    #[error("no answer from the database within {0:?} (op_timeout)")]
    Timeout(Duration),
    /// Other sessions held what a schema call needed (a lock conflict, a
    /// deadlock, a busy SQLite file). Retryable.
    #[error("the database was busy: {0}; try again")]
    Contention(Reason),
    /// The lease table is missing, is not a lease table, or lacks columns
    /// of this version ([`SqlStrategy::check_schema`](crate::SqlStrategy::check_schema),
    /// and the schema calls when they cannot fix it). Final until created
    /// or migrated: `fix` names the call or migration. Acquisition answers
    /// the same as `AcquireError::MissingSchema`.
    #[error("{what}; {fix}")]
    MissingSchema {
        /// What is missing.
        what: String,
        /// The call or migration that creates it.
        fix: String,
    },
    /// A holder with a bigger fence has written to `resource`: this holder's
    /// lease is stale. Roll the transaction back and stop acting as holder.
    #[error(
        "fenced write to {resource:?} refused: it carries fence {fence}, but fence {seen} has \
         already written there (this holder's lease was taken over)"
    )]
    Stale {
        /// The resource written to.
        resource: String,
        /// The fence this write carried.
        fence: Fence,
        /// The biggest fence seen so far.
        seen: Fence,
    },
    /// `resource` was last written from another pool or slot than this
    /// write's: fences of different slots are not comparable, so the write is
    /// refused whatever its fence. Roll back. If this pool and slot are meant
    /// to write `resource` from now on, take it over once with
    /// [`FenceTable::take_over`](crate::FenceTable::take_over).
    #[error(
        "fenced write to {resource:?} refused: it carries {stamp}, but the resource was last \
         written with fence {seen} of {pool}/{slot}, another pool or slot whose fences are not \
         comparable with this one's; roll back. If {resource:?} is meant to move to this pool \
         and slot, take it over once with FenceTable::take_over, naming {pool}/{slot}"
    )]
    OtherWriter {
        /// The resource written to.
        resource: String,
        /// What this write carried.
        stamp: FenceStamp,
        /// The pool of the resource's last writer.
        pool: String,
        /// The slot of the resource's last writer.
        slot: u32,
        /// The fence of the resource's last writer.
        seen: Fence,
    },
    /// The password file or the credentials callback
    /// ([`SqlConfig::password_file`](crate::SqlConfig::password_file),
    /// [`SqlConfig::credentials`](crate::SqlConfig::credentials)) did not
    /// answer when a connection needed it. Retryable: the next attempt
    /// asks again.
    #[error("cannot connect to {store}: {error}")]
    Credentials {
        /// The database, as [`leasehold_core::url::redacted`] shows its URL.
        store: String,
        /// What failed, and the fix.
        error: leasehold_core::credentials::CredentialsError,
    },
    /// The fence table lacks the columns fenced writes need (it was created
    /// by an older version). Final until migrated: `fix` says how.
    #[error("{what}; {fix}")]
    FenceSchema {
        /// What is missing.
        what: String,
        /// The call or migration that adds it.
        fix: String,
    },
}

/// The `Forgetful` and `NotDurable` messages: a first line, then each
/// setting found and its fix, then the opt-ins (or why none applies).
fn forgetful_text(d: &leasehold_core::Durability, required: bool) -> String {
    let mut text =
        "the database can lose leases it acknowledged, so leases on it are refused".to_owned();
    for r in &d.risks {
        text.push_str(&format!(
            "\n  - found: {} = {} ({})\n  - fix: {}",
            r.setting, r.value, r.loses, r.fix
        ));
    }
    if required {
        text.push_str(
            "\n  - require_durable(true) is set (the URL option require_durable=true), so \
             neither durability=one-timing-per-pool nor durability=throwaway accepts it",
        );
    } else {
        text.push_str(
            "\n  - or accept the risk, if every process of each pool uses the same TTL and \
             max_clock_skew: the URL option durability=one-timing-per-pool, or \
             durability(DurabilityPolicy::OneTimingPerPool) (the restart guard then waits them \
             out after a restart)\n  \
             - or, for a throwaway database never restarted while leases are held: the URL \
             option durability=throwaway, or durability(DurabilityPolicy::Throwaway) (no \
             guard: a restart can hand every held slot to a second holder at once)",
        );
    }
    text
}

/// The `SplitBrain` message: a first line, then what was found and the fix.
fn split_brain_text(r: &leasehold_core::Replication) -> String {
    let mut text = "the database can split brain, and refuse_split_brain(true) (the URL option \
                    refuse_split_brain=true) refuses it"
        .to_owned();
    text.push_str(&format!("\n  - found: {}", r.found));
    if let Some(risk) = &r.split_brain {
        text.push_str(&format!(
            "\n  - found: {} = {}\n  - fix: {}",
            risk.setting, risk.value, risk.fix
        ));
    }
    text
}

/// The error type fenced writes answered before they answered [`SqlError`].
#[deprecated(
    note = "fenced writes answer `SqlError`; `FenceError::Schema` is `SqlError::FenceSchema`"
)]
pub type FenceError = SqlError;

impl SqlError {
    /// True when trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Unreachable(_)
                | Self::Timeout(_)
                | Self::Contention(_)
                | Self::Credentials { .. }
        )
    }
}

/// What to check when the database refuses a lease operation for a
/// reason no retry fixes.
pub(crate) const CHECK_ACCESS: &str =
    "check the database URL, the user's privileges on the lease table and the server version";

/// What acquisition answers for an error of the schema calls it shares
/// with [`SqlStrategy::ensure_pool`](crate::SqlStrategy::ensure_pool)
/// (filling in a pool's rows, reading what is wrong with the lease table):
/// the same words, in the strategy contract's terms.
impl From<SqlError> for AcquireError {
    fn from(e: SqlError) -> Self {
        match e {
            SqlError::MissingSchema { what, fix } => Self::MissingSchema { what, fix },
            SqlError::Unreachable(r) => Self::Unreachable(r),
            SqlError::Contention(r) => Self::Contention(r),
            SqlError::Timeout(_) | SqlError::Credentials { .. } => {
                Self::Unreachable(Reason::new(e.to_string()))
            }
            SqlError::UnsupportedServer { what, fix } => Self::UnsupportedServer { what, fix },
            SqlError::Refused { what, fix }
            | SqlError::Authentication { what, fix }
            | SqlError::Tls { what, fix }
            | SqlError::FenceSchema { what, fix } => Self::Misconfigured { what, fix },
            other => Self::Misconfigured {
                what: other.to_string(),
                fix: CHECK_ACCESS.to_owned(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::{SqlConfig, SqlError, SqlStrategy};

    /// A failed `connect` has returned: nothing retries it, so its message
    /// must not promise a retry, and says what to check instead. Port 1 on
    /// the loopback refuses: no server listens on it.
    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn a_refused_connection_does_not_promise_a_retry() {
        let config =
            SqlConfig::new("postgres://u@127.0.0.1:1/db").op_timeout(Duration::from_secs(5));
        let e = match SqlStrategy::connect(config).await {
            Ok(_) => panic!("connected to port 1"),
            Err(e) => e,
        };
        assert!(matches!(e, SqlError::Unreachable(_)), "{e:?}");
        assert!(e.is_retryable());
        let text = e.to_string();
        assert!(!text.contains("will retry"), "{text}");
        assert!(text.contains("try again"), "{text}");
    }

    /// Acquisition answers an error of the schema calls it shares with
    /// `ensure_pool` in the contract's terms, with the same words, and
    /// keeps whether a retry may fix it.
    #[test]
    fn acquisition_answers_a_schema_error_in_the_same_words() {
        use leasehold_core::{AcquireError, Reason};

        use crate::error::CHECK_ACCESS;

        let missing = SqlError::MissingSchema {
            what: "the lease table t does not exist (sqlite)".into(),
            fix: "create it with `SqlStrategy::ensure_pool(&pool)`".into(),
        };
        let text = missing.to_string();
        let acquire = AcquireError::from(missing);
        assert!(
            matches!(acquire, AcquireError::MissingSchema { .. }),
            "{acquire:?}"
        );
        assert_eq!(acquire.to_string(), text);
        assert!(!acquire.is_retryable());
        let busy = AcquireError::from(SqlError::Contention(Reason::new("database is locked")));
        assert!(matches!(busy, AcquireError::Contention(_)) && busy.is_retryable());
        let refused = AcquireError::from(SqlError::Refused {
            what: "permission denied for table t".into(),
            fix: CHECK_ACCESS.into(),
        });
        assert!(matches!(refused, AcquireError::Misconfigured { .. }));
        assert!(!refused.is_retryable());
    }
}
