//! Which forward steps of the store's clock the assumptions cover, judged
//! over true time from what the run did.
//!
//! A forward step of `J` brings the store-side expiry of every lease alive
//! at that instant `J` nearer in true time; the holder's deadline does not
//! move. The margin covers that when `J` is within it (with the clocks'
//! drifts: `Scenario::covered`). Beyond the margin, what covers it is the
//! next confirmed operation on the lease (DESIGN.md, rule 11: "a jump while
//! renewals are failing cannot be seen until one succeeds; the margin is
//! what covers that window"): a renewal or release the store accepts after
//! the step. The store accepts one only from the holder of an unexpired
//! lease on its (jumped) clock, so an accepted renewal after the step
//! proves that the lease never expired on the store's side between the step
//! and the renewal: no one else can have been granted the slot meanwhile.
//! From the renewal on, the store's expiry and the holder's deadline are
//! counted from the same request on the same (jumped) clock, so the step
//! separates them no more: `store instant of arrival + ttl` against
//! `sent_at + ttl − margin`.
//!
//! So a step is *caught* when every lease alive at it (held, and unexpired
//! on the store's clock just before the step) has a renewal or release
//! accepted by the store after it, and a caught step is not counted
//! against the margin. A lease whose holder never gets one through (cut,
//! paused, killed) leaves the step counted, as before.
//!
//! Only where the store forgets nothing: a crash or failover that loses the
//! acknowledged renewal would leave the lease's store-side expiry as the
//! step shortened it.

/// The leases alive at each store-clock step, and which of them a later
/// accepted renewal or release confirmed.
#[derive(Clone, Debug, Default)]
pub(crate) struct StoreSteps {
    /// Per step, in the order they happened: its size (ns) and the tokens
    /// of the leases alive at it that no accepted renewal or release has
    /// confirmed since.
    steps: Vec<(u64, Vec<u64>)>,
}

impl StoreSteps {
    /// A step of `size` ns, with the tokens of the leases alive just before it.
    pub(crate) fn step(&mut self, size: u64, alive: Vec<u64>) {
        self.steps.push((size, alive));
    }

    /// The store accepted a renewal or release of the lease `token`.
    pub(crate) fn confirmed(&mut self, token: u64) {
        for (_, alive) in &mut self.steps {
            alive.retain(|&t| t != token);
        }
    }

    /// The sizes of the steps every lease alive at them saw confirmed.
    pub(crate) fn caught(&self) -> impl Iterator<Item = u64> + '_ {
        self.steps
            .iter()
            .filter(|(_, alive)| alive.is_empty())
            .map(|(size, _)| *size)
    }

    /// How many steps are caught, and how many happened.
    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.caught().count(), self.steps.len())
    }
}

#[cfg(test)]
mod tests {
    use super::StoreSteps;

    /// A step is caught once every lease alive at it has been confirmed
    /// after it; a lease granted after the step does not matter.
    #[test]
    fn a_step_is_caught_once_every_lease_alive_at_it_is_confirmed() {
        let mut s = StoreSteps::default();
        s.step(700, vec![1, 2]);
        s.confirmed(3);
        s.confirmed(1);
        assert_eq!(s.caught().sum::<u64>(), 0);
        assert_eq!(s.counts(), (0, 1));
        s.confirmed(2);
        assert_eq!(s.caught().sum::<u64>(), 700);
        // A later step with a lease that is never confirmed stays counted.
        s.step(300, vec![4]);
        assert_eq!(s.caught().sum::<u64>(), 700);
        assert_eq!(s.counts(), (1, 2));
        // A step with no lease alive at it harms nothing.
        s.step(50, Vec::new());
        assert_eq!(s.caught().sum::<u64>(), 750);
    }
}
