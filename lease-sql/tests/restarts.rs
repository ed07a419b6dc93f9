//! Store restarts on PostgreSQL 15, the newest PostgreSQL a wheel provides and
//! MariaDB 10.11 (`leasehold_conformance::restarts`): on a private
//! [`Settings::Durable`] server a fence never repeats and a lease survives a
//! crash; on a private [`Settings::Lossy`] one (PostgreSQL
//! `synchronous_commit = off`, MariaDB `innodb_flush_log_at_trx_commit = 0`)
//! the restart guard keeps a second holder off the slot.

use std::process::ExitCode;
use std::sync::Arc;

use leasehold_conformance::Store;
use leasehold_conformance::restarts::{Stores, target};
use leasehold_conformance::servers::{ServerKind, Settings};
use leasehold_core::{BoxFuture, PoolSpec};
use leasehold_sql::{SqlConfig, SqlStrategy};

struct Sql;

async fn connect(url: &str) -> Result<SqlStrategy, String> {
    SqlStrategy::connect(SqlConfig::new(url).max_connections(4))
        .await
        .map_err(|e| format!("connect: {e}"))
}

impl Stores for Sql {
    fn connect<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<Store, String>> {
        Box::pin(async move { Ok(Arc::new(connect(url).await?) as Store) })
    }

    /// The table and the pool's rows, then (PostgreSQL) a checkpoint: with
    /// `synchronous_commit = off` a crash would otherwise lose the table too,
    /// which is refused as a missing schema and proves nothing about leases.
    fn prepare<'a>(
        &'a self,
        url: &'a str,
        pool: &'a PoolSpec,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let s = connect(url).await?;
            let mut r = s.ensure_pool(pool).await.map_err(|e| e.to_string());
            if let (Ok(()), Some(pg)) = (&r, s.postgres()) {
                r = sqlx::raw_sql("CHECKPOINT")
                    .execute(pg)
                    .await
                    .map(drop)
                    .map_err(|e| format!("CHECKPOINT: {e}"));
            }
            s.close().await;
            r
        })
    }

    fn reports_lossy<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<Option<bool>, String>> {
        Box::pin(async move {
            let s = connect(url).await?;
            let lossy = !s.durability().is_durable();
            s.close().await;
            Ok(Some(lossy))
        })
    }
}

fn main() -> ExitCode {
    // The servers live in the targets' backends and stop when the run ends.
    let mut targets = Vec::new();
    for kind in [
        ServerKind::Postgres15,
        ServerKind::PostgresLatest,
        ServerKind::MariaDb,
    ] {
        for settings in [Settings::Durable, Settings::Lossy] {
            targets.push(target(kind, settings, Sql));
        }
    }
    leasehold_conformance::run(targets)
}
