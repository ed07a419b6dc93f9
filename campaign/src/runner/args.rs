//! The runner's command line: what a run is asked to do, and the command
//! that replays it.

use std::time::Duration;

use leasehold_conformance::servers::{Family, Settings};
use leasehold_core::MonoTime;
use leasehold_core::plant::Plant;

use super::choice::{Choice, choice};
use crate::drift::Rate;

/// What a run is asked to do (`campaign --help`).
#[derive(Debug)]
pub struct Args {
    pub(crate) backend: String,
    pub(crate) short: bool,
    pub(crate) unsafe_mode: bool,
    pub(crate) seed: u64,
    pub(crate) secs: Option<u64>,
    pub(crate) ids: Option<u64>,
    pub(crate) workers: usize,
    pub(crate) slots: u32,
    pub(crate) ttl: Duration,
    /// The largest clock offset given to workers (default: `max_clock_skew`).
    pub(crate) skew_ms: Option<u64>,
    /// How the store's server keeps what it acknowledged.
    pub(crate) store: Settings,
    /// Every other fault a store restart.
    pub(crate) restart_heavy: bool,
    /// Every other fault a backend crash (PostgreSQL).
    pub(crate) crash_heavy: bool,
    /// Every other fault a wipe of the pools' lease records.
    pub(crate) wipe_heavy: bool,
    /// One server, or a primary with a standby that fails over.
    pub(crate) topology: Topology,
    /// Workers of one pool with different timings: every other worker at
    /// 10 × the TTL, each with its own `max_clock_skew` up to the largest.
    pub(crate) mixed_fleet: bool,
    /// A mixed fleet's workers promise one timing per pool anyway: on a
    /// store that can forget, unsafe by design.
    pub(crate) assume_one_timing: bool,
    /// The workers' stores run without the restart guard (a control run).
    pub(crate) no_restart_guard: bool,
    /// PostgreSQL sessions keep the server's `synchronous_commit` (a
    /// control run: a crashed backend then loses acknowledged leases).
    pub(crate) keep_server_synchronous_commit: bool,
    /// Keep the logs of a clean run too.
    pub(crate) keep: bool,
    /// Timing rules the workers break on purpose (`--plant`).
    pub(crate) plants: Vec<Plant>,
    /// Clock rate drift (`--clock-rate-ppm`): every other worker start runs
    /// its clocks this many ppm slow, the rest this many fast.
    pub(crate) drift_ppm: u32,
    /// The leases' safety margin (`--margin-ms`; default: the library's
    /// for the TTL).
    pub(crate) margin: Option<Margin>,
    /// The largest delay between a spare's claims (`--backoff-max-ms`;
    /// default: the library's, a quarter of the TTL).
    pub(crate) backoff_max_ms: Option<u64>,
}

/// The store's servers (`--topology`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Topology {
    /// One server (the default).
    Single,
    /// A primary with an asynchronous streaming standby, failed over.
    ReplicatedAsync,
    /// A primary with a synchronous streaming standby, failed over.
    ReplicatedSync,
    /// A Valkey/Redis primary with a replica and three Sentinels, failed
    /// over by killing the primary.
    Sentinel,
    /// A Valkey/Redis Cluster of three primaries with a replica each,
    /// failed over by killing the primary of the run's pool slot.
    Cluster,
    /// An etcd cluster of three members, killed one at a time (every other
    /// time the leader).
    Etcd3,
    /// An etcd cluster of five members, likewise.
    Etcd5,
}

impl Topology {
    /// The names `--topology` takes.
    pub(crate) const NAMES: &str =
        "single|replicated-async|replicated-sync|sentinel|cluster|etcd-3|etcd-5";

    fn parse(text: &str) -> Result<Self, String> {
        match text {
            "single" => Ok(Self::Single),
            "replicated-async" => Ok(Self::ReplicatedAsync),
            "replicated-sync" => Ok(Self::ReplicatedSync),
            "sentinel" => Ok(Self::Sentinel),
            "cluster" => Ok(Self::Cluster),
            "etcd-3" => Ok(Self::Etcd3),
            "etcd-5" => Ok(Self::Etcd5),
            other => Err(format!("--topology {other:?}: one of {}", Self::NAMES)),
        }
    }

