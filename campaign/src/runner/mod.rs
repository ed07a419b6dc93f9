//! The campaign runner, one phase at a time: [`plan`] provides the store,
//! [`start`] its fault proxies, the fault plan and more worker processes
//! than slots, [`fault_loop`] injects faults drawn from a printed seed,
//! [`collect`] stops the workers and reads back their logs, [`check`]
//! checks every recorded ID, holding period and fenced write, and
//! [`report`] prints a summary table and draws the timeline into
//! `target/campaign/<backend>-<seed>.svg`.

mod args;
mod choice;
mod collect;
mod crash;
mod fault_loop;
mod plan;
mod program;
mod report;
mod serving;
mod start;
mod verdict;
mod workers;

pub use args::{Args, parse_args};
pub use collect::{Collected, collect, dump};
pub use fault_loop::fault_loop;
pub use plan::{Plan, plan};
pub(crate) use program::workers_in_this_program;
pub use report::report;
pub use start::{Campaign, start};
pub use verdict::{Checked, check};

use std::process::ExitCode;

/// The runner's whole life, with its arguments (without the program's
/// name): `--dump FILE`, or a run's phases in turn. Exit status: 0 when the
/// run is clean (in `--unsafe` mode and the control runs: when they found
/// what they look for; a mixed fleet refused, or a run UNSAFE by design, is
/// reported and exits 0), 1 otherwise, 2 for a usage or setup error.
pub fn run_runner(argv: impl IntoIterator<Item = String>) -> ExitCode {
    let argv: Vec<String> = argv.into_iter().collect();
    if let [flag, file] = argv.as_slice()
        && flag == "--dump"
    {
        return dump(file);
    }
    let args = match parse_args(argv) {
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

/// The run's phases in order.
fn run(args: Args) -> Result<ExitCode, String> {
    let Some(plan) = plan(args)? else {
        // Nothing to run: a store that can forget refused a mixed fleet.
        return Ok(ExitCode::SUCCESS);
    };
    let mut campaign = start(plan)?;
    fault_loop(&mut campaign)?;
    let collected = collect(&mut campaign)?;
    let checked = check(&campaign, &collected);
    report(&campaign, &collected, &checked)
}

/// The machine's load average over 1, 5 and 15 minutes.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Nanoseconds as milliseconds, to a tenth.
fn ms(ns: i64) -> String {
    format!("{:.1} ms", ns as f64 / 1e6)
}
