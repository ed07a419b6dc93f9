//! The three SQL dialects: which engine a URL names, and every statement the
//! strategy sends, built once per strategy from the validated table name.

use std::fmt;
use std::time::Duration;

use leasehold_core::PoolSpec;

use crate::ident::{TableName, hex};

/// The database engine behind a [`SqlStrategy`](crate::SqlStrategy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Engine {
    /// PostgreSQL 9.5+ (`postgres://`, `postgresql://`).
    Postgres,
    /// MySQL 8.0.1+ or MariaDB 10.6+ (`mysql://`, `mariadb://`).
    MySql,
    /// SQLite 3.35+ (`sqlite:` URLs and plain file paths); the bundled library is used.
    Sqlite,
}

impl Engine {
    /// The engine a URL (or a plain path, which means SQLite) names.
    pub fn from_url(url: &str) -> Self {
        let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        match scheme.as_deref() {
            Some("postgres" | "postgresql") => Self::Postgres,
            Some("mysql" | "mariadb") => Self::MySql,
            _ => Self::Sqlite,
        }
    }

    /// `postgres`, `mysql` or `sqlite`: also the folder of its migrations.
    pub fn name(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::MySql => "mysql",
            Self::Sqlite => "sqlite",
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The columns a lease table must have.
pub(crate) const COLUMNS: [&str; 8] = [
    "pool",
    "slot",
    "token",
    "fence",
    "holder",
    "expires_at",
    "acquired_at",
    "renewed_at",
];

/// The longest holder identity stored (longer ones are cut on a char boundary).
pub(crate) const HOLDER_MAX: usize = 255;

/// Statements for one engine and table.
#[derive(Debug)]
pub(crate) struct Sql {
    pub(crate) engine: Engine,
    pub(crate) table: String,
    pub(crate) renew: String,
    pub(crate) release: String,
    pub(crate) revoke: String,
    pub(crate) count: String,
    pub(crate) columns: String,
}

/// The current server time, in the engine's column representation.
pub(crate) fn now(engine: Engine) -> &'static str {
    match engine {
        Engine::Postgres | Engine::MySql => "CURRENT_TIMESTAMP(6)",
        // Fixed-width UTC text with milliseconds: ordered like the times it holds,
        // and readable by people inspecting the table.
        Engine::Sqlite => "strftime('%Y-%m-%d %H:%M:%f','now')",
    }
}

/// `ttl` as an SQL expression literal: microseconds, or the SQLite modifier.
pub(crate) fn later(engine: Engine, ttl: Duration) -> String {
    let micros = ttl.as_micros();
    match engine {
        Engine::Postgres => format!("CURRENT_TIMESTAMP(6) + {micros} * INTERVAL '1 microsecond'"),
        Engine::MySql => format!("CURRENT_TIMESTAMP(6) + INTERVAL {micros} MICROSECOND"),
        Engine::Sqlite => format!(
            "strftime('%Y-%m-%d %H:%M:%f','now','+{}.{:06} seconds')",
            ttl.as_secs(),
            ttl.subsec_micros()
        ),
    }
}

/// The SQLite modifier for `ttl`, passed as a parameter.
pub(crate) fn sqlite_modifier(ttl: Duration) -> String {
    format!("+{}.{:06} seconds", ttl.as_secs(), ttl.subsec_micros())
}

/// `holder` cut to [`HOLDER_MAX`] bytes on a char boundary.
pub(crate) fn holder(spec: &PoolSpec) -> &str {
    let h = spec.holder();
    if h.len() <= HOLDER_MAX {
        return h;
    }
    let mut end = HOLDER_MAX;
    while !h.is_char_boundary(end) {
        end -= 1;
    }
    &h[..end]
}

impl Sql {
    pub(crate) fn new(engine: Engine, table: &TableName) -> Self {
        let t = table.quoted(engine);
        let now = now(engine);
        let (p, s, tok, ttl) = match engine {
            Engine::Postgres => ("$2", "$3", "$4", "$1::bigint * INTERVAL '1 microsecond'"),
            Engine::MySql | Engine::Sqlite => ("?", "?", "?", ""),
        };
        let expires = match engine {
            Engine::Postgres => format!("{now} + {ttl}"),
            Engine::MySql => format!("{now} + INTERVAL ? MICROSECOND"),
            Engine::Sqlite => "strftime('%Y-%m-%d %H:%M:%f','now',?)".to_owned(),
        };
        // Renew and release match (pool, slot, token) on a lease the database
        // still considers live: a renewal whose answer was lost is safe to retry.
        let owned = format!("pool = {p} AND slot = {s} AND token = {tok} AND expires_at > {now}");
        let renew =
            format!("UPDATE {t} SET expires_at = {expires}, renewed_at = {now} WHERE {owned}");
        let (rp, rs, rtok) = match engine {
            Engine::Postgres => ("$1", "$2", "$3"),
            _ => ("?", "?", "?"),
        };
        let release = format!(
            "UPDATE {t} SET token = NULL, expires_at = {now} \
             WHERE pool = {rp} AND slot = {rs} AND token = {rtok} AND expires_at > {now}"
        );
        let revoke = format!("UPDATE {t} SET token = NULL WHERE pool = {rp} AND slot = {rs}");
        let count = match engine {
            Engine::Postgres => format!("SELECT COUNT(*) FROM {t} WHERE pool = $1 AND slot < $2"),
            _ => format!("SELECT COUNT(*) FROM {t} WHERE pool = ? AND slot < ?"),
        };
        let columns = match engine {
            Engine::Postgres => {
                "SELECT CAST(column_name AS TEXT) AS c FROM information_schema.columns \
                                 WHERE table_schema = current_schema() AND table_name = $1"
                    .to_owned()
            }
            Engine::MySql => {
                "SELECT CAST(column_name AS CHAR) AS c FROM information_schema.columns \
                              WHERE table_schema = DATABASE() AND table_name = ?"
                    .to_owned()
            }
            Engine::Sqlite => "SELECT name AS c FROM pragma_table_info(?)".to_owned(),
        };
        Self {
            engine,
            table: t,
            renew,
            release,
            revoke,
            count,
            columns,
        }
    }

