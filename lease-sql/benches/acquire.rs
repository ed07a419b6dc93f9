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
//! Then the same acquisition on a PostgreSQL 15 primary with an asynchronous
//! and with a synchronous standby, with the guards on (the promotion guard's
//! record is read by every claim), side by side with the single server.
//!
//! `cargo bench -p leasehold-sql --bench acquire`
//!
//! The servers are speed-tuned (they can forget), so leasehold runs with its
//! guards off. `LEASEHOLD_BENCH_DURABLE=1` starts durable servers instead,
//! and with it `LEASEHOLD_BENCH_GUARDED=1` keeps leasehold's guards on, as a
//! deployment would: the promotion guard's record is then read (and written
//! once) by every claim.

use leasehold_core::Floor;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use leasehold_conformance::servers::{ServerKind, Settings, provide_with, short_version};
use leasehold_conformance::topology::postgres::{PgPair, Replication};
use leasehold_core::{DurabilityPolicy, PoolName, PoolSpec, Strategy, Token};
use leasehold_sql::{SqlConfig, SqlStrategy};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Whether the servers are durable (`LEASEHOLD_BENCH_DURABLE=1`).
fn durable() -> bool {
    std::env::var("LEASEHOLD_BENCH_DURABLE").is_ok_and(|v| v == "1")
}

/// Whether leasehold's guards are on (`LEASEHOLD_BENCH_GUARDED=1`; a server
/// that can forget refuses them).
fn guarded() -> bool {
    std::env::var("LEASEHOLD_BENCH_GUARDED").is_ok_and(|v| v == "1")
}

