//! Rule 9 broken on purpose: with `second-generation-state` planted, a
//! second generator on a gate whose generator is in use gets a state of its
//! own instead of the refusal that tells it to clone the first. (A process of
//! its own: a plant stays on for the rest of its process.)
#![cfg(feature = "planted-bugs")]

use leasehold_core::plant::{self, Plant};
use leasehold_core::{Floor, GenerationState, LeaseGate};
use std::sync::Arc;

struct State;

impl GenerationState for State {
    fn issued(&self) -> Floor {
        Floor(100)
    }
    fn in_use(&self) -> bool {
        true
    }
    fn form(&self) -> u64 {
        1
    }
}

#[test]
fn a_second_state_is_attached_while_the_first_is_in_use() {
    let gate = LeaseGate::new();
    gate.attach("First", Arc::new(State))
        .expect("the first attaches");
    assert!(gate.attach("First", Arc::new(State)).is_err());
    plant::plant(Plant::SecondGenerationState).expect("a planted-bugs build");
    let second = gate.attach("First", Arc::new(State));
    assert_eq!(second.map(|a| a.history()), Ok(Floor(100)));
}
