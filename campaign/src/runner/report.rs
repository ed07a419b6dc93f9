//! The last phase: the timeline drawn, the summary table printed, who made
//! any duplicates, the verdict, and the logs kept or removed.

use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use leasehold_conformance::programs;

use super::args::Topology;
use super::args::replay_command;
use super::collect::Collected;
use super::crash::AIM_AFTER_CLAIM;
use super::ms;
use super::start::Campaign;
use super::verdict::{Checked, Verdict};
use super::workers::Run;
use crate::availability::{
    FailoverCost, Gap, Goals, failover_costs, judge, longest_gap_over_failovers, longest_gaps,
};
use crate::check::{Report, duplicate_sources};
use crate::record::Record;
use crate::timeline::svg;
use leasehold_conformance::topology::cluster::ClusterTuning;

/// Draws the run's timeline, prints its table, who made any duplicates and
/// its verdict; removes the logs of a clean run (unless `--keep`). The exit
/// code: success when the run passed or was not judged.
pub fn report(c: &Campaign, got: &Collected, checked: &Checked) -> Result<ExitCode, String> {
    let (run, report, mode) = (&c.run, &checked.report, c.outline.mode.as_str());
    let title = format!(
        "{} {mode} seed {}: {} IDs, {} duplicates, {} overlaps, {} faults",
        run.args.backend,
        run.args.seed,
        report.total_ids(),
        report.duplicates,
        report.overlaps.len(),
        run.marks.len()
    );
    let picture = c.outline.out.join(format!("{}.svg", c.outline.label));
    std::fs::write(
        &picture,
        svg(
            &title,
            &report.periods,
            &run.marks,
            run.args.slots,
            c.start_ns,
            got.end_ns,
        ),
    )
    .map_err(|e| format!("{}: {e}", picture.display()))?;
    let png = png_of(&picture);
    print_table(
        run,
        report,
        &Summary {
            mode,
            start_ns: c.start_ns,
            margin: c.outline.margin,
            wall: got.wall,
            refused: checked.refused,
            load: format!("{} → {}", c.outline.load_before, got.load_after),
            picture: &picture,
            png: &png,
            store: &c.store.describe,
            end_ns: got.end_ns,
        },
        &got.logs,
        c.fences.is_some(),
    );
    print_duplicate_sources(run, got);
    let must_fail = c.run.args.must_fail();
    match checked.verdict {
        Verdict::Passed => {}
        Verdict::NotJudged => println!(
            "UNSAFE by design: {} duplicates, {} overlapping holding periods (not judged: \
             the run's configuration risks them)",
            report.duplicates,
            report.overlaps.len()
        ),
        Verdict::Failed => {
            if c.run.args.planted() {
                println!(
                    "FAILED: the {mode} run found nothing: the campaign did not catch the planted bug"
                );
            } else if c.run.args.wipe_control() {
                println!(
                    "FAILED: the {mode} run found no duplicate and no overlap: the wipes did \
                     not show what the guard prevents"
                );
            } else if must_fail {
                println!(
                    "FAILED: the {mode} run found no duplicate: the check did not show it can fail"
                );
            } else {
                println!(
                    "FAILED: see the table; evidence kept in {}",
                    run.dir.display()
                );
                for (a, b, by) in report.overlaps.iter().take(10) {
                    println!("  overlap {}: {a:?} / {b:?}", ms(*by as i64));
                }
            }
            return Ok(ExitCode::FAILURE);
        }
    }
    if must_fail || run.args.keep {
        println!("the logs are kept in {}", run.dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&run.dir);
    }
    Ok(ExitCode::SUCCESS)
}

