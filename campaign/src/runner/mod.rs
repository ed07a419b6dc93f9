//! The campaign runner, one phase at a time: [`plan`] provides the store,
//! [`start`] its fault proxies, the fault plan and more worker processes
//! than slots, [`fault_loop`] injects faults drawn from a printed seed,
//! [`collect`] stops the workers and reads back their logs, [`check`]
//! checks every recorded ID, holding period and fenced write, and
//! [`report`] prints a summary table and draws the timeline into
//! `target/campaign/<backend>-<seed>.svg`.

mod args;
mod collect;
mod crash;
mod fault_loop;
mod plan;
mod report;
mod serving;
mod start;
mod verdict;
mod workers;

pub use args::{Args, parse_args};
pub use collect::{Collected, collect, dump};
pub use fault_loop::fault_loop;
pub use plan::{Plan, plan};
pub use report::report;
pub use start::{Campaign, start};
pub use verdict::{Checked, check};

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
