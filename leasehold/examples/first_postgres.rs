//! A first program on PostgreSQL: a machine ID leased from a local server,
//! three IDs made under it, the lease given back. The store's URL is the first
//! argument, else `LEASEHOLD_URL`, else
//! `postgres://postgres@127.0.0.1:5432/postgres`.
//!
//! ```sh
//! cargo run -p leasehold --example first_postgres --features postgres
//! cargo run -p leasehold --example first_postgres --features postgres -- postgres://app:secret@db:5432/app
//! ```

use std::time::Duration;

use leasehold::nonce::{Layout, Sortable64};
use leasehold::{LeaseConfig, LeaseManager};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("LEASEHOLD_URL").ok())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let store = leasehold::connect(&url).await?;
    // The layout is declared with the lease: the store records it for the
    // pool and refuses a process whose IDs could equal these.
    let layout = Layout::default64();
    let config = LeaseConfig::builder("machine-ids")
        .pool_size(512)
        .ttl(Duration::from_secs(15))
        .id_format(layout.id_format())
        .build()?;
    // Creates the lease table and the pool's 512 rows, once (idempotent).
    store.operator().prepare(Some(config.pool())).await?;
    // Returns once a slot is held: no ID is ever made without a lease.
    let manager = LeaseManager::start(store, config).await?;
    let ids = Sortable64::with_layout(manager.gate(), layout)?;
    let lease = manager.gate().view();
    println!("slot {} with fence {}", lease.slot, lease.fence);
    for _ in 0..3 {
        println!("id {}", ids.next()?); // refused once the lease is not proven
    }
    manager.shutdown().await; // closes the gate, then releases the slot
    Ok(())
}
