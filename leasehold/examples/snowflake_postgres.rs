//! IDs in request handlers, on PostgreSQL: one machine ID (a slot of a pool
//! of 512) leased for the process, sortable 64-bit IDs made with it without
//! blocking the runtime's threads, and what a handler does while the lease
//! is lost: answer 503 with the Retry-After the lease's health gives.
//!
//! ```sh
//! cargo run -p leasehold --features postgres --example snowflake_postgres -- postgres://postgres@127.0.0.1:5432/postgres
//! ```

use std::time::Duration;

use leasehold::nonce::{Layout, Sortable64};
use leasehold::{LeaseConfig, LeaseManager};

/// What a handler answers.
#[derive(Debug, PartialEq, Eq)]
pub enum Response {
    /// 201, with the new order's ID.
    Created(String),
    /// 503: no ID can be made now.
    Unavailable {
        /// The `Retry-After` header, in seconds.
        retry_after: u64,
        /// Why, for the log.
        why: String,
    },
}

/// A request handler that needs a new ID (say, for a new order).
pub async fn create_order(ids: &Sortable64) -> Response {
    // `next_async` waits for the next millisecond, or for the clock to pass
    // the previous holder's last timestamp after a new lease, on the
    // runtime's timer instead of this thread. Without a lease no ID can be
    // proven unique: it refuses at once, and the answer is 503 with the
    // Retry-After the lease's health gives (here the gate's: the lease
    // manager's `health()` also says since when and until when).
    match ids.next_async().await {
        Ok(id) => Response::Created(id.to_string()),
        Err(_) => {
            let health = ids.gate().health();
            Response::Unavailable {
                retry_after: health.retry_after_secs().unwrap_or(1),
                why: health.reason,
            }
        }
    }
}

/// Leases a machine ID from the database at `url`, serves `requests`
/// concurrent requests, and gives the ID back. Returns the IDs made.
pub async fn run(url: &str, requests: usize) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let store = leasehold::connect(url).await?;
    // The ID layout is declared with the lease: the store records the
    // pool's format and refuses a process of another layout or epoch, whose
    // IDs could equal these.
    let layout = Layout::default64();
    let config = LeaseConfig::builder("order-ids")
        .pool_size(512)
        .ttl(Duration::from_secs(10))
        .id_format(layout.id_format())
        .on_lost(|loss| {
            eprintln!(
                "machine ID {} lost ({:?}): answering 503",
                loss.slot, loss.cause
            )
        })
        .build()?;
    store.operator().prepare(Some(config.pool())).await?; // the table and the rows, once
    // Blocks until a slot is held: no ID is ever made without one.
    let manager = LeaseManager::start(store, config).await?;
    println!("machine ID {}", manager.gate().view().slot);
    // What a readiness probe answers: 200 once IDs can be made.
    let health = manager.health();
    println!("readiness {}: {}", health.status, health.reason);
    let ids = Sortable64::with_layout(manager.gate(), layout)?;
    let mut handlers = tokio::task::JoinSet::new();
    for _ in 0..requests {
        let ids = ids.clone(); // one generation state per lease: clone it
        handlers.spawn(async move { create_order(&ids).await });
    }
    let mut made = Vec::new();
    while let Some(answer) = handlers.join_next().await {
        match answer? {
            Response::Created(id) => made.push(id),
            Response::Unavailable { why, .. } => return Err(why.into()),
        }
    }
    manager.shutdown().await; // closes the gate, then releases the slot
    Ok(made)
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("LEASEHOLD_SQL_URL").ok())
        .ok_or("pass a postgres:// URL (or set LEASEHOLD_SQL_URL)")?;
    let made = run(&url, 1_000).await?;
    println!(
        "{} IDs, first {} last {}",
        made.len(),
        made[0],
        made[made.len() - 1]
    );
    Ok(())
}
