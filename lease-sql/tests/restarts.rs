//! Store restarts on PostgreSQL 15, the newest PostgreSQL a wheel provides and
//! MariaDB 10.11 (`leasehold_conformance::restarts`): on a private
//! [`Settings::Durable`] server a fence never repeats and a lease survives a
//! crash, and on PostgreSQL a killed backend (crash recovery without a
//! restart) loses nothing. On a private [`Settings::Lossy`] PostgreSQL
//! (`synchronous_commit = off`) the lease sessions turn it on for themselves,
//! so the same holds there; a lossy MariaDB (`innodb_flush_log_at_trx_commit
//! = 0`) is refused by default, and with the one-timing opt-in the restart
//! guard keeps a second holder off the slot for the pool's longest span.

use std::process::ExitCode;
use std::sync::Arc;

use leasehold_conformance::Store;
use leasehold_conformance::restarts::{Stores, target};
use leasehold_conformance::servers::{ServerKind, Settings};
use leasehold_core::{BoxFuture, DurabilityPolicy, PoolSpec};
use leasehold_sql::{SqlConfig, SqlStrategy};

struct Sql;

async fn connect(url: &str) -> Result<SqlStrategy, String> {
    connect_with(SqlConfig::new(url)).await
}

/// Connects; a server still recovering from a crash refuses connections
/// for a while (a retryable error), so that is tried again for 60 s.
async fn connect_with(config: SqlConfig) -> Result<SqlStrategy, String> {
    let config = config.max_connections(4);
    let limit = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match SqlStrategy::connect(config.clone()).await {
            Ok(s) => return Ok(s),
            Err(e) if e.is_retryable() && std::time::Instant::now() < limit => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => return Err(format!("connect: {e}")),
        }
    }
}

/// Runs `sql` on a connection of its own to the server at `url`.
async fn run_sql(url: &str, sql: &str) -> Result<(), String> {
    if leasehold_sql::Engine::from_url(url) == leasehold_sql::Engine::Postgres {
        run_on::<sqlx::Postgres>(url, sql).await
    } else {
        run_on::<sqlx::MySql>(url, sql).await
    }
}

/// [`run_sql`] on one engine: one connection, through a pool, an executor
/// the boxed futures of `Stores` can hold across awaits.
async fn run_on<DB: sqlx::Database>(url: &str, sql: &str) -> Result<(), String>
where
    for<'c> &'c sqlx::Pool<DB>: sqlx::Executor<'c, Database = DB>,
{
    let c = sqlx::pool::PoolOptions::<DB>::new()
        .max_connections(1)
        .connect(url)
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let r = sqlx::raw_sql(sql)
        .execute(&c)
        .await
        .map(drop)
        .map_err(|e| format!("{sql}: {e}"));
    c.close().await;
    r
}

impl Stores for Sql {
    fn connect<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<Store, String>> {
        Box::pin(async move { Ok(Arc::new(connect(url).await?) as Store) })
    }

