//! `leasehold-sim`: runs seeds of the simulator (`cargo xtask sim` builds and
//! runs it).
//!
//! ```text
//! leasehold-sim [--seeds N] [--first SEED] [--plant NAME[,NAME]] [--processes P]
//!               [--secs S] [--trace SEED] [--no-shrink]
//! ```
//!
//! Exits 1 when a covered seed violates, or has an outage (a process kept
//! from generating where nothing excuses it: a finding of liveness, not of
//! uniqueness), after printing its seed, its trace and, unless
//! `--no-shrink`, the shrunk scenario's trace step by step. A violation
//! comes first.

use std::process::ExitCode;
use std::time::Instant;

use leasehold_core::plant::{self, Plant};
use leasehold_sim::{Params, Scenario, run, run_seed, shrink, sweep};

fn main() -> ExitCode {
    match real_main() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("leasehold-sim: {e}");
            ExitCode::from(2)
        }
    }
}

fn real_main() -> Result<ExitCode, String> {
    let mut params = Params::default();
    let (mut seeds, mut first, mut trace, mut shrinking) = (10_000u64, 0u64, None, true);
    let mut all = false;
    let mut plants = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--seeds" => seeds = number(&value("--seeds")?)?,
            "--first" => first = number(&value("--first")?)?,
            "--processes" => {
                params.processes = u32::try_from(number(&value("--processes")?)?)
                    .map_err(|e| e.to_string())?
                    .max(2);
            }
            "--secs" => params.secs = number(&value("--secs")?)?.max(1),
            "--trace" => trace = Some(number(&value("--trace")?)?),
            "--no-shrink" => shrinking = false,
            "--all" => all = true,
            "--plant" => {
                for name in value("--plant")?.split(',') {
                    let p = Plant::from_name(name).ok_or_else(|| {
                        let all: Vec<_> = Plant::ALL.iter().map(|p| p.name()).collect();
                        format!("no plant {name:?}; there are {}", all.join(", "))
                    })?;
                    plants.push(p);
                }
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    for p in &plants {
        plant::plant(*p).map_err(|e| e.to_string())?;
    }
    let names: Vec<_> = plants.iter().map(|p| p.name()).collect();
    let planted = if names.is_empty() {
        "nothing planted".to_string()
    } else {
        format!("planted: {}", names.join(" + "))
    };
    if let Some(seed) = trace {
        let o = run_seed(seed, &params, true);
        print!("{}", o.trace);
        return Ok(
            if (o.violation.is_some() || o.outage.is_some()) && o.covered {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            },
        );
    }
    println!(
        "sim: {seeds} seeds from {first}, {} processes, {} simulated s each, {planted}",
        params.processes, params.secs
    );
    let started = Instant::now();
    let mut last = Instant::now();
    let mut first_found = None;
    let s = sweep(first, seeds, &params, all, |s| {
        if first_found.is_none() && (s.found.is_some() || s.outage.is_some()) {
            first_found = Some(started.elapsed().as_secs_f64());
        }
        if last.elapsed().as_secs() >= 10 {
            last = Instant::now();
            let wall = started.elapsed().as_secs_f64();
            println!(
                "sim: {}/{seeds} seeds, {:.0} seeds/s, {} covered seeds violated, {} beyond \
                 the margin's assumptions; {} covered seeds with an outage",
                s.run,
                s.run as f64 / wall,
                s.covered_violations,
                s.beyond_violations,
                s.covered_outages
            );
        }
    });
    let wall = started.elapsed().as_secs_f64();
    println!(
        "sim: {} seeds run in {wall:.2} s: {:.0} seeds/s, {:.0} simulated s per wall s, {} grants; \
         {} seeds beyond what the margin covers ({} of them violated: expected)",
        s.run,
        s.run as f64 / wall,
        s.sim_ns as f64 / 1e9 / wall,
        s.grants,
        s.beyond,
        s.beyond_violations
    );
    if all {
        println!(
            "sim: {} of {} covered seeds violated ({planted})",
            s.covered_violations,
            s.run - s.beyond
        );
        println!(
            "sim: {} covered seeds have a store-clock step beyond the margin that a confirmed \
             operation caught",
            s.steps_caught
        );
        println!(
            "sim: {} of {} covered seeds had an outage, {} beyond ({planted})",
            s.covered_outages,
            s.run - s.beyond,
            s.beyond_outages
        );
        println!(
            "sim: {} seeds in the Kubernetes mode, {} of them beyond what the margins cover ({} \
             of those violated); {} of the covered ones violated",
            s.kubernetes,
            s.kubernetes_beyond,
            s.kubernetes_beyond_violations,
            s.kubernetes_violations
        );
    }
    // A violation comes first; an outage is reported when there is none.
    let (seed, v, kind, after) = match (s.found, s.outage) {
        (Some((seed, v)), _) => (seed, v, "VIOLATION", s.first_after),
        (None, Some((seed, v))) => (seed, v, "OUTAGE", s.outage_after),
        (None, None) => {
            println!("sim: no violation and no outage in a covered seed ({planted})");
            return Ok(ExitCode::SUCCESS);
        }
    };
    println!(
        "sim: {kind} at seed {seed}, the first after {after} seeds, {:.3} s ({planted}): {}",
        first_found.unwrap_or(wall),
        v.what
    );
    let sc = Scenario::generate(seed, &params);
    if shrinking {
        let (small, steps) = shrink(&sc);
        println!("sim: shrunk in {} steps:", steps.len());
        for s in &steps {
            println!("  {s}");
        }
        println!("sim: the shrunk trace:");
        print!("{}", run(&small, true).trace);
    } else {
        print!("{}", run(&sc, true).trace);
    }
    println!("sim: rerun with --trace {seed} (and the same --processes, --secs, --plant)");
    Ok(ExitCode::FAILURE)
}

fn number(s: &str) -> Result<u64, String> {
    s.replace('_', "")
        .parse()
        .map_err(|e| format!("{s:?} is not a number: {e}"))
}
