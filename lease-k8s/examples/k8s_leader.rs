//! Leader election on Kubernetes: a pool of one slot, and the fence going
//! into every write the leader makes.
//!
//! ```sh
//! cargo run -p leasehold-k8s --example k8s_leader                 # against the in-process FAKE API server
//! LEASEHOLD_K8S_KUBECONFIG=~/.kube/config \
//!   cargo run -p leasehold-k8s --example k8s_leader               # against a real cluster (namespace default)
//! ```
//!
//! Two candidates start; one leads and writes, carrying its fence. The
//! leader then freezes (it stops renewing without releasing, like a paused
//! or partitioned process): the other takes over one lease duration after it
//! last saw the Lease change, and the frozen leader's late write is refused
//! by the fenced store because a bigger fence has been seen.

use std::sync::Mutex;
use std::time::Duration;

use leasehold_core::{Fence, LeaseConfig, LeaseManager, Operate};
use leasehold_k8s::{KubeConfig, KubeStrategy};

/// Storage that checks fences: it refuses a write carrying a smaller fence
/// than one it has seen (DESIGN.md, timing rule 7).
#[derive(Default)]
struct FencedStore {
    highest: Mutex<Fence>,
}

impl FencedStore {
    fn write(&self, who: &str, fence: Fence, what: &str) -> Result<(), String> {
        let mut highest = self.highest.lock().unwrap_or_else(|e| e.into_inner());
        if fence < *highest {
            return Err(format!(
                "{who}: write {what:?} refused: fence {fence} < {}",
                *highest
            ));
        }
        *highest = fence;
        println!("{who}: wrote {what:?} with fence {fence}");
        Ok(())
    }
}

fn config() -> Result<LeaseConfig, Box<dyn std::error::Error>> {
    Ok(LeaseConfig::builder("leader")
        .pool_size(1)
        .ttl(Duration::from_secs(2))
        .renew_interval(Duration::from_millis(500))
        .safety_margin(Duration::from_millis(500))
        .acquire_timeout(Duration::from_secs(30))
        .build()?)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let fake;
    let kube = match std::env::var("LEASEHOLD_K8S_KUBECONFIG") {
        Ok(path) => {
            println!("using the cluster of {path}");
            KubeConfig::from_kubeconfig(path)
        }
        Err(_) => {
            fake = leasehold_k8s_fake::FakeApiServer::start()?;
            println!("using the {}", fake.describe());
            let kube = KubeConfig::url(fake.url()).namespace("default");
            // A fake of our own: nobody held the pool, so it is declared
            // new and the first start has no wipe guard to wait out. On a
            // cluster it waits one restart span (4 s here) the first time.
            KubeStrategy::connect(kube.clone())
                .await?
                .prepare_new_pool(config()?.pool())
                .await?;
            kube
        }
    };
    let store = FencedStore::default();

    let a = LeaseManager::start(KubeStrategy::connect(kube.clone()).await?, config()?).await?;
    let gate_a = a.gate();
    let fence_a = gate_a.view().fence;
    store.write("a", fence_a, "a leads")?;

    // b waits: the only slot is held, and renewed.
    let b_strategy = KubeStrategy::connect(kube).await?;
    let b_config = config()?;
    let b = tokio::spawn(LeaseManager::start(b_strategy, b_config));
    tokio::time::sleep(Duration::from_secs(3)).await;
    println!("after 3 s b still waits: {}", !b.is_finished());

    // a freezes: dropped without shutdown, nothing renews and nothing is
    // released (its gate closes by itself at its deadline).
    drop(a);
    let b = b.await??;
    let fence_b = b.gate().view().fence;
    println!("b leads with fence {fence_b} (a had {fence_a})");
    store.write("b", fence_b, "b leads")?;

    // a wakes up and tries a write with what it last knew: refused twice
    // over: its own gate is closed, and the store has seen a bigger fence.
    println!("a's gate is open: {}", gate_a.check_now().is_ok());
    if let Err(refused) = store.write("a", fence_a, "a, late") {
        println!("{refused}");
    }
    b.shutdown().await;
    Ok(())
}
