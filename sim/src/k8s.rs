//! The Kubernetes mode of the modelled store: Lease objects that nothing
//! expires, claimers that judge expiry on their own clocks.
//!
//! As `lease-k8s` uses the API server: each slot is a Lease with a
//! resourceVersion from one counter per cluster, bumped by every write, and
//! no time-to-live. A claim LISTs the pool (a round trip); as the answer
//! arrives the claimer records, per slot, when it first saw the Lease at its
//! resourceVersion on its own monotonic clock (`cache.rs`), and takes an
//! absent or released slot at once and a held one only once its takeover
//! time has passed on that clock: both decisions are
//! `leasehold_core::observed`'s, the code `lease-k8s` runs. It then writes
//! to up to four candidates in turn, in random order, each write
//! conditioned on the resourceVersion it saw (a create for an absent slot):
//! a conflict moves on to the next, and after four it LISTs again, up to
//! sixteen LISTs and no longer than one TTL. The write raises the floor
//! annotation to the claimer's ceiling and hands the previous one back; the
//! fence is the resourceVersion of the winning write. A renewal succeeds
//! while the Lease still names its holder (the JSON Patch `test` of
//! `holderIdentity`), bumps the resourceVersion and raises the floor; a
//! release empties the holder and stores what was issued as the floor. No
//! answer carries a store time (rule 11 has nothing to check).
//!
//! Not modelled: the ambiguity rule's GET after a write whose answer was
//! lost and the adoption of such a write by a later claim (here the claim
//! times out and the Lease stays held by nobody until observers take it
//! over), the wipe guard's incarnation record (the store forgets nothing:
//! no crashes, wipes or failovers in this mode), revokes, pinned slots.

use std::time::Duration;

use leasehold_core::MonoTime;
use leasehold_core::observed::{self, Sighting, Standing};
use leasehold_core::rand::SplitMix;

use crate::{Ans, ProcSpec, Req, SEC, Scenario, Violation, World};

/// Writes one claim sends after one LIST before it lists again
/// (`lease-k8s`'s `WRITES_PER_LIST`).
const WRITES_PER_LIST: usize = 4;
/// LISTs one claim sends before it gives up (`MAX_LISTS`).
const MAX_LISTS: u32 = 16;

/// The Kubernetes mode's own setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kubernetes {
    /// What an observer waits past a Lease's duration before a takeover
    /// (`KubeConfig::takeover_margin`), before the 2 % on top.
    pub takeover_margin: Duration,
}

/// Whether `seed` runs in the Kubernetes mode (a quarter of the seeds), and
/// its takeover margin: `lease-k8s`'s default of 1 s, the pool's safety
/// margin, or none. From a stream of its own, so that the other seeds'
/// scenarios are what they were (and the seeds the tests name for the other
/// stores' faults keep them: the stream's key was picked so).
pub(crate) fn draw(seed: u64, margin: Duration) -> Option<Kubernetes> {
    let mut r = SplitMix::new(seed ^ 0x6b85_aea5_e6b8_51f3);
    if r.below(4) != 0 {
        return None;
    }
    let takeover_margin = match r.below(3) {
        0 => Duration::from_secs(1),
        1 => margin,
        _ => Duration::ZERO,
    };
    Some(Kubernetes { takeover_margin })
}

/// `leaseDurationSeconds` of a lease of `ttl`: whole seconds, rounded up.
fn lease_duration(ttl: Duration) -> Duration {
    Duration::from_secs(ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0))
}

/// Whether the margins cover the clocks in the Kubernetes mode: from its
/// request's send a holder's clock counts `ttl − margin` to its deadline,
/// and that must take no longer in true time than any observer's wait from
/// its first sighting of the holder's write, which comes after the send
/// ([`observed::takeover_wait`]: the longer of the Lease's duration and the
/// TTL, plus the takeover margin and 2 % of that, on the observer's clock).
/// The store's clock plays no part; nothing forgets.
pub(crate) fn covered(sc: &Scenario, k: Kubernetes) -> bool {
    let hold = (sc.ttl - sc.margin).as_secs_f64();
    let wait =
        observed::takeover_wait(lease_duration(sc.ttl), sc.ttl, k.takeover_margin).as_secs_f64();
    let rate = |p: &ProcSpec| 1.0 + p.clock.ppm as f64 / 1e6;
    let longest_hold = sc.procs.iter().map(|p| hold / rate(p)).fold(0.0, f64::max);
    let shortest_wait = sc
        .procs
        .iter()
        .map(|p| wait / rate(p))
        .fold(f64::INFINITY, f64::min);
    longest_hold <= shortest_wait
}

