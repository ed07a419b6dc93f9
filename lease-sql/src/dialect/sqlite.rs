//! SQLite 3.35+ (the bundled library).

use std::str::FromStr;
use std::time::Duration;

use leasehold_core::credentials::Credentials;
use sqlx::error::DatabaseError;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqliteQueryResult, SqliteSynchronous,
};
use sqlx::{ConnectOptions, Executor, Sqlite};

use super::{
    Dialect, FenceSql, Opened, Q, bad_url, connect_budget, guard_connect, unsupported, version,
};
use crate::config::SqlConfig;
use crate::engine::Engine;
use crate::error::SqlError;
use crate::failure::Failure;
use crate::statements::{pool_row, record_format};

/// `strftime` of UTC now with `modifier` appended: fixed-width text with
/// milliseconds, ordered like the times it holds and readable by people
/// inspecting the table.
fn strftime(modifier: &str) -> String {
    format!("strftime('%Y-%m-%d %H:%M:%f','now'{modifier})")
}

impl Dialect for Sqlite {
    const ENGINE: Engine = Engine::Sqlite;
    const NETWORKED: bool = false;
    const QUOTE: char = '"';
    const RANDOM_START: bool = false;
    const NOW: &'static str = "strftime('%Y-%m-%d %H:%M:%f','now')";
    const LONG_AGO: &'static str = "'1970-01-01 00:00:00.000'";
    const COLUMNS: &'static str = "SELECT name AS c FROM pragma_table_info(?)";
    const FLOOR_TYPE: &'static str = "INTEGER";
    // TEXT compares with the BINARY collation: byte for byte, unpadded.
    const FORMAT_TYPE: &'static str = "TEXT";
    // The wall clock of whichever process runs the statement: SQLite has no
    // server, so a step of this host's clock moves every expiry in the file.
    const NOW_MICROS: &'static str =
        "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)";
    const RESOLUTION: Duration = Duration::from_millis(1);

    type Slot = i64;
    type Fence = i64;
    type Ttl = String;
    type Opts = SqliteConnectOptions;

    fn slot(slot: u32) -> i64 {
        i64::from(slot)
    }

    fn fence(fence: u64) -> Option<i64> {
        i64::try_from(fence).ok()
    }

    /// The `strftime` modifier.
    fn ttl(ttl: Duration) -> String {
        format!("+{}.{:06} seconds", ttl.as_secs(), ttl.subsec_micros())
    }

    fn param(_: usize) -> String {
        "?".to_owned()
    }

    fn ttl_literal(ttl: Duration) -> String {
        format!("'{}'", Self::ttl(ttl))
    }

    /// None: the file is the durable state, and every process that could
    /// hold a lease in it runs on the machine that has the file, so a crash
    /// that loses its last writes (WAL with `synchronous = NORMAL` keeps
    /// every commit across a process crash; only an OS crash or power loss
    /// can drop the last ones) ends those holders too.
    fn resume_in_micros(_: &str, _: &str) -> Option<String> {
        None
    }

