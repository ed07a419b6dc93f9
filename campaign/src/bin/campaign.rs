//! The campaign runner: provides a store, runs more worker processes than
//! slots, injects faults drawn from a printed seed, then checks every
//! recorded ID and holding period, prints a summary table and draws the
//! timeline into `target/campaign/<backend>-<seed>.svg`.
//!
//! ```text
//! campaign [--backend sqlite|postgres|mariadb|redis8|redis7|valkey8|etcd35|etcd34|
//!                     etcd-cluster|k8s-fake] [--short]
//!          [--unsafe] [--seed S] [--secs N] [--ids N] [--workers W] [--slots K]
//!          [--store fast|durable|lossy] [--restart-heavy] [--crash-heavy]
//!          [--mixed-fleet [--assume-one-timing]] [--no-restart-guard]
//!          [--unsafe-keep-server-synchronous-commit]
//! ```
//!
//! Exit status: 0 when the run is clean (in `--unsafe` mode and the
//! synchronous-commit control: when duplicates were found; a mixed fleet
//! that a store which can forget refuses, or a run UNSAFE by design, is
//! reported and exits 0), 1 otherwise, 2 for a usage or setup error.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use leasehold_campaign::check::{Report, check, duplicate_sources};
use leasehold_campaign::drift::{Drifted, Rate};
use leasehold_campaign::plan::{Fault, Planned, Rng, StoreFaults, plan};
use leasehold_campaign::record::{self, Kind, Record};
use leasehold_campaign::store::{FenceWriter, Options, probe};
use leasehold_campaign::timeline::{FaultMark, svg};
use leasehold_conformance::etcd_cluster::EtcdCluster;
use leasehold_conformance::programs;
use leasehold_conformance::proxy::{Fault as Net, FaultProxy};
use leasehold_conformance::servers::{self, ServerKind, Settings};
use leasehold_core::plant::Plant;
use leasehold_core::{LeaseConfig, MonoTime};
use leasehold_k8s_fake::{FakeApiServer, Fault as FakeFault, Verb as FakeVerb};
use std::net::SocketAddr;

struct Args {
    backend: String,
    short: bool,
    unsafe_mode: bool,
    seed: u64,
    secs: Option<u64>,
    ids: Option<u64>,
    workers: usize,
    slots: u32,
    ttl: Duration,
    /// The largest clock offset given to workers (default: `max_clock_skew`).
    skew_ms: Option<u64>,
    /// How the store's server keeps what it acknowledged.
    store: Settings,
    /// Every other fault a store restart.
    restart_heavy: bool,
    /// Every other fault a backend crash (PostgreSQL).
    crash_heavy: bool,
    /// Workers of one pool with different timings: every other worker at
    /// 10 × the TTL, each with its own `max_clock_skew` up to the largest.
    mixed_fleet: bool,
    /// A mixed fleet's workers promise one timing per pool anyway: on a
    /// store that can forget, unsafe by design.
    assume_one_timing: bool,
    /// The workers' stores run without the restart guard (a control run).
    no_restart_guard: bool,
    /// PostgreSQL sessions keep the server's `synchronous_commit` (a
    /// control run: a crashed backend then loses acknowledged leases).
    keep_server_synchronous_commit: bool,
    /// Keep the logs of a clean run too.
    keep: bool,
    /// Timing rules the workers break on purpose (`--plant`).
    plants: Vec<Plant>,
    /// Clock rate drift (`--clock-rate-ppm`): every other worker start runs
    /// its clocks this many ppm slow, the rest this many fast.
    drift_ppm: u32,
    /// The leases' safety margin (`--margin-ms`; default: the library's
    /// for the TTL).
    margin: Option<Margin>,
    /// The largest delay between a spare's claims (`--backoff-max-ms`;
    /// default: the library's, a quarter of the TTL).
    backoff_max_ms: Option<u64>,
}

/// A safety margin given on the command line.
#[derive(Clone, Copy, Debug)]
enum Margin {
    /// This many milliseconds.
    Ms(u64),
    /// The least timing rule 2 accepts for the run's TTL on a store whose
    /// clock ticks in milliseconds (the coarsest of the campaign's stores).
    Min,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        backend: "sqlite".into(),
        short: false,
        unsafe_mode: false,
        seed: MonoTime::now().as_nanos() ^ u64::from(std::process::id()) << 32,
        secs: None,
        ids: None,
        workers: 5,
        slots: 2,
        ttl: Duration::from_secs(2),
        skew_ms: None,
        store: Settings::Fast,
        restart_heavy: false,
        crash_heavy: false,
        mixed_fleet: false,
        assume_one_timing: false,
        no_restart_guard: false,
        keep_server_synchronous_commit: false,
        keep: false,
        plants: Vec::new(),
        drift_ppm: 0,
        margin: None,
        backoff_max_ms: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let num = |v: String| v.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--backend" => a.backend = value()?,
            "--short" => a.short = true,
            "--unsafe" => a.unsafe_mode = true,
            "--seed" => a.seed = num(value()?)?,
            "--secs" => a.secs = Some(num(value()?)?),
            "--ids" => a.ids = Some(num(value()?)?),
            "--workers" => a.workers = num(value()?)? as usize,
            "--slots" => a.slots = num(value()?)? as u32,
            "--ttl-ms" => a.ttl = Duration::from_millis(num(value()?)?),
            "--skew-ms" => a.skew_ms = Some(num(value()?)?),
            "--store" => {
                a.store = match value()?.as_str() {
                    "fast" => Settings::Fast,
                    "durable" => Settings::Durable,
                    "lossy" => Settings::Lossy,
                    other => {
                        return Err(format!(
                            "--store {other:?}: fast (speed-tuned), durable or lossy"
                        ));
                    }
                }
            }
            "--restart-heavy" => a.restart_heavy = true,
            "--crash-heavy" => a.crash_heavy = true,
            "--mixed-fleet" => a.mixed_fleet = true,
            "--assume-one-timing" => a.assume_one_timing = true,
            "--no-restart-guard" => a.no_restart_guard = true,
            "--unsafe-keep-server-synchronous-commit" => a.keep_server_synchronous_commit = true,
            "--keep" => a.keep = true,
            "--clock-rate-ppm" => {
                a.drift_ppm = num(value()?)?
                    .try_into()
                    .ok()
                    .filter(|p| Rate::from_ppm(*p).is_some())
                    .ok_or("--clock-rate-ppm: at most 500000")?
                    .unsigned_abs();
            }
            "--backoff-max-ms" => a.backoff_max_ms = Some(num(value()?)?),
            "--margin-ms" => {
                a.margin = Some(match value()?.as_str() {
                    "min" => Margin::Min,
                    v => Margin::Ms(num(v.to_owned())?),
                });
            }
            "--plant" => {
                for name in value()?.split(',') {
                    a.plants.push(Plant::from_name(name).ok_or_else(|| {
                        format!(
                            "--plant {name:?}: one of {}",
                            Plant::ALL.map(Plant::name).join(", ")
                        )
                    })?);
                }
            }
            "-h" | "--help" => {
                return Err(
                    "usage: campaign [--backend sqlite|postgres|mariadb|redis8|redis7|\
                            valkey8|etcd35|etcd34|etcd-cluster|k8s-fake] [--short] [--unsafe] [--seed S] [--secs N] [--ids N] \
                            [--workers W] [--slots K] [--ttl-ms T] [--skew-ms M] \
                            [--store fast|durable|lossy] [--restart-heavy] [--crash-heavy] \
                            [--mixed-fleet [--assume-one-timing]] [--no-restart-guard] \
                            [--unsafe-keep-server-synchronous-commit] [--keep] \
                            [--plant NAME[,NAME]] [--clock-rate-ppm P] [--margin-ms M|min] \
                            [--backoff-max-ms B]\n\
                            \x20      campaign --dump FILE.rec   (a worker's log as text)"
                        .into(),
                );
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    if a.assume_one_timing && !a.mixed_fleet {
        return Err(
            "--assume-one-timing goes with --mixed-fleet (every other run has one timing)".into(),
        );
    }
    if !a.plants.is_empty() && !leasehold_core::plant::BUILT {
        return Err(format!("--plant: {}", leasehold_core::plant::NotBuilt));
    }
    if !a.plants.is_empty() && (a.unsafe_mode || a.keep_server_synchronous_commit) {
        return Err(
            "--plant goes alone: --unsafe and the control runs look for duplicates of their own"
                .into(),
        );
    }
    if a.drift_ppm != 0 && a.backend == "sqlite" {
        // SQLite's clock is the wall clock of the process running the
        // statement: a drifting worker would drift the store's clock for its
        // own claims only, which no real machine can do (every holder runs
        // on the file's machine, and its processes share one clock).
        return Err(
            "--clock-rate-ppm needs a store with a clock of its own: SQLite's is each \
             worker's, which would drift with it"
                .into(),
        );
    }
    if a.margin.is_some() && a.mixed_fleet {
        return Err(
            "--margin-ms goes without --mixed-fleet (its workers' TTLs need margins of their own)"
                .into(),
        );
    }
    if a.workers <= a.slots as usize || a.slots == 0 {
        return Err("--workers must be more than --slots (spares must wait to take over)".into());
    }
    Ok(a)
}

/// The store of a run: a URL, and what this process started to serve it.
struct Store {
    url: String,
    describe: String,
    serving: Serving,
    /// A PostgreSQL server this process started: one of its backends can be
    /// SIGKILLed (MariaDB and Valkey/Redis are one process, where a crash
    /// is a restart).
    backends: bool,
}

/// What one backend crash did.
struct Crash {
    /// The backend killed.
    pid: u32,
    /// Until the server accepted a connection again.
    recovery: Duration,
    /// The postmaster's start time did not move: crash recovery in place,
    /// not a restart (what the restart guard cannot see).
    in_place: bool,
    /// How long before the kill the newest claim of any slot was made.
    after_claim: Option<Duration>,
    /// The server came back without that claim: it forgot a lease it had
    /// granted (on PostgreSQL, only where the lease sessions commit
    /// asynchronously).
    forgot_claim: bool,
}

/// A backend crash is aimed at a claim younger than this: the moment a
/// server that forgets loses the most (a new holder generating on a claim
/// the server no longer has). A backend crash loses only the WAL not yet
/// written out of the server's buffers, which the WAL writer writes as soon
/// as a page is full: with the campaign's traffic, within a fraction of a
/// second.
const AIM_AFTER_CLAIM: Duration = Duration::from_millis(50);

/// What serves a run's store.
enum Serving {
    /// A file (SQLite): nothing to freeze, cut or restart.
    File,
    /// One server, started by this process or named by a variable.
    Server(servers::Server),
    /// A three-member etcd cluster started by this process: members are
    /// killed and started again (`member` faults).
    Cluster(EtcdCluster),
    /// The FAKE Kubernetes API server, in this process: a freeze delays
    /// every request instead of stopping a process.
    Fake(FakeApiServer),
}

impl Store {
    /// The server's process, to freeze it.
    fn pid(&self) -> Option<u32> {
        match &self.serving {
            Serving::Server(s) => s.pid(),
            _ => None,
        }
    }

