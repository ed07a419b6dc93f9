//! What failovers cost the workers, measured from the run's own records:
//! per failover, how long no slot was granted after the new primary took
//! over, and which holders lost a lease whose row the new primary had; per
//! worker process, its longest time without IDs.
//!
//! What the new primary has (the rule CAMPAIGN.md states): a claim the
//! old primary confirmed before the failover's `knows_until_ns`. The
//! runner sets it to the moment it began the failover, before it cut the
//! standby or replica off, on an asynchronous topology (what was
//! confirmed before the cut was streamed to it; the cut itself comes
//! later, so the few milliseconds of streaming are covered); to the
//! primary's kill on a synchronous standby (every acknowledged commit is
//! on it, and none is acknowledged while it is cut off); and to the
//! leader's kill on etcd (every committed entry is on a quorum, which the
//! next leader is part of). A holder's claim is the start of its holding
//! period: the period opens at a reading taken after the grant was
//! confirmed, so a period opened before `knows_until_ns` is a row the new
//! primary has (its renewals only move that row's expiry).

use crate::check::Period;
use crate::record::{Kind, Record};
use crate::timeline::FaultMark;

/// One failover, on the run's timeline (BOOTTIME ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failover {
    /// When the runner began it: before the standby or replica was cut
    /// off, or before the etcd leader was killed.
    pub began_ns: u64,
    /// Claims confirmed before this are on the new primary (see the
    /// module documentation).
    pub knows_until_ns: u64,
    /// When the new primary took over (the address moved, every Sentinel
    /// named it, the Cluster served the slot); on etcd the leader's kill.
    pub took_over_ns: u64,
}

/// A holding period that ended through a failover although the new
/// primary had its row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LostHolder {
    /// The worker process.
    pub worker: u32,
    /// The pool.
    pub kind: Kind,
    /// The slot.
    pub slot: u32,
    /// When its last ID was made (BOOTTIME ns).
    pub last_id_ns: u64,
}

/// What one failover cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailoverCost {
    /// The failover.
    pub failover: Failover,
    /// From the take-over to the next grant of any slot (ns), if there was
    /// one.
    pub pause_ns: Option<u64>,
    /// Holders whose row the new primary had and who generated no more
    /// under that grant after the failover.
    pub lost_known: Vec<LostHolder>,
    /// Holders whose row the new primary had and whose grant ended in the
    /// failover's window, but whose worker (or the store) had another fault
    /// there: not counted, the other fault may be why.
    pub excused: u32,
}

/// What each failover cost, judged from the holding periods and the
/// run's other faults. A holder *lost its lease through the failover*
/// when its claim is on the new primary (`open < knows_until`), it still
/// generated when the failover began (`end ≥ began`), and it made its
/// last ID under that grant no
/// later than `took_over + ttl`: a renewal sent after the take-over would
/// carry its deadline past that, so a period ending by then was renewed
/// by nothing the new primary confirmed. `marks` are the run's faults:
/// a loss on a worker that another fault (its own, or the store's) hit
/// between `began − ttl` and the loss is excused. Failovers that took
/// over less than a TTL before `end_ns` are left out: the run's end would
/// look like a loss.
pub fn failover_costs(
    failovers: &[Failover],
    periods: &[Period],
    marks: &[FaultMark],
    ttl_ns: u64,
    end_ns: u64,
) -> Vec<FailoverCost> {
    failovers
        .iter()
        .filter(|f| f.took_over_ns + ttl_ns <= end_ns)
        .map(|f| {
            let pause_ns = periods
                .iter()
                .map(|p| p.open_ns)
                .filter(|&open| open >= f.took_over_ns)
                .min()
                .map(|next| next - f.took_over_ns);
            let mut lost_known = Vec::new();
            let mut excused = 0;
            for p in periods {
                let known = p.open_ns < f.knows_until_ns;
                let held_since_start = p.end_ns >= f.began_ns;
                let ended = p.end_ns <= f.took_over_ns + ttl_ns;
                if !(known && held_since_start && ended) {
                    continue;
                }
                let from = f.began_ns.saturating_sub(ttl_ns);
                let other_fault = marks.iter().any(|m| {
                    m.at_ns != f.began_ns
                        && m.worker.is_none_or(|w| w == p.worker)
                        && m.at_ns <= p.end_ns
                        && m.until_ns.unwrap_or(m.at_ns) >= from
                });
                if other_fault {
                    excused += 1;
                } else {
                    lost_known.push(LostHolder {
                        worker: p.worker,
                        kind: p.kind,
                        slot: p.slot,
                        last_id_ns: p.end_ns,
                    });
                }
            }
            FailoverCost {
                failover: *f,
                pause_ns,
                lost_known,
                excused,
            }
        })
        .collect()
}

/// A time a worker process made no IDs of one kind, between two IDs it
/// made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    /// The worker process.
    pub worker: u32,
    /// The generator.
    pub kind: Kind,
    /// The reading before the last ID before it (BOOTTIME ns).
    pub from_ns: u64,
    /// The reading before the first ID after it.
    pub to_ns: u64,
}

