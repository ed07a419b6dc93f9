//! 512 concurrent acquirers against one pool of 512, on PostgreSQL and on
//! MariaDB: leasehold's one-round-trip acquisition next to the
//! read-candidates-then-compare-and-swap baseline, in the same run.
//!
//! Every acquirer is its own node: its own `SqlStrategy` with one connection,
//! connected before the clock starts. Round trips are counted on the wire by a
//! proxy between the acquirers and the database: one round trip is a client
//! message after the server's answer (or the first), however many statements
//! it carries. Both algorithms send plain-text statements, so neither pays for
//! preparing statements on its fresh connection.
//!
//! `cargo bench -p leasehold-sql --bench acquire`

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use leasehold_conformance::servers::{ServerKind, provide};
use leasehold_core::{PoolName, PoolSpec, Strategy, Token};
use leasehold_sql::{Engine, SqlConfig, SqlStrategy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const ACQUIRERS: u32 = 512;

/// Counts round trips: per connection, a client write that follows a server
/// write (or is the first) starts a new one.
struct CountingProxy {
    addr: SocketAddr,
    trips: Arc<AtomicU64>,
}

impl CountingProxy {
    async fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let trips = Arc::new(AtomicU64::new(0));
        let counter = trips.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let counter = counter.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    // 0: nothing yet, 1: client spoke last, 2: server spoke last.
                    let last = Arc::new(AtomicU8::new(0));
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let up_last = last.clone();
                    let up = async move {
                        let mut buf = vec![0u8; 16 * 1024];
                        loop {
                            let n = match cr.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => n,
                            };
                            if up_last.swap(1, Ordering::SeqCst) != 1 {
                                counter.fetch_add(1, Ordering::Relaxed);
                            }
                            if sw.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        let _ = sw.shutdown().await;
                    };
                    let down = async move {
                        let mut buf = vec![0u8; 16 * 1024];
                        loop {
                            let n = match sr.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => n,
                            };
                            last.store(2, Ordering::SeqCst);
                            if cw.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        let _ = cw.shutdown().await;
                    };
                    tokio::join!(up, down);
                });
            }
        });
        Ok(Self { addr, trips })
    }

    fn trips(&self) -> u64 {
        self.trips.load(Ordering::SeqCst)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Algorithm {
    Ours,
    Baseline,
}

impl Algorithm {
    fn name(self) -> &'static str {
        match self {
            Self::Ours => "leasehold (one round trip)",
            Self::Baseline => "read 5, then CAS (baseline)",
        }
    }
}

struct Outcome {
    grants: usize,
    distinct: usize,
    failures: Vec<String>,
    trips: u64,
    wall: Duration,
    cas_conflicts: u64,
}

/// The baseline: read up to 5 free rows ordered by slot, claim one with
/// `WHERE slot = ? AND version = ?` (the fence is the version), try the next
/// on conflict, read again when all 5 were lost.
async fn baseline_acquire(
    s: &SqlStrategy,
    pool: &PoolSpec,
    conflicts: &AtomicU64,
) -> Result<u32, String> {
    let t = s.table().as_str();
    let (now, q) = match s.engine() {
        Engine::MySql => ("CURRENT_TIMESTAMP(6)", '`'),
        _ => ("CURRENT_TIMESTAMP(6)", '"'),
    };
    let name = pool.name.as_str();
    let read = format!(
        "SELECT slot, fence FROM {q}{t}{q} WHERE pool = '{name}' AND slot < {} \
         AND (token IS NULL OR expires_at <= {now}) ORDER BY slot LIMIT 5",
        pool.size
    );
    let micros = pool.ttl.as_micros();
    for _ in 0..10_000 {
        let candidates: Vec<(i64, i64)> = match s.engine() {
            Engine::Postgres => {
                let rows = sqlx::raw_sql(&read)
                    .fetch_all(s.postgres().unwrap())
                    .await
                    .map_err(|e| e.to_string())?;
                rows.iter()
                    .map(|r| {
                        use sqlx::Row;
                        (i64::from(r.get::<i32, _>(0)), r.get::<i64, _>(1))
                    })
                    .collect()
            }
            _ => {
                let rows = sqlx::raw_sql(&read)
                    .fetch_all(s.mysql().unwrap())
                    .await
                    .map_err(|e| e.to_string())?;
                rows.iter()
                    .map(|r| {
                        use sqlx::Row;
                        (
                            i64::from(r.get::<u32, _>(0)),
                            i64::try_from(r.get::<u64, _>(1)).unwrap_or(i64::MAX),
                        )
                    })
                    .collect()
            }
        };
        if candidates.is_empty() {
            return Err("pool exhausted".to_owned());
        }
        for (slot, version) in candidates {
            let tok = Token::random().to_hex();
            let claim = match s.engine() {
                Engine::Postgres => format!(
                    "UPDATE \"{t}\" SET token = decode('{tok}', 'hex'), fence = fence + 1, \
                     holder = 'bench', expires_at = {now} + {micros} * INTERVAL '1 microsecond', \
                     acquired_at = {now}, renewed_at = {now} \
                     WHERE pool = '{name}' AND slot = {slot} AND fence = {version}"
                ),
                _ => format!(
                    "UPDATE `{t}` SET token = X'{tok}', fence = fence + 1, holder = 'bench', \
                     expires_at = {now} + INTERVAL {micros} MICROSECOND, acquired_at = {now}, \
                     renewed_at = {now} WHERE pool = '{name}' AND slot = {slot} AND fence = {version}"
                ),
            };
            let n = match s.engine() {
                Engine::Postgres => sqlx::raw_sql(&claim)
                    .execute(s.postgres().unwrap())
                    .await
                    .map(|r| r.rows_affected()),
                _ => sqlx::raw_sql(&claim)
                    .execute(s.mysql().unwrap())
                    .await
                    .map(|r| r.rows_affected()),
            }
            .map_err(|e| e.to_string())?;
            if n == 1 {
                return Ok(u32::try_from(slot).unwrap_or(u32::MAX));
            }
            conflicts.fetch_add(1, Ordering::Relaxed);
        }
    }
    Err("gave up after 10000 reads".to_owned())
}