/// One Lease as the API server keeps it.
#[derive(Clone, Copy, Debug, Default)]
struct Lease {
    /// Its resourceVersion; 0 while it does not exist.
    rv: u64,
    /// The token in its `holderIdentity`; `None` when released (or absent).
    holder: Option<u64>,
    /// The floor annotation (Unix ms).
    floor: u64,
}

/// A claim under way: the lease manager's one acquire call.
#[derive(Clone, Debug)]
struct Claim {
    /// The acquire call's id.
    call: u64,
    /// The request it waits for (a LIST or a write).
    sub: u64,
    ceiling: u64,
    lists: u32,
    /// The claim gives up once its clock reads this (one TTL after it
    /// began).
    until: MonoTime,
    /// The candidates of the last LIST still to try, with the
    /// resourceVersion seen; and the one being written.
    /// Each as `(slot, resourceVersion, held)`.
    candidates: Vec<(u32, u64, bool)>,
    writing: Option<(u32, u64)>,
}

/// What one process remembers between requests, as the strategy does.
#[derive(Clone, Debug, Default)]
struct Observer {
    /// The process incarnation it belongs to: a restarted process starts
    /// with an empty memory.
    incarnation: u32,
    /// Per slot, the resourceVersion last seen and when it was first seen.
    seen: Vec<Option<Sighting<u64, MonoTime>>>,
    claim: Option<Claim>,
}

/// The Kubernetes store and its claimers' memories.
pub(crate) struct Store {
    leases: Vec<Lease>,
    /// The cluster's resourceVersion counter.
    revision: u64,
    /// The LIST answers on their way (taken as they are read).
    lists: Vec<Vec<Lease>>,
    observers: Vec<Observer>,
    takeover_margin: Duration,
}

impl Store {
    pub(crate) fn new(sc: &Scenario, k: Kubernetes) -> Self {
        Self {
            leases: vec![Lease::default(); sc.slots as usize],
            revision: 1_000,
            lists: Vec::new(),
            observers: vec![Observer::default(); sc.procs.len()],
            takeover_margin: k.takeover_margin,
        }
    }
}

impl Store {
    /// Per slot, the token its Lease names (if any) and its resourceVersion.
    pub(crate) fn holders(&self) -> impl Iterator<Item = (Option<u64>, u64)> + '_ {
        self.leases.iter().map(|l| (l.holder, l.rv))
    }
}

fn at(t: MonoTime) -> String {
    let n = t.as_nanos();
    format!("{}.{:09}", n / SEC, n % SEC)
}

