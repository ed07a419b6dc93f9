//! What one strategy remembers between requests: when it first saw each
//! Lease's resourceVersion (the observer's clock that judges expiry), the
//! floors it stored, acquiring writes whose answer was lost, and slots whose
//! create met a Lease the LIST did not show.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use leasehold_core::{PoolName, Token};
use tokio::time::Instant;

/// How long an unresolved write is remembered for adoption.
const PENDING_FOR: Duration = Duration::from_secs(600);

/// The resourceVersion last seen of one slot's Lease, and when it was first
/// seen (local monotonic time, at the answer).
#[derive(Clone, Debug)]
pub(crate) struct Observed {
    pub(crate) rv: String,
    pub(crate) at: Instant,
}

/// An acquiring write whose answer was lost: adopted if it landed.
#[derive(Clone, Debug)]
pub(crate) struct Pending {
    pub(crate) pool: String,
    pub(crate) slot: u32,
    pub(crate) token: Token,
    pub(crate) holder_id: String,
    pub(crate) prev_floor: u64,
    pub(crate) stored_floor: u64,
    pub(crate) at: Instant,
}

/// The strategy's memory; each part behind its own lock.
#[derive(Default)]
pub(crate) struct Caches {
    /// `(pool, slot)` → the resourceVersion last seen and when it was first
    /// seen.
    observed: Mutex<HashMap<(String, u32), Observed>>,
    /// Grant token → the floor this process last stored on its Lease.
    floors: Mutex<HashMap<Token, u64>>,
    /// Acquiring writes whose answer was lost: adopted if they landed.
    pending: Mutex<Vec<Pending>>,
    /// `(pool, slot)` whose create answered 409 although the LIST showed no
    /// Lease: a rival's, or a foreign object with our name.
    suspects: Mutex<HashSet<(String, u32)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Caches {
    /// Records that `rv` of `(pool, slot)` was seen at `at`; an unchanged
    /// resourceVersion keeps its first sighting.
    pub(crate) fn observe(&self, pool: &PoolName, slot: u32, rv: &str, at: Instant) {
        let mut map = lock(&self.observed);
        let entry = map
            .entry((pool.as_str().to_owned(), slot))
            .or_insert_with(|| Observed {
                rv: rv.to_owned(),
                at,
            });
        if entry.rv != rv {
            *entry = Observed {
                rv: rv.to_owned(),
                at,
            };
        }
    }

    /// The last sighting of `(pool, slot)`, if any.
    pub(crate) fn seen(&self, pool: &PoolName, slot: u32) -> Option<Observed> {
        lock(&self.observed)
            .get(&(pool.as_str().to_owned(), slot))
            .cloned()
    }

    /// The floor this process last stored for the grant of `token`.
    pub(crate) fn floor(&self, token: &Token) -> Option<u64> {
        lock(&self.floors).get(token).copied()
    }

    /// Remembers `floor` as stored for the grant of `token`.
    pub(crate) fn set_floor(&self, token: Token, floor: u64) {
        lock(&self.floors).insert(token, floor);
    }

    /// Forgets the floor of a grant that is over.
    pub(crate) fn forget_floor(&self, token: &Token) {
        lock(&self.floors).remove(token);
    }

    /// Remembers a write whose answer was lost, forgetting those older than
    /// [`PENDING_FOR`].
    pub(crate) fn remember_pending(&self, pending: Pending) {
        let mut all = lock(&self.pending);
        all.retain(|p| p.at.elapsed() < PENDING_FOR);
        all.push(pending);
    }

    /// The unresolved writes to slots of `pool`.
    pub(crate) fn pending_of(&self, pool: &PoolName) -> Vec<Pending> {
        lock(&self.pending)
            .iter()
            .filter(|p| p.pool == pool.as_str())
            .cloned()
            .collect()
    }

    /// Forgets the unresolved write of `token`.
    pub(crate) fn forget_pending(&self, token: &Token) {
        lock(&self.pending).retain(|q| q.token != *token);
    }

    /// Marks `(pool, slot)` a suspect: its create met a Lease the LIST did
    /// not show.
    pub(crate) fn suspect(&self, pool: &PoolName, slot: u32) {
        lock(&self.suspects).insert((pool.as_str().to_owned(), slot));
    }

    /// Takes the suspect slots of `pool` (each is checked once).
    pub(crate) fn take_suspects(&self, pool: &PoolName) -> Vec<u32> {
        let mut set = lock(&self.suspects);
        let mine: Vec<u32> = set
            .iter()
            .filter(|(p, _)| p == pool.as_str())
            .map(|(_, s)| *s)
            .collect();
        for slot in &mine {
            set.remove(&(pool.as_str().to_owned(), *slot));
        }
        mine
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unchanged_resource_version_keeps_its_first_sighting() {
        let caches = Caches::default();
        let pool = PoolName::new("ids").unwrap();
        let t0 = Instant::now();
        let later = |s| t0 + Duration::from_secs(s);
        assert!(caches.seen(&pool, 0).is_none());
        caches.observe(&pool, 0, "41", t0);
        caches.observe(&pool, 0, "41", later(5));
        let seen = caches.seen(&pool, 0).unwrap();
        assert_eq!((seen.rv.as_str(), seen.at), ("41", t0));
        // A write moved it on: the observer's clock starts again.
        caches.observe(&pool, 0, "42", later(6));
        let seen = caches.seen(&pool, 0).unwrap();
        assert_eq!((seen.rv.as_str(), seen.at), ("42", later(6)));
        // Each slot of each pool has its own clock.
        assert!(caches.seen(&pool, 1).is_none());
        assert!(caches.seen(&PoolName::new("other").unwrap(), 0).is_none());
    }

    #[test]
    fn a_suspect_is_checked_once() {
        let caches = Caches::default();
        let pool = PoolName::new("ids").unwrap();
        caches.suspect(&pool, 3);
        caches.suspect(&PoolName::new("other").unwrap(), 4);
        assert_eq!(caches.take_suspects(&pool), vec![3]);
        assert!(caches.take_suspects(&pool).is_empty());
        assert_eq!(
            caches.take_suspects(&PoolName::new("other").unwrap()),
            vec![4]
        );
    }
}
