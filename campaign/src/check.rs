//! The checks of a campaign run: every ID unique, every ID in the pool, no
//! two holding periods of a slot overlapping, the closest hand-over, and no
//! fenced write accepted below a fence already accepted.

use std::collections::{BTreeMap, HashMap};

use crate::record::{Kind, Record};

/// The default 64-bit layout: 42 timestamp bits, 9 slot bits, 13 counter bits.
const COUNTER_BITS: u32 = 13;
const SLOT_MASK: u64 = (1 << 9) - 1;

fn slot_of(id: u64) -> u32 {
    ((id >> COUNTER_BITS) & SLOT_MASK) as u32
}

/// A holding period: one gate of one worker open on a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Period {
    /// The worker.
    pub worker: u32,
    /// The pool.
    pub kind: Kind,
    /// The slot.
    pub slot: u32,
    /// Its fence.
    pub fence: u64,
    /// The grant's floor.
    pub floor: u64,
    /// When the gate opened (BOOTTIME ns).
    pub open_ns: u64,
    /// When it closed, or its last known deadline.
    pub end_ns: u64,
    /// True when the close was seen (not only a deadline).
    pub closed: bool,
}

/// What a run of the campaign found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// IDs recorded, per kind.
    pub ids: BTreeMap<&'static str, u64>,
    /// IDs recorded more than once (counted once per extra copy).
    pub duplicates: u64,
    /// IDs whose slot is outside `0..pool_size`.
    pub outside_pool: u64,
    /// Holding periods.
    pub periods: Vec<Period>,
    /// Pairs of holding periods of one slot that overlap, with the overlap.
    pub overlaps: Vec<(Period, Period, u64)>,
    /// The closest hand-over: the least time from one holder's end to the
    /// next holder's start on a slot (negative for an overlap).
    pub closest_handover_ns: Option<i64>,
    /// Fenced writes the store accepted, and refused.
    pub fenced_accepted: u64,
    /// Fenced writes refused as stale.
    pub fenced_refused: u64,
    /// Accepted writes in the stores' logs (more than the workers recorded
    /// as accepted when a write timed out at the worker but reached the
    /// store, e.g. held by a network cut and delivered when it healed, or
    /// when a kill cut off the record; fewer when a restarted store lost
    /// some).
    pub fenced_logged: u64,
    /// Accepted writes whose fence was lower than one accepted before them
    /// on the same resource, in the store's own order.
    pub fence_violations: u64,
    /// Second generators on one lease, refused.
    pub second_generators_refused: u64,
    /// Stretches of refusals because a generator's clock was further behind
    /// the slot's floor than `max_clock_skew`.
    pub clock_behind: u64,
    /// The largest lag behind a floor that was refused.
    pub clock_behind_max_ms: u64,
    /// Grants that carried a floor from an earlier holder.
    pub grants_with_floor: u64,
    /// Grants whose fence was not above the fence of every earlier grant of
    /// the same slot: a fence issued again (a store that forgot its counter).
    pub fences_reissued: u64,
    /// The earliest moment (BOOTTIME ns) at which what the check found had
    /// happened, and what it was: when the second copy of a duplicate was
    /// being made (the later of the two runs' start readings), when the
    /// later of two overlapping periods opened, when a grant with a fence
    /// issued again opened, when a worker saw a write accepted below a fence
    /// accepted before it. `None` when nothing was found, or nothing found
    /// carries a time (a stale fence only in a store's log).
    pub first_found: Option<(u64, &'static str)>,
}

impl Report {
    /// True when nothing unsafe was found.
    pub fn is_clean(&self) -> bool {
        self.duplicates == 0
            && self.outside_pool == 0
            && self.overlaps.is_empty()
            && self.fence_violations == 0
            && self.fences_reissued == 0
    }

    /// All IDs recorded.
    pub fn total_ids(&self) -> u64 {
        self.ids.values().sum()
    }
}

