//! The campaign runner: provides a store, runs more worker processes than
//! slots, injects faults drawn from a printed seed, then checks every
//! recorded ID and holding period, prints a summary table and draws the
//! timeline into `target/campaign/<backend>-<seed>.svg`.
//!
//! ```text
//! campaign [--backend sqlite|postgres|mariadb|redis8|redis7|valkey8|etcd35|etcd34|
//!                     etcd-cluster|k8s-fake] [--short]
//!          [--unsafe] [--seed S] [--secs N] [--ids N] [--workers W] [--slots K]
//! ```
//!
//! Exit status: 0 when the run is clean (in `--unsafe` mode: when duplicates
//! were found), 1 otherwise, 2 for a usage or setup error.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use leasehold_campaign::check::{Report, check, duplicate_sources};
use leasehold_campaign::plan::{Fault, Planned, Rng, StoreFaults, plan};
use leasehold_campaign::record::{self, Kind, Record};
use leasehold_campaign::store::FenceWriter;
use leasehold_campaign::timeline::{FaultMark, svg};
use leasehold_conformance::etcd_cluster::EtcdCluster;
use leasehold_conformance::programs;
use leasehold_conformance::proxy::{Fault as Net, FaultProxy};
use leasehold_conformance::servers::{self, ServerKind, Settings};
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
    /// The workers' stores run without the restart guard (a control run).
    no_restart_guard: bool,
    /// Keep the logs of a clean run too.
    keep: bool,
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
        no_restart_guard: false,
        keep: false,
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
            "--no-restart-guard" => a.no_restart_guard = true,
            "--keep" => a.keep = true,
            "-h" | "--help" => {
                return Err(
                    "usage: campaign [--backend sqlite|postgres|mariadb|redis8|redis7|\
                            valkey8|etcd35|etcd34|etcd-cluster|k8s-fake] [--short] [--unsafe] [--seed S] [--secs N] [--ids N] \
                            [--workers W] [--slots K] [--ttl-ms T] [--skew-ms M] \
                            [--store fast|durable|lossy] [--restart-heavy] [--no-restart-guard] [--keep]\n\
                            \x20      campaign --dump FILE.rec   (a worker's log as text)"
                        .into(),
                );
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
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
}

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
            Serving::Server(s) => s.url_via(addrs[0]),
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

fn provide(backend: &str, dir: &Path, settings: Settings) -> Result<Store, String> {
    let kind = match backend {
        "sqlite" => {
            return Ok(Store {
                url: format!("sqlite://{}", dir.join("leases.sqlite").display()),
                describe: "sqlite (file)".into(),
                serving: Serving::File,
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
            });
        }
        "k8s-fake" | "k8s" => {
            let fake = FakeApiServer::start().map_err(|e| format!("fake API server: {e}"))?;
            return Ok(Store {
                url: format!("k8s://{}", fake.addr()),
                describe: fake.describe(),
                serving: Serving::Fake(fake),
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
    Ok(Store {
        url: server.url.clone(),
        describe: server.describe(),
        serving: Serving::Server(server),
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
    freeze_until: Option<Instant>,
    /// Log sizes at the last look, and the workers whose log grew since.
    sizes: BTreeMap<u32, u64>,
    holding: BTreeSet<u32>,
}

impl Run {
    fn spawn(&mut self, idx: usize) -> Result<Worker, String> {
        self.next_id += 1;
        let id = self.next_id;
        // Skewed clocks in every run: worker 0 ahead by the most allowed,
        // worker 1 behind by it, the others at random within it.
        let skew_ms = match idx {
            0 => self.max_skew_ms,
            1 => -self.max_skew_ms,
            _ => self.rng.signed(self.max_skew_ms),
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
            .args(["--ttl-ms", &self.args.ttl.as_millis().to_string()])
            .args(["--skew-ms", &skew_ms.to_string()])
            .args(["--generators", &generators.to_string()])
            .arg("--log")
            .arg(self.dir.join(format!("w{id}.rec")))
            .stdout(Stdio::null())
            .stderr(err);
        if self.args.unsafe_mode {
            cmd.arg("--unsafe");
        }
        if self.args.no_restart_guard {
            cmd.arg("--no-restart-guard");
        }
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
            Fault::Freeze | Fault::Restart | Fault::Member => {}
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
    let config = LeaseConfig::builder("probe")
        .ttl(ttl)
        .build()
        .map_err(|e| e.to_string())?;
    let margin = config.timing().safety_margin();
    let allowed_ms = config.timing().max_clock_skew().as_millis() as i64;
    let max_skew_ms = args
        .skew_ms
        .map_or(allowed_ms, |m| (m as i64).min(allowed_ms));
    let mode = if args.unsafe_mode { "unsafe" } else { "safe" };
    let label = format!(
        "{}-{}{}",
        args.backend,
        if args.unsafe_mode { "unsafe-" } else { "" },
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
        },
    );
    if args.restart_heavy && !store.can_restart() {
        return Err(format!(
            "--restart-heavy: the {} store cannot be restarted by this process",
            args.backend
        ));
    }
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
    let logs = read_logs(&dir);
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
    let ok = if run.args.unsafe_mode {
        report.duplicates > 0
    } else {
        report.is_clean()
    };
    if !ok {
        if run.args.unsafe_mode {
            println!(
                "FAILED: the unsafe mode found no duplicate: the check did not show it can fail"
            );
        } else {
            println!("FAILED: see the table; evidence kept in {}", dir.display());
            for (a, b, by) in report.overlaps.iter().take(10) {
                println!("  overlap {}: {a:?} / {b:?}", ms(*by as i64));
            }
        }
        return Ok(ExitCode::FAILURE);
    }
    if run.args.unsafe_mode || run.args.keep {
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
    margin: Duration,
    wall: Duration,
    refused: u64,
    load: String,
    picture: &'a Path,
    /// The PNG beside the picture, or why there is none.
    png: &'a str,
    store: &'a str,
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
        (
            "command",
            format!(
                "cargo xtask campaign --backend {}{}{} --seed {}{}",
                run.args.backend,
                if run.args.short { " --short" } else { "" },
                if run.args.unsafe_mode {
                    " --unsafe"
                } else {
                    ""
                },
                run.args.seed,
                run.args
                    .skew_ms
                    .map(|m| format!(" --skew-ms {m}"))
                    .unwrap_or_default()
            ) + match run.args.store {
                Settings::Fast => "",
                Settings::Durable => " --store durable",
                Settings::Lossy => " --store lossy",
            } + if run.args.restart_heavy {
                " --restart-heavy"
            } else {
                ""
            } + if run.args.no_restart_guard {
                " --no-restart-guard"
            } else {
                ""
            },
        ),
        (
            "IDs",
            format!("{} ({})", r.total_ids(), per_kind.join(", ")),
        ),
        ("duplicates", r.duplicates.to_string()),
        ("IDs outside the pool", r.outside_pool.to_string()),
        ("overlapping holding periods", r.overlaps.len().to_string()),
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
