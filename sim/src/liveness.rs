//! The checker's second kind of finding: an **outage**, a process kept from
//! generating where nothing excuses it. Not a uniqueness violation: no ID
//! is issued twice; what breaks is availability, which the timing rules
//! promise too (renew well before the deadline, rule 3; refuse only a
//! genuine forward step of the wall clock, rule 10). Judged only where the
//! code as shipped never causes one, so each condition is exact:
//!
//! - **A lease lost with nothing to lose it over.** A holder's machine ends
//!   its lease (`NotifyLost`: its deadline passed, the store answered
//!   `Lost`, the store's clock jumped) although, from the last time it
//!   confirmed the lease (a grant opened or a renewal extended its gate)
//!   less one TTL up to the loss, nothing faulted it: no pause, partition,
//!   lost message, slow or duplicated answer, end or restart of the
//!   process, no scheduling latency beyond the usual 2 ms, no crash, wipe,
//!   failover or clock step of the store, and neither its clock nor the
//!   store's drifts beyond the 500 ppm a host keeps. Then every renewal
//!   goes out on time (at most `(ttl − margin) / 2` after the last one was
//!   sent), its answer comes back within two network delays (at most
//!   30 ms, far inside the half of `ttl − margin` left, at least 375 ms),
//!   and the store, which only a holder's own release or the lease's
//!   expiry frees, accepts it: the code as shipped keeps the lease.
//! - **A pending step that is none.** A process may generate (its gate
//!   says yes) but refuses because `UnixOffset` holds a wall-clock step
//!   pending, although its wall clock (`wall − mono`, measured now) is not
//!   ahead by more than the step limit of the highest offset this process
//!   (this incarnation) has already used. The shipped offset never goes
//!   down, so the offset in use is that highest one, and a step is pending
//!   only for a measurement beyond it by more than the limit: never.
//!
//! Both are judged over true time from what the run did, and counted only
//! in covered seeds, as violations are.

use std::cell::Cell;

use crate::Violation;

/// One process's record.
#[derive(Clone, Debug, Default)]
struct Proc {
    /// When something faulted it: (from, to), true ns.
    faults: Vec<(u64, u64)>,
    /// When it last confirmed its lease (a gate opened or extended).
    confirmed: u64,
    /// The highest Unix offset this incarnation has used (ns).
    highest: Cell<u64>,
}

/// A lease lost: (process, judged from, lost at, why).
type Loss = (usize, u64, u64, String);

/// What the run did that liveness is judged on.
#[derive(Clone, Debug, Default)]
pub(crate) struct Liveness {
    procs: Vec<Proc>,
    losses: Vec<Loss>,
    /// The first refusal for a step that is none.
    refusal: Option<Violation>,
}

impl Liveness {
    pub(crate) fn new(processes: usize) -> Self {
        Self {
            procs: vec![Proc::default(); processes],
            ..Self::default()
        }
    }

    /// Something faulted process `p` from `from` to `to` (true ns).
    pub(crate) fn fault(&mut self, p: usize, from: u64, to: u64) {
        self.procs[p].faults.push((from, to));
    }

    /// Process `p`'s gate opened or was extended at `now`.
    pub(crate) fn confirmed(&mut self, p: usize, now: u64) {
        self.procs[p].confirmed = now;
    }

    /// Process `p`'s machine ended its lease at `now`.
    pub(crate) fn lost(&mut self, p: usize, now: u64, ttl: u64, why: String) {
        let since = self.procs[p].confirmed.saturating_sub(ttl);
        self.losses.push((p, since, now, why));
    }

    /// Process `p` restarts: a new Unix offset, with no history.
    pub(crate) fn restart(&mut self, p: usize) {
        self.procs[p].highest.set(0);
    }

    /// Process `p` uses the Unix offset `offset`.
    pub(crate) fn uses_offset(&self, p: usize, offset: u64) {
        let h = &self.procs[p].highest;
        h.set(h.get().max(offset));
    }

