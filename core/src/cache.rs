//! The in-process lease cache: a driver that is restarted in the same process
//! (a supervisor restarting a task, a test re-creating a manager) renews its
//! predecessor's lease instead of taking a new slot.
//!
//! Several managers may hold leases of the same pool in one process, so each
//! key holds a list; a grant is handed over only once its manager is gone.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError, Weak};

use crate::strategy::Grant;

struct Entry {
    grant: Grant,
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
pub(crate) fn take_orphan(key: &Key) -> Option<Grant> {
    let mut map = cache().lock().unwrap_or_else(PoisonError::into_inner);
    let entries = map.get_mut(key)?;
    let i = entries.iter().position(|e| e.owner.strong_count() == 0)?;
    Some(entries.swap_remove(i).grant)
}

/// Records that `owner` holds `grant` (replacing what `owner` held before).
pub(crate) fn put(key: Key, grant: Grant, owner: &Weak<()>) {
    let mut map = cache().lock().unwrap_or_else(PoisonError::into_inner);
    let entries = map.entry(key).or_default();
    entries.retain(|e| !e.owner.ptr_eq(owner));
    entries.push(Entry {
        grant,
        owner: owner.clone(),
    });
}

/// Forgets what `owner` held under `key`.
pub(crate) fn forget(key: &Key, owner: &Weak<()>) {
    let mut map = cache().lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(entries) = map.get_mut(key) {
        entries.retain(|e| !e.owner.ptr_eq(owner));
        if entries.is_empty() {
            map.remove(key);
        }
    }
}
