//! The worker processes of a run: each start with its clock, timing and
//! options, and the faults aimed at one of them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use leasehold_conformance::proxy::{Fault as Net, FaultProxy};
use leasehold_core::MonoTime;

use super::args::{Args, plant_names};
use super::crash::Crash;
use super::serving::{Store, signal};
use crate::availability::Failover;
use crate::drift::{Drifted, Rate};
use crate::plan::{Fault, Planned, Rng};
use crate::store::Options;
use crate::timeline::FaultMark;

pub(crate) enum State {
    Running,
    Stopped { until: Instant },
    Terminating { since: Instant },
    Dead { restart_at: Instant },
}

pub(crate) struct Worker {
    pub(crate) child: Option<Child>,
    pub(crate) id: u32,
    pub(crate) state: State,
    pub(crate) generators: u32,
}

pub(crate) struct Run {
    pub(crate) args: Args,
    pub(crate) url: String,
    /// One fault proxy per worker index (networked stores only): the worker
    /// at that index, and each of its restarts, reaches the store through
    /// it, so a cut hits that worker's host alone.
    pub(crate) proxies: Vec<(Vec<FaultProxy>, String)>,
    /// Per worker index, when its cut ends.
    pub(crate) cut_until: Vec<Option<Instant>>,
    pub(crate) dir: PathBuf,
    pub(crate) exe: PathBuf,
    pub(crate) pool: String,
    pub(crate) max_skew_ms: i64,
    pub(crate) next_id: u32,
    pub(crate) rng: Rng,
    pub(crate) workers: Vec<Worker>,
    pub(crate) marks: Vec<FaultMark>,
    /// The failovers made (and, on etcd, the leader kills), for what they
    /// cost the workers.
    pub(crate) failovers: Vec<Failover>,
    pub(crate) counts: BTreeMap<&'static str, u64>,
    pub(crate) skews: Vec<i64>,
    /// Per start: its clocks' rate, and a real reading (BOOTTIME ns) taken
    /// just before it started, from which its clocks drift.
    pub(crate) rates: Vec<Drifted>,
    /// libfaketime, preloaded into the workers whose clocks drift.
    pub(crate) faketime: Option<PathBuf>,
    /// The safety margin given to the workers (`None`: the library's).
    pub(crate) margin: Option<Duration>,
    /// Per start, in a mixed fleet: the worker's TTL and `max_clock_skew`.
    pub(crate) timings: Vec<(Duration, Duration)>,
    /// How the workers' strategies accept the store.
    pub(crate) options: Options,
    /// What each backend crash did.
    pub(crate) crashes: Vec<Crash>,
    pub(crate) freeze_until: Option<Instant>,
    /// Log sizes at the last look, and the workers whose log grew since.
    pub(crate) sizes: BTreeMap<u32, u64>,
    pub(crate) holding: BTreeSet<u32>,
}

