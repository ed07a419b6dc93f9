//! The first phase: what the run will be (its length, timing, options and
//! mode), where it keeps its logs, and the store it runs on.

use std::path::{Path, PathBuf};
use std::time::Duration;

use leasehold_core::LeaseConfig;

use super::args::{Args, Margin, plant_names};
use super::loadavg;
use super::program::in_this_program;
use super::serving::{Store, provide};
use crate::store::{Options, probe};

/// A run about to start: its settings, its directory and its store.
pub struct Plan {
    pub(crate) args: Args,
    /// The largest clock offset given to workers.
    pub(crate) max_skew_ms: i64,
    pub(crate) options: Options,
    /// The workers' logs (kept when the run fails).
    pub(crate) dir: PathBuf,
    /// The worker binary.
    pub(crate) exe: PathBuf,
    pub(crate) store: Store,
    pub(crate) outline: Outline,
}

/// What a run is, as its phases after the start and its report need it.
pub(crate) struct Outline {
    /// How long faults are injected (a full run may end earlier, at `--ids`).
    pub(crate) length: Duration,
    /// The leases' safety margin (the library's for the TTL unless given).
    pub(crate) margin: Duration,
    /// The run's name: its directory and its picture's.
    pub(crate) label: String,
    /// `target/campaign`.
    pub(crate) out: PathBuf,
    /// The mode line: safe, unsafe, control, planted bug or UNSAFE by design.
    pub(crate) mode: String,
    /// Why the run is unsafe by design, where it is.
    pub(crate) unsafe_by_design: Option<&'static str>,
    /// The machine's load before the run.
    pub(crate) load_before: String,
}

/// Plans the run `args` asks for, provides its store and prints its mode
/// line. `Ok(None)`: nothing to run (a store that can forget refused a
/// mixed fleet, as it must; said on stdout, exit 0).
pub fn plan(args: Args) -> Result<Option<Plan>, String> {
    let (length, margin, max_skew_ms) = timing(&args)?;
    let options = Options {
        restart_guard: !args.no_restart_guard,
        // Every worker of a usual run has the run's one TTL and skew; a
        // mixed fleet has not, and promises it only when told to.
        assume_one_timing: !args.mixed_fleet || args.assume_one_timing,
        keep_server_synchronous_commit: args.keep_server_synchronous_commit,
    };
    let label = label(&args);
    let out = target_dir().join("campaign");
    let dir = out.join(&label);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let exe = worker_exe()?;
    let store = provide(&args.backend, &dir, args.store, args.topology)?;
    if args.keep_server_synchronous_commit && !store.pg_processes {
        return Err(format!(
            "--unsafe-keep-server-synchronous-commit is a control for a PostgreSQL server this \
             run starts; {} is not one",
            store.describe
        ));
    }
    let unsafe_by_design = match mixed_fleet(&args, &store, &options)? {
        Fleet::Refused => {
            drop(store);
            let _ = std::fs::remove_dir_all(&dir);
            return Ok(None);
        }
        Fleet::Runs(why) => why,
    };
    let mode = mode(&args, unsafe_by_design);
    let load_before = loadavg();
    println!(
        "campaign: backend {} ({}), {mode} mode, seed {} (replay: --seed {}), {} workers for {} slots \
         per pool, ttl {:?}, margin {margin:?}, max clock skew {max_skew_ms} ms, {} s{}; load {load_before}",
        args.backend,
        store.describe,
        args.seed,
        args.seed,
        args.workers,
        args.slots,
        args.ttl,
        length.as_secs(),
        args.ids.map(|n| format!(" or {n} IDs")).unwrap_or_default(),
    );
    Ok(Some(Plan {
        args,
        max_skew_ms,
        options,
        dir,
        exe,
        store,
        outline: Outline {
            length,
            margin,
            label,
            out,
            mode,
            unsafe_by_design,
            load_before,
        },
    }))
}

