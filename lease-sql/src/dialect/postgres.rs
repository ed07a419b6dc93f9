//! PostgreSQL 9.5+.

use std::str::FromStr;
use std::time::Duration;

use leasehold_core::credentials::Credentials;
use sqlx::error::DatabaseError;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgQueryResult, PgSslMode};
use sqlx::{ConnectOptions, Executor, Postgres};

use super::{
    Dialect, FenceSql, Incarnation, Opened, Q, bad_url, connect_budget, guard_connect,
    open_connection, unsupported,
};
use crate::config::SqlConfig;
use crate::engine::Engine;
use crate::error::SqlError;
use crate::failure::Failure;
use crate::statements::{pool_row, record_format};
use crate::tls::Tls;

impl Dialect for Postgres {
    const ENGINE: Engine = Engine::Postgres;
    const NETWORKED: bool = true;
    const QUOTE: char = '"';
    const RANDOM_START: bool = false;
    const NOW: &'static str = "CURRENT_TIMESTAMP(6)";
    const LONG_AGO: &'static str = "TIMESTAMPTZ '1970-01-01 00:00:00+00'";
    // Equality of text under the database's (always deterministic) default
    // collation is byte equality; VARCHAR does not pad.
    const FORMAT_TYPE: &'static str = "VARCHAR(200)";
    const NOW_MICROS: &'static str =
        "CAST(EXTRACT(EPOCH FROM CURRENT_TIMESTAMP(6)) * 1000000 AS BIGINT)";
    const COLUMNS: &'static str = "SELECT CAST(column_name AS TEXT) AS c FROM information_schema.columns \
         WHERE table_schema = current_schema() AND table_name = $1";

    type Slot = i32;
    type Fence = i64;
    type Ttl = i64;
    type Opts = PgConnectOptions;

    fn slot(slot: u32) -> i32 {
        i32::try_from(slot).unwrap_or(i32::MAX)
    }

    fn fence(fence: u64) -> Option<i64> {
        i64::try_from(fence).ok()
    }

