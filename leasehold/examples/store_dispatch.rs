//! What a call through `leasehold::Store` costs against the same call on
//! the strategy itself: claims and releases on an in-process store (no
//! network, so the dispatch is all that differs), best of 7 rounds.
//!
//! `cargo run --release -p leasehold --example store_dispatch`

use std::time::{Duration, Instant};

use leasehold::{Floor, PoolName, PoolSpec, Strategy};

const CALLS: u32 = 200_000;

async fn pairs<S: Strategy>(s: &S, pool: &PoolSpec) -> Duration {
    let mut best = Duration::MAX;
    for _ in 0..7 {
        let start = Instant::now();
        for i in 0..CALLS {
            let grant = s
                .acquire(pool, Floor(u64::from(i)))
                .await
                .expect("a free slot");
            s.release(pool, &grant, Floor(u64::from(i) + 1)).await;
        }
        best = best.min(start.elapsed());
    }
    best / CALLS
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let store = leasehold::connect("memory://dispatch")
        .await
        .expect("memory://");
    let memory = store.memory().expect("an in-process store").clone();
    let pool = PoolSpec::new(
        PoolName::new("dispatch").expect("a name"),
        1,
        Duration::from_secs(30),
    )
    .expect("a pool");
    let direct = pairs(&memory, &pool).await;
    let through = pairs(&store, &pool).await;
    println!(
        "claim + release: {:.0} ns on the strategy, {:.0} ns through leasehold::Store ({:.2}×)",
        direct.as_nanos() as f64,
        through.as_nanos() as f64,
        through.as_secs_f64() / direct.as_secs_f64()
    );
}
