//! The in-process lease cache: a driver that is restarted in the same process
//! (a supervisor restarting a task, a test re-creating a manager) renews its
//! predecessor's lease instead of taking a new slot.
//!
//! Several managers may hold leases of the same pool in one process, so each
//! key holds a list; a grant is handed over only once its manager is gone.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError, Weak};

use crate::gate::LeaseGate;
use crate::strategy::Grant;

struct Entry {
    grant: Grant,
    /// The holder's gate: a successor asks it what its generators issued.
    gate: LeaseGate,
    /// Alive while the manager that holds the grant exists.
    owner: Weak<()>,
}

type Key = (String, String);

fn cache() -> &'static Mutex<HashMap<Key, Vec<Entry>>> {
    static CACHE: OnceLock<Mutex<HashMap<Key, Vec<Entry>>>> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

/// Takes a grant cached under `key` whose manager no longer exists (two live
/// managers must never share a slot).
pub(crate) fn take_orphan(key: &Key) -> Option<(Grant, LeaseGate)> {
    let mut map = cache().lock().unwrap_or_else(PoisonError::into_inner);
    let entries = map.get_mut(key)?;
    let i = entries.iter().position(|e| e.owner.strong_count() == 0)?;
    let e = entries.swap_remove(i);
    Some((e.grant, e.gate))
}

/// Records that `owner` holds `grant` through `gate` (replacing what `owner`
/// held before). Refused (false) when `owner` is already gone: a grant of a
/// dropped manager must not be handed to a successor while its driver may
/// still be using or releasing it.
pub(crate) fn put(key: Key, grant: Grant, gate: &LeaseGate, owner: &Weak<()>) -> bool {
    let mut map = cache().lock().unwrap_or_else(PoisonError::into_inner);
    if owner.strong_count() == 0 {
        return false;
    }
    let entries = map.entry(key).or_default();
    entries.retain(|e| !e.owner.ptr_eq(owner));
    entries.push(Entry {
        grant,
        gate: gate.clone(),
        owner: owner.clone(),
    });
    true
}

/// Forgets what `owner` held under `key`. False when it was not there any
/// more: a successor took it over.
pub(crate) fn forget(key: &Key, owner: &Weak<()>) -> bool {
    let mut map = cache().lock().unwrap_or_else(PoisonError::into_inner);
    let Some(entries) = map.get_mut(key) else {
        return false;
    };
    let before = entries.len();
    entries.retain(|e| !e.owner.ptr_eq(owner));
    let removed = entries.len() < before;
    if entries.is_empty() {
        map.remove(key);
    }
    removed
}
