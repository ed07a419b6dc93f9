//! `cargo bench -p leasehold-valkey --bench acquire`
//!
//! 512 concurrent acquirers (one connection each) against one pool of 512 on
//! Redis 8.2, side by side in one run:
//! - the one-round-trip claim script (HSETEX path),
//! - the one-round-trip claim script of the script path (SET NX PX),
//! - the list-then-claim baseline: HKEYS, pick the lowest free slot,
//!   HSETEX FNX, up to 3 attempts.
//!
//! Then the cost of the claim script's scan by pool size and occupancy, to
//! judge a scan inside the script against keeping a free-list.

use leasehold_core::Floor;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fred::prelude::{ClientLike, ReconnectPolicy};
use fred::types::config::Config;
use fred::types::{Builder, ClusterHash, CustomCommand, Value};
use leasehold_conformance::servers::{ServerKind, provide};
use leasehold_conformance::suite::fresh_pool_name;
use leasehold_core::{DurabilityPolicy, PoolSpec, Release, Strategy, Token};
use leasehold_valkey::{Method, PoolKeys, ValkeyConfig, ValkeyStrategy, marker};

const ACQUIRERS: usize = 512;
const POOL: u32 = 512;
const ROUNDS: usize = 3;
const TTL: Duration = Duration::from_secs(60);

struct Run {
    wall: Duration,
    grants: usize,
    failures: usize,
    duplicates: usize,
    round_trips: u64,
}

impl Run {
    fn rt_per_acq(&self) -> f64 {
        self.round_trips as f64 / ACQUIRERS as f64
    }
}

async fn raw_client(url: &str) -> fred::clients::Client {
    let config = Config::from_url(url).expect("url");
    let client = Builder::from_config(config)
        .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(10))
        .set_policy(ReconnectPolicy::new_constant(3, 50))
        .build()
        .expect("client");
    client.init().await.expect("connect");
    client
}

async fn cmd(c: &fred::clients::Client, name: &'static str, args: Vec<Value>) -> Value {
    c.custom::<Value, Value>(
        CustomCommand::new_static(name, ClusterHash::FirstKey, false),
        args,
    )
    .await
    .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn check(slots: &[u32], failures: usize, wall: Duration, round_trips: u64) -> Run {
    let mut sorted = slots.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    Run {
        wall,
        grants: slots.len(),
        failures,
        duplicates: slots.len() - sorted.len(),
        round_trips,
    }
}

/// The strategy's one-round-trip claim, 512 acquirers on 512 connections.
async fn claim_script(url: &str, method: Method) -> Run {
    let mut strategies = Vec::with_capacity(ACQUIRERS);
    for _ in 0..ACQUIRERS {
        strategies.push(
            ValkeyStrategy::connect(
                ValkeyConfig::new(url)
                    .durability(DurabilityPolicy::Throwaway)
                    .method(method)
                    .op_timeout(Duration::from_secs(10)),
            )
            .await
            .expect("connect"),
        );
    }
    let pool = PoolSpec::new(fresh_pool_name(), POOL, TTL).expect("pool");
    let barrier = Arc::new(tokio::sync::Barrier::new(ACQUIRERS + 1));
    let mut tasks = tokio::task::JoinSet::new();
    for s in &strategies {
        let (s, pool, barrier) = (s.clone(), pool.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            s.acquire(&pool, Floor::NONE).await.map(|g| g.slot)
        });
    }
    barrier.wait().await;
    let start = Instant::now();
    let mut slots = Vec::new();
    let mut failures = 0;
    while let Some(r) = tasks.join_next().await {
        match r.expect("task") {
            Ok(slot) => slots.push(slot),
            Err(_) => failures += 1,
        }
    }
    let wall = start.elapsed();
    let round_trips = strategies.iter().map(ValkeyStrategy::round_trips).sum();
    for s in &strategies {
        let _ = s.client().quit().await;
    }
    check(&slots, failures, wall, round_trips)
}

