//! MySQL 8.0.1+ and MariaDB 10.6+.

use std::str::FromStr;
use std::time::Duration;

use leasehold_core::credentials::Credentials;
use sqlx::error::DatabaseError;
use sqlx::mysql::{
    MySqlConnectOptions, MySqlConnection, MySqlDatabaseError, MySqlQueryResult, MySqlSslMode,
};
use sqlx::{ConnectOptions, Executor, MySql};

use super::{
    Dialect, FenceSql, Incarnation, Opened, Q, bad_url, connect_budget, guard_connect,
    open_connection, unsupported, version,
};
use crate::config::SqlConfig;
use crate::engine::Engine;
use crate::error::SqlError;
use crate::failure::Failure;
use crate::statements::{pool_row, record_format};
use crate::tls::Tls;

/// How a lease connection is opened: the options, then the session's
/// server-side limits.
pub(crate) struct MySqlOpts {
    opts: MySqlConnectOptions,
    session: String,
}

impl Dialect for MySql {
    const ENGINE: Engine = Engine::MySql;
    const NETWORKED: bool = true;
    const QUOTE: char = '`';
    const RANDOM_START: bool = true;
    const NOW: &'static str = "CURRENT_TIMESTAMP(6)";
    const LONG_AGO: &'static str = "TIMESTAMP '1970-01-01 00:00:01'";
    const NOW_MICROS: &'static str =
        "CAST(UNIX_TIMESTAMP(CURRENT_TIMESTAMP(6)) * 1000000 AS SIGNED)";
    const RENEW_AS_TEXT: bool = true;
    const TEXT_TYPE: &'static str = "CHAR";
    // BIGINT UNSIGNED.
    const MAX_FENCE: &'static str = "18446744073709551615";
    // Binary: compared byte for byte. A text column's collation would fold
    // case (the default utf8mb4 collations) or pad trailing spaces (every
    // `_bin` collation of MariaDB), and two different formats would pass
    // as one.
    const FORMAT_TYPE: &'static str = "VARBINARY(200)";
    const COLUMNS: &'static str = "SELECT CAST(column_name AS CHAR) AS c FROM information_schema.columns \
         WHERE table_schema = DATABASE() AND table_name = ?";

    type Slot = u32;
    type Fence = u64;
    type Ttl = i64;
    type Opts = MySqlOpts;

    fn slot(slot: u32) -> u32 {
        slot
    }

    fn fence(fence: u64) -> Option<u64> {
        Some(fence)
    }

