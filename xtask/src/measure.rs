//! `cargo xtask measure <what> [--rounds N] …`: how the test servers' set-up
//! and failovers hold up on a loaded machine, each setting side by side with
//! the one it replaced, in one run, beside two CPU-bound processes (the load
//! `cargo xtask soak` puts beside the tests).
//!
//! - `mariadb-installs [--rounds 3] [--at-once 6]`: `--at-once` MariaDB
//!   installs started together, per round once with one temporary directory
//!   shared by all of them (a directory of the measurement's own, standing
//!   for the `/tmp` every MariaDB shares by default) and once with one each:
//!   how many failed.
//! - `sentinel-failovers [--rounds 10] [--lag-ms 500]`: a topology per
//!   Sentinel tuning (the plain one, the loaded-machine one), the same
//!   failover on each in turn (replication cut, `--lag-ms` of writes the
//!   replica misses, the primary killed): promotions out of attempts, how
//!   many were asked for, and the time without a primary.
//! - `cluster-failovers [--rounds 10] [--lag-ms 500]`: the same on a Valkey
//!   Cluster per tuning.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use leasehold_conformance::programs;
use leasehold_conformance::servers::{self, ServerKind};
use leasehold_conformance::topology::cluster::{ClusterTopology, ClusterTuning};
use leasehold_conformance::topology::sentinel::{SentinelTopology, SentinelTuning};
use leasehold_conformance::topology::{Failover, FailoverError};

type Result<T = ()> = std::result::Result<T, String>;

/// Runs the measurement `args[0]` with its options.
pub(crate) fn run(args: &[String]) -> Result {
    let (what, options) = args
        .split_first()
        .ok_or("`measure` needs what to measure: mariadb-installs, sentinel-failovers or cluster-failovers")?;
    let option = |name: &str, default: u64| -> Result<u64> {
        match options.iter().position(|a| a == name) {
            None => Ok(default),
            Some(i) => options
                .get(i + 1)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{name} needs a number")),
        }
    };
    let rounds = option("--rounds", if what == "mariadb-installs" { 3 } else { 10 })?;
    let load = Load::start()?;
    eprintln!(
        "==> measure {what}: {rounds} rounds beside two CPU-bound processes (load {})",
        load_average()
    );
    let result = match what.as_str() {
        "mariadb-installs" => mariadb_installs(rounds, option("--at-once", 6)?),
        "sentinel-failovers" | "cluster-failovers" => {
            let setups = if what == "sentinel-failovers" {
                sentinel_setups()
            } else {
                cluster_setups()
            };
            let stalls = Stalls {
                stall: Duration::from_millis(option("--stall-ms", 0)?),
                every: Duration::from_millis(option("--stall-every-ms", 10_000)?),
            };
            let lag = Duration::from_millis(option("--lag-ms", 500)?);
            failovers(rounds, lag, stalls, &setups)
        }
        other => Err(format!(
            "unknown `measure {other}`; use mariadb-installs, sentinel-failovers or cluster-failovers"
        )),
    };
    println!("(load at the end: {})", load_average());
    drop(load);
    result
}

/// Two CPU-bound processes (`cargo xtask burn`), killed on drop.
struct Load(Vec<Child>);

