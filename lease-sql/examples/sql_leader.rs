//! Leader election on SQL: the invoice scheduler of six replicas in one
//! process (`leasehold_conformance::scheduler`). Exactly one replica leads
//! and bills hours, every replica observes who leads, the leader is killed,
//! another takes over with a bigger fence, and the killed leader's late
//! write is refused by the fence table in the same database.
//!
//! ```sh
//! cargo run -p leasehold-sql --example sql_leader                  # SQLite in a temp dir
//! cargo run -p leasehold-sql --example sql_leader -- --url postgres://user:pass@localhost/db
//! LEASEHOLD_SQL_URL=mysql://user:pass@localhost/db cargo run -p leasehold-sql --example sql_leader
//! ```
//! It asserts its outcome and exits non-zero if anything went wrong.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use leasehold_conformance::scheduler::{self, Ledger, Report};
use leasehold_core::{BoxFuture, FenceStamp, PoolName, PoolSpec};
use leasehold_sql::{FenceTable, SqlConfig, SqlError, SqlStrategy};

/// The leases' TTL: a takeover comes about this long after a leader died.
const TTL: Duration = Duration::from_secs(2);

/// The fence table of the database the leases are in; every bill advances
/// the stamp (fence, pool and slot) of `resource`.
struct SqlLedger {
    store: SqlStrategy,
    fences: FenceTable,
    resource: String,
}

/// Runs `advance` in a transaction of `$pool` and commits: `Ok(true)`
/// written, `Ok(false)` refused (`Stale`).
macro_rules! fenced {
    ($pool:expr, $ledger:expr, $stamp:expr) => {{
        let mut tx = $pool.begin().await?;
        match $ledger
            .fences
            .advance(&mut *tx, &$ledger.resource, $stamp)
            .await
        {
            Ok(()) => tx.commit().await.map(|()| true).map_err(SqlError::from),
            Err(SqlError::Stale { .. } | SqlError::OtherWriter { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }};
}

impl SqlLedger {
    async fn bill_once(&self, stamp: &FenceStamp) -> Result<bool, SqlError> {
        let s = &self.store;
        if let Some(pool) = s.sqlite() {
            fenced!(pool, self, stamp)
        } else if let Some(pool) = s.postgres() {
            fenced!(pool, self, stamp)
        } else if let Some(pool) = s.mysql() {
            fenced!(pool, self, stamp)
        } else {
            unreachable!("a connected strategy has an engine")
        }
    }
}

/// A transaction the server rolled back to break a deadlock or a
/// serialization conflict (SQLSTATE 40001: a serialization failure, or a
/// deadlock between the fenced write and the application's own writes in
/// the same transaction): nothing was written, and trying again is what the
/// server asks. (Two fenced writes alone no longer deadlock on MariaDB: the
/// fence row is locked exclusively at once.)
fn conflict(e: &SqlError) -> bool {
    matches!(e, SqlError::Database(sqlx::Error::Database(d)) if d.code().as_deref() == Some("40001"))
}

impl Ledger for SqlLedger {
    fn bill<'a>(
        &'a self,
        _hour: u32,
        _replica: &'a str,
        stamp: &'a FenceStamp,
    ) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move {
            let mut attempts = 0;
            loop {
                attempts += 1;
                match self.bill_once(stamp).await {
                    Err(e) if conflict(&e) && attempts < 5 => {}
                    other => return other.map_err(|e| e.to_string()),
                }
            }
        })
    }
}

/// The scheduler on the database at `url` (its lease table and fence table
/// are created if missing).
pub async fn run(url: &str) -> Result<Report, String> {
    let connect = || async { SqlStrategy::connect(SqlConfig::new(url)).await };
    let first = connect().await.map_err(|e| {
        format!(
            "cannot reach {url}: {e}; run with no URL for SQLite, or start a server and pass \
             --url (or LEASEHOLD_SQL_URL)"
        )
    })?;
    let pool_name = leasehold_conformance::fresh_pool_name();
    let spec = PoolSpec::new(pool_name.clone(), 1, TTL).map_err(|e| e.to_string())?;
    first.ensure_pool(&spec).await.map_err(|e| e.to_string())?;
    let fences = FenceTable::default();
    fences.ensure(&first).await.map_err(|e| e.to_string())?;
    let ledger = Arc::new(SqlLedger {
        store: first,
        fences,
        resource: format!("invoices-{pool_name}"),
    });
    scheduler::run(
        PoolName::as_str(&pool_name),
        TTL,
        |_| async move { connect().await.map_err(|e| e.to_string()) },
        ledger,
    )
    .await
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> ExitCode {
    let url = scheduler::url_arg("LEASEHOLD_SQL_URL");
    let dir = std::env::temp_dir().join(format!("leasehold-leader-{}", std::process::id()));
    let url = url.unwrap_or_else(|| {
        let _ = std::fs::create_dir_all(&dir);
        format!("sqlite://{}", dir.join("leader.sqlite").display())
    });
    let result = run(&url).await;
    let _ = std::fs::remove_dir_all(&dir);
    scheduler::exit(result)
}
