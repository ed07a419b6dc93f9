//! The campaign runner: provides a store, runs more worker processes than
//! slots, injects faults drawn from a printed seed, then checks every
//! recorded ID and holding period, prints a summary table and draws the
//! timeline into `target/campaign/<backend>-<seed>.svg`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use leasehold_conformance::programs;
use leasehold_conformance::proxy::{Fault as Net, FaultProxy};
use leasehold_core::{LeaseConfig, MonoTime};

use crate::check::{check, duplicate_sources};
use crate::plan::{Fault, Rng, StoreFaults, plan};
use crate::record::{Kind, Record};
use crate::store::{FenceWriter, Options, probe};
use crate::timeline::svg;

mod args;
mod collect;
mod report;
mod serving;
mod workers;

pub use args::{Args, parse_args};
use args::{Margin, plant_names};
use collect::{read_logs, refused_calls};
use report::{Summary, png_of, print_table};
use serving::{Serving, provide, signal};
use workers::{Run, State};

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

pub(crate) fn ms(ns: i64) -> String {
    format!("{:.1} ms", ns as f64 / 1e6)
}

/// Runs the campaign `args` asks for; the exit code says whether it passed.
pub fn run(args: Args) -> Result<ExitCode, String> {
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