/// Checks the logs of every worker (`(worker, records)`) for a pool of
/// `pool_size` slots; `fence_logs` holds, per resource, the fences of the
/// accepted writes in the store's order.
pub fn check(
    logs: &[(u32, Vec<Record>)],
    pool_size: u32,
    fence_logs: &BTreeMap<String, Vec<u64>>,
) -> Report {
    let mut report = Report::default();
    let mut gathered = Gathered::default();
    for (worker, records) in logs {
        for r in records {
            gathered.read(&mut report, *worker, r, pool_size);
        }
    }
    // In this order: of two findings at one moment, the first named stays.
    check_duplicates(&mut report, &mut gathered.runs);
    check_periods(&mut report, gathered.holds);
    check_fence_logs(&mut report, fence_logs, &mut gathered.accepted_writes);
    report
}

/// What the checks across records need from the workers' records.
#[derive(Default)]
struct Gathered {
    /// The runs of IDs of each kind: `(first, last, made at)`.
    runs: HashMap<Kind, Vec<(u64, u64, u64)>>,
    /// The holding periods, per `(worker, kind, gate epoch)`.
    holds: BTreeMap<(u32, Kind, u32), Period>,
    /// The fenced writes a worker saw accepted, per `(kind, slot)`:
    /// `(at, fence)`.
    accepted_writes: BTreeMap<(Kind, u32), Vec<(u64, u64)>>,
}

impl Gathered {
    /// Counts one record of `worker` into `report`, and keeps what the
    /// checks across records need.
    fn read(&mut self, report: &mut Report, worker: u32, record: &Record, pool_size: u32) {
        match *record {
            Record::Run {
                kind,
                first,
                last,
                at_ns,
            } => {
                *report.ids.entry(kind.name()).or_default() += last - first + 1;
                count_outside_pool(report, (first, last), at_ns, pool_size);
                self.runs
                    .entry(kind)
                    .or_default()
                    .push((first, last, at_ns));
            }
            Record::Hold {
                kind,
                epoch,
                slot,
                fence,
                floor,
                open_ns,
                until_ns,
                closed,
            } => self.merge_hold(
                epoch,
                Period {
                    worker,
                    kind,
                    slot,
                    fence,
                    floor,
                    open_ns,
                    end_ns: until_ns,
                    closed,
                },
            ),
            Record::Fenced {
                accepted,
                kind,
                slot,
                fence,
                at_ns,
            } => {
                if accepted {
                    report.fenced_accepted += 1;
                    self.accepted_writes
                        .entry((kind, slot))
                        .or_default()
                        .push((at_ns, fence));
                } else {
                    report.fenced_refused += 1;
                }
            }
            Record::SecondGeneratorRefused { .. } => report.second_generators_refused += 1,
            Record::ClockBehind { behind_ms, .. } => {
                report.clock_behind += 1;
                report.clock_behind_max_ms = report.clock_behind_max_ms.max(behind_ms);
            }
        }
    }

    /// Records of one grant (one gate epoch) merge: the earliest start, the
    /// latest end (a worker writes what it knows at each flush, and a flush
    /// may be cut short by a kill).
    fn merge_hold(&mut self, epoch: u32, period: Period) {
        self.holds
            .entry((period.worker, period.kind, epoch))
            .and_modify(|p| {
                p.open_ns = p.open_ns.min(period.open_ns);
                p.end_ns = p.end_ns.max(period.end_ns);
                p.closed |= period.closed;
            })
            .or_insert(period);
    }
}

/// Counts the ends of a run (`(first, last)`, made at `at_ns`) whose slot is
/// outside the pool, and a run that spans two slots.
fn count_outside_pool(report: &mut Report, (first, last): (u64, u64), at_ns: u64, pool_size: u32) {
    let outside = [first, last]
        .iter()
        .filter(|id| slot_of(**id) >= pool_size)
        .count()
        + usize::from(slot_of(first) != slot_of(last));
    report.outside_pool += outside as u64;
    if outside > 0 {
        found(&mut report.first_found, at_ns, "an ID outside the pool");
    }
}

