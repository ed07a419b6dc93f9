//! A deterministic simulator of leasehold's lease handling: several processes
//! lease the slots of one pool from a modelled store, on virtual time, under
//! seeded faults, and an independent checker judges the outcome over true
//! simulated time.
//!
//! # What runs, and what is modelled
//!
//! **Real code of `leasehold-core` and `leasehold-nonce`, unchanged:**
//!
//! - the lease state machine, [`Machine`] (`core/src/machine.rs`): every
//!   decision (when to acquire, renew, give up, the local deadline through
//!   `Timing::deadline`, backoff with its jitter, rule 11's store-clock jump
//!   check) is the machine's own, fed the inputs the lease manager's tokio task feeds it;
//! - the lease gate, [`LeaseGate`] (`core/src/gate.rs`): the simulated lease manager
//!   opens, extends and closes it with the same calls as the lease manager's tokio task
//!   (through `testing::GateControl`), and the checker asks the real
//!   `LeaseGate::check` whether the process may generate;
//! - each process's Unix offset, [`UnixOffset`] (`core/src/clock.rs`, rule
//!   10): every measurement of `wall − mono` (the lease manager's at each report,
//!   the generator's as a window opens) goes through its `observe`, and
//!   ceilings and stamps use the offset it adopts; while it holds a step
//!   pending, generation refuses;
//! - the timings, built and validated by `LeaseConfig::build`;
//! - the ID generators of `leasehold-nonce` (`sim/src/generate.rs`): in
//!   each process two components each build a `Sortable64` on its gate, as
//!   two parts of an application that each take the lease manager's gate
//!   would, fed a time source that reads the process's simulated monotonic
//!   clock and maps it to Unix time through the process's `UnixOffset` (the
//!   one its lease manager measures with: one per process, as
//!   `SystemClock` keeps it). As shipped the gate refuses the second a
//!   generation state of its own (`AttachError::InUse`, rule 9) and it
//!   clones the first; the `second-generation-state` plant gives it one. At
//!   each instant a window opens, each component takes two IDs with
//!   `try_next`, and a release reports what the gate's states issued
//!   (`LeaseGate::issued`) when that is above the modelled stamps;
//! - with the `planted-bugs` feature, the plants of `leasehold_core::plant`,
//!   switched on in the process that runs the simulation.
//!
//! **Modelled (`sim/src/lib.rs`), and why:**
//!
//! - *The lease manager's task* (`core/src/manager.rs`) is async code on tokio; its logic is
//!   small and replicated here action for action: one action at a time, a
//!   call raced against the bound its action carries (an answer after the
//!   bound is never seen), `sent_at` read just before the request leaves,
//!   the ceiling computed from `Timing::deadline`, the renewal's answer fed
//!   as `Renewed`/`RenewLost`/`RenewRetry`, a timeout as `AcquireFailed
//!   (Unreachable)`/`RenewRetry`, a release awaited up to its bound. Running
//!   the lease manager's tokio task itself under a simulated runtime would need a time
//!   seam in the lease manager and its timers and a simulated network under the
//!   strategy; the machine-level model runs no tokio and no real clock, which
//!   is what makes a seed cost well under a millisecond. What the lease manager adds
//!   beyond the model decides nothing the checker judges (events, telemetry,
//!   health), can only close a gate sooner (loss signals from store
//!   watches), or is not modelled (the lease cache's hand-over between two
//!   managers of one process; a start cancelled before it returns).
//! - *The store*: one pool, granted on the store's own clock (rate drift,
//!   forward steps) with a configurable expiry resolution (1 µs as SQL, 1 ms
//!   as Valkey, 500 ms as etcd's tick, where a lease can expire one tick
//!   early): a slot is granted only when free or expired, a renewal or a
//!   release only counts for the holder of an unexpired lease, fences grow
//!   per slot as SQL and Valkey make them, `max(previous + 1, store clock in
//!   µs)`, and the slot's floor is the highest ceiling (acquire, renewal) or
//!   issued timestamp (release) a holder reported, handed to the next grant
//!   (DESIGN.md, rule 8). It crashes and restarts (down up to 2 s: what
//!   arrives meanwhile is not answered), forgetting the acknowledged writes
//!   of the last span before the crash (none, up to 1 s, or up to two TTLs:
//!   PostgreSQL with `fsync` off, Valkey with `appendfsync everysec`);
//!   the pool's records are wiped (`TRUNCATE`, `FLUSHALL`); and it fails
//!   over to an asynchronous replica (unreachable up to 1 s around the
//!   switch) that lacks the acknowledged writes of the last span before it
//!   (drawn as a crash's) and whose uptime does not start again: it has
//!   been running all along. Each comes from a stream of the seed's own.
//!   Rule 12's guards are modelled as the backends keep them: nothing is
//!   granted (`StoreRestarted`, with when claims resume) until the store
//!   has been up for the pool's restart span (TTL + 2 × `max_clock_skew`),
//!   nor for one span after a claim first found the pool's record gone,
//!   nor for one span after a claim first saw a new incarnation of the
//!   store (the promotion guard: PostgreSQL's timeline, Valkey's
//!   replication ID, MySQL's server identity, read in the claim's own
//!   round trip); renewals go on, and those of leases the store forgot
//!   answer `Lost`. The `no-restart-guard` plant turns all three off, as it
//!   does in the backends.
//! - *Fenced writes*: each holder writes to its slot's resource with its
//!   grant's fence once it may generate, and a holder paused while it
//!   generates may be in the middle of a write, which goes out when it
//!   resumes, whatever its gate says by then. The store keeps a fence table
//!   as `FenceTable` does (rule 7): per resource the fence of its last
//!   write, and a write is taken only with a fence at least that, in the
//!   same step; the `fence-unchecked` plant takes any fence of the
//!   resource's pool and slot. The fence table is the application's own
//!   data: the store's crashes, wipes and failovers leave it alone.
//!
//!   Not modelled: a restart or failover that forgets the pool's record
//!   itself or the guards' own records of when a claim saw the pool gone or
//!   a new incarnation, a promoted replica's clock of its own (it keeps the
//!   store's), a split brain (an old primary still answering its clients);
//!   in the Kubernetes mode, the ambiguity rule's GET and adoption of a
//!   write whose answer was lost, the wipe guard, revokes and pinned slots.
//! - *The Kubernetes mode* (`sim/src/k8s.rs`), a quarter of the seeds,
//!   drawn from a stream of their own: the store as `lease-k8s` uses the API
//!   server, with no expiry at all. Each slot is a Lease whose
//!   resourceVersion, from one counter, every write bumps. A claim LISTs
//!   (a round trip); as the answer arrives the claimer records when it
//!   first saw each Lease at its resourceVersion on its own monotonic clock,
//!   and takes absent and released slots at once and a held one only once
//!   its takeover time (first sighting + the longer of the Lease's duration
//!   and the TTL + the takeover margin + 2 % of that) has passed on that
//!   clock: the sightings, the takeover time and the choice are
//!   `leasehold_core::observed`'s, the code `lease-k8s` runs. It writes to
//!   up to four candidates in turn, each write conditioned on the
//!   resourceVersion seen (a conflict moves on), and LISTs again. The fence
//!   is the winning write's resourceVersion; the floor annotation is raised
//!   to the claimer's ceiling by the claim and renewals and set to what was
//!   issued by a release. A renewal or release succeeds while the Lease
//!   names its holder. The takeover margin is `lease-k8s`'s default 1 s,
//!   the pool's safety margin, or none. Kubernetes forgets nothing on a
//!   crash (etcd keeps the Leases) and judges no expiry on a clock of its
//!   own: no store crashes, wipes, failovers or clock faults in this mode.
//! - *Processes*: a monotonic clock each (`CLOCK_BOOTTIME`: it counts on
//!   through a pause and never steps), with an offset and a rate drift (from
//!   none to 5 %, far beyond the 500 ppm each host is assumed to keep); a
//!   wall clock skewed up to ±3 s from true Unix time, and stepped forward
//!   (within and beyond the step limit) and back (the generator measures
//!   at each event of its process and at each step, where the real one
//!   measures about once a second); pauses up to three TTLs (GC, SIGSTOP, suspend: nothing of the
//!   process runs, and what arrived meanwhile is handled after it); kills
//!   and graceful shutdowns, each followed by a restart as a new process;
//!   a scheduling latency for the lease manager's timers (0–2 ms, now and then up
//!   to 100 ms) during which generation, which checks the gate itself, may
//!   run first.
//! - *The generator's worst case*: the real generators issue IDs only at
//!   the instants a window opens, a few each, and with `try_next`, which
//!   never waits (the clocks move only between events: a wait for the next
//!   millisecond or a floor would spin for ever; such a component takes
//!   nothing until a later window). What a generator could stamp all
//!   through a window is modelled from its timestamp rules: a value is
//!   stamped strictly after the gate's floor and its own history, never
//!   past the gate's ceiling nor ahead of its own wall clock.
//! - *The network per process*: a delay each way (answers reorder), losses,
//!   partitions, answers delivered twice, and the compound fault "a slow
//!   answer (up to one TTL), then a cut".
//!
//! # The checker
//!
//! Independent of the code it judges: it sees only the gates, the store's
//! grants and the IDs the generators issued. A process *may generate* at a true instant when it is not paused
//! and the real `LeaseGate::check`, given the process's own clock reading at
//! that instant, answers yes: the window in which it would issue IDs. The
//! windows are cut at every event of the process (where its gate can change)
//! and at the instant its clock reaches the gate's deadline, if the gate
//! refuses from there. A violation is:
//!
//! - two processes that may generate on one slot at the same true instant;
//! - one timestamp of a slot that two generators (two processes, or one
//!   process before and after a restart) may both have stamped: an ID
//!   issued twice;
//! - one ID the real generators issued twice, whoever issued them (the IDs
//!   carry their slot, so they are unique in the pool): the trace names
//!   both issuers (process, incarnation, component);
//! - on one slot, a window that starts later than another's with a smaller
//!   fence (a stale holder generating after a newer grant);
//! - a fence the store grants that is not above every earlier fence of its
//!   slot;
//! - a fenced write taken with a fence below one already taken on its
//!   resource (a stale holder's write over a newer holder's).
//!
//! Its second kind of finding is an **outage**, reported apart (`OUTAGE`,
//! not `VIOLATION`): no ID is issued twice, but a process is kept from
//! generating where nothing excuses it (`liveness.rs` derives both
//! conditions, each one the code as shipped never meets):
//!
//! - a holder whose lease ends (its deadline passes, the store answers
//!   `Lost`, or the store's clock jumped) although nothing faulted it from
//!   one TTL before it last confirmed the lease up to the loss: no pause,
//!   partition, lost message, slow or duplicated answer, end, scheduling
//!   latency beyond 2 ms, no crash, wipe, failover or clock step of the
//!   store, no drift beyond 500 ppm of its clock or the store's (rule 3);
//! - a process whose gate lets it generate but which refuses for a pending
//!   wall-clock step, although its wall clock is within the step limit of
//!   the highest Unix offset it has already used (rule 10).
//!
//! # Seeds beyond the assumptions
//!
//! DESIGN.md's rule 2 assumes clocks whose rates differ by at most what the
//! safety margin covers. A seed whose drifts (or store-clock steps) exceed
//! what its margin covers is marked *beyond*: a violation there is what the
//! margin is documented not to cover, not a bug, and is counted apart. A
//! forward step of the store's clock counts against the margin only until
//! the next confirmed operation: one that every lease alive at the step
//! got through (a renewal or release the store accepted after it) is
//! *caught*, and not counted, where the store forgets nothing
//! (`coverage.rs` says why that is exact); this is judged over true time
//! from what the run did, so [`Outcome::covered`] can be true where
//! [`Scenario::covered`], judged before the run, is not. A
//! store that forgets (a crash that loses writes, a wipe, a failover to a
//! replica that lacks some) may lose the floors too, and then only the
//! restart span's two skews keep a successor's clock past what a forgotten
//! holder stamped, which holds for
//! wall clocks within `max_clock_skew` of each other (rule 12's
//! assumption): such a seed draws its wall-clock skews and steps an eighth
//! as large, and is beyond when the spread of its wall clocks (skew, drift
//! and steps, over the run) still exceeds `max_clock_skew`. In the
//! Kubernetes mode the store's clock plays no part: a seed is beyond when
//! some holder's `ttl − margin` on its clock takes longer in true time than
//! some observer's takeover wait on its own (the holder's request left
//! before the write the observer first saw). Every other seed is
//! *covered*, and a violation there is a bug.
//!
//! A plant whose rule matters only beyond the assumptions (rule 11's
//! store-clock check, a defence against a clock that drifts beyond what
//! the margin covers) is judged differentially there ([`sweep_judged`],
//! the binary's `--beyond`): a seed beyond the assumptions that violates
//! with the plant is run again as shipped, in a process without it, and
//! is a finding when it holds there. It does not show that the shipped
//! code holds beyond the assumptions: there any change of schedule moves
//! violations between seeds, so some seeds violate only as shipped, and a
//! count of findings alone says little (a control plant gets as many). A
//! finding is *caused* by the plant ([`caused_by`]) when the two traces
//! of its seed first differ ([`first_difference`]) at the plant's own
//! branch acting on a lease ([`branch_at`]: as shipped the lease ends
//! there, for rule 11's check or at the local deadline; planted it goes
//! on) and the violation, no earlier, involves that very lease, by
//! process and fence ([`involves`]). Up to that line the two runs are
//! the same run, so the lease the plant kept is the one thing that
//! differs; the criterion is conservative, crediting nothing the plant
//! does after the traces have parted. `no-margin` is not judged so: its
//! branch acts on every claim's ceiling, before any lease exists.

mod coverage;
mod liveness;
mod timeline;

pub use timeline::timeline;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use leasehold_core::machine::{Action, Input, Machine};
use leasehold_core::rand::SplitMix;
use leasehold_core::testing::GateControl;
mod k8s;