    /// The name `--topology` takes.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Self::Single => "single",
            Self::ReplicatedAsync => "replicated-async",
            Self::ReplicatedSync => "replicated-sync",
            Self::Sentinel => "sentinel",
            Self::Cluster => "cluster",
            Self::Etcd3 => "etcd-3",
            Self::Etcd5 => "etcd-5",
        }
    }
}

/// A safety margin given on the command line.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Margin {
    /// This many milliseconds.
    Ms(u64),
    /// The least timing rule 2 accepts for the run's TTL on a store whose
    /// clock ticks in milliseconds (the coarsest of the campaign's stores).
    Min,
}

/// Parses the runner's arguments (without the program's name); the error
/// says what is wrong, or is the usage text for `--help`.
pub fn parse_args(argv: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut a = Args::defaults();
    let mut it = argv.into_iter();
    while let Some(flag) = it.next() {
        a.apply(&flag, &mut it)?;
    }
    a.validate()?;
    Ok(a)
}

/// `campaign --help`.
const USAGE: &str = "usage: campaign [--backend sqlite|postgres|mariadb|redis8|redis7|\
                            valkey8|etcd35|etcd34|etcd-cluster|k8s-fake] [--short] [--unsafe] [--seed S] [--secs N] [--ids N] \
                            [--workers W] [--slots K] [--ttl-ms T] [--skew-ms M] \
                            [--store fast|durable|lossy] [--restart-heavy] [--crash-heavy] [--wipe-heavy] \
                            [--topology single|replicated-async|replicated-sync|sentinel|cluster|etcd-3|etcd-5] \
                            [--mixed-fleet [--assume-one-timing]] [--no-restart-guard] \
                            [--unsafe-keep-server-synchronous-commit] [--keep] \
                            [--plant NAME[,NAME]] [--clock-rate-ppm P] [--margin-ms M|min] \
                            [--backoff-max-ms B]\n\
                            \x20      campaign --dump FILE.rec   (a worker's log as text)";

impl Args {
    /// A run's settings before its flags: a short-lived safe run on SQLite,
    /// 5 workers for 2 slots, TTL 2 s, a seed from the clock.
    fn defaults() -> Self {
        Args {
            backend: "sqlite".into(),
            short: false,
            unsafe_mode: false,
            seed: MonoTime::now().as_nanos() ^ u64::from(std::process::id()) << 32,
            secs: None,
            ids: None,
            workers: 5,
            slots: 2,
            ttl: Duration::from_secs(2),
            skew_ms: None,
            store: Settings::Fast,
            restart_heavy: false,
            crash_heavy: false,
            wipe_heavy: false,
            topology: Topology::Single,
            mixed_fleet: false,
            assume_one_timing: false,
            no_restart_guard: false,
            keep_server_synchronous_commit: false,
            keep: false,
            plants: Vec::new(),
            drift_ppm: 0,
            margin: None,
            backoff_max_ms: None,
        }
    }