impl Run {
    pub(crate) fn spawn(&mut self, idx: usize) -> Result<Worker, String> {
        self.next_id += 1;
        let id = self.next_id;
        // A mixed fleet: every other worker at 10 × the TTL; workers 0 and
        // 1 with the largest `max_clock_skew`, the others with their own
        // (a tenth of it to all of it), each clock within its own.
        let (ttl, own_max_ms) = if self.args.mixed_fleet {
            let ttl = if idx % 2 == 1 {
                self.args.ttl * 10
            } else {
                self.args.ttl
            };
            let most = self.max_skew_ms.unsigned_abs();
            let own = match idx {
                0 | 1 => most,
                _ => most / 10 + self.rng.below(most - most / 10 + 1),
            };
            self.timings.push((ttl, Duration::from_millis(own)));
            (ttl, own as i64)
        } else {
            (self.args.ttl, self.max_skew_ms)
        };
        // Skewed clocks in every run: worker 0 ahead by the most allowed,
        // worker 1 behind by it, the others at random within it.
        let skew_ms = match idx {
            0 => own_max_ms,
            1 => -own_max_ms,
            _ => self.rng.signed(own_max_ms),
        };
        // Several generators on one lease in every run: worker 2.
        let generators = if idx == 2 { 3 } else { 1 };
        self.skews.push(skew_ms);
        let err = std::fs::File::create(self.dir.join(format!("w{id}.err")))
            .map_err(|e| e.to_string())?;
        let mut cmd = super::program::worker_command(&self.exe);
        let url = self.proxies.get(idx).map_or(&self.url, |(_, url)| url);
        cmd.args(["--url", url, "--pool", &self.pool])
            .args(["--slots", &self.args.slots.to_string()])
            .args(["--ttl-ms", &ttl.as_millis().to_string()])
            .args(["--skew-ms", &skew_ms.to_string()])
            .args(["--generators", &generators.to_string()])
            .arg("--log")
            .arg(self.dir.join(format!("w{id}.rec")))
            .stdout(Stdio::null())
            .stderr(err);
        if self.args.unsafe_mode {
            cmd.arg("--unsafe");
        }
        if self.args.mixed_fleet {
            cmd.args(["--max-clock-skew-ms", &own_max_ms.to_string()]);
        }
        if !self.options.restart_guard {
            cmd.arg("--no-restart-guard");
        }
        if !self.options.assume_one_timing {
            cmd.arg("--no-one-timing");
        }
        if self.options.keep_server_synchronous_commit {
            cmd.arg("--unsafe-keep-server-synchronous-commit");
        }
        if !self.args.plants.is_empty() {
            cmd.args(["--plant", &plant_names(&self.args.plants)]);
        }
        if let Some(m) = self.margin {
            cmd.args(["--margin-us", &m.as_micros().to_string()]);
        }
        if let Some(b) = self.args.backoff_max_ms {
            cmd.args(["--backoff-max-ms", &b.to_string()]);
        }
        // Clock rate drift: every other worker index (the first, the third,
        // ...) slow, the rest fast; the slow ones are what the margin must
        // cover (a holder's deadline comes late by its own reckoning).
        let ppm = self.args.drift_ppm as i32;
        let rate = match self.faketime.as_ref() {
            Some(lib) if ppm != 0 => {
                let rate = Rate::from_ppm(if idx.is_multiple_of(2) { -ppm } else { ppm })
                    .unwrap_or(Rate::EXACT);
                cmd.env("LD_PRELOAD", lib).env("FAKETIME", rate.faketime());
                rate
            }
            _ => Rate::EXACT,
        };
        self.rates.push(drifted_from_now(rate));
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.exe.display()))?;
        Ok(Worker {
            child: Some(child),
            id,
            state: State::Running,
            generators,
        })
    }

    pub(crate) fn mark(&mut self, what: &str, worker: Option<u32>, until: Option<Duration>) {
        let at = MonoTime::now().as_nanos();
        self.marks.push(FaultMark {
            at_ns: at,
            until_ns: until.map(|d| at + d.as_nanos() as u64),
            what: what.into(),
            worker,
        });
    }

    /// Applies `p`; the worker it names, or the next one running.
    pub(crate) fn inject(&mut self, p: &Planned, store: &Store) {
        *self.counts.entry(p.fault.name()).or_default() += 1;
        if p.fault == Fault::Freeze {
            if store.can_freeze() {
                store.freeze(p.pause);
                self.mark("freeze", None, Some(p.pause));
                let thaw = Instant::now() + p.pause;
                // The store is thawed by the main loop.
                self.freeze_until = Some(thaw);
            }
            return;
        }
        // Aim at a worker that holds a lease (its log grew in the last
        // second) where there is one, else at any running worker.
        let n = self.workers.len();
        let running = |i: &usize| matches!(self.workers[*i].state, State::Running);
        let Some(idx) = (0..n)
            .map(|i| (p.worker + i) % n)
            .filter(running)
            .find(|&i| self.holding.contains(&self.workers[i].id))
            .or_else(|| (0..n).map(|i| (p.worker + i) % n).find(running))
        else {
            return;
        };
        let (pid, id) = {
            let w = &self.workers[idx];
            (w.child.as_ref().map_or(0, Child::id), w.id)
        };
        match p.fault {
            Fault::Kill => {
                signal(pid, "KILL");
                self.mark("kill", Some(id), None);
                let w = &mut self.workers[idx];
                if let Some(mut c) = w.child.take() {
                    let _ = c.wait();
                }
                w.state = State::Dead {
                    restart_at: Instant::now() + Duration::from_millis(300),
                };
            }
            Fault::Stop => {
                signal(pid, "STOP");
                self.mark("stop", Some(id), Some(p.pause));
                self.workers[idx].state = State::Stopped {
                    until: Instant::now() + p.pause,
                };
            }
            Fault::Term => {
                signal(pid, "TERM");
                self.mark("term", Some(id), None);
                self.workers[idx].state = State::Terminating {
                    since: Instant::now(),
                };
            }
            Fault::Cut | Fault::Reset | Fault::Slow => {
                let Some((proxies, _)) = self.proxies.get(idx) else {
                    return;
                };
                let net = match p.fault {
                    // A partition: what the worker sends is held, nothing
                    // comes back, new connections hang.
                    Fault::Cut => Net::Blackhole,
                    // Connections reset, new ones closed at once.
                    Fault::Reset => Net::Drop,
                    // Every chunk a third of the TTL late, each way.
                    _ => Net::Delay(self.args.ttl / 3),
                };
                // The main loop heals it.
                for proxy in proxies {
                    proxy.set(net);
                }
                self.mark(p.fault.name(), Some(id), Some(p.pause));
                let until = Instant::now() + p.pause;
                let cut = &mut self.cut_until[idx];
                *cut = Some(cut.map_or(until, |t| t.max(until)));
            }
            Fault::Freeze
            | Fault::Restart
            | Fault::Member
            | Fault::BackendCrash
            | Fault::Failover
            | Fault::Wipe => {}
        }
    }
}

/// A worker about to start with clocks at `rate`: the real BOOTTIME now, and
/// the wall clock's offset from it (read between two BOOTTIME readings, so a
/// stall between the reads shows as at most their gap).
fn drifted_from_now(rate: Rate) -> Drifted {
    let before = MonoTime::now().as_nanos();
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let after = MonoTime::now().as_nanos();
    Drifted {
        rate,
        anchor_ns: before,
        unix_offset_ns: wall.saturating_sub(before / 2 + after / 2),
    }
}
