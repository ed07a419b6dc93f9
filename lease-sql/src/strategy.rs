//! `SqlStrategy`: connecting, the schema calls, and the `Strategy` impl.

use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use leasehold_core::{
    AcquireError, BoxFuture, Capabilities, Fence, Floor, Grant, PoolSpec, Reason, Release, Renewal,
    Strategy, Token,
};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlPool, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection, Executor, Row};

use crate::classify::{Failure, classify};
use crate::config::SqlConfig;
use crate::conns::Conns;
use crate::engine::{COLUMNS, Engine, Sql, sqlite_modifier};
use crate::ident::TableName;

/// The smallest TTL the SQL stores accept (SQLite keeps milliseconds).
pub const SQL_MIN_TTL: Duration = Duration::from_millis(100);

/// Rows inserted per statement when a pool is populated.
const POPULATE_CHUNK: u32 = 1000;

/// Leases in a PostgreSQL, MySQL/MariaDB or SQLite table (see the crate docs).
///
/// Cloning shares the connections.
#[derive(Clone)]
pub struct SqlStrategy {
    inner: Arc<Inner>,
}

/// The lease connections (own, see `conns.rs`), how to open more, and a lazy
/// sqlx pool handed to callers for their own writes.
enum Db {
    Postgres {
        conns: Conns<PgConnection>,
        opts: PgConnectOptions,
        pool: PgPool,
    },
    MySql {
        conns: Conns<MySqlConnection>,
        opts: MySqlConnectOptions,
        session: String,
        pool: MySqlPool,
    },
    Sqlite {
        conns: Conns<SqliteConnection>,
        opts: SqliteConnectOptions,
        pool: SqlitePool,
    },
}

struct Inner {
    db: Db,
    sql: Sql,
    table: TableName,
    op_timeout: Duration,
    identity: String,
    version: String,
}

/// An error from the operator calls ([`SqlStrategy::revoke`], the fence table).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database answered with an error.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The database did not answer within the operation timeout.
    #[error("no answer from the database within {0:?} (op_timeout)")]
    Timeout(Duration),
}

fn mysql_connect<'a>(
    opts: &'a MySqlConnectOptions,
    session: &'a str,
) -> BoxFuture<'a, Result<MySqlConnection, sqlx::Error>> {
    Box::pin(async move {
        let mut conn = opts.connect().await?;
        conn.execute(session).await?;
        Ok(conn)
    })
}

impl SqlStrategy {
    /// Connects to `url` with the default settings (see [`SqlConfig`]).
    ///
    /// Errors: [`AcquireError::Unreachable`] when the database does not answer
    /// (retryable); `Misconfigured` for a bad URL or credentials,
    /// `UnsupportedServer` for a server without `SKIP LOCKED`/`RETURNING` (final).
    pub async fn connect(url: &str) -> Result<Self, AcquireError> {
        Self::connect_with(SqlConfig::new(url)).await
    }

