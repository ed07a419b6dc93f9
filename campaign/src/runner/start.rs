//! The second phase: the fault proxies in front of the store, the seeded
//! fault plan, the fenced-write tables, and the first worker of each index.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use leasehold_conformance::programs;
use leasehold_conformance::proxy::FaultProxy;
use leasehold_core::MonoTime;
use tokio::runtime::Runtime;

use super::args::Args;
use super::plan::{Outline, Plan};
use super::serving::{Serving, Store};
use super::workers::Run;
use crate::plan::{Planned, Rng, StoreFaults};
use crate::record::Kind;
use crate::store::FenceWriter;

/// A run under way: its workers, its faults and its store.
///
/// Fields drop in order: the fence writer and its runtime, the workers and
/// their proxies, the proxies' runtime, and last the store (its servers).
pub struct Campaign {
    /// The fenced-write helper, where the store has one.
    pub(crate) fences: Option<FenceWriter>,
    /// The pools whose slots take fenced writes.
    pub(crate) fence_pools: Vec<String>,
    pub(crate) fence_rt: Runtime,
    pub(crate) run: Run,
    /// The seeded fault plan, and the next fault in it.
    pub(crate) faults: Vec<Planned>,
    pub(crate) next_fault: usize,
    /// A killed cluster member, and when it starts again.
    pub(crate) member_down: Option<(usize, Instant)>,
    /// When the workers started (BOOTTIME ns, and here).
    pub(crate) start_ns: u64,
    pub(crate) started: Instant,
    pub(crate) outline: Outline,
    /// Runs the fault proxies for as long as the run.
    pub(crate) _net_rt: Runtime,
    pub(crate) store: Store,
}

/// Starts the planned run: fault proxies, the fault plan, the fenced-write
/// tables and one worker per index.
pub fn start(plan: Plan) -> Result<Campaign, String> {
    let Plan {
        args,
        max_skew_ms,
        options,
        dir,
        exe,
        store,
        outline,
    } = plan;
    // Networked stores: one fault proxy per worker, run on a small runtime
    // of their own that lives as long as the run.
    let net_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("campaign-proxy")
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let proxies = proxies(&net_rt, &store, args.workers)?;
    let mut rng = Rng::new(args.seed);
    let faults = fault_plan(&mut rng, &args, outline.length, &store, !proxies.is_empty());
    refuse_heavy(&args, &store)?;
    let faketime = if args.drift_ppm == 0 {
        None
    } else {
        Some(programs::require("libfaketime").map_err(|e| format!("--clock-rate-ppm: {e}"))?)
    };
    let mut run = Run {
        url: store.url.clone(),
        cut_until: vec![None; proxies.len()],
        proxies,
        dir,
        exe,
        pool: format!("c{}", args.seed % 1_000_000_007),
        max_skew_ms,
        next_id: 0,
        rng,
        workers: Vec::new(),
        marks: Vec::new(),
        failovers: Vec::new(),
        counts: BTreeMap::new(),
        skews: Vec::new(),
        rates: Vec::new(),
        faketime,
        margin: args.margin.map(|_| outline.margin),
        timings: Vec::new(),
        options,
        crashes: Vec::new(),
        freeze_until: None,
        sizes: BTreeMap::new(),
        holding: BTreeSet::new(),
        args,
    };
    let (fence_rt, fence_pools, fences) = prepare_fences(&store, &run.pool, run.args.slots)?;
    fence_rt.block_on(crate::store::declare_new(
        &run.url,
        &run.options,
        &fence_pools,
        run.args.slots,
        run.args.ttl,
    ))?;
    let start_ns = MonoTime::now().as_nanos();
    let started = Instant::now();
    for i in 0..run.args.workers {
        let w = run.spawn(i)?;
        run.workers.push(w);
    }
    Ok(Campaign {
        fences,
        fence_pools,
        fence_rt,
        run,
        faults,
        next_fault: 0,
        member_down: None,
        start_ns,
        started,
        outline,
        _net_rt: net_rt,
        store,
    })
}

/// One set of fault proxies per worker index (one proxy per member of a
/// cluster), and the store's URL through them; none for a file.
fn proxies(
    net_rt: &Runtime,
    store: &Store,
    workers: usize,
) -> Result<Vec<(Vec<FaultProxy>, String)>, String> {
    let mut proxies = Vec::new();
    let upstreams = store.upstreams();
    if !upstreams.is_empty() {
        for _ in 0..workers {
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
    Ok(proxies)
}

/// The seeded fault plan, from the faults this store can take.
fn fault_plan(
    rng: &mut Rng,
    args: &Args,
    length: Duration,
    store: &Store,
    cut: bool,
) -> Vec<Planned> {
    crate::plan::plan(
        rng,
        length,
        args.ttl * 2,
        args.workers,
        args.ttl,
        StoreFaults {
            cut,
            freeze: store.can_freeze(),
            restart: store.can_restart(),
            member: matches!(store.serving, Serving::Cluster(_)),
            restart_heavy: args.restart_heavy,
            backend_crash: store.pg_processes,
            crash_heavy: args.crash_heavy,
            failover: store.can_fail_over(),
            wipe: store.can_wipe(),
            wipe_heavy: args.wipe_heavy,
        },
    )
}

/// `--restart-heavy`, `--wipe-heavy` and `--crash-heavy` need a store
/// that can take them.
fn refuse_heavy(args: &Args, store: &Store) -> Result<(), String> {
    if args.restart_heavy && !store.can_restart() {
        return Err(format!(
            "--restart-heavy: the {} store cannot be restarted by this process",
            args.backend
        ));
    }
    if args.wipe_heavy && !store.can_wipe() {
        return Err(format!(
            "--wipe-heavy: the {} store cannot be wiped by this process",
            store.describe
        ));
    }
    if args.crash_heavy && !store.pg_processes {
        return Err(format!(
            "--crash-heavy: only a PostgreSQL server this run starts has a backend to crash \
             without a restart ({} has none: MariaDB and Valkey/Redis are one process, where \
             a crash is a restart; use --restart-heavy)",
            store.describe
        ));
    }
    Ok(())
}

/// Fenced writes, where the store has a helper: its tables first. Returns
/// the runtime the fence logs are read on, the pools and the helper.
fn prepare_fences(
    store: &Store,
    pool: &str,
    slots: u32,
) -> Result<(Runtime, Vec<String>, Option<FenceWriter>), String> {
    let fence_pools: Vec<String> = Kind::ALL
        .iter()
        .map(|k| format!("{pool}-{}", k.name()))
        .collect();
    let fence_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let fences = fence_rt.block_on(async {
        match FenceWriter::connect(&store.url).await? {
            Some(w) => w.prepare(&fence_pools, slots).await.map(|()| Some(w)),
            None => Ok(None),
        }
    })?;
    Ok((fence_rt, fence_pools, fences))
}