    /// The acquisition, as one text statement (or, on MySQL, one multi-statement
    /// transaction) carrying every value as a literal: one round trip even on a
    /// fresh connection, where a prepared statement would need two. Every
    /// literal is an integer, hex, or a validated pool name. It claims the
    /// lowest free slot in `from..to`.
    pub(crate) fn acquire_text(
        &self,
        spec: &PoolSpec,
        token: &[u8; 16],
        from: u32,
        to: u32,
    ) -> String {
        let t = &self.table;
        let engine = self.engine;
        let now = now(engine);
        let pool = spec.name().as_str();
        let expires = later(engine, spec.ttl());
        let tok = hex(token);
        let holder = hex(holder(spec).as_bytes());
        let range = if from == 0 {
            format!("slot < {to}")
        } else {
            format!("slot >= {from} AND slot < {to}")
        };
        let free =
            format!("pool = '{pool}' AND {range} AND (token IS NULL OR expires_at <= {now})");
        match engine {
            Engine::Postgres => format!(
                "UPDATE {t} SET token = decode('{tok}', 'hex'), fence = fence + 1, \
                 holder = convert_from(decode('{holder}', 'hex'), 'UTF8'), \
                 expires_at = {expires}, acquired_at = {now}, renewed_at = {now} \
                 WHERE (pool, slot) = (SELECT pool, slot FROM {t} WHERE {free} \
                 ORDER BY slot LIMIT 1 FOR UPDATE SKIP LOCKED) \
                 RETURNING slot, fence"
            ),
            // MariaDB has no UPDATE … RETURNING: a short transaction, sent as one
            // multi-statement text query, so still one round trip. READ COMMITTED
            // keeps InnoDB from holding locks on the rows it scanned and skipped.
            Engine::MySql => {
                let holder = if holder.is_empty() {
                    "''".to_owned()
                } else {
                    format!("CONVERT(X'{holder}' USING utf8mb4)")
                };
                format!(
                    "SET @leasehold_slot = NULL; \
                     SET TRANSACTION ISOLATION LEVEL READ COMMITTED; \
                     START TRANSACTION; \
                     SELECT slot INTO @leasehold_slot FROM {t} WHERE {free} \
                     ORDER BY slot LIMIT 1 FOR UPDATE SKIP LOCKED; \
                     UPDATE {t} SET token = X'{tok}', fence = fence + 1, holder = {holder}, \
                     expires_at = {expires}, acquired_at = {now}, renewed_at = {now} \
                     WHERE pool = '{pool}' AND slot = @leasehold_slot; \
                     SELECT slot, fence FROM {t} WHERE pool = '{pool}' AND slot = @leasehold_slot \
                     AND token = X'{tok}'; \
                     COMMIT"
                )
            }
            Engine::Sqlite => format!(
                "UPDATE {t} SET token = X'{tok}', fence = fence + 1, \
                 holder = CAST(X'{holder}' AS TEXT), \
                 expires_at = {expires}, acquired_at = {now}, renewed_at = {now} \
                 WHERE pool = '{pool}' AND slot = (SELECT slot FROM {t} WHERE {free} \
                 ORDER BY slot LIMIT 1) AND (token IS NULL OR expires_at <= {now}) \
                 RETURNING slot, fence"
            ),
        }
    }

    /// `CREATE TABLE IF NOT EXISTS` for the lease table.
    pub(crate) fn create_table(&self) -> String {
        create_table_sql(self.engine, &self.table)
    }

