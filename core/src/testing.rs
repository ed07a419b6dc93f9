//! Driving a [`LeaseGate`] by hand, for tests only (the `test-util`
//! feature; never enable it in a program that generates IDs).
//!
//! In a program only the lease manager's task opens, extends, closes and retires a
//! gate: a gate opened or extended by hand lets generation run past the
//! lease. Tests of generators, of the driver's races and of tools that decode
//! IDs need to do it anyway; they import [`GateControl`] and call the same
//! methods the driver calls.
//!
//! ```
//! use leasehold_core::testing::GateControl;
//! use leasehold_core::{Fence, LeaseGate, MonoTime};
//! use std::time::Duration;
//! let gate = LeaseGate::new();
//! let now = MonoTime::from_nanos(1_000);
//! gate.open(7, Fence(3), now + Duration::from_secs(1));
//! assert!(gate.check(now).is_ok());
//! assert!(gate.check(now + Duration::from_secs(1)).is_err()); // deadline passed
//! assert_eq!(gate.view().slot, 7);
//! ```

use crate::clock::MonoTime;
use crate::gate::{LeaseGate, Opening};
use crate::strategy::{Fence, Floor};

/// The lease manager task's calls on a gate, for tests that drive one by hand.
pub trait GateControl {
    /// Opens the gate for a new grant of `slot` with `fence` until
    /// `deadline`, with no floor and no ceiling.
    fn open(&self, slot: u32, fence: Fence, deadline: MonoTime);
    /// Opens the gate for a new grant (new epoch) with floor and ceiling.
    fn open_with(&self, opening: Opening);
    /// Moves the deadline and the ceiling of the current grant; a closed
    /// gate stays closed.
    fn extend(&self, deadline: MonoTime, ceiling: Floor);
    /// Closes the gate until the next opening.
    fn close(&self);
    /// Closes the gate if `epoch` is still its epoch; returns whether it did.
    fn close_if_epoch(&self, epoch: u64) -> bool;
    /// Closes the gate for good.
    fn retire(&self);
    /// Fixes the ID format generators on this gate must have; false when
    /// another was attached before.
    fn declare_form(&self, form: u64) -> bool;
    /// Counts a refused generation call, as a generator's attachment does.
    fn note_refused(&self);
}

impl GateControl for LeaseGate {
    fn open(&self, slot: u32, fence: Fence, deadline: MonoTime) {
        LeaseGate::open(self, slot, fence, deadline);
    }
    fn open_with(&self, opening: Opening) {
        LeaseGate::open_with(self, opening);
    }
    fn extend(&self, deadline: MonoTime, ceiling: Floor) {
        LeaseGate::extend(self, deadline, ceiling);
    }
    fn close(&self) {
        LeaseGate::close(self);
    }
    fn close_if_epoch(&self, epoch: u64) -> bool {
        LeaseGate::close_if_epoch(self, epoch)
    }
    fn retire(&self) {
        LeaseGate::retire(self);
    }
    fn declare_form(&self, form: u64) -> bool {
        LeaseGate::declare_form(self, form)
    }
    fn note_refused(&self) {
        LeaseGate::note_refused(self);
    }
}
