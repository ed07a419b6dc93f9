//! The SQL backend, generic over the [`Dialect`]: every lease operation is
//! written here once. [`Ops`] is its object-safe face, where the engine is
//! erased (see `SqlStrategy`).

use std::any::Any;
use std::future::Future;
use std::time::Duration;

use leasehold_core::{
    AcquireError, BoxFuture, Durability, Fence, Floor, Grant, InspectError, PoolSpec, Reason,
    Release, Renewal, SlotInfo, Token,
};
use sqlx::{ColumnIndex, Connection, Execute, Executor, Row};

use crate::config::SqlConfig;
use crate::conns::Conns;
use crate::dialect::{Dialect, with_sqlx_bounds};
use crate::engine::Engine;
use crate::error::SqlError;
use crate::failure::Failure;
use crate::ident::TableName;
use crate::statements::{
    COLUMNS, FENCE_ISSUER_COLUMNS, FLOOR_COLUMNS, ID_FORMAT_COLUMNS, POOL_ROW, SPAN_COLUMNS,
    Statements, TOMBSTONE, floor_value,
};

/// Rows inserted per statement when a pool is populated.
const POPULATE_CHUNK: u32 = 1000;

/// What a strategy is, whatever its engine.
#[derive(Debug)]
pub(crate) struct Info {
    pub(crate) engine: Engine,
    pub(crate) networked: bool,
    pub(crate) table: TableName,
    pub(crate) op_timeout: Duration,
    pub(crate) identity: String,
    pub(crate) version: String,
    /// The granularity of the expiry the engine stores.
    pub(crate) resolution: Duration,
    /// Whether the server keeps acknowledged writes across a crash, as read
    /// at connect.
    pub(crate) durability: Durability,
}

/// The object-safe face of a [`Backend`]: the one point where the engine is
/// erased.
pub(crate) trait Ops: Send + Sync {
    fn info(&self) -> &Info;
    fn acquire<'a>(
        &'a self,
        pool: &'a PoolSpec,
        ceiling: Floor,
    ) -> BoxFuture<'a, Result<Grant, AcquireError>>;
    fn renew<'a>(
        &'a self,
        pool: &'a PoolSpec,
        grant: &'a Grant,
        ceiling: Floor,
    ) -> BoxFuture<'a, Renewal>;
    fn release<'a>(
        &'a self,
        pool: &'a PoolSpec,
        grant: &'a Grant,
        issued: Floor,
    ) -> BoxFuture<'a, Release>;
    fn revoke<'a>(&'a self, pool: &'a PoolSpec, slot: u32)
    -> BoxFuture<'a, Result<bool, SqlError>>;
    fn inspect<'a>(
        &'a self,
        pool: &'a PoolSpec,
    ) -> BoxFuture<'a, Result<Vec<SlotInfo>, InspectError>>;
    fn ensure_table(&self) -> BoxFuture<'_, Result<(), AcquireError>>;
    fn check_schema(&self) -> BoxFuture<'_, Result<(), AcquireError>>;
    fn ensure_pool<'a>(&'a self, pool: &'a PoolSpec) -> BoxFuture<'a, Result<(), AcquireError>>;
    fn ensure_fence_table<'a>(&'a self, t: &'a TableName) -> BoxFuture<'a, Result<(), SqlError>>;
    fn close(&self) -> BoxFuture<'_, ()>;
    /// The caller's `sqlx::Pool<D>`.
    fn pool(&self) -> &(dyn Any + Send + Sync);
}

/// The lease connections (own, see `conns.rs`), how to open more, and a lazy
/// sqlx pool handed to callers for their own writes.
pub(crate) struct Backend<D: Dialect> {
    conns: Conns<D::Connection>,
    opts: D::Opts,
    pool: sqlx::Pool<D>,
    sql: Statements,
    info: Info,
}