pub use k8s::Kubernetes;

use leasehold_core::{
    AcquireError, DEFAULT_MAX_CLOCK_SKEW, Fence, Floor, Grant, LeaseConfig, LeaseGate, MonoTime,
    Reason, Timing, Token, UnixOffset, min_safety_margin,
};

mod generate;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;
/// True Unix time at true time 0 (ns): 2026-12-01.
const EPOCH: u64 = 1_796_083_200 * SEC;

/// The shape of a run: how many processes, how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// Processes on the pool (at least 2).
    pub processes: u32,
    /// Simulated seconds.
    pub secs: u64,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            processes: 5,
            secs: 60,
        }
    }
}

/// A process's clock: `local(T) = base + T × (1 + ppm / 10⁶)`, in ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockSpec {
    /// The reading at true time 0.
    pub base: u64,
    /// Rate drift, parts per million (negative: slow).
    pub ppm: i64,
}

impl ClockSpec {
    fn local(&self, t: u64) -> u64 {
        let drift = (i128::from(t) * i128::from(self.ppm)).div_euclid(1_000_000);
        (i128::from(self.base) + i128::from(t) + drift) as u64
    }

    /// The first true instant at which the clock reads at least `l`.
    fn true_at(&self, l: u64) -> u64 {
        if l <= self.base {
            return 0;
        }
        if l == u64::MAX {
            return u64::MAX;
        }
        let span = i128::from(l - self.base);
        let mut t = (span * 1_000_000 / (1_000_000 + i128::from(self.ppm))).max(0) as u64;
        while self.local(t) < l {
            t += 1;
        }
        while t > 0 && self.local(t - 1) >= l {
            t -= 1;
        }
        t
    }
}

/// One process's faults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcSpec {
    /// Its monotonic clock.
    pub clock: ClockSpec,
    /// When it starts (true ns).
    pub start_at: u64,
    /// One-way network delay, least and most (ns).
    pub delay: (u64, u64),
    /// Messages lost, per million.
    pub loss_ppm: u64,
    /// Answers that come slowly (up to one TTL late), per million.
    pub slow_ppm: u64,
    /// Of the slow answers, those followed by a cut, per million.
    pub cut_after_slow_ppm: u64,
    /// Pauses: (start, length), true ns.
    pub pauses: Vec<(u64, u64)>,
    /// Partitions: (start, length), true ns.
    pub cuts: Vec<(u64, u64)>,
    /// How far its wall clock is from true Unix time (ns, + ahead).
    pub wall_skew: i64,
    /// Steps of its wall clock: (true ns, by how much, ns; + forward).
    pub wall_steps: Vec<(u64, i64)>,
    /// Answers delivered twice, per million.
    pub dup_ppm: u64,
    /// Ends and restarts: (when, down for how long, graceful). A graceful
    /// end is a shutdown (the gate closes, the lease is released); otherwise
    /// the process is killed (nothing more of it runs, its lease expires).
    pub ends: Vec<(u64, u64, bool)>,
}

/// Everything a seed fixes before the run: the pool, the timings, the store
/// and the faults of every process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scenario {
    /// The seed it came from (it also seeds what is drawn during the run).
    pub seed: u64,
    /// Slots in the pool.
    pub slots: u32,
    /// The lease TTL.
    pub ttl: Duration,
    /// The safety margin.
    pub margin: Duration,
    /// The renew interval.
    pub renew: Duration,
    /// First and largest retry delays.
    pub backoff: (Duration, Duration),
    /// The store's expiry resolution.
    pub resolution: Duration,
    /// The store clock's rate drift (ppm).
    pub store_ppm: i64,
    /// Forward steps of the store's clock: (true ns, size ns).
    pub store_steps: Vec<(u64, u64)>,
    /// Crashes of the store, each followed by a restart: (true ns, down for
    /// how long, ns, how much of the acknowledged writes it forgets: those
    /// of the last this many ns before the crash).
    pub store_restarts: Vec<(u64, u64, u64)>,
    /// Wipes of the pool's records (true ns).
    pub wipes: Vec<u64>,
    /// Failovers to an asynchronous replica: (true ns, unreachable for how
    /// long, ns, how much of the acknowledged writes the replica lacks:
    /// those of the last this many ns before the switch).
    pub promotions: Vec<(u64, u64, u64)>,
    /// The processes.
    pub procs: Vec<ProcSpec>,
    /// Simulated length (ns).
    pub length: u64,
    /// The Kubernetes mode: Leases that nothing expires, expiry judged by
    /// each claimer on its own clock (`k8s.rs`); `None` for a store that
    /// expires leases on its own clock.
    pub kubernetes: Option<Kubernetes>,
}

impl Scenario {
    /// The scenario of `seed`.
    pub fn generate(seed: u64, params: &Params) -> Self {
        let mut r = SplitMix::new(seed ^ 0x5eed_5eed_5eed_5eed);
        let length = params.secs * SEC;
        let ttl_ms = [1_000u64, 2_000, 5_000, 10_000][r.below(4) as usize];
        let ttl = Duration::from_millis(ttl_ms);
        let resolution = match r.below(3) {
            0 => Duration::from_micros(1),
            1 => Duration::from_millis(1),
            _ => Duration::from_millis(500).min(ttl / 8),
        };
        let min = min_safety_margin(ttl, resolution);
        let extra = Duration::from_nanos(r.below(u64::try_from(min.as_nanos()).unwrap_or(1) + 1));
        let margin = (min + extra).min(ttl / 4);
        let usable = ttl - margin;
        let renew = (ttl / 3).min(usable / 2);
        let backoff_initial = Duration::from_millis(1 + r.below(50));
        let backoff_max = (backoff_initial + Duration::from_millis(r.below(500))).min(ttl);
        let slots = 1 + r.below(u64::from(params.processes.max(2) - 1).min(3)) as u32;
        let store_ppm = drift(&mut r);
        let mut store_steps = Vec::new();
        if r.below(8) == 0 {
            let at = r.below(length);
            let margin_ns = u64::try_from(margin.as_nanos()).unwrap_or(0);
            let mut size = r.below(2 * margin_ns + 1);
            // Half of them between the margin and half a TTL, from a stream
            // of their own: beyond what the margin covers, but caught by a
            // renewal that reaches the store in time (`coverage.rs`).
            let mut big = SplitMix::new(seed ^ 0x0b16_57e9_0b16_57e9);
            if big.below(2) == 0 {
                let half = u64::try_from((ttl / 2).as_nanos()).unwrap_or(0);
                size = margin_ns + big.below(half.saturating_sub(margin_ns) + 1);
            }
            store_steps.push((at, size));
        }
        let ttl_ns = ttl_ms * MS;
        // Wall-clock steps come from a stream of their own.
        let mut steps = SplitMix::new(seed ^ 0x57e9_57e9_57e9_57e9);
        // Store restarts and wipes come from a stream of their own.
        let mut store = SplitMix::new(seed ^ 0x0570_4e57_0570_4e57);
        let mut store_restarts = Vec::new();
        if store.below(3) == 0 {
            let at = store.below(length);
            let down = store.below(2 * SEC);
            let lose = match store.below(4) {
                0 => 0,
                1 => store.below(SEC),
                _ => store.below(2 * ttl_ms * MS),
            };
            store_restarts.push((at, down, lose));
        }
        let mut wipes = Vec::new();
        if store.below(6) == 0 {
            wipes.push(store.below(length));
        }
        // Promotions of a replica come from a stream of their own.
        let mut promote = SplitMix::new(seed ^ 0x9e0e_07ed_9e0e_07ed);
        let mut promotions = Vec::new();
        if promote.below(6) == 0 {
            let at = promote.below(length);
            let down = promote.below(SEC);
            let lose = match promote.below(4) {
                0 => 0,
                1 => promote.below(SEC),
                _ => promote.below(2 * ttl_ms * MS),
            };
            promotions.push((at, down, lose));
        }
        // Kubernetes forgets nothing on a crash (etcd keeps the Leases) and
        // judges no expiry on its own clock: no store faults in that mode.
        let kubernetes = k8s::draw(seed, margin);
        if kubernetes.is_some() {
            store_steps.clear();
            store_restarts.clear();
            wipes.clear();
            promotions.clear();
        }
        // A store that can forget is run as its opt-in assumes (DESIGN.md,
        // rule 12): the hosts' wall clocks within `max_clock_skew` of each
        // other, so their skews and steps are kept small (`covered` checks
        // what is left).
        let forgets = store_restarts.iter().any(|r| r.2 > 0)
            || !wipes.is_empty()
            || promotions.iter().any(|r| r.2 > 0);
        let tame = |v: i64| if forgets { v / 8 } else { v };
        let procs = (0..params.processes.max(2))
            .map(|_| {
                let clock = ClockSpec {
                    base: SEC + r.below(1_000 * SEC),
                    ppm: drift(&mut r),
                };
                let start_at = r.below(2 * SEC);
                let d0 = 50_000 + r.below(5 * MS);
                let delay = (d0, d0 + r.below(10 * MS));
                let loss_ppm = [0, 1_000, 20_000, 100_000][r.below(4) as usize];
                let slow_ppm = [0, 5_000, 50_000][r.below(3) as usize];
                let cut_after_slow_ppm = [0, 500_000, 1_000_000][r.below(3) as usize];
                let pauses = (0..r.below(4))
                    .map(|_| {
                        let len = match r.below(3) {
                            0 => r.below(50 * MS),
                            1 => r.below(ttl_ns),
                            _ => r.below(3 * ttl_ns),
                        };
                        (r.below(length), len)
                    })
                    .collect();
                let cuts = (0..r.below(3))
                    .map(|_| (r.below(length), r.below(2 * ttl_ns)))
                    .collect();
                let dup_ppm = [0, 10_000][r.below(2) as usize];
                let wall_skew = match r.below(3) {
                    0 => 0,
                    1 => r.below(200 * MS) as i64 - 100 * MS as i64,
                    _ => r.below(6 * SEC) as i64 - 3 * SEC as i64,
                };
                let ends = (0..r.below(3))
                    .map(|_| (r.below(length), r.below(2 * ttl_ns), r.below(2) == 0))
                    .collect();
                let wall_steps = (0..steps.below(3))
                    .map(|_| {
                        let by = match steps.below(3) {
                            0 => steps.below(100 * MS) as i64,
                            1 => (100 * MS + steps.below(3 * SEC)) as i64,
                            _ => -(steps.below(3 * SEC) as i64),
                        };
                        (steps.below(length), tame(by))
                    })
                    .collect();
                let wall_skew = tame(wall_skew);
                ProcSpec {
                    clock,
                    wall_steps,
                    start_at,
                    delay,
                    loss_ppm,
                    slow_ppm,
                    cut_after_slow_ppm,
                    pauses,
                    cuts,
                    wall_skew,
                    dup_ppm,
                    ends,
                }
            })
            .collect();
        Scenario {
            seed,
            slots,
            ttl,
            margin,
            renew,
            backoff: (backoff_initial, backoff_max),
            resolution,
            store_ppm,
            store_steps,
            store_restarts,
            wipes,
            promotions,
            procs,
            length,
            kubernetes,
        }
    }

    /// Whether the store forgets anything in this scenario: a restart that
    /// loses acknowledged writes, a wipe, or a promotion of a replica that
    /// lacks some.
    pub fn forgets(&self) -> bool {
        self.store_restarts.iter().any(|r| r.2 > 0)
            || !self.wipes.is_empty()
            || self.promotions.iter().any(|r| r.2 > 0)
    }

    /// How far apart the hosts' wall clocks get over the run (ns): the
    /// widest spread between one process's largest error from true Unix
    /// time (skew, drift, every step so far) and another's smallest.
    pub fn wall_spread(&self) -> u64 {
        let mut lo = i128::MAX;
        let mut hi = i128::MIN;
        for p in &self.procs {
            let drift = |t: u64| (i128::from(t) * i128::from(p.clock.ppm)).div_euclid(1_000_000);
            let mut steps = p.wall_steps.clone();
            steps.sort_unstable();
            let mut sum = i128::from(p.wall_skew);
            let mut points = vec![(0u64, sum)];
            for &(at, by) in &steps {
                points.push((at, sum));
                sum += i128::from(by);
                points.push((at, sum));
            }
            points.push((self.length, sum));
            for (t, e) in points {
                let e = e + drift(t.min(self.length));
                lo = lo.min(e);
                hi = hi.max(e);
            }
        }
        u64::try_from(hi - lo).unwrap_or(0)
    }

    /// The timings every process uses, validated as a real configuration is.
    pub fn timing(&self) -> Timing {
        LeaseConfig::builder("sim")
            .pool_size(self.slots)
            .ttl(self.ttl)
            .safety_margin(self.margin)
            .renew_interval(self.renew)
            .backoff_initial(self.backoff.0)
            .backoff_max(self.backoff.1)
            .build()
            .map(|c| c.timing().clone())
            .unwrap_or_else(|e| panic!("seed {}: timings refused: {e}", self.seed))
    }

    /// Whether the margin covers every clock of this scenario: from a
    /// request's send to the local deadline each process's clock counts
    /// `ttl − margin`, and that must take no longer in true time than the
    /// store takes from receiving it to the earliest expiry its resolution
    /// and steps allow (DESIGN.md, rule 2). Exact: the simulated gate reads
    /// no coarse clock, so the 20 ms of the margin kept for one is not
    /// counted as spent.
    ///
    /// Before the run, every store-clock step counts against the margin;
    /// the run's outcome ([`Outcome::covered`]) leaves out the steps the
    /// next confirmed operation caught (`coverage.rs`).
    pub fn covered(&self) -> bool {
        self.covered_but(0)
    }