    /// Connects with `config`: opens one connection, checks the server, and
    /// keeps it for the first operation.
    pub async fn connect_with(config: SqlConfig) -> Result<Self, AcquireError> {
        let table = TableName::new(config.table.clone())?;
        let engine = Engine::from_url(&config.url);
        let op = config.op_timeout;
        let n = config.max_connections;
        let budget = op.max(Duration::from_secs(1)) * 2;
        let url = config.url.as_str();
        let misconfigured = |e: &dyn fmt::Display| AcquireError::Misconfigured {
            what: format!("cannot use database URL {}: {e}", redact(url)),
            fix: "give a URL like postgres://user@host/db, mysql://user@host/db or \
                  sqlite://path/to/file.sqlite (or a plain file path)"
                .to_owned(),
        };
        let (db, version) = match engine {
            Engine::Postgres => {
                let ms = op.as_millis().max(1).to_string();
                let base = PgConnectOptions::from_str(url)
                    .map_err(|e| misconfigured(&e))?
                    .application_name("leasehold");
                // Server-side limits, so a statement the client gave up on does
                // not go on holding locks.
                let opts = base.clone().options([
                    ("statement_timeout", ms.as_str()),
                    ("lock_timeout", ms.as_str()),
                ]);
                let mut conn = guard_connect(engine, url, budget, opts.connect()).await?;
                let version: String =
                    guard_connect(engine, url, op, conn.fetch_one("SHOW server_version"))
                        .await?
                        .try_get(0)
                        .map_err(|e| misconfigured(&e))?;
                if conn.server_version_num().unwrap_or(0) < 90_500 {
                    return Err(unsupported(
                        format!("PostgreSQL {version} has no FOR UPDATE SKIP LOCKED"),
                        "use PostgreSQL 9.5 or newer",
                    ));
                }
                let pool = PgPoolOptions::new()
                    .max_connections(n)
                    .connect_lazy_with(base);
                let db = Db::Postgres {
                    conns: Conns::new(n, Some(conn)),
                    opts,
                    pool,
                };
                (db, format!("PostgreSQL {version}"))
            }
            Engine::MySql => {
                let mysql_url = url.replacen("mariadb://", "mysql://", 1);
                let opts = MySqlConnectOptions::from_str(&mysql_url)
                    .map_err(|e| misconfigured(&e))?
                    .timezone(Some("+00:00".to_owned()));
                let mut conn = guard_connect(engine, url, budget, opts.connect()).await?;
                let version: String =
                    guard_connect(engine, url, op, conn.fetch_one("SELECT VERSION()"))
                        .await?
                        .try_get(0)
                        .map_err(|e| misconfigured(&e))?;
                check_mysql_version(&version)?;
                let mariadb = version.contains("MariaDB");
                // Server-side limits, so a statement the client gave up on does
                // not go on holding locks.
                let limit = if mariadb {
                    format!("max_statement_time = {:.3}", op.as_secs_f64())
                } else {
                    format!("max_execution_time = {}", op.as_millis().max(1))
                };
                let session = format!(
                    "SET SESSION {limit}, innodb_lock_wait_timeout = {}",
                    op.as_secs().clamp(1, 3600)
                );
                guard_connect(engine, url, op, conn.execute(session.as_str())).await?;
                let pool = MySqlPoolOptions::new()
                    .max_connections(n)
                    .connect_lazy_with(opts.clone());
                let name = if mariadb { "MariaDB" } else { "MySQL" };
                let db = Db::MySql {
                    conns: Conns::new(n, Some(conn)),
                    opts,
                    session,
                    pool,
                };
                (db, format!("{name} {version}"))
            }
            Engine::Sqlite => {
                if url.contains(":memory:") || url.contains("mode=memory") {
                    return Err(AcquireError::Misconfigured {
                        what: "an in-memory SQLite database is private to one connection, so \
                               it cannot coordinate anything"
                            .to_owned(),
                        fix: "give a file path (sqlite://leases.sqlite), or use \
                              leasehold_core::Memory inside one process"
                            .to_owned(),
                    });
                }
                let opts = if url.starts_with("sqlite:") {
                    SqliteConnectOptions::from_str(url).map_err(|e| misconfigured(&e))?
                } else {
                    SqliteConnectOptions::new().filename(url)
                };
                let opts = opts
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Normal)
                    .busy_timeout(op);
                // Several processes opening a new file at once race to switch it
                // to WAL, and SQLite answers that race with SQLITE_BUSY without
                // consulting the busy timeout: retry within the connect budget.
                let give_up = tokio::time::Instant::now() + budget;
                let mut pause = Duration::from_millis(10);
                let mut conn = loop {
                    match guard_connect(engine, url, budget, opts.connect()).await {
                        Ok(conn) => break conn,
                        Err(e)
                            if e.is_retryable()
                                && tokio::time::Instant::now() + pause < give_up =>
                        {
                            tokio::time::sleep(pause).await;
                            pause = (pause * 2).min(Duration::from_millis(200));
                        }
                        Err(e) => return Err(e),
                    }
                };
                let version: String =
                    guard_connect(engine, url, op, conn.fetch_one("SELECT sqlite_version()"))
                        .await?
                        .try_get(0)
                        .map_err(|e| misconfigured(&e))?;
                let num: Vec<u32> = version.split('.').filter_map(|p| p.parse().ok()).collect();
                if num.as_slice() < [3, 35].as_slice() {
                    return Err(unsupported(
                        format!("SQLite {version} has no UPDATE … RETURNING"),
                        "use SQLite 3.35 or newer (the bundled library is 3.46)",
                    ));
                }
                let pool = SqlitePoolOptions::new()
                    .max_connections(n)
                    .connect_lazy_with(opts.clone());
                let db = Db::Sqlite {
                    conns: Conns::new(n, Some(conn)),
                    opts,
                    pool,
                };
                (db, format!("SQLite {version}"))
            }
        };
        let identity = format!("{}#{}", store_identity(engine, url), table);
        Ok(Self {
            inner: Arc::new(Inner {
                db,
                sql: Sql::new(engine, &table),
                table,
                op_timeout: op,
                identity,
                version,
            }),
        })
    }

    /// The engine.
    pub fn engine(&self) -> Engine {
        self.inner.sql.engine
    }

    /// The lease table.
    pub fn table(&self) -> &TableName {
        &self.inner.table
    }

    /// The server, as it reports itself: `PostgreSQL 15.14`, `MariaDB 10.11.…`, `SQLite 3.46.0`.
    pub fn server_version(&self) -> &str {
        &self.inner.version
    }

    /// The per-operation timeout.
    pub fn op_timeout(&self) -> Duration {
        self.inner.op_timeout
    }

    /// A sqlx pool on the same PostgreSQL database, for your own (fenced)
    /// writes. It connects lazily, with the URL's settings (none of the lease
    /// connections' statement timeouts); the lease operations do not use it.
    pub fn postgres(&self) -> Option<&PgPool> {
        match &self.inner.db {
            Db::Postgres { pool, .. } => Some(pool),
            _ => None,
        }
    }

    /// A sqlx pool on the same MySQL/MariaDB database (see [`SqlStrategy::postgres`]).
    pub fn mysql(&self) -> Option<&MySqlPool> {
        match &self.inner.db {
            Db::MySql { pool, .. } => Some(pool),
            _ => None,
        }
    }

    /// A sqlx pool on the same SQLite file (see [`SqlStrategy::postgres`]).
    pub fn sqlite(&self) -> Option<&SqlitePool> {
        match &self.inner.db {
            Db::Sqlite { pool, .. } => Some(pool),
            _ => None,
        }
    }

    /// Closes the idle lease connections and the sqlx pool (every clone's).
    pub async fn close(&self) {
        match &self.inner.db {
            Db::Postgres { conns, pool, .. } => {
                for c in conns.drain().await {
                    let _ = c.close().await;
                }
                pool.close().await;
            }
            Db::MySql { conns, pool, .. } => {
                for c in conns.drain().await {
                    let _ = c.close().await;
                }
                pool.close().await;
            }
            Db::Sqlite { conns, pool, .. } => {
                for c in conns.drain().await {
                    let _ = c.close().await;
                }
                pool.close().await;
            }
        }
    }

    /// Creates the lease table if it does not exist (idempotent, safe to run
    /// from many nodes at once). The DDL is the one shipped in
    /// `migrations/<engine>/` for the default table name.
    pub async fn ensure_table(&self) -> Result<(), AcquireError> {
        let ddl = self.inner.sql.create_table();
        let budget = self.ddl_budget();
        match self.timed_raw(budget, self.exec_text(&ddl)).await {
            Ok(_) => Ok(()),
            // Concurrent CREATE TABLE IF NOT EXISTS can collide in PostgreSQL's
            // catalog; the table then exists, which the check below confirms.
            Err(f) => match self.schema_problem().await {
                Ok(None) => Ok(()),
                _ => Err(self.to_acquire_error(f).await),
            },
        }
    }

    /// Creates the lease table if needed and the rows of slots `0..pool.size()`
    /// (idempotent: existing rows, their fences and holders are kept). Run it
    /// at deployment or startup; acquisition also adds missing rows by itself
    /// when it finds a pool short of them, but never creates the table.
    pub async fn ensure_pool(&self, pool: &PoolSpec) -> Result<(), AcquireError> {
        self.ensure_table().await?;
        self.populate(pool, 0).await
    }

    async fn populate(&self, pool: &PoolSpec, from: u32) -> Result<(), AcquireError> {
        let mut start = from;
        while start < pool.size() {
            let end = pool.size().min(start.saturating_add(POPULATE_CHUNK));
            let sql = self.inner.sql.populate(pool.name().as_str(), start, end);
            if let Err(f) = self
                .timed_raw(self.ddl_budget(), self.exec_text(&sql))
                .await
            {
                return Err(self.to_acquire_error(f).await);
            }
            start = end;
        }
        Ok(())
    }

    /// Frees `slot` of `pool` behind its holder's back (its fence is kept), as an
    /// operator would: the holder's next renewal is `Lost`. Returns whether a
    /// row was changed.
    pub async fn revoke(&self, pool: &PoolSpec, slot: u32) -> Result<bool, StoreError> {
        let sql = self.inner.sql.revoke.as_str();
        let name = pool.name().as_str();
        let fut = async {
            let n = match &self.inner.db {
                Db::Postgres { conns, opts, .. } => {
                    let mut co = conns.checkout(|| opts.connect()).await?;
                    let q = sqlx::query(sql).bind(name).bind(slot_i32(slot));
                    let n = co.conn().execute(q).await?.rows_affected();
                    co.done();
                    n
                }
                Db::MySql {
                    conns,
                    opts,
                    session,
                    ..
                } => {
                    let mut co = conns.checkout(|| mysql_connect(opts, session)).await?;
                    let q = sqlx::query(sql).bind(name).bind(slot);
                    let n = co.conn().execute(q).await?.rows_affected();
                    co.done();
                    n
                }
                Db::Sqlite { conns, opts, .. } => {
                    let mut co = conns.checkout(|| opts.connect()).await?;
                    let q = sqlx::query(sql).bind(name).bind(i64::from(slot));
                    let n = co.conn().execute(q).await?.rows_affected();
                    co.done();
                    n
                }
            };
            Ok::<_, sqlx::Error>(n > 0)
        };
        tokio::time::timeout(self.inner.op_timeout, fut)
            .await
            .map_err(|_| StoreError::Timeout(self.inner.op_timeout))?
            .map_err(StoreError::from)
    }

    fn ddl_budget(&self) -> Duration {
        self.inner.op_timeout.max(Duration::from_secs(30))
    }

    /// Runs `fut` with the operation timeout; classifies its error.
    async fn timed<T>(
        &self,
        what: &str,
        fut: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, Failure> {
        match tokio::time::timeout(self.inner.op_timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(classify(self.engine(), what, &e)),
            Err(_) => Err(Failure::timeout(what, self.inner.op_timeout)),
        }
    }

    async fn timed_raw<T>(
        &self,
        budget: Duration,
        fut: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, Failure> {
        match tokio::time::timeout(budget, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(classify(self.engine(), "schema", &e)),
            Err(_) => Err(Failure::timeout("schema", budget)),
        }
    }

    /// Runs plain-text SQL (one round trip); the rows it changed.
    async fn exec_text(&self, sql: &str) -> Result<u64, sqlx::Error> {
        let raw = sqlx::raw_sql(sql);
        Ok(match &self.inner.db {
            Db::Postgres { conns, opts, .. } => {
                let mut co = conns.checkout(|| opts.connect()).await?;
                let n = co.conn().execute(raw).await?.rows_affected();
                co.done();
                n
            }
            Db::MySql {
                conns,
                opts,
                session,
                ..
            } => {
                let mut co = conns.checkout(|| mysql_connect(opts, session)).await?;
                let n = co.conn().execute(raw).await?.rows_affected();
                co.done();
                n
            }
            Db::Sqlite { conns, opts, .. } => {
                let mut co = conns.checkout(|| opts.connect()).await?;
                let n = co.conn().execute(raw).await?.rows_affected();
                co.done();
                n
            }
        })
    }

    /// The lease table's column names.
    async fn column_names(&self) -> Result<Vec<String>, sqlx::Error> {
        let sql = self.inner.sql.columns.as_str();
        let name = self.inner.table.as_str();
        let rows = match &self.inner.db {
            Db::Postgres { conns, opts, .. } => {
                let q = sqlx::query(sql).bind(name);
                let mut co = conns.checkout(|| opts.connect()).await?;
                let rows = co.conn().fetch_all(q).await?;
                co.done();
                rows.iter()
                    .map(|r| r.try_get(0))
                    .collect::<Result<_, _>>()?
            }
            Db::MySql {
                conns,
                opts,
                session,
                ..
            } => {
                let q = sqlx::query(sql).bind(name);
                let mut co = conns.checkout(|| mysql_connect(opts, session)).await?;
                let rows = co.conn().fetch_all(q).await?;
                co.done();
                rows.iter()
                    .map(|r| r.try_get(0))
                    .collect::<Result<_, _>>()?
            }
            Db::Sqlite { conns, opts, .. } => {
                let q = sqlx::query(sql).bind(name);
                let mut co = conns.checkout(|| opts.connect()).await?;
                let rows = co.conn().fetch_all(q).await?;
                co.done();
                rows.iter()
                    .map(|r| r.try_get(0))
                    .collect::<Result<_, _>>()?
            }
        };
        Ok(rows)
    }

    /// `Ok(Some(error))` when the lease table is missing or lacks columns.
    async fn schema_problem(&self) -> Result<Option<AcquireError>, Failure> {
        let columns = self.timed("schema check", self.column_names()).await?;
        let engine = self.engine();
        let fix = format!(
            "create it with `SqlStrategy::ensure_pool(&pool)` (or `ensure_table()`), or apply \
             lease-sql/migrations/{engine}/0001_leasehold_leases.sql (written for the default \
             table name leasehold_leases)"
        );
        if columns.is_empty() {
            return Ok(Some(AcquireError::MissingSchema {
                what: format!(
                    "the lease table {} does not exist ({engine})",
                    self.inner.table
                ),
                fix,
            }));
        }
        let missing: Vec<&str> = COLUMNS
            .iter()
            .copied()
            .filter(|c| !columns.iter().any(|have| have.eq_ignore_ascii_case(c)))
            .collect();
        if missing.is_empty() {
            Ok(None)
        } else {
            Ok(Some(AcquireError::MissingSchema {
                what: format!(
                    "table {} is not a leasehold lease table: it lacks the columns {}",
                    self.inner.table,
                    missing.join(", ")
                ),
                fix: format!(
                    "choose another table with `SqlConfig::table(..)`, or drop/rename this one \
                     and {fix}"
                ),
            }))
        }
    }

    /// Turns a classified failure into the acquisition error a caller acts on.
    async fn to_acquire_error(&self, f: Failure) -> AcquireError {
        match f {
            Failure::Transient(m) => AcquireError::Unreachable(Reason::new(m)),
            Failure::Contention(m) => AcquireError::Contention(Reason::new(m)),
            Failure::Schema(m) => match self.schema_problem().await {
                Ok(Some(e)) => e,
                Ok(None) => AcquireError::MissingSchema {
                    what: format!("the lease table {} is not usable: {m}", self.inner.table),
                    fix: format!(
                        "check its column types against \
                         lease-sql/migrations/{}/0001_leasehold_leases.sql",
                        self.engine()
                    ),
                },
                Err(check) => AcquireError::Unreachable(Reason::new(format!(
                    "{m}; and checking the schema failed: {}",
                    check.text()
                ))),
            },
            Failure::Final(m) => AcquireError::Misconfigured {
                what: m,
                fix: "check the database URL, the user's privileges on the lease table and the \
                      server version"
                    .to_owned(),
            },
        }
    }

    /// One acquisition attempt: `Ok(None)` when no free slot was found.
    async fn try_acquire(
        &self,
        pool: &PoolSpec,
        token: &Token,
    ) -> Result<Option<(u32, u64)>, Failure> {
        let engine = self.engine();
        // MySQL/MariaDB lock every row a `FOR UPDATE` scan passes over, even the
        // taken ones it then skips: hundreds of acquirers all scanning from slot 0
        // is quadratic lock traffic. There each attempt starts at a random slot
        // and wraps around (a second round trip only when the upper part is full).
        // PostgreSQL (MVCC) and SQLite (one writer) take the lowest free slot.
        if engine == Engine::MySql && pool.size() > 1 {
            let bytes = Token::random();
            let b = bytes.as_bytes();
            let start = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) % pool.size();
            if let Some(g) = self.try_range(pool, token, start, pool.size()).await? {
                return Ok(Some(g));
            }
            if start == 0 {
                return Ok(None);
            }
            return self.try_range(pool, token, 0, start).await;
        }
        self.try_range(pool, token, 0, pool.size()).await
    }

    /// One acquisition round trip over slots `from..to`.
    async fn try_range(
        &self,
        pool: &PoolSpec,
        token: &Token,
        from: u32,
        to: u32,
    ) -> Result<Option<(u32, u64)>, Failure> {
        let sql = self
            .inner
            .sql
            .acquire_text(pool, token.as_bytes(), from, to);
        let engine = self.engine();
        let raw = sqlx::raw_sql(&sql);
        match &self.inner.db {
            Db::Postgres { conns, opts, .. } => {
                let rows = self
                    .timed("acquire", async {
                        let mut co = conns.checkout(|| opts.connect()).await?;
                        let rows = co.conn().fetch_all(raw).await?;
                        co.done();
                        Ok(rows)
                    })
                    .await?;
                rows.first()
                    .map(|r| decode_grant::<_, i32, i64>(engine, r))
                    .transpose()
            }
            Db::MySql {
                conns,
                opts,
                session,
                ..
            } => {
                // A failure or timeout inside the multi-statement transaction
                // drops the connection (see conns.rs): the server rolls back.
                let rows = self
                    .timed("acquire", async {
                        let mut co = conns.checkout(|| mysql_connect(opts, session)).await?;
                        let rows = co.conn().fetch_all(raw).await?;
                        co.done();
                        Ok(rows)
                    })
                    .await?;
                rows.first()
                    .map(|r| decode_grant::<_, u32, u64>(engine, r))
                    .transpose()
            }
            Db::Sqlite { conns, opts, .. } => {
                let rows = self
                    .timed("acquire", async {
                        let mut co = conns.checkout(|| opts.connect()).await?;
                        let rows = co.conn().fetch_all(raw).await?;
                        co.done();
                        Ok(rows)
                    })
                    .await?;
                rows.first()
                    .map(|r| decode_grant::<_, i64, i64>(engine, r))
                    .transpose()
            }
        }
    }

    async fn count_rows(&self, pool: &PoolSpec) -> Result<u64, Failure> {
        let sql = self.inner.sql.count.as_str();
        let name = pool.name().as_str();
        let n: i64 = self
            .timed("count pool rows", async {
                let row = match &self.inner.db {
                    Db::Postgres { conns, opts, .. } => {
                        let q = sqlx::query(sql).bind(name).bind(slot_i32(pool.size()));
                        let mut co = conns.checkout(|| opts.connect()).await?;
                        let r = co.conn().fetch_one(q).await?.try_get(0)?;
                        co.done();
                        r
                    }
                    Db::MySql {
                        conns,
                        opts,
                        session,
                        ..
                    } => {
                        let q = sqlx::query(sql).bind(name).bind(pool.size());
                        let mut co = conns.checkout(|| mysql_connect(opts, session)).await?;
                        let r = co.conn().fetch_one(q).await?.try_get(0)?;
                        co.done();
                        r
                    }
                    Db::Sqlite { conns, opts, .. } => {
                        let q = sqlx::query(sql).bind(name).bind(i64::from(pool.size()));
                        let mut co = conns.checkout(|| opts.connect()).await?;
                        let r = co.conn().fetch_one(q).await?.try_get(0)?;
                        co.done();
                        r
                    }
                };
                Ok(row)
            })
            .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Runs the renew or release statement; the number of rows it matched.
    async fn owned_update(
        &self,
        pool: &PoolSpec,
        grant: &Grant,
        renew: bool,
    ) -> Result<u64, Failure> {
        let sql = if renew {
            self.inner.sql.renew.as_str()
        } else {
            self.inner.sql.release.as_str()
        };
        let name = pool.name().as_str();
        let token = grant.token.as_bytes().as_slice();
        let micros = i64::try_from(pool.ttl().as_micros()).unwrap_or(i64::MAX);
        let what = if renew { "renew" } else { "release" };
        self.timed(what, async {
            let done = match &self.inner.db {
                Db::Postgres { conns, opts, .. } => {
                    let mut q = sqlx::query(sql);
                    if renew {
                        q = q.bind(micros);
                    }
                    let q = q.bind(name).bind(slot_i32(grant.slot)).bind(token);
                    let mut co = conns.checkout(|| opts.connect()).await?;
                    let n = co.conn().execute(q).await?.rows_affected();
                    co.done();
                    n
                }
                Db::MySql {
                    conns,
                    opts,
                    session,
                    ..
                } => {
                    let mut q = sqlx::query(sql);
                    if renew {
                        q = q.bind(micros);
                    }
                    let q = q.bind(name).bind(grant.slot).bind(token);
                    let mut co = conns.checkout(|| mysql_connect(opts, session)).await?;
                    let n = co.conn().execute(q).await?.rows_affected();
                    co.done();
                    n
                }
                Db::Sqlite { conns, opts, .. } => {
                    let mut q = sqlx::query(sql);
                    if renew {
                        q = q.bind(sqlite_modifier(pool.ttl()));
                    }
                    let q = q.bind(name).bind(i64::from(grant.slot)).bind(token);
                    let mut co = conns.checkout(|| opts.connect()).await?;
                    let n = co.conn().execute(q).await?.rows_affected();
                    co.done();
                    n
                }
            };
            Ok(done)
        })
        .await
    }
}

fn decode_grant<R, S, F>(engine: Engine, row: &R) -> Result<(u32, u64), Failure>
where
    R: Row,
    usize: sqlx::ColumnIndex<R>,
    S: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database> + TryInto<u32>,
    F: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database> + TryInto<u64>,
{
    let slot: S = row
        .try_get(0)
        .map_err(|e| classify(engine, "acquire: decoding slot", &e))?;
    let fence: F = row
        .try_get(1)
        .map_err(|e| classify(engine, "acquire: decoding fence", &e))?;
    let slot = slot
        .try_into()
        .map_err(|_| Failure::Schema("acquire: slot out of range".to_owned()))?;
    let fence = fence
        .try_into()
        .map_err(|_| Failure::Schema("acquire: negative fence".to_owned()))?;
    Ok((slot, fence))
}

fn slot_i32(slot: u32) -> i32 {
    i32::try_from(slot).unwrap_or(i32::MAX)
}

fn unsupported(what: String, fix: &str) -> AcquireError {
    AcquireError::UnsupportedServer {
        what,
        fix: fix.to_owned(),
    }
}

fn check_mysql_version(version: &str) -> Result<(), AcquireError> {
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

/// Connect-time errors: unreachable (retryable) or misconfigured (final).
async fn guard_connect<T>(
    engine: Engine,
    url: &str,
    budget: Duration,
    fut: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, AcquireError> {
    let what = format!("connecting to {}", redact(url));
    match tokio::time::timeout(budget, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(match classify(engine, &what, &e) {
            Failure::Transient(m) | Failure::Contention(m) => {
                AcquireError::Unreachable(Reason::new(m))
            }
            Failure::Schema(m) | Failure::Final(m) => AcquireError::Misconfigured {
                what: m,
                fix: "check the database URL, user, password and database name".to_owned(),
            },
        }),
        Err(_) => Err(AcquireError::Unreachable(Reason::new(format!(
            "{what}: no answer within {budget:?}"
        )))),
    }
}

/// The URL without credentials or query parameters.
pub(crate) fn redact(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let rest = rest.split('?').next().unwrap_or("");
            let (auth, host) = rest.split_once('/').map_or((rest, ""), |(a, h)| (a, h));
            let auth = auth.rsplit_once('@').map_or(auth, |(_, hp)| hp);
            if host.is_empty() && !rest.contains('/') {
                format!("{scheme}://{auth}")
            } else {
                format!("{scheme}://{auth}/{host}")
            }
        }
        None => url.to_owned(),
    }
}

fn store_identity(engine: Engine, url: &str) -> String {
    match engine {
        Engine::Sqlite => {
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
        _ => redact(url),
    }
}

impl fmt::Debug for SqlStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlStrategy")
            .field("store", &self.inner.identity)
            .field("server", &self.inner.version)
            .finish_non_exhaustive()
    }
}

