//! `leasehold-sim`: runs seeds of the simulator (`cargo xtask sim` builds and
//! runs it).
//!
//! ```text
//! leasehold-sim [--seeds N] [--first SEED] [--plant NAME[,NAME]] [--beyond]
//!               [--processes P] [--secs S] [--trace SEED] [--no-shrink] [--all]
//!               [--verdicts] [--timeline FILE]
//! ```
//!
//! Exits 1 when a covered seed violates, or has an outage (a process kept
//! from generating where nothing excuses it: a finding of liveness, not of
//! uniqueness), after printing its seed, its trace and, unless
//! `--no-shrink`, the shrunk scenario's trace step by step. A violation
//! comes first. With `--timeline FILE` it also writes the timeline of the
//! scenario it printed last (the shrunk one, or the seed's own with
//! `--no-shrink` or beyond the assumptions) to FILE, in the line-based
//! format of `timeline.rs` (per process its windows, the store's holds per
//! slot, the faults, the finding's instant and parties), from which
//! `cargo xtask sim` draws the finding; nothing of it runs in the sweep.
//!
//! `--beyond` (only with `--plant`) also judges the seeds beyond the
//! assumptions, differentially: one that violates with the plant is run
//! again as shipped, in a child process of this binary without `--plant`
//! (`--verdicts`: a plant is never unset in a process), and is a finding
//! when it holds there: `VIOLATION BEYOND THE ASSUMPTIONS at seed N, which
//! holds as shipped` (exit 1; a covered violation or outage comes first),
//! with the planted trace and the shipped verdict. Such a finding is not
//! shrunk: a smaller scenario would have to hold as shipped too, and the
//! shrinker runs scenarios in this process, which cannot run them as
//! shipped. Without `--plant` both runs would be the code as shipped, and
//! `--beyond` is refused. With `--all` the sweep goes on, runs every seed
//! beyond the assumptions as shipped, and counts the seeds that violate
//! only with the plant, in both, and only as shipped: beyond the
//! assumptions any change of schedule moves violations from seed to seed,
//! so a plant's findings there mean something only against the last count.
//!
//! A finding is explained by where its two traces first differ (the child
//! runs the seed again with its trace): "sim: the traces first differ at
//! T (line L): as shipped … ; planted …", and whether that is the
//! plant's own branch acting on a lease the violation then involves
//! (`leasehold_sim::caused_by`): `CAUSED by the plant`, or `not shown
//! caused` and why. With `--all` the count of findings says how many are
//! so caused, and the first of them is explained as above; `no-margin`,
//! whose branch acts on every claim's ceiling before any lease exists, is
//! not judged so.
//!
//! `--verdicts` reads seeds from its input, one a line, runs each (quietly)
//! and prints one line each, `verdict: seed N covered BOOL violation
//! none|WHAT`; for a line `trace N` it prints `trace: seed N lines L` and
//! the seed's L lines of trace.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};
use std::time::Instant;

