//! Which program the workers are: `campaign-worker` beside the runner, or
//! the runner's own program ([`crate::main`]), and so which program replays
//! a run.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by [`crate::main`]: the workers are the runner's own program.
static WORKERS_IN_THIS_PROGRAM: AtomicBool = AtomicBool::new(false);

/// The workers this process starts are its own program, run with
/// `worker` first ([`crate::main`]): a program that added drivers to the
/// registry has them in its workers too.
pub(crate) fn workers_in_this_program() {
    WORKERS_IN_THIS_PROGRAM.store(true, Ordering::Relaxed);
}

/// The program a run is replayed with: `cargo xtask campaign` for the
/// workspace's, or the program itself where it is its own worker (a
/// program with drivers of its own, [`crate::main`]).
pub(crate) fn replay_program() -> String {
    let own = std::env::current_exe().ok().and_then(|exe| {
        let name = exe.file_name()?.to_string_lossy().into_owned();
        WORKERS_IN_THIS_PROGRAM
            .load(Ordering::Relaxed)
            .then_some(name)
    });
    own.unwrap_or_else(|| "cargo xtask campaign".to_owned())
}

/// The command that starts a worker of `exe` (arguments to follow).
pub(crate) fn worker_command(exe: &Path) -> Command {
    let mut cmd = Command::new(exe);
    if WORKERS_IN_THIS_PROGRAM.load(Ordering::Relaxed) {
        cmd.arg(crate::WORKER_ARG);
    }
    cmd
}

/// Whether the workers are the runner's own program.
pub(crate) fn in_this_program() -> bool {
    WORKERS_IN_THIS_PROGRAM.load(Ordering::Relaxed)
}