    fn ttl(ttl: Duration) -> i64 {
        i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX)
    }

    fn param(n: usize) -> String {
        format!("${n}")
    }

    fn ttl_param(n: usize) -> String {
        format!("${n}::bigint")
    }

    /// `pg_postmaster_start_time()`: when the server (re)started.
    fn resume_in_micros(span: &str, _version: &str) -> Option<String> {
        Some(format!(
            "CAST(EXTRACT(EPOCH FROM (pg_postmaster_start_time() + ({span}) * INTERVAL '1 microsecond' \
             - CURRENT_TIMESTAMP(6))) * 1000000 AS BIGINT)"
        ))
    }

    /// The timeline: a promotion starts a new one at once, and so does a
    /// point-in-time recovery (`pg_control_checkpoint().timeline_id` lags
    /// until the next checkpoint; the name of the WAL segment being written
    /// does not: its first eight hex digits are the timeline).
    fn incarnation(_version: &str) -> Option<Incarnation> {
        Some(Incarnation {
            current: "'timeline ' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)",
            first: Some("'timeline 00000001'"),
            long_ago: "TIMESTAMPTZ '1970-01-01 00:00:00+00'",
        })
    }

    /// The table's OID: a table dropped and created again has another;
    /// `ALTER TABLE`, `TRUNCATE` and `VACUUM FULL` keep it.
    fn table_identity(t: &str) -> Option<String> {
        Some(format!(
            "'table ' || CAST(CAST(CAST('{t}' AS regclass) AS oid) AS text)"
        ))
    }

    fn durability_columns(_version: &str) -> Option<&'static str> {
        Some(
            "current_setting('fsync'), current_setting('synchronous_commit'), \
             current_setting('full_page_writes')",
        )
    }

    fn durability_risks(values: &[String]) -> Vec<leasehold_core::DurabilityRisk> {
        // In the order of `durability_columns`; each is a risk when `off`.
        const SETTINGS: [(&str, &str, &str); 3] = [
            (
                "fsync",
                "an OS crash or power loss can lose or corrupt committed leases",
                "set fsync = on",
            ),
            (
                "synchronous_commit",
                "a server crash loses the last commits (up to 3 × wal_writer_delay)",
                "set synchronous_commit = on (or local) for the lease user or database",
            ),
            (
                "full_page_writes",
                "an OS crash can leave torn pages",
                "set full_page_writes = on",
            ),
        ];
        SETTINGS
            .iter()
            .zip(values)
            .filter(|(_, value)| value.as_str() == "off")
            .map(|((setting, loses, fix), _)| super::risk(setting, "off", loses, fix))
            .collect()
    }

    fn micros_between(from: &str, to: &str) -> String {
        format!("CAST(EXTRACT(EPOCH FROM ({to} - {from})) * 1000000 AS BIGINT)")
    }

    fn floor_param(n: usize) -> String {
        format!("${n}::bigint")
    }

    fn expires_after(ttl: &str) -> String {
        format!("{} + {ttl} * INTERVAL '1 microsecond'", Self::NOW)
    }

    fn token_literal(hex: &str) -> String {
        format!("decode('{hex}', 'hex')")
    }

    fn holder_literal(hex: &str) -> String {
        format!("convert_from(decode('{hex}', 'hex'), 'UTF8')")
    }

    // With a format, three statements in one simple-query message: one
    // implicit transaction (rolled back whole if any fails), each statement
    // with a snapshot of its own under READ COMMITTED. The record's insert
    // waits for a concurrent inserter of the pool's row to commit, so the
    // claim's snapshot, taken after it, sees whichever record was first.
    fn acquire(
        t: &str,
        pool: &str,
        free: &str,
        usable: &str,
        set: &str,
        _token: &str,
        now: &str,
        format: Option<&str>,
    ) -> String {
        let claim = |free: &str| {
            format!(
                "UPDATE {t} SET {set} \
                 WHERE (pool, slot) = (SELECT pool, slot FROM {t} WHERE {free} \
                 ORDER BY slot LIMIT 1 FOR UPDATE SKIP LOCKED) AND {usable} \
                 RETURNING slot, fence, grant_floor_ms, {now}"
            )
        };
        let Some(format) = format else {
            return claim(free);
        };
        let row = pool_row(pool);
        format!(
            "{}; {}; SELECT id_format FROM {t} WHERE {row}",
            record_format::<Self>(t, pool, format),
            claim(&format!(
                "{free} AND (SELECT id_format FROM {t} WHERE {row}) = {format}"
            )),
        )
    }

    fn create_table(t: &str) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {t} (\n\
            \x20   pool        VARCHAR(64)  NOT NULL,\n\
            \x20   slot        INTEGER      NOT NULL,\n\
            \x20   token       BYTEA,\n\
            \x20   fence       BIGINT       NOT NULL DEFAULT 0,\n\
            \x20   holder      VARCHAR(255),\n\
            \x20   expires_at  TIMESTAMPTZ(6),\n\
            \x20   acquired_at TIMESTAMPTZ(6),\n\
            \x20   renewed_at  TIMESTAMPTZ(6),\n\
            \x20   floor_ms       BIGINT NOT NULL DEFAULT 0,\n\
            \x20   grant_floor_ms BIGINT NOT NULL DEFAULT 0,\n\
            \x20   span_ms        BIGINT NOT NULL DEFAULT 0,\n\
            \x20   id_format      VARCHAR(200),\n\
            \x20   PRIMARY KEY (pool, slot)\n\
            )"
        )
    }

    fn create_fence_table(t: &str) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {t} (resource VARCHAR(255) PRIMARY KEY, \
             fence BIGINT NOT NULL, updated_at TIMESTAMPTZ(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), \
             pool VARCHAR(64), slot INTEGER)"
        )
    }

    fn fence_issuer_type(column: &str) -> &'static str {
        if column == "pool" {
            "VARCHAR(64)"
        } else {
            "INTEGER"
        }
    }

    fn fence_write(t: &str) -> FenceSql {
        let upsert = format!(
            "INSERT INTO {t} AS cur (resource, fence, pool, slot) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (resource) DO UPDATE SET fence = EXCLUDED.fence, pool = EXCLUDED.pool, \
             slot = EXCLUDED.slot, updated_at = CURRENT_TIMESTAMP(6) WHERE"
        );
        FenceSql {
            prepare: None,
            write: format!(
                "{upsert} (cur.pool IS NULL OR (cur.pool = EXCLUDED.pool AND cur.slot = EXCLUDED.slot)) \
                 AND cur.fence <= EXCLUDED.fence"
            ),
            take_over: format!(
                "{upsert} cur.pool IS NULL OR (cur.pool = $5 AND cur.slot = $6) \
                 OR (cur.pool = EXCLUDED.pool AND cur.slot = EXCLUDED.slot AND cur.fence <= EXCLUDED.fence)"
            ),
            seen: format!("SELECT fence, pool, slot FROM {t} WHERE resource = $1"),
        }
    }

    fn bind_fence_write<'q>(
        q: Q<'q, Self>,
        resource: &'q str,
        (fence, pool, slot): (i64, &'q str, i32),
        from: Option<(&'q str, i32)>,
    ) -> Q<'q, Self> {
        let q = q.bind(resource).bind(fence).bind(pool).bind(slot);
        match from {
            Some((pool, slot)) => q.bind(pool).bind(slot),
            None => q,
        }
    }

    async fn open(
        config: &SqlConfig,
        creds: Option<&Credentials>,
    ) -> Result<Opened<Self>, SqlError> {
        let (url, op) = (config.url.as_str(), config.op_timeout);
        let ms = op.as_millis().max(1).to_string();
        let base = PgConnectOptions::from_str(url)
            .map_err(|e| bad_url(url, &e))?
            .application_name("leasehold");
        let base = match creds {
            Some(c) => Self::with_credentials(&base, c),
            None => base,
        };
        let tls = Tls::read(
            Engine::Postgres,
            url,
            mode_name(base.get_ssl_mode()),
            base.get_host(),
            base.get_username(),
        )?;
        // Server-side limits, so a statement the client gave up on does not go
        // on holding locks.
        let opts = base.clone().options([
            ("statement_timeout", ms.as_str()),
            ("lock_timeout", ms.as_str()),
        ]);
        let mut conn =
            open_connection::<Self, _>(url, &tls, connect_budget(op), opts.connect()).await?;
        let version =
            super::version::<Self>(url, op, conn.fetch_one("SHOW server_version")).await?;
        if conn.server_version_num().unwrap_or(0) < 90_500 {
            return Err(unsupported(
                format!("PostgreSQL {version} has no FOR UPDATE SKIP LOCKED"),
                "use PostgreSQL 9.5 or newer",
            ));
        }
        let version = format!("PostgreSQL {version}");
        // A server (or role, or database) with `synchronous_commit = off`
        // acknowledges commits before they reach the disk, and a crash of
        // any backend — the postmaster reinitialises without restarting —
        // loses them: a claim, a renewal, a fence. The lease connections
        // turn it on for themselves (it is a per-session setting), so the
        // leases are durable whenever `fsync` is on. It is set on a server
        // that says `on` too, so that a later reload to `off` does not reach
        // the lease sessions. `local`, `remote_write` and `remote_apply`
        // (durable here, different towards standbys) are kept as they are.
        let sync: String =
            super::version::<Self>(url, op, conn.fetch_one("SHOW synchronous_commit")).await?;
        // (A fault-injection control run keeps the server's setting, to
        // show what the session setting prevents.)
        let opts = if (sync == "off" || sync == "on") && !config.keep_server_synchronous_commit {
            guard_connect::<Self, _>(url, op, conn.execute("SET synchronous_commit = on")).await?;
            opts.options([("synchronous_commit", "on")])
        } else {
            opts
        };
        // With synchronous standbys a commit's wait for them can be
        // cancelled, which PostgreSQL answers with success and a warning:
        // the lease operations then watch for that warning.
        let standbys: String =
            super::version::<Self>(url, op, conn.fetch_one("SHOW synchronous_standby_names"))
                .await?;
        Ok(
            Opened::new(conn, opts, base, config.max_connections, version)
                .sync_standbys(!standbys.trim().is_empty())
                .tls(tls.asked()),
        )
    }

    fn connect(
        opts: &PgConnectOptions,
    ) -> impl Future<Output = sqlx::Result<PgConnection>> + Send + '_ {
        opts.connect()
    }

    fn with_credentials(opts: &PgConnectOptions, creds: &Credentials) -> PgConnectOptions {
        let opts = opts.clone().password(creds.expose_password());
        match creds.user() {
            Some(user) => opts.username(user),
            None => opts,
        }
    }

    fn pool_with_credentials(opts: &PgConnectOptions, creds: &Credentials) -> PgConnectOptions {
        Self::with_credentials(opts, creds)
    }

    fn classify_database(e: &dyn DatabaseError, msg: String) -> Failure {
        classify(e.code().as_deref().unwrap_or(""), msg)
    }

    /// invalid_authorization_specification (no `pg_hba.conf` line, a
    /// client certificate missing or refused), invalid_password.
    fn access_refused(e: &dyn DatabaseError) -> bool {
        matches!(e.code().as_deref(), Some("28000" | "28P01"))
    }

    fn authentication_failed(e: &dyn DatabaseError) -> Option<&'static str> {
        Self::access_refused(e).then_some(
            "check the user and the password (in the URL, its password_file, PGPASSWORD, \
             ~/.pgpass or the credentials callback), and that pg_hba.conf lets this user in \
             from this host",
        )
    }

    fn rows_affected(r: &PgQueryResult) -> u64 {
        r.rows_affected()
    }
}

