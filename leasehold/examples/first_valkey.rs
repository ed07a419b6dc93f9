//! A first program on Valkey or Redis: a machine ID leased from a local server,
//! three IDs made under it, the lease given back. The store's URL is the first
//! argument, else `LEASEHOLD_URL`, else `redis://127.0.0.1:6379`.
//!
//! ```sh
//! cargo run -p leasehold --example first_valkey --features valkey
//! cargo run -p leasehold --example first_valkey --features valkey -- 'valkey://cache:6379/0?prefix=ids'
//! ```

use std::time::Duration;

use leasehold::nonce::{Layout, Sortable64};
use leasehold::{LeaseConfig, LeaseManager};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("LEASEHOLD_URL").ok())
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned());
    let store = leasehold::connect(&url).await?;
    // The layout is declared with the lease: the store records it for the
    // pool and refuses a process whose IDs could equal these.
    let layout = Layout::default64();
    let config = LeaseConfig::builder("machine-ids")
        .pool_size(512)
        .ttl(Duration::from_secs(15))
        .id_format(layout.id_format())
        .build()?;
    // Makes the pool's record. A pool whose record is not on the server (a
    // new one, or one wiped by FLUSHALL) grants nothing for one TTL plus
    // 2 s, the first start included; `leasehold prepare --new-pool` says a
    // pool is new (with every holder stopped) and skips that wait.
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
