//! The textbook case for fencing tokens, acted out on SQLite (no server needed):
//!
//! several replicas of an hourly billing job elect one leader per hour (a pool
//! of one slot); the leader is frozen past its lease (a GC pause, a VM
//! migration); a new leader takes over with a bigger fence and bills the hour;
//! the old leader wakes and writes — and its fenced write is refused. Every
//! invoice carries an idempotency key, so a replayed hour bills nothing twice.
//!
//! ```sh
//! cargo run -p leasehold-sql --example invoices
//! ```
//! It asserts its outcome and exits non-zero if anything went wrong.

use leasehold_core::Floor;
use std::time::{Duration, Instant};

use leasehold_core::{AcquireError, FenceStamp, Grant, PoolName, PoolSpec, Renewal, Strategy};
use leasehold_sql::{FenceTable, SqlConfig, SqlError, SqlStrategy};

const CUSTOMERS: [(&str, i64); 3] = [("acme", 1200), ("globex", 800), ("initech", 450)];

struct Replica {
    name: &'static str,
    store: SqlStrategy,
    pool: PoolSpec,
}

impl Replica {
    async fn try_lead(&self) -> Result<Grant, AcquireError> {
        self.store.acquire(&self.pool, Floor::NONE).await
    }

    // ANCHOR: bill
    /// Bills `hour` in one transaction guarded by the leader's fence. Returns
    /// how many invoices were new.
    async fn bill(&self, fences: &FenceTable, grant: &Grant, hour: u32) -> Result<u64, SqlError> {
        let db = self.store.sqlite().expect("sqlite");
        let mut tx = db.begin().await?;
        let stamp = FenceStamp::of(&self.pool, grant);
        fences.advance(&mut *tx, "billing", &stamp).await?;
        let mut new = 0;
        for (customer, amount) in CUSTOMERS {
            // The idempotency key names the invoice, not the attempt.
            let key = format!("2025-01-01T{hour:02}:{customer}");
            new += sqlx::query(
                "INSERT INTO invoices (idempotency_key, customer, hour, amount, billed_by, fence) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (idempotency_key) DO NOTHING",
            )
            .bind(&key)
            .bind(customer)
            .bind(i64::from(hour))
            .bind(amount)
            .bind(self.name)
            .bind(
                grant
                    .fence
                    .to_i64()
                    .expect("fences fit a BIGINT until the year 294,247"),
            )
            .execute(&mut *tx)
            .await?
            .rows_affected();
        }
        tx.commit().await?;
        Ok(new)
    }
    // ANCHOR_END: bill
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("leasehold-invoices-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = format!("sqlite://{}", dir.join("billing.sqlite").display());
    let result = act(&url).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Acts the failure out on the SQLite file at `url`, asserting each step.
pub async fn act(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let ttl = Duration::from_millis(600);
    let mut replicas = Vec::new();
    for name in ["replica-a", "replica-b", "replica-c"] {
        // Each replica has its own connections, as separate processes would.
        let store = SqlStrategy::connect(SqlConfig::new(url)).await?;
        let pool = PoolSpec::new(PoolName::new("billing-leader")?, 1, ttl)?.with_holder(name);
        replicas.push(Replica { name, store, pool });
    }
    let (a, b) = (&replicas[0], &replicas[1]);
    a.store.ensure_pool(&a.pool).await?;
    let fences = FenceTable::default();
    fences.ensure(&a.store).await?;
    sqlx::raw_sql(
        "CREATE TABLE invoices (idempotency_key TEXT PRIMARY KEY, customer TEXT NOT NULL, \
         hour INTEGER NOT NULL, amount INTEGER NOT NULL, billed_by TEXT NOT NULL, \
         fence INTEGER NOT NULL)",
    )
    .execute(a.store.sqlite().expect("sqlite"))
    .await?;

    println!("hour 10: three replicas race to lead");
    let mut leaders = Vec::new();
    for r in &replicas {
        match r.try_lead().await {
            Ok(g) => leaders.push((r, g)),
            Err(AcquireError::PoolExhausted { .. }) => println!("  {} follows", r.name),
            Err(e) => return Err(e.into()),
        }
    }
    assert_eq!(leaders.len(), 1, "exactly one leader");
    let (leader, first) = leaders.pop().expect("one leader");
    assert_eq!(leader.name, a.name, "the first to ask leads");
    println!("  {} leads with fence {}", leader.name, first.fence);
    let n = a.bill(&fences, &first, 10).await?;
    assert_eq!(n, 3);
    println!("  {} billed hour 10: {n} invoices", a.name);
    let n = a.bill(&fences, &first, 10).await?;
    assert_eq!(n, 0, "a replayed hour bills nothing twice");
    println!(
        "  {} replayed hour 10 after a hiccup: {n} new invoices (idempotency keys)",
        a.name
    );

    println!(
        "hour 11: {} renews, starts billing, and freezes past its lease",
        a.name
    );
    assert!(matches!(
        a.store.renew(&a.pool, &first, Floor::NONE).await,
        Renewal::Renewed { .. }
    ));
    // ... the old leader checked its lease and is about to write when it is
    // paused. Meanwhile the others keep asking until the database says the
    // lease expired (polling, nobody sleeps through it).
    let started = Instant::now();
    let second = loop {
        match b.try_lead().await {
            Ok(g) => break g,
            Err(e) if e.is_retryable() && started.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    assert!(second.fence > first.fence, "a takeover has a bigger fence");
    println!(
        "  {} takes over after {:?} with fence {} (> {})",
        b.name,
        started.elapsed(),
        second.fence,
        first.fence
    );
    let n = b.bill(&fences, &second, 11).await?;
    assert_eq!(n, 3);
    println!("  {} billed hour 11: {n} invoices", b.name);

    // ANCHOR: stale
    println!("{} wakes up and writes what it had prepared", a.name);
    for hour in [11, 12] {
        match a.bill(&fences, &first, hour).await {
            Err(SqlError::Stale { seen, .. }) => {
                assert_eq!(seen, second.fence);
                println!("  hour {hour}: refused, fence {} < {seen}", first.fence);
            }
            other => panic!("a stale leader's write to hour {hour} must be refused: {other:?}"),
        }
    }
    // ANCHOR_END: stale
    let renewal = a.store.renew(&a.pool, &first, Floor::NONE).await;
    assert!(matches!(renewal, Renewal::Lost(_)), "{renewal:?}");
    println!("  and its renewal says: {renewal:?}");

    let rows: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT idempotency_key, billed_by, fence FROM invoices ORDER BY 1")
            .fetch_all(a.store.sqlite().expect("sqlite"))
            .await?;
    println!("invoices:");
    for (key, by, fence) in &rows {
        println!("  {key:24} billed by {by} (fence {fence})");
    }
    assert_eq!(rows.len(), 6, "3 customers x 2 hours, each billed once");
    assert!(
        rows.iter()
            .filter(|(k, _, _)| k.contains("T11"))
            .all(|(_, by, _)| by == b.name)
    );
    println!("ok: one leader per hour, the stale leader was fenced off, nothing billed twice");
    for r in &replicas {
        r.store.close().await;
    }
    Ok(())
}
