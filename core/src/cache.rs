//! The in-process lease cache: a driver that is restarted in the same process
//! (a supervisor restarting a task, a test re-creating a manager) renews its
//! predecessor's lease instead of taking a new slot.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError, Weak};

use crate::strategy::Grant;

struct Entry {
    grant: Grant,
    /// Alive while the manager that holds the grant exists.
    owner: Weak<()>,
}

type Key = (String, String);

fn cache() -> &'static Mutex<HashMap<Key, Entry>> {
    static CACHE: OnceLock<Mutex<HashMap<Key, Entry>>> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

/// Takes the grant cached under `key`, unless its manager still exists
/// (two live drivers must never share a slot).
pub(crate) fn take_orphan(key: &Key) -> Option<Grant> {
    let mut map = cache().lock().unwrap_or_else(PoisonError::into_inner);
    if map.get(key)?.owner.upgrade().is_some() {
        return None;
    }
    map.remove(key).map(|e| e.grant)
}

pub(crate) fn put(key: Key, grant: Grant, owner: &Weak<()>) {
    let mut map = cache().lock().unwrap_or_else(PoisonError::into_inner);
    map.insert(
        key,
        Entry {
            grant,
            owner: owner.clone(),
        },
    );
}

/// Forgets the grant under `key` if it is owned by `owner`.
pub(crate) fn forget(key: &Key, owner: &Weak<()>) {
    let mut map = cache().lock().unwrap_or_else(PoisonError::into_inner);
    if map.get(key).is_some_and(|e| e.owner.ptr_eq(owner)) {
        map.remove(key);
    }
}