impl Gap {
    /// Its length (ns).
    pub fn len_ns(&self) -> u64 {
        self.to_ns - self.from_ns
    }

    /// Whether it overlaps a failover, from its start to its take-over.
    pub fn overlaps(&self, f: &Failover) -> bool {
        self.from_ns <= f.took_over_ns && self.to_ns >= f.began_ns
    }
}

/// Each worker process's longest gap between two of its IDs, per process
/// (the longest of its generators), in the order of the logs. A process
/// that made no IDs, or none after it lost its lease, has no such gap: a
/// spare waiting for a slot is not a process that cannot generate.
pub fn longest_gaps(logs: &[(u32, Vec<Record>)]) -> Vec<Gap> {
    logs.iter()
        .filter_map(|(worker, records)| {
            Kind::ALL
                .iter()
                .filter_map(|&kind| {
                    let mut at: Vec<u64> = records
                        .iter()
                        .filter_map(|r| match *r {
                            Record::Run { kind: k, at_ns, .. } if k == kind && at_ns != 0 => {
                                Some(at_ns)
                            }
                            _ => None,
                        })
                        .collect();
                    at.sort_unstable();
                    at.windows(2)
                        .map(|w| Gap {
                            worker: *worker,
                            kind,
                            from_ns: w[0],
                            to_ns: w[1],
                        })
                        .max_by_key(Gap::len_ns)
                })
                .max_by_key(Gap::len_ns)
        })
        .collect()
}

/// The longest gap between two IDs of one process that overlaps a
/// failover, over every process of the run.
pub fn longest_gap_over_failovers(
    logs: &[(u32, Vec<Record>)],
    failovers: &[Failover],
) -> Option<Gap> {
    logs.iter()
        .flat_map(|(worker, records)| {
            Kind::ALL.iter().flat_map(move |&kind| {
                let mut at: Vec<u64> = records
                    .iter()
                    .filter_map(|r| match *r {
                        Record::Run { kind: k, at_ns, .. } if k == kind && at_ns != 0 => {
                            Some(at_ns)
                        }
                        _ => None,
                    })
                    .collect();
                at.sort_unstable();
                at.windows(2)
                    .map(|w| Gap {
                        worker: *worker,
                        kind,
                        from_ns: w[0],
                        to_ns: w[1],
                    })
                    .collect::<Vec<_>>()
            })
        })
        .filter(|g| failovers.iter().any(|f| g.overlaps(f)))
        .max_by_key(Gap::len_ns)
}

/// The availability goals a topology's failovers are held to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Goals {
    /// The median grant pause may be at most this (ns).
    pub pause_median_ns: Option<u64>,
    /// The longest grant pause may be at most this (ns).
    pub pause_longest_ns: Option<u64>,
    /// Whether no holder whose row the new primary had may lose its lease.
    pub no_known_holder_lost: bool,
}

