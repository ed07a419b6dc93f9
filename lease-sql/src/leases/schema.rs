//! The lease table, the fence table and a pool's rows: creating them,
//! migrating older tables in place, and saying what is wrong with one.

use leasehold_core::{PoolSpec, Reason};
use sqlx::Row;

use super::Leases;
use crate::dialect::FENCE_ISSUER_COLUMNS;
use crate::dialect::with_sqlx_bounds;
use crate::error::{CHECK_ACCESS, SqlError};
use crate::failure::Failure;
use crate::ident::TableName;
use crate::statements::{COLUMNS, FLOOR_COLUMNS, ID_FORMAT_COLUMNS, SPAN_COLUMNS};

/// Rows inserted per statement when a pool is populated.
const POPULATE_CHUNK: u32 = 1000;
with_sqlx_bounds!([impl<D> Leases<D>] {
    pub(super) async fn ensure_table(&self) -> Result<(), SqlError> {
        self.create_table().await.map(drop)
    }

    /// Creates the lease table if it does not exist, and migrates an older
    /// one; answers whether the table was missing when this call began
    /// (created by it, or by a concurrent call at the same moment: either
    /// way a table no holder can have claimed in before).
    async fn create_table(&self) -> Result<bool, SqlError> {
        let missing = match self.timed("schema check", self.column_names()).await {
            Ok(columns) => columns.is_empty(),
            Err(f) => return Err(self.to_sql_error(f).await),
        };
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
                _ => return Err(self.to_sql_error(f).await),
            }
        }
        self.add_floor_columns().await?;
        Ok(missing)
    }

    /// What `prepare` does for a pool: the table (created or migrated), the
    /// pool's record, then its rows. The record is written before the rows,
    /// so rows never stand without it for a claim to take.
    ///
    /// A pool without a record is recorded as new (nothing to wait for)
    /// only when nobody can have held it: the table was missing when this
    /// call began, or the caller declares it (`declared_new`, with every
    /// holder of the pool stopped; it replaces a record a claim made when
    /// it found the pool's rows gone). On a table that was there, a missing
    /// record is recorded as first seen now: the pool may be new, or its
    /// rows deleted while holders run, which nothing in the table tells
    /// apart, so claims wait out a span.
    pub(super) async fn prepare_pool(
        &self,
        pool: &PoolSpec,
        declared_new: bool,
    ) -> Result<(), SqlError> {
        let created = self.create_table().await?;
        if created || declared_new {
            self.record_pool(pool, D::LONG_AGO, declared_new).await?;
        } else if self.record_pool(pool, D::NOW, false).await? {
            super::claim::warn_records_gone(&self.info, pool, "prepare");
        }
        self.populate(pool).await
    }

    /// Writes `pool`'s record (see `Statements::record_pool`); whether a
    /// statement changed a row.
    pub(super) async fn record_pool(
        &self,
        pool: &PoolSpec,
        since: &str,
        overwrite: bool,
    ) -> Result<bool, SqlError> {
        let mut wrote = false;
        for sql in self
            .sql
            .record_pool::<D>(pool.name().as_str(), since, overwrite)
        {
            match self
                .timed("recording the pool", self.execute(sqlx::raw_sql(&sql)))
                .await
            {
                Ok(n) => wrote |= n > 0,
                Err(f) => return Err(self.to_sql_error(f).await),
            }
        }
        Ok(wrote)
    }

    /// Migrates an older table: adds the floor, span and ID-format columns
    /// it lacks (the statements of `migrations/<engine>/0002_leasehold_floor.sql`,
    /// `0003_leasehold_span.sql` and `0005_leasehold_id_format.sql`). Rows
    /// keep their leases, fences and holders, and get floor 0, span 0 and no
    /// format. Safe to run from many nodes at once, and beside older
    /// processes still using the table (their statements do not name the
    /// new columns).
    async fn add_floor_columns(&self) -> Result<(), SqlError> {
        let has = |columns: &[String], c: &str| columns.iter().any(|h| h.eq_ignore_ascii_case(c));
        let columns = match self.timed("schema check", self.column_names()).await {
            Ok(c) => c,
            Err(f) => return Err(self.to_sql_error(f).await),
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
                    _ => return Err(self.to_sql_error(f).await),
                }
            }
        }
        Ok(())
    }

    pub(super) async fn populate(&self, pool: &PoolSpec) -> Result<(), SqlError> {
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
                return Err(self.to_sql_error(f).await);
            }
            start = end;
        }
        Ok(())
    }

    /// Creates the fence table `t`, or adds the issuer columns to one an
    /// older version created (the statements of
    /// `migrations/<engine>/0004_leasehold_fence_issuer.sql`): its rows keep
    /// their fences and take the issuer of their next fenced write. Safe to
    /// run from many nodes at once.
    pub(super) async fn ensure_fence_table(&self, t: &TableName) -> Result<(), SqlError> {
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
    pub(super) async fn schema_problem(&self) -> Result<Option<Schema>, Failure> {
        let columns = self.timed("schema check", self.column_names()).await?;
        let (engine, table) = (D::ENGINE, &self.info.table);
        let fix = format!(
            "create it with `SqlStrategy::ensure_pool(&pool)` (or `ensure_table()`), or apply \
             lease-sql/migrations/{engine}/0001_leasehold_leases.sql, \
             0002_leasehold_floor.sql, 0003_leasehold_span.sql and 0005_leasehold_id_format.sql \
             (written for the default table name leasehold_leases)"
        );
        if columns.is_empty() {
            return Ok(Some(Schema::Broken(SqlError::MissingSchema {
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
            return Ok(Some(Schema::Broken(SqlError::MissingSchema {
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
                return Ok(Some(Schema::Floorless(SqlError::MissingSchema {
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
            return Ok(Some(Schema::Floorless(SqlError::MissingSchema {
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
        Ok(Some(Schema::Floorless(SqlError::MissingSchema {
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

    /// Turns a classified failure into the error a caller acts on (what
    /// is wrong with the table, when the failure is the schema's).
    /// Acquisition answers it as an `AcquireError` (`From<SqlError>`).
    pub(super) async fn to_sql_error(&self, f: Failure) -> SqlError {
        match f {
            Failure::Transient(m) => SqlError::Unreachable(Reason::new(m)),
            Failure::Contention(m) => SqlError::Contention(Reason::new(m)),
            Failure::Schema(m) => match self.schema_problem().await {
                Ok(Some(Schema::Broken(e) | Schema::Floorless(e))) => e,
                Ok(None) => SqlError::MissingSchema {
                    what: format!("the lease table {} is not usable: {m}", self.info.table),
                    fix: format!(
                        "check its column types against \
                         lease-sql/migrations/{}/0001_leasehold_leases.sql",
                        D::ENGINE
                    ),
                },
                Err(check) => SqlError::Unreachable(Reason::new(format!(
                    "{m}; and checking the schema failed: {}",
                    check.text()
                ))),
            },
            Failure::Denied(m) => self.denied(m).await,
            Failure::Final(m) => SqlError::Refused {
                what: m,
                fix: CHECK_ACCESS.to_owned(),
            },
        }
    }
});

/// What is wrong with a lease table.
pub(super) enum Schema {
    /// Missing, or not a lease table.
    Broken(SqlError),
    /// A 0.1 or 0.2 table: `ensure_table` migrates it.
    Floorless(SqlError),
}