    /// The table and the pool's rows (the pool declared new), then
    /// (PostgreSQL) a checkpoint: with
    /// `synchronous_commit = off` a crash would otherwise lose the table too,
    /// which is refused as a missing schema and proves nothing about leases.
    fn prepare<'a>(
        &'a self,
        url: &'a str,
        pool: &'a PoolSpec,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            // Tables and rows only: no lease is taken on this connection.
            let s =
                connect_with(SqlConfig::new(url).durability(DurabilityPolicy::Throwaway)).await?;
            // The tests' pools are fresh: nobody has held them.
            let mut r = s.ensure_new_pool(pool).await.map_err(|e| e.to_string());
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
            let s =
                connect_with(SqlConfig::new(url).durability(DurabilityPolicy::Throwaway)).await?;
            let lossy = !s.durability().is_durable();
            s.close().await;
            Ok(Some(lossy))
        })
    }

    /// PostgreSQL's lease sessions turn `synchronous_commit` on: only a
    /// lossy MariaDB forgets.
    fn lossy_forgets(&self, kind: ServerKind) -> bool {
        kind == ServerKind::MariaDb
    }

    fn connect_one_timing<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<Store, String>> {
        Box::pin(async move {
            let s =
                connect_with(SqlConfig::new(url).durability(DurabilityPolicy::OneTimingPerPool))
                    .await?;
            Ok(Arc::new(s) as Store)
        })
    }

    /// PostgreSQL: a checkpoint. MariaDB with `innodb_flush_log_at_trx_commit
    /// = 0`: one commit made with it at 1 writes and flushes the redo log up
    /// to that commit, every earlier one included.
    /// MariaDB: `innodb_flush_log_at_trx_commit = 0`, set at run time (the
    /// server's command line still says 1): the log is flushed once a
    /// second, so a crash may lose the claims of the last second.
    /// PostgreSQL's `fsync` is set in its configuration files only, which a
    /// restart reads again.
    fn weaken_until_restart<'a>(
        &'a self,
        url: &'a str,
    ) -> BoxFuture<'a, Result<Option<bool>, String>> {
        Box::pin(async move {
            if leasehold_sql::Engine::from_url(url) == leasehold_sql::Engine::Postgres {
                return Ok(None);
            }
            run_sql(url, "SET GLOBAL innodb_flush_log_at_trx_commit = 0").await?;
            Ok(Some(false))
        })
    }

    fn make_durable_now<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            if leasehold_sql::Engine::from_url(url) == leasehold_sql::Engine::Postgres {
                return run_sql(url, "CHECKPOINT").await;
            }
            run_sql(
                url,
                "SET @leasehold_was = @@GLOBAL.innodb_flush_log_at_trx_commit; \
                 SET GLOBAL innodb_flush_log_at_trx_commit = 1; \
                 CREATE TABLE IF NOT EXISTS leasehold_test_flush (n INT PRIMARY KEY); \
                 REPLACE INTO leasehold_test_flush VALUES (1); \
                 SET GLOBAL innodb_flush_log_at_trx_commit = @leasehold_was",
            )
            .await
        })
    }

    fn can_crash_without_restart(&self, kind: ServerKind) -> bool {
        matches!(kind, ServerKind::Postgres15 | ServerKind::PostgresLatest)
    }

    /// SIGKILLs one PostgreSQL backend (an idle connection of its own): the
    /// postmaster ends every other backend, reinitialises shared memory
    /// (the WAL buffers with it) and replays the WAL on disk, without
    /// restarting (`restart_after_crash`, on by default).
    fn crash_without_restart<'a>(
        &'a self,
        url: &'a str,
    ) -> Option<BoxFuture<'a, Result<(), String>>> {
        Some(Box::pin(async move {
            use sqlx::Row;
            let one = || {
                sqlx::postgres::PgPoolOptions::new()
                    .max_connections(1)
                    .connect(url)
            };
            let victim = one().await.map_err(|e| format!("{url}: {e}"))?;
            let row =
                sqlx::query("SELECT CAST(pg_postmaster_start_time() AS TEXT), pg_backend_pid()")
                    .fetch_one(&victim)
                    .await
                    .map_err(|e| e.to_string())?;
            let started: String = row.try_get(0).map_err(|e| e.to_string())?;
            let pid: i32 = row.try_get(1).map_err(|e| e.to_string())?;
            let status = leasehold_conformance::programs::command("kill")?
                .args(["-KILL", &pid.to_string()])
                .status()
                .map_err(|e| format!("kill: {e}"))?;
            if !status.success() {
                return Err(format!("kill -KILL {pid}: {status}"));
            }
            victim.close().await;
            // The postmaster starts its crash cycle once it has reaped the
            // killed backend: until then a connection may still succeed,
            // before the recovery that follows.
            let start = std::time::Instant::now();
            while std::path::Path::new(&format!("/proc/{pid}")).exists() {
                if start.elapsed() > std::time::Duration::from_secs(60) {
                    return Err(format!("backend {pid} still there 60 s after SIGKILL"));
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            // Connections are refused during recovery; then the server is
            // back, and never restarted.
            loop {
                let again = match one().await {
                    Ok(c) => {
                        let now = sqlx::query("SELECT CAST(pg_postmaster_start_time() AS TEXT)")
                            .fetch_one(&c)
                            .await
                            .and_then(|r| r.try_get::<String, _>(0))
                            .ok();
                        c.close().await;
                        now
                    }
                    Err(_) => None,
                };
                match again {
                    Some(now) if now == started => return Ok(()),
                    Some(now) => {
                        return Err(format!(
                            "the server restarted (started {started}, now {now}) instead of \
                             recovering in place"
                        ));
                    }
                    None if start.elapsed() < std::time::Duration::from_secs(60) => {
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    }
                    None => return Err("the server did not recover within 60 s".into()),
                }
            }
        }))
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