    fn ttl(ttl: Duration) -> i64 {
        i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX)
    }

    fn param(_: usize) -> String {
        "?".to_owned()
    }

    /// The `Uptime` status (whole seconds, so the TTL is rounded up), from
    /// `information_schema.GLOBAL_STATUS` on MariaDB and from
    /// `performance_schema.global_status` on MySQL 8, which dropped the
    /// former. NULL when the server does not show it: `connect` checks that
    /// (grants would never resume). `Uptime` is a difference of whole
    /// seconds of the clock, so it can read up to a second more than has
    /// passed: the span is rounded up to whole seconds, and one more.
    fn resume_in_micros(span: &str, version: &str) -> Option<String> {
        let secs = format!("(CAST(CEILING(({span}) / 1000000) AS SIGNED) + 1)");
        let table = if version.contains("MariaDB") {
            "information_schema.GLOBAL_STATUS"
        } else {
            "performance_schema.global_status"
        };
        Some(format!(
            "(({secs} - (SELECT CAST(VARIABLE_VALUE AS SIGNED) FROM {table} \
             WHERE VARIABLE_NAME = 'UPTIME')) * 1000000)"
        ))
    }

    /// The server's identity, which a promotion changes: a replica must
    /// have a `server_id` of its own (replication refuses one equal to its
    /// primary's), and on MySQL also a `server_uuid` of its own (generated
    /// in the data directory's `auto.cnf` at the first start; MariaDB has
    /// none). Neither tells whether the server was ever promoted, so there
    /// is no first incarnation: a missing record counts as long past (see
    /// [`Incarnation::first`]). A server restored from a backup with the
    /// same identity is not told apart (DESIGN.md rule 12).
    fn incarnation(version: &str) -> Option<Incarnation> {
        Some(Incarnation {
            current: if version.contains("MariaDB") {
                "CONCAT('server_id ', @@server_id)"
            } else {
                "CONCAT('server_id ', @@server_id, ' server_uuid ', @@server_uuid)"
            },
            first: None,
            long_ago: "TIMESTAMP '1970-01-01 00:00:01'",
        })
    }

    fn micros_until(since: &str, span: &str) -> String {
        Self::micros_between(
            Self::NOW,
            &format!("{since} + INTERVAL ({span}) MICROSECOND"),
        )
    }

    /// InnoDB locks the rows an `UPDATE` looks up whether or not its `WHERE`
    /// then matches, and `INSERT IGNORE` share-locks the existing row it
    /// skips: both would make every claim of every pool queue on the record
    /// while one transaction holds it. So a plain (consistent, non-locking)
    /// read of the record comes first, into a session variable, and the
    /// insert and the update carry conditions on that variable alone, which
    /// the optimizer judges before it reads the table: when the record is
    /// current neither statement touches a row. A record that was missing
    /// is not updated either: the insert made it current (or found one a
    /// concurrent claim of this server inserted), so claimers racing on a
    /// fresh table do not queue for it one by one. Each statement commits on
    /// its own (they run ahead of the claim's transaction), so an update
    /// after a failover holds its lock for one statement; a concurrent
    /// update waits for it, then finds the record current.
    fn record_incarnation(t: &str, row: &str, values: &str, current: &str) -> String {
        format!(
            "SET @leasehold_incarnation = NULL; \
             SELECT holder INTO @leasehold_incarnation FROM {t} WHERE {row}; \
             INSERT IGNORE INTO {t} (pool, slot, holder, acquired_at) SELECT {values} \
             FROM DUAL WHERE @leasehold_incarnation IS NULL; \
             UPDATE {t} SET holder = {current}, acquired_at = {} \
             WHERE {row} AND holder <> {current} AND @leasehold_incarnation <> {current}",
            Self::NOW
        )
    }

    fn durability_columns(_version: &str) -> Option<&'static str> {
        Some(
            "CAST(@@innodb_flush_log_at_trx_commit AS CHAR), \
             CAST(@@sync_binlog AS CHAR), CAST(@@log_bin AS CHAR)",
        )
    }

    fn durability_risks(values: &[String]) -> Vec<leasehold_core::DurabilityRisk> {
        let get = |i: usize| values.get(i).map_or("", String::as_str);
        let mut risks = Vec::new();
        match get(0) {
            "1" => {}
            "2" => risks.push(super::risk(
                "innodb_flush_log_at_trx_commit",
                "2",
                "an OS crash or power loss loses about the last second of commits",
                "set innodb_flush_log_at_trx_commit = 1",
            )),
            other => risks.push(super::risk(
                "innodb_flush_log_at_trx_commit",
                other,
                "a server crash loses about the last second of commits",
                "set innodb_flush_log_at_trx_commit = 1",
            )),
        }
        if get(2) == "1" && get(1) != "1" {
            risks.push(super::risk(
                "sync_binlog",
                get(1),
                "an OS crash can leave the binary log behind the data, so a replica promoted \
                 after it lacks leases the primary acknowledged",
                "set sync_binlog = 1",
            ));
        }
        risks
    }

    fn micros_between(from: &str, to: &str) -> String {
        format!("TIMESTAMPDIFF(MICROSECOND, {from}, {to})")
    }

    fn expires_after(ttl: &str) -> String {
        format!("{} + INTERVAL {ttl} MICROSECOND", Self::NOW)
    }

    fn token_literal(hex: &str) -> String {
        format!("X'{hex}'")
    }

    fn holder_literal(hex: &str) -> String {
        if hex.is_empty() {
            "''".to_owned()
        } else {
            format!("CONVERT(X'{hex}' USING utf8mb4)")
        }
    }

    // MariaDB has no UPDATE … RETURNING: a short transaction, sent as one
    // multi-statement text query, so still one round trip. READ COMMITTED
    // keeps InnoDB from holding locks on the rows it scanned and skipped. A
    // failure or timeout inside it drops the connection (see conns.rs): the
    // server rolls back.
    //
    // With a format, the transaction first records it (`INSERT IGNORE` of
    // the pool's row waits for a concurrent inserter of that row to commit,
    // then keeps its row), then reads the record with a locking read, which
    // sees the newest committed version whatever the isolation level (a
    // consistent read under REPEATABLE READ could see an older snapshot),
    // and claims only if it is this claim's format. The shared lock it
    // takes conflicts with no other claim's.
    fn acquire(
        t: &str,
        pool: &str,
        free: &str,
        usable: &str,
        set: &str,
        token: &str,
        now: &str,
        format: Option<&str>,
    ) -> String {
        let (record, free, recorded) = match format {
            Some(format) => {
                let row = pool_row(pool);
                (
                    format!(
                        "{}; SELECT id_format INTO @leasehold_format FROM {t} WHERE {row} \
                         LOCK IN SHARE MODE; ",
                        record_format::<Self>(t, pool, format)
                    ),
                    format!("{free} AND @leasehold_format = {format}"),
                    format!("SELECT {}; ", Self::format_text("@leasehold_format")),
                )
            }
            None => (String::new(), free.to_owned(), String::new()),
        };
        format!(
            "SET @leasehold_slot = NULL, @leasehold_format = NULL; \
             SET TRANSACTION ISOLATION LEVEL READ COMMITTED; \
             START TRANSACTION; \
             {record}\
             SELECT slot INTO @leasehold_slot FROM {t} WHERE {free} \
             ORDER BY slot LIMIT 1 FOR UPDATE SKIP LOCKED; \
             UPDATE {t} SET {set} \
             WHERE pool = '{pool}' AND slot = @leasehold_slot AND {usable}; \
             SELECT slot, fence, grant_floor_ms, {now} FROM {t} WHERE pool = '{pool}' AND slot = @leasehold_slot \
             AND token = {token}; \
             {recorded}\
             COMMIT"
        )
    }

    /// A binary string: compared with the VARBINARY column byte for byte.
    fn format_literal(hex: &str) -> String {
        format!("X'{hex}'")
    }

    /// The binary column as text (sqlx decodes a binary string as bytes).
    fn format_text(expr: &str) -> String {
        format!("CAST({expr} AS CHAR CHARACTER SET utf8mb4)")
    }

    fn insert_missing(t: &str, columns: &str, values: &str, _key: &str) -> String {
        format!("INSERT IGNORE INTO {t} ({columns}) VALUES {values}")
    }

    fn create_table(t: &str) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {t} (\n\
            \x20   pool        VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n\
            \x20   slot        INT UNSIGNED    NOT NULL,\n\
            \x20   token       BINARY(16)      NULL,\n\
            \x20   fence       BIGINT UNSIGNED NOT NULL DEFAULT 0,\n\
            \x20   holder      VARCHAR(255) CHARACTER SET utf8mb4 NULL,\n\
            \x20   expires_at  DATETIME(6)     NULL,\n\
            \x20   acquired_at DATETIME(6)     NULL,\n\
            \x20   renewed_at  DATETIME(6)     NULL,\n\
            \x20   floor_ms       BIGINT NOT NULL DEFAULT 0,\n\
            \x20   grant_floor_ms BIGINT NOT NULL DEFAULT 0,\n\
            \x20   span_ms        BIGINT NOT NULL DEFAULT 0,\n\
            \x20   id_format      VARBINARY(200)  NULL,\n\
            \x20   PRIMARY KEY (pool, slot)\n\
            ) ENGINE = InnoDB"
        )
    }

    fn create_fence_table(t: &str) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {t} (resource VARCHAR(255) CHARACTER SET utf8mb4 \
             COLLATE utf8mb4_bin PRIMARY KEY, fence BIGINT UNSIGNED NOT NULL, \
             updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), \
             pool {}, slot {}) ENGINE = InnoDB",
            Self::fence_issuer_type("pool"),
            Self::fence_issuer_type("slot")
        )
    }

    fn fence_issuer_type(column: &str) -> &'static str {
        if column == "pool" {
            "VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL"
        } else {
            "INT UNSIGNED NULL"
        }
    }

    fn fence_write(t: &str) -> FenceSql {
        FenceSql {
            // The row, created if missing, locked *exclusively* at once:
            // `INSERT IGNORE` took a shared lock on an existing row, and two
            // writers holding it then deadlocked on the `UPDATE`'s exclusive
            // lock (InnoDB rolled one back with 1213).
            prepare: Some(format!(
                "INSERT INTO {t} (resource, fence) VALUES (?, 0) \
                 ON DUPLICATE KEY UPDATE resource = resource"
            )),
            // Rows *matched* (sqlx sets CLIENT_FOUND_ROWS): 1 even when the
            // fence is unchanged. The WHERE is judged on the row before the SET.
            write: format!(
                "UPDATE {t} SET fence = ?, pool = ?, slot = ?, updated_at = CURRENT_TIMESTAMP(6) \
                 WHERE resource = ? AND (pool IS NULL OR (pool = ? AND slot = ?)) AND fence <= ?"
            ),
            take_over: format!(
                "UPDATE {t} SET fence = ?, pool = ?, slot = ?, updated_at = CURRENT_TIMESTAMP(6) \
                 WHERE resource = ? AND (pool IS NULL OR (pool = ? AND slot = ?) \
                 OR (pool = ? AND slot = ? AND fence <= ?))"
            ),
            // The pool as text: its binary collation would decode as bytes.
            seen: format!(
                "SELECT fence, CAST(pool AS CHAR CHARACTER SET utf8mb4), slot FROM {t} \
                 WHERE resource = ?"
            ),
        }
    }

    fn bind_fence_write<'q>(
        q: Q<'q, Self>,
        resource: &'q str,
        (fence, pool, slot): (u64, &'q str, u32),
        from: Option<(&'q str, u32)>,
    ) -> Q<'q, Self> {
        let q = q.bind(fence).bind(pool).bind(slot).bind(resource);
        match from {
            None => q.bind(pool).bind(slot).bind(fence),
            Some((from_pool, from_slot)) => q
                .bind(from_pool)
                .bind(from_slot)
                .bind(pool)
                .bind(slot)
                .bind(fence),
        }
    }

    async fn open(
        config: &SqlConfig,
        creds: Option<&Credentials>,
    ) -> Result<Opened<Self>, SqlError> {
        let (url, op) = (config.url.as_str(), config.op_timeout);
        let mysql_url = url.replacen("mariadb://", "mysql://", 1);
        let opts = MySqlConnectOptions::from_str(&mysql_url)
            .map_err(|e| bad_url(url, &e))?
            .timezone(Some("+00:00".to_owned()));
        let opts = match creds {
            Some(c) => Self::pool_with_credentials(&opts, c),
            None => opts,
        };
        let tls = Tls::read(
            Engine::MySql,
            url,
            mode_name(opts.get_ssl_mode()),
            opts.get_host(),
            opts.get_username(),
        )?;
        let mut conn =
            open_connection::<Self, _>(url, &tls, connect_budget(op), opts.connect()).await?;
        let version = version::<Self>(url, op, conn.fetch_one("SELECT VERSION()")).await?;
        check_version(&version)?;
        let mariadb = version.contains("MariaDB");
        // Server-side limits, so a statement the client gave up on does not go
        // on holding locks.
        let limit = if mariadb {
            format!("max_statement_time = {:.3}", op.as_secs_f64())
        } else {
            format!("max_execution_time = {}", op.as_millis().max(1))
        };
        let session = format!(
            "SET SESSION {limit}, innodb_lock_wait_timeout = {}",
            op.as_secs().clamp(1, 3600)
        );
        guard_connect::<Self, _>(url, op, conn.execute(session.as_str())).await?;
        let version = format!("{} {version}", if mariadb { "MariaDB" } else { "MySQL" });
        let lease = MySqlOpts {
            opts: opts.clone(),
            session,
        };
        Ok(Opened::new(conn, lease, opts, config.max_connections, version).tls(tls.asked()))
    }

    fn with_credentials(opts: &MySqlOpts, creds: &Credentials) -> MySqlOpts {
        MySqlOpts {
            opts: Self::pool_with_credentials(&opts.opts, creds),
            session: opts.session.clone(),
        }
    }

    fn pool_with_credentials(
        opts: &MySqlConnectOptions,
        creds: &Credentials,
    ) -> MySqlConnectOptions {
        let opts = opts.clone().password(creds.expose_password());
        match creds.user() {
            Some(user) => opts.username(user),
            None => opts,
        }
    }

    async fn connect(opts: &MySqlOpts) -> sqlx::Result<MySqlConnection> {
        let mut conn = opts.opts.connect().await?;
        conn.execute(opts.session.as_str()).await?;
        Ok(conn)
    }

    fn classify_database(e: &dyn DatabaseError, msg: String) -> Failure {
        let number = e
            .try_downcast_ref::<MySqlDatabaseError>()
            .map_or(0, MySqlDatabaseError::number);
        classify(number, msg)
    }

    /// ER_ACCESS_DENIED_ERROR (which MariaDB also answers a connection
    /// without TLS to a server that requires it), MySQL's
    /// ER_SECURE_TRANSPORT_REQUIRED.
    fn authentication_failed(e: &dyn DatabaseError) -> Option<&'static str> {
        // ER_ACCESS_DENIED_ERROR (3159, a connection without TLS refused,
        // is TLS's to explain).
        e.try_downcast_ref::<MySqlDatabaseError>()
            .is_some_and(|e| e.number() == 1045)
            .then_some(
                "check the user and the password (in the URL, its password_file or the \
                 credentials callback), and that the user exists for this host ('USER'@'HOST')",
            )
    }

    fn access_refused(e: &dyn DatabaseError) -> bool {
        e.try_downcast_ref::<MySqlDatabaseError>()
            .is_some_and(|e| matches!(e.number(), 1045 | 3159))
    }

    fn rows_affected(r: &MySqlQueryResult) -> u64 {
        r.rows_affected()
    }
}