impl World<'_> {
    fn kube(&mut self) -> &mut Store {
        self.kube
            .as_mut()
            .unwrap_or_else(|| unreachable!("the Kubernetes mode's store"))
    }

    /// Process `p`'s memory, emptied if it restarted since.
    fn observer(&mut self, p: usize) -> &mut Observer {
        let incarnation = self.procs[p].incarnation;
        let slots = self.sc.slots as usize;
        let o = &mut self.kube().observers[p];
        if o.incarnation != incarnation || o.seen.len() != slots {
            *o = Observer {
                incarnation,
                seen: vec![None; slots],
                claim: None,
            };
        }
        o
    }

    /// The trace's line on the mode.
    pub(crate) fn k8s_header(&mut self) {
        if let (true, Some(k)) = (self.trace_on, self.sc.kubernetes) {
            let ttl = self.sc.ttl;
            let wait = observed::takeover_wait(lease_duration(ttl), ttl, k.takeover_margin);
            let _ = std::fmt::Write::write_fmt(
                &mut self.trace,
                format_args!(
                    "kubernetes: no expiry on the store; takeover margin {:?}: an observer \
                     takes a held Lease over {wait:?} after it first saw it unchanged\n",
                    k.takeover_margin
                ),
            );
        }
    }

    /// The store's answer to `req` from process `p` (request `id`).
    pub(crate) fn k8s_answer(&mut self, id: u64, req: Req) -> Ans {
        let now = self.now;
        let kube = self.kube();
        match req {
            Req::List => {
                kube.lists.push(kube.leases.clone());
                Ans::Listed(kube.lists.len() as u32 - 1)
            }
            Req::Patch { slot, rv, ceiling } => {
                let l = &mut kube.leases[slot as usize];
                // A create meets an existing Lease, or a patch a moved
                // resourceVersion: 409.
                if l.rv != rv {
                    return Ans::Conflict;
                }
                kube.revision += 1;
                let floor = l.floor;
                *l = Lease {
                    rv: kube.revision,
                    holder: Some(id),
                    floor: floor.max(ceiling),
                };
                let fence = kube.revision;
                self.grants += 1;
                // The checker's own record: fences strictly grow per slot.
                let i = slot as usize;
                if fence <= self.granted[i] && self.fence_violation.is_none() {
                    self.fence_violation = Some(Violation {
                        at: now,
                        what: format!("slot {i}: fence {fence} granted after {}", self.granted[i]),
                    });
                }
                self.granted[i] = self.granted[i].max(fence);
                Ans::Patched { rv: fence, floor }
            }
            Req::Renew {
                slot,
                token,
                ceiling,
            } => {
                let l = &mut kube.leases[slot as usize];
                if l.holder != Some(token) {
                    return Ans::Lost;
                }
                kube.revision += 1;
                l.rv = kube.revision;
                l.floor = l.floor.max(ceiling);
                Ans::Renewed { store: 0 }
            }
            Req::Release {
                slot,
                token,
                issued,
            } => {
                let l = &mut kube.leases[slot as usize];
                if l.holder != Some(token) {
                    return Ans::NotHeld;
                }
                kube.revision += 1;
                l.rv = kube.revision;
                l.holder = None;
                l.floor = issued;
                Ans::Released
            }
            // A claim is a LIST and writes in this mode.
            Req::Acquire { .. } => Ans::Exhausted,
        }
    }

    /// The lease manager's acquire call `call` begins: a LIST.
    pub(crate) fn k8s_claim(&mut self, p: usize, call: u64, ceiling: u64) {
        let until = self.local(p) + self.sc.ttl;
        self.observer(p).claim = Some(Claim {
            call,
            sub: 0,
            ceiling,
            lists: 0,
            until,
            candidates: Vec::new(),
            writing: None,
        });
        self.k8s_list(p);
    }

    fn k8s_list(&mut self, p: usize) {
        let sub = self.next_id;
        self.next_id += 1;
        if let Some(c) = self.observer(p).claim.as_mut() {
            c.sub = sub;
            c.lists += 1;
            c.writing = None;
        }
        self.send(p, sub, Req::List);
    }

    /// An answer to a claim's LIST or write; false for anything else (the
    /// caller handles it).
    pub(crate) fn k8s_reply(&mut self, p: usize, id: u64, ans: Option<Ans>) -> bool {
        let Some(ans @ (Ans::Listed(_) | Ans::Patched { .. } | Ans::Conflict)) = ans else {
            return false;
        };
        let call = self.procs[p].call.map(|c| c.id);
        let live = self
            .observer(p)
            .claim
            .as_ref()
            .is_some_and(|c| Some(c.call) == call && c.sub == id);
        if !live {
            return true; // The claim is over: never seen.
        }
        self.log(Some(p), format_args!("answer {id}: {ans:?}"));
        match ans {
            Ans::Listed(i) => self.k8s_listed(p, i as usize),
            Ans::Patched { rv, floor } => {
                let now = self.local(p);
                let o = self.observer(p);
                let Some(Claim {
                    call,
                    writing: Some((slot, _)),
                    ..
                }) = o.claim.take()
                else {
                    return true;
                };
                observe(&mut o.seen[slot as usize], rv, now);
                let won = Ans::Granted {
                    slot,
                    token: id,
                    fence: rv,
                    floor,
                    store: 0,
                };
                self.on_reply(p, call, Some(won));
            }
            _ => self.k8s_next(p),
        }
        true
    }

    /// A LIST's answer arrived: record the sightings, choose the candidates
    /// on this process's clock, and write to the first.
    fn k8s_listed(&mut self, p: usize, i: usize) {
        let now = self.local(p);
        let ttl = self.sc.ttl;
        let duration = lease_duration(ttl);
        self.observer(p);
        let kube = self.kube();
        let margin = kube.takeover_margin;
        let leases = std::mem::take(&mut kube.lists[i]);
        let seen = &mut kube.observers[p].seen;
        for (slot, l) in leases.iter().enumerate() {
            if l.rv != 0 {
                observe(&mut seen[slot], l.rv, now);
            }
        }
        let listed = leases.iter().enumerate().map(|(s, l)| (s as u32, *l));
        let choice = observed::choose(listed, now, |slot, l| match l.holder {
            None => Standing::Takeable,
            Some(_) => Standing::Held(
                seen[slot as usize].and_then(|s| s.takeover_at(&l.rv, duration, ttl, margin)),
            ),
        });
        if self.trace_on {
            let seen = self.kube().observers[p].seen.clone();
            for (slot, l) in leases.iter().enumerate() {
                let Some(s) = seen[slot].filter(|_| l.holder.is_some()) else {
                    continue;
                };
                let takeover = observed::takeover_at(s.at, duration, ttl, margin);
                let verdict = if takeover <= now {
                    "expired on this clock"
                } else {
                    "held"
                };
                self.log(
                    Some(p),
                    format_args!(
                        "slot {slot} at rv {}: first seen at {} on its clock, takeover at {}, \
                         now {}: {verdict}",
                        l.rv,
                        at(s.at),
                        at(takeover),
                        at(now)
                    ),
                );
            }
        }
        let mut candidates: Vec<(u32, u64, bool)> = choice
            .candidates
            .iter()
            .map(|(s, l)| (*s, l.rv, l.holder.is_some()))
            .collect();
        if candidates.is_empty() {
            let call = self.observer(p).claim.take().map(|c| c.call);
            if let Some(call) = call {
                self.on_reply(p, call, Some(Ans::Exhausted));
            }
            return;
        }
        self.procs[p].rng.shuffle(&mut candidates);
        candidates.truncate(WRITES_PER_LIST);
        candidates.reverse();
        if let Some(c) = self.observer(p).claim.as_mut() {
            c.candidates = candidates;
        }
        self.k8s_next(p);
    }

    /// Writes to the next candidate, or LISTs again, or gives up.
    fn k8s_next(&mut self, p: usize) {
        let now = self.local(p);
        let Some(c) = self.observer(p).claim.as_mut() else {
            return;
        };
        let next = if now < c.until {
            c.candidates.pop()
        } else {
            c.candidates.clear();
            None
        };
        let (call, lists, ceiling) = (c.call, c.lists, c.ceiling);
        let Some((slot, rv, held)) = next else {
            if now < c.until && lists < MAX_LISTS {
                self.k8s_list(p);
            } else {
                self.observer(p).claim = None;
                self.on_reply(p, call, Some(Ans::Exhausted));
            }
            return;
        };
        let sub = self.next_id;
        self.next_id += 1;
        if let Some(c) = self.observer(p).claim.as_mut() {
            c.sub = sub;
            c.writing = Some((slot, rv));
        }
        if self.trace_on {
            let what = match (rv, held) {
                (0, _) => "creates",
                (_, true) => "takes over",
                (_, false) => "claims",
            };
            self.log(
                Some(p),
                format_args!("{what} slot {slot} on rv {rv}, as its LIST showed it"),
            );
        }
        self.send(p, sub, Req::Patch { slot, rv, ceiling });
    }
}

