//! The fourth phase: every worker stopped gracefully, then what they left
//! read back: their logs, put onto the real timeline, the store's fence
//! logs, and the calls they refused.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use leasehold_conformance::proxy::Fault as Net;
use leasehold_core::MonoTime;

use super::loadavg;
use super::serving::{Serving, signal};
use super::start::Campaign;
use crate::record::{self, Record};
use crate::store::FenceWriter;

/// What a run left.
pub struct Collected {
    /// Each worker's log, by worker ID, on the real timeline.
    pub(crate) logs: Vec<(u32, Vec<Record>)>,
    /// The fences the store accepted, per resource, in its own order.
    pub(crate) fence_logs: BTreeMap<String, Vec<u64>>,
    /// When the last worker stopped (BOOTTIME ns), and the run's wall time.
    pub(crate) end_ns: u64,
    pub(crate) wall: Duration,
    /// The machine's load after the run.
    pub(crate) load_after: String,
}

/// Ends the run's faults, stops every worker gracefully and reads back
/// what they and the store recorded.
pub fn collect(c: &mut Campaign) -> Result<Collected, String> {
    wind_down(c)?;
    let end_ns = MonoTime::now().as_nanos();
    let wall = c.started.elapsed();
    let load_after = loadavg();
    let mut logs = read_logs(&c.run.dir);
    // Workers whose clocks drifted recorded their own timeline: put their
    // times onto the real one, where the holding periods are compared.
    for (id, records) in &mut logs {
        if let Some(d) = c.run.rates.get((*id as usize).wrapping_sub(1)) {
            d.retime(records);
        }
    }
    let fence_logs = match &c.fences {
        Some(_) => read_fences(c)?,
        None => BTreeMap::new(),
    };
    Ok(Collected {
        logs,
        fence_logs,
        end_ns,
        wall,
        load_after,
    })
}

/// Wind down: thaw and heal everything, stop every worker gracefully (a
/// worker that has not stopped 20 s later is killed).
fn wind_down(c: &mut Campaign) -> Result<(), String> {
    c.store.thaw();
    if let Some((victim, _)) = c.member_down
        && let Serving::Cluster(cluster) = &mut c.store.serving
    {
        cluster
            .restart(victim)
            .map_err(|e| format!("restarting member {victim}: {e}"))?;
    }
    let run = &mut c.run;
    for (proxies, _) in &run.proxies {
        for proxy in proxies {
            proxy.set(Net::Pass);
        }
    }
    for w in &mut run.workers {
        if let Some(c) = &w.child {
            signal(c.id(), "CONT");
            signal(c.id(), "TERM");
        }
    }
    let wind_down = Instant::now();
    for w in &mut run.workers {
        if let Some(c) = &mut w.child {
            loop {
                match c.try_wait() {
                    Ok(None) if wind_down.elapsed() < Duration::from_secs(20) => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Ok(None) => {
                        eprintln!("campaign: worker {} did not stop; killed", w.id);
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                    _ => break,
                }
            }
        }
    }
    Ok(())
}

/// The fence logs, through a fresh connection: the one that prepared them
/// sat idle through the run (and through any store restart).
fn read_fences(c: &Campaign) -> Result<BTreeMap<String, Vec<u64>>, String> {
    let (url, pools, slots) = (&c.store.url, &c.fence_pools, c.run.args.slots);
    c.fence_rt.block_on(async {
        let mut tries = 0;
        loop {
            let read = match FenceWriter::connect(url).await {
                Ok(Some(w)) => w.accepted(pools, slots).await,
                Ok(None) => Ok(BTreeMap::new()),
                Err(e) => Err(e),
            };
            tries += 1;
            match read {
                Err(e) if tries < 5 => {
                    eprintln!("campaign: reading the fence logs: {e}; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                r => break r,
            }
        }
    })
}

/// `campaign --dump FILE.rec`: a worker's log as text, one record a line,
/// to read the evidence a failed run kept.
pub fn dump(file: &str) -> ExitCode {
    match record::read(Path::new(file)) {
        Ok(records) => {
            for r in records {
                println!("{r:?}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("campaign: {file}: {e}");
            ExitCode::from(2)
        }
    }
}

pub(crate) fn read_logs(dir: &Path) -> Vec<(u32, Vec<Record>)> {
    let mut logs = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(id) = name
            .strip_prefix('w')
            .and_then(|s| s.strip_suffix(".rec"))
            .and_then(|s| s.parse().ok())
        {
            match record::read(&entry.path()) {
                Ok(r) => logs.push((id, r)),
                Err(e) => eprintln!("campaign: {name}: {e}"),
            }
        }
    }
    logs.sort_by_key(|(id, _)| *id);
    logs
}

/// Refused generation calls reported by the workers that stopped gracefully.
pub(crate) fn refused_calls(dir: &Path) -> u64 {
    let mut n = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.path().extension().is_some_and(|e| e == "err") {
            for line in std::fs::read_to_string(entry.path())
                .unwrap_or_default()
                .lines()
            {
                if let Some(v) = line
                    .split_once(" IDs, ")
                    .and_then(|(_, r)| r.split_whitespace().next())
                    .and_then(|v| v.parse::<u64>().ok())
                {
                    n += v;
                }
            }
        }
    }
    n
}