    /// Process `p` may generate at `now` but refuses for a pending step,
    /// with its wall clock measured at `measured` (`wall − mono`, ns) and
    /// the step limit `limit` (ns).
    pub(crate) fn refused(&mut self, p: usize, now: u64, measured: u64, limit: u64) {
        let highest = self.procs[p].highest.get();
        if self.refusal.is_none() && measured <= highest.saturating_add(limit) {
            self.refusal = Some(Violation {
                at: now,
                what: format!(
                    "p{p} may generate but refuses for a pending wall-clock step, although its \
                     wall clock is {} ns from the highest offset it has used (the step limit is \
                     {limit} ns)",
                    i128::from(measured) - i128::from(highest)
                ),
            });
        }
    }

    /// The first outage: a refusal for a step that is none, or a lease lost
    /// where nothing faulted its holder. `store` holds the store's faults
    /// (from, to); `drifts(p)` says whether process `p`'s clock or the
    /// store's drifts beyond what a host keeps.
    pub(crate) fn first(
        &self,
        store: &[(u64, u64)],
        drifts: impl Fn(usize) -> bool,
    ) -> Option<Violation> {
        let meets = |a: u64, b: u64, f: &(u64, u64)| f.0 <= b && f.1 >= a;
        let lost = self
            .losses
            .iter()
            .filter(|(p, since, at, _)| {
                !drifts(*p)
                    && !self.procs[*p].faults.iter().any(|f| meets(*since, *at, f))
                    && !store.iter().any(|f| meets(*since, *at, f))
            })
            .map(|(p, since, at, why)| Violation {
                at: *at,
                what: format!(
                    "p{p} lost its lease ({why}) although nothing faulted it since {}",
                    crate::secs(*since).trim_start()
                ),
            })
            .next();
        match (lost, &self.refusal) {
            (Some(l), Some(r)) if r.at < l.at => Some(r.clone()),
            (Some(l), _) => Some(l),
            (None, r) => r.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Liveness;

    const SEC: u64 = 1_000_000_000;

    /// A loss is an outage only when nothing faulted its holder from a TTL
    /// before its last confirmation up to the loss, nor the store then,
    /// and no clock drifts beyond what a host keeps.
    #[test]
    fn a_lease_lost_is_an_outage_only_with_nothing_to_excuse_it() {
        let mut l = Liveness::new(2);
        l.confirmed(0, 10 * SEC);
        l.lost(0, 12 * SEC, SEC, "deadline".into());
        l.fault(0, 5 * SEC, 8 * SEC); // before the window
        l.fault(1, 11 * SEC, 11 * SEC); // another process
        assert_eq!(l.first(&[], |_| false).map(|v| v.at), Some(12 * SEC));
        assert!(l.first(&[], |_| true).is_none(), "a drifting clock");
        assert!(
            l.first(&[(9 * SEC, 9 * SEC)], |_| false).is_none(),
            "a store fault"
        );
        l.fault(0, 8 * SEC, 9 * SEC + 1); // reaches into the window
        assert!(l.first(&[], |_| false).is_none());
    }

    /// A refusal for a pending step is an outage only while the clock is
    /// within the step limit of the highest offset already used.
    #[test]
    fn a_refusal_is_an_outage_only_within_the_limit_of_an_offset_used() {
        let mut l = Liveness::new(1);
        l.uses_offset(0, 100 * SEC);
        l.uses_offset(0, 90 * SEC); // lowered: the highest stays
        l.refused(0, SEC, 101 * SEC + 1, SEC);
        assert!(l.first(&[], |_| false).is_none(), "a genuine step");
        l.refused(0, 2 * SEC, 101 * SEC, SEC);
        assert_eq!(l.first(&[], |_| false).map(|v| v.at), Some(2 * SEC));
        // A restart forgets the offsets used.
        let mut l = Liveness::new(1);
        l.uses_offset(0, 100 * SEC);
        l.restart(0);
        l.refused(0, SEC, 100 * SEC, SEC);
        assert!(l.first(&[], |_| false).is_none());
    }
}