/// The mode's name in `sslmode`.
fn mode_name(mode: PgSslMode) -> &'static str {
    match mode {
        PgSslMode::Disable => "disable",
        PgSslMode::Allow => "allow",
        PgSslMode::Prefer => "prefer",
        PgSslMode::Require => "require",
        PgSslMode::VerifyCa => "verify-ca",
        PgSslMode::VerifyFull => "verify-full",
    }
}

/// SQLSTATE codes.
fn classify(code: &str, msg: String) -> Failure {
    match code {
        // undefined_table, undefined_column, wrong_object_type, datatype_mismatch
        "42P01" | "42703" | "42809" | "42804" => Failure::Schema(msg),
        // serialization_failure, deadlock_detected, lock_not_available
        "40001" | "40P01" | "55P03" => Failure::Contention(msg),
        // insufficient_privilege
        "42501" => Failure::Denied(msg),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        for (code, transient) in [("57014", true), ("08006", true), ("53300", true)] {
            assert_eq!(
                matches!(classify(code, String::new()), Failure::Transient(_)),
                transient
            );
        }
        assert!(matches!(
            classify("42P01", String::new()),
            Failure::Schema(_)
        ));
        assert!(matches!(
            classify("40P01", String::new()),
            Failure::Contention(_)
        ));
        assert!(matches!(
            classify("42501", String::new()),
            Failure::Denied(_)
        ));
        assert!(matches!(
            classify("42601", String::new()),
            Failure::Final(_)
        ));
        let io = sqlx::Error::Io(std::io::Error::other("reset"));
        assert!(matches!(
            <Postgres as Dialect>::classify("x", &io),
            Failure::Transient(_)
        ));
    }
}
