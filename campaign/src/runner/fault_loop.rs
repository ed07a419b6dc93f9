//! The third phase: until the run's length (or `--ids`), inject each
//! planned fault when its time comes, heal what a fault's pause ends,
//! restart the workers that stopped, and print a progress line.

use std::time::{Duration, Instant};

use leasehold_conformance::proxy::Fault as Net;
use leasehold_conformance::topology::FailoverError;

use super::args::Topology;
use super::collect::read_logs;
use super::serving::{Serving, signal};
use super::start::Campaign;
use super::workers::State;
use crate::availability::Failover;
use crate::plan::{Fault, Planned};
use crate::record::Record;

/// How long a wipe is tried again while the store does not answer (a
/// server still starting after a restart).
const WIPE_RETRIES: Duration = Duration::from_secs(10);

/// How many times a planned failover is tried while the store's HA makes
/// none.
const FAILOVER_ATTEMPTS: u32 = 2;

/// The count, and the timeline's label, of a failover attempt the store's
/// HA did not make: the primary was killed and started again, which is a
/// restart of the store, not a failover.
pub(crate) const FAILOVER_NOT_MADE: &str = "failover not made (the primary restarted)";

/// The count of the failovers the store's HA made only once asked for
/// (`SENTINEL FAILOVER`, `CLUSTER FAILOVER FORCE`), among `failover`.
const FAILOVER_ASKED: &str = "failover (of them, asked of the HA)";