/// IDs recorded more than once, across the runs of each kind.
fn check_duplicates(report: &mut Report, runs: &mut HashMap<Kind, Vec<(u64, u64, u64)>>) {
    for ranges in runs.values_mut() {
        let (dups, when) = overlap_count(ranges);
        report.duplicates += dups;
        if let Some(at) = when {
            found(&mut report.first_found, at, "duplicate IDs");
        }
    }
}

/// The holding periods: grants that carried a floor, fences issued again,
/// periods of one slot that overlap, and the closest hand-over.
fn check_periods(report: &mut Report, holds: BTreeMap<(u32, Kind, u32), Period>) {
    report.periods = holds.into_values().collect();
    report.grants_with_floor = report.periods.iter().filter(|p| p.floor > 0).count() as u64;
    let (reissued, when) = fences_reissued(&report.periods);
    report.fences_reissued = reissued;
    if let Some(at) = when {
        found(&mut report.first_found, at, "a fence issued again");
    }
    let (overlaps, closest) = period_overlaps(&report.periods);
    for (_, later, _) in &overlaps {
        found(
            &mut report.first_found,
            later.open_ns,
            "overlapping holding periods",
        );
    }
    report.overlaps = overlaps;
    report.closest_handover_ns = closest;
}

/// Writes the stores accepted below a fence they accepted before, in each
/// store's own order; and, when there are any, the first a worker saw.
fn check_fence_logs(
    report: &mut Report,
    fence_logs: &BTreeMap<String, Vec<u64>>,
    accepted_writes: &mut BTreeMap<(Kind, u32), Vec<(u64, u64)>>,
) {
    for fences in fence_logs.values() {
        report.fenced_logged += fences.len() as u64;
        let mut max = 0;
        for &f in fences {
            if f < max {
                report.fence_violations += 1;
            }
            max = max.max(f);
        }
    }
    // The stores' logs carry no time; the workers' own records of accepted
    // writes, in the order they saw them accepted, do.
    if report.fence_violations > 0 {
        for writes in accepted_writes.values_mut() {
            writes.sort_unstable();
            let mut max = 0;
            for &(at, f) in writes.iter() {
                if f < max {
                    found(
                        &mut report.first_found,
                        at,
                        "a write accepted below an accepted fence",
                    );
                    break;
                }
                max = max.max(f);
            }
        }
    }
}

