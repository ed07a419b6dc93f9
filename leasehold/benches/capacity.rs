//! Store capacity: how many renewals and acquisitions per second one server
//! sustains on this machine, at 64, 512 and 4,096 concurrent holders, through
//! each backend's real strategy, opened with `leasehold::StoreConfig` from
//! the store's URL as a user would open it.
//!
//! For each store and each N: a fresh pool of N slots (TTL 30 s); N holders
//! each acquire one slot; then for a fixed window every holder renews back to
//! back (`renew` with a ceiling of now + TTL), at most K requests in flight;
//! then, for another window, holders release their slot and acquire again
//! (the pool is full, so each acquisition finds one of the ≤ K free slots).
//! Holders are multiplexed over a fixed set of client connections: K = 64
//! worker tasks, 8 strategies (client "processes") of 8 connections each on
//! SQL, 8 strategies of one multiplexed connection each on Valkey/Redis and
//! etcd. SQLite is one file, one strategy of 8 connections, in this process.
//!
//! Every grant is checked against an in-process occupancy table: a slot
//! granted while another holder here still holds it is reported as a
//! duplicate (and fails the run).
//!
//! Also measured, per store: the median of 2,000 sequential pings of the
//! store's operator handle (`SELECT 1`, `PING`, etcd `STATUS`) on one client
//! (the store's round trip on loopback), and the CPU the server process tree and this process used
//! during each window (`/proc/<pid>/stat` utime + stime).
//!
//! `cargo bench -p leasehold --features full --bench capacity`
//! (`cargo xtask bench capacity`). Environment:
//! `LEASEHOLD_CAPACITY_STORES=postgres15,sqlite` (a subset),
//! `LEASEHOLD_CAPACITY_HOLDERS=64,512` (a subset of holder counts),
//! `LEASEHOLD_CAPACITY_WINDOW_SECS=5` (each window's length).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leasehold::{
    DurabilityPolicy, Floor, Grant, PoolSpec, Release, Renewal, StoreConfig, Strategy,
};
use leasehold_conformance::servers::{Server, ServerKind, Settings, provide_with, short_version};
use leasehold_conformance::suite::fresh_pool_name;

/// Requests in flight at once (worker tasks; `LEASEHOLD_CAPACITY_workers()`
/// overrides).
fn workers() -> usize {
    std::env::var("LEASEHOLD_CAPACITY_workers()")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

/// The servers' settings: `fast` (default; what the other benches use) or
/// `durable` (`LEASEHOLD_CAPACITY_SETTINGS=durable`: fsync on every commit).
fn settings() -> Settings {
    match std::env::var("LEASEHOLD_CAPACITY_SETTINGS").as_deref() {
        Ok("durable") => Settings::Durable,
        _ => Settings::Fast,
    }
}

/// The server's process: the child this process started, or else (a server
/// started through `pg_ctl`) the process whose command line holds `-p PORT`.
fn server_pid(server: &Server) -> Option<u32> {
    if let Some(pid) = server.pid() {
        return Some(pid);
    }
    let port = server.addr()?.port().to_string();
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
        if args
            .windows(2)
            .any(|w| w[0] == b"-p" && w[1] == port.as_bytes())
        {
            found.push(pid);
        }
    }
    found.into_iter().min()
}
/// Client strategies ("processes") per networked store.
const CLIENTS: usize = 8;
/// Connections per SQL client strategy.
const SQL_CONNS_PER_CLIENT: u32 = 8;
/// The pools' TTL.
const TTL: Duration = Duration::from_secs(30);
/// Sequential round trips timed for the loopback median.
const PINGS: usize = 2_000;

