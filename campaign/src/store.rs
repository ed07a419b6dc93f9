//! The one place that turns a store URL into a running [`LeaseManager`]: the
//! glue to each backend crate's public API (adapt it here when those APIs
//! change). Schemes: `sqlite://`, `postgres://`, `mysql://`, `redis://`
//! (also `rediss://`, `valkey://`), `etcd://` (or `http://`: an etcd
//! endpoint).

use std::time::Duration;

use leasehold_core::{LeaseConfig, LeaseManager};

/// Connects to the store at `url`, prepares `config`'s pool where the store
/// needs it, and starts a manager (which waits for the first lease).
/// `restart_guard` false turns the stores' restart guard off (a control run
/// that shows what the guard prevents).
pub async fn start_manager(
    url: &str,
    config: LeaseConfig,
    restart_guard: bool,
) -> Result<LeaseManager, String> {
    let op_timeout = (config.timing().ttl() / 4).max(Duration::from_millis(100));
    let scheme = url.split_once("://").map_or(url, |(s, _)| s);
    match scheme {
        "sqlite" | "postgres" | "postgresql" | "mysql" | "mariadb" => {
            let strategy = leasehold_sql::SqlStrategy::connect(
                leasehold_sql::SqlConfig::new(url)
                    .op_timeout(op_timeout)
                    .restart_guard(restart_guard),
            )
            .await
            .map_err(|e| format!("connect {scheme}: {e}"))?;
            strategy
                .ensure_pool(config.pool())
                .await
                .map_err(|e| format!("ensure pool: {e}"))?;
            LeaseManager::start(strategy, config)
                .await
                .map_err(|e| format!("start: {e}"))
        }
        "redis" | "rediss" | "valkey" => {
            let url = url.replacen("valkey://", "redis://", 1);
            let strategy = leasehold_valkey::ValkeyStrategy::connect(
                leasehold_valkey::ValkeyConfig::new(url)
                    .key_prefix("campaign")
                    .op_timeout(op_timeout)
                    .restart_guard(restart_guard),
            )
            .await
            .map_err(|e| format!("connect {scheme}: {e}"))?;
            LeaseManager::start(strategy, config)
                .await
                .map_err(|e| format!("start: {e}"))
        }
        "etcd" | "http" => {
            let endpoint = url.replacen("etcd://", "http://", 1);
            let strategy = leasehold_etcd::EtcdStrategy::connect(
                leasehold_etcd::EtcdConfig::new([endpoint])
                    .prefix("campaign")
                    .op_timeout(op_timeout),
            )
            .await
            .map_err(|e| format!("connect {scheme}: {e}"))?;
            // etcd keeps every acknowledged write (Raft, fsync): no restart
            // guard to turn off.
            let _ = restart_guard;
            LeaseManager::start(strategy, config)
                .await
                .map_err(|e| format!("start: {e}"))
        }
        other => Err(format!(
            "unsupported store scheme {other:?}: use sqlite://, postgres://, mysql://, \
             redis:// or etcd://"
        )),
    }
}

/// The table where workers log the fenced writes the store accepted, in the
/// store's order (its id grows in commit order per resource: the fence row
/// is locked before the log row is inserted).
const FENCE_LOG: &str = "campaign_fence_log";

/// Fenced writes through the store's fenced-write helper: the SQL
/// [`FenceTable`](leasehold_sql::FenceTable). Other stores have none yet.
pub struct FenceWriter {
    strategy: leasehold_sql::SqlStrategy,
    table: leasehold_sql::FenceTable,
}

fn is_sql(url: &str) -> bool {
    let scheme = url.split_once("://").map_or(url, |(s, _)| s);
    matches!(
        scheme,
        "sqlite" | "postgres" | "postgresql" | "mysql" | "mariadb"
    )
}

impl FenceWriter {
    /// Connects for fenced writes, or `None` when the store has no helper.
    pub async fn connect(url: &str) -> Result<Option<Self>, String> {
        if !is_sql(url) {
            return Ok(None);
        }
        let strategy = leasehold_sql::SqlStrategy::connect(
            leasehold_sql::SqlConfig::new(url)
                .op_timeout(Duration::from_secs(2))
                .max_connections(1),
        )
        .await
        .map_err(|e| format!("fence connect: {e}"))?;
        Ok(Some(Self {
            strategy,
            table: leasehold_sql::FenceTable::default(),
        }))
    }

    /// Creates the fence table and the log (once, before the workers start).
    pub async fn prepare(&self) -> Result<(), String> {
        use leasehold_sql::Engine;
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

    async fn execute(&self, sql: &str) -> Result<(), String> {
        use leasehold_sql::sqlx;
        let r = if let Some(p) = self.strategy.postgres() {
            sqlx::raw_sql(sql).execute(p).await.map(drop)
        } else if let Some(p) = self.strategy.mysql() {
            sqlx::raw_sql(sql).execute(p).await.map(drop)
        } else if let Some(p) = self.strategy.sqlite() {
            sqlx::raw_sql(sql).execute(p).await.map(drop)
        } else {
            Ok(())
        };
        r.map_err(|e| e.to_string())
    }

    /// One fenced write to `resource` with `fence`: `Ok(true)` when the store
    /// accepted it (and logged it), `Ok(false)` when it refused it as stale.
    pub async fn write(&self, resource: &str, fence: u64) -> Result<bool, String> {
        use leasehold_core::Fence;
        use leasehold_sql::{FenceError, sqlx};
        let f = Fence(fence);
        let log_fence = i64::try_from(fence).unwrap_or(i64::MAX);
        // Advance the fence and log it in one transaction; the engines
        // differ only in their placeholders and in how the log binds a u64.
        macro_rules! advance_and_log {
            ($pool:expr, $p1:literal, $p2:literal, $logged:expr) => {{
                let mut tx = $pool.begin().await.map_err(|e| e.to_string())?;
                match self.table.advance(&mut *tx, resource, f).await {
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
            Err(FenceError::Stale { .. }) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Per resource, the fences of the accepted writes in the store's order.
    pub async fn accepted(&self) -> Result<std::collections::BTreeMap<String, Vec<u64>>, String> {
        use leasehold_sql::sqlx;
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
        let mut out: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
        for (resource, fence) in rows {
            out.entry(resource)
                .or_default()
                .push(u64::try_from(fence).unwrap_or(0));
        }
        Ok(out)
    }
}