with_sqlx_bounds!([impl<D> Backend<D>] {
    /// Opens the database `config` names, keeping the first connection for
    /// the first operation.
    pub(crate) async fn connect(config: &SqlConfig, table: TableName) -> Result<Self, SqlError> {
        let opened = D::open(config).await?;
        let mut backend = Self {
            conns: Conns::new(config.max_connections, Some(opened.conn)),
            opts: opened.opts,
            pool: opened.pool,
            sql: Statements::new::<D>(&table, &opened.version),
            info: Info {
                engine: D::ENGINE,
                networked: D::NETWORKED,
                identity: format!("{}#{table}", D::identity(&config.url)),
                table,
                op_timeout: config.op_timeout,
                version: opened.version,
                resolution: D::RESOLUTION,
                durability: Durability::default(),
            },
        };
        backend.check_server(config).await?;
        Ok(backend)
    }

    /// Reads the durability settings and checks that the restart guard can
    /// read the server's start, in one round trip; refuses a server that
    /// can forget acknowledged writes when `config` requires durability.
    async fn check_server(&mut self, config: &SqlConfig) -> Result<(), SqlError> {
        let version = self.info.version.clone();
        let settings = D::durability_columns(&version);
        let guard = D::resume_in_micros("1000000", &version);
        let columns: Vec<String> = settings
            .map(str::to_owned)
            .into_iter()
            .chain(guard.as_ref().map(|g| format!("CAST({g} AS {})", D::TEXT_TYPE)))
            .collect();
        if columns.is_empty() {
            return Ok(());
        }
        let sql = format!("SELECT {}", columns.join(", "));
        let row = tokio::time::timeout(self.info.op_timeout, self.fetch_one(sqlx::raw_sql(&sql)))
            .await
            .map_err(|_| SqlError::Timeout(self.info.op_timeout))?
            .map_err(|e| match D::classify("reading the server's settings", &e) {
                Failure::Transient(m) | Failure::Contention(m) => {
                    SqlError::Unreachable(Reason::new(m))
                }
                Failure::Schema(m) | Failure::Final(m) => SqlError::Refused {
                    what: m,
                    fix: "let the lease user read the server's durability settings and its \
                          uptime (MySQL 8: SELECT on performance_schema.global_status)"
                        .to_owned(),
                },
            })?;
        // Every column of the row: the settings (as many as the dialect's
        // query selects), then the guard's answer when there is a guard.
        let values = (0..row.len())
            .map(|i| row.try_get::<Option<String>, _>(i))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| SqlError::Refused {
                what: format!("reading the server's durability settings ({sql}): {e}"),
                fix: "report this as a leasehold bug, with the server version".to_owned(),
            })?;
        let settings_read: Vec<String> = values
            .iter()
            .take(values.len() - usize::from(guard.is_some()))
            .map(|v| v.clone().unwrap_or_default())
            .collect();
        self.info.durability = Durability {
            risks: D::durability_risks(&settings_read),
        };
        let forgetful = !self.info.durability.is_durable();
        if config.require_durable && forgetful {
            return Err(SqlError::NotDurable(self.info.durability.clone()));
        }
        // A server that can forget loses, in one crash, the record of the
        // pool's longest restart span with the claims: refused unless the
        // configuration says all holders share one timing, or turns the
        // guard off knowingly.
        if forgetful && config.restart_guard && !config.assume_one_timing {
            return Err(SqlError::Forgetful(self.info.durability.clone()));
        }
        // A server that keeps what it acknowledged forgets no lease on a
        // restart: only one that can forget needs the guard.
        // (Rule 12 broken on purpose by the campaign's planted bugs; a
        // constant false otherwise.)
        self.sql.guarded = guard.is_some()
            && config.restart_guard
            && forgetful
            && !leasehold_core::plant::active(leasehold_core::plant::Plant::NoRestartGuard);
        if self.sql.guarded && values.last().is_none_or(Option::is_none) {
            return Err(SqlError::UnsupportedServer {
                what: format!(
                    "{version} does not tell when it started, which the restart guard needs"
                ),
                fix: "on MySQL 8 enable performance_schema (the default) and let the lease user \
                      read performance_schema.global_status"
                    .to_owned(),
            });
        }
        #[cfg(feature = "tracing")]
        if !self.info.durability.is_durable() {
            tracing::warn!(
                store = %self.info.identity,
                server = %version,
                durability = %self.info.durability,
                "the lease store can forget leases it acknowledged after a crash; the restart \
                 guard holds grants back after a restart, but a failover is not covered"
            );
        }
        Ok(())
    }

    /// Runs `q` on a lease connection; the rows it changed.
    async fn execute<'q, E: Execute<'q, D> + 'q>(&self, q: E) -> Result<u64, sqlx::Error> {
        let mut co = self.conns.checkout(|| D::connect(&self.opts)).await?;
        let n = D::rows_affected(&co.conn().execute(q).await?);
        co.done();
        Ok(n)
    }

    /// Runs `q` on a lease connection; the rows it answered.
    async fn fetch_all<'q, E: Execute<'q, D> + 'q>(
        &self,
        q: E,
    ) -> Result<Vec<D::Row>, sqlx::Error> {
        let mut co = self.conns.checkout(|| D::connect(&self.opts)).await?;
        let rows = co.conn().fetch_all(q).await?;
        co.done();
        Ok(rows)
    }

    /// Runs `q` on a lease connection; the one row it answered.
    async fn fetch_one<'q, E: Execute<'q, D> + 'q>(&self, q: E) -> Result<D::Row, sqlx::Error> {
        let mut co = self.conns.checkout(|| D::connect(&self.opts)).await?;
        let row = co.conn().fetch_one(q).await?;
        co.done();
        Ok(row)
    }

    /// Runs `fut` with the operation timeout; classifies its error.
    async fn timed<T>(
        &self,
        what: &str,
        fut: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, Failure> {
        self.bounded(what, self.info.op_timeout, fut).await
    }

    /// Runs `fut` within `budget`; classifies its error.
    async fn bounded<T>(
        &self,
        what: &str,
        budget: Duration,
        fut: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, Failure> {
        match tokio::time::timeout(budget, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(D::classify(what, &e)),
            Err(_) => Err(Failure::timeout(what, budget)),
        }
    }

    /// The budget of schema changes.
    fn ddl_budget(&self) -> Duration {
        self.info.op_timeout.max(Duration::from_secs(30))
    }

    async fn ensure_table(&self) -> Result<(), AcquireError> {
        let ddl = D::create_table(&self.sql.table);
        if let Err(f) = self
            .bounded(
                "schema",
                self.ddl_budget(),
                self.execute(sqlx::raw_sql(&ddl)),
            )
            .await
        {
            // Concurrent CREATE TABLE IF NOT EXISTS can collide in PostgreSQL's
            // catalog; the table then exists, which the check below confirms.
            match self.schema_problem().await {
                Ok(None | Some(Schema::Floorless(_))) => {}
                _ => return Err(self.to_acquire_error(f).await),
            }
        }
        self.add_floor_columns().await
    }

    /// Migrates an older table: adds the floor, span and ID-format columns
    /// it lacks (the statements of `migrations/<engine>/0002_leasehold_floor.sql`,
    /// `0003_leasehold_span.sql` and `0005_leasehold_id_format.sql`). Rows
    /// keep their leases, fences and holders, and get floor 0, span 0 and no
    /// format. Safe to run from many nodes at once, and beside older
    /// processes still using the table (their statements do not name the
    /// new columns).
    async fn add_floor_columns(&self) -> Result<(), AcquireError> {
        let has = |columns: &[String], c: &str| columns.iter().any(|h| h.eq_ignore_ascii_case(c));
        let columns = match self.timed("schema check", self.column_names()).await {
            Ok(c) => c,
            Err(f) => return Err(self.to_acquire_error(f).await),
        };
        for column in FLOOR_COLUMNS
            .iter()
            .chain(&SPAN_COLUMNS)
            .chain(&ID_FORMAT_COLUMNS)
            .filter(|c| !has(&columns, c))
        {
            let ddl = if ID_FORMAT_COLUMNS.contains(column) {
                D::add_format_column(&self.sql.table)
            } else {
                D::add_floor_column(&self.sql.table, column)
            };
            if let Err(f) = self
                .bounded(
                    "adding the floor columns",
                    self.ddl_budget(),
                    self.execute(sqlx::raw_sql(&ddl)),
                )
                .await
            {
                // Another node may have added it in the meantime.
                match self.timed("schema check", self.column_names()).await {
                    Ok(now) if has(&now, column) => {}
                    _ => return Err(self.to_acquire_error(f).await),
                }
            }
        }
        Ok(())
    }

    async fn populate(&self, pool: &PoolSpec) -> Result<(), AcquireError> {
        let mut start = 0;
        while start < pool.size() {
            let end = pool.size().min(start.saturating_add(POPULATE_CHUNK));
            let sql = self.sql.populate::<D>(pool.name().as_str(), start, end);
            if let Err(f) = self
                .bounded(
                    "schema",
                    self.ddl_budget(),
                    self.execute(sqlx::raw_sql(&sql)),
                )
                .await
            {
                return Err(self.to_acquire_error(f).await);
            }
            start = end;
        }
        Ok(())
    }

    async fn revoke(&self, pool: &PoolSpec, slot: u32) -> Result<bool, SqlError> {
        let q = sqlx::query(&self.sql.revoke)
            .bind(pool.name().as_str())
            .bind(D::slot(slot));
        let n = tokio::time::timeout(self.info.op_timeout, self.execute(q))
            .await
            .map_err(|_| SqlError::Timeout(self.info.op_timeout))??;
        Ok(n > 0)
    }

    async fn inspect(&self, pool: &PoolSpec) -> Result<Vec<SlotInfo>, InspectError> {
        let q = sqlx::query(&self.sql.inspect).bind(pool.name().as_str());
        let rows = self
            .timed("inspect", self.fetch_all(q))
            .await
            .map_err(|f| InspectError::Store(Reason::new(f.text().to_owned())))?;
        rows.iter()
            .map(|row| slot_info::<D>(row, pool))
            .collect::<Result<_, _>>()
            .map_err(|e| InspectError::Store(Reason::new(format!("inspect: {e}"))))
    }

    /// Creates the fence table `t`, or adds the issuer columns to one an
    /// older version created (the statements of
    /// `migrations/<engine>/0004_leasehold_fence_issuer.sql`): its rows keep
    /// their fences and take the issuer of their next fenced write. Safe to
    /// run from many nodes at once.
    async fn ensure_fence_table(&self, t: &TableName) -> Result<(), SqlError> {
        let quoted = t.quoted(D::QUOTE);
        let budget = self.ddl_budget();
        let run = |sql: String| async move {
            tokio::time::timeout(budget, sqlx::raw_sql(&sql).execute(&self.pool))
                .await
                .map_err(|_| SqlError::Timeout(budget))?
                .map(drop)
                .map_err(SqlError::from)
        };
        let has = |columns: &[String], c: &str| columns.iter().any(|h| h.eq_ignore_ascii_case(c));
        let created = run(D::create_fence_table(&quoted)).await;
        let columns = self.columns_of(t.as_str()).await?;
        if columns.is_empty() {
            // Not there even after CREATE: say why.
            created?;
        }
        for column in FENCE_ISSUER_COLUMNS.iter().filter(|c| !has(&columns, c)) {
            if let Err(e) = run(D::add_fence_issuer_column(&quoted, column)).await {
                // Another node may have added it in the meantime.
                if !has(&self.columns_of(t.as_str()).await?, column) {
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// The lease table's column names.
    async fn column_names(&self) -> Result<Vec<String>, sqlx::Error> {
        self.columns_of(self.info.table.as_str()).await
    }

    /// The column names of the table `table` (none when it does not exist).
    async fn columns_of(&self, table: &str) -> Result<Vec<String>, sqlx::Error> {
        let q = sqlx::query(D::COLUMNS).bind(table);
        let rows = self.fetch_all(q).await?;
        rows.iter().map(|r| r.try_get(0)).collect()
    }

    /// `Ok(Some(problem))` when the lease table is missing, lacks columns,
    /// or is a 0.1 table without the floor columns.
    async fn schema_problem(&self) -> Result<Option<Schema>, Failure> {
        let columns = self.timed("schema check", self.column_names()).await?;
        let (engine, table) = (D::ENGINE, &self.info.table);
        let fix = format!(
            "create it with `SqlStrategy::ensure_pool(&pool)` (or `ensure_table()`), or apply \
             lease-sql/migrations/{engine}/0001_leasehold_leases.sql, \
             0002_leasehold_floor.sql, 0003_leasehold_span.sql and 0005_leasehold_id_format.sql \
             (written for the default table name leasehold_leases)"
        );
        if columns.is_empty() {
            return Ok(Some(Schema::Broken(AcquireError::MissingSchema {
                what: format!("the lease table {table} does not exist ({engine})"),
                fix,
            })));
        }
        let lacks = |wanted: &[&'static str]| -> Vec<&'static str> {
            wanted
                .iter()
                .copied()
                .filter(|c| !columns.iter().any(|have| have.eq_ignore_ascii_case(c)))
                .collect()
        };
        let missing = lacks(&COLUMNS);
        if !missing.is_empty() {
            return Ok(Some(Schema::Broken(AcquireError::MissingSchema {
                what: format!(
                    "table {table} is not a leasehold lease table: it lacks the columns {}",
                    missing.join(", ")
                ),
                fix: format!(
                    "choose another table with `SqlConfig::table(..)`, or drop/rename this one \
                     and {fix}"
                ),
            })));
        }
        let floorless = lacks(&FLOOR_COLUMNS);
        if floorless.is_empty() {
            let spanless = lacks(&SPAN_COLUMNS);
            if spanless.is_empty() {
                let formatless = lacks(&ID_FORMAT_COLUMNS);
                if formatless.is_empty() {
                    return Ok(None);
                }
                return Ok(Some(Schema::Floorless(AcquireError::MissingSchema {
                    what: format!(
                        "the lease table {table} lacks the column {} that records the ID format \
                         of each pool, so that a process generating another format is refused \
                         (its values could equal the pool's)",
                        formatless.join(", ")
                    ),
                    fix: format!(
                        "run `SqlStrategy::ensure_table()` (or `ensure_pool(&pool)`) once, \
                         which adds it, or apply \
                         lease-sql/migrations/{engine}/0005_leasehold_id_format.sql; existing \
                         leases are kept"
                    ),
                })));
            }
            return Ok(Some(Schema::Floorless(AcquireError::MissingSchema {
                what: format!(
                    "the lease table {table} is a leasehold-sql 0.2 table: it lacks the column \
                     {} that keeps the longest TTL and clock skew of the pool's holders, which \
                     a server that can forget waits out after a restart",
                    spanless.join(", ")
                ),
                fix: format!(
                    "run `SqlStrategy::ensure_table()` (or `ensure_pool(&pool)`) once, which \
                     adds it, or apply lease-sql/migrations/{engine}/0003_leasehold_span.sql \
                     and 0005_leasehold_id_format.sql; existing leases are kept"
                ),
            })));
        }
        Ok(Some(Schema::Floorless(AcquireError::MissingSchema {
            what: format!(
                "the lease table {table} is a leasehold-sql 0.1 table: it lacks the hand-over \
                 floor columns {} that keep a slot's next holder from reissuing IDs when its \
                 clock is behind",
                floorless.join(", ")
            ),
            fix: format!(
                "run `SqlStrategy::ensure_table()` (or `ensure_pool(&pool)`) once, which adds \
                 them, or apply lease-sql/migrations/{engine}/0002_leasehold_floor.sql, \
                 0003_leasehold_span.sql and 0005_leasehold_id_format.sql; existing leases are \
                 kept"
            ),
        })))
    }

    /// Turns a classified failure into the acquisition error a caller acts on.
    async fn to_acquire_error(&self, f: Failure) -> AcquireError {
        match f {
            Failure::Transient(m) => AcquireError::Unreachable(Reason::new(m)),
            Failure::Contention(m) => AcquireError::Contention(Reason::new(m)),
            Failure::Schema(m) => match self.schema_problem().await {
                Ok(Some(Schema::Broken(e) | Schema::Floorless(e))) => e,
                Ok(None) => AcquireError::MissingSchema {
                    what: format!("the lease table {} is not usable: {m}", self.info.table),
                    fix: format!(
                        "check its column types against \
                         lease-sql/migrations/{}/0001_leasehold_leases.sql",
                        D::ENGINE
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

    async fn acquire(&self, pool: &PoolSpec, ceiling: Floor) -> Result<Grant, AcquireError> {
        let mut populated = false;
        loop {
            let token = Token::random();
            match self.try_acquire(pool, &token, ceiling).await {
                Ok(Attempt::OtherFormat(recorded)) => {
                    return Err(AcquireError::OtherIdFormat {
                        pool: pool.name().to_string(),
                        recorded,
                        ours: pool.id_format().map(|f| f.text().to_owned()).unwrap_or_default(),
                    });
                }
                Ok(Attempt::Claimed(claim)) => {
                    let ttl = applied_ttl::<D>(pool.ttl());
                    return Ok(Grant::new(claim.slot, token, Fence(claim.fence), ttl)
                        .with_floor(claim.floor)
                        .with_store_time(store_time(claim.now)));
                }
                Ok(Attempt::NoFreeSlot) => {
                    // No free slot: the restart guard holds, or the pool is
                    // full, or it lacks rows (never prepared, or it grew).
                    // Rare path: check, count, fill, retry once.
                    match self.resume_in(pool).await {
                        Ok(Some(resume_in)) => {
                            return Err(AcquireError::StoreRestarted { resume_in });
                        }
                        Ok(None) => {}
                        Err(f) => return Err(self.to_acquire_error(f).await),
                    }
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
                    self.populate(pool).await?;
                    populated = true;
                }
                Err(f) => return Err(self.to_acquire_error(f).await),
            }
        }
    }

    /// One acquisition attempt.
    async fn try_acquire(
        &self,
        pool: &PoolSpec,
        token: &Token,
        ceiling: Floor,
    ) -> Result<Attempt, Failure> {
        // Where a scan locks the rows it skips (`Dialect::RANDOM_START`), each
        // attempt starts at a random slot and wraps around: a second round trip
        // only when the upper part is full.
        if D::RANDOM_START && pool.size() > 1 {
            let bytes = Token::random();
            let b = bytes.as_bytes();
            let start = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) % pool.size();
            let first = self
                .try_range(pool, token, ceiling, start, pool.size())
                .await?;
            if !matches!(first, Attempt::NoFreeSlot) || start == 0 {
                return Ok(first);
            }
            return self.try_range(pool, token, ceiling, 0, start).await;
        }
        self.try_range(pool, token, ceiling, 0, pool.size()).await
    }

    /// One acquisition round trip over slots `from..to`.
    async fn try_range(
        &self,
        pool: &PoolSpec,
        token: &Token,
        ceiling: Floor,
        from: u32,
        to: u32,
    ) -> Result<Attempt, Failure> {
        let sql = self
            .sql
            .acquire::<D>(pool, token.as_bytes(), ceiling.0, from, to);
        let rows = self
            .timed("acquire", self.fetch_all(sqlx::raw_sql(&sql)))
            .await?;
        // The claim's row (four columns) if it claimed a slot, then, when the
        // claim declares a format, the pool's recorded format (one column).
        let (recorded, claimed): (Vec<_>, Vec<_>) = rows.iter().partition(|r| r.len() == 1);
        if let Some(row) = claimed.first() {
            return decode_grant::<D>(row).map(Attempt::Claimed);
        }
        let Some(ours) = pool.id_format() else {
            return Ok(Attempt::NoFreeSlot);
        };
        let recorded: Option<String> = match recorded.first() {
            Some(row) => row
                .try_get(0)
                .map_err(|e| D::classify("acquire: decoding the recorded ID format", &e))?,
            None => None,
        };
        match recorded {
            Some(r) if r == ours.text() => Ok(Attempt::NoFreeSlot),
            Some(r) => Ok(Attempt::OtherFormat(r)),
            // The claim inserts the record before it reads it: a missing
            // one is a table someone else changed.
            None => Err(Failure::Final(format!(
                "acquire: the ID format of pool {} is not recorded in {} right after the claim \
                 recorded it (the row of slot {POOL_ROW} is missing or its id_format is NULL)",
                pool.name(),
                self.info.table
            ))),
        }
    }

    /// How long the restart guard still holds for leases of `pool`, if it
    /// does.
    async fn resume_in(&self, pool: &PoolSpec) -> Result<Option<Duration>, Failure> {
        let Some(expr) = self.sql.resume_in::<D>(pool) else {
            return Ok(None);
        };
        let sql = format!("SELECT {expr}");
        let micros: Option<i64> = self
            .timed("restart guard", async {
                self.fetch_one(sqlx::raw_sql(&sql)).await?.try_get(0)
            })
            .await?;
        let micros = micros.ok_or_else(|| {
            Failure::Final(format!(
                "the restart guard cannot read when {} started ({sql} answered NULL)",
                self.info.version
            ))
        })?;
        Ok(u64::try_from(micros)
            .ok()
            .filter(|&m| m > 0)
            .map(Duration::from_micros))
    }

    async fn count_rows(&self, pool: &PoolSpec) -> Result<u64, Failure> {
        let q = sqlx::query(&self.sql.count)
            .bind(pool.name().as_str())
            .bind(D::slot(pool.size()));
        let n: i64 = self
            .timed("count pool rows", async {
                self.fetch_one(q).await?.try_get(0)
            })
            .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// One renewal: the server's time when it renewed (µs since the Unix
    /// epoch), or `None` when the token no longer owns a live lease.
    async fn renew_once(
        &self,
        pool: &PoolSpec,
        grant: &Grant,
        ceiling: Floor,
    ) -> Result<Option<i64>, Failure> {
        let decode = |row: &D::Row, at: usize| -> Result<i64, Failure> {
            row.try_get(at)
                .map_err(|e| D::classify("renew: decoding the answer", &e))
        };
        if D::RENEW_AS_TEXT {
            let sql =
                self.sql
                    .renew_text::<D>(pool, grant.slot, grant.token.as_bytes(), ceiling.0);
            let rows = self
                .timed("renew", self.fetch_all(sqlx::raw_sql(&sql)))
                .await?;
            let row = rows
                .first()
                .ok_or_else(|| Failure::Final("renew: no answer to the row count".to_owned()))?;
            return (decode(row, 0)? > 0).then(|| decode(row, 1)).transpose();
        }
        let q = sqlx::query(&self.sql.renew)
            .bind(D::ttl(pool.ttl()))
            .bind(floor_value(ceiling.0))
            .bind(pool.name().as_str())
            .bind(D::slot(grant.slot))
            .bind(grant.token.as_bytes().as_slice());
        let rows = self.timed("renew", self.fetch_all(q)).await?;
        rows.first().map(|row| decode(row, 0)).transpose()
    }

    async fn renew(&self, pool: &PoolSpec, grant: &Grant, ceiling: Floor) -> Renewal {
        match self.renew_once(pool, grant, ceiling).await {
            Ok(None) => Renewal::Lost(Reason::new(format!(
                "slot {} of pool {} is no longer held by this token in {} (expired, taken or \
                 revoked)",
                grant.slot,
                pool.name(),
                self.info.table
            ))),
            Ok(Some(now)) => Renewal::renewed(applied_ttl::<D>(pool.ttl()))
                .with_store_time(store_time(now)),
            Err(f) => Renewal::Retry(Reason::new(f.text().to_owned())),
        }
    }

    async fn release(&self, pool: &PoolSpec, grant: &Grant, issued: Floor) -> Release {
        let q = sqlx::query(&self.sql.release)
            .bind(floor_value(issued.0))
            .bind(pool.name().as_str())
            .bind(D::slot(grant.slot))
            .bind(grant.token.as_bytes().as_slice());
        match self.timed("release", self.execute(q)).await {
            Ok(0) => Release::NotHeld,
            Ok(_) => Release::Released,
            Err(f) => Release::Retry(Reason::new(f.text().to_owned())),
        }
    }

    async fn close(&self) {
        for c in self.conns.drain().await {
            let _ = c.close().await;
        }
        self.pool.close().await;
    }
});

with_sqlx_bounds!([impl<D> Ops for Backend<D>] {
    fn info(&self) -> &Info {
        &self.info
    }

    fn acquire<'a>(
        &'a self,
        pool: &'a PoolSpec,
        ceiling: Floor,
    ) -> BoxFuture<'a, Result<Grant, AcquireError>> {
        Box::pin(self.acquire(pool, ceiling))
    }

    fn renew<'a>(
        &'a self,
        pool: &'a PoolSpec,
        grant: &'a Grant,
        ceiling: Floor,
    ) -> BoxFuture<'a, Renewal> {
        Box::pin(self.renew(pool, grant, ceiling))
    }

    fn release<'a>(
        &'a self,
        pool: &'a PoolSpec,
        grant: &'a Grant,
        issued: Floor,
    ) -> BoxFuture<'a, Release> {
        Box::pin(self.release(pool, grant, issued))
    }

    fn revoke<'a>(
        &'a self,
        pool: &'a PoolSpec,
        slot: u32,
    ) -> BoxFuture<'a, Result<bool, SqlError>> {
        Box::pin(self.revoke(pool, slot))
    }

    fn inspect<'a>(
        &'a self,
        pool: &'a PoolSpec,
    ) -> BoxFuture<'a, Result<Vec<SlotInfo>, InspectError>> {
        Box::pin(self.inspect(pool))
    }

    fn ensure_table(&self) -> BoxFuture<'_, Result<(), AcquireError>> {
        Box::pin(self.ensure_table())
    }

    fn check_schema(&self) -> BoxFuture<'_, Result<(), AcquireError>> {
        Box::pin(async move {
            match self.schema_problem().await {
                Ok(None) => Ok(()),
                Ok(Some(Schema::Broken(e) | Schema::Floorless(e))) => Err(e),
                Err(f) => Err(self.to_acquire_error(f).await),
            }
        })
    }

    fn ensure_pool<'a>(&'a self, pool: &'a PoolSpec) -> BoxFuture<'a, Result<(), AcquireError>> {
        Box::pin(async move {
            self.ensure_table().await?;
            self.populate(pool).await
        })
    }

    fn ensure_fence_table<'a>(&'a self, t: &'a TableName) -> BoxFuture<'a, Result<(), SqlError>> {
        Box::pin(self.ensure_fence_table(t))
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.close())
    }

    fn pool(&self) -> &(dyn Any + Send + Sync) {
        &self.pool
    }
});