/// Who made the duplicates (the first ten pairs), with their clocks.
fn print_duplicate_sources(run: &Run, got: &Collected) {
    for ((kind, slot, a, b), n) in duplicate_sources(&got.logs).iter().take(10) {
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
    /// When the last worker stopped (BOOTTIME ns).
    end_ns: u64,
}

/// Prints the table, and writes it beside the timeline as
/// `<label>.md`, the run's summary file.
fn print_table(run: &Run, r: &Report, s: &Summary<'_>, logs: &[(u32, Vec<Record>)], fences: bool) {
    let costs = &failover_costs(
        &run.failovers,
        &r.periods,
        &run.marks,
        run.args.ttl.as_nanos() as u64,
        s.end_ns,
    );
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
        ("faults", faults_cell(run)),
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
        ("fenced writes", fences_cell(r, fences)),
        (
            "workers",
            format!(
                "{} processes started, {} at a time",
                run.next_id,
                run.workers.len()
            ),
        ),
        ("backend crashes (PostgreSQL, in place)", crashes_cell(run)),
        (
            "grant pause after a failover (new primary to next grant)",
            failover_pause_cell(costs),
        ),
        (
            "leases lost by holders the new primary knew (their claim on it)",
            lost_known_cell(costs),
        ),
        (
            "longest time without IDs, per process (between two of its IDs)",
            gaps_cell(run, logs, s.start_ns),
        ),
        ("failover goals", goals_cell(run, costs)),
        ("worker timings (TTL / max_clock_skew)", timings_cell(run)),
        ("worker clock rates", rates_cell(run)),
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
    let mut table = format!("| {} | |\n|---|---|\n", run.args.backend);
    for (k, v) in rows {
        table.push_str(&format!("| {k} | {v} |\n"));
    }
    println!("\n{table}");
    let summary = s.picture.with_extension("md");
    match std::fs::write(&summary, &table) {
        Ok(()) => println!("summary: {}", summary.display()),
        Err(e) => println!("no summary file: {}: {e}", summary.display()),
    }
}

/// The faults injected, by kind, and those every run has.
fn faults_cell(run: &Run) -> String {
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
    faults.join(", ")
}

/// The fenced writes, where the store has a helper.
fn fences_cell(r: &Report, fences: bool) -> String {
    if fences {
        format!(
            "{} accepted, {} refused as stale, {} in the store's logs, {} accepted below an accepted fence",
            r.fenced_accepted, r.fenced_refused, r.fenced_logged, r.fence_violations
        )
    } else {
        "none (no fenced-write helper for this store yet)".into()
    }
}

/// The backend crashes (PostgreSQL) and what they did.
/// For each failover, the time from the new primary taking over to the
/// next grant of any slot: what the promotion guard holds grants back for.
fn failover_pause_cell(costs: &[FailoverCost]) -> String {
    let mut pauses: Vec<i64> = costs
        .iter()
        .filter_map(|c| c.pause_ns)
        .map(|p| p as i64)
        .collect();
    if pauses.is_empty() {
        return "none".into();
    }
    let each: Vec<String> = costs
        .iter()
        .map(|c| {
            c.pause_ns
                .map_or("none".into(), |p| format!("{:.1}", p as f64 / 1e9))
        })
        .collect();
    pauses.sort_unstable();
    format!(
        "{} failovers: median {}, longest {} (each, s: {})",
        pauses.len(),
        ms(pauses[pauses.len() / 2]),
        ms(pauses[pauses.len() - 1]),
        each.join(", ")
    )
}

/// Per failover, the holders whose claim the new primary had and who
/// made no more IDs under that grant after it.
fn lost_known_cell(costs: &[FailoverCost]) -> String {
    if costs.is_empty() {
        return "none (no failover)".into();
    }
    let lost: usize = costs.iter().map(|c| c.lost_known.len()).sum();
    let excused: u32 = costs.iter().map(|c| c.excused).sum();
    let per: Vec<String> = costs
        .iter()
        .map(|c| c.lost_known.len().to_string())
        .collect();
    let who: Vec<String> = costs
        .iter()
        .flat_map(|c| c.lost_known.iter())
        .take(12)
        .map(|l| format!("w{} {} slot {}", l.worker, l.kind.name(), l.slot))
        .collect();
    format!(
        "{lost} in {} failovers (per failover: {}){}; {excused} more whose worker or store \
         had another fault then, not counted",
        costs.len(),
        per.join(", "),
        if who.is_empty() {
            String::new()
        } else {
            format!(": {}", who.join(", "))
        }
    )
}

/// Each process's longest time between two of its IDs; the longest over
/// the run and the longest that overlaps a failover.
fn gaps_cell(run: &Run, logs: &[(u32, Vec<Record>)], start_ns: u64) -> String {
    let secs = |ns: u64| format!("{:.2} s", ns as f64 / 1e9);
    let at = |ns: u64| format!("{:.1} s", ns.saturating_sub(start_ns) as f64 / 1e9);
    let mut gaps = longest_gaps(logs);
    if gaps.is_empty() {
        return "none".into();
    }
    gaps.sort_by_key(|g| g.worker);
    let longest = gaps.iter().max_by_key(|g| g.len_ns()).copied();
    let over = longest_gap_over_failovers(logs, &run.failovers);
    let describe = |g: &Gap| {
        format!(
            "{} (w{} {}, {}–{})",
            secs(g.len_ns()),
            g.worker,
            g.kind.name(),
            at(g.from_ns),
            at(g.to_ns)
        )
    };
    format!(
        "longest {}; longest over a failover {}; per process: {}",
        longest.as_ref().map_or("none".into(), describe),
        over.as_ref().map_or("none".into(), describe),
        gaps.iter()
            .map(|g| format!("w{} {}", g.worker, secs(g.len_ns())))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// The goals of the run's topology, each met or missed.
fn goals_cell(run: &Run, costs: &[FailoverCost]) -> String {
    const S: u64 = 1_000_000_000;
    let span = (run.args.ttl + Duration::from_millis(2 * run.max_skew_ms.unsigned_abs())).as_nanos()
        as u64;
    let goals = match run.args.topology {
        Topology::ReplicatedAsync | Topology::Sentinel => Goals {
            pause_median_ns: Some(span + S),
            pause_longest_ns: Some(span + 5 * S),
            no_known_holder_lost: false,
        },
        Topology::ReplicatedSync => Goals {
            pause_median_ns: Some(span + S),
            pause_longest_ns: Some(span + 5 * S),
            no_known_holder_lost: true,
        },
        Topology::Cluster => {
            let node = ClusterTuning::default().node_timeout.as_nanos() as u64;
            Goals {
                pause_median_ns: Some(span + node + 2 * S),
                pause_longest_ns: Some(span + node + 2 * S),
                no_known_holder_lost: false,
            }
        }
        Topology::Etcd3 | Topology::Etcd5 => Goals {
            pause_median_ns: None,
            pause_longest_ns: None,
            no_known_holder_lost: true,
        },
        Topology::Single => return "none (no failovers)".into(),
    };
    if costs.is_empty() {
        return "not judged: no failover".into();
    }
    judge(&goals, costs)
        .into_iter()
        .map(|(what, met)| format!("{what}: {}", if met { "met" } else { "**MISSED**" }))
        .collect::<Vec<_>>()
        .join("; ")
}

fn crashes_cell(run: &Run) -> String {
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
    }
}

/// The workers' TTLs and `max_clock_skew`s: one for all, or per start.
fn timings_cell(run: &Run) -> String {
    if run.timings.is_empty() {
        format!("one for all: {:?} / {} ms", run.args.ttl, run.max_skew_ms)
    } else {
        run.timings
            .iter()
            .enumerate()
            .map(|(i, (t, k))| format!("w{} {t:?}/{}ms", i + 1, k.as_millis()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The workers' clock rates: exact, or per start.
fn rates_cell(run: &Run) -> String {
    if run.rates.iter().all(|d| d.rate.is_exact()) {
        "exact".into()
    } else {
        run.rates
            .iter()
            .enumerate()
            .map(|(i, d)| format!("w{} {}", i + 1, d.rate))
            .collect::<Vec<_>>()
            .join(", ")
    }
}