use leasehold_core::plant::{self, Plant};
use leasehold_sim::{
    Difference, Outcome, Params, Scenario, branch_at, caused_by, first_difference, judged, run,
    run_seed, shrink, sweep_judged, timeline,
};

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
    let (mut all, mut beyond, mut verdicts) = (false, false, false);
    let mut plants = Vec::new();
    let mut timeline_to = None;
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
            "--beyond" => beyond = true,
            "--verdicts" => verdicts = true,
            "--timeline" => timeline_to = Some(value("--timeline")?),
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
    if beyond && plants.is_empty() {
        return Err(
            "--beyond needs --plant: it compares a seed run with the plant against the \
             same seed as shipped, and without a plant both are the code as shipped"
                .to_string(),
        );
    }
    if verdicts {
        if !plants.is_empty() {
            return Err("--verdicts runs the code as shipped: no --plant".to_string());
        }
        let mut out = std::io::stdout().lock();
        for line in std::io::stdin().lock().lines() {
            let line = line.map_err(|e| e.to_string())?;
            // `trace N`: the seed's trace as shipped, after a line that
            // says how many lines it has.
            if let Some(seed) = line.trim().strip_prefix("trace ") {
                let o = run_seed(number(seed)?, &params, true);
                let n = o.trace.lines().count();
                write!(out, "trace: seed {} lines {n}\n{}", o.seed, o.trace)
                    .and_then(|()| out.flush())
                    .map_err(|e| e.to_string())?;
                continue;
            }
            let o = run_seed(number(line.trim())?, &params, false);
            writeln!(out, "{}", verdict_line(&o))
                .and_then(|()| out.flush())
                .map_err(|e| e.to_string())?;
        }
        return Ok(ExitCode::SUCCESS);
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
    // With `--beyond`, a seed beyond the assumptions that violates with the
    // plant (with `--all`, every such seed, for the counts) is run as
    // shipped in a child process; the verdicts of violating seeds are kept
    // for the report.
    let mut child = None;
    let mut shipped = Vec::new();
    // Each finding (violates with the plant, holds as shipped): where its
    // traces first differ, and whether the plant's branch acting there
    // caused it (`caused_by`).
    let mut differences: Vec<(u64, Option<Difference>, bool)> = Vec::new();
    let mut first_caused = None;
    let mut failed = None;
    let judge = |o: &Outcome| {
        if !beyond || failed.is_some() || (o.violation.is_none() && !all) {
            return None;
        }
        let verdict = match &mut child {
            Some(c) => Ok(c),
            None => Shipped::start(&params).map(|c| child.insert(c)),
        }
        .and_then(|c| {
            let line = c.verdict(o.seed)?;
            let difference = match &o.violation {
                Some(v) if line.ends_with(" violation none") => {
                    let theirs = c.trace(o.seed)?;
                    let d = first_difference(&theirs, &run_seed(o.seed, &params, true).trace);
                    let caused = d.as_ref().is_some_and(|d| caused_by(&plants, d, v));
                    Some((d, caused))
                }
                _ => None,
            };
            Ok((line, difference))
        });
        match verdict {
            Ok((line, difference)) => {
                let violates = !line.ends_with(" violation none");
                if o.violation.is_some() {
                    shipped.push((o.seed, line));
                }
                if let Some((d, caused)) = difference {
                    if caused && first_caused.is_none() {
                        first_caused = Some((o.seed, started.elapsed().as_secs_f64()));
                    }
                    differences.push((o.seed, d, caused));
                }
                Some(violates)
            }
            Err(e) => {
                failed = Some(e);
                None
            }
        }
    };
    let s = sweep_judged(first, seeds, &params, all, judge, |s| {
        if first_found.is_none()
            && (s.found.is_some() || s.outage.is_some() || s.beyond_found.is_some())
        {
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
    if let Some(c) = child {
        c.finish()?;
    }
    if let Some(e) = failed {
        return Err(format!("running a seed as shipped: {e}"));
    }
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
        if beyond {
            let caused = if judged(&plants) {
                let n = differences.iter().filter(|(_, _, c)| *c).count();
                format!("{n} of them caused by the plant's branch at the first difference")
            } else {
                "not judged by cause (the plant's branch names no lease)".to_string()
            };
            println!(
                "sim: of {} seeds beyond the assumptions, {} violate ({planted}) and hold as \
                 shipped, {caused}; {} violate in both, {} hold ({planted}) and violate as \
                 shipped",
                s.beyond, s.beyond_findings, s.beyond_both, s.beyond_shipped_only
            );
            if judged(&plants) {
                match first_caused {
                    Some((seed, at)) => {
                        println!(
                            "sim: the first caused by the plant: seed {seed}, after {} seeds, \
                             {at:.3} s",
                            seed - first + 1
                        );
                        if let Some((_, d, _)) = differences.iter().find(|(n, _, _)| *n == seed) {
                            report_difference(&plants, d.as_ref(), true);
                        }
                    }
                    None => println!("sim: none caused by the plant's branch"),
                }
            }
        }
    }
    // A violation comes first; an outage is reported when there is none.
    let (seed, v, kind, after) = match (s.found, s.outage) {
        (Some((seed, v)), _) => (seed, v, "VIOLATION", s.first_after),
        (None, Some((seed, v))) => (seed, v, "OUTAGE", s.outage_after),
        (None, None) => {
            println!("sim: no violation and no outage in a covered seed ({planted})");
            let Some((seed, v)) = s.beyond_found else {
                if beyond {
                    println!(
                        "sim: no seed beyond the assumptions violates ({planted}) and holds \
                         as shipped"
                    );
                }
                return Ok(ExitCode::SUCCESS);
            };
            println!(
                "sim: VIOLATION BEYOND THE ASSUMPTIONS at seed {seed}, which holds as shipped, \
                 the first after {} seeds, {:.3} s ({planted}): {}",
                s.beyond_after,
                first_found.unwrap_or(wall),
                v.what
            );
            print!("{}", run_seed(seed, &params, true).trace);
            write_timeline(
                timeline_to.as_deref(),
                &Scenario::generate(seed, &params),
                &names,
            )?;
            if let Some((_, line)) = shipped.iter().find(|(n, _)| *n == seed) {
                println!("sim: as shipped, {line}");
            }
            if let Some((_, d, caused)) = differences.iter().find(|(n, _, _)| *n == seed) {
                report_difference(&plants, d.as_ref(), *caused);
            }
            println!(
                "sim: not shrunk: a smaller scenario would have to hold as shipped too, which \
                 only a process without the plant can run"
            );
            println!(
                "sim: rerun with --trace {seed} with and without --plant (and the same \
                 --processes, --secs)"
            );
            return Ok(ExitCode::FAILURE);
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
        write_timeline(timeline_to.as_deref(), &small, &names)?;
    } else {
        print!("{}", run(&sc, true).trace);
        write_timeline(timeline_to.as_deref(), &sc, &names)?;
    }
    println!("sim: rerun with --trace {seed} (and the same --processes, --secs, --plant)");
    Ok(ExitCode::FAILURE)
}

/// Writes the timeline of `sc` to `path`, when one is asked for.
fn write_timeline(path: Option<&str>, sc: &Scenario, plants: &[&str]) -> Result<(), String> {
    let Some(path) = path else {
        return Ok(());
    };
    std::fs::write(path, timeline(sc, plants)).map_err(|e| format!("cannot write {path}: {e}"))?;
    println!("sim: the timeline of seed {} is in {path}", sc.seed);
    Ok(())
}

/// Where a finding's traces first differ, and whether that is the plant's
/// branch acting on a process its violation involves.
fn report_difference(plants: &[Plant], d: Option<&Difference>, caused: bool) {
    let Some(d) = d else {
        println!("sim: the traces do not differ (a violation of the checker's own?)");
        return;
    };
    println!(
        "sim: the traces first differ at {} (line {}): as shipped `{}`; planted `{}`",
        d.at(),
        d.line,
        d.shipped.trim(),
        d.planted.trim()
    );
    if !judged(plants) {
        println!(
            "sim: not judged: the plant's branch cannot be told from a lease at the first \
             difference"
        );
        return;
    }
    match branch_at(plants, d) {
        Some(l) if caused => println!(
            "sim: CAUSED by the plant: its branch acts there on p{}'s lease of slot {} fence {}, \
             and the violation involves that lease",
            l.process, l.slot, l.fence
        ),
        Some(l) => println!(
            "sim: not shown caused by the plant: its branch acts there on p{}'s lease of slot {} \
             fence {}, but the violation does not involve that lease",
            l.process, l.slot, l.fence
        ),
        None => println!(
            "sim: not shown caused by the plant: the first difference is not its branch acting"
        ),
    }
}

/// One line that says how a seed went: whether covered, and its violation.
fn verdict_line(o: &Outcome) -> String {
    format!(
        "verdict: seed {} covered {} violation {}",
        o.seed,
        o.covered,
        o.violation.as_ref().map_or("none", |v| v.what.as_str())
    )
}

/// A child process of this binary without a plant, running seeds as
/// shipped (`--verdicts`) for as long as the sweep goes.
struct Shipped {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Shipped {
    fn start(params: &Params) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut child = Command::new(exe)
            .args([
                "--verdicts",
                "--processes",
                &params.processes.to_string(),
                "--secs",
                &params.secs.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        let input = child.stdin.take().ok_or("no input to the child")?;
        let output = BufReader::new(child.stdout.take().ok_or("no output from the child")?);
        Ok(Self {
            child,
            input,
            output,
        })
    }

    /// Sends the child one request line and reads the first line of its
    /// answer.
    fn ask(&mut self, request: &str) -> Result<String, String> {
        writeln!(self.input, "{request}")
            .and_then(|()| self.input.flush())
            .map_err(|e| e.to_string())?;
        let mut line = String::new();
        self.output
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        Ok(line)
    }

    /// The verdict line of `seed` as shipped.
    fn verdict(&mut self, seed: u64) -> Result<String, String> {
        let line = self.ask(&seed.to_string())?;
        let line = line.trim_end();
        if !line.starts_with(&format!("verdict: seed {seed} ")) {
            return Err(format!("seed {seed}: no verdict, but {line:?}"));
        }
        Ok(line.to_string())
    }

    /// The trace of `seed` as shipped.
    fn trace(&mut self, seed: u64) -> Result<String, String> {
        let head = self.ask(&format!("trace {seed}"))?;
        let n = head
            .trim_end()
            .strip_prefix(&format!("trace: seed {seed} lines "))
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| format!("seed {seed}: no trace, but {head:?}"))?;
        let mut trace = String::new();
        for _ in 0..n {
            let read = self
                .output
                .read_line(&mut trace)
                .map_err(|e| e.to_string())?;
            if read == 0 {
                return Err(format!("seed {seed}: its trace as shipped ends early"));
            }
        }
        Ok(trace)
    }

    /// Ends the child: its input closed, it exits.
    fn finish(self) -> Result<(), String> {
        let Self {
            mut child, input, ..
        } = self;
        drop(input);
        let status = child.wait().map_err(|e| e.to_string())?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("the child running seeds as shipped: {status}"))
        }
    }
}

fn number(s: &str) -> Result<u64, String> {
    s.replace('_', "")
        .parse()
        .map_err(|e| format!("{s:?} is not a number: {e}"))
}
