//! A run's timeline in a small line-based text, for drawing a finding
//! (`cargo xtask sim` draws it as `target/sim/finding-<plants>-<seed>.svg`).
//!
//! Only the replay of a finding's (shrunk) scenario records it: a sweep
//! runs with no recorder, and the hook in the event loop is one `None`
//! test per event. What it writes is what the run and the checker already
//! know, in true nanoseconds from the run's start, so the same scenario is
//! the same text.
//!
//! One record a line, its kind first, fields apart by single spaces; a
//! reader skips kinds it does not know:
//!
//! ```text
//! leasehold-sim timeline 1
//! seed SEED
//! plants NAME[,NAME]|none
//! store expiring|kubernetes
//! length NS                          the run's length
//! ttl NS
//! processes N
//! slots N
//! start P AT                         process P starts
//! window P SLOT FENCE FROM TO        P may generate on SLOT (the checker's windows)
//! hold SLOT P FENCE FROM TO          the store holds SLOT for P (grant to expiry,
//!                                    release, or what the store forgot)
//! pause P FROM TO
//! cut P FROM TO                      a partition (the scenario's, or after a slow answer)
//! kill P AT DOWN                     killed at AT, a new process after DOWN
//! shutdown P AT DOWN                 a graceful end, a new process after DOWN
//! wall-step P AT BY                  its wall clock steps by BY ns (signed)
//! store-step AT BY                   the store's clock steps forward
//! store-crash AT DOWN FORGETS        down for DOWN, forgetting the writes of the last FORGETS ns
//! wipe AT                            the pool's records are wiped
//! failover AT DOWN LACKS             to a replica lacking the writes of the last LACKS ns
//! violation AT PARTIES WHAT...       PARTIES: the processes it names (`p0,p3`), or `-`
//! outage AT PARTIES WHAT...
//! ```
//!
//! A hold whose store forgot it early (a crash, a wipe, a failover) ends
//! at that instant; one still held when the run ends ends at its expiry,
//! or for a Kubernetes Lease, which nothing expires, at the run's end.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::{ClockSpec, Ev, SEC, Scenario, Violation, World};

/// A hold under way: (token, process, fence, from, until), true ns.
type Open = (u64, usize, u64, u64, u64);

/// What the replay records beyond what the checker keeps.
#[derive(Default)]
pub(crate) struct Recorder {
    /// Which process sent each request id: a grant's token is its
    /// acquire's id.
    owner: BTreeMap<u64, usize>,
    /// Per slot, the hold under way.
    open: Vec<Option<Open>>,
    /// The holds that ended: (slot, process, fence, from, to).
    holds: Vec<(usize, usize, u64, u64, u64)>,
}

impl World<'_> {
    /// After each event of a replay with a recorder: who the store holds
    /// each slot for, and until when in true time.
    pub(crate) fn note_timeline(&mut self, ev: &Ev) {
        let now = self.now;
        let held: Vec<Option<(u64, u64, u64)>> = match &self.kube {
            Some(k) => k
                .holders()
                .map(|(holder, rv)| holder.map(|t| (t, rv, u64::MAX)))
                .collect(),
            None => {
                let s = self.store_clock();
                let store = ClockSpec {
                    base: 1_000 * SEC,
                    ppm: self.sc.store_ppm,
                };
                self.slots
                    .iter()
                    .map(|sl| {
                        let alive = sl.holder.filter(|_| s < sl.expires)?;
                        let until = store.true_at(sl.expires.saturating_sub(self.store_jump));
                        Some((alive, sl.fence, until.max(now)))
                    })
                    .collect()
            }
        };
        let Some(rec) = self.timeline.as_mut() else {
            return;
        };
        if let Ev::AtStore(p, id, _) = ev {
            rec.owner.insert(*id, *p);
        }
        rec.open.resize(held.len(), None);
        for (slot, now_held) in held.into_iter().enumerate() {
            let was = rec.open[slot];
            match (was, now_held) {
                (Some((t, p, f, from, _)), Some((token, fence, until))) if t == token => {
                    rec.open[slot] = Some((t, p, f.max(fence), from, until));
                }
                (was, now_held) => {
                    if let Some((_, p, f, from, until)) = was {
                        // Expired by itself, released, forgotten or taken.
                        rec.holds.push((slot, p, f, from, until.min(now)));
                    }
                    rec.open[slot] = now_held.and_then(|(token, fence, until)| {
                        let p = *rec.owner.get(&token)?;
                        Some((token, p, fence, now, until))
                    });
                }
            }
        }
    }
}

