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
//! seed whose clocks the margin covers violates or has an outage (a process
//! kept from generating where nothing excuses it), after printing the seed
//! and its shrunk trace, and draws that shrunk scenario as a timeline,
//! `target/sim/finding-<plants>-<seed>.svg` (`sim_picture.rs`, with the guide's
//! picture code), from the timeline the simulator writes for it
//! (`--timeline`), and prints its path.
//!
//! `cargo xtask sim --check` is the test command's part: 5,000 seeds of the
//! code as shipped (5 processes, 60 simulated seconds each), then the
//! simulator's own tests with the plants built in (each plant found within
//! a few seeds). Its builds go to `target/sim`, a directory of their own,
//! so that it runs beside the test binaries without waiting on their lock.

use crate::{Result, cargo, root, step};

/// The simulator's own target directory.
fn target() -> std::path::PathBuf {
    root().join("target/sim")
}

/// Runs the simulator with `args`, or its check (`--check`).
pub(crate) fn run(args: &[String]) -> Result {
    if args.iter().any(|a| a == "--check") {
        return check();
    }
    let planted = args.iter().any(|a| a == "--plant");
    let mut cmd = cargo();
    cmd.env("CARGO_TARGET_DIR", target()).args([
        "run",
        "--quiet",
        "--release",
        "--package",
        "leasehold-sim",
    ]);
    if planted {
        cmd.args(["--features", "planted-bugs"]);
    }
    // A finding's shrunk scenario is drawn from the timeline the simulator
    // writes for it; one left from an earlier run must not be drawn again.
    let timeline = target().join("finding.timeline");
    let _ = std::fs::remove_file(&timeline);
    cmd.arg("--").args(args).arg("--timeline").arg(&timeline);
    let ran = step("sim", cmd);
    if timeline.exists() {
        // A picture that cannot be drawn is reported; the run's verdict
        // stands either way.
        match crate::sim_picture::write(&timeline, &target()) {
            Ok(path) => println!("sim: the finding is drawn in {}", path.display()),
            Err(e) => eprintln!("sim: the finding cannot be drawn: {e}"),
        }
    }
    ran
}

/// 5,000 seeds of the shipped code, then the planted-bug tests.
fn check() -> Result {
    run(&["--seeds", "5000"].map(String::from))?;
    let mut tests = cargo();
    tests.env("CARGO_TARGET_DIR", target()).args([
        "test",
        "--package",
        "leasehold-sim",
        "--features",
        "planted-bugs",
    ]);
    step("the simulator's tests, every plant built in", tests)
}