/// The baseline: HKEYS, lowest free slot, HSETEX FNX, up to 3 attempts.
async fn list_then_claim(url: &str) -> Run {
    let mut clients = Vec::with_capacity(ACQUIRERS);
    for _ in 0..ACQUIRERS {
        clients.push(raw_client(url).await);
    }
    let keys = PoolKeys::new("leasehold", &fresh_pool_name());
    let round_trips = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(tokio::sync::Barrier::new(ACQUIRERS + 1));
    let mut tasks = tokio::task::JoinSet::new();
    for c in &clients {
        let c = c.clone();
        let (key, barrier, rts) = (keys.leases.clone(), barrier.clone(), round_trips.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            let token = Token::random();
            for _ in 0..3 {
                rts.fetch_add(1, Ordering::Relaxed);
                let fields = cmd(&c, "HKEYS", vec![key.as_str().into()]).await;
                let mut held = vec![false; POOL as usize];
                if let Value::Array(fields) = fields {
                    for f in fields {
                        if let Some(n) = f.as_string().and_then(|s| s.parse::<usize>().ok())
                            && n < held.len()
                        {
                            held[n] = true;
                        }
                    }
                }
                let slot = held.iter().position(|h| !h)?;
                rts.fetch_add(1, Ordering::Relaxed);
                let slot = slot as u32;
                let ok = cmd(
                    &c,
                    "HSETEX",
                    vec![
                        key.as_str().into(),
                        "FNX".into(),
                        "PX".into(),
                        (TTL.as_millis() as i64).into(),
                        "FIELDS".into(),
                        2.into(),
                        slot.to_string().into(),
                        token.to_hex().into(),
                        marker(slot, &token).into(),
                        slot.to_string().into(),
                    ],
                )
                .await;
                if ok.as_i64() == Some(1) {
                    return Some(slot);
                }
            }
            None
        });
    }
    barrier.wait().await;
    let start = Instant::now();
    let mut slots = Vec::new();
    let mut failures = 0;
    while let Some(r) = tasks.join_next().await {
        match r.expect("task") {
            Some(slot) => slots.push(slot),
            None => failures += 1,
        }
    }
    let wall = start.elapsed();
    for c in &clients {
        let _ = c.quit().await;
    }
    check(&slots, failures, wall, round_trips.load(Ordering::Relaxed))
}

struct ScanCost {
    /// The first claim after slots `0..held` were taken behind the hint's
    /// back (as by expiry): the scan walks `held` slot fields.
    cold: Duration,
    /// Claim + release afterwards, mean of 20: the hint points at the slot.
    steady: Duration,
    /// An acquisition on the full pool, mean of 20 (`HLEN` answers).
    exhausted: Duration,
}