/// The mode's name in `ssl-mode`.
fn mode_name(mode: MySqlSslMode) -> &'static str {
    match mode {
        MySqlSslMode::Disabled => "DISABLED",
        MySqlSslMode::Preferred => "PREFERRED",
        MySqlSslMode::Required => "REQUIRED",
        MySqlSslMode::VerifyCa => "VERIFY_CA",
        MySqlSslMode::VerifyIdentity => "VERIFY_IDENTITY",
    }
}

/// MySQL/MariaDB error numbers.
fn classify(number: u16, msg: String) -> Failure {
    match number {
        // ER_NO_SUCH_TABLE, ER_BAD_FIELD_ERROR
        1146 | 1054 => Failure::Schema(msg),
        // ER_LOCK_WAIT_TIMEOUT, ER_LOCK_DEADLOCK, ER_LOCK_NOWAIT
        1205 | 1213 | 3572 => Failure::Contention(msg),
        // ER_TABLEACCESS_DENIED_ERROR, ER_COLUMNACCESS_DENIED_ERROR,
        // ER_DBACCESS_DENIED_ERROR, ER_SPECIFIC_ACCESS_DENIED_ERROR,
        // ER_PROCACCESS_DENIED_ERROR
        1142 | 1143 | 1044 | 1227 | 1370 => Failure::Denied(msg),
        // ER_STATEMENT_TIMEOUT (MariaDB max_statement_time), ER_QUERY_TIMEOUT (MySQL
        // max_execution_time), ER_CON_COUNT_ERROR, ER_TOO_MANY_USER_CONNECTIONS,
        // ER_SERVER_SHUTDOWN, ER_QUERY_INTERRUPTED, ER_OUT_OF_RESOURCES, ER_CONNECTION_KILLED
        1969 | 3024 | 1040 | 1203 | 1053 | 1317 | 1041 | 1927 | 2006 | 2013 => {
            Failure::Transient(msg)
        }
        _ => Failure::Final(msg),
    }
}

