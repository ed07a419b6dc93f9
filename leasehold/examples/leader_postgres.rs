//! The hourly invoice job on PostgreSQL: replicas elect one leader (a pool
//! of one slot), the leader bills one hour after another, and every bill is
//! a transaction fenced by the leader's stamp, so a leader paused past its
//! lease cannot write after its successor has. Here two replicas run in one
//! process; the leader is shut down and the other takes over.
//!
//! ```sh
//! cargo run -p leasehold --features postgres --example leader_postgres -- postgres://postgres@127.0.0.1:5432/postgres
//! ```

use std::time::{Duration, Instant};

use leasehold::sql::sqlx::{self, PgPool};
use leasehold::sql::{FenceTable, SqlError};
use leasehold::{Elector, Leader, LeaderConfig, Leadership, Store};

const INVOICES: &str = "CREATE TABLE IF NOT EXISTS example_invoices (hour BIGINT, \
    customer TEXT, amount BIGINT, billed_by TEXT, PRIMARY KEY (hour, customer))";

// ANCHOR: bill
/// Bills the next hour in one transaction fenced by this term's stamp.
/// `Ok(false)`: refused, a newer leader has written; stop leading.
async fn bill(db: &PgPool, leadership: &Leadership, me: &str) -> Result<bool, SqlError> {
    let mut tx = db.begin().await?;
    match FenceTable::default()
        .advance(&mut *tx, "invoices", leadership.stamp())
        .await
    {
        Err(SqlError::Stale { .. } | SqlError::OtherWriter { .. }) => return Ok(false),
        other => other?,
    }
    let hour: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(hour) + 1, 0) FROM example_invoices")
        .fetch_one(&mut *tx)
        .await?;
    for (customer, amount) in [("acme", 1200_i64), ("globex", 800)] {
        sqlx::query("INSERT INTO example_invoices VALUES ($1, $2, $3, $4)")
            .bind(hour)
            .bind(customer)
            .bind(amount)
            .bind(me)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(true)
}
// ANCHOR_END: bill

// ANCHOR: replica
/// One replica: campaigns, and while it leads bills an "hour" every `every`.
fn replica(store: Store, me: &'static str, every: Duration) -> Result<Elector, String> {
    // The leases' own database, through the pool the store hands out.
    let db = store
        .strategy::<leasehold::sql::SqlStrategy>()
        .and_then(|sql| sql.postgres())
        .ok_or("this example needs a postgres:// URL")?
        .clone();
    let config = LeaderConfig::builder("invoice-job")
        .holder(me)
        .ttl(Duration::from_secs(5));
    Ok(
        Leader::builder(store, config.build().map_err(|e| e.to_string())?)
            .on_started_leading(move |l| println!("{me} leads with {}", l.stamp()))
            .on_stopped_leading(move || println!("{me} stopped leading"))
            .on_error(move |e| eprintln!("{me} can never lead: {e}"))
            .campaign(move |leadership| {
                let db = db.clone();
                // Returning ends the term and releases the lease to a follower.
                async move {
                    while leadership.is_leading() {
                        match bill(&db, &leadership, me).await {
                            Ok(true) => {}
                            Ok(false) => return println!("{me}: refused by its fence"),
                            Err(e) => return eprintln!("{me}: billing failed: {e}"),
                        }
                        tokio::select! {
                            () = tokio::time::sleep(every) => {}
                            () = leadership.lost() => return,
                        }
                    }
                }
            }),
    )
}
// ANCHOR_END: replica

/// Runs two replicas on the database at `url` until `hours` are billed,
/// shuts the leader down, and runs until the other has billed as many more.
/// Returns who billed each hour.
pub async fn run(url: &str, hours: i64) -> Result<Vec<(i64, String)>, Box<dyn std::error::Error>> {
    let setup = leasehold::connect(url).await?;
    setup.operator().prepare(None).await?; // the lease table, once
    let sql = setup
        .strategy::<leasehold::sql::SqlStrategy>()
        .ok_or("a postgres:// URL")?;
    FenceTable::default().ensure(sql).await?;
    let db = sql.postgres().ok_or("a postgres:// URL")?.clone();
    sqlx::query(INVOICES).execute(&db).await?;
    let connect = || leasehold::connect(url);
    let every = Duration::from_millis(100);
    let mut replicas = vec![
        replica(connect().await?, "a", every)?,
        replica(connect().await?, "b", every)?,
    ];
    let count =
        || sqlx::query_scalar::<_, i64>("SELECT COUNT(DISTINCT hour) FROM example_invoices");
    let start = count().fetch_one(&db).await?;
    for goal in [start + hours, start + 2 * hours] {
        let give_up = Instant::now() + Duration::from_secs(60);
        let leader = loop {
            let leader = replicas.iter().position(Elector::is_leading);
            if count().fetch_one(&db).await? >= goal && leader.is_some() {
                break leader;
            }
            if Instant::now() > give_up {
                return Err(format!("fewer than {goal} hours billed within 60 s").into());
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
    let rows = sqlx::query_as(
        "SELECT hour, billed_by FROM example_invoices WHERE customer = 'acme' ORDER BY hour",
    );
    Ok(rows.fetch_all(&db).await?)
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("LEASEHOLD_SQL_URL").ok())
        .ok_or("pass a postgres:// URL (or set LEASEHOLD_SQL_URL)")?;
    for (hour, by) in run(&url, 5).await? {
        println!("hour {hour} billed by {by}");
    }
    Ok(())
}