async fn run_once(
    url: &str,
    proxy: &CountingProxy,
    setup: &SqlStrategy,
    algorithm: Algorithm,
) -> Result<Outcome, String> {
    let hex = Token::random().to_hex();
    let pool = PoolSpec::new(
        PoolName::new(format!("bench{}", &hex[..8])).unwrap(),
        ACQUIRERS,
        Duration::from_secs(300),
    )
    .unwrap();
    setup.ensure_pool(&pool).await.map_err(|e| e.to_string())?;
    // Every node connects first (not timed, not counted).
    let mut nodes = Vec::new();
    let mut connecting = tokio::task::JoinSet::new();
    for _ in 0..ACQUIRERS {
        let url = url.to_owned();
        connecting.spawn(async move {
            SqlStrategy::connect_with(
                SqlConfig::new(url)
                    .max_connections(1)
                    .op_timeout(Duration::from_secs(60)),
            )
            .await
        });
    }
    while let Some(r) = connecting.join_next().await {
        nodes.push(r.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?);
    }
    let conflicts = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(tokio::sync::Barrier::new(nodes.len() + 1));
    let mut tasks = tokio::task::JoinSet::new();
    for node in nodes.clone() {
        let (pool, barrier, conflicts) = (pool.clone(), barrier.clone(), conflicts.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            match algorithm {
                Algorithm::Ours => node
                    .acquire(&pool)
                    .await
                    .map(|g| g.slot)
                    .map_err(|e| e.to_string()),
                Algorithm::Baseline => baseline_acquire(&node, &pool, &conflicts).await,
            }
        });
    }
    let before = proxy.trips();
    barrier.wait().await;
    let start = Instant::now();
    let mut slots = Vec::new();
    let mut failures = Vec::new();
    while let Some(r) = tasks.join_next().await {
        match r.map_err(|e| e.to_string())? {
            Ok(slot) => slots.push(slot),
            Err(e) => failures.push(e),
        }
    }
    let wall = start.elapsed();
    let trips = proxy.trips() - before;
    for n in &nodes {
        n.close().await;
    }
    let distinct = slots.iter().collect::<HashSet<_>>().len();
    Ok(Outcome {
        grants: slots.len(),
        distinct,
        failures,
        trips,
        wall,
        cas_conflicts: conflicts.load(Ordering::Relaxed),
    })
}

fn main() -> std::process::ExitCode {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut rows = Vec::new();
    let mut ok = true;
    for kind in [ServerKind::Postgres15, ServerKind::MariaDb] {
        let server = match provide(kind) {
            Ok(s) => s,
            Err(missing) => {
                eprintln!("{missing}");
                ok = false;
                continue;
            }
        };
        let result: Result<(), String> = rt.block_on(async {
            let upstream = server.addr().ok_or("server address")?;
            let proxy = CountingProxy::start(upstream)
                .await
                .map_err(|e| e.to_string())?;
            let url = server.url_via(proxy.addr);
            let setup = SqlStrategy::connect(&server.url)
                .await
                .map_err(|e| e.to_string())?;
            for algorithm in [Algorithm::Ours, Algorithm::Baseline] {
                let o = run_once(&url, &proxy, &setup, algorithm).await?;
                if !o.failures.is_empty()
                    || o.distinct != o.grants
                    || o.grants != ACQUIRERS as usize
                {
                    ok = false;
                }
                rows.push((setup.server_version().to_owned(), algorithm, o));
            }
            setup.close().await;
            Ok(())
        });
        if let Err(e) = result {
            eprintln!("{kind}: {e}");
            ok = false;
        }
    }
    println!();
    println!(
        "{:<22} {:<28} {:>9} {:>9} {:>9} {:>13} {:>10} {:>11}",
        "server",
        "algorithm",
        "acquirers",
        "distinct",
        "failures",
        "trips/acquire",
        "wall",
        "CAS misses"
    );
    for (server, algorithm, o) in &rows {
        let short: String = server.chars().take(22).collect();
        println!(
            "{:<22} {:<28} {:>9} {:>9} {:>9} {:>13.2} {:>8.0}ms {:>11}",
            short,
            algorithm.name(),
            ACQUIRERS,
            o.distinct,
            o.failures.len(),
            o.trips as f64 / o.grants.max(1) as f64,
            o.wall.as_secs_f64() * 1000.0,
            if *algorithm == Algorithm::Baseline {
                o.cas_conflicts.to_string()
            } else {
                "-".to_owned()
            }
        );
        if let Some(f) = o.failures.first() {
            println!("    first failure: {f}");
        }
    }
    if ok {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