/// Replays `sc` with a recorder and returns its timeline (the format
/// above); `plants` names what was planted, for the heading.
pub fn timeline(sc: &Scenario, plants: &[&str]) -> String {
    let mut w = World::new(sc, false);
    w.timeline = Some(Recorder::default());
    w.go();
    let violation = w.check();
    let outage = w.outage();
    let mut rec = w.timeline.take().unwrap_or_default();
    for (slot, open) in rec.open.iter().enumerate() {
        if let Some((_, p, f, from, until)) = *open {
            rec.holds.push((slot, p, f, from, until.min(sc.length)));
        }
    }
    rec.holds.sort_unstable();

    let mut out = String::new();
    let mut line = |args: std::fmt::Arguments<'_>| {
        let _ = writeln!(out, "{args}");
    };
    line(format_args!("leasehold-sim timeline 1"));
    line(format_args!("seed {}", sc.seed));
    let plants = if plants.is_empty() {
        "none".to_string()
    } else {
        plants.join(",")
    };
    line(format_args!("plants {plants}"));
    let store = if sc.kubernetes.is_some() {
        "kubernetes"
    } else {
        "expiring"
    };
    line(format_args!("store {store}"));
    line(format_args!("length {}", sc.length));
    line(format_args!("ttl {}", sc.ttl.as_nanos()));
    line(format_args!("processes {}", sc.procs.len()));
    line(format_args!("slots {}", sc.slots));
    for (p, spec) in sc.procs.iter().enumerate() {
        line(format_args!("start {p} {}", spec.start_at));
    }
    // The checker cuts windows at every event of their process; one
    // window here runs on for as long as the next one of its process
    // starts where it ends, on the same grant.
    let mut segments = w.segments.clone();
    segments.sort_by_key(|s| (s.proc, s.start, s.slot));
    let mut windows: Vec<crate::Segment> = Vec::new();
    for s in segments {
        match windows.last_mut() {
            Some(last)
                if (last.proc, last.slot, last.fence) == (s.proc, s.slot, s.fence)
                    && last.end == s.start =>
            {
                last.end = s.end;
            }
            _ => windows.push(s),
        }
    }
    for s in &windows {
        line(format_args!(
            "window {} {} {} {} {}",
            s.proc, s.slot, s.fence, s.start, s.end
        ));
    }
    for &(slot, p, fence, from, to) in &rec.holds {
        if to > from {
            line(format_args!("hold {slot} {p} {fence} {from} {to}"));
        }
    }
    for (p, proc) in w.procs.iter().enumerate() {
        let spec = &proc.spec;
        for &(at, len) in &spec.pauses {
            line(format_args!("pause {p} {at} {}", at + len));
        }
        // The scenario's partitions and those after slow answers.
        for &(at, len) in &proc.cuts {
            line(format_args!("cut {p} {at} {}", at + len));
        }
        for &(at, down, graceful) in &spec.ends {
            let kind = if graceful { "shutdown" } else { "kill" };
            line(format_args!("{kind} {p} {at} {down}"));
        }
        for &(at, by) in &spec.wall_steps {
            line(format_args!("wall-step {p} {at} {by}"));
        }
    }
    for &(at, by) in &sc.store_steps {
        line(format_args!("store-step {at} {by}"));
    }
    for &(at, down, lose) in &sc.store_restarts {
        line(format_args!("store-crash {at} {down} {lose}"));
    }
    for &at in &sc.wipes {
        line(format_args!("wipe {at}"));
    }
    for &(at, down, lose) in &sc.promotions {
        line(format_args!("failover {at} {down} {lose}"));
    }
    for (kind, v) in [("violation", &violation), ("outage", &outage)] {
        if let Some(v) = v {
            line(format_args!(
                "{kind} {} {} {}",
                v.at,
                parties(v),
                one_line(&v.what)
            ));
        }
    }
    out
}

/// The processes a finding names (`p0`, `p3`: its messages name each
/// party so), in order of first mention, or `-`.
fn parties(v: &Violation) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for word in v.what.split(|c: char| !c.is_ascii_alphanumeric()) {
        let named = word
            .strip_prefix('p')
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if named && !seen.contains(&word) {
            seen.push(word);
        }
    }
    if seen.is_empty() {
        "-".to_string()
    } else {
        seen.join(",")
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Params, run};

    /// The timeline's windows are the checker's, joined where one runs on
    /// into the next; the same scenario writes the same text.
    #[test]
    fn the_timeline_holds_the_checkers_windows_and_is_the_same_each_time() {
        let params = Params {
            processes: 3,
            secs: 20,
        };
        for seed in 0..20 {
            let sc = Scenario::generate(seed, &params);
            let text = timeline(&sc, &[]);
            assert_eq!(text, timeline(&sc, &[]), "seed {seed}");
            let held: u64 = text
                .lines()
                .filter_map(|l| l.strip_prefix("window "))
                .map(|w| {
                    let f: Vec<u64> = w.split(' ').map(|n| n.parse().unwrap()).collect();
                    f[4] - f[3]
                })
                .sum();
            assert_eq!(held, run(&sc, false).held_ns, "seed {seed}:\n{text}");
            assert!(text.contains("\nplants none\n"), "{text}");
        }
    }

    #[test]
    fn the_parties_are_the_processes_a_finding_names() {
        let v = Violation {
            at: 0,
            what: "slot 0: p1 (fence 3, window 1..2) and p0 (fence 4) p1 again; pool 2".into(),
        };
        assert_eq!(parties(&v), "p1,p0");
        let none = Violation {
            at: 0,
            what: "slot 0: fence 3 granted after 4".into(),
        };
        assert_eq!(parties(&none), "-");
    }
}