/// The acquirers and the pool size (`LEASEHOLD_BENCH_ACQUIRERS` overrides, for quick runs).
fn acquirers() -> u32 {
    std::env::var("LEASEHOLD_BENCH_ACQUIRERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512)
}

/// Counts round trips: per connection, a client write that follows a server
/// write (or is the first) starts a new one.
struct CountingProxy {
    addr: SocketAddr,
    trips: Arc<AtomicU64>,
}

/// Copies `from` to `to` until either side closes, calling `on_read` before
/// forwarding each read (`side` names the sender in traces).
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    conn: u16,
    side: &str,
    mut on_read: impl FnMut(),
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        on_read();
        if trace() {
            eprintln!(
                "{conn} {side} {n:5} bytes {:?}",
                String::from_utf8_lossy(&buf[..n.min(60)])
            );
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

impl CountingProxy {
    async fn start(upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let trips = Arc::new(AtomicU64::new(0));
        let counter = trips.clone();
        tokio::spawn(async move {
            while let Ok((client, peer)) = listener.accept().await {
                let conn = peer.port();
                let counter = counter.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    // 0: nothing yet, 1: client spoke last, 2: server spoke last.
                    let last = Arc::new(AtomicU8::new(0));
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let up_last = last.clone();
                    let up = pump(cr, sw, conn, "client", move || {
                        if up_last.swap(1, Ordering::SeqCst) != 1 {
                            counter.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                    let down = pump(sr, cw, conn, "server", move || {
                        last.store(2, Ordering::SeqCst)
                    });
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

fn trace() -> bool {
    std::env::var_os("LEASEHOLD_BENCH_TRACE").is_some()
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

/// A baseline node's own connection (no sqlx pool: it pings on every
/// release, which would double the baseline's round trips).
enum Raw {
    Pg(sqlx::PgConnection),
    My(sqlx::MySqlConnection),
}

impl Raw {
    async fn connect(url: &str) -> Result<Self, String> {
        use sqlx::Connection;
        Ok(
            if leasehold_sql::Engine::from_url(url) == leasehold_sql::Engine::Postgres {
                Self::Pg(
                    sqlx::PgConnection::connect(url)
                        .await
                        .map_err(|e| e.to_string())?,
                )
            } else {
                Self::My(
                    sqlx::MySqlConnection::connect(url)
                        .await
                        .map_err(|e| e.to_string())?,
                )
            },
        )
    }

    async fn close(self) {
        use sqlx::Connection;
        let _ = match self {
            Self::Pg(c) => c.close().await,
            Self::My(c) => c.close().await,
        };
    }

    /// Runs plain text: the (slot, fence) rows it returned, or rows changed.
    async fn run(&mut self, sql: &str) -> Result<(Vec<(i64, i64)>, u64), String> {
        use sqlx::{Executor, Row};
        let e = |e: sqlx::Error| e.to_string();
        Ok(match self {
            Self::Pg(c) => {
                if sql.starts_with("SELECT") {
                    let rows = c.fetch_all(sqlx::raw_sql(sql)).await.map_err(e)?;
                    let v = rows
                        .iter()
                        .map(|r| (i64::from(r.get::<i32, _>(0)), r.get::<i64, _>(1)))
                        .collect();
                    (v, 0)
                } else {
                    (
                        Vec::new(),
                        c.execute(sqlx::raw_sql(sql))
                            .await
                            .map_err(e)?
                            .rows_affected(),
                    )
                }
            }
            Self::My(c) => {
                if sql.starts_with("SELECT") {
                    let rows = c.fetch_all(sqlx::raw_sql(sql)).await.map_err(e)?;
                    let v = rows
                        .iter()
                        .map(|r| {
                            (
                                i64::from(r.get::<u32, _>(0)),
                                i64::try_from(r.get::<u64, _>(1)).unwrap_or(i64::MAX),
                            )
                        })
                        .collect();
                    (v, 0)
                } else {
                    (
                        Vec::new(),
                        c.execute(sqlx::raw_sql(sql))
                            .await
                            .map_err(e)?
                            .rows_affected(),
                    )
                }
            }
        })
    }
}

/// The baseline: read up to 5 free rows ordered by slot, claim one with
/// `WHERE slot = ? AND version = ?` (the fence is the version), try the next
/// on conflict, read again when all 5 were lost. Plain-text statements, one
/// round trip each, like ours.
async fn baseline_acquire(
    conn: &mut Raw,
    table: &str,
    pool: &PoolSpec,
    conflicts: &AtomicU64,
) -> Result<u32, String> {
    let pg = matches!(conn, Raw::Pg(_));
    let q = if pg { '"' } else { '`' };
    let now = "CURRENT_TIMESTAMP(6)";
    let name = pool.name().as_str();
    let read = format!(
        "SELECT slot, fence FROM {q}{table}{q} WHERE pool = '{name}' AND slot < {} \
         AND (token IS NULL OR expires_at <= {now}) ORDER BY slot LIMIT 5",
        pool.size()
    );
    let micros = pool.ttl().as_micros();
    for _ in 0..10_000 {
        let (candidates, _) = conn.run(&read).await?;
        if candidates.is_empty() {
            return Err("pool exhausted".to_owned());
        }
        for (slot, version) in candidates {
            let tok = Token::random().to_hex();
            let claim = if pg {
                format!(
                    "UPDATE \"{table}\" SET token = decode('{tok}', 'hex'), fence = fence + 1, \
                     holder = 'bench', expires_at = {now} + {micros} * INTERVAL '1 microsecond', \
                     acquired_at = {now}, renewed_at = {now} \
                     WHERE pool = '{name}' AND slot = {slot} AND fence = {version}"
                )
            } else {
                format!(
                    "UPDATE `{table}` SET token = X'{tok}', fence = fence + 1, holder = 'bench', \
                     expires_at = {now} + INTERVAL {micros} MICROSECOND, acquired_at = {now}, \
                     renewed_at = {now} WHERE pool = '{name}' AND slot = {slot} AND fence = {version}"
                )
            };
            let (_, n) = conn.run(&claim).await?;
            if n == 1 {
                return Ok(u32::try_from(slot).unwrap_or(u32::MAX));
            }
            conflicts.fetch_add(1, Ordering::Relaxed);
        }
    }
    Err("gave up after 10000 reads".to_owned())
}

enum Node {
    Ours(SqlStrategy),
    Base(Raw),
}

async fn run_once(
    url: &str,
    proxy: &CountingProxy,
    setup: &SqlStrategy,
    algorithm: Algorithm,
    guard: bool,
) -> Result<Outcome, String> {
    let hex = Token::random().to_hex();
    // With the guards on, a TTL whose restart span (TTL + 2 × the default
    // max_clock_skew) a run can wait out after the pair's start: the
    // restart guard holds every claim back for one span after a server
    // starts. Without them, one no acquisition outlives.
    let ttl = Duration::from_secs(if guard || guarded() { 10 } else { 300 });
    let pool = PoolSpec::new(
        PoolName::new(format!("bench{}", &hex[..8])).unwrap(),
        acquirers(),
        ttl,
    )
    .unwrap();
    // A fresh pool nobody has held: declared new, so that the guarded rows'
    // claims do not wait out the span a pool whose rows are gone waits (the
    // wipe guard cannot tell a new pool from a wiped one).
    setup
        .ensure_new_pool(&pool)
        .await
        .map_err(|e| e.to_string())?;
    if guard || guarded() {
        wait_out_the_restart_guard(setup, &pool).await?;
    }
    let table = setup.table().as_str().to_owned();
    // Every node connects first (not timed, not counted), at most 32 at once:
    // a connection storm is not what is measured.
    let mut nodes = Vec::new();
    let mut connecting = tokio::task::JoinSet::new();
    let gate = Arc::new(tokio::sync::Semaphore::new(32));
    for _ in 0..acquirers() {
        let url = url.to_owned();
        let gate = gate.clone();
        connecting.spawn(async move {
            let _permit = gate.acquire_owned().await;
            match algorithm {
                Algorithm::Ours => SqlStrategy::connect(
                    // A speed-tuned server started a moment ago for the
                    // bench, never restarted: the restart guard would hold
                    // every claim for a TTL (`LEASEHOLD_BENCH_GUARDED=1` on
                    // durable servers keeps it). The replicated pairs are
                    // durable and keep the guards (the promotion guard's
                    // record is read by every claim).
                    SqlConfig::new(url)
                        .max_connections(1)
                        .op_timeout(Duration::from_secs(60))
                        .durability(if guard || guarded() {
                            DurabilityPolicy::Durable
                        } else {
                            DurabilityPolicy::Throwaway
                        }),
                )
                .await
                .map(Node::Ours)
                .map_err(|e| e.to_string()),
                Algorithm::Baseline => Raw::connect(&url).await.map(Node::Base),
            }
        });
    }
    while let Some(r) = connecting.join_next().await {
        nodes.push(r.map_err(|e| e.to_string())??);
    }
    let conflicts = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(tokio::sync::Barrier::new(nodes.len() + 1));
    let mut tasks = tokio::task::JoinSet::new();
    for node in nodes {
        let (pool, barrier, conflicts) = (pool.clone(), barrier.clone(), conflicts.clone());
        let table = table.clone();
        tasks.spawn(async move {
            barrier.wait().await;
            match node {
                Node::Ours(s) => {
                    let r = s
                        .acquire(&pool, Floor::NONE)
                        .await
                        .map(|g| g.slot)
                        .map_err(|e| e.to_string());
                    (r, Node::Ours(s))
                }
                Node::Base(mut c) => {
                    let r = baseline_acquire(&mut c, &table, &pool, &conflicts).await;
                    (r, Node::Base(c))
                }
            }
        });
    }
    let before = proxy.trips();
    barrier.wait().await;
    let start = Instant::now();
    let mut slots = Vec::new();
    let mut failures = Vec::new();
    let mut done = Vec::new();
    while let Some(r) = tasks.join_next().await {
        let (r, node) = r.map_err(|e| e.to_string())?;
        done.push(node);
        match r {
            Ok(slot) => slots.push(slot),
            Err(e) => failures.push(e),
        }
    }
    let wall = start.elapsed();
    let trips = proxy.trips() - before;
    for n in done {
        match n {
            Node::Ours(s) => s.close().await,
            Node::Base(c) => c.close().await,
        }
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
    // `LEASEHOLD_BENCH_SERVERS=mariadb` (comma-separated kind names) runs a subset.
    let only = std::env::var("LEASEHOLD_BENCH_SERVERS").unwrap_or_default();
    for kind in [ServerKind::Postgres15, ServerKind::MariaDb] {
        if !only.is_empty() && !only.split(',').any(|k| k.trim() == kind.name()) {
            continue;
        }
        let settings = if durable() {
            Settings::Durable
        } else {
            Settings::Fast
        };
        let server = match provide_with(kind, settings) {
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
            // The bench's servers are never restarted while it runs.
            let setup =
                SqlStrategy::connect(SqlConfig::new(&server.url).durability(if guarded() {
                    DurabilityPolicy::Durable
                } else {
                    DurabilityPolicy::Throwaway
                }))
                .await
                .map_err(|e| e.to_string())?;
            for algorithm in [Algorithm::Ours, Algorithm::Baseline] {
                let o = run_once(&url, &proxy, &setup, algorithm, false).await?;
                // Ours must give every acquirer a distinct slot, with no failure.
                // The baseline's failures are a result, reported, not a bench error.
                let distinct_ok = o.distinct == o.grants;
                let complete = o.failures.is_empty() && o.grants == acquirers() as usize;
                if !distinct_ok || (algorithm == Algorithm::Ours && !complete) {
                    ok = false;
                }
                rows.push((short_version(setup.server_version()), algorithm, o));
            }
            setup.close().await;
            Ok(())
        });
        if let Err(e) = result {
            eprintln!("{kind}: {e}");
            ok = false;
        }
    }
    // The same acquisition on a primary with a streaming standby, behind the
    // address that follows the primary, with the guards on: what the
    // promotion guard's record and (synchronous) the standby's
    // acknowledgement cost, side by side with the single server above.
    for replication in [Replication::Async, Replication::Sync] {
        if !only.is_empty() && !only.split(',').any(|k| k.trim() == "postgres15-pair") {
            continue;
        }
        let result: Result<(), String> = rt.block_on(async {
            let pair = PgPair::start(ServerKind::Postgres15, replication).await?;
            let proxy = CountingProxy::start(pair.proxy().addr())
                .await
                .map_err(|e| e.to_string())?;
            let url = format!("postgres://postgres@{}/postgres", proxy.addr);
            let setup = SqlStrategy::connect(SqlConfig::new(pair.url()))
                .await
                .map_err(|e| e.to_string())?;
            let o = run_once(&url, &proxy, &setup, Algorithm::Ours, true).await?;
            if o.distinct != o.grants || !o.failures.is_empty() {
                ok = false;
            }
            let label = format!("{} + {replication}", short_version(setup.server_version()));
            rows.push((label, Algorithm::Ours, o));
            setup.close().await;
            Ok(())
        });
        if let Err(e) = result {
            eprintln!("postgres15 with a {replication} standby: {e}");
            ok = false;
        }
    }
    println!();
    println!(
        "{:<28} {:<28} {:>9} {:>9} {:>9} {:>13} {:>10} {:>11}",
        "server",
        "algorithm",
        "acquirers",
        "distinct",
        "failures",
        "trips/acquire",
        "wall",
        "CAS misses"
    );
    for (short, algorithm, o) in &rows {
        println!(
            "{:<28} {:<28} {:>9} {:>9} {:>9} {:>13.2} {:>8.0}ms {:>11}",
            short,
            algorithm.name(),
            acquirers(),
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
    println!(
        "\ntrips/acquire: client→server round trips on the wire per successful acquisition \
         (connections opened before the clock starts); wall: first acquire sent to last answer; \
         CAS misses: baseline claims that lost their compare-and-swap."
    );
    if ok {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}

/// Waits until the restart guard grants `pool`'s claims (one restart span
/// after the server's start), with one untimed claim, released at once.
async fn wait_out_the_restart_guard(setup: &SqlStrategy, pool: &PoolSpec) -> Result<(), String> {
    loop {
        match setup.acquire(pool, Floor::NONE).await {
            Ok(grant) => {
                setup.release(pool, &grant, grant.floor).await;
                return Ok(());
            }
            Err(leasehold_core::AcquireError::StoreRestarted { resume_in }) => {
                eprintln!("  the restart guard holds claims for {resume_in:?} more: waiting");
                tokio::time::sleep(resume_in + Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}