/// Runs the fault loop of a started run, until its length has passed or
/// (`--ids`) its workers recorded that many IDs.
pub fn fault_loop(c: &mut Campaign) -> Result<(), String> {
    let mut last_progress = Instant::now();
    let mut last_count = Instant::now();
    let mut ids_so_far = 0u64;
    loop {
        let elapsed = c.started.elapsed();
        let ids_done = c.run.args.ids.is_some_and(|n| ids_so_far >= n);
        if elapsed >= c.outline.length || ids_done {
            break;
        }
        // A wipe waits for a frozen store to thaw: its statement would
        // hang there, and an operator's would too.
        if let Some(p) = c.faults.get(c.next_fault)
            && elapsed >= p.at
            && !(p.fault == Fault::Wipe && c.run.freeze_until.is_some())
        {
            let p = *p;
            c.fire(&p, elapsed)?;
            c.next_fault += 1;
        }
        c.heal()?;
        c.tend_workers()?;
        if c.run.args.ids.is_some() && last_count.elapsed() >= Duration::from_secs(10) {
            ids_so_far = read_logs(&c.run.dir)
                .iter()
                .flat_map(|(_, r)| r.iter())
                .map(|r| match r {
                    Record::Run { first, last, .. } => last - first + 1,
                    _ => 0,
                })
                .sum();
            last_count = Instant::now();
        }
        if last_progress.elapsed() >= Duration::from_secs(1) {
            c.progress(elapsed, ids_so_far);
            last_progress = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!();
    Ok(())
}

impl Campaign {
    /// Injects the planned fault `p`, `elapsed` into the run: on the store
    /// (restart, backend crash, cluster member) here, else on a worker.
    fn fire(&mut self, p: &Planned, elapsed: Duration) -> Result<(), String> {
        match p.fault {
            Fault::Restart => self.restart_store(p),
            Fault::BackendCrash => self.crash_backend(p, elapsed),
            Fault::Member => self.kill_member(p),
            Fault::Failover => self.fail_over(p),
            Fault::Wipe => self.wipe_store(p),
            _ => {
                self.run.inject(p, &self.store);
                Ok(())
            }
        }
    }

    fn restart_store(&mut self, p: &Planned) -> Result<(), String> {
        let run = &mut self.run;
        *run.counts.entry(p.fault.name()).or_default() += 1;
        let at = Instant::now();
        run.mark("restart", None, None);
        if let Err(e) = self.store.restart() {
            eprintln!("\ncampaign: restarting the store failed: {e}");
            return Err(format!("restarting the store failed: {e}"));
        }
        // Every member runs again.
        self.member_down = None;
        if let Some(m) = run.marks.last_mut() {
            m.until_ns = Some(m.at_ns + at.elapsed().as_nanos() as u64);
        }
        Ok(())
    }

    /// Wipes the lease records of the run's pools, as an operator would
    /// (`crate::store::wipe`), while the holders run. Shaded for the
    /// restart span of the run's leases: how long the wipe guard grants
    /// nothing from the first claim that saw the records gone.
    fn wipe_store(&mut self, p: &Planned) -> Result<(), String> {
        let run = &mut self.run;
        let span = leasehold::PoolSpec::new(
            leasehold::PoolName::new(self.fence_pools[0].clone()).map_err(|e| e.to_string())?,
            run.args.slots,
            run.args.ttl,
        )
        .map_err(|e| e.to_string())?
        .restart_span();
        run.mark("wipe", None, Some(span));
        // Right after a restart the server may still be starting.
        let deadline = Instant::now() + WIPE_RETRIES;
        loop {
            match self
                .fence_rt
                .block_on(crate::store::wipe(&self.store.url, &self.fence_pools))
            {
                Ok(()) => break,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("\ncampaign: wiping the store failed, trying again: {e}");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => {
                    eprintln!("\ncampaign: wiping the store failed: {e}");
                    return Err(format!("wiping the store failed: {e}"));
                }
            }
        }
        *self.run.counts.entry(p.fault.name()).or_default() += 1;
        Ok(())
    }

    /// The standby falls behind for a quarter of the fault's pause (about a
    /// third of the TTL: claims and renewals the primary acknowledges
    /// meanwhile are what the promotion forgets), then the primary is
    /// killed and the standby promoted. Shaded from the standby's stop
    /// until the new primary took over.
    ///
    /// A failover the store's own HA did not make (no promotion: the
    /// topology put the killed primary back) is said, counted apart, and
    /// tried once more; when the second makes none either the run fails,
    /// so that a run without its failovers is never taken for evidence
    /// about them.
    fn fail_over(&mut self, p: &Planned) -> Result<(), String> {
        let lag = p.pause / 4;
        for attempt in 1..=FAILOVER_ATTEMPTS {
            let run = &mut self.run;
            run.mark("failover", None, None);
            let started = Instant::now();
            match self.store.fail_over(lag, &run.pool) {
                Ok(made) => {
                    *run.counts.entry(p.fault.name()).or_default() += 1;
                    if made.forced {
                        *run.counts.entry(FAILOVER_ASKED).or_default() += 1;
                    }
                    if let Some(m) = run.marks.last_mut() {
                        let took_over = m.at_ns + (lag + made.down).as_nanos() as u64;
                        m.until_ns = Some(took_over);
                        // A synchronous standby has every acknowledged
                        // commit up to the kill; an asynchronous one what
                        // was confirmed before it was cut off, which began
                        // after the mark.
                        let knows_until = if run.args.topology == Topology::ReplicatedSync {
                            m.at_ns + lag.as_nanos() as u64
                        } else {
                            m.at_ns
                        };
                        run.failovers.push(Failover {
                            began_ns: m.at_ns,
                            knows_until_ns: knows_until,
                            took_over_ns: took_over,
                        });
                    }
                    return Ok(());
                }
                Err(FailoverError::NotPromoted(why)) => {
                    *run.counts.entry(FAILOVER_NOT_MADE).or_default() += 1;
                    if let Some(m) = run.marks.last_mut() {
                        m.what = FAILOVER_NOT_MADE.into();
                        m.until_ns = Some(m.at_ns + started.elapsed().as_nanos() as u64);
                    }
                    eprintln!(
                        "\ncampaign: failover attempt {attempt} of {FAILOVER_ATTEMPTS}: the \
                         store's HA made none; the killed primary was started again: {why}"
                    );
                    if attempt == FAILOVER_ATTEMPTS {
                        return Err(format!(
                            "the store's HA made no failover in {FAILOVER_ATTEMPTS} attempts: {why}"
                        ));
                    }
                }
                Err(e) => {
                    eprintln!("\ncampaign: failing the store over failed: {e}");
                    return Err(format!("failing the store over failed: {e}"));
                }
            }
        }
        Ok(())
    }

    fn crash_backend(&mut self, p: &Planned, elapsed: Duration) -> Result<(), String> {
        let run = &mut self.run;
        let aim = run.args.ttl * 2;
        run.mark("backend-crash", None, None);
        match self.store.crash_backend(p.worker, aim) {
            Ok(Some(crash)) => {
                *run.counts.entry(p.fault.name()).or_default() += 1;
                // Shaded until the server accepted connections again.
                if let Some(m) = run.marks.last_mut() {
                    m.until_ns = Some(m.at_ns + crash.recovery.as_nanos() as u64);
                }
                run.crashes.push(crash);
            }
            Ok(None) => {
                run.marks.pop();
                eprintln!(
                    "\ncampaign: no client backend to crash at {:.1} s; skipped",
                    elapsed.as_secs_f64()
                );
            }
            Err(e) => {
                eprintln!("\ncampaign: crashing a backend failed: {e}");
                return Err(format!("crashing a backend failed: {e}"));
            }
        }
        Ok(())
    }

    /// One member at a time, so the cluster keeps its quorum. Every other
    /// member fault, the first included, kills the Raft leader, so that an
    /// election happens while leases are held.
    fn kill_member(&mut self, p: &Planned) -> Result<(), String> {
        let killed: u64 = ["member", "member (leader)"]
            .iter()
            .filter_map(|k| self.run.counts.get(k))
            .sum();
        if let Serving::Cluster(c) = &mut self.store.serving
            && self.member_down.is_none()
        {
            let leader = if killed.is_multiple_of(2) {
                c.leader()
            } else {
                None
            };
            let victim = leader.unwrap_or(p.worker % c.len());
            c.kill(victim)
                .map_err(|e| format!("killing member {victim}: {e}"))?;
            let (count, label) = match leader {
                Some(_) => ("member (leader)", format!("leader m{victim}")),
                None => (p.fault.name(), format!("member m{victim}")),
            };
            *self.run.counts.entry(count).or_default() += 1;
            self.run.mark(&label, None, Some(p.pause));
            if leader.is_some()
                && let Some(m) = self.run.marks.last()
            {
                // Raft is the failover: every committed claim is on the
                // next leader, which no runner step names.
                self.run.failovers.push(Failover {
                    began_ns: m.at_ns,
                    knows_until_ns: m.at_ns,
                    took_over_ns: m.at_ns,
                });
            }
            self.member_down = Some((victim, Instant::now() + p.pause));
        }
        Ok(())
    }

    /// Ends the pauses that are over: a killed member starts again, a
    /// frozen store thaws, a worker's network heals.
    fn heal(&mut self) -> Result<(), String> {
        if let Some((victim, at)) = self.member_down
            && Instant::now() >= at
            && let Serving::Cluster(c) = &mut self.store.serving
        {
            c.restart(victim)
                .map_err(|e| format!("restarting member {victim}: {e}"))?;
            self.member_down = None;
        }
        let run = &mut self.run;
        if let Some(t) = run.freeze_until
            && Instant::now() >= t
        {
            self.store.thaw();
            run.freeze_until = None;
        }
        for (i, until) in run.cut_until.iter_mut().enumerate() {
            if until.is_some_and(|t| Instant::now() >= t) {
                for proxy in &run.proxies[i].0 {
                    proxy.set(Net::Pass);
                }
                *until = None;
            }
        }
        Ok(())
    }

    /// Moves each worker along: a stop that is over continues it, and a
    /// worker that exited, was killed or has stopped after a SIGTERM (or
    /// would not for 20 s) is started again.
    fn tend_workers(&mut self) -> Result<(), String> {
        let run = &mut self.run;
        for i in 0..run.workers.len() {
            let now = Instant::now();
            let restart = match &mut run.workers[i].state {
                State::Running => {
                    if let Some(c) = &mut run.workers[i].child
                        && let Ok(Some(status)) = c.try_wait()
                    {
                        eprintln!(
                            "\ncampaign: worker {} exited by itself: {status}",
                            run.workers[i].id
                        );
                        run.workers[i].child = None;
                        run.workers[i].state = State::Dead {
                            restart_at: now + Duration::from_secs(1),
                        };
                    }
                    false
                }
                State::Stopped { until } => {
                    if now >= *until {
                        if let Some(c) = &run.workers[i].child {
                            signal(c.id(), "CONT");
                        }
                        run.workers[i].state = State::Running;
                    }
                    false
                }
                State::Terminating { since } => {
                    let since = *since;
                    let done = run.workers[i]
                        .child
                        .as_mut()
                        .is_none_or(|c| !matches!(c.try_wait(), Ok(None)));
                    if !done
                        && now.duration_since(since) > Duration::from_secs(20)
                        && let Some(c) = &mut run.workers[i].child
                    {
                        let _ = c.kill();
                        let _ = c.wait();
                    }
                    done || now.duration_since(since) > Duration::from_secs(20)
                }
                State::Dead { restart_at } => now >= *restart_at,
            };
            if restart {
                let w = run.spawn(i)?;
                run.workers[i] = w;
            }
        }
        Ok(())
    }

    /// Notes which workers' logs grew (they hold a lease: faults aim at
    /// them) and prints the progress line.
    fn progress(&mut self, elapsed: Duration, ids_so_far: u64) {
        let run = &mut self.run;
        let running = run
            .workers
            .iter()
            .filter(|w| matches!(w.state, State::Running))
            .count();
        let mut bytes = 0;
        run.holding.clear();
        for w in &run.workers {
            let len =
                std::fs::metadata(run.dir.join(format!("w{}.rec", w.id))).map_or(0, |m| m.len());
            if run.sizes.insert(w.id, len).is_some_and(|was| len > was) {
                run.holding.insert(w.id);
            }
        }
        for len in run.sizes.values() {
            bytes += len;
        }
        eprint!(
            "\r[{:>4.0}s/{}s] workers {running}/{} running, {} faults injected, logs {:.1} MB{}   ",
            elapsed.as_secs_f64(),
            self.outline.length.as_secs(),
            run.workers.len(),
            self.next_fault,
            bytes as f64 / 1e6,
            if run.args.ids.is_some() {
                format!(", {ids_so_far} IDs")
            } else {
                String::new()
            },
        );
    }
}