/// Keeps the earliest finding (a time of 0 is a record without one).
fn found(first: &mut Option<(u64, &'static str)>, at_ns: u64, what: &'static str) {
    if at_ns > 0 && first.is_none_or(|(t, _)| at_ns < t) {
        *first = Some((at_ns, what));
    }
}

/// Who made the duplicates: per `(kind, slot, earlier worker, later
/// worker)` (the workers whose runs, in ID order, cover the value first and
/// again), how many values were recorded twice.
pub fn duplicate_sources(logs: &[(u32, Vec<Record>)]) -> BTreeMap<(Kind, u32, u32, u32), u64> {
    let mut runs: BTreeMap<Kind, Vec<(u64, u64, u32)>> = BTreeMap::new();
    for (worker, records) in logs {
        for r in records {
            if let Record::Run {
                kind, first, last, ..
            } = *r
            {
                runs.entry(kind).or_default().push((first, last, *worker));
            }
        }
    }
    let mut out = BTreeMap::new();
    for (kind, mut ranges) in runs {
        ranges.sort_unstable();
        let mut covered: Option<(u64, u32)> = None; // highest value so far, and whose
        for (first, last, worker) in ranges {
            if let Some((top, by)) = covered
                && first <= top
            {
                *out.entry((kind, slot_of(first), by, worker)).or_default() +=
                    last.min(top) - first + 1;
            }
            if covered.is_none_or(|(top, _)| last > top) {
                covered = Some((last, worker));
            }
        }
    }
    out
}

/// How many values lie in more than one of the inclusive `ranges`
/// (`(first, last, made at)`), and about when the first second copy was
/// made: the later start of two overlapping ranges, the earliest such (a
/// range is compared with the one reaching highest before it).
fn overlap_count(ranges: &mut [(u64, u64, u64)]) -> (u64, Option<u64>) {
    ranges.sort_unstable();
    let mut dups = 0;
    let mut when: Option<u64> = None;
    // The highest value covered so far, and when the range reaching it was made.
    let mut covered: Option<(u64, u64)> = None;
    for &(first, last, at) in ranges.iter() {
        if let Some((top, top_at)) = covered
            && first <= top
        {
            dups += last.min(top) - first + 1;
            let both = at.max(top_at);
            if both > 0 && at > 0 && top_at > 0 {
                when = Some(when.map_or(both, |w| w.min(both)));
            }
        }
        if covered.is_none_or(|(top, _)| last > top) {
            covered = Some((last, at));
        }
    }
    (dups, when)
}

/// Grants (periods, in the order they opened) whose fence is not above every
/// earlier grant's on the same slot. A slot is only granted after its
/// previous lease ended, so the order of the periods is the order of the
/// grants.
fn fences_reissued(periods: &[Period]) -> (u64, Option<u64>) {
    let mut by_slot: BTreeMap<(Kind, u32), Vec<&Period>> = BTreeMap::new();
    for p in periods {
        by_slot.entry((p.kind, p.slot)).or_default().push(p);
    }
    let (mut reissued, mut when) = (0, None::<u64>);
    for list in by_slot.values_mut() {
        list.sort_by_key(|p| p.open_ns);
        let mut highest: Option<u64> = None;
        for p in list.iter() {
            if highest.is_some_and(|h| p.fence <= h) {
                reissued += 1;
                when = Some(when.map_or(p.open_ns, |w| w.min(p.open_ns)));
            }
            highest = Some(highest.map_or(p.fence, |h| h.max(p.fence)));
        }
    }
    (reissued, when)
}

/// Overlapping holding periods of one slot (two live holders), and the
/// closest hand-over.
fn period_overlaps(periods: &[Period]) -> (Vec<(Period, Period, u64)>, Option<i64>) {
    let mut by_slot: BTreeMap<(Kind, u32), Vec<Period>> = BTreeMap::new();
    for p in periods {
        by_slot.entry((p.kind, p.slot)).or_default().push(*p);
    }
    let mut overlaps = Vec::new();
    let mut closest: Option<i64> = None;
    for list in by_slot.values_mut() {
        list.sort_by_key(|p| p.open_ns);
        let mut latest: Option<Period> = None; // the period ending last so far
        for p in list.iter() {
            if let Some(prev) = latest {
                let gap = p.open_ns as i64 - prev.end_ns as i64;
                if p.worker != prev.worker || p.fence != prev.fence {
                    closest = Some(closest.map_or(gap, |c| c.min(gap)));
                    if gap < 0 {
                        overlaps.push((prev, *p, prev.end_ns.min(p.end_ns) - p.open_ns));
                    }
                }
            }
            if latest.is_none_or(|l| p.end_ns > l.end_ns) {
                latest = Some(*p);
            }
        }
    }
    (overlaps, closest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(ms: u64, slot: u64, counter: u64) -> u64 {
        ms << 22 | slot << 13 | counter
    }

    fn hold(worker: u32, slot: u32, fence: u64, open: u64, end: u64) -> (u32, Record) {
        (
            worker,
            Record::Hold {
                kind: Kind::Sortable,
                epoch: fence as u32,
                slot,
                fence,
                floor: 0,
                open_ns: open,
                until_ns: end,
                closed: true,
            },
        )
    }

    fn logs(items: Vec<(u32, Record)>) -> Vec<(u32, Vec<Record>)> {
        let mut by: BTreeMap<u32, Vec<Record>> = BTreeMap::new();
        for (w, r) in items {
            by.entry(w).or_default().push(r);
        }
        by.into_iter().collect()
    }

    #[test]
    fn a_fence_issued_again_is_found() {
        let empty = BTreeMap::new();
        // Rising fences on each slot: clean.
        let r = check(
            &logs(vec![
                hold(1, 0, 5, 0, 10),
                hold(2, 0, 9, 20, 30),
                hold(1, 1, 3, 0, 10),
            ]),
            2,
            &empty,
        );
        assert_eq!(r.fences_reissued, 0);
        assert!(r.is_clean());
        // A later grant of slot 0 with fence 5 again, and one with 4.
        let r = check(
            &logs(vec![
                hold(1, 0, 5, 0, 10),
                hold(2, 0, 5, 20, 30),
                hold(3, 0, 4, 40, 50),
            ]),
            2,
            &empty,
        );
        assert_eq!(r.fences_reissued, 2);
        assert!(!r.is_clean());
    }

    #[test]
    fn clean_logs_are_clean() {
        let r = check(
            &logs(vec![
                (
                    1,
                    Record::Run {
                        kind: Kind::Sortable,
                        first: id(10, 3, 0),
                        last: id(10, 3, 99),
                        at_ns: 0,
                    },
                ),
                (
                    2,
                    Record::Run {
                        kind: Kind::Sortable,
                        first: id(11, 3, 0),
                        last: id(11, 3, 5),
                        at_ns: 0,
                    },
                ),
                hold(1, 3, 1, 100, 200),
                hold(1, 3, 1, 120, 150),
                hold(2, 3, 2, 250, 300),
            ]),
            4,
            &BTreeMap::from([("slot-3".into(), vec![1, 1, 2])]),
        );
        assert!(r.is_clean(), "{r:?}");
        assert_eq!(r.first_found, None);
        assert_eq!(r.total_ids(), 106);
        assert_eq!(r.fenced_logged, 3);
        assert_eq!(r.closest_handover_ns, Some(50));
    }

    /// The check can fail: duplicates, a slot outside the pool, two live
    /// holders, a stale fence accepted are all found and counted.
    #[test]
    fn every_violation_is_found() {
        let r = check(
            &logs(vec![
                (
                    1,
                    Record::Run {
                        kind: Kind::Counter,
                        first: id(10, 3, 0),
                        last: id(10, 3, 99),
                        at_ns: 120,
                    },
                ),
                (
                    2,
                    Record::Run {
                        kind: Kind::Counter,
                        first: id(10, 3, 90),
                        last: id(10, 3, 120),
                        at_ns: 140,
                    },
                ),
                (
                    2,
                    Record::Run {
                        kind: Kind::Counter,
                        first: id(10, 7, 0),
                        last: id(10, 7, 0),
                        at_ns: 0,
                    },
                ),
                hold(1, 3, 1, 100, 200),
                hold(2, 3, 2, 150, 300),
            ]),
            4,
            &BTreeMap::from([("slot-3".into(), vec![1, 2, 1])]),
        );
        assert_eq!(r.duplicates, 10);
        assert_eq!(r.outside_pool, 2);
        assert_eq!(r.overlaps.len(), 1);
        assert_eq!(r.overlaps[0].2, 50);
        assert_eq!(r.closest_handover_ns, Some(-50));
        assert_eq!(r.fence_violations, 1);
        assert!(!r.is_clean());
        // The second copies were being made from 140 on, before the second
        // holder's period opened at 150.
        assert_eq!(r.first_found, Some((140, "duplicate IDs")));
        let items = vec![
            (
                1,
                Record::Run {
                    kind: Kind::Counter,
                    first: id(10, 3, 0),
                    last: id(10, 3, 99),
                    at_ns: 0,
                },
            ),
            (
                2,
                Record::Run {
                    kind: Kind::Counter,
                    first: id(10, 3, 90),
                    last: id(10, 3, 120),
                    at_ns: 0,
                },
            ),
        ];
        assert_eq!(
            duplicate_sources(&logs(items)),
            BTreeMap::from([((Kind::Counter, 3, 1, 2), 10)])
        );
    }
}
