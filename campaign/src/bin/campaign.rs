//! The campaign runner: provides a store, runs more worker processes than
//! slots, injects faults drawn from a printed seed, then checks every
//! recorded ID and holding period, prints a summary table and draws the
//! timeline into `target/campaign/<backend>-<seed>.svg`.
//! Each phase is a function of `leasehold_campaign::runner`; this `main`
//! parses the flags and calls them in turn.
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

use std::process::ExitCode;

fn main() -> ExitCode {
    leasehold_campaign::runner::run_runner(std::env::args().skip(1))
}