    /// [`Scenario::covered`], with `caught` ns of the store's steps not
    /// counted against the margin.
    fn covered_but(&self, caught: u64) -> bool {
        if let Some(k) = self.kubernetes {
            return k8s::covered(self, k);
        }
        let ttl = self.ttl.as_secs_f64();
        let m = self.margin.as_secs_f64();
        let res = self.resolution.as_secs_f64();
        let jumps: u64 = self.store_steps.iter().map(|s| s.1).sum();
        let jumps = jumps.saturating_sub(caught) as f64 / 1e9;
        let ds = self.store_ppm as f64 / 1e6;
        let store_side = (ttl - res - jumps) / (1.0 + ds);
        let clocks = self.procs.iter().all(|p| {
            let dp = p.clock.ppm as f64 / 1e6;
            (ttl - m) / (1.0 + dp) <= store_side
        });
        // A store that forgets loses floors, and then only the restart span's
        // two skews keep a successor's clock past what a forgotten holder
        // stamped: that holds for wall clocks within `max_clock_skew` of
        // each other (DESIGN.md, rule 12).
        let skew = u64::try_from(DEFAULT_MAX_CLOCK_SKEW.as_nanos()).unwrap_or(u64::MAX);
        clocks && (!self.forgets() || self.wall_spread() <= skew)
    }

    /// How many faults it holds (for the shrinker's order).
    pub fn faults(&self) -> usize {
        self.store_steps.len()
            + self.store_restarts.len()
            + self.wipes.len()
            + self.promotions.len()
            + self
                .procs
                .iter()
                .map(|p| {
                    p.pauses.len()
                        + p.cuts.len()
                        + p.ends.len()
                        + usize::from(p.dup_ppm > 0)
                        + usize::from(p.wall_skew != 0)
                        + p.wall_steps.len()
                        + usize::from(p.loss_ppm > 0)
                        + usize::from(p.slow_ppm > 0)
                        + usize::from(p.clock.ppm != 0)
                })
                .sum::<usize>()
            + usize::from(self.store_ppm != 0)
    }
}

/// A rate drift: none, within the 500 ppm a host keeps, or far beyond.
fn drift(r: &mut SplitMix) -> i64 {
    match r.below(10) {
        0..=3 => 0,
        4..=8 => r.below(1_001) as i64 - 500,
        _ => r.below(100_001) as i64 - 50_000,
    }
}

/// What the checker found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// True time of the violation (ns).
    pub at: u64,
    /// What breaks.
    pub what: String,
}

/// The outcome of one seed.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// Whether the margin covers its clocks (see [`Scenario::covered`]),
    /// with the store-clock steps a confirmed operation caught left out.
    pub covered: bool,
    /// Whether it is covered only because a confirmed operation caught
    /// its store-clock steps (`coverage.rs`).
    pub steps_caught: bool,
    /// The first violation, if any.
    pub violation: Option<Violation>,
    /// The first outage, if any: a process kept from generating where
    /// nothing excuses it (`liveness.rs`). Not a uniqueness violation.
    pub outage: Option<Violation>,
    /// Grants the store made.
    pub grants: u64,
    /// Total length of the windows in which some process may generate (ns).
    pub held_ns: u64,
    /// The trace, when asked for.
    pub trace: String,
}

impl Outcome {
    /// The violation, or with `outage` the outage.
    pub fn finding(&self, outage: bool) -> Option<&Violation> {
        if outage {
            self.outage.as_ref()
        } else {
            self.violation.as_ref()
        }
    }
}

/// Runs `seed`.
pub fn run_seed(seed: u64, params: &Params, trace: bool) -> Outcome {
    run(&Scenario::generate(seed, params), trace)
}

/// Runs a scenario.
pub fn run(sc: &Scenario, trace: bool) -> Outcome {
    let mut w = World::new(sc, trace);
    w.go();
    let violation = w.check();
    if let (Some(v), true) = (&violation, trace) {
        let _ = writeln!(w.trace, "{} VIOLATION {}", secs(v.at), v.what);
    }
    let outage = w.outage();
    if let (Some(v), true) = (&outage, trace) {
        let _ = writeln!(w.trace, "{} OUTAGE {}", secs(v.at), v.what);
    }
    // Store-clock steps the next confirmed operation caught are not
    // counted against the margin, where the store forgets nothing.
    let caught: u64 = if sc.forgets() {
        0
    } else {
        w.store_steps.caught().sum()
    };
    let covered = sc.covered_but(caught);
    if trace && !sc.store_steps.is_empty() {
        let (c, n) = w.store_steps.counts();
        let _ = writeln!(
            w.trace,
            "coverage: {c} of {n} store-clock steps caught by a confirmed operation{}; covered {covered}",
            if sc.forgets() {
                " (not counted: the store forgets)"
            } else {
                ""
            }
        );
    }
    Outcome {
        seed: sc.seed,
        covered,
        steps_caught: covered && !sc.covered(),
        violation,
        outage,
        grants: w.grants,
        held_ns: w.segments.iter().map(|s| s.end - s.start).sum(),
        trace: w.trace,
    }
}

/// Shrinks a failing scenario: fewer processes, fewer faults, shorter,
/// keeping whatever still fails in the same way. Returns the smallest found
/// and each step.
///
/// A violation is shrunk as a violation; a seed with an outage and no
/// violation, as an outage. A candidate is kept only if it is covered and
/// its finding is of the same kind as the original's: the same message
/// with its numbers left out (so the same check, naming processes, slots
/// and fences that may be renumbered). Several greedy walks, each to a
/// fixpoint, from several starts; the smallest end is kept (by `size`: processes, then faults, then settings, fault time and length).
/// The draws of a run come from per-process streams, so dropping a
/// process leaves the others' draws alone, and a rate set to zero still
/// draws what it drew; the scenarios seeds generate are untouched.
/// The binary prints the shrunk scenario's trace step by step and, with
/// `--timeline`, writes its [`timeline`], which `cargo xtask sim` draws as
/// `target/sim/finding-<plants>-<seed>.svg`.
pub fn shrink(sc: &Scenario) -> (Scenario, Vec<String>) {
    let first = run(sc, false);
    let outage = first.violation.is_none();
    let kind = match first.finding(outage) {
        Some(v) if first.covered => finding_kind(&v.what),
        _ => return (sc.clone(), Vec::new()),
    };
    // What the walks keep: a covered scenario with a finding of the same
    // kind (a walk that may pass through a finding of another kind, keeping
    // only ends of the same kind, reached no smaller end for any plant).
    let fails = |s: &Scenario| {
        let o = run(s, false);
        o.covered
            && o.finding(outage)
                .is_some_and(|v| finding_kind(&v.what) == kind)
    };
    // Greedy walks to their fixpoints: one takes the first candidate that
    // still fails, one the smallest, one the first but tries dropping a
    // process only after every other candidate, one the first but tries
    // dropping a kind of fault from every process at once last. Each takes
    // only candidates smaller than where it is, so each ends. Where a walk
    // gets stuck depends on the order it went in (a process the finding
    // needs may be droppable once some other faults are gone, and the other
    // way round), so the walks start from the original, from it without
    // each one process, and (up to 8 processes: 28 pairs) from each two of
    // its processes alone, where those still fail; the smallest end wins,
    // the earliest on a tie.
    let mut starts = vec![(sc.clone(), Vec::new())];
    let n = sc.procs.len();
    if n > 2 {
        let mut kept: Vec<Vec<usize>> = (0..n)
            .map(|i| (0..n).filter(|&j| j != i).collect())
            .collect();
        if (4..=8).contains(&n) {
            for a in 0..n {
                kept.extend((a + 1..n).map(|b| vec![a, b]));
            }
        }
        for keep in kept {
            let mut c = sc.clone();
            c.procs = keep.iter().map(|&i| sc.procs[i].clone()).collect();
            c.slots = c.slots.min(c.procs.len() as u32 - 1).max(1);
            if fails(&c) {
                let kept = keep.iter().map(|i| format!("p{i}")).collect::<Vec<_>>();
                let step = describe(&format!("keep only {}", kept.join(", ")), &c);
                starts.push((c, vec![step]));
            }
        }
    }
    let mut best: Option<(Scenario, Vec<String>)> = None;
    for (start, first_steps) in &starts {
        for walk in [
            Walk::First,
            Walk::Smallest,
            Walk::ProcessesLast,
            Walk::AllLast,
        ] {
            let (end, steps) = descend(start, outage, &fails, walk);
            if best.as_ref().is_none_or(|b| size(&end) < size(&b.0)) {
                best = Some((end, [first_steps.clone(), steps].concat()));
            }
        }
    }
    best.unwrap_or_else(|| (sc.clone(), Vec::new()))
}

/// One step of the shrinker, as it prints it.
fn describe(name: &str, s: &Scenario) -> String {
    format!(
        "{name} (processes {}, faults {}, {:.3} s)",
        s.procs.len(),
        s.faults(),
        s.length as f64 / 1e9
    )
}

/// How a greedy walk of the shrinker picks among the candidates that
/// still fail.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Walk {
    /// The first, in the order [`candidates`] gives.
    First,
    /// The smallest ([`size`]).
    Smallest,
    /// The first, trying those with fewer processes last.
    ProcessesLast,
    /// The first, trying those that drop a kind of fault from every
    /// process at once last.
    AllLast,
}

/// A greedy walk down the candidates from `sc` while `fails` holds.
fn descend(
    sc: &Scenario,
    outage: bool,
    fails: &dyn Fn(&Scenario) -> bool,
    walk: Walk,
) -> (Scenario, Vec<String>) {
    let mut best = sc.clone();
    let mut steps = Vec::new();
    loop {
        let here = size(&best);
        let mut cands = candidates(&best, outage);
        if walk == Walk::ProcessesLast {
            cands.sort_by_key(|c| c.1.procs.len() < best.procs.len());
        }
        if walk == Walk::AllLast {
            cands.sort_by_key(|c| c.0.starts_with("all: "));
        }
        let mut next: Option<(String, Scenario)> = None;
        for cand in cands {
            let s = size(&cand.1);
            if s >= here || next.as_ref().is_some_and(|n| size(&n.1) <= s) || !fails(&cand.1) {
                continue;
            }
            next = Some(cand);
            if walk != Walk::Smallest {
                break;
            }
        }
        let Some((name, s)) = next else {
            return (best, steps);
        };
        steps.push(describe(&name, &s));
        best = s;
    }
}

/// How big a scenario is, for the shrinker: processes, then faults, then
/// settings that are not the plainest, then how long its faults and
/// spreads last, then the run's length.
fn size(s: &Scenario) -> (usize, usize, usize, u64, u64) {
    let plain = s
        .procs
        .iter()
        .map(|p| {
            usize::from(p.cut_after_slow_ppm > 0)
                + usize::from(p.delay.0 != p.delay.1)
                + usize::from(p.start_at > 0)
        })
        .sum();
    let lasting = s
        .procs
        .iter()
        .map(|p| {
            p.pauses.iter().map(|x| x.1).sum::<u64>()
                + p.cuts.iter().map(|x| x.1).sum::<u64>()
                + p.ends.iter().map(|x| x.1).sum::<u64>()
        })
        .sum::<u64>()
        + s.store_restarts.iter().map(|x| x.1 + x.2).sum::<u64>()
        + s.promotions.iter().map(|x| x.1 + x.2).sum::<u64>();
    (s.procs.len(), s.faults(), plain, lasting, s.length)
}

