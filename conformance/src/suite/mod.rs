//! The behaviours. Each is one `pub async fn` taking a backend; each runs on a
//! fresh, randomly named pool.

use std::sync::Arc;

use leasehold_core::{BoxFuture, Capabilities};

use crate::glue::Glue;

mod acquisition;
mod context;
mod faults;
mod fences;
mod floors;
mod id_format;
mod inspect;
mod leadership;
mod manager;
mod release;
mod renewal;
mod revoke;

pub use acquisition::{
    concurrent_renew_and_acquire_keep_invariants, full_pool_answers_retryable_exhausted,
    oversubscribed_pool_gives_distinct_slots_then_exhausted,
    whole_pool_concurrent_acquirers_get_distinct_slots,
};
pub use context::{fresh_pool, fresh_pool_name};
pub use faults::{
    dropped_connections_give_retry, renewal_recovers_after_the_fault_heals,
    silent_store_gives_retry_within_timeout, unreachable_store_acquire_is_retryable,
};
pub use fences::fence_strictly_grows_across_holders;
pub use floors::floor_is_kept_across_holders;
pub use id_format::a_claim_declaring_another_id_format_is_refused;
pub use inspect::inspect_shows_holders_fences_floors_and_tombstones;
pub use leadership::{electors_never_lead_at_once, followers_observe_the_leader_and_its_fence};
pub use manager::{manager_holds_renews_and_releases, manager_restart_releases_the_orphaned_lease};
pub use release::{
    released_slot_is_immediately_acquirable, stale_release_never_frees_the_new_holders_slot,
};
pub use renewal::{
    renew_after_expiry_and_takeover_is_lost, renew_is_idempotent,
    renew_keeps_the_slot_past_the_original_ttl,
};
pub use revoke::{
    revoked_lease_is_lost_on_next_renewal, revoked_slot_stays_taken_until_the_old_expiry,
};

/// What a behaviour needs from a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// Any coordinated store.
    Store,
    /// A networked store (the fault proxy goes in front of it).
    Network,
    /// A backend that can delete a lease behind its holder's back.
    Revoke,
    /// A store that persists each slot's hand-over floor.
    Floor,
    /// A strategy that lists its slots ([`Capabilities::inspects`]) on a
    /// backend that can revoke.
    Inspect,
}

/// The result of one behaviour.
pub type Outcome = Result<(), String>;

/// One named behaviour.
#[derive(Clone, Copy)]
pub struct Behaviour {
    /// The test name.
    pub name: &'static str,
    /// What it needs.
    pub needs: Needs,
    /// Runs it.
    pub run: fn(Arc<dyn Glue>) -> BoxFuture<'static, Outcome>,
}

macro_rules! behaviours {
    ($($needs:ident $name:ident),* $(,)?) => {
        /// Every behaviour of the suite.
        pub fn all() -> Vec<Behaviour> {
            vec![$(Behaviour {
                name: stringify!($name),
                needs: Needs::$needs,
                run: |b| Box::pin($name(b)),
            }),*]
        }
    };
}

behaviours! {
    Store whole_pool_concurrent_acquirers_get_distinct_slots,
    Store oversubscribed_pool_gives_distinct_slots_then_exhausted,
    Store full_pool_answers_retryable_exhausted,
    Store renew_keeps_the_slot_past_the_original_ttl,
    Store renew_is_idempotent,
    Store renew_after_expiry_and_takeover_is_lost,
    Store stale_release_never_frees_the_new_holders_slot,
    Store fence_strictly_grows_across_holders,
    Store released_slot_is_immediately_acquirable,
    Store concurrent_renew_and_acquire_keep_invariants,
    Store manager_holds_renews_and_releases,
    Store manager_restart_releases_the_orphaned_lease,
    Network silent_store_gives_retry_within_timeout,
    Network dropped_connections_give_retry,
    Network unreachable_store_acquire_is_retryable,
    Network renewal_recovers_after_the_fault_heals,
    Revoke revoked_lease_is_lost_on_next_renewal,
    Revoke revoked_slot_stays_taken_until_the_old_expiry,
    Floor floor_is_kept_across_holders,
    Inspect inspect_shows_holders_fences_floors_and_tombstones,
    Inspect followers_observe_the_leader_and_its_fence,
    Store electors_never_lead_at_once,
    Store a_claim_declaring_another_id_format_is_refused,
}

/// Selects the behaviours a backend with `caps` (and `can_revoke`) runs.
pub fn select(caps: &Capabilities, can_revoke: bool) -> Vec<Behaviour> {
    all()
        .into_iter()
        .filter(|b| match b.needs {
            Needs::Store => caps.coordinated,
            Needs::Network => caps.coordinated && caps.networked,
            Needs::Revoke => caps.coordinated && can_revoke,
            Needs::Floor => caps.coordinated && caps.persists_floor,
            Needs::Inspect => caps.coordinated && caps.inspects && can_revoke,
        })
        .collect()
}

/// The prefix of an outcome that proves nothing either way: the machine (the
/// test or the store) stalled for longer than a lease's TTL, so the store may
/// rightly have expired a lease the test then expected to be live. The runner
/// repeats such a test on a fresh pool, up to [`STARVED_ATTEMPTS`] times; a
/// test starved every time fails (a bug that always looks like starvation
/// cannot pass).
pub const STARVED: &str = "starved: ";

/// How many times the runner tries a test that came back starved.
pub const STARVED_ATTEMPTS: u32 = 5;

#[cfg(test)]
mod tests {
    /// Backend tables and CI reports key on these names: moving a behaviour
    /// to another file must not rename it or change its place.
    #[test]
    fn behaviour_names_are_stable() {
        let names: Vec<_> = super::all().iter().map(|b| b.name).collect();
        assert_eq!(
            names,
            [
                "whole_pool_concurrent_acquirers_get_distinct_slots",
                "oversubscribed_pool_gives_distinct_slots_then_exhausted",
                "full_pool_answers_retryable_exhausted",
                "renew_keeps_the_slot_past_the_original_ttl",
                "renew_is_idempotent",
                "renew_after_expiry_and_takeover_is_lost",
                "stale_release_never_frees_the_new_holders_slot",
                "fence_strictly_grows_across_holders",
                "released_slot_is_immediately_acquirable",
                "concurrent_renew_and_acquire_keep_invariants",
                "manager_holds_renews_and_releases",
                "manager_restart_releases_the_orphaned_lease",
                "silent_store_gives_retry_within_timeout",
                "dropped_connections_give_retry",
                "unreachable_store_acquire_is_retryable",
                "renewal_recovers_after_the_fault_heals",
                "revoked_lease_is_lost_on_next_renewal",
                "revoked_slot_stays_taken_until_the_old_expiry",
                "floor_is_kept_across_holders",
                "inspect_shows_holders_fences_floors_and_tombstones",
                "followers_observe_the_leader_and_its_fence",
                "electors_never_lead_at_once",
                "a_claim_declaring_another_id_format_is_refused",
            ]
        );
    }
}