fn window() -> Duration {
    Duration::from_secs(
        std::env::var("LEASEHOLD_CAPACITY_WINDOW_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(5),
    )
}

fn holder_counts() -> Vec<u32> {
    match std::env::var("LEASEHOLD_CAPACITY_HOLDERS") {
        Ok(v) if !v.trim().is_empty() => {
            v.split(',').filter_map(|n| n.trim().parse().ok()).collect()
        }
        _ => vec![64, 512, 4096],
    }
}

fn selected(name: &str) -> bool {
    match std::env::var("LEASEHOLD_CAPACITY_STORES") {
        Ok(v) if !v.trim().is_empty() => v.split(',').any(|s| s.trim() == name),
        _ => true,
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn ceiling() -> Floor {
    Floor(now_ms() + u64::try_from(TTL.as_millis()).unwrap_or(0))
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

/// utime + stime of one process (all its threads), in clock ticks.
fn ticks(pid: u32) -> Option<(u64, u32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command sits in parentheses and may hold spaces: fields after ')'.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
    let ppid = f.get(1)?.parse().ok()?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((utime + stime, ppid))
}

/// CPU seconds used so far by `root` and all its descendants (PostgreSQL
/// serves each connection from a child process).
fn tree_cpu(root: u32) -> f64 {
    let mut parent: HashMap<u32, (u64, u32)> = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            if let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok())
                && let Some(t) = ticks(pid)
            {
                parent.insert(pid, t);
            }
        }
    }
    let mut total = 0u64;
    for (&pid, &(t, _)) in &parent {
        let mut p = pid;
        // Walk up to the root (or init).
        for _ in 0..64 {
            if p == root {
                total += t;
                break;
            }
            match parent.get(&p) {
                Some(&(_, pp)) if pp > 1 => p = pp,
                _ => break,
            }
        }
    }
    total as f64 / 100.0
}

fn self_cpu() -> f64 {
    ticks(std::process::id()).map_or(0.0, |(t, _)| t as f64 / 100.0)
}

/// CPU use of the server and of this process over one window.
struct Cpu {
    server: Option<u32>,
    s0: f64,
    c0: f64,
    t0: Instant,
}

impl Cpu {
    fn start(server: Option<u32>) -> Self {
        Self {
            server,
            s0: server.map_or(0.0, tree_cpu),
            c0: self_cpu(),
            t0: Instant::now(),
        }
    }

    /// (server cores, client cores) used on average.
    fn stop(&self) -> (Option<f64>, f64) {
        let wall = self.t0.elapsed().as_secs_f64();
        (
            self.server.map(|p| (tree_cpu(p) - self.s0) / wall),
            (self_cpu() - self.c0) / wall,
        )
    }
}

/// Who holds each slot, as seen by this process: 0 is free.
struct Occupancy {
    slots: Vec<AtomicU32>,
    duplicates: AtomicU64,
}

impl Occupancy {
    fn new(n: u32) -> Self {
        Self {
            slots: (0..n).map(|_| AtomicU32::new(0)).collect(),
            duplicates: AtomicU64::new(0),
        }
    }

    fn take(&self, slot: u32, holder: u32) {
        let prev = self.slots[slot as usize].swap(holder + 1, Ordering::SeqCst);
        if prev != 0 {
            self.duplicates.fetch_add(1, Ordering::SeqCst);
            eprintln!(
                "DUPLICATE: slot {slot} granted to holder {holder} while holder {} holds it",
                prev - 1
            );
        }
    }

    fn free(&self, slot: u32) {
        self.slots[slot as usize].store(0, Ordering::SeqCst);
    }
}

#[derive(Default)]
struct Counts {
    ok: AtomicU64,
    lost: AtomicU64,
    retry: AtomicU64,
    failed: AtomicU64,
}

struct Row {
    store: String,
    holders: u32,
    setup: Duration,
    renew_per_s: f64,
    renew_cpu: (Option<f64>, f64),
    renew_lost: u64,
    renew_retry: u64,
    acquire_per_s: f64,
    acquire_cpu: (Option<f64>, f64),
    acquire_failed: u64,
    duplicates: u64,
    load: [String; 3],
}

/// One store under test: its client strategies and its server's pid.
struct Store<S> {
    name: String,
    clients: Vec<Arc<S>>,
    pid: Option<u32>,
}

async fn measure<S: Strategy>(
    store: &Store<S>,
    n: u32,
    setup: &leasehold::Store,
) -> Result<Row, String> {
    let load0 = loadavg();
    let pool = PoolSpec::new(fresh_pool_name(), n, TTL).map_err(|e| e.to_string())?;
    {
        // The slots' rows, as at deployment (not timed).
        setup
            .operator()
            .prepare(Some(&pool))
            .await
            .map_err(|e| e.to_string())?;
    }
    let occupancy = Arc::new(Occupancy::new(n));

    // Acquire: every holder takes one slot, at most workers() at once.
    let t = Instant::now();
    let mut holders: Vec<Option<Grant>> = vec![None; n as usize];
    {
        let gate = Arc::new(tokio::sync::Semaphore::new(workers()));
        let mut tasks = tokio::task::JoinSet::new();
        for h in 0..n {
            let s = store.clients[h as usize % store.clients.len()].clone();
            let (pool, gate, occ) = (pool.clone(), gate.clone(), occupancy.clone());
            tasks.spawn(async move {
                let _p = gate.acquire_owned().await;
                let g = s.acquire(&pool, ceiling()).await;
                if let Ok(g) = &g {
                    occ.take(g.slot, h);
                }
                (h, g)
            });
        }
        while let Some(r) = tasks.join_next().await {
            let (h, g) = r.map_err(|e| e.to_string())?;
            holders[h as usize] = Some(g.map_err(|e| format!("holder {h}: {e}"))?);
        }
    }
    let setup = t.elapsed();

    // Holders split over the workers: worker w renews w, w + K, w + 2K, ...
    let mut per_worker: Vec<Vec<(u32, Grant)>> = vec![Vec::new(); workers().min(n as usize)];
    let lanes = per_worker.len();
    for (h, g) in holders.into_iter().enumerate() {
        per_worker[h % lanes].push((h as u32, g.expect("acquired")));
    }

    // Renew window.
    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let cpu = Cpu::start(store.pid);
    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (w, mine) in per_worker.into_iter().enumerate() {
        let s = store.clients[w % store.clients.len()].clone();
        let (pool, counts, stop) = (pool.clone(), counts.clone(), stop.clone());
        tasks.spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let (_, g) = &mine[i % mine.len()];
                match s.renew(&pool, g, ceiling()).await {
                    Renewal::Renewed { .. } => counts.ok.fetch_add(1, Ordering::Relaxed),
                    Renewal::Lost(r) => {
                        eprintln!("renewal lost: {r}");
                        counts.lost.fetch_add(1, Ordering::Relaxed)
                    }
                    Renewal::Retry(_) => counts.retry.fetch_add(1, Ordering::Relaxed),
                };
                i += 1;
            }
            mine
        });
    }
    tokio::time::sleep(window()).await;
    stop.store(true, Ordering::Relaxed);
    let mut per_worker = Vec::new();
    while let Some(r) = tasks.join_next().await {
        per_worker.push(r.map_err(|e| e.to_string())?);
    }
    let renew_wall = t.elapsed();
    let renew_cpu = cpu.stop();
    let renewed = counts.ok.load(Ordering::Relaxed);
    let (renew_lost, renew_retry) = (
        counts.lost.load(Ordering::Relaxed),
        counts.retry.load(Ordering::Relaxed),
    );
    let load1 = loadavg();

    // Release and re-acquire window.
    let counts = Arc::new(Counts::default());
    stop.store(false, Ordering::Relaxed);
    let cpu = Cpu::start(store.pid);
    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (w, mut mine) in per_worker.into_iter().enumerate() {
        let s = store.clients[w % store.clients.len()].clone();
        let (pool, counts, stop, occ) = (
            pool.clone(),
            counts.clone(),
            stop.clone(),
            occupancy.clone(),
        );
        tasks.spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let k = i % mine.len();
                let (h, g) = &mine[k];
                let h = *h;
                occ.free(g.slot);
                let issued = Floor(now_ms()).max(g.floor);
                match s.release(&pool, g, issued).await {
                    Release::Released => {}
                    Release::NotHeld => {
                        eprintln!("release: slot {} was no longer held", g.slot);
                        counts.lost.fetch_add(1, Ordering::Relaxed);
                    }
                    Release::Retry(_) => {
                        counts.retry.fetch_add(1, Ordering::Relaxed);
                    }
                }
                // Acquire again (a few tries: a full pool may briefly have
                // its free slots taken by the other workers' acquisitions).
                let mut got = None;
                for _ in 0..20 {
                    match s.acquire(&pool, ceiling()).await {
                        Ok(g) => {
                            got = Some(g);
                            break;
                        }
                        Err(e) => {
                            // Retried; the first few are shown (a full pool
                            // may answer "exhausted" while the free slots are
                            // locked by other acquisitions).
                            if counts.failed.fetch_add(1, Ordering::Relaxed) < 3 {
                                eprintln!("acquire miss (retried): {e}");
                            }
                        }
                    }
                }
                let Some(g) = got else {
                    eprintln!("holder {h}: no slot after 20 tries");
                    return mine;
                };
                occ.take(g.slot, h);
                counts.ok.fetch_add(1, Ordering::Relaxed);
                mine[k] = (h, g);
                i += 1;
            }
            mine
        });
    }
    tokio::time::sleep(window()).await;
    stop.store(true, Ordering::Relaxed);
    let mut held = Vec::new();
    while let Some(r) = tasks.join_next().await {
        held.extend(r.map_err(|e| e.to_string())?);
    }
    let acquire_wall = t.elapsed();
    let acquire_cpu = cpu.stop();
    let load2 = loadavg();

    // Release everything (not timed).
    let mut tasks = tokio::task::JoinSet::new();
    let gate = Arc::new(tokio::sync::Semaphore::new(workers()));
    for (i, (_, g)) in held.into_iter().enumerate() {
        let s = store.clients[i % store.clients.len()].clone();
        let (pool, gate, occ) = (pool.clone(), gate.clone(), occupancy.clone());
        tasks.spawn(async move {
            let _p = gate.acquire_owned().await;
            occ.free(g.slot);
            let _ = s.release(&pool, &g, Floor(now_ms()).max(g.floor)).await;
        });
    }
    while tasks.join_next().await.is_some() {}

    Ok(Row {
        store: store.name.clone(),
        holders: n,
        setup,
        renew_per_s: renewed as f64 / renew_wall.as_secs_f64(),
        renew_cpu,
        renew_lost,
        renew_retry,
        acquire_per_s: counts.ok.load(Ordering::Relaxed) as f64 / acquire_wall.as_secs_f64(),
        acquire_cpu,
        acquire_failed: counts.failed.load(Ordering::Relaxed) + counts.lost.load(Ordering::Relaxed),
        duplicates: occupancy.duplicates.load(Ordering::SeqCst),
        load: [load0, load1, load2],
    })
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Times `PINGS` sequential calls of `f`, after 100 unmeasured ones.
async fn round_trip<F: AsyncFnMut() -> Result<(), String>>(mut f: F) -> Result<Duration, String> {
    for _ in 0..100 {
        f().await?;
    }
    let mut v = Vec::with_capacity(PINGS);
    for _ in 0..PINGS {
        let t = Instant::now();
        f().await?;
        v.push(t.elapsed());
    }
    Ok(median(v))
}

