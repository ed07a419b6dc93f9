//! What a failed database operation means for the lease. Each dialect
//! classifies its own error codes into it where the error is born (SQLSTATE,
//! MySQL error numbers, SQLite result codes), never by the message text.

use std::time::Duration;

/// The class of a failed operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The database did not answer in time, the connection broke, or it is
    /// overloaded: the operation may or may not have been applied.
    Transient(String),
    /// Lock conflicts, deadlocks, a busy SQLite file: try again.
    Contention(String),
    /// The table is missing or not a lease table (checked by the caller).
    Schema(String),
    /// The server refused for want of a privilege (PostgreSQL SQLSTATE
    /// 42501, MySQL/MariaDB 1142, 1143, 1044, 1227, 1370): final, and the
    /// caller names the GRANT that is missing (`leases/grants.rs`).
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
    Denied(String),
    /// Anything else no retry fixes: bad URL, syntax.
    Final(String),
}

impl Failure {
    pub(crate) fn timeout(what: &str, after: Duration) -> Self {
        Self::Transient(format!("{what}: no answer within {after:?} (op_timeout)"))
    }

    pub(crate) fn text(&self) -> &str {
        match self {
            Self::Transient(s)
            | Self::Contention(s)
            | Self::Schema(s)
            | Self::Denied(s)
            | Self::Final(s) => s,
        }
    }
}