    /// Whether the store can be frozen.
    fn can_freeze(&self) -> bool {
        matches!(self.serving, Serving::Fake(_)) || self.pid().is_some()
    }

    /// Freezes the store for `pause` (the main loop thaws it).
    fn freeze(&self, pause: Duration) {
        match &self.serving {
            Serving::Fake(fake) => {
                for verb in FAKE_VERBS {
                    fake.faults().set(verb, FakeFault::Delay(pause));
                }
            }
            _ => {
                if let Some(pid) = self.pid() {
                    signal(pid, "STOP");
                }
            }
        }
    }

    fn thaw(&self) {
        match &self.serving {
            Serving::Fake(fake) => fake.faults().clear(),
            _ => {
                if let Some(pid) = self.pid() {
                    signal(pid, "CONT");
                }
            }
        }
    }

    /// Whether the server can be crashed and restarted.
    fn can_restart(&self) -> bool {
        match &self.serving {
            Serving::Server(s) => s.can_restart(),
            Serving::Cluster(_) => true,
            _ => false,
        }
    }

    /// Crashes the server (every member of a cluster) and starts it again on
    /// the same data.
    fn restart(&mut self) -> Result<(), String> {
        match &mut self.serving {
            Serving::Server(server) => {
                server.kill()?;
                server.restart()
            }
            Serving::Cluster(c) => {
                for i in 0..c.len() {
                    if c.is_running(i) {
                        c.kill(i)?;
                    }
                }
                for i in 0..c.len() {
                    c.restart(i)?;
                }
                c.wait_healthy(Duration::from_secs(30))
            }
            _ => Err("no server to restart".into()),
        }
    }