fn progress(r: &Row) {
    eprintln!(
        "{:<18} N={:<5} renew {:>8.0}/s  acquire {:>7.0}/s  (setup {:.2}s, lost {}, retry {}, \
         acquire misses {}, duplicates {}, load {}→{}→{})",
        r.store,
        r.holders,
        r.renew_per_s,
        r.acquire_per_s,
        r.setup.as_secs_f64(),
        r.renew_lost,
        r.renew_retry,
        r.acquire_failed,
        r.duplicates,
        r.load[0],
        r.load[1],
        r.load[2]
    );
}

fn cores(c: (Option<f64>, f64), per_sec: f64) -> String {
    let us = |cores: f64| cores / per_sec.max(1.0) * 1e6;
    match c.0 {
        Some(s) => format!("{s:.2} / {:.2} ({:.0} / {:.0} µs)", c.1, us(s), us(c.1)),
        None => format!("— / {:.2} (— / {:.0} µs)", c.1, us(c.1)),
    }
}

/// Runs every holder count on one store.
/// Measures the store at `url` (server process `pid`) through `clients`
/// strategies, each with `sql_conns` connections on SQL (one multiplexed
/// connection elsewhere).
async fn store_rows(
    url: &str,
    pid: Option<u32>,
    clients: usize,
    sql_conns: u32,
    rows: &mut Vec<Row>,
    rts: &mut Vec<(String, Duration)>,
) -> Result<(), String> {
    let mut v = Vec::new();
    for _ in 0..clients {
        let store = StoreConfig::from_url(url)
            .map_err(|e| e.to_string())?
            .op_timeout(Duration::from_secs(30))
            // A server started for the bench, never restarted.
            .map(|c: leasehold::sql::SqlConfig| {
                c.max_connections(sql_conns)
                    .durability(DurabilityPolicy::Throwaway)
            })
            .map(|c: leasehold::valkey::ValkeyConfig| c.durability(DurabilityPolicy::Throwaway))
            .connect()
            .await
            .map_err(|e| e.to_string())?;
        v.push(Arc::new(store));
    }
    let setup = v[0].clone();
    let name = match setup.strategy::<leasehold::etcd::EtcdStrategy>() {
        Some(etcd) => {
            let version = etcd
                .client()
                .clone()
                .status()
                .await
                .map(|s| s.version().to_owned())
                .unwrap_or_default();
            format!("etcd {version}")
        }
        None => short_version(&setup.operator().describe()),
    };
    let rt_median =
        round_trip(async || setup.operator().ping().await.map_err(|e| e.to_string())).await?;
    eprintln!(
        "{name}: round trip median {:.1} µs",
        rt_median.as_secs_f64() * 1e6
    );
    rts.push((name.clone(), rt_median));
    let store = Store {
        name,
        clients: v,
        pid,
    };
    for n in holder_counts() {
        let r = measure(&store, n, &setup).await?;
        progress(&r);
        rows.push(r);
    }
    if let Some(sql) = setup.strategy::<leasehold::sql::SqlStrategy>() {
        sql.close().await;
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut rows = Vec::new();
    let mut rts = Vec::new();
    let mut failed = Vec::new();
    eprintln!(
        "store capacity: holders {:?}, windows of {:?}, {} requests in flight, TTL {TTL:?}, {:?} server settings",
        holder_counts(),
        window(),
        workers(),
        settings()
    );
    for (name, kind) in [
        ("postgres15", Some(ServerKind::Postgres15)),
        ("mariadb", Some(ServerKind::MariaDb)),
        ("sqlite", None),
        ("redis8", Some(ServerKind::Redis8)),
        ("valkey8", Some(ServerKind::Valkey8)),
        ("etcd35", Some(ServerKind::Etcd35)),
    ] {
        if !selected(name) {
            continue;
        }
        let server = match kind.map(|k| provide_with(k, settings())) {
            None => None,
            Some(Ok(s)) => Some(s),
            Some(Err(missing)) => {
                eprintln!("{missing}");
                failed.push(name.to_owned());
                continue;
            }
        };
        let dir = std::env::temp_dir().join(format!("leasehold-capacity-{}", std::process::id()));
        let result = rt.block_on(async {
            match &server {
                None => {
                    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                    let url = format!("sqlite://{}", dir.join("leases.sqlite").display());
                    store_rows(&url, None, 1, 8, &mut rows, &mut rts).await
                }
                Some(s) => {
                    let url = s.store_url();
                    let pid = server_pid(s);
                    store_rows(
                        &url,
                        pid,
                        CLIENTS,
                        SQL_CONNS_PER_CLIENT,
                        &mut rows,
                        &mut rts,
                    )
                    .await
                }
            }
        });
        let _ = std::fs::remove_dir_all(&dir);
        if let Err(e) = result {
            eprintln!("{name}: {e}");
            failed.push(name.to_owned());
        }
    }

    println!("\nround trip on loopback (median of {PINGS} sequential, one connection):");
    for (name, d) in &rts {
        println!("  {name:<22} {:>7.1} µs", d.as_secs_f64() * 1e6);
    }
    let renew_interval = TTL / 3;
    println!(
        "\n| store | holders | first fill, acquisitions/s | renewals/s | server / client cores (renew) | acquisitions/s (each after a release) | server / client cores (acquire) | fleet at TTL 30 s, renew every {}s, half the rate | load before → after |",
        renew_interval.as_secs()
    );
    println!("|---|---:|---:|---:|---|---:|---|---:|---|");
    let mut duplicates = 0;
    for r in &rows {
        duplicates += r.duplicates;
        let fleet = r.renew_per_s * 0.5 * renew_interval.as_secs_f64();
        println!(
            "| {} | {} | {:.0} | {:.0} | {} | {:.0} | {} | {:.0} | {} → {} → {} |",
            r.store,
            r.holders,
            f64::from(r.holders) / r.setup.as_secs_f64(),
            r.renew_per_s,
            cores(r.renew_cpu, r.renew_per_s),
            r.acquire_per_s,
            cores(r.acquire_cpu, r.acquire_per_s),
            fleet,
            r.load[0],
            r.load[1],
            r.load[2]
        );
    }
    println!(
        "\nfirst fill: N holders acquiring into the empty pool (at most K at once). \
         acquisitions/s: a release then an acquisition, in a full pool (at most K free slots). \
         cores: CPU seconds per wall second, server process tree / this bench process (SQLite \
         runs in this process), and in brackets CPU time per operation (for acquisitions, the \
         release before it included). fleet: renewals/s × 0.5 × renew interval ({}s, ttl/3). \
         load: 1-minute load average before the row, after the renew window, after the acquire \
         window.",
        renew_interval.as_secs()
    );
    if duplicates > 0 {
        println!("\n{duplicates} DUPLICATE grants (two holders on one slot)");
    }
    if !failed.is_empty() {
        println!("\nnot measured: {}", failed.join(", "));
    }
    if duplicates > 0 || !failed.is_empty() {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    }
}
