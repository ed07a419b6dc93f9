//! A campaign worker: leases one slot per kind from a real store, generates
//! `Sortable64` and `Counter64` IDs as fast as it can while the lease holds,
//! and records runs of IDs and holding periods into its log.
//!
//! ```text
//! campaign-worker --url URL --pool NAME --slots N --log FILE [--ttl-ms T]
//!                 [--skew-ms S] [--max-clock-skew-ms M] [--margin-us U] [--backoff-max-ms B]
//!                 [--generators N] [--unsafe]
//!                 [--no-restart-guard] [--no-one-timing]
//!                 [--unsafe-keep-server-synchronous-commit] [--plant NAME[,NAME]]
//! ```
//!
//! `--plant` breaks timing rules on purpose (`leasehold_core::plant`); only
//! a build with the `planted-bugs` feature accepts it.
//!
//! SIGTERM stops generation, writes the log out and releases the leases.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::record::{Kind, Record, Recorder, RunBuilder};
use crate::store::{FenceWriter, Options, start_manager};
use crate::worker::{Skewed, Snapshot, Tracker};
use leasehold_core::plant::Plant;
use leasehold_core::testing::GateControl;
use leasehold_core::{LeaseConfig, LeaseGate, MonoTime};
use leasehold_nonce::{AsClock, Counter64, GenerateError, Layout, Sortable64};

struct Args {
    url: String,
    pool: String,
    slots: u32,
    log: PathBuf,
    ttl: Duration,
    skew_ms: i64,
    /// The `max_clock_skew` of the leases (default: the library's).
    max_clock_skew: Option<Duration>,
    /// The leases' safety margin (default: the library's).
    margin: Option<Duration>,
    /// The largest delay between claims while waiting (default: the
    /// library's).
    backoff_max: Option<Duration>,
    generators: u32,
    unsafe_mode: bool,
    /// How the strategies accept the store.
    options: Options,
}