/// One row of the inspect statement as a [`SlotInfo`]. A live lease shows its
/// holder and token prefix; a revoked one (the tombstone) shows no holder
/// but the time until its expiry, since nobody can claim it before; a free
/// or expired one shows only its fence and floor.
fn slot_info<D: Dialect>(row: &D::Row, _pool: &PoolSpec) -> Result<SlotInfo, sqlx::Error>
where
    usize: ColumnIndex<D::Row>,
    i64: for<'r> sqlx::Decode<'r, D> + sqlx::Type<D>,
    String: for<'r> sqlx::Decode<'r, D> + sqlx::Type<D>,
    Vec<u8>: for<'r> sqlx::Decode<'r, D> + sqlx::Type<D>,
{
    let slot: D::Slot = row.try_get(0)?;
    let token: Option<Vec<u8>> = row.try_get(1)?;
    let fence: D::Fence = row.try_get(2)?;
    let holder: Option<String> = row.try_get(3)?;
    let floor: i64 = row.try_get(4)?;
    let micros = |i: usize| -> Result<Option<Duration>, sqlx::Error> {
        let v: Option<i64> = row.try_get(i)?;
        Ok(v.and_then(|v| u64::try_from(v).ok())
            .map(Duration::from_micros))
    };
    let (expires_in, renewed_ago, held_for) = (micros(5)?, micros(6)?, micros(7)?);
    let info = SlotInfo::free(
        slot.try_into().unwrap_or(u32::MAX),
        Fence(fence.try_into().unwrap_or(0)),
        Floor(u64::try_from(floor).unwrap_or(0)),
    );
    let live = expires_in.filter(|d| !d.is_zero());
    Ok(match (token, live) {
        (Some(t), Some(left)) if t.as_slice() == TOMBSTONE.as_slice() => info.revoked_until(left),
        (Some(t), Some(left)) => match <[u8; 16]>::try_from(t.as_slice()) {
            Ok(bytes) => info
                .held(holder.unwrap_or_default(), &Token::from_bytes(bytes), left)
                .with_ages(renewed_ago, held_for),
            Err(_) => info,
        },
        _ => info,
    })
}