/// The run's length, the leases' safety margin and the largest clock skew.
fn timing(args: &Args) -> Result<(Duration, Duration, i64), String> {
    let ttl = args.ttl;
    // Short: 45 s. Full: until `--ids` IDs are recorded (checked every 10 s,
    // at most a day), or 10 minutes; `--secs` overrides either.
    let length = Duration::from_secs(args.secs.unwrap_or(if args.short {
        45
    } else if args.ids.is_some() {
        86_400
    } else {
        600
    }));
    let margin = match args.margin {
        None => None,
        Some(Margin::Ms(ms)) => Some(Duration::from_millis(ms)),
        Some(Margin::Min) => Some(leasehold_core::min_safety_margin(
            ttl,
            Duration::from_millis(1),
        )),
    };
    let config = LeaseConfig::builder("probe").ttl(ttl);
    let config = match margin {
        Some(m) => config.safety_margin(m),
        None => config,
    }
    .build()
    .map_err(|e| e.to_string())?;
    let margin = config.timing().safety_margin();
    // The largest skew: the default `max_clock_skew`, or in a mixed fleet
    // the largest the run's TTL accepts (the workers' own bounds go up to it).
    let allowed_ms = if args.mixed_fleet {
        ttl.as_millis() as i64
    } else {
        config.timing().max_clock_skew().as_millis() as i64
    };
    let max_skew_ms = args
        .skew_ms
        .map_or(allowed_ms, |m| (m as i64).min(allowed_ms));
    Ok((length, margin, max_skew_ms))
}

/// The run's name: backend, mode and seed.
fn label(args: &Args) -> String {
    format!(
        "{}-{}{}{}",
        args.backend,
        if args.unsafe_mode { "unsafe-" } else { "" },
        if args.keep_server_synchronous_commit || args.wipe_control() {
            "control-"
        } else {
            ""
        },
        args.seed
    )
}

fn target_dir() -> PathBuf {
    if let Ok(d) = std::env::var("CARGO_TARGET_DIR") {
        return d.into();
    }
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent()?.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| "target".into())
}

/// The worker binary: the runner's own program ([`crate::main`]), or
/// `campaign-worker` beside it.
fn worker_exe() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    if in_this_program() {
        return Ok(exe);
    }
    let exe = exe.with_file_name("campaign-worker");
    if !exe.exists() {
        return Err(format!(
            "{} not found: build it with `cargo build -p leasehold-campaign --bins`",
            exe.display()
        ));
    }
    Ok(exe)
}

/// Whether a mixed fleet runs on the store.
enum Fleet {
    /// Refused at connect, as it must be (printed): nothing to run.
    Refused,
    /// The run goes ahead; unsafe by design for the reason given, if any.
    Runs(Option<&'static str>),
}

/// A mixed fleet on a store that can forget: the backend must refuse
/// workers that do not promise one timing per pool; with the promise made
/// anyway (`--assume-one-timing`) the run is unsafe by design.
fn mixed_fleet(args: &Args, store: &Store, options: &Options) -> Result<Fleet, String> {
    if !args.mixed_fleet {
        return Ok(Fleet::Runs(None));
    }
    let probe_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let seen = probe_rt.block_on(probe(&store.url, options))?;
    match (seen.can_forget, &seen.refused, options.assume_one_timing) {
        (false, Some(e), _) => Err(format!("the store refused the mixed fleet's workers: {e}")),
        (false, None, _) => Ok(Fleet::Runs(None)),
        (true, Some(e), false) => {
            println!(
                "campaign: backend {} ({}): a mixed fleet on a store that can forget is \
                 refused at connect, as it must be (its restart guard cannot know the \
                 longest TTL and skew of holders a crash forgot):\n  {e}\n\
                 campaign: nothing to run; --assume-one-timing runs it anyway, UNSAFE by design",
                args.backend, store.describe
            );
            Ok(Fleet::Refused)
        }
        // The backend accepts the fleet without the promise: it says it
        // keeps what its guard relies on (e.g. Valkey with the
        // append-only file waits for WAITAOF before it grants); a safe
        // run puts that to the test.
        (true, None, false) => Ok(Fleet::Runs(None)),
        (true, _, true) => Ok(Fleet::Runs(Some(
            "a mixed fleet promising one timing per pool (--assume-one-timing) on a store \
             that can forget: a crash that loses the longest holder's claim lets a \
             shorter-lived claimer in before that holder stops",
        ))),
    }
}

/// The mode line.
fn mode(args: &Args, unsafe_by_design: Option<&str>) -> String {
    if !args.plants.is_empty() {
        format!(
            "PLANTED BUG {} (rule {}; must be found)",
            plant_names(&args.plants),
            args.plants
                .iter()
                .map(|p| p.rule().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else if args.unsafe_mode {
        "unsafe".to_owned()
    } else if args.wipe_control() {
        "control: wipes without the wipe guard (must find duplicates or overlaps)".to_owned()
    } else if args.keep_server_synchronous_commit {
        format!(
            "control: PostgreSQL lease sessions keep the server's synchronous_commit{} \
             (must find duplicates)",
            if args.no_restart_guard {
                ", no restart guard"
            } else {
                ""
            }
        )
    } else if let Some(why) = unsafe_by_design {
        format!("UNSAFE by design: {why}")
    } else {
        "safe".to_owned()
    }
}