/// A finding's kind: its message without its numbers (nor the spaces that
/// pad them).
fn finding_kind(what: &str) -> String {
    let words: String = what.chars().filter(|c| !c.is_ascii_digit()).collect();
    words.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The processes a finding names (`p3` → 3).
fn parties(what: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let b = what.as_bytes();
    for i in 0..b.len() {
        let word_start = i == 0 || !b[i - 1].is_ascii_alphanumeric();
        if b[i] == b'p' && word_start {
            let digits: String = what[i + 1..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if let Ok(n) = digits.parse::<usize>()
                && !out.contains(&n)
            {
                out.push(n);
            }
        }
    }
    out
}

/// One way to make a process's faults simpler; false if it had nothing to drop.
type Simplify = fn(&mut ProcSpec) -> bool;

/// Adds `s` with the span `span` picks halved, as the candidate `what`,
/// when that span is longer than a millisecond.
fn halved(
    out: &mut Vec<(String, Scenario)>,
    s: &Scenario,
    what: String,
    span: impl Fn(&mut Scenario) -> &mut u64,
) {
    let mut c = s.clone();
    let ns = span(&mut c);
    if *ns > MS {
        *ns /= 2;
        out.push((what, c));
    }
}

/// The simpler scenarios to try, the biggest cuts first: a shorter run,
/// fewer processes (those the finding does not name first), every fault
/// of a kind at once, each fault alone, then shorter faults and plainer
/// settings.
fn candidates(s: &Scenario, outage: bool) -> Vec<(String, Scenario)> {
    let mut out = Vec::new();
    let o = run(s, false);
    let found = o.finding(outage).or(o.violation.as_ref()).cloned();
    // Shorter: end just after the finding.
    if let Some(v) = &found {
        let end = v.at + MS;
        if end < s.length {
            let mut c = s.clone();
            c.length = end;
            out.push((format!("end at {}", secs(end)), c));
        }
    }
    // Fewer processes: those the finding does not name first.
    if s.procs.len() > 2 {
        let named = found.as_ref().map(|v| parties(&v.what)).unwrap_or_default();
        let mut order: Vec<usize> = (0..s.procs.len()).filter(|i| !named.contains(i)).collect();
        order.extend((0..s.procs.len()).filter(|i| named.contains(i)));
        for i in order {
            let mut c = s.clone();
            c.procs.remove(i);
            c.slots = c.slots.min(c.procs.len() as u32 - 1).max(1);
            out.push((format!("drop process {i}"), c));
        }
    }
    // Every fault of a kind at once, over all processes and the store.
    let everywhere: [(&str, Simplify); 11] = [
        ("no pauses", |p| !std::mem::take(&mut p.pauses).is_empty()),
        ("no partitions", |p| !std::mem::take(&mut p.cuts).is_empty()),
        ("no ends", |p| !std::mem::take(&mut p.ends).is_empty()),
        ("no wall clock steps", |p| {
            !std::mem::take(&mut p.wall_steps).is_empty()
        }),
        ("no wall clock skew", |p| {
            std::mem::take(&mut p.wall_skew) != 0
        }),
        ("no duplicated answers", |p| {
            std::mem::take(&mut p.dup_ppm) > 0
        }),
        ("no losses", |p| std::mem::take(&mut p.loss_ppm) > 0),
        ("no slow answers", |p| std::mem::take(&mut p.slow_ppm) > 0),
        ("no clock drift", |p| std::mem::take(&mut p.clock.ppm) != 0),
        ("no cut after slow answers", |p| {
            std::mem::take(&mut p.cut_after_slow_ppm) > 0
        }),
        ("fixed network delay", |p| {
            let changed = p.delay.0 != p.delay.1;
            p.delay.1 = p.delay.0;
            changed
        }),
    ];
    if s.procs.len() > 1 {
        for (name, f) in everywhere {
            let mut c = s.clone();
            let mut changed = false;
            for p in &mut c.procs {
                changed |= f(p);
            }
            if changed {
                out.push((format!("all: {name}"), c));
            }
        }
    }
    let store_faults = s.store_steps.len()
        + s.store_restarts.len()
        + s.wipes.len()
        + s.promotions.len()
        + usize::from(s.store_ppm != 0);
    if store_faults > 1 {
        let mut c = s.clone();
        c.store_steps.clear();
        c.store_restarts.clear();
        c.wipes.clear();
        c.promotions.clear();
        c.store_ppm = 0;
        out.push(("no store faults".into(), c));
    }
    if !s.store_steps.is_empty() {
        let mut c = s.clone();
        c.store_steps.clear();
        out.push(("no store clock steps".into(), c));
    }
    if s.store_ppm != 0 {
        let mut c = s.clone();
        c.store_ppm = 0;
        out.push(("store clock without drift".into(), c));
    }
    // Each fault of the store alone.
    if s.store_steps.len() > 1 {
        for j in 0..s.store_steps.len() {
            let mut c = s.clone();
            c.store_steps.remove(j);
            out.push((format!("drop store clock step {j}"), c));
        }
    }
    for j in 0..s.store_restarts.len() {
        let mut c = s.clone();
        c.store_restarts.remove(j);
        out.push((format!("drop store restart {j}"), c));
    }
    for j in 0..s.wipes.len() {
        let mut c = s.clone();
        c.wipes.remove(j);
        out.push((format!("drop wipe {j}"), c));
    }
    for j in 0..s.promotions.len() {
        let mut c = s.clone();
        c.promotions.remove(j);
        out.push((format!("drop promotion {j}"), c));
    }
    // Each process's faults: a kind at once, then each alone.
    for i in 0..s.procs.len() {
        for (name, f) in everywhere {
            let mut c = s.clone();
            if f(&mut c.procs[i]) {
                out.push((format!("p{i}: {name}"), c));
            }
        }
        let p = &s.procs[i];
        for j in 0..p.pauses.len() {
            let mut c = s.clone();
            c.procs[i].pauses.remove(j);
            out.push((format!("p{i}: drop pause {j}"), c));
        }
        for j in 0..p.cuts.len() {
            let mut c = s.clone();
            c.procs[i].cuts.remove(j);
            out.push((format!("p{i}: drop partition {j}"), c));
        }
        for j in 0..p.ends.len() {
            let mut c = s.clone();
            c.procs[i].ends.remove(j);
            out.push((format!("p{i}: drop end {j}"), c));
        }
        if p.wall_steps.len() > 1 {
            for j in 0..p.wall_steps.len() {
                let mut c = s.clone();
                c.procs[i].wall_steps.remove(j);
                out.push((format!("p{i}: drop wall clock step {j}"), c));
            }
        }
    }
    // Shorter faults, plainer settings.
    for i in 0..s.procs.len() {
        let p = &s.procs[i];
        for j in 0..p.pauses.len() {
            let what = format!("p{i}: pause {j} half as long");
            halved(&mut out, s, what, |c| &mut c.procs[i].pauses[j].1);
        }
        for j in 0..p.cuts.len() {
            let what = format!("p{i}: partition {j} half as long");
            halved(&mut out, s, what, |c| &mut c.procs[i].cuts[j].1);
        }
        for j in 0..p.ends.len() {
            let what = format!("p{i}: end {j} down half as long");
            halved(&mut out, s, what, |c| &mut c.procs[i].ends[j].1);
        }
        if p.start_at > 0 {
            let mut c = s.clone();
            c.procs[i].start_at = 0;
            out.push((format!("p{i}: starts at 0"), c));
        }
    }
    for j in 0..s.store_restarts.len() {
        let what = format!("store restart {j} down half as long");
        halved(&mut out, s, what, |c| &mut c.store_restarts[j].1);
        let what = format!("store restart {j} forgets half as much");
        halved(&mut out, s, what, |c| &mut c.store_restarts[j].2);
    }
    for j in 0..s.promotions.len() {
        let what = format!("promotion {j} unreachable half as long");
        halved(&mut out, s, what, |c| &mut c.promotions[j].1);
        let what = format!("promotion {j} lacks half as much");
        halved(&mut out, s, what, |c| &mut c.promotions[j].2);
    }
    out
}

fn secs(t: u64) -> String {
    format!("{:>4}.{:09}", t / SEC, t % SEC)
}

// ---------------------------------------------------------------------------
// The world: events on true time.

// `List` and `Patch` are the Kubernetes mode's claim: a LIST of the pool's
// Leases, and an acquiring write conditioned on resourceVersion `rv` (0: the
// create of an absent Lease).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Req {
    Acquire { ceiling: u64 },
    Renew { slot: u32, token: u64, ceiling: u64 },
    Release { slot: u32, token: u64, issued: u64 },
    List,
    Patch { slot: u32, rv: u64, ceiling: u64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ans {
    Granted {
        slot: u32,
        token: u64,
        fence: u64,
        floor: u64,
        store: u64,
    },
    Exhausted,
    /// The restart, wipe or promotion guard holds claims back for this long
    /// (store ns).
    Restarted {
        resume_in: u64,
    },
    Renewed {
        store: u64,
    },
    Lost,
    Released,
    NotHeld,
    /// Kubernetes: a LIST's answer (its index among the store's answers).
    Listed(u32),
    /// Kubernetes: the acquiring write won: the new resourceVersion and
    /// the floor before it.
    Patched {
        rv: u64,
        floor: u64,
    },
    /// Kubernetes: 409, the write's condition failed.
    Conflict,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Start(usize),
    Wake(usize, u64),
    AtStore(usize, u64, Req),
    Reply(usize, u64, Ans),
    Timeout(usize, u64),
    PauseStart(usize, u64),
    PauseEnd(usize),
    WallStep(usize, i64),
    /// The process ends (graceful or killed) and restarts after a while.
    End(usize, u64, bool),
    Restart(usize),
    StoreStep(u64),
    /// The store crashes (the scenario's restart of that index).
    StoreCrash(usize),
    /// The store is up again after a crash.
    StoreUp,
    /// The pool's records are wiped.
    Wipe,
    /// The store fails over to a replica (the scenario's promotion of that
    /// index).
    Promote(usize),
    /// The promoted replica is reachable.
    Promoted,
    /// A fenced write of a holder reaches the store: (process, slot, fence).
    Write(usize, u32, u64),
    Finish,
}

#[derive(Clone, Copy, Debug)]
enum CallKind {
    Acquire {
        sent_at: MonoTime,
        ceiling: Floor,
    },
    Renew {
        sent_at: MonoTime,
        ceiling: Floor,
        /// The lease renewed, for the trace.
        slot: u32,
        fence: u64,
    },
    Release,
}

#[derive(Clone, Copy, Debug)]
struct Call {
    id: u64,
    kind: CallKind,
}

struct Proc {
    spec: ProcSpec,
    machine: Machine,
    gate: LeaseGate,
    pending: VecDeque<Action>,
    call: Option<Call>,
    wake_gen: u64,
    paused_until: Option<u64>,
    stopped: bool,
    /// Killed, until it restarts: nothing of it runs.
    dead: bool,
    /// Shut down, until it restarts: it only finishes its release.
    exiting: bool,
    rng: SplitMix,
    /// Partitions, the scenario's and those after slow answers.
    cuts: Vec<(u64, u64)>,
    /// The open window.
    window: Option<Window>,
    /// Wall clock = monotonic clock + this (ns), before any step.
    offset: u64,
    /// The process's Unix offset (`leasehold_core::UnixOffset`, the real
    /// one): what it measures goes through its `observe`. Its generators
    /// read it too.
    unix: Arc<UnixOffset>,
    /// Its real ID generators and the IDs they issued (`generate.rs`).
    ids: generate::Ids,
    /// Counts restarts: a restarted process has a new generator, with no
    /// history.
    incarnation: u32,
    /// The highest timestamp this incarnation's generator issued (Unix ms).
    issued_ms: u64,
    /// The last fence this process wrote with (its writes once a grant
    /// lets it generate).
    wrote: Option<u64>,
    /// A fenced write begun while it generated and held up by a pause:
    /// (slot, fence), sent as it resumes, whatever its gate says by then.
    late: Option<(u32, u64)>,
    /// Draws for its fenced writes (a stream of their own).
    wrng: SplitMix,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    holder: Option<u64>,
    expires: u64,
    fence: u64,
    /// The slot's floor (Unix ms), kept as the real stores keep it: the
    /// highest ceiling or issued timestamp any holder reported.
    floor: u64,
}

/// An open window of a process: it may generate from `start`.
#[derive(Clone, Copy, Debug)]
struct Window {
    start: u64,
    slot: u32,
    fence: u64,
    /// When the gate refuses by itself (its clock reaches the deadline).
    refuses_at: u64,
    /// The gate's floor and ceiling (Unix ms).
    floor: u64,
    ceiling: u64,
    /// The Unix offset the generator stamps with, measured as the window
    /// opened; `None` while a wall-clock step is pending (it refuses).
    offset: Option<u64>,
}

/// The timestamps one generator may have put into IDs of a slot.
#[derive(Clone, Copy, Debug)]
struct Stamps {
    proc: usize,
    incarnation: u32,
    slot: u32,
    fence: u64,
    lo: u64,
    hi: u64,
    at: u64,
}

#[derive(Clone, Copy, Debug)]
struct Segment {
    proc: usize,
    slot: u32,
    fence: u64,
    start: u64,
    end: u64,
}

struct World<'a> {
    sc: &'a Scenario,
    timing: Timing,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    procs: Vec<Proc>,
    slots: Vec<Slot>,
    store_jump: u64,
    /// The leases alive at each store-clock step, for its coverage.
    store_steps: coverage::StoreSteps,
    /// What liveness (outages) is judged on.
    live: liveness::Liveness,
    next_id: u64,
    grants: u64,
    /// The checker's own record of the store's grants: the last fence per slot.
    granted: Vec<u64>,
    fence_violation: Option<Violation>,
    /// The store's acknowledged writes that a crash may still forget:
    /// (true ns, slot, the slot before the write).
    journal: Vec<(u64, usize, Slot)>,
    /// The longest span of writes a crash forgets (ns): how much of the
    /// journal is kept.
    journal_span: u64,
    /// Down from a crash until this true instant: nothing is answered.
    down_until: Option<u64>,
    /// The store clock's reading when it last came up.
    up_since: Option<u64>,
    /// Whether the pool's record is there (a wipe takes it).
    record: bool,
    /// When a claim first found the record gone (store clock).
    gone_seen: Option<u64>,
    /// The store's incarnation (a promotion changes it), and the one the
    /// pool's record holds (the last a claim saw).
    incarnation: u64,
    recorded_incarnation: u64,
    /// When a claim first saw the current incarnation, after a change
    /// (store clock).
    promotion_seen: Option<u64>,
    /// The fence table: per slot's resource, the fence of its last write.
    fence_table: Vec<u64>,
    /// The checker's own record of the fenced writes accepted: the
    /// highest fence per resource, and the first stale write accepted.
    written: Vec<u64>,
    write_violation: Option<Violation>,
    /// The Kubernetes mode's store and its claimers' memories.
    kube: Option<k8s::Store>,
    segments: Vec<Segment>,
    stamps: Vec<Stamps>,
    trace_on: bool,
    trace: String,
    /// Only in the replay of a finding that is to be drawn (`timeline.rs`).
    timeline: Option<timeline::Recorder>,
}

impl<'a> World<'a> {
    fn new(sc: &'a Scenario, trace_on: bool) -> Self {
        let timing = sc.timing();
        let procs = sc
            .procs
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                let seed = sc.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i as u64 + 1);
                Proc {
                    spec: spec.clone(),
                    machine: Machine::new(timing.clone(), false, seed)
                        .with_store_resolution(sc.resolution),
                    gate: LeaseGate::new(),
                    pending: VecDeque::new(),
                    call: None,
                    wake_gen: 0,
                    paused_until: None,
                    stopped: false,
                    dead: true,
                    exiting: false,
                    rng: SplitMix::new(seed ^ 0xa5a5),
                    cuts: spec.cuts.clone(),
                    window: None,
                    offset: (EPOCH as i64 + spec.wall_skew) as u64 - spec.clock.base,
                    incarnation: 0,
                    issued_ms: 0,
                    unix: Arc::new(UnixOffset::new()),
                    ids: generate::Ids::default(),
                    wrote: None,
                    late: None,
                    wrng: SplitMix::new(seed ^ 0x3717_3717),
                }
            })
            .collect();
        let mut w = World {
            sc,
            timing,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            procs,
            slots: vec![
                Slot {
                    holder: None,
                    expires: 0,
                    fence: 0,
                    floor: 0,
                };
                sc.slots as usize
            ],
            store_jump: 0,
            store_steps: coverage::StoreSteps::default(),
            live: liveness::Liveness::new(sc.procs.len()),
            next_id: 1,
            grants: 0,
            granted: vec![0; sc.slots as usize],
            fence_violation: None,
            journal: Vec::new(),
            journal_span: sc
                .store_restarts
                .iter()
                .chain(&sc.promotions)
                .map(|r| r.2)
                .max()
                .unwrap_or(0),
            down_until: None,
            up_since: None,
            record: true,
            gone_seen: None,
            incarnation: 0,
            recorded_incarnation: 0,
            promotion_seen: None,
            fence_table: vec![0; sc.slots as usize],
            written: vec![0; sc.slots as usize],
            write_violation: None,
            kube: sc.kubernetes.map(|k| k8s::Store::new(sc, k)),
            segments: Vec::new(),
            stamps: Vec::new(),
            trace_on,
            trace: String::new(),
            timeline: None,
        };
        if trace_on {
            let _ = writeln!(
                w.trace,
                "seed {} covered {}{}: {} processes, {} slots, ttl {:?}, margin {:?}, renew {:?}, \
                 backoff {:?}..{:?}, store resolution {:?}, store drift {} ppm, store steps {:?}, \
                 store restarts (at, down, forgets) {:?}, wipes {:?}, \
                 promotions (at, down, lacks) {:?}",
                sc.seed,
                sc.covered(),
                if sc.store_steps.is_empty() {
                    ""
                } else {
                    " (before the run judges its store-clock steps)"
                },
                sc.procs.len(),
                sc.slots,
                sc.ttl,
                sc.margin,
                sc.renew,
                sc.backoff.0,
                sc.backoff.1,
                sc.resolution,
                sc.store_ppm,
                sc.store_steps,
                sc.store_restarts,
                sc.wipes,
                sc.promotions
            );
            for (i, p) in sc.procs.iter().enumerate() {
                let _ = writeln!(
                    w.trace,
                    "p{i}: drift {} ppm, start {}, delay {:?} ns, loss {} ppm, slow {} ppm \
                     (then cut {} ppm), pauses {:?}, partitions {:?}",
                    p.clock.ppm,
                    secs(p.start_at),
                    p.delay,
                    p.loss_ppm,
                    p.slow_ppm,
                    p.cut_after_slow_ppm,
                    p.pauses,
                    p.cuts
                );
            }
        }
        w.k8s_header();
        for (i, p) in sc.procs.iter().enumerate() {
            w.push(p.start_at, Ev::Start(i));
            for &(at, len) in &p.pauses {
                w.push(at, Ev::PauseStart(i, len));
            }
            for &(at, by) in &p.wall_steps {
                w.push(at, Ev::WallStep(i, by));
            }
            for &(at, down, graceful) in &p.ends {
                w.push(at, Ev::End(i, down, graceful));
            }
        }
        for &(at, size) in &sc.store_steps {
            w.push(at, Ev::StoreStep(size));
        }
        for (i, &(at, ..)) in sc.store_restarts.iter().enumerate() {
            w.push(at, Ev::StoreCrash(i));
        }
        for &at in &sc.wipes {
            w.push(at, Ev::Wipe);
        }
        for (i, &(at, ..)) in sc.promotions.iter().enumerate() {
            w.push(at, Ev::Promote(i));
        }
        w.push(sc.length, Ev::Finish);
        w
    }

    fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, ev)));
    }

    fn log(&mut self, p: Option<usize>, what: std::fmt::Arguments<'_>) {
        if self.trace_on {
            let who = p.map_or_else(|| "store".to_string(), |p| format!("p{p}"));
            let _ = writeln!(self.trace, "{} {who:>5} {what}", secs(self.now));
        }
    }

    fn local(&self, p: usize) -> MonoTime {
        MonoTime::from_nanos(self.procs[p].spec.clock.local(self.now))
    }

    fn true_at(&self, p: usize, t: MonoTime) -> u64 {
        self.procs[p].spec.clock.true_at(t.as_nanos())
    }

    fn go(&mut self) {
        while let Some(Reverse((at, _, ev))) = self.queue.pop() {
            self.now = at;
            if let Ev::Finish = ev {
                break;
            }
            self.dispatch(ev);
            if self.timeline.is_some() {
                self.note_timeline(&ev);
            }
        }
        for p in 0..self.procs.len() {
            self.close_window(p);
        }
    }

    fn dispatch(&mut self, ev: Ev) {
        // A paused process runs nothing: what comes for it waits until it
        // resumes, and then the lease manager's task is scheduled after a latency.
        let target = match ev {
            Ev::Start(p)
            | Ev::Wake(p, _)
            | Ev::Reply(p, ..)
            | Ev::Timeout(p, _)
            | Ev::End(p, ..)
            | Ev::Restart(p) => Some(p),
            _ => None,
        };
        if let Some(p) = target
            && let Some(until) = self.procs[p].paused_until
        {
            let lat = self.latency(p);
            self.push(until + lat, ev);
            return;
        }
        if let Ev::Wake(p, _) | Ev::Reply(p, ..) | Ev::Timeout(p, _) | Ev::End(p, ..) = ev
            && self.procs[p].dead
        {
            return;
        }
        match ev {
            Ev::Start(p) => {
                self.procs[p].dead = false;
                self.log(Some(p), format_args!("starts"));
                self.build_generators(p);
                self.feed(p, Input::Start);
            }
            Ev::Wake(p, generation) => {
                if generation == self.procs[p].wake_gen && self.procs[p].call.is_none() {
                    self.feed(p, Input::Tick);
                }
            }
            Ev::AtStore(p, id, req) => self.at_store(p, id, req),
            Ev::Reply(p, id, ans) => self.on_reply(p, id, Some(ans)),
            Ev::Timeout(p, id) => self.on_reply(p, id, None),
            Ev::PauseStart(p, len) => {
                let until = self.now + len;
                let old = self.procs[p].paused_until.unwrap_or(0);
                self.procs[p].paused_until = Some(until.max(old));
                self.log(Some(p), format_args!("paused for {}", secs(len)));
                // A holder paused while it generates may be in the middle
                // of a fenced write: it goes out when the process resumes.
                if let Some(w) = self.procs[p].window
                    && self.procs[p].late.is_none()
                    && self.procs[p].wrng.below(2) == 0
                {
                    self.procs[p].late = Some((w.slot, w.fence));
                }
                self.close_window(p);
                self.push(until, Ev::PauseEnd(p));
            }
            Ev::PauseEnd(p) => {
                if self.procs[p].paused_until.is_some_and(|u| u <= self.now) {
                    self.procs[p].paused_until = None;
                    self.log(Some(p), format_args!("resumes"));
                    if let Some((slot, fence)) = self.procs[p].late.take()
                        && !self.procs[p].dead
                    {
                        self.write(p, slot, fence);
                    }
                    self.open_window(p);
                }
            }
            Ev::End(p, down, graceful) => self.end(p, down, graceful),
            Ev::WallStep(p, by) => {
                // The wall clock moved (the monotonic one did not): the
                // generator sees it at its next measurement, from here on.
                self.log(Some(p), format_args!("wall clock steps {by} ns"));
                self.close_window(p);
                self.open_window(p);
            }
            Ev::Restart(p) => {
                self.close_window(p);
                self.procs[p].exiting = false;
                self.procs[p].wrote = None;
                self.procs[p].late = None;
                let seed = self.procs[p].rng.next_u64();
                self.procs[p].machine = Machine::new(self.timing.clone(), false, seed)
                    .with_store_resolution(self.sc.resolution);
                self.procs[p].gate = LeaseGate::new();
                self.procs[p].incarnation += 1;
                self.procs[p].unix = Arc::new(UnixOffset::new());
                self.live.restart(p);
                self.procs[p].issued_ms = 0;
                self.procs[p].pending.clear();
                self.procs[p].call = None;
                self.procs[p].stopped = false;
                self.procs[p].dead = false;
                self.log(Some(p), format_args!("restarts"));
                self.build_generators(p);
                self.feed(p, Input::Start);
            }
            Ev::StoreStep(size) => {
                let s = self.store_clock();
                let alive = self
                    .slots
                    .iter()
                    .filter(|sl| s < sl.expires)
                    .filter_map(|sl| sl.holder)
                    .collect();
                self.store_steps.step(size, alive);
                self.store_jump += size;
                self.log(None, format_args!("clock steps forward {}", secs(size)));
            }
            Ev::StoreCrash(i) => self.crash(i),
            Ev::StoreUp => {
                self.up();
                self.up_since = Some(self.store_clock());
                self.log(None, format_args!("up again"));
            }
            Ev::Promote(i) => self.promote(i),
            Ev::Promoted => {
                self.up();
                self.log(None, format_args!("the promoted replica answers"));
            }
            Ev::Wipe => {
                for sl in &mut self.slots {
                    *sl = Slot {
                        holder: None,
                        expires: 0,
                        fence: 0,
                        floor: 0,
                    };
                }
                self.journal.clear();
                self.record = false;
                self.log(None, format_args!("the pool's records are wiped"));
            }
            Ev::Write(p, slot, fence) => self.fenced_write(p, slot, fence),
            Ev::Finish => {}
        }
    }

    /// A graceful end is the manager's `shutdown`: the gate closes first,
    /// a call in flight is abandoned, the machine closes and releases; a
    /// kill stops everything at once. Either way the process comes back
    /// after `down`, a new process with a new machine and gate.
    fn end(&mut self, p: usize, down: u64, graceful: bool) {
        if self.procs[p].exiting {
            return;
        }
        self.procs[p].exiting = graceful;
        if graceful {
            self.log(Some(p), format_args!("shuts down"));
            self.procs[p].gate.close();
            self.procs[p].call = None;
            self.procs[p].pending.clear();
            self.feed(p, Input::Shutdown);
        } else {
            self.log(Some(p), format_args!("killed"));
            self.procs[p].gate.close();
            self.procs[p].call = None;
            self.procs[p].pending.clear();
            self.procs[p].stopped = true;
            self.close_window(p);
        }
        // A graceful end waits for its release (bounded by one TTL) before
        // the process exits: the restart comes after `down` either way.
        self.procs[p].dead = !graceful;
        self.push(self.now + down, Ev::Restart(p));
    }

    /// The lease manager's scheduling latency: mostly a little, now and then much.
    fn latency(&mut self, p: usize) -> u64 {
        let r = &mut self.procs[p].rng;
        if r.below(100) == 0 {
            let lat = r.below(100 * MS);
            self.live.fault(p, self.now, self.now + lat);
            lat
        } else {
            r.below(2 * MS)
        }
    }

    fn cut(&self, p: usize, at: u64) -> bool {
        self.procs[p]
            .cuts
            .iter()
            .any(|&(a, len)| at >= a && at < a + len)
    }

    fn delay(&mut self, p: usize) -> u64 {
        let (lo, hi) = self.procs[p].spec.delay;
        lo + self.procs[p].rng.below(hi - lo + 1)
    }

    fn lost(&mut self, p: usize) -> bool {
        let loss = self.procs[p].spec.loss_ppm;
        self.procs[p].rng.below(1_000_000) < loss
    }

    fn send(&mut self, p: usize, id: u64, req: Req) {
        let d = self.delay(p);
        if self.cut(p, self.now) || self.lost(p) {
            self.live.fault(p, self.now, self.now);
            self.log(Some(p), format_args!("request {id} {req:?} lost"));
            return;
        }
        self.push(self.now + d, Ev::AtStore(p, id, req));
    }

    fn store_clock(&self) -> u64 {
        let local = ClockSpec {
            base: 1_000 * SEC,
            ppm: self.sc.store_ppm,
        }
        .local(self.now);
        local + self.store_jump
    }

    /// The store crashes: down for a while (what arrives is not answered),
    /// and the acknowledged writes of the last span before the crash are
    /// forgotten, as by a server that had not flushed them (PostgreSQL with
    /// `fsync` off, Valkey with `appendfsync everysec`).
    fn crash(&mut self, i: usize) {
        let (_, down, lose) = self.sc.store_restarts[i];
        let lost = self.forget(lose);
        self.go_down(down);
        self.push(self.now + down, Ev::StoreUp);
        self.log(
            None,
            format_args!(
                "crashes, down for {}, forgetting {lost} writes of the last {}",
                secs(down),
                secs(lose)
            ),
        );
    }

    /// The store fails over to an asynchronous replica: unreachable for a
    /// while around the switch, without the acknowledged writes of the last
    /// span before it (those it had not received), and with an incarnation
    /// of its own. Its uptime does not start again: it has been running
    /// all along, so the restart guard does not hold it back.
    fn promote(&mut self, i: usize) {
        let (_, down, lose) = self.sc.promotions[i];
        let lost = self.forget(lose);
        self.incarnation += 1;
        self.go_down(down);
        self.push(self.now + down, Ev::Promoted);
        self.log(
            None,
            format_args!(
                "fails over to a replica, unreachable for {}, lacking {lost} writes of the last {}",
                secs(down),
                secs(lose)
            ),
        );
    }

    /// Undoes the acknowledged writes of the last `lose` ns; returns how
    /// many. What is older is kept for good.
    fn forget(&mut self, lose: u64) -> usize {
        let since = self.now.saturating_sub(lose);
        let mut lost = 0;
        while let Some(&(at, slot, before)) = self.journal.last() {
            if at < since || lose == 0 {
                break;
            }
            self.slots[slot] = before;
            self.journal.pop();
            lost += 1;
        }
        self.journal.clear();
        lost
    }

    /// Nothing is answered for `down` from now (an outage already under
    /// way may last longer).
    fn go_down(&mut self, down: u64) {
        let until = self.now + down;
        self.down_until = Some(self.down_until.map_or(until, |u| u.max(until)));
    }

    /// An outage's end: answers go on once every outage under way is over.
    fn up(&mut self) {
        if self.down_until.is_some_and(|u| u <= self.now) {
            self.down_until = None;
        }
    }

    /// Notes an acknowledged write of slot `i` that a crash may forget.
    fn journal(&mut self, i: usize, before: Slot) {
        if self.journal_span == 0 {
            return;
        }
        let keep = self.now.saturating_sub(self.journal_span);
        if self.journal.first().is_some_and(|e| e.0 < keep) {
            self.journal.retain(|e| e.0 >= keep);
        }
        self.journal.push((self.now, i, before));
    }

    /// The restart, wipe and promotion guards (DESIGN.md, rule 12), as the
    /// backends keep them: nothing is granted until the store has been up
    /// for the pool's restart span, nor for one span after a claim first
    /// found the pool's record gone (that claim writes it again), nor for
    /// one span after a claim first saw a new incarnation of the store (a
    /// promoted replica: the claim records it in its own round trip).
    /// Returns how long claims are held back (store ns), if they are.
    fn guard(&mut self, s: u64) -> Option<u64> {
        let span = u64::try_from((self.sc.ttl + 2 * self.timing.max_clock_skew()).as_nanos())
            .unwrap_or(u64::MAX);
        if !self.record {
            self.record = true;
            self.gone_seen = Some(s);
            self.log(None, format_args!("a claim finds the pool's record gone"));
        }
        if self.incarnation != self.recorded_incarnation {
            self.recorded_incarnation = self.incarnation;
            self.promotion_seen = Some(s);
            self.log(None, format_args!("a claim sees a new incarnation"));
        }
        if leasehold_core::plant::active(leasehold_core::plant::Plant::NoRestartGuard) {
            return None;
        }
        let restart = self.up_since.map_or(0, |up| (up + span).saturating_sub(s));
        let wipe = self.gone_seen.map_or(0, |g| (g + span).saturating_sub(s));
        let promotion = self
            .promotion_seen
            .map_or(0, |g| (g + span).saturating_sub(s));
        let wait = restart.max(wipe).max(promotion);
        (wait > 0).then_some(wait)
    }

    /// A holder's fenced write reaches the fence table (`FenceTable`, rule
    /// 7): one resource per slot, each with the fence of its last write. A
    /// write is taken only with a fence at least the resource's last, in
    /// the same step as the write.
    fn fenced_write(&mut self, p: usize, slot: u32, fence: u64) {
        let i = slot as usize;
        let last = self.fence_table[i];
        let unchecked = leasehold_core::plant::active(leasehold_core::plant::Plant::FenceUnchecked);
        if fence < last && !unchecked {
            self.log(
                None,
                format_args!("p{p}'s write to resource {slot} with fence {fence} refused: stale"),
            );
            return;
        }
        self.fence_table[i] = fence;
        self.log(
            None,
            format_args!("p{p}'s write to resource {slot} with fence {fence} taken"),
        );
        // The checker's own record: no write older than one taken.
        if fence < self.written[i] && self.write_violation.is_none() {
            self.write_violation = Some(Violation {
                at: self.now,
                what: format!(
                    "resource {slot}: p{p}'s write with fence {fence} taken after a write \
                     with fence {}",
                    self.written[i]
                ),
            });
        }
        self.written[i] = self.written[i].max(fence);
    }

    /// Sends a fenced write of process `p` over its network.
    fn write(&mut self, p: usize, slot: u32, fence: u64) {
        self.procs[p].wrote = Some(fence);
        let (lo, hi) = self.procs[p].spec.delay;
        let d = lo + self.procs[p].wrng.below(hi - lo + 1);
        let loss = self.procs[p].spec.loss_ppm;
        if self.cut(p, self.now) || self.procs[p].wrng.below(1_000_000) < loss {
            self.log(Some(p), format_args!("write with fence {fence} lost"));
            return;
        }
        self.log(
            Some(p),
            format_args!("writes to resource {slot} with fence {fence}"),
        );
        self.push(self.now + d, Ev::Write(p, slot, fence));
    }

    fn at_store(&mut self, p: usize, id: u64, req: Req) {
        if self.down_until.is_some() {
            self.log(
                None,
                format_args!("down: p{p}'s request {id} {req:?} unanswered"),
            );
            return;
        }
        let s = self.store_clock();
        let res = u64::try_from(self.sc.resolution.as_nanos())
            .unwrap_or(1)
            .max(1);
        let coarse = s / res * res;
        let ttl = u64::try_from(self.sc.ttl.as_nanos()).unwrap_or(u64::MAX);
        let ans = match req {
            req if self.kube.is_some() => self.k8s_answer(id, req),
            Req::Acquire { ceiling } => {
                let free = match self.guard(s) {
                    Some(resume_in) => Err(resume_in),
                    None => Ok(self
                        .slots
                        .iter()
                        .position(|sl| sl.holder.is_none() || s >= sl.expires)),
                };
                match free {
                    Err(resume_in) => Ans::Restarted { resume_in },
                    Ok(Some(i)) => {
                        let before = self.slots[i];
                        self.journal(i, before);
                        let sl = &mut self.slots[i];
                        sl.fence = (sl.fence + 1).max(s / 1_000);
                        sl.holder = Some(id);
                        sl.expires = coarse + ttl;
                        let floor = sl.floor;
                        sl.floor = sl.floor.max(ceiling);
                        let fence = sl.fence;
                        self.grants += 1;
                        // The checker's own record: fences strictly grow per slot.
                        if fence <= self.granted[i] && self.fence_violation.is_none() {
                            self.fence_violation = Some(Violation {
                                at: self.now,
                                what: format!(
                                    "slot {i}: fence {fence} granted after {}",
                                    self.granted[i]
                                ),
                            });
                        }
                        self.granted[i] = self.granted[i].max(fence);
                        Ans::Granted {
                            slot: i as u32,
                            token: id,
                            fence,
                            floor,
                            store: s,
                        }
                    }
                    Ok(None) => Ans::Exhausted,
                }
            }
            Req::Renew {
                slot,
                token,
                ceiling,
            } => {
                let before = self.slots[slot as usize];
                if before.holder == Some(token) && s < before.expires {
                    self.journal(slot as usize, before);
                    let sl = &mut self.slots[slot as usize];
                    sl.expires = coarse + ttl;
                    sl.floor = sl.floor.max(ceiling);
                    self.store_steps.confirmed(token);
                    Ans::Renewed { store: s }
                } else {
                    Ans::Lost
                }
            }
            Req::Release {
                slot,
                token,
                issued,
            } => {
                let before = self.slots[slot as usize];
                if before.holder == Some(token) && s < before.expires {
                    self.journal(slot as usize, before);
                    let sl = &mut self.slots[slot as usize];
                    sl.holder = None;
                    sl.floor = sl.floor.max(issued);
                    self.store_steps.confirmed(token);
                    Ans::Released
                } else {
                    Ans::NotHeld
                }
            }
            // Only the Kubernetes mode's claims send these.
            Req::List | Req::Patch { .. } => Ans::Conflict,
        };
        self.log(
            None,
            format_args!("p{p}'s request {id} {req:?} -> {ans:?} (store clock {s})"),
        );
        // The answer's way back.
        if self.cut(p, self.now) || self.lost(p) {
            self.live.fault(p, self.now, self.now);
            self.log(Some(p), format_args!("answer {id} lost"));
            return;
        }
        let slow_ppm = self.procs[p].spec.slow_ppm;
        let mut d = self.delay(p);
        if self.procs[p].rng.below(1_000_000) < slow_ppm {
            d += self.procs[p].rng.below(ttl);
            self.live.fault(p, self.now, self.now + d);
            let then_cut = self.procs[p].spec.cut_after_slow_ppm;
            if self.procs[p].rng.below(1_000_000) < then_cut {
                let len = ttl + self.procs[p].rng.below(ttl);
                self.procs[p].cuts.push((self.now + d, len));
                self.log(
                    Some(p),
                    format_args!("answer {id} slow ({}), then cut for {}", secs(d), secs(len)),
                );
            } else {
                self.log(Some(p), format_args!("answer {id} slow ({})", secs(d)));
            }
        }
        self.push(self.now + d, Ev::Reply(p, id, ans));
        let dup = self.procs[p].spec.dup_ppm;
        if self.procs[p].rng.below(1_000_000) < dup {
            let again = self.delay(p) + self.procs[p].rng.below(ttl);
            self.live.fault(p, self.now, self.now + again);
            self.push(self.now + again, Ev::Reply(p, id, ans));
        }
    }

    /// An answer (or, with `None`, the call's bound) reached the lease manager.
    fn on_reply(&mut self, p: usize, id: u64, ans: Option<Ans>) {
        if self.kube.is_some() && self.k8s_reply(p, id, ans) {
            return;
        }
        let Some(call) = self.procs[p].call.filter(|c| c.id == id) else {
            return; // The lease manager stopped waiting for it: never seen.
        };
        self.procs[p].call = None;
        let ttl = self.sc.ttl;
        let input = match (call.kind, ans) {
            (
                CallKind::Acquire { sent_at, ceiling },
                Some(Ans::Granted {
                    slot,
                    token,
                    fence,
                    floor,
                    store,
                }),
            ) => Some(Input::Acquired {
                grant: match Grant::new(slot, token_of(token), Fence(fence), ttl)
                    .with_floor(Floor(floor))
                {
                    // Kubernetes answers no store time.
                    g if self.kube.is_some() => g,
                    g => g.with_store_time(Duration::from_nanos(store)),
                },
                sent_at,
                ceiling,
            }),
            (CallKind::Acquire { .. }, Some(Ans::Restarted { resume_in })) => {
                Some(Input::AcquireFailed(AcquireError::StoreRestarted {
                    resume_in: Duration::from_nanos(resume_in),
                }))
            }
            (CallKind::Acquire { .. }, Some(_)) => {
                Some(Input::AcquireFailed(AcquireError::PoolExhausted {
                    pool: "sim".into(),
                    size: self.sc.slots,
                }))
            }
            (CallKind::Acquire { .. }, None) => Some(Input::AcquireFailed(
                AcquireError::Unreachable(Reason::new("acquire did not answer in time")),
            )),
            (
                CallKind::Renew {
                    sent_at, ceiling, ..
                },
                Some(Ans::Renewed { store }),
            ) => Some(Input::Renewed {
                ttl,
                sent_at,
                ceiling,
                store_time: self.kube.is_none().then(|| Duration::from_nanos(store)),
            }),
            (CallKind::Renew { .. }, Some(_)) => Some(Input::RenewLost(Reason::new("not held"))),
            (CallKind::Renew { .. }, None) => Some(Input::RenewRetry(Reason::new(
                "renewal did not answer before the local deadline",
            ))),
            (CallKind::Release, _) => None,
        };
        match &ans {
            Some(a) => self.log(Some(p), format_args!("answer {id}: {a:?}")),
            None => {
                let kind = match call.kind {
                    CallKind::Acquire { .. } => "a claim".to_string(),
                    CallKind::Renew { slot, fence, .. } => {
                        format!("a renewal of slot {slot} fence {fence}")
                    }
                    CallKind::Release => "a release".to_string(),
                };
                self.log(Some(p), format_args!("call {id} timed out ({kind})"));
            }
        }
        match input {
            Some(i) => self.feed(p, i),
            None => self.drain(p),
        }
    }

    fn feed(&mut self, p: usize, input: Input) {
        let now = self.local(p);
        let actions = self.procs[p].machine.handle(input, now);
        self.procs[p].pending.extend(actions);
        self.drain(p);
    }

    /// The lease manager's loop: performs the actions one at a time; a call waits
    /// for its answer or its bound; with nothing left, sleeps until the
    /// machine's next wakeup.
    fn drain(&mut self, p: usize) {
        while self.procs[p].call.is_none() && !self.procs[p].stopped {
            let Some(action) = self.procs[p].pending.pop_front() else {
                break;
            };
            self.perform(p, action);
        }
        if self.procs[p].call.is_none() && !self.procs[p].stopped {
            self.procs[p].wake_gen += 1;
            if let Some(at) = self.procs[p].machine.next_wakeup() {
                let at = self.true_at(p, at).max(self.now) + self.latency(p);
                let generation = self.procs[p].wake_gen;
                self.push(at, Ev::Wake(p, generation));
            }
        }
        self.close_window(p);
        self.open_window(p);
    }

    fn call(&mut self, p: usize, kind: CallKind, req: Req, until: MonoTime) {
        let id = self.next_id;
        self.next_id += 1;
        self.procs[p].call = Some(Call { id, kind });
        self.log(Some(p), format_args!("sends {id} {req:?}"));
        match req {
            Req::Acquire { ceiling } if self.kube.is_some() => self.k8s_claim(p, id, ceiling),
            _ => self.send(p, id, req),
        }
        let at = self.true_at(p, until).max(self.now) + self.latency(p);
        self.push(at, Ev::Timeout(p, id));
    }

    /// The ceiling the lease manager reports: the Unix ms of the deadline the
    /// request gives, with the offset measured afresh (`unix_offset(true)`).
    fn ceiling(&self, p: usize, sent_at: MonoTime) -> Floor {
        let deadline = self.timing.deadline(sent_at, self.sc.ttl).as_nanos();
        Floor(deadline.saturating_add(self.observe(p)) / MS)
    }

    /// `wall − mono` now, as the process would measure it.
    fn measured_offset(&self, p: usize) -> u64 {
        let steps: i64 = self.procs[p]
            .spec
            .wall_steps
            .iter()
            .filter(|s| s.0 <= self.now)
            .map(|s| s.1)
            .sum();
        (i128::from(self.procs[p].offset) + i128::from(steps)).max(1) as u64
    }

    /// A measurement of the Unix offset, through the real `observe`.
    fn observe(&self, p: usize) -> u64 {
        let measured = self.measured_offset(p);
        let offset = self.procs[p].unix.observe(measured, self.local(p));
        self.live.uses_offset(p, offset);
        offset
    }

    /// The process's timestamps at true `t` (Unix ms), with the offset in use.
    fn unix_ms(&self, p: usize, t: u64) -> u64 {
        let offset = self.procs[p].unix.get();
        self.procs[p].spec.clock.local(t).saturating_add(offset) / MS
    }

    fn perform(&mut self, p: usize, action: Action) {
        match action {
            Action::Acquire { until } => {
                let sent_at = self.local(p);
                let ceiling = self.ceiling(p, sent_at);
                let req = Req::Acquire { ceiling: ceiling.0 };
                self.call(p, CallKind::Acquire { sent_at, ceiling }, req, until);
            }
            Action::Renew { grant, until } => {
                let sent_at = self.local(p);
                let ceiling = self.ceiling(p, sent_at);
                let req = Req::Renew {
                    slot: grant.slot,
                    token: token_id(&grant.token),
                    ceiling: ceiling.0,
                };
                let (slot, fence) = (grant.slot, grant.fence.0);
                let kind = CallKind::Renew {
                    sent_at,
                    ceiling,
                    slot,
                    fence,
                };
                self.call(p, kind, req, until);
            }
            Action::Release { grant, until } => {
                // What the lease manager reports: the highest timestamp the gate's
                // generator issued (now, if none), at least the grant's floor;
                // the modelled stamps' or the real generators', whichever is higher.
                // The gate is closed by now: the window ends here, and what it
                // stamped counts (a store that stores what was issued as the
                // floor, as Kubernetes does, would otherwise get too low a one).
                self.close_window(p);
                let issued = match self.procs[p].issued_ms {
                    0 => self.unix_ms(p, self.now),
                    ms => ms,
                }
                .max(self.issued_by_generators(p));
                let req = Req::Release {
                    slot: grant.slot,
                    token: token_id(&grant.token),
                    issued: issued.max(grant.floor.0),
                };
                self.call(p, CallKind::Release, req, until);
            }
            Action::Open(o) => {
                // As the gate does for the process's clock (rule 10).
                self.procs[p].unix.limit_steps(o.max_clock_skew);
                self.procs[p].gate.open_with(o);
                self.live.confirmed(p, self.now);
                let left = o.deadline.saturating_since(self.local(p));
                self.log(
                    Some(p),
                    format_args!(
                        "opens slot {} fence {} (deadline in {:?} local)",
                        o.slot, o.fence.0, left
                    ),
                );
            }
            Action::Extend { deadline, ceiling } => {
                self.procs[p].gate.extend(deadline, ceiling);
                self.live.confirmed(p, self.now);
                let left = deadline.saturating_since(self.local(p));
                self.log(
                    Some(p),
                    format_args!("extends (deadline in {left:?} local)"),
                );
            }
            Action::Close => {
                self.procs[p].gate.close();
                // A close that ends a lease names why, on its own line: where
                // two traces of one seed first differ, that line says which
                // branch of the machine acted (`first_difference`).
                match self.procs[p].pending.front() {
                    Some(Action::NotifyLost(e)) => {
                        let (slot, fence, cause) = (e.slot, e.fence.0, e.cause.to_string());
                        self.log(
                            Some(p),
                            format_args!("closes: lost slot {slot} fence {fence}: {cause}"),
                        );
                    }
                    _ => self.log(Some(p), format_args!("closes")),
                }
            }
            Action::NotifyLost(e) => {
                let ttl = u64::try_from(self.sc.ttl.as_nanos()).unwrap_or(u64::MAX);
                self.live.lost(p, self.now, ttl, e.cause.to_string());
                self.log(Some(p), format_args!("lost slot {}: {}", e.slot, e.cause));
            }
            Action::Fail(e) => {
                self.procs[p].stopped = true;
                self.log(Some(p), format_args!("failed: {e}"));
            }
            Action::Stop => {
                self.procs[p].gate.close();
                self.procs[p].stopped = true;
                self.log(Some(p), format_args!("stopped"));
            }
            other => self.log(Some(p), format_args!("unknown action {other:?}")),
        }
    }

    // -- The checker's windows ---------------------------------------------

    /// Ends the process's open window now (or where its gate refused by
    /// itself), and notes the timestamps its generator may have issued in
    /// it: the nonce generator's rules, modelled (it runs in
    /// `leasehold-nonce`): strictly after the gate's floor and its own
    /// history, never past the gate's ceiling nor ahead of its own wall
    /// clock; generating all the time, the worst case.
    fn close_window(&mut self, p: usize) {
        let Some(w) = self.procs[p].window.take() else {
            return;
        };
        let end = self.now.min(w.refuses_at);
        if end <= w.start {
            return;
        }
        self.segments.push(Segment {
            proc: p,
            slot: w.slot,
            fence: w.fence,
            start: w.start,
            end,
        });
        let Some(offset) = w.offset else {
            return; // A wall-clock step pending: generation refuses.
        };
        let clock = self.procs[p].spec.clock;
        let ms = |t: u64| clock.local(t).saturating_add(offset) / MS;
        let lo = (w.floor + 1)
            .max(self.procs[p].issued_ms + 1)
            .max(ms(w.start));
        let hi = ms(end - 1).min(w.ceiling);
        if lo <= hi {
            self.procs[p].issued_ms = hi;
            self.stamps.push(Stamps {
                proc: p,
                incarnation: self.procs[p].incarnation,
                slot: w.slot,
                fence: w.fence,
                lo,
                hi,
                at: w.start,
            });
        }
    }

    /// Opens a window if the process may generate now: not paused, and the
    /// real gate says yes at its clock's reading.
    fn open_window(&mut self, p: usize) {
        if self.procs[p].paused_until.is_some() || self.procs[p].window.is_some() {
            return;
        }
        let gate = &self.procs[p].gate;
        if gate.check(self.local(p)).is_err() {
            return;
        }
        let view = gate.view();
        // The gate's answer changes by itself only when the clock reaches
        // the deadline; ask the gate whether it refuses from there.
        let at_deadline = self.true_at(p, view.deadline).max(self.now);
        let reading = MonoTime::from_nanos(self.procs[p].spec.clock.local(at_deadline));
        let refuses_at = if gate.check(reading).is_err() {
            at_deadline
        } else {
            u64::MAX
        };
        let offset = self.observe(p);
        let offset = self.procs[p].unix.step().is_none().then_some(offset);
        if offset.is_none() {
            let limit = u64::try_from(self.procs[p].unix.step_limit().as_nanos());
            let measured = self.measured_offset(p);
            self.live
                .refused(p, self.now, measured, limit.unwrap_or(u64::MAX));
            self.log(
                Some(p),
                format_args!("may generate, but refuses: a wall-clock step is pending"),
            );
        }
        // A holder writes to its slot's resource with its grant's fence
        // once it may generate.
        if self.procs[p].wrote != Some(view.fence.0) {
            self.write(p, view.slot, view.fence.0);
        }
        self.procs[p].window = Some(Window {
            offset,
            start: self.now,
            slot: view.slot,
            fence: view.fence.0,
            refuses_at,
            floor: view.floor.0,
            ceiling: view.ceiling.0,
        });
        self.generate(p);
    }

    /// The first outage over true time (`liveness.rs`).
    fn outage(&mut self) -> Option<Violation> {
        let ttl = u64::try_from(self.sc.ttl.as_nanos()).unwrap_or(u64::MAX);
        for p in 0..self.procs.len() {
            let spec = &self.procs[p].spec;
            let mut faults: Vec<(u64, u64)> =
                spec.pauses.iter().map(|&(a, l)| (a, a + l)).collect();
            faults.extend(self.procs[p].cuts.iter().map(|&(a, l)| (a, a + l)));
            faults.extend(spec.ends.iter().map(|&(a, d, _)| (a, a + d + ttl)));
            for (from, to) in faults {
                self.live.fault(p, from, to);
            }
        }
        let sc = self.sc;
        let mut store: Vec<(u64, u64)> = sc.store_steps.iter().map(|s| (s.0, s.0)).collect();
        store.extend(sc.store_restarts.iter().map(|r| (r.0, r.0 + r.1 + ttl)));
        store.extend(sc.wipes.iter().map(|&w| (w, w)));
        store.extend(sc.promotions.iter().map(|r| (r.0, r.0 + r.1 + ttl)));
        let drifts = |p: usize| sc.store_ppm.abs() > 500 || sc.procs[p].clock.ppm.abs() > 500;
        self.live.first(&store, drifts)
    }

    /// The first violation over true time.
    fn check(&self) -> Option<Violation> {
        let mut segs = self.segments.clone();
        segs.sort_by_key(|s| (s.slot, s.start, s.proc));
        let mut first: Option<Violation> = self.fence_violation.clone();
        let mut note = |v: Violation| {
            if first.as_ref().is_none_or(|f| v.at < f.at) {
                first = Some(v);
            }
        };
        if let Some(v) = &self.write_violation {
            note(v.clone());
        }
        if let Some(v) = self.reissued() {
            note(v);
        }
        for (i, a) in segs.iter().enumerate() {
            for b in &segs[i + 1..] {
                if b.slot != a.slot || b.start >= a.end {
                    break;
                }
                if b.proc != a.proc {
                    note(Violation {
                        at: b.start,
                        what: format!(
                            "slot {}: p{} (fence {}, window {}..{}) and p{} (fence {}, window \
                             {}..{}) may both generate for {} ns",
                            a.slot,
                            a.proc,
                            a.fence,
                            secs(a.start),
                            secs(a.end),
                            b.proc,
                            b.fence,
                            secs(b.start),
                            secs(b.end),
                            a.end.min(b.end) - b.start
                        ),
                    });
                }
            }
        }
        // Two generators that may have stamped one timestamp on one slot:
        // IDs issued twice.
        let mut stamps = self.stamps.clone();
        stamps.sort_by_key(|s| (s.slot, s.lo, s.proc, s.incarnation));
        for (i, a) in stamps.iter().enumerate() {
            for b in &stamps[i + 1..] {
                if b.slot != a.slot || b.lo > a.hi {
                    break;
                }
                if (b.proc, b.incarnation) != (a.proc, a.incarnation) {
                    note(Violation {
                        at: a.at.max(b.at),
                        what: format!(
                            "slot {}: p{} (fence {}) and p{} (fence {}) may both issue IDs \
                             stamped {}..={} (Unix ms)",
                            a.slot,
                            a.proc,
                            a.fence,
                            b.proc,
                            b.fence,
                            b.lo,
                            a.hi.min(b.hi)
                        ),
                    });
                }
            }
        }
        // A window that starts later with a smaller fence: a stale holder.
        let mut max_fence: Option<(u32, u64, usize)> = None;
        for s in &segs {
            match max_fence {
                Some((slot, f, q)) if slot == s.slot && s.fence < f => note(Violation {
                    at: s.start,
                    what: format!(
                        "slot {}: p{} generates with fence {} after p{} generated with fence {f}",
                        s.slot, s.proc, s.fence, q
                    ),
                }),
                Some((slot, f, _)) if slot == s.slot && s.fence == f => {}
                _ => max_fence = Some((s.slot, s.fence, s.proc)),
            }
        }
        first
    }
}