fn check_version(version: &str) -> Result<(), SqlError> {
    let nums: Vec<u32> = version
        .split(|c: char| !c.is_ascii_digit())
        .take(3)
        .filter_map(|p| p.parse().ok())
        .collect();
    let (ok, need) = if version.contains("MariaDB") {
        (nums.as_slice() >= [10, 6].as_slice(), "MariaDB 10.6")
    } else {
        (nums.as_slice() >= [8, 0, 1].as_slice(), "MySQL 8.0.1")
    };
    if ok {
        Ok(())
    } else {
        Err(unsupported(
            format!("{version} has no SELECT … FOR UPDATE SKIP LOCKED"),
            &format!("use {need} or newer"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_versions() {
        let class = |n| std::mem::discriminant(&classify(n, String::new()));
        let of = |f: Failure| std::mem::discriminant(&f);
        assert_eq!(class(1969), of(Failure::Transient(String::new())));
        assert_eq!(class(1146), of(Failure::Schema(String::new())));
        assert_eq!(class(1205), of(Failure::Contention(String::new())));
        assert_eq!(class(1045), of(Failure::Final(String::new())));
        for denied in [1142, 1143, 1044, 1227, 1370] {
            assert_eq!(
                class(denied),
                of(Failure::Denied(String::new())),
                "{denied}"
            );
        }
        let pool = <MySql as Dialect>::classify("x", &sqlx::Error::PoolTimedOut);
        assert!(matches!(pool, Failure::Transient(_)));
        for (version, ok) in [
            ("10.11.6-MariaDB-0+deb12u1", true),
            ("10.5.2-MariaDB", false),
            ("8.0.36", true),
            ("5.7.44", false),
        ] {
            assert_eq!(check_version(version).is_ok(), ok, "{version}");
        }
    }
}
