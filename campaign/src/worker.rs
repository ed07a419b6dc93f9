//! The parts of a campaign worker that can be tested without a store: a
//! clock with a skewed wall time, and the tracker that turns gate readings
//! taken around each batch of IDs into holding periods.

use std::time::Duration;

use leasehold_core::{GateView, MonoTime};
use leasehold_nonce::{FastClock, Reading, TimeSource};

use crate::record::{Kind, Record};

/// The default time source with its wall clock offset by `skew_ns` (positive:
/// ahead): a host whose clock is wrong by that much. Monotonic readings (and so
/// the gate's deadline checks) are untouched, as on a real skewed host.
#[derive(Clone, Debug)]
pub struct Skewed {
    inner: FastClock,
    skew_ns: i64,
}

impl Skewed {
    /// A clock `skew_ms` milliseconds ahead (negative: behind).
    pub fn new(skew_ms: i64) -> Self {
        Self {
            inner: FastClock::new(),
            skew_ns: skew_ms.saturating_mul(1_000_000),
        }
    }
}

impl TimeSource for Skewed {
    #[inline]
    fn now(&self) -> Reading {
        self.inner.now()
    }
    fn precise(&self) -> MonoTime {
        self.inner.precise()
    }
    fn unix_offset(&self, fresh: bool) -> u64 {
        self.inner
            .unix_offset(fresh)
            .saturating_add_signed(self.skew_ns)
    }
    fn wall_clock_step(&self) -> Option<Duration> {
        self.inner.wall_clock_step()
    }
    fn guard(&self) -> Duration {
        self.inner.guard()
    }
}

/// What the tracker needs of a gate view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The gate holds a lease.
    pub open: bool,
    /// The grant's epoch.
    pub epoch: u64,
    /// Its slot.
    pub slot: u32,
    /// Its fence.
    pub fence: u64,
    /// Its floor (Unix ms).
    pub floor: u64,
    /// Its local deadline (BOOTTIME ns).
    pub deadline_ns: u64,
}