impl Strategy for SqlStrategy {
    async fn acquire(&self, pool: &PoolSpec, _ceiling: Floor) -> Result<Grant, AcquireError> {
        let mut populated = false;
        loop {
            let token = Token::random();
            match self.try_acquire(pool, &token).await {
                Ok(Some((slot, fence))) => {
                    // Floors are not persisted here yet (issue 12).
                    return Ok(Grant::new(slot, token, Fence(fence), pool.ttl()));
                }
                Ok(None) => {
                    // No free slot: either the pool is full, or it lacks rows
                    // (never prepared, or it grew). Rare path: count, fill, retry once.
                    let rows = match self.count_rows(pool).await {
                        Ok(n) => n,
                        Err(f) => return Err(self.to_acquire_error(f).await),
                    };
                    if rows >= u64::from(pool.size()) || populated {
                        return Err(AcquireError::PoolExhausted {
                            pool: pool.name().to_string(),
                            size: pool.size(),
                        });
                    }
                    self.populate(pool, 0).await?;
                    populated = true;
                }
                Err(f) => return Err(self.to_acquire_error(f).await),
            }
        }
    }

    async fn renew(&self, pool: &PoolSpec, grant: &Grant, _ceiling: Floor) -> Renewal {
        match self.owned_update(pool, grant, true).await {
            Ok(0) => Renewal::Lost(Reason::new(format!(
                "slot {} of pool {} is no longer held by this token in {} (expired, taken or \
                 revoked)",
                grant.slot,
                pool.name(),
                self.inner.table
            ))),
            Ok(_) => Renewal::renewed(pool.ttl()),
            Err(f) => Renewal::Retry(Reason::new(f.text().to_owned())),
        }
    }

    async fn release(&self, pool: &PoolSpec, grant: &Grant, _issued: Floor) -> Release {
        match self.owned_update(pool, grant, false).await {
            Ok(0) => Release::NotHeld,
            Ok(_) => Release::Released,
            Err(f) => Release::Retry(Reason::new(f.text().to_owned())),
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::coordinated(self.engine() != Engine::Sqlite, SQL_MIN_TTL)
    }

    fn identity(&self) -> String {
        self.inner.identity.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction() {
        assert_eq!(
            redact("postgres://u:secret@h:5/db?sslmode=require"),
            "postgres://h:5/db"
        );
        assert_eq!(
            redact("mysql://root@127.0.0.1:3306/x"),
            "mysql://127.0.0.1:3306/x"
        );
        assert_eq!(redact("postgres://h"), "postgres://h");
        assert!(check_mysql_version("10.11.6-MariaDB-0+deb12u1").is_ok());
        assert!(check_mysql_version("10.5.2-MariaDB").is_err());
        assert!(check_mysql_version("8.0.36").is_ok());
        assert!(check_mysql_version("5.7.44").is_err());
    }
}
