//! The one place that turns a store URL into a running [`LeaseManager`]: the
//! glue to each backend crate's public API (adapt it here when those APIs
//! change). Schemes: `sqlite://`, `postgres://`, `mysql://`, `redis://`
//! (also `rediss://`, `valkey://`).

use std::time::Duration;

use leasehold_core::{LeaseConfig, LeaseManager};

/// Connects to the store at `url`, prepares `config`'s pool where the store
/// needs it, and starts a manager (which waits for the first lease).
pub async fn start_manager(url: &str, config: LeaseConfig) -> Result<LeaseManager, String> {
    let op_timeout = (config.timing().ttl() / 4).max(Duration::from_millis(100));
    let scheme = url.split_once("://").map_or(url, |(s, _)| s);
    match scheme {
        "sqlite" | "postgres" | "postgresql" | "mysql" | "mariadb" => {
            let strategy = leasehold_sql::SqlStrategy::connect_with(
                leasehold_sql::SqlConfig::new(url).op_timeout(op_timeout),
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
                    .op_timeout(op_timeout),
            )
            .await
            .map_err(|e| format!("connect {scheme}: {e}"))?;
            LeaseManager::start(strategy, config)
                .await
                .map_err(|e| format!("start: {e}"))
        }
        other => Err(format!(
            "unsupported store scheme {other:?}: use sqlite://, postgres://, mysql:// or redis://"
        )),
    }
}
