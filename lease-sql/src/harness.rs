//! The fault campaign's [`Harness`] on a SQL store: fenced writes through
//! [`FenceTable`], logged in a table of their own in the same transaction,
//! and the wipe of the lease table.

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold_core::drivers::{Harness, resource};
use leasehold_core::{BoxFuture, DurabilityPolicy, Fence, FenceStamp, PoolName};

use crate::{Engine, FenceTable, SqlConfig, SqlError, SqlStrategy};

/// The table where the fenced writes the store accepted are logged, in the
/// store's order (its id grows in commit order per resource: the fence row
/// is locked before the log row is inserted).
const FENCE_LOG: &str = "leasehold_harness_fence_log";

/// A SQL store's harness: one connection of its own, which takes no lease.
pub(crate) struct SqlHarness {
    strategy: SqlStrategy,
    table: FenceTable,
}

impl SqlHarness {
    pub(crate) async fn connect(config: SqlConfig) -> Result<Box<dyn Harness>, String> {
        let strategy = SqlStrategy::connect(
            config
                .op_timeout(Duration::from_secs(2))
                .max_connections(1)
                // Fenced writes and wipes only: this connection takes no
                // lease, so a store that forgets has no guard to keep here.
                .durability(DurabilityPolicy::Throwaway),
        )
        .await
        .map_err(|e| format!("harness connect: {e}"))?;
        Ok(Box::new(Self {
            strategy,
            table: FenceTable::default(),
        }))
    }

    async fn execute(&self, sql: &str) -> Result<(), String> {
        let r = if let Some(p) = self.strategy.postgres() {
            sqlx::raw_sql(sql).execute(p).await.map(drop)
        } else if let Some(p) = self.strategy.mysql() {
            sqlx::raw_sql(sql).execute(p).await.map(drop)
        } else if let Some(p) = self.strategy.sqlite() {
            sqlx::raw_sql(sql).execute(p).await.map(drop)
        } else {
            Ok(())
        };
        r.map_err(|e| format!("{sql}: {e}"))
    }

    async fn prepare(&self) -> Result<(), String> {
        self.table
            .ensure(&self.strategy)
            .await
            .map_err(|e| format!("fence table: {e}"))?;
        let sql = match self.strategy.engine() {
            Engine::Postgres => format!(
                "CREATE TABLE IF NOT EXISTS {FENCE_LOG} (id BIGSERIAL PRIMARY KEY, \
                 resource VARCHAR(255) NOT NULL, fence BIGINT NOT NULL)"
            ),
            Engine::MySql => format!(
                "CREATE TABLE IF NOT EXISTS {FENCE_LOG} (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
                 resource VARCHAR(255) NOT NULL, fence BIGINT UNSIGNED NOT NULL) ENGINE = InnoDB"
            ),
            _ => format!(
                "CREATE TABLE IF NOT EXISTS {FENCE_LOG} (id INTEGER PRIMARY KEY AUTOINCREMENT, \
                 resource TEXT NOT NULL, fence INTEGER NOT NULL)"
            ),
        };
        self.execute(&sql).await
    }

    async fn write(&self, pool: &str, slot: u32, fence: u64) -> Result<bool, String> {
        let name = PoolName::new(pool).map_err(|e| e.to_string())?;
        let stamp = FenceStamp::new(name, slot, Fence(fence));
        let resource = resource(pool, slot);
        let resource = resource.as_str();
        let log_fence = i64::try_from(fence).unwrap_or(i64::MAX);
        // Advance the fence and log it in one transaction; the engines
        // differ only in their placeholders and in how the log binds a u64.
        macro_rules! advance_and_log {
            ($pool:expr, $p1:literal, $p2:literal, $logged:expr) => {{
                let mut tx = $pool.begin().await.map_err(|e| e.to_string())?;
                match self.table.advance(&mut *tx, resource, &stamp).await {
                    Ok(()) => {
                        sqlx::query(&format!(
                            "INSERT INTO {FENCE_LOG} (resource, fence) VALUES ({}, {})",
                            $p1, $p2
                        ))
                        .bind(resource)
                        .bind($logged)
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| e.to_string())?;
                        tx.commit().await.map_err(|e| e.to_string())?;
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }};
        }
        let advanced = if let Some(p) = self.strategy.postgres() {
            advance_and_log!(p, "$1", "$2", log_fence)
        } else if let Some(p) = self.strategy.mysql() {
            advance_and_log!(p, "?", "?", fence)
        } else if let Some(p) = self.strategy.sqlite() {
            advance_and_log!(p, "?1", "?2", log_fence)
        } else {
            return Ok(false);
        };
        match advanced {
            Ok(()) => Ok(true),
            Err(SqlError::Stale { .. }) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn accepted(&self) -> Result<BTreeMap<String, Vec<u64>>, String> {
        let sql = format!("SELECT resource, fence FROM {FENCE_LOG} ORDER BY id");
        let rows: Vec<(String, i64)> = if let Some(p) = self.strategy.postgres() {
            sqlx::query_as(&sql).fetch_all(p).await
        } else if let Some(p) = self.strategy.mysql() {
            sqlx::query_as::<_, (String, u64)>(&sql)
                .fetch_all(p)
                .await
                .map(|v| {
                    v.into_iter()
                        .map(|(r, f)| (r, i64::try_from(f).unwrap_or(i64::MAX)))
                        .collect()
                })
        } else if let Some(p) = self.strategy.sqlite() {
            sqlx::query_as(&sql).fetch_all(p).await
        } else {
            Ok(Vec::new())
        }
        .map_err(|e| e.to_string())?;
        let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for (resource, fence) in rows {
            out.entry(resource)
                .or_default()
                .push(u64::try_from(fence).unwrap_or(0));
        }
        Ok(out)
    }

    /// The whole lease table emptied, `TRUNCATE` (SQLite, which has none:
    /// `DELETE` of every row). The fenced writes' tables are the
    /// application's and stay.
    async fn wipe_table(&self) -> Result<(), String> {
        // A table name is letters, digits and underscores (checked on
        // connect): no quoting needed.
        let table = self.strategy.table().as_str();
        let sql = match self.strategy.engine() {
            Engine::Sqlite => format!("DELETE FROM {table}"),
            _ => format!("TRUNCATE TABLE {table}"),
        };
        self.execute(&sql).await
    }
}

impl Harness for SqlHarness {
    fn prepare_fences<'a>(
        &'a self,
        _pools: &'a [String],
        _slots: u32,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(self.prepare())
    }

    fn fenced_write<'a>(
        &'a self,
        pool: &'a str,
        slot: u32,
        fence: u64,
    ) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(self.write(pool, slot, fence))
    }

    fn accepted_fences<'a>(
        &'a self,
        _pools: &'a [String],
        _slots: u32,
    ) -> BoxFuture<'a, Result<BTreeMap<String, Vec<u64>>, String>> {
        Box::pin(self.accepted())
    }

    /// The run's pools are the table's only ones: the whole table goes.
    fn wipe<'a>(&'a self, _pools: &'a [String]) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(self.wipe_table())
    }
}
