//! 512 concurrent acquirers against one pool of 512 slots, on etcd 3.5 and
//! 3.4: distinct slots, failures, round trips per acquisition, total time.
//!
//! `cargo bench -p leasehold-etcd --bench acquire`

use leasehold_core::Floor;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_conformance::servers::{self, Server, ServerKind};
use leasehold_conformance::suite::fresh_pool_name;
use leasehold_core::{PoolSpec, Strategy};
use leasehold_etcd::{EtcdConfig, EtcdStrategy};

const ACQUIRERS: usize = 512;
const POOL: u32 = 512;
const CONNECTIONS: usize = 8;

struct Row {
    server: String,
    ok: usize,
    failed: usize,
    distinct: usize,
    total: Duration,
    rt_avg: f64,
    rt_max: u64,
    p50: Duration,
    p99: Duration,
}

async fn run(server: &Server) -> Result<Row, String> {
    let mut clients = Vec::new();
    for _ in 0..CONNECTIONS {
        let leases = EtcdStrategy::connect(EtcdConfig::new([server.url.clone()]))
            .await
            .map_err(|e| e.to_string())?;
        // Open the connection before the clock starts.
        leases
            .client()
            .clone()
            .get("leasehold-bench-warmup", None)
            .await
            .map_err(|e| e.to_string())?;
        clients.push(leases);
    }
    let pool = PoolSpec::new(fresh_pool_name(), POOL, Duration::from_secs(60))
        .map_err(|e| e.to_string())?;
    // A fresh name, declared new: else its first claims would wait out the
    // wipe guard's span, as a pool whose keys are all gone must.
    leasehold_core::Operate::prepare_new_pool(&clients[0], &pool)
        .await
        .map_err(|e| e.to_string())?;
    let barrier = Arc::new(tokio::sync::Barrier::new(ACQUIRERS + 1));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..ACQUIRERS {
        let leases = clients[i % CONNECTIONS].clone();
        let pool = pool.clone();
        let barrier = barrier.clone();
        tasks.spawn(async move {
            barrier.wait().await;
            let start = Instant::now();
            let r = leases.acquire(&pool, Floor::NONE).await;
            (r, start.elapsed())
        });
    }
    barrier.wait().await;
    let start = Instant::now();
    let mut slots = HashSet::new();
    let mut latencies = Vec::new();
    let (mut ok, mut failed) = (0, 0);
    while let Some(joined) = tasks.join_next().await {
        let (r, took) = joined.map_err(|e| e.to_string())?;
        latencies.push(took);
        match r {
            Ok(g) => {
                ok += 1;
                slots.insert(g.slot);
            }
            Err(e) => {
                failed += 1;
                eprintln!("acquire failed: {e}");
            }
        }
    }
    let total = start.elapsed();
    latencies.sort();
    let (mut rpcs, mut acquisitions, mut rt_max) = (0, 0, 0);
    for c in &clients {
        let s = c.stats();
        rpcs += s.acquire_rpcs;
        acquisitions += s.acquisitions;
        rt_max = rt_max.max(s.max_acquire_rpcs);
    }
    Ok(Row {
        server: format!("{} {}", server.kind, server.version),
        ok,
        failed,
        distinct: slots.len(),
        total,
        rt_avg: rpcs as f64 / acquisitions.max(1) as f64,
        rt_max,
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
    let mut rows = Vec::new();
    for kind in [ServerKind::Etcd35, ServerKind::Etcd34] {
        match servers::provide(kind) {
            Ok(server) => match rt.block_on(run(&server)) {
                Ok(row) => rows.push(row),
                Err(e) => println!("{kind}: benchmark failed: {e}"),
            },
            Err(missing) => println!("{kind}: skipped: {missing}"),
        }
    }
    println!();
    println!(
        "etcd acquire: {ACQUIRERS} concurrent acquirers, pool of {POOL}, {CONNECTIONS} connections"
    );
    println!(
        "| server | ok | failed | distinct slots | total | round trips/acq (avg) | max | p50 | p99 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {:.0?} | {:.2} | {} | {:.1?} | {:.1?} |",
            r.server, r.ok, r.failed, r.distinct, r.total, r.rt_avg, r.rt_max, r.p50, r.p99
        );
    }
    let bad = rows
        .iter()
        .any(|r| r.failed > 0 || r.distinct != r.ok || r.ok != ACQUIRERS);
    if bad || rows.is_empty() {
        std::process::exit(1);
    }
}