impl Load {
    fn start() -> Result<Self> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let burners = (0..2)
            .map(|_| {
                Command::new(&exe)
                    .arg("burn")
                    .spawn()
                    .map_err(|e| format!("cannot start a load process: {e}"))
            })
            .collect::<Result<_>>()?;
        Ok(Self(burners))
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for b in &mut self.0 {
            let _ = b.kill();
            let _ = b.wait();
        }
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Per round, `at_once` installs together with one temporary directory
/// for all, then `at_once` with one each; prints how many failed.
fn mariadb_installs(rounds: u64, at_once: u64) -> Result {
    let mut tally = [(0u64, 0u64, Vec::new()), (0, 0, Vec::new())];
    for round in 1..=rounds {
        for (shared, (failed, total, times)) in [true, false].into_iter().zip(tally.iter_mut()) {
            let dir = servers::private_dir("measure-mariadb")?;
            let common = dir.join("tmp");
            std::fs::create_dir_all(&common).map_err(|e| e.to_string())?;
            let started = Instant::now();
            let children = (0..at_once)
                .map(|i| {
                    let own = dir.join(format!("tmp{i}"));
                    std::fs::create_dir_all(&own).map_err(|e| e.to_string())?;
                    let tmp = if shared { &common } else { &own };
                    servers::mariadb::install_command(&dir.join(format!("data{i}")), tmp)?
                        .stdout(std::process::Stdio::piped())
                        .stderr(std::process::Stdio::piped())
                        .spawn()
                        .map_err(|e| format!("mariadb-install-db: {e}"))
                })
                .collect::<Result<Vec<_>>>()?;
            let mut failures = Vec::new();
            for child in children {
                let out = child.wait_with_output().map_err(|e| e.to_string())?;
                *total += 1;
                if !out.status.success() {
                    *failed += 1;
                    let text = String::from_utf8_lossy(&out.stdout).into_owned()
                        + &String::from_utf8_lossy(&out.stderr);
                    failures.push(
                        text.lines()
                            .find(|l| l.contains("ERROR"))
                            .unwrap_or("(no ERROR line)")
                            .to_owned(),
                    );
                }
            }
            times.push(started.elapsed());
            eprintln!(
                "round {round}, {}: {} of {at_once} failed in {:.1?}{}",
                if shared {
                    "one temporary directory for all"
                } else {
                    "one temporary directory each"
                },
                failures.len(),
                started.elapsed(),
                failures
                    .first()
                    .map(|f| format!(" ({f})"))
                    .unwrap_or_default()
            );
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    println!("\n| {at_once} MariaDB installs at once | failed | a round took (median / longest) |");
    println!("|---|---|---|");
    for (name, (failed, total, times)) in [
        "one temporary directory for all (the default: /tmp)",
        "one temporary directory each",
    ]
    .iter()
    .zip(&mut tally)
    {
        println!("| {name} | {failed} of {total} | {} |", spread(times));
    }
    Ok(())
}

/// A topology that fails over: started with one tuning, then asked for
/// failovers.
trait FailsOver {
    fn fail_over(&mut self, lag: Duration) -> std::result::Result<Failover, FailoverError>;

    /// The processes `--stall-ms` freezes: the Sentinels, or none.
    fn stalled(&self) -> Vec<u32> {
        Vec::new()
    }
}

impl FailsOver for SentinelTopology {
    fn fail_over(&mut self, lag: Duration) -> std::result::Result<Failover, FailoverError> {
        SentinelTopology::fail_over(self, lag)
    }

    fn stalled(&self) -> Vec<u32> {
        self.sentinel_pids()
    }
}

/// The key whose slot the Cluster measurement fails over.
const CLUSTER_KEY: &str = "{measure}";

impl FailsOver for ClusterTopology {
    fn fail_over(&mut self, lag: Duration) -> std::result::Result<Failover, FailoverError> {
        ClusterTopology::fail_over(self, CLUSTER_KEY, lag)
    }
}

/// One configuration to measure: its name and how to start its topology.
struct Setup {
    name: String,
    /// Its settings in full.
    legend: String,
    start: Box<dyn Fn() -> Result<Box<dyn FailsOver>>>,
}

fn sentinel_setups() -> Vec<Setup> {
    [
        ("plain (Sentinel's TILT defaults)", SentinelTuning::PLAIN),
        ("loaded machine", SentinelTuning::LOADED_MACHINE),
    ]
    .into_iter()
    .map(|(name, tuning)| Setup {
        name: name.to_owned(),
        legend: format!("{tuning:?}"),
        start: Box::new(move || {
            SentinelTopology::start_tuned(ServerKind::Valkey8, tuning)
                .map(|t| Box::new(t) as Box<dyn FailsOver>)
        }),
    })
    .collect()
}

fn cluster_setups() -> Vec<Setup> {
    [
        ("plain", ClusterTuning::PLAIN),
        ("loaded machine", ClusterTuning::LOADED_MACHINE),
    ]
    .into_iter()
    .map(|(name, tuning)| Setup {
        name: name.to_owned(),
        legend: format!("{tuning:?}"),
        start: Box::new(move || {
            ClusterTopology::start_tuned(ServerKind::Valkey8, tuning)
                .map(|t| Box::new(t) as Box<dyn FailsOver>)
        }),
    })
    .collect()
}

/// What the failovers of one setup gave.
#[derive(Default)]
struct Tally {
    attempts: u64,
    promoted: u64,
    forced: u64,
    downs: Vec<Duration>,
    not_promoted: Vec<String>,
    failed: Vec<String>,
}

/// Freezes processes (`SIGSTOP`) for `stall` every `every`, as a machine
/// that starves them (or blocks them on a slow disk) does; `stall` zero: never.
#[derive(Clone, Copy, Debug)]
struct Stalls {
    stall: Duration,
    every: Duration,
}

impl Stalls {
    /// Runs the stalls of `pids` until `stop` is set, the first `phase`
    /// (a fraction) into a period.
    fn run(self, pids: Vec<u32>, phase: f64, stop: &std::sync::atomic::AtomicBool) {
        use std::sync::atomic::Ordering;
        if self.stall.is_zero() || pids.is_empty() {
            return;
        }
        let signal = |which: &str| {
            if let Ok(mut kill) = programs::command("kill") {
                let _ = kill
                    .arg(format!("-{which}"))
                    .args(pids.iter().map(u32::to_string))
                    .status();
            }
        };
        let mut next = Instant::now() + self.every.mul_f64(phase);
        while !stop.load(Ordering::Relaxed) {
            if Instant::now() >= next {
                signal("STOP");
                std::thread::sleep(self.stall);
                signal("CONT");
                next = Instant::now() + self.every.saturating_sub(self.stall);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `rounds` failovers on a topology per setup, in turn, each failover with
/// `stalls` of its processes; prints the table.
fn failovers(rounds: u64, lag: Duration, stalls: Stalls, setups: &[Setup]) -> Result {
    if !stalls.stall.is_zero() {
        eprintln!(
            "the Sentinels are frozen for {:?} every {:?} during each failover",
            stalls.stall, stalls.every
        );
    }
    let mut topologies = setups
        .iter()
        .map(|s| (s.start)().map(Some))
        .collect::<Result<Vec<_>>>()?;
    let mut tallies: Vec<Tally> = setups.iter().map(|_| Tally::default()).collect();
    for round in 1..=rounds {
        for (i, setup) in setups.iter().enumerate() {
            if topologies[i].is_none() {
                // A failed step left it without a replica: a new one.
                topologies[i] = Some((setup.start)()?);
            }
            let t = topologies[i].as_mut().ok_or("no topology")?;
            let tally = &mut tallies[i];
            tally.attempts += 1;
            let stop = std::sync::atomic::AtomicBool::new(false);
            let pids = t.stalled();
            let outcome = std::thread::scope(|s| {
                s.spawn(|| stalls.run(pids, phase(round), &stop));
                let outcome = t.fail_over(lag);
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                outcome
            });
            let line = match outcome {
                Ok(Failover { down, forced }) => {
                    tally.promoted += 1;
                    tally.forced += u64::from(forced);
                    tally.downs.push(down);
                    format!(
                        "promoted after {down:.1?}{}",
                        if forced { " (asked for)" } else { "" }
                    )
                }
                Err(FailoverError::NotPromoted(why)) => {
                    tally.not_promoted.push(why.clone());
                    format!("NOT PROMOTED: {why}")
                }
                Err(e) => {
                    tally.failed.push(e.to_string());
                    topologies[i] = None;
                    format!("FAILED: {e}")
                }
            };
            eprintln!(
                "round {round}, {}: {line} (load {})",
                setup.name,
                load_average()
            );
        }
    }
    println!(
        "\n| setup | promoted / attempts | asked for | time without a primary (median / longest) | other failures |"
    );
    println!("|---|---|---|---|---|");
    for (setup, t) in setups.iter().zip(&mut tallies) {
        println!(
            "| {} | {} / {} | {} | {} | {} |",
            setup.name,
            t.promoted,
            t.attempts,
            t.forced,
            spread(&mut t.downs),
            t.failed.len()
        );
    }
    for (setup, t) in setups.iter().zip(&tallies) {
        println!("- {}: {}", setup.name, setup.legend);
        for (what, why) in [("not promoted", &t.not_promoted), ("failed", &t.failed)] {
            for reason in why {
                let line = reason.lines().next().unwrap_or_default();
                println!("  - {what}: {}", line.chars().take(300).collect::<String>());
            }
        }
    }
    println!(
        "(lag {lag:?}{})",
        if stalls.stall.is_zero() {
            String::new()
        } else {
            format!(
                "; the Sentinels frozen for {:?} every {:?}",
                stalls.stall, stalls.every
            )
        }
    );
    Ok(())
}

/// Where in a period of stalls round `round`'s first one comes, the same
/// for every setup of the round: a fraction in [0, 1), spread by the
/// golden ratio.
fn phase(round: u64) -> f64 {
    (round as f64 * 0.618_033_988_7).fract()
}

/// `median / longest` of `times`, or `-`.
fn spread(times: &mut [Duration]) -> String {
    if times.is_empty() {
        return "-".into();
    }
    times.sort_unstable();
    format!(
        "{:.1} s / {:.1} s",
        times[times.len() / 2].as_secs_f64(),
        times[times.len() - 1].as_secs_f64()
    )
}