fn token_of(id: u64) -> Token {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&id.to_le_bytes());
    Token::from_bytes(b)
}

fn token_id(t: &Token) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&t.as_bytes()[..8]);
    u64::from_le_bytes(b)
}

/// Where two traces of one seed, as shipped and planted, first differ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    /// The line's number in both traces, from 1.
    pub line: usize,
    /// The trace as shipped there (empty where it has ended).
    pub shipped: String,
    /// The planted trace there (empty where it has ended).
    pub planted: String,
}

impl Difference {
    /// The true time of the first difference, as the traces print it: the
    /// shipped line's, or the planted one's where the shipped trace has
    /// ended.
    pub fn at(&self) -> &str {
        let line = if self.shipped.is_empty() {
            &self.planted
        } else {
            &self.shipped
        };
        line.split_whitespace().next().unwrap_or("the end")
    }

    /// [`Difference::at`] in true ns (the traces print it to the ns).
    pub fn at_ns(&self) -> Option<u64> {
        let (s, ns) = self.at().split_once('.')?;
        Some(s.parse::<u64>().ok()? * SEC + ns.parse::<u64>().ok()?)
    }
}

/// The first line at which `shipped` and `planted` differ, if they do.
pub fn first_difference(shipped: &str, planted: &str) -> Option<Difference> {
    let (mut a, mut b) = (shipped.lines(), planted.lines());
    let mut line = 0;
    loop {
        line += 1;
        match (a.next(), b.next()) {
            (None, None) => return None,
            (x, y) if x == y => {}
            (x, y) => {
                return Some(Difference {
                    line,
                    shipped: x.unwrap_or_default().to_string(),
                    planted: y.unwrap_or_default().to_string(),
                });
            }
        }
    }
}

