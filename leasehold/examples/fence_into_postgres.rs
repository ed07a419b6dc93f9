//! Fencing into another store: replicas elect their leader on one store
//! (Valkey here, or any URL `leasehold::connect` takes) and the leader writes
//! into a PostgreSQL database that holds no leases. The data's database is
//! opened as a plain sqlx pool, not through `leasehold::connect`: it keeps
//! no lease, so the lease checks (durability settings, the lease table) are
//! not run on it. What it keeps is a fence table (`FenceTable::ensure_on`),
//! and every write is a transaction that records the leader's stamp first
//! (`FenceTable::advance`), so a leader paused past its term cannot write
//! after its successor has.
//!
//! ```sh
//! cargo run -p leasehold --features valkey,postgres --example fence_into_postgres -- \
//!     valkey://127.0.0.1:6379 postgres://postgres@127.0.0.1:5432/postgres
//! ```

use std::time::{Duration, Instant};

use leasehold::sql::sqlx::{self, PgPool};
use leasehold::sql::{FenceTable, SqlError};
use leasehold::{Elector, Fence, FenceStamp, Leader, LeaderConfig, PoolName};

const LEDGER: &str = "CREATE TABLE IF NOT EXISTS example_ledger (hour BIGINT PRIMARY KEY, \
    written_by TEXT NOT NULL, fence BIGINT NOT NULL)";

// ANCHOR: open
/// The data's database: a plain pool, and the fence table in it.
pub async fn open_data(data_url: &str) -> Result<PgPool, Box<dyn std::error::Error + Send + Sync>> {
    let db = PgPool::connect(data_url).await?;
    FenceTable::default().ensure_on(&db).await?; // no lease checks: no leases here
    sqlx::query(LEDGER).execute(&db).await?;
    Ok(db)
}
// ANCHOR_END: open

// ANCHOR: write
/// Writes the next hour's ledger row in one transaction fenced by `stamp`.
/// `Ok(false)`: refused, a newer leader (or another pool or slot) has
/// written; the transaction is dropped, so nothing of it is kept.
pub async fn write(db: &PgPool, stamp: &FenceStamp, me: &str) -> Result<bool, SqlError> {
    let mut tx = db.begin().await?;
    match FenceTable::default()
        .advance(&mut *tx, "ledger", stamp)
        .await
    {
        Err(SqlError::Stale { .. } | SqlError::OtherWriter { .. }) => return Ok(false),
        other => other?,
    }
    let hour: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(hour) + 1, 0) FROM example_ledger")
        .fetch_one(&mut *tx)
        .await?;
    sqlx::query("INSERT INTO example_ledger VALUES ($1, $2, $3)")
        .bind(hour)
        .bind(me)
        .bind(i64::try_from(stamp.fence().0).unwrap_or(i64::MAX))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(true)
}
// ANCHOR_END: write

// ANCHOR: replica
/// One replica: campaigns on the leader store at `leader_url`, and while it
/// leads writes an hour into `db` every `every`.
pub async fn replica(
    leader_url: &str,
    db: PgPool,
    me: &'static str,
    every: Duration,
) -> Result<Elector, Box<dyn std::error::Error + Send + Sync>> {
    let store = leasehold::connect(leader_url).await?; // the leases live here
    let config = LeaderConfig::builder("ledger-writer")
        .holder(me)
        .ttl(Duration::from_secs(5))
        .build()?;
    Ok(Leader::builder(store, config)
        .on_started_leading(move |l| println!("{me} leads with {}", l.stamp()))
        .on_error(move |e| eprintln!("{me} can never lead: {e}"))
        .campaign(move |leadership| {
            let db = db.clone();
            async move {
                while leadership.is_leading() {
                    match write(&db, leadership.stamp(), me).await {
                        Ok(true) => {}
                        Ok(false) => return println!("{me}: refused by its fence"),
                        Err(e) => return eprintln!("{me}: write failed: {e}"),
                    }
                    tokio::select! {
                        () = tokio::time::sleep(every) => {}
                        () = leadership.lost() => return,
                    }
                }
            }
        }))
}
// ANCHOR_END: replica

/// What a run saw: who wrote each hour, and what became of a write with the
/// first leader's stamp after the second had written.
#[derive(Debug)]
pub struct Outcome {
    /// `(hour, writer)`, in hour order.
    pub rows: Vec<(i64, String)>,
    /// Whether the first leader's stamp was still accepted after the hand-over.
    pub stale_accepted: bool,
}

/// Two replicas elect a leader on `leader_url` and write into `data_url`
/// until `hours` are written; the leader is shut down, the other takes over
/// and writes as many more; then a write with the first leader's stamp is
/// tried, as a leader paused through the hand-over would.
pub async fn run(
    leader_url: &str,
    data_url: &str,
    hours: i64,
) -> Result<Outcome, Box<dyn std::error::Error + Send + Sync>> {
    let db = open_data(data_url).await?;
    let every = Duration::from_millis(100);
    let mut replicas = vec![
        replica(leader_url, db.clone(), "a", every).await?,
        replica(leader_url, db.clone(), "b", every).await?,
    ];
    let count = || sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM example_ledger");
    let start = count().fetch_one(&db).await?;
    for goal in [start + hours, start + 2 * hours] {
        let give_up = Instant::now() + Duration::from_secs(60);
        let leader = loop {
            let leader = replicas.iter().position(Elector::is_leading);
            if count().fetch_one(&db).await? >= goal && leader.is_some() {
                break leader;
            }
            if Instant::now() > give_up {
                return Err(format!("fewer than {goal} hours written within 60 s").into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        if let Some(i) = leader.filter(|_| replicas.len() > 1) {
            replicas.remove(i).shutdown().await; // releases: the other takes over
        }
    }
    for r in replicas {
        r.shutdown().await;
    }
    // The first leader's stamp, as that leader would still carry it had it
    // been paused through the hand-over: its fence is in its first row.
    let fence: i64 = sqlx::query_scalar("SELECT fence FROM example_ledger WHERE hour = $1")
        .bind(start)
        .fetch_one(&db)
        .await?;
    let first_stamp = FenceStamp::new(
        PoolName::new("ledger-writer")?,
        0,
        Fence(u64::try_from(fence)?),
    );
    let stale_accepted = write(&db, &first_stamp, "a (paused)").await?;
    let rows = sqlx::query_as("SELECT hour, written_by FROM example_ledger ORDER BY hour")
        .fetch_all(&db)
        .await?;
    Ok(Outcome {
        rows,
        stale_accepted,
    })
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut args = std::env::args().skip(1);
    let (Some(leader_url), Some(data_url)) = (args.next(), args.next()) else {
        return Err("pass the leader store's URL (valkey://…) and a postgres:// URL".into());
    };
    let outcome = run(&leader_url, &data_url, 5).await?;
    for (hour, by) in &outcome.rows {
        println!("hour {hour} written by {by}");
    }
    println!(
        "a write with the first leader's stamp after the hand-over: {}",
        if outcome.stale_accepted {
            "accepted"
        } else {
            "refused"
        }
    );
    Ok(())
}