/// What is wrong with a lease table.
enum Schema {
    /// Missing, or not a lease table.
    Broken(AcquireError),
    /// A 0.1 or 0.2 table: `ensure_table` migrates it.
    Floorless(AcquireError),
}

/// What one acquisition round trip came to.
enum Attempt {
    /// A slot was claimed.
    Claimed(Claim),
    /// No slot was free (or the restart guard holds, or the pool lacks rows).
    NoFreeSlot,
    /// The pool records another ID format than the claim declares (its
    /// text): nothing was claimed.
    OtherFormat(String),
}

/// What a claim answered: the slot, its fence, its floor from before, and
/// the server's time (µs since the Unix epoch).
struct Claim {
    slot: u32,
    fence: u64,
    floor: Floor,
    now: i64,
}

/// The TTL the engine applies: `ttl` cut to its resolution (SQLite keeps
/// milliseconds), never more than asked.
fn applied_ttl<D: Dialect>(ttl: Duration) -> Duration {
    let step = D::RESOLUTION.as_nanos().max(1);
    let nanos = ttl.as_nanos() / step * step;
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// A server time in µs since the Unix epoch, as the driver compares it.
fn store_time(micros: i64) -> Duration {
    Duration::from_micros(u64::try_from(micros).unwrap_or(0))
}

fn decode_grant<D: Dialect>(row: &D::Row) -> Result<Claim, Failure>
where
    usize: ColumnIndex<D::Row>,
    i64: for<'r> sqlx::Decode<'r, D> + sqlx::Type<D>,
{
    let slot: D::Slot = row
        .try_get(0)
        .map_err(|e| D::classify("acquire: decoding slot", &e))?;
    let fence: D::Fence = row
        .try_get(1)
        .map_err(|e| D::classify("acquire: decoding fence", &e))?;
    let slot = slot
        .try_into()
        .map_err(|_| Failure::Schema("acquire: slot out of range".to_owned()))?;
    let fence = fence
        .try_into()
        .map_err(|_| Failure::Schema("acquire: negative fence".to_owned()))?;
    let floor: i64 = row
        .try_get(2)
        .map_err(|e| D::classify("acquire: decoding grant_floor_ms", &e))?;
    let now: i64 = row
        .try_get(3)
        .map_err(|e| D::classify("acquire: decoding the server's time", &e))?;
    Ok(Claim {
        slot,
        fence,
        floor: Floor(u64::try_from(floor).unwrap_or(0)),
        now,
    })
}