    /// Nothing to read: the file is opened in WAL mode with
    /// `synchronous = NORMAL`, which keeps every commit across a process
    /// crash; an OS crash or power loss can drop the last ones, but it also
    /// ends every holder, all of which run on this machine.
    fn durability_columns(_version: &str) -> Option<&'static str> {
        None
    }

    fn durability_risks(_: &[String]) -> Vec<leasehold_core::DurabilityRisk> {
        Vec::new()
    }

    fn micros_between(from: &str, to: &str) -> String {
        format!("CAST((julianday({to}) - julianday({from})) * 86400000000.0 AS INTEGER)")
    }

    fn greatest(a: &str, b: &str) -> String {
        format!("MAX({a}, {b})")
    }

    /// SQLite stores whatever it is given: text or a float in an INTEGER
    /// column stays text or a float (and text compares above every number,
    /// so `MAX` would keep it).
    fn usable_floor() -> String {
        "typeof(floor_ms) = 'integer' AND floor_ms >= 0".to_owned()
    }

    fn usable_fence() -> String {
        format!("typeof(fence) = 'integer' AND fence < {}", Self::MAX_FENCE)
    }

    /// A literal of whatever is stored: numbers as written, text quoted.
    fn shown(expr: &str) -> String {
        format!("quote({expr})")
    }

    fn expires_after(ttl: &str) -> String {
        strftime(&format!(",{ttl}"))
    }

    fn token_literal(hex: &str) -> String {
        format!("X'{hex}'")
    }

    fn holder_literal(hex: &str) -> String {
        format!("CAST(X'{hex}' AS TEXT)")
    }

    // With a format, one transaction that takes the file's write lock at
    // once (`BEGIN IMMEDIATE`): SQLite has one writer, so the record, the
    // check and the claim see no other claim in between. A statement that
    // fails leaves the transaction open; the connection is then dropped
    // (conns.rs), which rolls it back.
    fn acquire(
        t: &str,
        pool: &str,
        free: &str,
        usable: &str,
        set: &str,
        _token: &str,
        micros: &str,
        format: Option<&str>,
    ) -> String {
        let now = Self::NOW;
        let claim = |free: &str| {
            format!(
                "UPDATE {t} SET {set} \
                 WHERE pool = '{pool}' AND slot = (SELECT slot FROM {t} WHERE {free} \
                 ORDER BY slot LIMIT 1) AND (token IS NULL OR expires_at <= {now}) \
                 AND {usable} \
                 RETURNING slot, fence, grant_floor_ms, {micros}"
            )
        };
        let Some(format) = format else {
            return claim(free);
        };
        let row = pool_row(pool);
        format!(
            "BEGIN IMMEDIATE; {}; {}; SELECT id_format FROM {t} WHERE {row}; COMMIT",
            record_format::<Self>(t, pool, format),
            claim(&format!(
                "{free} AND (SELECT id_format FROM {t} WHERE {row}) = {format}"
            )),
        )
    }

    fn create_table(t: &str) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {t} (\n\
            \x20   pool        TEXT    NOT NULL,\n\
            \x20   slot        INTEGER NOT NULL,\n\
            \x20   token       BLOB,\n\
            \x20   fence       INTEGER NOT NULL DEFAULT 0,\n\
            \x20   holder      TEXT,\n\
            \x20   expires_at  TEXT,\n\
            \x20   acquired_at TEXT,\n\
            \x20   renewed_at  TEXT,\n\
            \x20   floor_ms       INTEGER NOT NULL DEFAULT 0,\n\
            \x20   grant_floor_ms INTEGER NOT NULL DEFAULT 0,\n\
            \x20   span_ms        INTEGER NOT NULL DEFAULT 0,\n\
            \x20   id_format      TEXT,\n\
            \x20   PRIMARY KEY (pool, slot)\n\
            )"
        )
    }

    fn create_fence_table(t: &str) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {t} (resource TEXT PRIMARY KEY, \
             fence INTEGER NOT NULL, updated_at TEXT NOT NULL DEFAULT \
             ({}), pool TEXT, slot INTEGER)",
            Self::NOW
        )
    }

    fn fence_issuer_type(column: &str) -> &'static str {
        if column == "pool" { "TEXT" } else { "INTEGER" }
    }

    // In the upsert's WHERE, unqualified columns are the existing row's.
    fn fence_write(t: &str) -> FenceSql {
        let upsert = format!(
            "INSERT INTO {t} (resource, fence, pool, slot) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (resource) DO UPDATE SET fence = excluded.fence, pool = excluded.pool, \
             slot = excluded.slot, updated_at = {} WHERE",
            Self::NOW
        );
        FenceSql {
            prepare: None,
            write: format!(
                "{upsert} (pool IS NULL OR (pool = excluded.pool AND slot = excluded.slot)) \
                 AND fence <= excluded.fence"
            ),
            take_over: format!(
                "{upsert} pool IS NULL OR (pool = ?5 AND slot = ?6) \
                 OR (pool = excluded.pool AND slot = excluded.slot AND fence <= excluded.fence)"
            ),
            seen: format!("SELECT fence, pool, slot FROM {t} WHERE resource = ?1"),
        }
    }

    fn bind_fence_write<'q>(
        q: Q<'q, Self>,
        resource: &'q str,
        (fence, pool, slot): (i64, &'q str, i64),
        from: Option<(&'q str, i64)>,
    ) -> Q<'q, Self> {
        let q = q.bind(resource).bind(fence).bind(pool).bind(slot);
        match from {
            Some((pool, slot)) => q.bind(pool).bind(slot),
            None => q,
        }
    }

    /// No credentials: `SqlConfig::check_credentials` refuses a source for
    /// SQLite before this runs.
    async fn open(
        config: &SqlConfig,
        _creds: Option<&Credentials>,
    ) -> Result<Opened<Self>, SqlError> {
        let (url, op) = (config.url.as_str(), config.op_timeout);
        if url.contains(":memory:") || url.contains("mode=memory") {
            return Err(SqlError::Config(leasehold_core::ConfigError::new(
                "url",
                super::redact(url),
                "a file path (sqlite://leases.sqlite): an in-memory SQLite database is private \
                 to one connection, so it cannot coordinate anything (use \
                 leasehold_core::Memory inside one process)",
            )));
        }
        let opts = if url.starts_with("sqlite:") {
            SqliteConnectOptions::from_str(url).map_err(|e| bad_url(url, &e))?
        } else {
            SqliteConnectOptions::new().filename(url)
        };
        let opts = opts
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(op);
        // Several processes opening a new file at once race to switch it to
        // WAL, and SQLite answers that race with SQLITE_BUSY without consulting
        // the busy timeout: retry within the connect budget.
        let budget = connect_budget(op);
        let give_up = tokio::time::Instant::now() + budget;
        let mut pause = Duration::from_millis(10);
        let mut conn = loop {
            match guard_connect::<Self, _>(url, budget, opts.connect()).await {
                Ok(conn) => break conn,
                Err(e) if e.is_retryable() && tokio::time::Instant::now() + pause < give_up => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                Err(e) => return Err(e),
            }
        };
        let version = version::<Self>(url, op, conn.fetch_one("SELECT sqlite_version()")).await?;
        let num: Vec<u32> = version.split('.').filter_map(|p| p.parse().ok()).collect();
        if num.as_slice() < [3, 35].as_slice() {
            return Err(unsupported(
                format!("SQLite {version} has no UPDATE … RETURNING"),
                "use SQLite 3.35 or newer (the bundled library is 3.46)",
            ));
        }
        let version = format!("SQLite {version}");
        Ok(Opened::new(
            conn,
            opts.clone(),
            opts,
            config.max_connections,
            version,
        ))
    }

    fn connect(
        opts: &SqliteConnectOptions,
    ) -> impl Future<Output = sqlx::Result<SqliteConnection>> + Send + '_ {
        opts.connect()
    }

    /// SQLite has no password: unchanged.
    fn with_credentials(opts: &SqliteConnectOptions, _: &Credentials) -> SqliteConnectOptions {
        opts.clone()
    }

    fn pool_with_credentials(opts: &SqliteConnectOptions, _: &Credentials) -> SqliteConnectOptions {
        opts.clone()
    }

    fn classify_database(e: &dyn DatabaseError, msg: String) -> Failure {
        classify(
            e.code().and_then(|c| c.parse::<i32>().ok()).unwrap_or(0),
            msg,
        )
    }

    fn rows_affected(r: &SqliteQueryResult) -> u64 {
        r.rows_affected()
    }

    /// The file's canonical path: every URL naming it is the same store.
    fn identity(url: &str) -> String {
        let path = url
            .trim_start_matches("sqlite://")
            .trim_start_matches("sqlite:")
            .split('?')
            .next()
            .unwrap_or("");
        let abs = std::fs::canonicalize(path)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| path.to_owned());
        format!("sqlite:{abs}")
    }
}

/// SQLite result codes (primary code in the low byte).
fn classify(code: i32, msg: String) -> Failure {
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
            classify(517, String::new()),
            Failure::Contention(_)
        ));
        assert!(matches!(classify(5, String::new()), Failure::Contention(_)));
        assert!(matches!(classify(1, String::new()), Failure::Schema(_)));
    }
}
