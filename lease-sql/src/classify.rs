//! Where a database error is born it is classified: retry, contention, schema
//! or final. Codes are checked (SQLSTATE, MySQL error numbers, SQLite result
//! codes), never the message text.

use std::time::Duration;

use crate::engine::Engine;

/// What a failed operation means for the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The database did not answer in time, the connection broke, or it is
    /// overloaded: the operation may or may not have been applied.
    Transient(String),
    /// Lock conflicts, deadlocks, a busy SQLite file: try again.
    Contention(String),
    /// The table is missing or not a lease table (checked by the caller).
    Schema(String),
    /// Anything no retry fixes: bad URL, permissions, syntax.
    Final(String),
}

impl Failure {
    pub(crate) fn timeout(what: &str, after: Duration) -> Self {
        Self::Transient(format!("{what}: no answer within {after:?} (op_timeout)"))
    }

    pub(crate) fn text(&self) -> &str {
        match self {
            Self::Transient(s) | Self::Contention(s) | Self::Schema(s) | Self::Final(s) => s,
        }
    }
}

/// Classifies a sqlx error from `engine`, prefixing the message with `what`.
pub(crate) fn classify(engine: Engine, what: &str, e: &sqlx::Error) -> Failure {
    let msg = format!("{what}: {e}");
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => Failure::Transient(msg),
        sqlx::Error::Database(db) => match engine {
            Engine::Postgres => postgres(db.code().as_deref().unwrap_or(""), msg),
            Engine::MySql => {
                let number = db
                    .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                    .map_or(0, sqlx::mysql::MySqlDatabaseError::number);
                mysql(number, msg)
            }
            Engine::Sqlite => {
                let code = db.code().and_then(|c| c.parse::<i32>().ok()).unwrap_or(0);
                sqlite(code, msg)
            }
        },
        sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::TypeNotFound { .. }
        | sqlx::Error::Decode(_) => Failure::Schema(msg),
        _ => Failure::Final(msg),
    }
}

fn postgres(code: &str, msg: String) -> Failure {
    match code {
        // undefined_table, undefined_column, wrong_object_type, datatype_mismatch
        "42P01" | "42703" | "42809" | "42804" => Failure::Schema(msg),
        // serialization_failure, deadlock_detected, lock_not_available
        "40001" | "40P01" | "55P03" => Failure::Contention(msg),
        // query_canceled (statement_timeout), admin/crash shutdown, cannot_connect_now,
        // idle session timeouts
        "57014" | "57P01" | "57P02" | "57P03" | "57P05" | "25P03" => Failure::Transient(msg),
        // connection exceptions, insufficient resources (too many connections),
        // operator intervention, system errors
        c if c.starts_with("08") || c.starts_with("53") || c.starts_with("58") => {
            Failure::Transient(msg)
        }
        _ => Failure::Final(msg),
    }
}

fn mysql(number: u16, msg: String) -> Failure {
    match number {
        // ER_NO_SUCH_TABLE, ER_BAD_FIELD_ERROR, ER_WRONG_FIELD_WITH_GROUP..
        1146 | 1054 => Failure::Schema(msg),
        // ER_LOCK_WAIT_TIMEOUT, ER_LOCK_DEADLOCK, ER_LOCK_NOWAIT
        1205 | 1213 | 3572 => Failure::Contention(msg),
        // ER_STATEMENT_TIMEOUT (MariaDB max_statement_time), ER_QUERY_TIMEOUT (MySQL
        // max_execution_time), ER_CON_COUNT_ERROR, ER_TOO_MANY_USER_CONNECTIONS,
        // ER_SERVER_SHUTDOWN, ER_QUERY_INTERRUPTED, ER_OUT_OF_RESOURCES, ER_CONNECTION_KILLED
        1969 | 3024 | 1040 | 1203 | 1053 | 1317 | 1041 | 1927 | 2006 | 2013 => {
            Failure::Transient(msg)
        }
        _ => Failure::Final(msg),
    }
}

fn sqlite(code: i32, msg: String) -> Failure {
    const BUSY: i32 = 5;
    const LOCKED: i32 = 6;
    const NOMEM: i32 = 7;
    const IOERR: i32 = 10;
    const PROTOCOL: i32 = 15;
    const ERROR: i32 = 1;
    match code & 0xff {
        BUSY | LOCKED | PROTOCOL => Failure::Contention(msg),
        NOMEM | IOERR => Failure::Transient(msg),
        // Generic SQL error: "no such table/column" among others; the caller
        // checks the schema to tell them apart.
        ERROR => Failure::Schema(msg),
        _ => Failure::Final(msg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        assert!(matches!(
            postgres("57014", String::new()),
            Failure::Transient(_)
        ));
        assert!(matches!(
            postgres("08006", String::new()),
            Failure::Transient(_)
        ));
        assert!(matches!(
            postgres("53300", String::new()),
            Failure::Transient(_)
        ));
        assert!(matches!(
            postgres("42P01", String::new()),
            Failure::Schema(_)
        ));
        assert!(matches!(
            postgres("40P01", String::new()),
            Failure::Contention(_)
        ));
        assert!(matches!(
            postgres("42501", String::new()),
            Failure::Final(_)
        ));
        assert!(matches!(mysql(1969, String::new()), Failure::Transient(_)));
        assert!(matches!(mysql(1146, String::new()), Failure::Schema(_)));
        assert!(matches!(mysql(1205, String::new()), Failure::Contention(_)));
        assert!(matches!(mysql(1045, String::new()), Failure::Final(_)));
        assert!(matches!(sqlite(517, String::new()), Failure::Contention(_)));
        assert!(matches!(sqlite(5, String::new()), Failure::Contention(_)));
        assert!(matches!(sqlite(1, String::new()), Failure::Schema(_)));
        let io = sqlx::Error::Io(std::io::Error::other("reset"));
        assert!(matches!(
            classify(Engine::Postgres, "x", &io),
            Failure::Transient(_)
        ));
        assert!(matches!(
            classify(Engine::MySql, "x", &sqlx::Error::PoolTimedOut),
            Failure::Transient(_)
        ));
    }
}
