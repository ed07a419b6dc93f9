//! A first program on etcd: a machine ID leased from a local member, three IDs
//! made under it, the lease given back. The store's URL is the first argument,
//! else `LEASEHOLD_URL`, else `etcd://127.0.0.1:2379`.
//!
//! ```sh
//! cargo run -p leasehold --example first_etcd --features etcd
//! cargo run -p leasehold --example first_etcd --features etcd -- etcd://10.0.0.1:2379,10.0.0.2:2379
//! ```

use std::time::Duration;

use leasehold::nonce::{Layout, Sortable64};
use leasehold::{LeaseConfig, LeaseManager};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("LEASEHOLD_URL").ok())
        .unwrap_or_else(|| "etcd://127.0.0.1:2379".to_owned());
    let store = leasehold::connect(&url).await?;
    // The layout is declared with the lease: the store records it for the
    // pool and refuses a process whose IDs could equal these.
    let layout = Layout::default64();
    let config = LeaseConfig::builder("machine-ids")
        .pool_size(512)
        .ttl(Duration::from_secs(15))
        .id_format(layout.id_format())
        .build()?;
    // Makes the pool's incarnation key. A pool without one (a new one, or
    // one whose keys were deleted or restored away) grants nothing for one
    // TTL plus 2 s; on an etcd with no key under the prefix and no lease
    // held, as at a first start, for 2 s. `leasehold prepare --new-pool`
    // says a pool is new (with every holder stopped) and skips the wait.
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
