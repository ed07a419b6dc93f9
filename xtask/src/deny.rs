//! The supply-chain check of `cargo xtask test`: cargo-deny, installed from
//! crates.io into `target/tools` at a pinned version (once; later runs reuse
//! it), checks the dependency tree against `deny.toml`: the licences allowed,
//! crates.io as the only source, duplicate versions listed. The advisory
//! check needs the RustSec database, which cargo-deny fetches with git from
//! GitHub: where it cannot be fetched the step says so in one line and the
//! run goes on (the other checks need no network beyond crates.io).

use std::path::{Path, PathBuf};
use std::process::Command;

use leasehold_conformance::programs;

use crate::{Result, cargo, root, step};

/// The cargo-deny release the checks run with.
const CARGO_DENY_VERSION: &str = "0.20.2";

/// Where cargo-deny fetches the advisory database from (`deny.toml`).
const ADVISORY_DB: &str = "github.com/rustsec/advisory-db";

/// `cargo deny check licenses bans sources`, then the advisories where their
/// database can be fetched (whatever the first check found, as every step of
/// the test command runs).
pub(crate) fn run() -> Result {
    let deny = install()?;
    let mut check = checked(&deny);
    check.args(["check", "licenses", "bans", "sources"]);
    let checked = step("cargo deny check licenses bans sources", check);
    let advised = advisories(&deny);
    match (checked, advised) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(e), Ok(())) | (Ok(()), Err(e)) => Err(e),
        (Err(a), Err(b)) => Err(format!("{a}; {b}")),
    }
}

/// A cargo-deny command on the workspace, with `deny.toml`, the lock file
/// as it is.
fn checked(deny: &Path) -> Command {
    let mut c = Command::new(deny);
    c.current_dir(root())
        .arg("--locked")
        .arg("--manifest-path")
        .arg(root().join("Cargo.toml"))
        .arg("--config")
        .arg(root().join("deny.toml"));
    c
}

/// Fetches the advisory database, then checks against it; when the fetch
/// fails, says so in one line and does not fail the run (an unreachable
/// GitHub says nothing about the dependencies).
fn advisories(deny: &Path) -> Result {
    eprintln!("\n==> cargo deny check advisories");
    // cargo-deny runs git itself; the program table names it, so that the
    // test command installs it.
    let git = programs::require("git")?;
    let mut fetch = checked(deny);
    if let Some(path) = with_dir_of(&git) {
        fetch.env("PATH", path);
    }
    let fetched = fetch
        .args(["fetch", "db"])
        .output()
        .map_err(|e| format!("cargo deny fetch db: cannot run: {e}"))?;
    if !fetched.status.success() {
        let why = String::from_utf8_lossy(&fetched.stderr);
        let why = why
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("no reason given");
        eprintln!(
            "advisories: not checked: the advisory database ({ADVISORY_DB}) cannot be reached \
             from this machine ({why})"
        );
        return Ok(());
    }
    // Against the database just fetched (`--offline`: no second fetch).
    let mut check = checked(deny);
    check.args(["--offline", "check", "advisories"]);
    step("cargo deny check advisories", check)
}

/// `PATH` with the directory of `program` first, so that a program that
/// runs it by name finds the one the table found (`None`: `PATH` as it is).
fn with_dir_of(program: &Path) -> Option<std::ffi::OsString> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = program
        .parent()
        .map(Path::to_path_buf)
        .into_iter()
        .chain(std::env::split_paths(&path));
    std::env::join_paths(dirs).ok()
}

/// `target/tools/bin/cargo-deny` at [`CARGO_DENY_VERSION`], installed from
/// crates.io when it is missing or another version (unoptimised: it compiles
/// in about half the time, and checks this workspace in seconds).
fn install() -> Result<PathBuf> {
    let tools = root().join("target/tools");
    let bin = tools.join("bin/cargo-deny");
    let version = |bin: &Path| {
        Command::new(bin)
            .arg("--version")
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let wanted = format!("cargo-deny {CARGO_DENY_VERSION}");
    if version(&bin).is_some_and(|v| v == wanted) {
        eprintln!("    {wanted}: {}", bin.display());
        return Ok(bin);
    }
    let mut install = cargo();
    install
        .args(["install", "cargo-deny", "--locked", "--debug", "--version"])
        .arg(format!("={CARGO_DENY_VERSION}"))
        .arg("--root")
        .arg(&tools)
        // The workspace's own target dir would hold the workspace's lock
        // while cargo-deny builds; cargo install builds in a directory of
        // its own.
        .env_remove("CARGO_TARGET_DIR");
    step(
        &format!("cargo install cargo-deny {CARGO_DENY_VERSION} (once, into target/tools)"),
        install,
    )?;
    match version(&bin) {
        Some(v) if v == wanted => Ok(bin),
        other => Err(format!(
            "{} reports {other:?} after the install; expected {wanted}",
            bin.display()
        )),
    }
}