async fn scan_cost(url: &str, size: u32, held: u32) -> ScanCost {
    let s = ValkeyStrategy::connect(
        ValkeyConfig::new(url)
            .durability(DurabilityPolicy::Throwaway)
            .method(Method::Hsetex),
    )
    .await
    .expect("connect");
    let pool = PoolSpec::new(fresh_pool_name(), size, TTL).expect("pool");
    let keys = s.keys(pool.name());
    let fill = |from: u32, to: u32| {
        let mut args: Vec<Value> = vec![
            keys.leases.as_str().into(),
            "PX".into(),
            (TTL.as_millis() as i64).into(),
            "FIELDS".into(),
            (2 * (to - from) as i64).into(),
        ];
        for n in from..to {
            let t = Token::random();
            args.extend([
                n.to_string().into(),
                t.to_hex().into(),
                marker(n, &t).into(),
                n.to_string().into(),
            ]);
        }
        args
    };
    // The pool's fences hash first: leases without it read as a lost fences
    // hash, which claims refuse.
    cmd(
        s.client(),
        "HSET",
        vec![keys.fences.as_str().into(), "next".into(), "0".into()],
    )
    .await;
    let mut slot = 0;
    while slot < held {
        let end = (slot + 1000).min(held);
        cmd(s.client(), "HSETEX", fill(slot, end)).await;
        slot = end;
    }
    let start = Instant::now();
    let g = s.acquire(&pool, Floor::NONE).await.expect("claim");
    let cold = start.elapsed();
    assert_eq!(g.slot, held, "claimed the lowest free slot");
    assert_eq!(s.release(&pool, &g, Floor::NONE).await, Release::Released);
    let n = 20;
    let start = Instant::now();
    for _ in 0..n {
        let g = s.acquire(&pool, Floor::NONE).await.expect("claim");
        assert_eq!(g.slot, held, "claimed the lowest free slot");
        assert_eq!(s.release(&pool, &g, Floor::NONE).await, Release::Released);
    }
    let steady = start.elapsed() / n;
    cmd(s.client(), "HSETEX", fill(held, size)).await;
    let start = Instant::now();
    for _ in 0..n {
        let r = s.acquire(&pool, Floor::NONE).await;
        assert!(r.is_err(), "full pool answered {r:?}");
    }
    let exhausted = start.elapsed() / n;
    cmd(s.client(), "DEL", vec![keys.leases.as_str().into()]).await;
    ScanCost {
        cold,
        steady,
        exhausted,
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn main() -> ExitCode {
    let server = match provide(ServerKind::Redis8) {
        Ok(s) => s,
        Err(missing) => {
            eprintln!("acquire bench: {missing}");
            return if leasehold_conformance::in_ci() {
                ExitCode::FAILURE
            } else {
                eprintln!("acquire bench: NOT RUN (no Redis 8 server)");
                ExitCode::SUCCESS
            };
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let url = server.url.clone();
    println!(
        "\n{ACQUIRERS} concurrent acquirers, one connection each, pool of {POOL}, on {}\n",
        server.describe()
    );
    println!(
        "{:<40} {:>5} {:>7} {:>9} {:>10} {:>9} {:>10}",
        "method", "round", "grants", "failures", "dup slots", "RT/acq", "wall"
    );
    let mut totals: Vec<(&str, Vec<Run>)> = vec![
        ("claim script, HSETEX path (1 RT)", Vec::new()),
        ("claim script, SET NX path (1 RT)", Vec::new()),
        ("baseline: HKEYS + HSETEX FNX, 3 tries", Vec::new()),
    ];
    for round in 1..=ROUNDS {
        for (name, runs) in &mut totals {
            let run = rt.block_on(async {
                match *name {
                    n if n.contains("HSETEX path") => claim_script(&url, Method::Hsetex).await,
                    n if n.contains("SET NX") => claim_script(&url, Method::Scripts).await,
                    _ => list_then_claim(&url).await,
                }
            });
            println!(
                "{:<40} {:>5} {:>7} {:>9} {:>10} {:>9.3} {:>10}",
                name,
                round,
                run.grants,
                run.failures,
                run.duplicates,
                run.rt_per_acq(),
                ms(run.wall)
            );
            runs.push(run);
        }
    }
    println!("\nsummary over {ROUNDS} rounds (median wall time):");
    for (name, runs) in &totals {
        let mut walls: Vec<Duration> = runs.iter().map(|r| r.wall).collect();
        walls.sort();
        let rt: f64 = runs.iter().map(Run::rt_per_acq).sum::<f64>() / runs.len() as f64;
        let failures: usize = runs.iter().map(|r| r.failures).sum();
        let dups: usize = runs.iter().map(|r| r.duplicates).sum();
        println!(
            "  {name:<40} RT/acq {rt:>6.3}  failures {failures:>4}  dup slots {dups}  wall {}",
            ms(walls[walls.len() / 2])
        );
    }

    println!("\nclaim script cost by pool size and occupancy (HSETEX path, one connection):");
    println!(
        "{:>10} {:>10} {:>24} {:>22} {:>18}",
        "pool size", "held", "cold claim (full scan)", "claim+release (hint)", "exhausted answer"
    );
    for (size, held) in [
        (512, 0),
        (512, 511),
        (16_384, 8_192),
        (16_384, 16_383),
        (65_536, 65_535),
    ] {
        let c = rt.block_on(scan_cost(&url, size, held));
        println!(
            "{size:>10} {held:>10} {:>24} {:>22} {:>18}",
            ms(c.cold),
            ms(c.steady),
            ms(c.exhausted)
        );
    }
    drop(rt);
    drop(server);
    ExitCode::SUCCESS
}