    /// Applies `flag`, taking its value from `it` where it has one.
    fn apply(&mut self, flag: &str, it: &mut impl Iterator<Item = String>) -> Result<(), String> {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let num = |v: String| v.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag {
            "--backend" => self.backend = value()?,
            "--topology" => self.topology = Topology::parse(&value()?)?,
            "--short" => self.short = true,
            "--unsafe" => self.unsafe_mode = true,
            "--seed" => self.seed = num(value()?)?,
            "--secs" => self.secs = Some(num(value()?)?),
            "--ids" => self.ids = Some(num(value()?)?),
            "--workers" => self.workers = num(value()?)? as usize,
            "--slots" => self.slots = num(value()?)? as u32,
            "--ttl-ms" => self.ttl = Duration::from_millis(num(value()?)?),
            "--skew-ms" => self.skew_ms = Some(num(value()?)?),
            "--store" => {
                self.store = match value()?.as_str() {
                    "fast" => Settings::Fast,
                    "durable" => Settings::Durable,
                    "lossy" => Settings::Lossy,
                    other => {
                        return Err(format!(
                            "--store {other:?}: fast (speed-tuned), durable or lossy"
                        ));
                    }
                }
            }
            "--restart-heavy" => self.restart_heavy = true,
            "--crash-heavy" => self.crash_heavy = true,
            "--wipe-heavy" => self.wipe_heavy = true,
            "--mixed-fleet" => self.mixed_fleet = true,
            "--assume-one-timing" => self.assume_one_timing = true,
            "--no-restart-guard" => self.no_restart_guard = true,
            "--unsafe-keep-server-synchronous-commit" => self.keep_server_synchronous_commit = true,
            "--keep" => self.keep = true,
            "--clock-rate-ppm" => {
                self.drift_ppm = num(value()?)?
                    .try_into()
                    .ok()
                    .filter(|p| Rate::from_ppm(*p).is_some())
                    .ok_or("--clock-rate-ppm: at most 500000")?
                    .unsigned_abs();
            }
            "--backoff-max-ms" => self.backoff_max_ms = Some(num(value()?)?),
            "--margin-ms" => {
                self.margin = Some(match value()?.as_str() {
                    "min" => Margin::Min,
                    v => Margin::Ms(num(v.to_owned())?),
                });
            }
            "--plant" => {
                for name in value()?.split(',') {
                    self.plants.push(Plant::from_name(name).ok_or_else(|| {
                        format!(
                            "--plant {name:?}: one of {}",
                            Plant::ALL.map(Plant::name).join(", ")
                        )
                    })?);
                }
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
        Ok(())
    }

    /// A run with a planted bug: it must find something.
    pub(crate) fn planted(&self) -> bool {
        !self.plants.is_empty()
    }

    /// Unsafe, control and planted-bug runs fail unless they find something.
    pub(crate) fn must_fail(&self) -> bool {
        self.unsafe_mode
            || self.keep_server_synchronous_commit
            || self.planted()
            || self.wipe_control()
    }

    /// The wipe guard's control: wipes with the guard turned off, which
    /// must let a claimer in beside a holder (duplicates or overlaps).
    pub(crate) fn wipe_control(&self) -> bool {
        self.wipe_heavy && self.no_restart_guard
    }

    /// Whether the backend's wipe guard can be turned off
    /// (`DurabilityPolicy::Throwaway`): SQL, Valkey/Redis and stores that
    /// need no server; on etcd and Kubernetes it is always on.
    fn guard_optional(&self) -> bool {
        match choice(&self.backend) {
            Some(Choice::EtcdCluster | Choice::FakeApi) => false,
            Some(chosen) => !matches!(chosen.family(), Some(Family::Etcd | Family::Kubernetes)),
            None => true,
        }
    }

    /// Refuses flags that do not go together.
    fn validate(&self) -> Result<(), String> {
        if self.assume_one_timing && !self.mixed_fleet {
            return Err(
                "--assume-one-timing goes with --mixed-fleet (every other run has one timing)"
                    .into(),
            );
        }
        let family = choice(&self.backend).and_then(Choice::family);
        let fits = match self.topology {
            Topology::Single => true,
            Topology::ReplicatedAsync => {
                matches!(family, Some(Family::Postgres | Family::MariaDb))
            }
            Topology::ReplicatedSync => family == Some(Family::Postgres),
            Topology::Sentinel | Topology::Cluster => family == Some(Family::Redis),
            Topology::Etcd3 | Topology::Etcd5 => family == Some(Family::Etcd),
        };
        if !fits {
            return Err(format!(
                "--topology {} does not run on {}: replicated-async is a PostgreSQL or MariaDB \
                 topology (--backend postgres, postgres-latest or mariadb), replicated-sync a \
                 PostgreSQL one, sentinel and cluster Valkey/Redis ones (--backend valkey8, \
                 redis8 or redis7), etcd-3 and etcd-5 etcd \
                 clusters (--backend etcd35 or etcd34)",
                self.topology.name(),
                self.backend
            ));
        }
        if self.topology != Topology::Single && (self.restart_heavy || self.crash_heavy) {
            return Err(format!(
                "--topology {} fails the store over every other fault: it goes without \
                 --restart-heavy and --crash-heavy",
                self.topology.name()
            ));
        }
        if self.wipe_heavy && self.topology != Topology::Single {
            // The replicated topologies fail over every other fault; a
            // wipe there is the same statement on the primary, which
            // replicates like any write (a Valkey Cluster's FLUSHALL is
            // per node), so the single servers test the guard, and etcd's
            // own cluster (`--backend etcd-cluster`) a wipe through Raft.
            return Err(format!(
                "--wipe-heavy runs on one server (--topology single) or --backend \
                 etcd-cluster, not --topology {}",
                self.topology.name()
            ));
        }
        if self.wipe_heavy && self.mixed_fleet {
            return Err(
                "--wipe-heavy goes without --mixed-fleet: a wipe takes the spans the holders \
                 recorded and the guard waits the claimer's own, so a pool of several timings \
                 is not covered (DESIGN.md, `durability=one-timing-per-pool`)"
                    .into(),
            );
        }
        if self.wipe_control() && !self.guard_optional() {
            return Err(format!(
                "--no-restart-guard --wipe-heavy: the wipe guard of {} is always on, so the \
                 control has nothing to turn off (SQL and Valkey/Redis only)",
                self.backend
            ));
        }
        if self.wipe_control()
            && (self.unsafe_mode || self.keep_server_synchronous_commit || self.planted())
        {
            return Err(
                "--no-restart-guard --wipe-heavy is the wipe guard's control: it goes without \
                 --unsafe, --plant and the synchronous-commit control"
                    .into(),
            );
        }
        if !self.plants.is_empty() && !leasehold_core::plant::BUILT {
            return Err(format!("--plant: {}", leasehold_core::plant::NotBuilt));
        }
        if !self.plants.is_empty() && (self.unsafe_mode || self.keep_server_synchronous_commit) {
            return Err(
        "--plant goes alone: --unsafe and the control runs look for duplicates of their own"
            .into(),
    );
        }
        if self.drift_ppm != 0 && matches!(choice(&self.backend), Some(Choice::Local(_))) {
            // A store with no server (SQLite's file) has the clock of the
            // process running the statement: a drifting worker would drift
            // the store's clock for its own claims only, which no real machine
            // can do (every holder runs on the file's machine, and its
            // processes share one clock).
            return Err(format!(
                "--clock-rate-ppm needs a store with a clock of its own: {}'s is each \
                 worker's, which would drift with it",
                self.backend
            ));
        }
        if self.margin.is_some() && self.mixed_fleet {
            return Err(
        "--margin-ms goes without --mixed-fleet (its workers' TTLs need margins of their own)"
            .into(),
    );
        }
        if self.workers <= self.slots as usize || self.slots == 0 {
            return Err(
                "--workers must be more than --slots (spares must wait to take over)".into(),
            );
        }
        Ok(())
    }
}

/// The command that runs `a` again (the same faults and clocks).
pub(crate) fn replay_command(a: &Args) -> String {
    let mut c = format!(
        "{} --backend {}",
        super::program::replay_program(),
        a.backend
    );
    let mut flag = |on: bool, f: &str| {
        if on {
            c.push(' ');
            c.push_str(f);
        }
    };
    flag(a.short, "--short");
    flag(a.unsafe_mode, "--unsafe");
    flag(a.store == Settings::Durable, "--store durable");
    flag(a.store == Settings::Lossy, "--store lossy");
    flag(a.restart_heavy, "--restart-heavy");
    flag(a.crash_heavy, "--crash-heavy");
    flag(a.wipe_heavy, "--wipe-heavy");
    flag(a.mixed_fleet, "--mixed-fleet");
    flag(a.assume_one_timing, "--assume-one-timing");
    flag(a.no_restart_guard, "--no-restart-guard");
    flag(
        a.keep_server_synchronous_commit,
        "--unsafe-keep-server-synchronous-commit",
    );
    let mut value = |name: &str, v: Option<String>| {
        if let Some(v) = v {
            c.push_str(&format!(" {name} {v}"));
        }
    };
    value(
        "--topology",
        (a.topology != Topology::Single).then(|| a.topology.name().to_owned()),
    );
    value("--secs", a.secs.map(|v| v.to_string()));
    value("--ids", a.ids.map(|v| v.to_string()));
    value("--skew-ms", a.skew_ms.map(|v| v.to_string()));
    value(
        "--ttl-ms",
        (a.ttl != Duration::from_secs(2)).then(|| a.ttl.as_millis().to_string()),
    );
    value("--workers", (a.workers != 5).then(|| a.workers.to_string()));
    value("--slots", (a.slots != 2).then(|| a.slots.to_string()));
    value(
        "--plant",
        (!a.plants.is_empty()).then(|| plant_names(&a.plants)),
    );
    value(
        "--clock-rate-ppm",
        (a.drift_ppm != 0).then(|| a.drift_ppm.to_string()),
    );
    value(
        "--margin-ms",
        a.margin.map(|m| match m {
            Margin::Ms(ms) => ms.to_string(),
            Margin::Min => "min".into(),
        }),
    );
    value("--backoff-max-ms", a.backoff_max_ms.map(|b| b.to_string()));
    value("--seed", Some(a.seed.to_string()));
    c
}

/// The names of `plants`, as `--plant` takes them.
pub(crate) fn plant_names(plants: &[Plant]) -> String {
    plants
        .iter()
        .map(|p| p.name())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> Result<Args, String> {
        parse_args(argv.iter().map(|a| (*a).to_owned()))
    }

    #[test]
    fn a_replay_command_parses_back_to_itself() {
        let a = parse(&[
            "--backend",
            "postgres",
            "--short",
            "--store",
            "lossy",
            "--restart-heavy",
            "--crash-heavy",
            "--mixed-fleet",
            "--assume-one-timing",
            "--secs",
            "30",
            "--workers",
            "7",
            "--seed",
            "42",
        ])
        .unwrap();
        let replay = replay_command(&a);
        assert_eq!(
            replay,
            "cargo xtask campaign --backend postgres --short --store lossy --restart-heavy \
             --crash-heavy --mixed-fleet --assume-one-timing --secs 30 --workers 7 --seed 42"
        );
        let flags = replay.strip_prefix("cargo xtask campaign ").unwrap();
        let again = parse(&flags.split(' ').collect::<Vec<_>>()).unwrap();
        assert_eq!(replay_command(&again), replay);
    }

    /// The wipe guard's control must find something; a guarded wipe run
    /// must be clean.
    #[test]
    fn wipes_without_the_guard_must_find_something() {
        let control = parse(&["--backend", "valkey8", "--wipe-heavy", "--no-restart-guard"]);
        assert!(control.unwrap().must_fail());
        let guarded = parse(&["--backend", "valkey8", "--wipe-heavy"]).unwrap();
        assert!(!guarded.must_fail());
        assert!(replay_command(&guarded).contains(" --wipe-heavy"));
        assert!(!parse(&["--no-restart-guard"]).unwrap().must_fail());
    }

    #[test]
    fn usage_and_unknown_flags_are_errors() {
        assert!(
            parse(&["--help"])
                .unwrap_err()
                .starts_with("usage: campaign ")
        );
        assert_eq!(
            parse(&["--fast"]).unwrap_err(),
            "unknown argument \"--fast\" (try --help)"
        );
        assert_eq!(parse(&["--seed"]).unwrap_err(), "--seed needs a value");
    }

    #[test]
    fn flags_that_do_not_go_together_are_refused() {
        for (argv, error) in [
            (
                &["--assume-one-timing"][..],
                "--assume-one-timing goes with",
            ),
            (
                &["--clock-rate-ppm", "500"][..],
                "--clock-rate-ppm needs a store",
            ),
            (
                &["--mixed-fleet", "--margin-ms", "min"][..],
                "--margin-ms goes without",
            ),
            (
                &["--workers", "2"][..],
                "--workers must be more than --slots",
            ),
            (
                &[
                    "--backend",
                    "postgres",
                    "--topology",
                    "replicated-async",
                    "--wipe-heavy",
                ][..],
                "--wipe-heavy runs on one server",
            ),
            (
                &["--wipe-heavy", "--mixed-fleet"][..],
                "--wipe-heavy goes without --mixed-fleet",
            ),
            (
                &["--backend", "etcd35", "--wipe-heavy", "--no-restart-guard"][..],
                "--no-restart-guard --wipe-heavy: the wipe guard of etcd35 is always on",
            ),
            (
                &["--wipe-heavy", "--no-restart-guard", "--unsafe"][..],
                "--no-restart-guard --wipe-heavy is the wipe guard's control",
            ),
        ] {
            let got = parse(argv).unwrap_err();
            assert!(got.starts_with(error), "{argv:?}: {got}");
        }
    }
}
