//! `cargo xtask sim [--seeds N] [--first SEED] [--plant NAME[,NAME]]
//! [--processes P] [--secs S] [--trace SEED] [--no-shrink]`: the
//! deterministic simulator (`sim/`, `leasehold-sim`), built with optimisation
//! and run over seeds.
//!
//! Without `--plant` it runs the lease code as shipped (the build without the
//! `planted-bugs` feature, in which every plant is a constant `false`); with
//! `--plant` it builds with the feature and switches the named plants on.
//! It prints a progress line every 10 s and at the end the seeds run,
//! seeds per second and simulated seconds per wall second; it fails when a
//! seed whose clocks the margin covers violates, after printing the seed and
//! its shrunk trace.

use crate::{Result, cargo, step};

/// Runs the simulator with `args`.
pub(crate) fn run(args: &[String]) -> Result {
    let planted = args.iter().any(|a| a == "--plant");
    let mut cmd = cargo();
    cmd.args(["run", "--quiet", "--release", "--package", "leasehold-sim"]);
    if planted {
        cmd.args(["--features", "planted-bugs"]);
    }
    cmd.arg("--").args(args);
    step("sim", cmd)
}