/// A process's lease, as a trace line names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The process.
    pub process: usize,
    /// The slot.
    pub slot: u32,
    /// The grant's fence.
    pub fence: u64,
}

/// The number that follows `after` in `text`.
fn number_after<T: std::str::FromStr>(text: &str, after: &str) -> Option<T> {
    let (_, rest) = text.split_once(after)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Whether the plant's branch can be recognised at the first difference
/// between a seed's traces ([`branch_at`]); `no-margin`'s cannot be told
/// from a lease: it acts from the first claim of every seed, on the
/// ceiling that claim sends, before any lease exists.
pub fn judged(plants: &[leasehold_core::plant::Plant]) -> bool {
    use leasehold_core::plant::Plant;
    plants
        .iter()
        .any(|p| matches!(p, Plant::NoStoreClockCheck | Plant::NoStopAtDeadline))
}

/// Whether the first difference between a seed's traces is the plant's own
/// branch acting, and on which lease: what each plant's branch changes
/// first in a trace, read off the line as shipped, which names the lease.
/// `None` where the difference is not that branch, or for a plant not
/// [`judged`] this way.
///
/// - `no-store-clock-check`: as shipped a process ends its lease for rule
///   11's check (`closes: lost slot S fence F: the store's clock ran …
///   ahead`), where the planted one keeps it;
/// - `no-stop-at-deadline`: as shipped a process stops at its local
///   deadline, where the planted one goes on: it ends its lease there
///   (`closes: lost slot S fence F: the local deadline passed …`), or its
///   renewal, whose bound is the deadline as shipped and later planted,
///   times out (`call N timed out (a renewal of slot S fence F)`).
pub fn branch_at(plants: &[leasehold_core::plant::Plant], d: &Difference) -> Option<Lease> {
    use leasehold_core::plant::Plant;
    let (_time, rest) = d.shipped.trim_start().split_once(' ')?;
    let (who, what) = rest.trim_start().split_once(' ')?;
    let process = who.strip_prefix('p')?.parse().ok()?;
    let lost = what.starts_with("closes: lost slot ");
    let acted = plants.iter().any(|plant| match plant {
        Plant::NoStoreClockCheck => lost && what.contains(": the store's clock ran "),
        Plant::NoStopAtDeadline => {
            (lost && what.contains(": the local deadline passed "))
                || (what.starts_with("call ") && what.contains(" timed out (a renewal of slot "))
        }
        _ => false,
    });
    acted.then_some(())?;
    Some(Lease {
        process,
        slot: number_after(what, "slot ")?,
        fence: number_after(what, " fence ")?,
    })
}

/// Whether a violation involves a lease: it names the process generating,
/// stamping or writing with the lease's fence, or, for an ID issued twice
/// (which names issuers, not fences), it is on the lease's slot and names
/// the process. The checker's own wordings.
pub fn involves(v: &Violation, lease: Lease) -> bool {
    let Lease {
        process: p,
        slot,
        fence,
    } = lease;
    let names = |s: String| {
        v.what
            .match_indices(&s)
            .any(|(i, m)| !v.what[i + m.len()..].starts_with(|c: char| c.is_ascii_digit()))
    };
    names(format!("p{p} (fence {fence}"))
        || names(format!("p{p} generates with fence {fence}"))
        || names(format!("p{p} generated with fence {fence}"))
        || names(format!("p{p}'s write with fence {fence}"))
        || (v.what.starts_with(&format!("slot {slot}: ID ")) && names(format!("by p{p} (")))
}

/// A finding beyond the assumptions is *caused* by the plant when the
/// traces first differ at the plant's own branch acting on a lease
/// ([`branch_at`]: as shipped it ends there, planted it goes on), and the
/// planted violation comes no earlier and involves that very lease
/// ([`involves`]): the lease the plant kept alive, before anything else in
/// the seed went differently, is one of the two the violation is about.
/// Conservative: a plant whose branch acts again later, on another lease,
/// after the traces have already parted, is not credited with what
/// follows.
pub fn caused_by(
    plants: &[leasehold_core::plant::Plant],
    d: &Difference,
    planted: &Violation,
) -> bool {
    d.at_ns().is_some_and(|at| planted.at >= at)
        && branch_at(plants, d).is_some_and(|lease| involves(planted, lease))
}

/// Runs `seeds` seeds from `first`, up to the first covered violation or
/// outage unless `all`; counts seeds, grants, violations and outages.
pub fn sweep(
    first: u64,
    seeds: u64,
    params: &Params,
    all: bool,
    progress: impl FnMut(&Sweep),
) -> Sweep {
    sweep_judged(first, seeds, params, all, |_| None, progress)
}

/// [`sweep`], also comparing the seeds beyond the assumptions with the
/// code as shipped: `judge` is asked about each one and answers whether
/// the same seed violates as shipped (`None`: not judged), which only a
/// process without the plant can tell, a plant being never unset in a
/// process. A seed that violates here and holds as shipped is a finding
/// beyond the assumptions, and the first ends the sweep too, unless `all`.
pub fn sweep_judged(
    first: u64,
    seeds: u64,
    params: &Params,
    all: bool,
    mut judge: impl FnMut(&Outcome) -> Option<bool>,
    mut progress: impl FnMut(&Sweep),
) -> Sweep {
    let mut out = Sweep::default();
    for seed in first..first + seeds {
        let sc = Scenario::generate(seed, params);
        let o = run(&sc, false);
        out.run += 1;
        if sc.kubernetes.is_some() {
            out.kubernetes += 1;
            out.kubernetes_beyond += u64::from(!o.covered);
            out.kubernetes_beyond_violations += u64::from(!o.covered && o.violation.is_some());
            out.kubernetes_violations += u64::from(o.covered && o.violation.is_some());
        }
        out.sim_ns += params.secs * SEC;
        out.grants += o.grants;
        if !o.covered {
            out.beyond += 1;
        }
        if o.steps_caught {
            out.steps_caught += 1;
        }
        if !o.covered {
            match (&o.violation, judge(&o)) {
                (Some(v), Some(false)) => {
                    out.beyond_findings += 1;
                    if out.beyond_found.is_none() {
                        out.beyond_found = Some((seed, v.clone()));
                        out.beyond_after = out.run;
                    }
                }
                (Some(_), Some(true)) => out.beyond_both += 1,
                (None, Some(true)) => out.beyond_shipped_only += 1,
                _ => {}
            }
        }
        match o.violation {
            Some(v) if o.covered => {
                out.covered_violations += 1;
                if out.found.is_none() {
                    out.found = Some((seed, v));
                    out.first_after = out.run;
                }
            }
            Some(_) => out.beyond_violations += 1,
            None => {}
        }
        match o.outage {
            Some(v) if o.covered => {
                out.covered_outages += 1;
                if out.outage.is_none() {
                    out.outage = Some((seed, v));
                    out.outage_after = out.run;
                }
            }
            Some(_) => out.beyond_outages += 1,
            None => {}
        }
        progress(&out);
        if (out.found.is_some() || out.outage.is_some() || out.beyond_found.is_some()) && !all {
            break;
        }
    }
    out
}

/// What a sweep of seeds found.
#[derive(Clone, Debug, Default)]
pub struct Sweep {
    /// Seeds run.
    pub run: u64,
    /// Simulated ns run.
    pub sim_ns: u64,
    /// Grants made.
    pub grants: u64,
    /// Seeds beyond what the margin covers.
    pub beyond: u64,
    /// Of those, seeds with a violation (expected, not bugs).
    pub beyond_violations: u64,
    /// Covered seeds with a violation.
    pub covered_violations: u64,
    /// The first covered seed with a violation.
    pub found: Option<(u64, Violation)>,
    /// Seeds run up to and including it.
    pub first_after: u64,
    /// Seeds covered only because a confirmed operation caught their
    /// store-clock steps beyond the margin.
    pub steps_caught: u64,
    /// Covered seeds with an outage (`liveness.rs`).
    pub covered_outages: u64,
    /// Seeds beyond the assumptions with an outage (not judged).
    pub beyond_outages: u64,
    /// The first covered seed with an outage.
    pub outage: Option<(u64, Violation)>,
    /// Seeds run up to and including it.
    pub outage_after: u64,
    /// Seeds in the Kubernetes mode.
    pub kubernetes: u64,
    /// Of those, seeds beyond what the margins cover.
    pub kubernetes_beyond: u64,
    /// Of those, seeds with a violation (expected, not bugs).
    pub kubernetes_beyond_violations: u64,
    /// Of those, covered seeds with a violation.
    pub kubernetes_violations: u64,
    /// Seeds beyond the assumptions that violate and, as [`sweep_judged`]'s
    /// judge says, hold as shipped: findings beyond the assumptions.
    pub beyond_findings: u64,
    /// The first of them.
    pub beyond_found: Option<(u64, Violation)>,
    /// Seeds run up to and including it.
    pub beyond_after: u64,
    /// Seeds beyond the assumptions that violate here and as shipped.
    pub beyond_both: u64,
    /// Seeds beyond the assumptions that hold here and violate as shipped
    /// (counted only where the judge was asked about holding seeds too).
    pub beyond_shipped_only: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `true_at` is the exact inverse of a clock reading: the first true
    /// instant at which the clock reads at least the value, for every drift
    /// the scenarios draw. The checker's windows end there.
    #[test]
    fn a_clock_reading_maps_back_to_its_first_true_instant() {
        let mut r = SplitMix::new(1);
        for _ in 0..20_000 {
            let c = ClockSpec {
                base: SEC + r.below(1_000 * SEC),
                ppm: r.below(100_001) as i64 - 50_000,
            };
            let l = c.base + r.below(100 * SEC);
            let t = c.true_at(l);
            assert!(c.local(t) >= l, "{c:?} {l}");
            assert!(t == 0 || c.local(t - 1) < l, "{c:?} {l}");
        }
    }

    /// The margin covers a slow clock only up to what it was sized for.
    #[test]
    fn a_seed_is_covered_only_while_the_margin_covers_its_clocks() {
        let mut sc = Scenario::generate(3, &Params::default());
        sc.store_steps.clear();
        sc.store_ppm = 0;
        sc.store_restarts.clear();
        sc.wipes.clear();
        for p in &mut sc.procs {
            p.clock.ppm = 0;
        }
        assert!(sc.covered());
        // The slowest rate covered: `(ttl − margin) / (1 + d) = ttl − resolution`.
        let slack =
            (sc.margin - sc.resolution).as_secs_f64() / (sc.ttl - sc.resolution).as_secs_f64();
        let just_inside = (slack * 0.9 * 1e6) as i64;
        sc.procs[0].clock.ppm = -just_inside;
        assert!(sc.covered());
        sc.procs[0].clock.ppm = -(slack * 1.1 * 1e6) as i64;
        assert!(!sc.covered());
        // A fast clock ends its deadline early: always covered.
        sc.procs[0].clock.ppm = 50_000;
        assert!(sc.covered());
    }

    /// A store that forgets may lose the floors that keep a successor's
    /// clock past its predecessor's stamps; then only the restart span's
    /// two skews do, for wall clocks within `max_clock_skew` of each other.
    #[test]
    fn a_store_that_forgets_is_covered_only_while_the_wall_clocks_agree() {
        let mut sc = Scenario::generate(3, &Params::default());
        sc.store_steps.clear();
        sc.store_ppm = 0;
        sc.store_restarts = vec![(10 * SEC, SEC, 2 * SEC)];
        sc.wipes.clear();
        for p in &mut sc.procs {
            p.clock.ppm = 0;
            p.wall_skew = 0;
            p.wall_steps.clear();
        }
        assert!(sc.forgets() && sc.covered());
        sc.procs[1].wall_steps.push((20 * SEC, 900 * MS as i64));
        assert!(sc.covered());
        sc.procs[2].wall_skew = -200 * MS as i64;
        assert!(!sc.covered(), "spread {}", sc.wall_spread());
        // A restart that forgets nothing loses no floor.
        sc.store_restarts[0].2 = 0;
        assert!(sc.covered());
        // A drift that carries a wall clock away counts as it goes.
        sc.procs[2].wall_skew = 0;
        sc.wipes.push(30 * SEC);
        sc.procs[3].clock.ppm = -5_000;
        assert_eq!(sc.wall_spread(), 900 * MS + 300 * MS);
        assert!(!sc.covered());
    }

    /// The first difference is the first line that differs, with the
    /// shorter trace's missing line empty; the lease it names is read off
    /// the shipped line, and a violation involves it only with its fence
    /// (or, for an ID issued twice, its slot) and only from there on.
    #[test]
    fn a_difference_is_caused_by_the_branch_only_on_the_lease_it_names() {
        use leasehold_core::plant::Plant;
        let shipped = "   1.000000000    p2 opens slot 0 fence 7\n   2.000000000    p2 closes: \
                       lost slot 0 fence 7: the store's clock ran 1ms ahead of this host's\n";
        let planted = "   1.000000000    p2 opens slot 0 fence 7\n   2.000000000    p2 extends \
                       (deadline in 1s local)\n";
        assert_eq!(first_difference(shipped, shipped), None);
        let d = first_difference(shipped, planted).expect("they differ");
        assert_eq!(
            (d.line, d.at(), d.at_ns()),
            (2, "2.000000000", Some(2 * SEC))
        );
        let lease = Lease {
            process: 2,
            slot: 0,
            fence: 7,
        };
        assert_eq!(branch_at(&[Plant::NoStoreClockCheck], &d), Some(lease));
        assert_eq!(branch_at(&[Plant::NoStopAtDeadline], &d), None);
        assert_eq!(branch_at(&[Plant::NoMargin], &d), None);
        let v = |at: u64, what: &str| Violation {
            at,
            what: what.to_string(),
        };
        let overlap = "slot 0: p2 (fence 7, window 1..3) and p1 (fence 9, window 2..4) may both \
                       generate for 1 ns";
        let plants = [Plant::NoStoreClockCheck];
        assert!(caused_by(&plants, &d, &v(3 * SEC, overlap)));
        assert!(
            !caused_by(&plants, &d, &v(SEC, overlap)),
            "before the difference"
        );
        let other = overlap.replace("fence 7,", "fence 70,");
        assert!(
            !caused_by(&plants, &d, &v(3 * SEC, &other)),
            "another lease"
        );
        let twice = "slot 0: ID 5 (stamped 1 Unix ms, sequence 0) issued twice: by p1 \
                     (incarnation 0, component a) at 1 and by p2 (incarnation 0, component b) at 2";
        assert!(involves(&v(0, twice), lease));
        assert!(!involves(&v(0, &twice.replace("slot 0", "slot 1")), lease));
        let timed_out = "   2.000000000    p4 call 12 timed out (a renewal of slot 1 fence 3)";
        let d = first_difference(timed_out, "   2.100000000    p0 killed").expect("they differ");
        assert_eq!(
            branch_at(&[Plant::NoStopAtDeadline], &d),
            Some(Lease {
                process: 4,
                slot: 1,
                fence: 3
            })
        );
        assert_eq!(branch_at(&[Plant::NoStoreClockCheck], &d), None);
    }
}