/// Each goal with the figure measured and whether it was met.
pub fn judge(goals: &Goals, costs: &[FailoverCost]) -> Vec<(String, bool)> {
    const MS: f64 = 1e6;
    let mut pauses: Vec<u64> = costs.iter().filter_map(|c| c.pause_ns).collect();
    pauses.sort_unstable();
    let mut out = Vec::new();
    if let (Some(goal), Some(&median)) = (goals.pause_median_ns, pauses.get(pauses.len() / 2)) {
        out.push((
            format!(
                "median grant pause {:.2} s ≤ {:.2} s",
                median as f64 / MS / 1e3,
                goal as f64 / MS / 1e3
            ),
            median <= goal,
        ));
    }
    if let (Some(goal), Some(&longest)) = (goals.pause_longest_ns, pauses.last()) {
        out.push((
            format!(
                "longest grant pause {:.2} s ≤ {:.2} s",
                longest as f64 / MS / 1e3,
                goal as f64 / MS / 1e3
            ),
            longest <= goal,
        ));
    }
    if goals.no_known_holder_lost {
        let lost: usize = costs.iter().map(|c| c.lost_known.len()).sum();
        out.push((
            format!("leases lost by holders the new primary knew: {lost} = 0"),
            lost == 0,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const TTL: u64 = 2 * S;

    fn period(worker: u32, open: u64, end: u64) -> Period {
        Period {
            worker,
            kind: Kind::Counter,
            slot: worker,
            fence: 1,
            floor: 0,
            open_ns: open,
            end_ns: end,
            closed: true,
        }
    }

    fn mark(at: u64, until: Option<u64>, worker: Option<u32>) -> FaultMark {
        FaultMark {
            at_ns: at,
            until_ns: until,
            what: "x".into(),
            worker,
        }
    }

    const F: Failover = Failover {
        began_ns: 100 * S,
        knows_until_ns: 100 * S,
        took_over_ns: 102 * S,
    };

    #[test]
    fn a_holder_the_new_primary_knew_who_stops_generating_is_lost() {
        let periods = [
            // Claimed before the cut, stopped before the take-over.
            period(1, 90 * S, 101 * S),
            // Claimed before the cut, renewed through it: kept.
            period(2, 90 * S, 150 * S),
            // Claimed in the lag: the new primary never had it.
            period(3, 100 * S + 1, 101 * S),
            // Ended before the failover began.
            period(4, 80 * S, 99 * S),
            // The next grant, 4.5 s after the take-over.
            period(5, 106 * S + S / 2, 150 * S),
        ];
        let marks = [mark(F.began_ns, Some(F.took_over_ns), None)];
        let costs = failover_costs(&[F], &periods, &marks, TTL, 200 * S);
        assert_eq!(costs.len(), 1);
        let c = &costs[0];
        assert_eq!(c.pause_ns, Some(4 * S + S / 2));
        assert_eq!(
            c.lost_known.iter().map(|l| l.worker).collect::<Vec<_>>(),
            [1]
        );
        assert_eq!(c.excused, 0);
    }

    #[test]
    fn on_a_synchronous_standby_a_claim_made_after_the_cut_is_known_too() {
        // Claimed between the start of the failover and the kill, lost.
        let periods = [period(1, 100 * S + S / 2, 101 * S)];
        let marks = [mark(F.began_ns, Some(F.took_over_ns), None)];
        let sync = Failover {
            knows_until_ns: 101 * S,
            ..F
        };
        let lost = |f: Failover| {
            failover_costs(&[f], &periods, &marks, TTL, 200 * S)[0]
                .lost_known
                .len()
        };
        assert_eq!(lost(sync), 1);
        // An asynchronous standby cut off at the start never had it.
        assert_eq!(lost(F), 0);
    }

    #[test]
    fn a_loss_another_fault_explains_is_excused_and_the_runs_end_is_no_loss() {
        let periods = [period(1, 90 * S, 101 * S), period(2, 90 * S, 101 * S)];
        // Worker 1 was stopped just before the failover began; worker 2's
        // fault is long over.
        let marks = [
            mark(F.began_ns, Some(F.took_over_ns), None),
            mark(99 * S, Some(101 * S), Some(1)),
            mark(50 * S, Some(52 * S), Some(2)),
        ];
        let c = &failover_costs(&[F], &periods, &marks, TTL, 200 * S)[0];
        assert_eq!(c.excused, 1);
        assert_eq!(c.lost_known.len(), 1);
        assert_eq!(c.lost_known[0].worker, 2);
        // A run that ended within a TTL of the take-over judges nothing.
        assert!(failover_costs(&[F], &periods, &marks, TTL, 103 * S).is_empty());
    }

    fn run(kind: Kind, at_ns: u64) -> Record {
        Record::Run {
            kind,
            first: at_ns,
            last: at_ns,
            at_ns,
        }
    }

    #[test]
    fn gaps_are_per_process_and_kind_and_those_over_a_failover_are_found() {
        let logs = vec![
            (
                1,
                vec![
                    run(Kind::Counter, 10 * S),
                    run(Kind::Sortable, 10 * S),
                    run(Kind::Counter, 11 * S),
                    // Sortable made nothing for 7 s, over no failover.
                    run(Kind::Sortable, 17 * S),
                ],
            ),
            (
                2,
                vec![
                    run(Kind::Counter, 99 * S),
                    run(Kind::Counter, 104 * S),
                    run(Kind::Counter, 105 * S),
                ],
            ),
            // Never made an ID twice: no gap.
            (3, vec![run(Kind::Counter, 5 * S)]),
        ];
        let gaps = longest_gaps(&logs);
        assert_eq!(
            gaps.iter()
                .map(|g| (g.worker, g.kind, g.len_ns()))
                .collect::<Vec<_>>(),
            [(1, Kind::Sortable, 7 * S), (2, Kind::Counter, 5 * S)]
        );
        let over = longest_gap_over_failovers(&logs, &[F]).unwrap();
        assert_eq!((over.worker, over.len_ns()), (2, 5 * S));
    }

    #[test]
    fn goals_say_met_or_missed() {
        let cost = |pause: u64, lost: usize| FailoverCost {
            failover: F,
            pause_ns: Some(pause),
            lost_known: vec![
                LostHolder {
                    worker: 1,
                    kind: Kind::Counter,
                    slot: 0,
                    last_id_ns: 0
                };
                lost
            ],
            excused: 0,
        };
        let goals = Goals {
            pause_median_ns: Some(5 * S),
            pause_longest_ns: Some(9 * S),
            no_known_holder_lost: true,
        };
        let met: Vec<bool> = judge(&goals, &[cost(4 * S, 0), cost(5 * S, 0), cost(9 * S, 0)])
            .into_iter()
            .map(|(_, m)| m)
            .collect();
        assert_eq!(met, [true, true, true]);
        let met: Vec<bool> = judge(&goals, &[cost(4 * S, 0), cost(6 * S, 1), cost(10 * S, 0)])
            .into_iter()
            .map(|(_, m)| m)
            .collect();
        assert_eq!(met, [false, false, false]);
    }
}