    /// Inserts the missing rows `from..to` of `pool` (idempotent).
    pub(crate) fn populate(&self, pool: &str, from: u32, to: u32) -> String {
        let t = &self.table;
        let values: Vec<String> = (from..to).map(|s| format!("('{pool}', {s})")).collect();
        let values = values.join(", ");
        match self.engine {
            Engine::MySql => format!("INSERT IGNORE INTO {t} (pool, slot) VALUES {values}"),
            Engine::Postgres | Engine::Sqlite => format!(
                "INSERT INTO {t} (pool, slot) VALUES {values} ON CONFLICT (pool, slot) DO NOTHING"
            ),
        }
    }
}

/// The DDL of the lease table named `t` (already quoted) for `engine`: the same
/// text ships in `migrations/<engine>/`.
pub(crate) fn create_table_sql(engine: Engine, t: &str) -> String {
    match engine {
        Engine::Postgres => format!(
            "CREATE TABLE IF NOT EXISTS {t} (\n\
            \x20   pool        VARCHAR(64)  NOT NULL,\n\
            \x20   slot        INTEGER      NOT NULL,\n\
            \x20   token       BYTEA,\n\
            \x20   fence       BIGINT       NOT NULL DEFAULT 0,\n\
            \x20   holder      VARCHAR(255),\n\
            \x20   expires_at  TIMESTAMPTZ(6),\n\
            \x20   acquired_at TIMESTAMPTZ(6),\n\
            \x20   renewed_at  TIMESTAMPTZ(6),\n\
            \x20   PRIMARY KEY (pool, slot)\n\
            )"
        ),
        Engine::MySql => format!(
            "CREATE TABLE IF NOT EXISTS {t} (\n\
            \x20   pool        VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n\
            \x20   slot        INT UNSIGNED    NOT NULL,\n\
            \x20   token       BINARY(16)      NULL,\n\
            \x20   fence       BIGINT UNSIGNED NOT NULL DEFAULT 0,\n\
            \x20   holder      VARCHAR(255) CHARACTER SET utf8mb4 NULL,\n\
            \x20   expires_at  DATETIME(6)     NULL,\n\
            \x20   acquired_at DATETIME(6)     NULL,\n\
            \x20   renewed_at  DATETIME(6)     NULL,\n\
            \x20   PRIMARY KEY (pool, slot)\n\
            ) ENGINE = InnoDB"
        ),
        Engine::Sqlite => format!(
            "CREATE TABLE IF NOT EXISTS {t} (\n\
            \x20   pool        TEXT    NOT NULL,\n\
            \x20   slot        INTEGER NOT NULL,\n\
            \x20   token       BLOB,\n\
            \x20   fence       INTEGER NOT NULL DEFAULT 0,\n\
            \x20   holder      TEXT,\n\
            \x20   expires_at  TEXT,\n\
            \x20   acquired_at TEXT,\n\
            \x20   renewed_at  TEXT,\n\
            \x20   PRIMARY KEY (pool, slot)\n\
            )"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engines_from_urls() {
        assert_eq!(Engine::from_url("postgres://u@h/db"), Engine::Postgres);
        assert_eq!(Engine::from_url("postgresql://h"), Engine::Postgres);
        assert_eq!(Engine::from_url("mysql://root@h:1/x"), Engine::MySql);
        assert_eq!(Engine::from_url("mariadb://root@h:1/x"), Engine::MySql);
        assert_eq!(Engine::from_url("sqlite://./x.db"), Engine::Sqlite);
        assert_eq!(Engine::from_url("./x.sqlite"), Engine::Sqlite);
    }

    #[test]
    fn shipped_migrations_match_the_ddl() {
        let t = TableName::default();
        for (engine, file) in [
            (
                Engine::Postgres,
                include_str!("../migrations/postgres/0001_leasehold_leases.sql"),
            ),
            (
                Engine::MySql,
                include_str!("../migrations/mysql/0001_leasehold_leases.sql"),
            ),
            (
                Engine::Sqlite,
                include_str!("../migrations/sqlite/0001_leasehold_leases.sql"),
            ),
        ] {
            let ddl = create_table_sql(engine, &t.quoted(engine));
            let body: String = file
                .lines()
                .filter(|l| !l.starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n");
            assert_eq!(
                body.trim().trim_end_matches(';'),
                ddl,
                "{engine} migration drifted"
            );
        }
    }

    #[test]
    fn long_holders_are_cut_on_a_char_boundary() {
        let spec = PoolSpec::new(
            leasehold_core::PoolName::new("p").unwrap(),
            1,
            Duration::from_secs(1),
        )
        .unwrap()
        .with_holder("é".repeat(200));
        let h = holder(&spec);
        assert!(h.len() <= HOLDER_MAX && h.chars().all(|c| c == 'é'));
    }
}