fn parse_args(argv: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        url: String::new(),
        pool: "campaign".into(),
        slots: 2,
        log: PathBuf::new(),
        ttl: Duration::from_secs(2),
        skew_ms: 0,
        max_clock_skew: None,
        margin: None,
        backoff_max: None,
        generators: 1,
        unsafe_mode: false,
        options: Options::default(),
    };
    let mut it = argv.into_iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let num = |v: String| v.parse::<i64>().map_err(|e| format!("{e}"));
        match flag.as_str() {
            "--url" => a.url = value()?,
            "--pool" => a.pool = value()?,
            "--slots" => a.slots = num(value()?)? as u32,
            "--log" => a.log = value()?.into(),
            "--ttl-ms" => a.ttl = Duration::from_millis(num(value()?)? as u64),
            "--skew-ms" => a.skew_ms = num(value()?)?,
            "--max-clock-skew-ms" => {
                a.max_clock_skew = Some(Duration::from_millis(num(value()?)?.max(0) as u64));
            }
            "--margin-us" => {
                a.margin = Some(Duration::from_micros(num(value()?)?.max(0) as u64));
            }
            "--backoff-max-ms" => {
                a.backoff_max = Some(Duration::from_millis(num(value()?)?.max(1) as u64));
            }
            "--generators" => a.generators = num(value()?)?.max(1) as u32,
            "--unsafe" => a.unsafe_mode = true,
            "--no-restart-guard" => a.options.restart_guard = false,
            // A mixed fleet: this worker does not share one TTL and skew
            // with the rest of its pool, so it cannot promise it.
            "--no-one-timing" => a.options.assume_one_timing = false,
            "--unsafe-keep-server-synchronous-commit" => {
                a.options.keep_server_synchronous_commit = true;
            }
            "--plant" => {
                for name in value()?.split(',') {
                    let p = Plant::from_name(name).ok_or_else(|| {
                        format!(
                            "--plant {name:?}: one of {}",
                            Plant::ALL.map(Plant::name).join(", ")
                        )
                    })?;
                    leasehold_core::plant::plant(p).map_err(|e| e.to_string())?;
                }
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.url.is_empty() || a.log.as_os_str().is_empty() {
        return Err(
            "usage: campaign-worker --url URL --log FILE [--pool NAME] [--slots N] \
                    [--ttl-ms T] [--skew-ms S] [--max-clock-skew-ms M] [--margin-us U] \
                    [--backoff-max-ms B] [--generators N] \
                    [--unsafe] [--no-restart-guard] [--no-one-timing] \
                    [--unsafe-keep-server-synchronous-commit] [--plant NAME[,NAME]]"
                .into(),
        );
    }
    Ok(a)
}

/// The layout every generator of this worker uses, and the ID format its
/// leases declare: the store records a pool's format with its first claim
/// and refuses a claim that declares another.
fn layout() -> Layout {
    Layout::default64()
}

/// One generator of either kind, with the skewed clock.
#[derive(Clone)]
enum Gen {
    Sortable(Sortable64<Skewed>),
    Counter(Counter64<Skewed>),
}

impl Gen {
    fn build(kind: Kind, gate: LeaseGate, skew_ms: i64) -> Result<Self, String> {
        let (layout, time) = (layout(), Skewed::new(skew_ms));
        match kind {
            Kind::Sortable => Sortable64::with_time(gate, layout, time).map(Gen::Sortable),
            Kind::Counter => Counter64::with_time(gate, layout, time).map(Gen::Counter),
        }
        .map_err(|e| e.to_string())
    }

    #[inline]
    fn next(&self) -> Result<u64, GenerateError> {
        match self {
            Gen::Sortable(g) => g.next().map(|n| n.0),
            Gen::Counter(g) => g.next().map(|n| n.0),
        }
    }
}

struct Shared {
    recorder: Mutex<Recorder>,
    stop: AtomicBool,
    ids: AtomicU64,
    refused: AtomicU64,
}

const FLUSH_EVERY: Duration = Duration::from_millis(50);

/// Generates until told to stop. `gate` is the gate the generator is bound to
/// (in unsafe mode a copy that never closes). `burst`: IDs per batch, and
/// whether to pause a millisecond after each (extra clones, to keep the log
/// small).
fn generate(kind: Kind, gate: LeaseGate, generator: Gen, shared: Arc<Shared>, burst: Option<u32>) {
    let batch = burst.unwrap_or(4096);
    let mut tracker = Tracker::new(kind);
    let mut runs = RunBuilder::new(kind);
    let mut pending: Vec<Record> = Vec::new();
    let mut last_flush = MonoTime::now();
    let (mut made, mut refused) = (0u64, 0u64);
    // One record per stretch of clock-behind refusals (they repeat on every
    // call until this host's clock passes the floor).
    let mut behind = false;
    let flush = |tracker: &Tracker, runs: &mut RunBuilder, pending: &mut Vec<Record>| {
        pending.extend(runs.finish());
        let mut rec = shared.recorder.lock().unwrap_or_else(|e| e.into_inner());
        // Holding periods first: a kill in mid-write leaves no recorded ID
        // outside the period recorded for it.
        let holds = tracker.hold().into_iter().chain(
            pending
                .iter()
                .filter(|r| matches!(r, Record::Hold { .. }))
                .copied(),
        );
        let mut ok = holds.map(|r| rec.push(&r)).all(|r| r.is_ok());
        for r in pending.iter().filter(|r| !matches!(r, Record::Hold { .. })) {
            ok &= rec.push(r).is_ok();
        }
        ok &= rec.flush().is_ok();
        pending.clear();
        if !ok {
            eprintln!("campaign-worker: cannot write the log");
            std::process::exit(3);
        }
    };
    while !shared.stop.load(Ordering::Relaxed) {
        let view = Snapshot::from(&gate.view());
        let t0 = MonoTime::now().as_nanos();
        let mut made_now = 0u32;
        runs.set_time(t0);
        if let Some(epoch) = tracker.before(view, t0, &mut pending) {
            let mut last_deadline = None;
            for _ in 0..batch {
                match generator.next() {
                    Ok(id) => {
                        behind = false;
                        // Keep the ID only if it surely belongs to this grant;
                        // it was made before the grant's deadline as read now.
                        let deadline = gate.deadline().as_nanos();
                        if gate.check(MonoTime::ZERO) != Ok(epoch) {
                            break;
                        }
                        last_deadline = Some(deadline);
                        pending.extend(runs.push(id));
                        made_now += 1;
                    }
                    Err(GenerateError::ClockBehind { behind: lag, .. }) => {
                        // The floor at work: this host's clock is behind
                        // what the slot's previous holders may have issued.
                        if !std::mem::replace(&mut behind, true) {
                            pending.push(Record::ClockBehind {
                                kind,
                                behind_ms: u64::try_from(lag.as_millis()).unwrap_or(u64::MAX),
                            });
                        }
                        refused += 1;
                        break;
                    }
                    Err(_) => {
                        refused += 1;
                        break;
                    }
                }
            }
            tracker.after(epoch, MonoTime::now().as_nanos(), last_deadline);
        }
        made += u64::from(made_now);
        if made_now == 0 || burst.is_some() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let now = MonoTime::now();
        if now.saturating_since(last_flush) >= FLUSH_EVERY {
            flush(&tracker, &mut runs, &mut pending);
            last_flush = now;
        }
    }
    pending.extend(tracker.finish());
    flush(&tracker, &mut runs, &mut pending);
    shared.ids.fetch_add(made, Ordering::Relaxed);
    shared.refused.fetch_add(refused, Ordering::Relaxed);
}

/// Unsafe mode: a gate that opens with every grant of `real` and never closes.
fn mirror(real: LeaseGate, shared: Arc<Shared>) -> LeaseGate {
    let copy = LeaseGate::new();
    let out = copy.clone();
    let mut seen = 0;
    std::thread::spawn(move || {
        while !shared.stop.load(Ordering::Relaxed) {
            let v = real.view();
            if v.open && v.epoch != seen {
                seen = v.epoch;
                copy.open(v.slot, v.fence, MonoTime::MAX);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    out
}

/// Every 100 ms while the gate shows a grant (its deadline may have passed:
/// a holder that was paused writes as soon as it runs again, before it looks
/// at the clock), a write through the store's fenced-write helper to the
/// resource of the slot. The helper connects when it can (the store may be
/// cut off or frozen) and again after a failure.
async fn fenced_writes(
    url: String,
    options: Options,
    gate: LeaseGate,
    pool: String,
    kind: Kind,
    shared: Arc<Shared>,
) {
    let mut writer: Option<FenceWriter> = None;
    while !shared.stop.load(Ordering::Relaxed) {
        if writer.is_none() {
            match FenceWriter::connect_with(&url, &options).await {
                Ok(Some(w)) => writer = Some(w),
                Ok(None) => return,
                Err(e) => {
                    eprintln!(
                        "campaign-worker: {}: fenced writes: {e}; retrying",
                        kind.name()
                    );
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            }
        }
        let v = gate.view();
        if v.open
            && let Some(w) = &writer
            && let Ok(accepted) = w.write(&pool, v.slot, v.fence.0).await
        {
            let r = Record::Fenced {
                kind,
                slot: v.slot,
                fence: v.fence.0,
                accepted,
                at_ns: MonoTime::now().as_nanos(),
            };
            let mut rec = shared.recorder.lock().unwrap_or_else(|e| e.into_inner());
            let _ = rec.push(&r);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The lease of `kind`'s pool, with this worker's settings. The manager
/// reads the same skewed wall clock as the generators, as a process on a
/// host whose clock is wrong does: its ceilings and the values agree.
fn lease_config(args: &Args, kind: Kind) -> Result<LeaseConfig, String> {
    let b = LeaseConfig::builder(format!("{}-{}", args.pool, kind.name()))
        .pool_size(args.slots)
        .ttl(args.ttl)
        .id_format(layout().id_format())
        .clock(AsClock(Skewed::new(args.skew_ms)))
        .acquire_timeout(Duration::from_secs(3600));
    let b = match args.max_clock_skew {
        Some(skew) => b.max_clock_skew(skew),
        None => b,
    };
    let b = match args.backoff_max {
        Some(most) => b
            .backoff_initial(most.min(Duration::from_millis(100)))
            .backoff_max(most),
        None => b,
    };
    match args.margin {
        Some(margin) => b.safety_margin(margin),
        None => b,
    }
    .build()
    .map_err(|e| e.to_string())
}

async fn run_kind(args: Arc<Args>, kind: Kind, shared: Arc<Shared>) -> Result<(), String> {
    let config = || lease_config(&args, kind);
    // The store may be frozen or unreachable when this worker starts.
    let manager = loop {
        if shared.stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        // Waiting for a slot ends when the worker is told to stop (a
        // cancelled start gives back what it acquired).
        let start = start_manager(&args.url, config()?, &args.options);
        tokio::pin!(start);
        let started = loop {
            tokio::select! {
                r = &mut start => break Some(r),
                () = tokio::time::sleep(Duration::from_millis(50)) => {
                    if shared.stop.load(Ordering::Relaxed) {
                        break None;
                    }
                }
            }
        };
        match started {
            None => return Ok(()),
            Some(Ok(m)) => break m,
            Some(Err(e)) => {
                eprintln!("campaign-worker: {}: {e}; retrying", kind.name());
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    let fences = FenceWriter::supported(&args.url).then(|| {
        tokio::spawn(fenced_writes(
            args.url.clone(),
            args.options,
            manager.gate(),
            format!("{}-{}", args.pool, kind.name()),
            kind,
            shared.clone(),
        ))
    });
    let gate = if args.unsafe_mode {
        mirror(manager.gate(), shared.clone())
    } else {
        manager.gate()
    };
    let first = Gen::build(kind, gate.clone(), args.skew_ms)?;
    let mut threads = Vec::new();
    for i in 1..args.generators {
        // One generation state per lease: a second generator must be refused.
        let extra = match Gen::build(kind, gate.clone(), args.skew_ms) {
            Err(_) => {
                let mut rec = shared.recorder.lock().unwrap_or_else(|e| e.into_inner());
                rec.push(&Record::SecondGeneratorRefused { kind })
                    .and_then(|()| rec.flush())
                    .map_err(|e| e.to_string())?;
                first.clone()
            }
            Ok(g) => {
                eprintln!("campaign-worker: generator {i} on one lease was NOT refused; using it");
                g
            }
        };
        let (gate, shared) = (gate.clone(), shared.clone());
        threads.push(std::thread::spawn(move || {
            generate(kind, gate, extra, shared, Some(256));
        }));
    }
    {
        let (gate, shared) = (gate.clone(), shared.clone());
        threads.push(std::thread::spawn(move || {
            generate(kind, gate, first, shared, None);
        }));
    }
    // Generation stops first, then the lease is released.
    let waited = tokio::task::spawn_blocking(move || {
        for t in threads {
            let _ = t.join();
        }
    });
    let _ = waited.await;
    if let Some(f) = fences {
        let _ = f.await;
    }
    manager.shutdown().await;
    Ok(())
}

async fn run(args: Args) -> Result<(), String> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    let shared = Arc::new(Shared {
        recorder: Mutex::new(Recorder::create(&args.log).map_err(|e| e.to_string())?),
        stop: AtomicBool::new(false),
        ids: AtomicU64::new(0),
        refused: AtomicU64::new(0),
    });
    let args = Arc::new(args);
    let tasks: Vec<_> = Kind::ALL
        .into_iter()
        .map(|k| tokio::spawn(run_kind(args.clone(), k, shared.clone())))
        .collect();
    // Stop on SIGTERM, or once the runner is gone (killed without the
    // chance to stop its workers): an orphan must not go on generating.
    let runner = std::os::unix::process::parent_id();
    let mut orphaned = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = orphaned.tick() => {
                if std::os::unix::process::parent_id() != runner {
                    eprintln!("campaign-worker {}: the runner is gone; stopping", std::process::id());
                    break;
                }
            }
        }
    }
    shared.stop.store(true, Ordering::Relaxed);
    let mut result = Ok(());
    for t in tasks {
        match t.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => result = Err(e),
            Err(e) => result = Err(e.to_string()),
        }
    }
    eprintln!(
        "campaign-worker {}: stopped; {} IDs, {} refused calls",
        std::process::id(),
        shared.ids.load(Ordering::Relaxed),
        shared.refused.load(Ordering::Relaxed)
    );
    result
}

/// A campaign worker's whole life, with its arguments (without the
/// program's name; see the module's docs): what the `campaign-worker`
/// program runs, and what [`crate::main`] runs for `PROGRAM worker …`.
pub fn run_worker(argv: impl IntoIterator<Item = String>) -> ExitCode {
    let args = match parse_args(argv) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("campaign-worker: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("campaign-worker: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("campaign-worker: {e}");
            ExitCode::FAILURE
        }
    }
}