/// Records a sighting of `rv` at `now`: an unchanged resourceVersion keeps
/// its first sighting.
fn observe(seen: &mut Option<Sighting<u64, MonoTime>>, rv: u64, now: MonoTime) {
    match seen {
        Some(s) => s.observe(rv, now),
        None => *seen = Some(Sighting::new(rv, now)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Params;

    /// A quarter of the seeds, drawn apart from the rest.
    #[test]
    fn a_quarter_of_the_seeds_run_kubernetes() {
        let n = (0..4_000)
            .filter(|&s| draw(s, Duration::from_millis(50)).is_some())
            .count();
        assert!((900..1_100).contains(&n), "{n}");
    }

    /// The holder's `ttl − margin` against the observer's wait, each on its
    /// own clock: a fast observer and a slow holder are what can break it.
    #[test]
    fn the_takeover_wait_covers_clock_rates_up_to_what_it_adds() {
        let mut sc = Scenario::generate(3, &Params::default());
        let k = Kubernetes {
            takeover_margin: Duration::ZERO,
        };
        sc.ttl = Duration::from_secs(1);
        sc.margin = Duration::from_millis(20);
        for p in &mut sc.procs {
            p.clock.ppm = 0;
        }
        assert!(covered(&sc, k));
        // The wait is 1.02 s; the hold 0.98 s: rates 4 % apart are covered.
        sc.procs[0].clock.ppm = -20_000;
        sc.procs[1].clock.ppm = 20_000;
        assert!(covered(&sc, k));
        sc.procs[1].clock.ppm = 25_000;
        assert!(!covered(&sc, k));
        // A takeover margin buys more.
        let k = Kubernetes {
            takeover_margin: Duration::from_millis(100),
        };
        assert!(covered(&sc, k));
    }
}
