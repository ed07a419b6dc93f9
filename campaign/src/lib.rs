//! The leasehold fault campaign: see `README.md`.
#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

pub mod availability;
pub mod check;
pub mod drift;
pub mod plan;
pub mod record;
pub mod runner;
pub mod store;
pub mod timeline;
pub mod worker;
mod worker_process;

pub use worker_process::run_worker;

use std::process::ExitCode;

/// The whole campaign as one program, for a program that adds drivers to
/// `leasehold`'s registry first (a backend crate of its own, with
/// `leasehold::register`): `PROGRAM worker ARGS…` is a worker
/// ([`run_worker`]); anything else is the runner
/// ([`runner::run_runner`]), whose workers are this same program. The
/// workspace's `campaign` and `campaign-worker` programs are the two halves.
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     // leasehold::register(&MY_DRIVER).unwrap();
///     leasehold_campaign::main()
/// }
/// ```
pub fn main() -> ExitCode {
    let mut argv = std::env::args().skip(1).peekable();
    if argv.next_if(|a| a == WORKER_ARG).is_some() {
        return run_worker(argv);
    }
    runner::workers_in_this_program();
    runner::run_runner(argv)
}

/// The first argument that makes [`main`]'s program a worker.
const WORKER_ARG: &str = "worker";

/// The program in the workspace's README, run as a doctest so the code a
/// user pastes after `cargo add leasehold` keeps compiling and working. It
/// lives in this unpublished crate because the README is outside every
/// published package.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct WorkspaceReadme;
