//! Round trips per acquisition with 64 acquirers racing at once, and per
//! renewal, against the in-process **fake** API server (no kube-apiserver
//! runs on this project's machines). Needs the `stats` feature:
//!
//! `cargo xtask bench k8s` or
//! `cargo bench -p leasehold-k8s --features stats --bench acquire`

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_conformance::suite::fresh_pool_name;
use leasehold_core::{Floor, Operate, PoolSpec, Renewal, Strategy};
use leasehold_k8s::{KubeConfig, KubeStrategy};
use leasehold_k8s_fake::FakeApiServer;

const ACQUIRERS: usize = 64;
const CLIENTS: usize = 8;

struct Row {
    pool: u32,
    ok: usize,
    failed: usize,
    distinct: usize,
    avg: f64,
    max: u64,
    histogram: [u64; 16],
    renew_avg: f64,
    p50: Duration,
    p99: Duration,
}

async fn run(fake: &FakeApiServer, size: u32) -> Result<Row, String> {
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let config = KubeConfig::url(fake.url()).namespace("default");
        clients.push(
            KubeStrategy::connect(config)
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    let pool = PoolSpec::new(fresh_pool_name(), size, Duration::from_secs(60))
        .map_err(|e| e.to_string())?;
    // A fresh pool nobody held: declared new, so the race is not held back
    // by the wipe guard.
    clients[0]
        .prepare_new_pool(&pool)
        .await
        .map_err(|e| e.to_string())?;
    let barrier = Arc::new(tokio::sync::Barrier::new(ACQUIRERS + 1));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..ACQUIRERS {
        let (client, pool, barrier) = (clients[i % CLIENTS].clone(), pool.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            let start = Instant::now();
            let mut result = client.acquire(&pool, Floor::NONE).await;
            // A full pool's last acquirers may meet only taken slots in one
            // call (Contention): they try again, as the lease manager would.
            for _ in 0..20 {
                match &result {
                    Err(e) if e.is_retryable() => result = client.acquire(&pool, Floor::NONE).await,
                    _ => break,
                }
            }
            (result, start.elapsed(), client)
        });
    }
    barrier.wait().await;
    let (mut ok, mut failed) = (0, 0);
    let mut slots = HashSet::new();
    let mut latencies = Vec::new();
    let mut held = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let (r, took, client) = joined.map_err(|e| e.to_string())?;
        latencies.push(took);
        match r {
            Ok(g) => {
                ok += 1;
                slots.insert(g.slot);
                held.push((client, g));
            }
            Err(e) => {
                failed += 1;
                eprintln!("acquire failed: {e}");
            }
        }
    }
    latencies.sort();
    let (mut requests, mut acquisitions, mut max) = (0, 0, 0);
    let mut histogram = [0u64; 16];
    for c in &clients {
        let s = c.stats();
        requests += s.acquire_requests;
        acquisitions += s.acquisitions;
        max = max.max(s.max_acquire_requests);
        for (h, n) in histogram.iter_mut().zip(s.histogram) {
            *h += n;
        }
    }
    // Every holder renews once, all at once.
    let before: u64 = clients.iter().map(|c| c.stats().requests).sum();
    let mut renewals = tokio::task::JoinSet::new();
    for (client, grant) in held {
        let pool = pool.clone();
        renewals.spawn(async move { client.renew(&pool, &grant, Floor::NONE).await });
    }
    let mut renewed = 0u64;
    while let Some(r) = renewals.join_next().await {
        if matches!(r.map_err(|e| e.to_string())?, Renewal::Renewed { .. }) {
            renewed += 1;
        }
    }
    let after: u64 = clients.iter().map(|c| c.stats().requests).sum();
    Ok(Row {
        pool: size,
        ok,
        failed,
        distinct: slots.len(),
        avg: requests as f64 / acquisitions.max(1) as f64,
        max,
        histogram,
        renew_avg: (after - before) as f64 / renewed.max(1) as f64,
        p50: latencies[latencies.len() / 2],
        p99: latencies[latencies.len() * 99 / 100],
    })
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let fake = FakeApiServer::start().expect("fake API server");
    let mut rows = Vec::new();
    for size in [512, 64] {
        match rt.block_on(run(&fake, size)) {
            Ok(row) => rows.push(row),
            Err(e) => println!("pool of {size}: benchmark failed: {e}"),
        }
    }
    println!();
    println!(
        "k8s acquire on the {}: {ACQUIRERS} concurrent acquirers, {CLIENTS} clients",
        fake.describe()
    );
    println!(
        "| pool | ok | failed | distinct | round trips/acq avg | max | acquisitions by round trips | renew round trips | p50 | p99 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let hist: Vec<String> = r
            .histogram
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(rt, n)| format!("{rt}: {n}"))
            .collect();
        println!(
            "| {} | {} | {} | {} | {:.2} | {} | {} | {:.2} | {:.1?} | {:.1?} |",
            r.pool,
            r.ok,
            r.failed,
            r.distinct,
            r.avg,
            r.max,
            hist.join(", "),
            r.renew_avg,
            r.p50,
            r.p99
        );
    }
    let bad = rows
        .iter()
        .any(|r| r.failed > 0 || r.distinct != r.ok || r.ok != ACQUIRERS);
    if bad || rows.is_empty() {
        std::process::exit(1);
    }
}