impl From<&GateView> for Snapshot {
    fn from(v: &GateView) -> Self {
        Self {
            open: v.open,
            epoch: v.epoch,
            slot: v.slot,
            fence: v.fence.0,
            floor: v.floor.0,
            deadline_ns: v.deadline.as_nanos(),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Current {
    view: Snapshot,
    open_ns: u64,
    end_ns: u64,
}

/// Turns readings around batches into holding periods that contain every
/// moment an ID was generated with the grant:
///
/// - before a batch: a gate view, then a clock reading `t0` (every ID of the
///   batch is made after it). Generation is tried whenever the gate is open,
///   even past its deadline: refusing there is the gate's job (DESIGN.md
///   rule 5), not the tracker's, so a gate that failed to would show;
/// - during the batch the caller keeps an ID only if, after it was made, the
///   gate still shows the epoch of the view (so the ID is that grant's), and
///   reads the gate's deadline just before that check;
/// - after it: a reading `t1`. A batch that kept an ID starts the grant's
///   period at its `t0` if none has started, and the period lasts at least
///   until `t0` and until the earlier of `t1` and the deadline read after the
///   last kept ID. (A worker frozen in mid-batch reads `t1` long after it made
///   its last ID; a gate that works refused past the deadline, which keeps
///   the period to what the grant allowed. A gate that let an ID through
///   after its deadline shows as a period reaching past it, to `t0`.)
#[derive(Debug)]
pub struct Tracker {
    kind: Kind,
    current: Option<Current>,
    /// The view and the reading `t0` before the batch in progress.
    batch: Option<(Snapshot, u64)>,
}

impl Tracker {
    /// For the generator of `kind`.
    pub fn new(kind: Kind) -> Self {
        Self {
            kind,
            current: None,
            batch: None,
        }
    }

    /// Before a batch: `view` then the reading `t0_ns`. Pushes onto `out` the
    /// record of a period that ended (a new epoch). Returns the epoch to
    /// generate with, or `None` when the gate is closed.
    pub fn before(&mut self, view: Snapshot, t0_ns: u64, out: &mut Vec<Record>) -> Option<u64> {
        if let Some(cur) = self.current
            && cur.view.epoch != view.epoch
        {
            out.push(self.record(&cur, true));
            self.current = None;
        }
        self.batch = view.open.then_some((view, t0_ns));
        view.open.then_some(view.epoch)
    }

    /// After a batch made with `epoch`: the reading `t1_ns`, and the deadline
    /// read after the last ID kept (`None` when none was kept).
    pub fn after(&mut self, epoch: u64, t1_ns: u64, last_deadline_ns: Option<u64>) {
        let (Some((view, t0)), Some(deadline)) = (self.batch.take(), last_deadline_ns) else {
            return;
        };
        if view.epoch != epoch {
            return;
        }
        let cur = self.current.get_or_insert(Current {
            view,
            open_ns: t0,
            end_ns: t0,
        });
        cur.end_ns = cur.end_ns.max(t0.max(t1_ns.min(deadline)));
    }

    /// The current period as known now (to write before the IDs it covers).
    pub fn hold(&self) -> Option<Record> {
        self.current.map(|c| self.record(&c, false))
    }

    /// Ends the current period (the worker stops).
    pub fn finish(&mut self) -> Option<Record> {
        self.current.take().map(|c| self.record(&c, true))
    }

    fn record(&self, c: &Current, closed: bool) -> Record {
        Record::Hold {
            kind: self.kind,
            epoch: c.view.epoch as u32,
            slot: c.view.slot,
            fence: c.view.fence,
            floor: c.view.floor,
            open_ns: c.open_ns,
            until_ns: c.end_ns,
            closed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(open: bool, epoch: u64, slot: u32, deadline_ns: u64) -> Snapshot {
        Snapshot {
            open,
            epoch,
            slot,
            fence: epoch * 10,
            floor: 0,
            deadline_ns,
        }
    }

    fn span(r: &Record) -> (u64, u64, bool) {
        match *r {
            Record::Hold {
                open_ns,
                until_ns,
                closed,
                ..
            } => (open_ns, until_ns, closed),
            _ => panic!("not a hold: {r:?}"),
        }
    }

    #[test]
    fn periods_cover_every_batch_and_stop_at_the_deadline() {
        let mut t = Tracker::new(Kind::Counter);
        let mut out = Vec::new();
        // Closed gate: nothing to generate, nothing recorded.
        assert_eq!(t.before(snap(false, 0, 0, 0), 5, &mut out), None);
        assert!(out.is_empty() && t.hold().is_none());
        // A grant whose first batch kept nothing starts no period.
        assert_eq!(t.before(snap(true, 1, 2, 1_000), 50, &mut out), Some(1));
        t.after(1, 60, None);
        assert!(out.is_empty() && t.hold().is_none());
        // The first batch that kept an ID starts the period at its reading.
        assert_eq!(t.before(snap(true, 1, 2, 1_000), 100, &mut out), Some(1));
        t.after(1, 150, Some(1_000));
        assert!(out.is_empty());
        assert_eq!(span(&t.hold().unwrap()), (100, 150, false));
        // A batch whose end was read after a pause past the deadline: the
        // generator refused past it, so the period ends there.
        assert_eq!(t.before(snap(true, 1, 2, 1_000), 200, &mut out), Some(1));
        t.after(1, 5_000, Some(1_000));
        assert_eq!(span(&t.hold().unwrap()), (100, 1_000, false));
        // A renewal moved the deadline: the period follows the batches.
        assert_eq!(t.before(snap(true, 1, 2, 2_000), 1_100, &mut out), Some(1));
        t.after(1, 1_200, Some(2_000));
        assert_eq!(span(&t.hold().unwrap()), (100, 1_200, false));
        // Past the deadline the gate is still asked (it refuses); a batch
        // that kept no ID moves nothing, however late its end was read.
        assert_eq!(t.before(snap(true, 1, 2, 2_000), 2_001, &mut out), Some(1));
        t.after(1, 9_000, None);
        assert_eq!(span(&t.hold().unwrap()), (100, 1_200, false));
        // A gate that let IDs through after its deadline: the period reaches
        // the batch's start, past the deadline.
        assert_eq!(t.before(snap(true, 1, 2, 2_000), 2_500, &mut out), Some(1));
        t.after(1, 2_600, Some(2_000));
        assert_eq!(span(&t.hold().unwrap()), (100, 2_500, false));
        // A new grant ends the old period (closed); the new one starts with
        // its first kept ID.
        out.clear();
        assert_eq!(t.before(snap(true, 2, 0, 9_000), 3_000, &mut out), Some(2));
        assert_eq!(out.len(), 1);
        assert_eq!(span(&out[0]), (100, 2_500, true));
        // A batch of another epoch than the one begun does not count.
        t.after(1, 4_000, Some(9_000));
        assert!(t.hold().is_none());
        assert_eq!(t.before(snap(true, 2, 0, 9_000), 3_100, &mut out), Some(2));
        t.after(2, 3_200, Some(9_000));
        assert_eq!(span(&t.hold().unwrap()), (3_100, 3_200, false));
        assert_eq!(span(&t.finish().unwrap()), (3_100, 3_200, true));
        assert!(t.hold().is_none());
    }

    #[test]
    fn skew_moves_only_the_wall_clock() {
        let (plain, ahead) = (FastClock::new(), Skewed::new(250));
        let diff = ahead.unix_offset(false) as i128 - plain.unix_offset(false) as i128;
        assert_eq!(diff, 250_000_000);
        let behind = Skewed::new(-250);
        let diff = behind.unix_offset(false) as i128 - plain.unix_offset(false) as i128;
        assert_eq!(diff, -250_000_000);
    }
}