    /// SIGKILLs one client backend of a PostgreSQL server this process
    /// started: one serving the lease connections (`application_name =
    /// 'leasehold'`) where there is one, else any; `which` picks among them
    /// in the order of their process IDs. The kill waits (up to `aim`) for
    /// a claim younger than [`AIM_AFTER_CLAIM`] in the lease table. Returns
    /// once the server accepts connections again (it ends every other
    /// backend and replays its WAL in place), at most 60 s later.
    fn crash_backend(&self, which: usize, aim: Duration) -> Result<Option<Crash>, String> {
        use leasehold::sql::sqlx::{self, Connection, Row};
        let url = self.url.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async move {
            let connect = || async {
                let opts: sqlx::postgres::PgConnectOptions = url
                    .parse::<sqlx::postgres::PgConnectOptions>()
                    .map_err(|e| format!("{url}: {e}"))?
                    .application_name("campaign-runner");
                tokio::time::timeout(Duration::from_secs(5), sqlx::PgConnection::connect_with(&opts))
                    .await
                    .map_err(|_| "no connection within 5 s".to_owned())?
                    .map_err(|e| e.to_string())
            };
            let started = "SELECT CAST(pg_postmaster_start_time() AS TEXT)";
            // The server may still be recovering from an earlier fault (a
            // restart replays its WAL before it lets clients in).
            let waiting = Instant::now();
            let (mut conn, before) = loop {
                let tried = async {
                    let mut c = connect().await?;
                    let t: String = sqlx::query_scalar(started)
                        .fetch_one(&mut c)
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok::<_, String>((c, t))
                };
                match tried.await {
                    Ok(ready) => break ready,
                    Err(e) if waiting.elapsed() > Duration::from_secs(60) => {
                        return Err(format!("the server did not let clients in for 60 s: {e}"));
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            };
            // The age of the newest claim, in µs (none before the first).
            let newest = "SELECT CAST(EXTRACT(EPOCH FROM (CURRENT_TIMESTAMP(6) - max(acquired_at))) \
                          * 1000000 AS BIGINT) FROM leasehold_leases";
            let aiming = Instant::now();
            let after_claim = loop {
                let age: Option<i64> = sqlx::query_scalar(newest)
                    .fetch_one(&mut conn)
                    .await
                    .map_err(|e| e.to_string())?;
                let age = age.map(|us| Duration::from_micros(us.max(0).unsigned_abs()));
                if age.is_some_and(|a| a <= AIM_AFTER_CLAIM) || aiming.elapsed() >= aim {
                    break age;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            };
            let rows = sqlx::query(
                "SELECT pid, application_name = 'leasehold' AS lease FROM pg_stat_activity \
                 WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() ORDER BY pid",
            )
            .fetch_all(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
            let all: Vec<(i32, bool)> = rows
                .iter()
                .map(|r| (r.get::<i32, _>(0), r.get::<bool, _>(1)))
                .collect();
            let lease: Vec<i32> = all.iter().filter(|(_, l)| *l).map(|(p, _)| *p).collect();
            let pool = if lease.is_empty() {
                all.iter().map(|(p, _)| *p).collect()
            } else {
                lease
            };
            let Some(&pid) = pool.get(which % pool.len().max(1)) else {
                return Ok(None);
            };
            let pid = pid.unsigned_abs();
            let claims = "SELECT CAST(max(acquired_at) AS TEXT) FROM leasehold_leases";
            let newest_before: Option<String> = sqlx::query_scalar(claims)
                .fetch_one(&mut conn)
                .await
                .map_err(|e| e.to_string())?;
            let _ = conn.close().await;
            let at = Instant::now();
            signal(pid, "KILL");
            // The postmaster notices the crash, ends every backend and
            // recovers; until then connections fail or are refused.
            tokio::time::sleep(Duration::from_millis(20)).await;
            let after = loop {
                if at.elapsed() > Duration::from_secs(60) {
                    return Err(format!(
                        "the server did not accept connections within 60 s of killing backend {pid}"
                    ));
                }
                if let Ok(mut c) = connect().await
                    && let Ok(t) = sqlx::query_scalar::<_, String>(started).fetch_one(&mut c).await
                    && let Ok(newest) = sqlx::query_scalar::<_, Option<String>>(claims)
                        .fetch_one(&mut c)
                        .await
                {
                    let _ = c.close().await;
                    break (t, newest);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            let (after, newest_after) = after;
            Ok(Some(Crash {
                pid,
                recovery: at.elapsed(),
                in_place: after == before,
                after_claim,
                forgot_claim: newest_after < newest_before,
            }))
        })
    }

    /// The addresses a worker's fault proxies stand in front of (one per
    /// cluster member), or none for a file.
    fn upstreams(&self) -> Vec<SocketAddr> {
        match &self.serving {
            Serving::File => Vec::new(),
            Serving::Server(s) => s.addr().into_iter().collect(),
            Serving::Cluster(c) => c.addrs(),
            Serving::Fake(f) => vec![f.addr()],
        }
    }

    /// The store's URL through the proxies at `addrs` (as [`Store::upstreams`]).
    fn url_via(&self, addrs: &[SocketAddr]) -> String {
        match &self.serving {
            Serving::Server(s) => store_url(s.kind, s.url_via(addrs[0])),
            Serving::Cluster(_) => etcd_url(addrs),
            Serving::Fake(_) => format!("k8s://{}", addrs[0]),
            Serving::File => self.url.clone(),
        }
    }
}

/// Every verb of the fake API server, to delay them all in a freeze.
const FAKE_VERBS: [FakeVerb; 7] = [
    FakeVerb::List,
    FakeVerb::Get,
    FakeVerb::Create,
    FakeVerb::Patch,
    FakeVerb::Update,
    FakeVerb::Delete,
    FakeVerb::AccessReview,
];

fn etcd_url(addrs: &[SocketAddr]) -> String {
    let list: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    format!("etcd://{}", list.join(","))
}

/// The store URL of a server's `url`: an etcd server hands out its member's
/// `http://` endpoint, which says nothing of the store behind it; the
/// campaign names it `etcd://`.
fn store_url(kind: ServerKind, url: String) -> String {
    match (kind, url.split_once("://")) {
        (ServerKind::Etcd35 | ServerKind::Etcd34, Some((_, member))) => format!("etcd://{member}"),
        _ => url,
    }
}

fn provide(backend: &str, dir: &Path, settings: Settings) -> Result<Store, String> {
    let kind = match backend {
        "sqlite" => {
            return Ok(Store {
                url: format!("sqlite://{}", dir.join("leases.sqlite").display()),
                describe: "sqlite (file)".into(),
                serving: Serving::File,
                backends: false,
            });
        }
        "etcd-cluster" | "etcd35x3" => {
            let cluster = EtcdCluster::start_kind(ServerKind::Etcd35, 3)?;
            cluster.wait_healthy(Duration::from_secs(60))?;
            return Ok(Store {
                url: etcd_url(&cluster.addrs()),
                describe: format!(
                    "etcd 3.5, a three-member cluster started by this run ({})",
                    cluster.endpoints().join(", ")
                ),
                serving: Serving::Cluster(cluster),
                backends: false,
            });
        }
        "k8s-fake" | "k8s" => {
            let fake = FakeApiServer::start().map_err(|e| format!("fake API server: {e}"))?;
            return Ok(Store {
                url: format!("k8s://{}", fake.addr()),
                describe: fake.describe(),
                serving: Serving::Fake(fake),
                backends: false,
            });
        }
        "postgres" | "postgres15" => ServerKind::Postgres15,
        "postgres-latest" => ServerKind::PostgresLatest,
        "mariadb" | "mysql" => ServerKind::MariaDb,
        "redis8" | "redis" => ServerKind::Redis8,
        "redis7" => ServerKind::Redis7,
        "valkey8" | "valkey" => ServerKind::Valkey8,
        "etcd35" | "etcd" => ServerKind::Etcd35,
        "etcd34" => ServerKind::Etcd34,
        other => return Err(format!("unknown backend {other:?}")),
    };
    let server = servers::provide_with(kind, settings).map_err(|e| e.to_string())?;
    // Only a server started here: the PIDs in `pg_stat_activity` of one
    // elsewhere (a container, another host) are not ours to signal.
    let backends =
        matches!(kind, ServerKind::Postgres15 | ServerKind::PostgresLatest) && server.can_restart();
    Ok(Store {
        url: store_url(kind, server.url.clone()),
        describe: server.describe(),
        serving: Serving::Server(server),
        backends,
    })
}

fn signal(pid: u32, sig: &str) {
    let Ok(mut kill) = programs::command("kill") else {
        eprintln!(
            "cannot signal worker {pid}: {}",
            programs::require("kill").unwrap_err()
        );
        return;
    };
    let _ = kill
        .args([format!("-{sig}"), pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

enum State {
    Running,
    Stopped { until: Instant },
    Terminating { since: Instant },
    Dead { restart_at: Instant },
}

struct Worker {
    child: Option<Child>,
    id: u32,
    state: State,
    generators: u32,
}

struct Run {
    args: Args,
    url: String,
    /// One fault proxy per worker index (networked stores only): the worker
    /// at that index, and each of its restarts, reaches the store through
    /// it, so a cut hits that worker's host alone.
    proxies: Vec<(Vec<FaultProxy>, String)>,
    /// Per worker index, when its cut ends.
    cut_until: Vec<Option<Instant>>,
    dir: PathBuf,
    exe: PathBuf,
    pool: String,
    max_skew_ms: i64,
    next_id: u32,
    rng: Rng,
    workers: Vec<Worker>,
    marks: Vec<FaultMark>,
    counts: BTreeMap<&'static str, u64>,
    skews: Vec<i64>,
    /// Per start: its clocks' rate, and a real reading (BOOTTIME ns) taken
    /// just before it started, from which its clocks drift.
    rates: Vec<Drifted>,
    /// libfaketime, preloaded into the workers whose clocks drift.
    faketime: Option<PathBuf>,
    /// The safety margin given to the workers (`None`: the library's).
    margin: Option<Duration>,
    /// Per start, in a mixed fleet: the worker's TTL and `max_clock_skew`.
    timings: Vec<(Duration, Duration)>,
    /// How the workers' strategies accept the store.
    options: Options,
    /// What each backend crash did.
    crashes: Vec<Crash>,
    freeze_until: Option<Instant>,
    /// Log sizes at the last look, and the workers whose log grew since.
    sizes: BTreeMap<u32, u64>,
    holding: BTreeSet<u32>,
}

impl Run {
    fn spawn(&mut self, idx: usize) -> Result<Worker, String> {
        self.next_id += 1;
        let id = self.next_id;
        // A mixed fleet: every other worker at 10 × the TTL; workers 0 and
        // 1 with the largest `max_clock_skew`, the others with their own
        // (a tenth of it to all of it), each clock within its own.
        let (ttl, own_max_ms) = if self.args.mixed_fleet {
            let ttl = if idx % 2 == 1 {
                self.args.ttl * 10
            } else {
                self.args.ttl
            };
            let most = self.max_skew_ms.unsigned_abs();
            let own = match idx {
                0 | 1 => most,
                _ => most / 10 + self.rng.below(most - most / 10 + 1),
            };
            self.timings.push((ttl, Duration::from_millis(own)));
            (ttl, own as i64)
        } else {
            (self.args.ttl, self.max_skew_ms)
        };
        // Skewed clocks in every run: worker 0 ahead by the most allowed,
        // worker 1 behind by it, the others at random within it.
        let skew_ms = match idx {
            0 => own_max_ms,
            1 => -own_max_ms,
            _ => self.rng.signed(own_max_ms),
        };
        // Several generators on one lease in every run: worker 2.
        let generators = if idx == 2 { 3 } else { 1 };
        self.skews.push(skew_ms);
        let err = std::fs::File::create(self.dir.join(format!("w{id}.err")))
            .map_err(|e| e.to_string())?;
        let mut cmd = Command::new(&self.exe);
        let url = self.proxies.get(idx).map_or(&self.url, |(_, url)| url);
        cmd.args(["--url", url, "--pool", &self.pool])
            .args(["--slots", &self.args.slots.to_string()])
            .args(["--ttl-ms", &ttl.as_millis().to_string()])
            .args(["--skew-ms", &skew_ms.to_string()])
            .args(["--generators", &generators.to_string()])
            .arg("--log")
            .arg(self.dir.join(format!("w{id}.rec")))
            .stdout(Stdio::null())
            .stderr(err);
        if self.args.unsafe_mode {
            cmd.arg("--unsafe");
        }
        if self.args.mixed_fleet {
            cmd.args(["--max-clock-skew-ms", &own_max_ms.to_string()]);
        }
        if !self.options.restart_guard {
            cmd.arg("--no-restart-guard");
        }
        if !self.options.assume_one_timing {
            cmd.arg("--no-one-timing");
        }
        if self.options.keep_server_synchronous_commit {
            cmd.arg("--unsafe-keep-server-synchronous-commit");
        }
        if !self.args.plants.is_empty() {
            cmd.args(["--plant", &plant_names(&self.args.plants)]);
        }
        if let Some(m) = self.margin {
            cmd.args(["--margin-us", &m.as_micros().to_string()]);
        }
        if let Some(b) = self.args.backoff_max_ms {
            cmd.args(["--backoff-max-ms", &b.to_string()]);
        }
        // Clock rate drift: every other worker index (the first, the third,
        // ...) slow, the rest fast; the slow ones are what the margin must
        // cover (a holder's deadline comes late by its own reckoning).
        let ppm = self.args.drift_ppm as i32;
        let rate = match self.faketime.as_ref() {
            Some(lib) if ppm != 0 => {
                let rate = Rate::from_ppm(if idx.is_multiple_of(2) { -ppm } else { ppm })
                    .unwrap_or(Rate::EXACT);
                cmd.env("LD_PRELOAD", lib).env("FAKETIME", rate.faketime());
                rate
            }
            _ => Rate::EXACT,
        };
        self.rates.push(drifted_from_now(rate));
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.exe.display()))?;
        Ok(Worker {
            child: Some(child),
            id,
            state: State::Running,
            generators,
        })
    }

    fn mark(&mut self, what: &str, worker: Option<u32>, until: Option<Duration>) {
        let at = MonoTime::now().as_nanos();
        self.marks.push(FaultMark {
            at_ns: at,
            until_ns: until.map(|d| at + d.as_nanos() as u64),
            what: what.into(),
            worker,
        });
    }

    /// Applies `p`; the worker it names, or the next one running.
    fn inject(&mut self, p: &Planned, store: &Store) {
        *self.counts.entry(p.fault.name()).or_default() += 1;
        if p.fault == Fault::Freeze {
            if store.can_freeze() {
                store.freeze(p.pause);
                self.mark("freeze", None, Some(p.pause));
                let thaw = Instant::now() + p.pause;
                // The store is thawed by the main loop.
                self.freeze_until = Some(thaw);
            }
            return;
        }
        // Aim at a worker that holds a lease (its log grew in the last
        // second) where there is one, else at any running worker.
        let n = self.workers.len();
        let running = |i: &usize| matches!(self.workers[*i].state, State::Running);
        let Some(idx) = (0..n)
            .map(|i| (p.worker + i) % n)
            .filter(running)
            .find(|&i| self.holding.contains(&self.workers[i].id))
            .or_else(|| (0..n).map(|i| (p.worker + i) % n).find(running))
        else {
            return;
        };
        let (pid, id) = {
            let w = &self.workers[idx];
            (w.child.as_ref().map_or(0, Child::id), w.id)
        };
        match p.fault {
            Fault::Kill => {
                signal(pid, "KILL");
                self.mark("kill", Some(id), None);
                let w = &mut self.workers[idx];
                if let Some(mut c) = w.child.take() {
                    let _ = c.wait();
                }
                w.state = State::Dead {
                    restart_at: Instant::now() + Duration::from_millis(300),
                };
            }
            Fault::Stop => {
                signal(pid, "STOP");
                self.mark("stop", Some(id), Some(p.pause));
                self.workers[idx].state = State::Stopped {
                    until: Instant::now() + p.pause,
                };
            }
            Fault::Term => {
                signal(pid, "TERM");
                self.mark("term", Some(id), None);
                self.workers[idx].state = State::Terminating {
                    since: Instant::now(),
                };
            }
            Fault::Cut | Fault::Reset | Fault::Slow => {
                let Some((proxies, _)) = self.proxies.get(idx) else {
                    return;
                };
                let net = match p.fault {
                    // A partition: what the worker sends is held, nothing
                    // comes back, new connections hang.
                    Fault::Cut => Net::Blackhole,
                    // Connections reset, new ones closed at once.
                    Fault::Reset => Net::Drop,
                    // Every chunk a third of the TTL late, each way.
                    _ => Net::Delay(self.args.ttl / 3),
                };
                // The main loop heals it.
                for proxy in proxies {
                    proxy.set(net);
                }
                self.mark(p.fault.name(), Some(id), Some(p.pause));
                let until = Instant::now() + p.pause;
                let cut = &mut self.cut_until[idx];
                *cut = Some(cut.map_or(until, |t| t.max(until)));
            }
            Fault::Freeze | Fault::Restart | Fault::Member | Fault::BackendCrash => {}
        }
    }
}

fn target_dir() -> PathBuf {
    if let Ok(d) = std::env::var("CARGO_TARGET_DIR") {
        return d.into();
    }
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent()?.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| "target".into())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn read_logs(dir: &Path) -> Vec<(u32, Vec<Record>)> {
    let mut logs = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(id) = name
            .strip_prefix('w')
            .and_then(|s| s.strip_suffix(".rec"))
            .and_then(|s| s.parse().ok())
        {
            match record::read(&entry.path()) {
                Ok(r) => logs.push((id, r)),
                Err(e) => eprintln!("campaign: {name}: {e}"),
            }
        }
    }
    logs.sort_by_key(|(id, _)| *id);
    logs
}

/// Refused generation calls reported by the workers that stopped gracefully.
fn refused_calls(dir: &Path) -> u64 {
    let mut n = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.path().extension().is_some_and(|e| e == "err") {
            for line in std::fs::read_to_string(entry.path())
                .unwrap_or_default()
                .lines()
            {
                if let Some(v) = line
                    .split_once(" IDs, ")
                    .and_then(|(_, r)| r.split_whitespace().next())
                    .and_then(|v| v.parse::<u64>().ok())
                {
                    n += v;
                }
            }
        }
    }
    n
}

fn ms(ns: i64) -> String {
    format!("{:.1} ms", ns as f64 / 1e6)
}

fn main() -> ExitCode {
    // `campaign --dump FILE.rec`: a worker's log as text, one record a line,
    // to read the evidence a failed run kept.
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, file] = argv.as_slice()
        && flag == "--dump"
    {
        return match record::read(Path::new(file)) {
            Ok(records) => {
                for r in records {
                    println!("{r:?}");
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("campaign: {file}: {e}");
                ExitCode::from(2)
            }
        };
    }
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("campaign: {e}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("campaign: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> Result<ExitCode, String> {
    let ttl = args.ttl;
    // Short: 45 s. Full: until `--ids` IDs are recorded (checked every 10 s,
    // at most a day), or 10 minutes; `--secs` overrides either.
    let length = Duration::from_secs(args.secs.unwrap_or(if args.short {
        45
    } else if args.ids.is_some() {
        86_400
    } else {
        600
    }));
    let margin = match args.margin {
        None => None,
        Some(Margin::Ms(ms)) => Some(Duration::from_millis(ms)),
        Some(Margin::Min) => Some(leasehold_core::min_safety_margin(
            ttl,
            Duration::from_millis(1),
        )),
    };
    let config = LeaseConfig::builder("probe").ttl(ttl);
    let config = match margin {
        Some(m) => config.safety_margin(m),
        None => config,
    }
    .build()
    .map_err(|e| e.to_string())?;
    let margin = config.timing().safety_margin();
    // The largest skew: the default `max_clock_skew`, or in a mixed fleet
    // the largest the run's TTL accepts (the workers' own bounds go up to it).
    let allowed_ms = if args.mixed_fleet {
        ttl.as_millis() as i64
    } else {
        config.timing().max_clock_skew().as_millis() as i64
    };
    let max_skew_ms = args
        .skew_ms
        .map_or(allowed_ms, |m| (m as i64).min(allowed_ms));
    let options = Options {
        restart_guard: !args.no_restart_guard,
        // Every worker of a usual run has the run's one TTL and skew; a
        // mixed fleet has not, and promises it only when told to.
        assume_one_timing: !args.mixed_fleet || args.assume_one_timing,
        keep_server_synchronous_commit: args.keep_server_synchronous_commit,
    };
    let label = format!(
        "{}-{}{}{}",
        args.backend,
        if args.unsafe_mode { "unsafe-" } else { "" },
        if args.keep_server_synchronous_commit {
            "control-"
        } else {
            ""
        },
        args.seed
    );
    let out = target_dir().join("campaign");
    let dir = out.join(&label);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let exe = std::env::current_exe()
        .map_err(|e| e.to_string())?
        .with_file_name("campaign-worker");
    if !exe.exists() {
        return Err(format!(
            "{} not found: build it with `cargo build -p leasehold-campaign --bins`",
            exe.display()
        ));
    }
    let mut store = provide(&args.backend, &dir, args.store)?;
    if args.keep_server_synchronous_commit && !store.backends {
        return Err(format!(
            "--unsafe-keep-server-synchronous-commit is a control for a PostgreSQL server this \
             run starts; {} is not one",
            store.describe
        ));
    }
    // A mixed fleet on a store that can forget: the backend must refuse
    // workers that do not promise one timing per pool; with the promise
    // made anyway (`--assume-one-timing`) the run is unsafe by design.
    let mut unsafe_by_design = None;
    if args.mixed_fleet {
        let probe_rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let seen = probe_rt.block_on(probe(&store.url, &options))?;
        match (seen.can_forget, &seen.refused, options.assume_one_timing) {
            (false, Some(e), _) => {
                return Err(format!("the store refused the mixed fleet's workers: {e}"));
            }
            (false, None, _) => {}
            (true, Some(e), false) => {
                println!(
                    "campaign: backend {} ({}): a mixed fleet on a store that can forget is \
                     refused at connect, as it must be (its restart guard cannot know the \
                     longest TTL and skew of holders a crash forgot):\n  {e}\n\
                     campaign: nothing to run; --assume-one-timing runs it anyway, UNSAFE by design",
                    args.backend, store.describe
                );
                drop(store);
                let _ = std::fs::remove_dir_all(&dir);
                return Ok(ExitCode::SUCCESS);
            }
            // The backend accepts the fleet without the promise: it says it
            // keeps what its guard relies on (e.g. Valkey with the
            // append-only file waits for WAITAOF before it grants); a safe
            // run puts that to the test.
            (true, None, false) => {}
            (true, _, true) => {
                unsafe_by_design = Some(
                    "a mixed fleet promising one timing per pool (--assume-one-timing) on a store \
                     that can forget: a crash that loses the longest holder's claim lets a \
                     shorter-lived claimer in before that holder stops",
                );
            }
        }
    }
    let mode = if !args.plants.is_empty() {
        format!(
            "PLANTED BUG {} (rule {}; must be found)",
            plant_names(&args.plants),
            args.plants
                .iter()
                .map(|p| p.rule().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else if args.unsafe_mode {
        "unsafe".to_owned()
    } else if args.keep_server_synchronous_commit {
        format!(
            "control: PostgreSQL lease sessions keep the server's synchronous_commit{} \
             (must find duplicates)",
            if args.no_restart_guard {
                ", no restart guard"
            } else {
                ""
            }
        )
    } else if let Some(why) = unsafe_by_design {
        format!("UNSAFE by design: {why}")
    } else {
        "safe".to_owned()
    };
    let mode = mode.as_str();
    let load_before = loadavg();
    println!(
        "campaign: backend {} ({}), {mode} mode, seed {} (replay: --seed {}), {} workers for {} slots \
         per pool, ttl {ttl:?}, margin {margin:?}, max clock skew {max_skew_ms} ms, {} s{}; load {load_before}",
        args.backend,
        store.describe,
        args.seed,
        args.seed,
        args.workers,
        args.slots,
        length.as_secs(),
        args.ids.map(|n| format!(" or {n} IDs")).unwrap_or_default(),
    );
    // Networked stores: one fault proxy per worker, run on a small runtime
    // of their own that lives as long as the run.
    let net_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("campaign-proxy")
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut proxies = Vec::new();
    let upstreams = store.upstreams();
    if !upstreams.is_empty() {
        for _ in 0..args.workers {
            let mut own = Vec::new();
            for upstream in &upstreams {
                own.push(
                    net_rt
                        .block_on(FaultProxy::start(*upstream))
                        .map_err(|e| format!("fault proxy: {e}"))?,
                );
            }
            let addrs: Vec<SocketAddr> = own.iter().map(FaultProxy::addr).collect();
            let url = store.url_via(&addrs);
            proxies.push((own, url));
        }
        let list: Vec<String> = upstreams.iter().map(ToString::to_string).collect();
        println!(
            "campaign: each worker reaches the store at {} through fault proxies of its own",
            list.join(", ")
        );
    }
    let mut rng = Rng::new(args.seed);
    let faults = plan(
        &mut rng,
        length,
        ttl * 2,
        args.workers,
        ttl,
        StoreFaults {
            cut: !proxies.is_empty(),
            freeze: store.can_freeze(),
            restart: store.can_restart(),
            member: matches!(store.serving, Serving::Cluster(_)),
            restart_heavy: args.restart_heavy,
            backend_crash: store.backends,
            crash_heavy: args.crash_heavy,
        },
    );
    if args.restart_heavy && !store.can_restart() {
        return Err(format!(
            "--restart-heavy: the {} store cannot be restarted by this process",
            args.backend
        ));
    }
    if args.crash_heavy && !store.backends {
        return Err(format!(
            "--crash-heavy: only a PostgreSQL server this run starts has a backend to crash \
             without a restart ({} has none: MariaDB and Valkey/Redis are one process, where \
             a crash is a restart; use --restart-heavy)",
            store.describe
        ));
    }
    let faketime = if args.drift_ppm == 0 {
        None
    } else {
        Some(programs::require("libfaketime").map_err(|e| format!("--clock-rate-ppm: {e}"))?)
    };
    let mut run = Run {
        url: store.url.clone(),
        cut_until: vec![None; proxies.len()],
        proxies,
        dir: dir.clone(),
        exe,
        pool: format!("c{}", args.seed % 1_000_000_007),
        max_skew_ms,
        next_id: 0,
        rng,
        workers: Vec::new(),
        marks: Vec::new(),
        counts: BTreeMap::new(),
        skews: Vec::new(),
        rates: Vec::new(),
        faketime,
        margin: args.margin.map(|_| margin),
        timings: Vec::new(),
        options,
        crashes: Vec::new(),
        freeze_until: None,
        sizes: BTreeMap::new(),
        holding: BTreeSet::new(),
        args,
    };
    // Fenced writes, where the store has a helper: its tables first.
    let fence_pools: Vec<String> = Kind::ALL
        .iter()
        .map(|k| format!("{}-{}", run.pool, k.name()))
        .collect();
    let fence_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let fences = fence_rt.block_on(async {
        match FenceWriter::connect(&store.url).await? {
            Some(w) => w
                .prepare(&fence_pools, run.args.slots)
                .await
                .map(|()| Some(w)),
            None => Ok(None),
        }
    })?;
    let start_ns = MonoTime::now().as_nanos();
    let started = Instant::now();
    for i in 0..run.args.workers {
        let w = run.spawn(i)?;
        run.workers.push(w);
    }
    let mut next_fault = 0;
    // A killed cluster member, and when it starts again.
    let mut member_down: Option<(usize, Instant)> = None;
    let mut last_progress = Instant::now();
    let mut last_count = Instant::now();
    let mut ids_so_far = 0u64;
    loop {
        let elapsed = started.elapsed();
        let ids_done = run.args.ids.is_some_and(|n| ids_so_far >= n);
        if elapsed >= length || ids_done {
            break;
        }
        if let Some(p) = faults.get(next_fault)
            && elapsed >= p.at
        {
            let p = *p;
            if p.fault == Fault::Restart {
                *run.counts.entry(p.fault.name()).or_default() += 1;
                let at = Instant::now();
                run.mark("restart", None, None);
                if let Err(e) = store.restart() {
                    eprintln!("\ncampaign: restarting the store failed: {e}");
                    return Err(format!("restarting the store failed: {e}"));
                }
                // Every member runs again.
                member_down = None;
                if let Some(m) = run.marks.last_mut() {
                    m.until_ns = Some(m.at_ns + at.elapsed().as_nanos() as u64);
                }
            } else if p.fault == Fault::BackendCrash {
                let aim = run.args.ttl * 2;
                run.mark("backend-crash", None, None);
                match store.crash_backend(p.worker, aim) {
                    Ok(Some(crash)) => {
                        *run.counts.entry(p.fault.name()).or_default() += 1;
                        // Shaded until the server accepted connections again.
                        if let Some(m) = run.marks.last_mut() {
                            m.until_ns = Some(m.at_ns + crash.recovery.as_nanos() as u64);
                        }
                        run.crashes.push(crash);
                    }
                    Ok(None) => {
                        run.marks.pop();
                        eprintln!(
                            "\ncampaign: no client backend to crash at {:.1} s; skipped",
                            elapsed.as_secs_f64()
                        );
                    }
                    Err(e) => {
                        eprintln!("\ncampaign: crashing a backend failed: {e}");
                        return Err(format!("crashing a backend failed: {e}"));
                    }
                }
            } else if p.fault == Fault::Member {
                // One member at a time, so the cluster keeps its quorum.
                if let Serving::Cluster(c) = &mut store.serving
                    && member_down.is_none()
                {
                    let victim = p.worker % c.len();
                    c.kill(victim)
                        .map_err(|e| format!("killing member {victim}: {e}"))?;
                    *run.counts.entry(p.fault.name()).or_default() += 1;
                    run.mark(&format!("member m{victim}"), None, Some(p.pause));
                    member_down = Some((victim, Instant::now() + p.pause));
                }
            } else {
                run.inject(&p, &store);
            }
            next_fault += 1;
        }
        if let Some((victim, at)) = member_down
            && Instant::now() >= at
            && let Serving::Cluster(c) = &mut store.serving
        {
            c.restart(victim)
                .map_err(|e| format!("restarting member {victim}: {e}"))?;
            member_down = None;
        }
        if let Some(t) = run.freeze_until
            && Instant::now() >= t
        {
            store.thaw();
            run.freeze_until = None;
        }
        for (i, until) in run.cut_until.iter_mut().enumerate() {
            if until.is_some_and(|t| Instant::now() >= t) {
                for proxy in &run.proxies[i].0 {
                    proxy.set(Net::Pass);
                }
                *until = None;
            }
        }
        for i in 0..run.workers.len() {
            let now = Instant::now();
            let restart = match &mut run.workers[i].state {
                State::Running => {
                    if let Some(c) = &mut run.workers[i].child
                        && let Ok(Some(status)) = c.try_wait()
                    {
                        eprintln!(
                            "\ncampaign: worker {} exited by itself: {status}",
                            run.workers[i].id
                        );
                        run.workers[i].child = None;
                        run.workers[i].state = State::Dead {
                            restart_at: now + Duration::from_secs(1),
                        };
                    }
                    false
                }
                State::Stopped { until } => {
                    if now >= *until {
                        if let Some(c) = &run.workers[i].child {
                            signal(c.id(), "CONT");
                        }
                        run.workers[i].state = State::Running;
                    }
                    false
                }
                State::Terminating { since } => {
                    let since = *since;
                    let done = run.workers[i]
                        .child
                        .as_mut()
                        .is_none_or(|c| !matches!(c.try_wait(), Ok(None)));
                    if !done
                        && now.duration_since(since) > Duration::from_secs(20)
                        && let Some(c) = &mut run.workers[i].child
                    {
                        let _ = c.kill();
                        let _ = c.wait();
                    }
                    done || now.duration_since(since) > Duration::from_secs(20)
                }
                State::Dead { restart_at } => now >= *restart_at,
            };
            if restart {
                let w = run.spawn(i)?;
                run.workers[i] = w;
            }
        }
        if run.args.ids.is_some() && last_count.elapsed() >= Duration::from_secs(10) {
            ids_so_far = read_logs(&dir)
                .iter()
                .flat_map(|(_, r)| r.iter())
                .map(|r| match r {
                    Record::Run { first, last, .. } => last - first + 1,
                    _ => 0,
                })
                .sum();
            last_count = Instant::now();
        }
        if last_progress.elapsed() >= Duration::from_secs(1) {
            let running = run
                .workers
                .iter()
                .filter(|w| matches!(w.state, State::Running))
                .count();
            let mut bytes = 0;
            run.holding.clear();
            for w in &run.workers {
                let len =
                    std::fs::metadata(dir.join(format!("w{}.rec", w.id))).map_or(0, |m| m.len());
                if run.sizes.insert(w.id, len).is_some_and(|was| len > was) {
                    run.holding.insert(w.id);
                }
            }
            for len in run.sizes.values() {
                bytes += len;
            }
            eprint!(
                "\r[{:>4.0}s/{}s] workers {running}/{} running, {} faults injected, logs {:.1} MB{}   ",
                elapsed.as_secs_f64(),
                length.as_secs(),
                run.workers.len(),
                next_fault,
                bytes as f64 / 1e6,
                if run.args.ids.is_some() {
                    format!(", {ids_so_far} IDs")
                } else {
                    String::new()
                },
            );
            last_progress = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!();
    // Wind down: thaw and heal everything, stop every worker gracefully.
    store.thaw();
    if let Some((victim, _)) = member_down
        && let Serving::Cluster(c) = &mut store.serving
    {
        c.restart(victim)
            .map_err(|e| format!("restarting member {victim}: {e}"))?;
    }
    for (proxies, _) in &run.proxies {
        for proxy in proxies {
            proxy.set(Net::Pass);
        }
    }
    for w in &mut run.workers {
        if let Some(c) = &w.child {
            signal(c.id(), "CONT");
            signal(c.id(), "TERM");
        }
    }
    let wind_down = Instant::now();
    for w in &mut run.workers {
        if let Some(c) = &mut w.child {
            loop {
                match c.try_wait() {
                    Ok(None) if wind_down.elapsed() < Duration::from_secs(20) => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Ok(None) => {
                        eprintln!("campaign: worker {} did not stop; killed", w.id);
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                    _ => break,
                }
            }
        }
    }
    let end_ns = MonoTime::now().as_nanos();
    let wall = started.elapsed();
    let load_after = loadavg();
    let mut logs = read_logs(&dir);
    // Workers whose clocks drifted recorded their own timeline: put their
    // times onto the real one, where the holding periods are compared.
    for (id, records) in &mut logs {
        if let Some(d) = run.rates.get((*id as usize).wrapping_sub(1)) {
            d.retime(records);
        }
    }
    // The fence logs, through a fresh connection: the one that prepared
    // them sat idle through the run (and through any store restart).
    let fence_logs = match &fences {
        Some(_) => fence_rt.block_on(async {
            let mut tries = 0;
            loop {
                let read = match FenceWriter::connect(&store.url).await {
                    Ok(Some(w)) => w.accepted(&fence_pools, run.args.slots).await,
                    Ok(None) => Ok(BTreeMap::new()),
                    Err(e) => Err(e),
                };
                tries += 1;
                match read {
                    Err(e) if tries < 5 => {
                        eprintln!("campaign: reading the fence logs: {e}; retrying");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    r => break r,
                }
            }
        })?,
        None => BTreeMap::new(),
    };
    let report = check(&logs, run.args.slots, &fence_logs);
    let refused = refused_calls(&dir);
    let title = format!(
        "{} {mode} seed {}: {} IDs, {} duplicates, {} overlaps, {} faults",
        run.args.backend,
        run.args.seed,
        report.total_ids(),
        report.duplicates,
        report.overlaps.len(),
        run.marks.len()
    );
    let picture = out.join(format!("{label}.svg"));
    std::fs::write(
        &picture,
        svg(
            &title,
            &report.periods,
            &run.marks,
            run.args.slots,
            start_ns,
            end_ns,
        ),
    )
    .map_err(|e| format!("{}: {e}", picture.display()))?;
    let png = png_of(&picture);
    print_table(
        &run,
        &report,
        &Summary {
            mode,
            start_ns,
            margin,
            wall,
            refused,
            load: format!("{load_before} → {load_after}"),
            picture: &picture,
            png: &png,
            store: &store.describe,
        },
        fences.is_some(),
    );
    // Who made the duplicates (the first ten pairs).
    for ((kind, slot, a, b), n) in duplicate_sources(&logs).iter().take(10) {
        println!(
            "  {n} duplicate {} IDs on slot {slot}: worker {a} (clock {:+} ms), then worker {b} (clock {:+} ms)",
            kind.name(),
            run.skews
                .get((*a as usize).saturating_sub(1))
                .copied()
                .unwrap_or(0),
            run.skews
                .get((*b as usize).saturating_sub(1))
                .copied()
                .unwrap_or(0),
        );
    }
    // Unsafe and control runs must find duplicates; a run unsafe by design
    // shows what it risks, and its duplicates are reported, not judged.
    let planted = !run.args.plants.is_empty();
    let must_fail = run.args.unsafe_mode || run.args.keep_server_synchronous_commit || planted;
    let ok = if planted {
        !report.is_clean()
    } else if must_fail {
        report.duplicates > 0
    } else if unsafe_by_design.is_some() {
        println!(
            "UNSAFE by design: {} duplicates, {} overlapping holding periods (not judged: \
             the run's configuration risks them)",
            report.duplicates,
            report.overlaps.len()
        );
        true
    } else {
        report.is_clean()
    };
    if !ok {
        if planted {
            println!(
                "FAILED: the {mode} run found nothing: the campaign did not catch the planted bug"
            );
        } else if must_fail {
            println!(
                "FAILED: the {mode} run found no duplicate: the check did not show it can fail"
            );
        } else {
            println!("FAILED: see the table; evidence kept in {}", dir.display());
            for (a, b, by) in report.overlaps.iter().take(10) {
                println!("  overlap {}: {a:?} / {b:?}", ms(*by as i64));
            }
        }
        return Ok(ExitCode::FAILURE);
    }
    if must_fail || run.args.keep {
        println!("the logs are kept in {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(ExitCode::SUCCESS)
}

/// Renders `svg` as a PNG beside it with `rsvg-convert`, where the machine
/// has it; says what it made, or why it made none.
fn png_of(svg: &Path) -> String {
    let png = svg.with_extension("png");
    let rsvg = match programs::command("rsvg-convert") {
        Ok(c) => c,
        Err(e) => return format!("no PNG: {e}"),
    };
    match { rsvg }
        .args(["-w", "1400", "-b", "white", "-o"])
        .arg(&png)
        .arg(svg)
        .stderr(Stdio::piped())
        .output()
    {
        Ok(o) if o.status.success() => format!("PNG: {}", png.display()),
        Ok(o) => format!(
            "no PNG: rsvg-convert failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => format!("no PNG: rsvg-convert did not run: {e}"),
    }
}

struct Summary<'a> {
    mode: &'a str,
    /// When the run started (BOOTTIME ns).
    start_ns: u64,
    margin: Duration,
    wall: Duration,
    refused: u64,
    load: String,
    picture: &'a Path,
    /// The PNG beside the picture, or why there is none.
    png: &'a str,
    store: &'a str,
}

/// A worker about to start with clocks at `rate`: the real BOOTTIME now, and
/// the wall clock's offset from it (read between two BOOTTIME readings, so a
/// stall between the reads shows as at most their gap).
fn drifted_from_now(rate: Rate) -> Drifted {
    let before = MonoTime::now().as_nanos();
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let after = MonoTime::now().as_nanos();
    Drifted {
        rate,
        anchor_ns: before,
        unix_offset_ns: wall.saturating_sub(before / 2 + after / 2),
    }
}

/// The command that runs `a` again (the same faults and clocks).
fn replay_command(a: &Args) -> String {
    let mut c = format!("cargo xtask campaign --backend {}", a.backend);
    let mut flag = |on: bool, f: &str| {
        if on {
            c.push(' ');
            c.push_str(f);
        }
    };
    flag(a.short, "--short");
    flag(a.unsafe_mode, "--unsafe");
    flag(a.store == Settings::Durable, "--store durable");
    flag(a.store == Settings::Lossy, "--store lossy");
    flag(a.restart_heavy, "--restart-heavy");
    flag(a.crash_heavy, "--crash-heavy");
    flag(a.mixed_fleet, "--mixed-fleet");
    flag(a.assume_one_timing, "--assume-one-timing");
    flag(a.no_restart_guard, "--no-restart-guard");
    flag(
        a.keep_server_synchronous_commit,
        "--unsafe-keep-server-synchronous-commit",
    );
    let mut value = |name: &str, v: Option<String>| {
        if let Some(v) = v {
            c.push_str(&format!(" {name} {v}"));
        }
    };
    value("--secs", a.secs.map(|v| v.to_string()));
    value("--ids", a.ids.map(|v| v.to_string()));
    value("--skew-ms", a.skew_ms.map(|v| v.to_string()));
    value(
        "--ttl-ms",
        (a.ttl != Duration::from_secs(2)).then(|| a.ttl.as_millis().to_string()),
    );
    value("--workers", (a.workers != 5).then(|| a.workers.to_string()));
    value("--slots", (a.slots != 2).then(|| a.slots.to_string()));
    value(
        "--plant",
        (!a.plants.is_empty()).then(|| plant_names(&a.plants)),
    );
    value(
        "--clock-rate-ppm",
        (a.drift_ppm != 0).then(|| a.drift_ppm.to_string()),
    );
    value(
        "--margin-ms",
        a.margin.map(|m| match m {
            Margin::Ms(ms) => ms.to_string(),
            Margin::Min => "min".into(),
        }),
    );
    value("--backoff-max-ms", a.backoff_max_ms.map(|b| b.to_string()));
    value("--seed", Some(a.seed.to_string()));
    c
}

/// The names of `plants`, as `--plant` takes them.
fn plant_names(plants: &[Plant]) -> String {
    plants
        .iter()
        .map(|p| p.name())
        .collect::<Vec<_>>()
        .join(",")
}

fn print_table(run: &Run, r: &Report, s: &Summary<'_>, fences: bool) {
    let faults: Vec<String> = run
        .counts
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .chain([
            format!(
                "skewed clocks {} (of {} starts, max ±{} ms)",
                run.skews.iter().filter(|s| **s != 0).count(),
                run.skews.len(),
                run.max_skew_ms
            ),
            format!(
                "several generators {}",
                run.workers.iter().filter(|w| w.generators > 1).count()
            ),
        ])
        .collect();
    let per_kind: Vec<String> = r.ids.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let closed = r.periods.iter().filter(|p| p.closed).count();
    let rows: Vec<(&str, String)> = vec![
        ("backend", format!("{} — {}", run.args.backend, s.store)),
        ("mode", s.mode.to_owned()),
        ("seed", run.args.seed.to_string()),
        ("command", replay_command(&run.args)),
        (
            "IDs",
            format!("{} ({})", r.total_ids(), per_kind.join(", ")),
        ),
        ("duplicates", r.duplicates.to_string()),
        ("IDs outside the pool", r.outside_pool.to_string()),
        ("overlapping holding periods", r.overlaps.len().to_string()),
        (
            "first found",
            r.first_found.map_or("nothing".into(), |(at, what)| {
                format!(
                    "{what}, {:.1} s after the start",
                    at.saturating_sub(s.start_ns) as f64 / 1e9
                )
            }),
        ),
        (
            "fences issued again (not above an earlier grant's on the slot)",
            r.fences_reissued.to_string(),
        ),
        (
            "holding periods",
            format!(
                "{} ({closed} seen closed, the rest cut by a kill)",
                r.periods.len()
            ),
        ),
        (
            "closest hand-over",
            r.closest_handover_ns.map_or("none".into(), ms) + &format!(" (margin {:?})", s.margin),
        ),
        ("faults", faults.join(", ")),
        (
            "second generators refused",
            r.second_generators_refused.to_string(),
        ),
        (
            "grants carrying a floor / refused: clock behind the floor",
            format!(
                "{} / {} (largest lag {} ms)",
                r.grants_with_floor, r.clock_behind, r.clock_behind_max_ms
            ),
        ),
        ("refused calls (graceful stops)", s.refused.to_string()),
        (
            "fenced writes",
            if fences {
                format!(
                    "{} accepted, {} refused as stale, {} in the store's logs, {} accepted below an accepted fence",
                    r.fenced_accepted, r.fenced_refused, r.fenced_logged, r.fence_violations
                )
            } else {
                "none (no fenced-write helper for this store yet)".into()
            },
        ),
        (
            "workers",
            format!(
                "{} processes started, {} at a time",
                run.next_id,
                run.workers.len()
            ),
        ),
        (
            "backend crashes (PostgreSQL, in place)",
            if run.crashes.is_empty() {
                "none".into()
            } else {
                format!(
                    "{} (backends {}), {} within {} of a claim, {} recovered in place (the \
                     postmaster's start time unchanged), recovery up to {}; the server forgot \
                     the newest claim in {}",
                    run.crashes.len(),
                    run.crashes
                        .iter()
                        .map(|c| c.pid.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    run.crashes
                        .iter()
                        .filter(|c| c.after_claim.is_some_and(|a| a <= AIM_AFTER_CLAIM))
                        .count(),
                    ms(AIM_AFTER_CLAIM.as_nanos() as i64),
                    run.crashes.iter().filter(|c| c.in_place).count(),
                    ms(run
                        .crashes
                        .iter()
                        .map(|c| c.recovery.as_nanos() as i64)
                        .max()
                        .unwrap_or(0)),
                    run.crashes.iter().filter(|c| c.forgot_claim).count()
                )
            },
        ),
        (
            "worker timings (TTL / max_clock_skew)",
            if run.timings.is_empty() {
                format!("one for all: {:?} / {} ms", run.args.ttl, run.max_skew_ms)
            } else {
                run.timings
                    .iter()
                    .enumerate()
                    .map(|(i, (t, k))| format!("w{} {t:?}/{}ms", i + 1, k.as_millis()))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        ),
        (
            "worker clock rates",
            if run.rates.iter().all(|d| d.rate.is_exact()) {
                "exact".into()
            } else {
                run.rates
                    .iter()
                    .enumerate()
                    .map(|(i, d)| format!("w{} {}", i + 1, d.rate))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        ),
        (
            "worker clocks (ms off)",
            run.skews
                .iter()
                .enumerate()
                .map(|(i, s)| format!("w{} {s:+}", i + 1))
                .collect::<Vec<_>>()
                .join(", "),
        ),
        ("wall time", format!("{:.1} s", s.wall.as_secs_f64())),
        ("machine load (1/5/15 min)", s.load.clone()),
        ("timeline", format!("{} ({})", s.picture.display(), s.png)),
    ];
    println!("\n| {} | |\n|---|---|", run.args.backend);
    for (k, v) in rows {
        println!("| {k} | {v} |");
    }
}
