//! Loss flags: the grants a watch saw lost, so that their next renewal
//! answers `Lost` without a round trip. Below both the strategy (which
//! answers from them) and the watch (which sets them).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The most loss flags a strategy keeps (see [`LostFlags`]).
pub(crate) const MAX_LOST_FLAGS: usize = 1024;

/// How long a loss flag is kept (see [`LostFlags`]).
pub(crate) const LOST_FLAG_LIFETIME: Duration = Duration::from_secs(600);

/// The grants, as `(slot key, fence)`, that a watch saw lost, so that their
/// next renewal answers `Lost` without a round trip.
///
/// A flag is only a shortcut: without it the renewal asks etcd and gets the
/// same `Lost` (the key is gone, someone else's, or a tombstone). So flags
/// can be dropped at any time, and they are: when the renewal reports it,
/// when the grant is released, when this strategy claims the key anew (every
/// earlier holding of it is over), after [`LOST_FLAG_LIFETIME`], and the
/// oldest beyond [`MAX_LOST_FLAGS`]. Without that, a flag whose grant is
/// never renewed again (the manager moved on after the watch's report, or a
/// follower watched someone else's slot) would stay for the life of the
/// process.
#[derive(Default)]
pub(crate) struct LostFlags {
    flags: Mutex<HashMap<(String, i64), Instant>>,
}

impl LostFlags {
    /// Flags `(key, fence)` as lost.
    pub(crate) fn flag(&self, key: String, fence: i64) {
        self.flag_at(key, fence, Instant::now());
    }

    /// [`Self::flag`] at `now`: drops expired flags, then the oldest while
    /// full.
    fn flag_at(&self, key: String, fence: i64, now: Instant) {
        let mut flags = self.lock();
        flags.retain(|_, at| now.saturating_duration_since(*at) < LOST_FLAG_LIFETIME);
        while flags.len() >= MAX_LOST_FLAGS {
            let Some(oldest) = flags
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            flags.remove(&oldest);
        }
        flags.insert((key, fence), now);
    }

    /// True (once) when `(key, fence)` is flagged and the flag is still
    /// fresh; the flag is dropped either way.
    pub(crate) fn take(&self, key: &str, fence: i64) -> bool {
        self.take_at(key, fence, Instant::now())
    }

    fn take_at(&self, key: &str, fence: i64, now: Instant) -> bool {
        self.lock()
            .remove(&(key.to_owned(), fence))
            .is_some_and(|at| now.saturating_duration_since(at) < LOST_FLAG_LIFETIME)
    }

    /// Drops the flag of `(key, fence)`, if any.
    pub(crate) fn forget(&self, key: &str, fence: i64) {
        self.lock().remove(&(key.to_owned(), fence));
    }

    /// Drops every flag on `key`.
    pub(crate) fn forget_key(&self, key: &str) {
        self.lock().retain(|(k, _), _| k != key);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, i64), Instant>> {
        self.flags.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: usize) -> String {
        format!("lh/ids/{i}")
    }

    #[test]
    fn lost_flags_are_bounded_in_number() {
        let flags = LostFlags::default();
        let start = Instant::now();
        // Watches that saw losses nobody renews again (the manager moved on).
        for i in 0..MAX_LOST_FLAGS * 3 {
            flags.flag_at(key(i), 7, start + Duration::from_millis(i as u64));
            assert!(flags.len() <= MAX_LOST_FLAGS, "{} flags kept", flags.len());
        }
        let now = start + Duration::from_millis((MAX_LOST_FLAGS * 3) as u64);
        // The newest are kept, the oldest went first.
        assert!(flags.take_at(&key(MAX_LOST_FLAGS * 3 - 1), 7, now));
        assert!(!flags.take_at(&key(0), 7, now));
    }

    #[test]
    fn lost_flags_expire() {
        let flags = LostFlags::default();
        let start = Instant::now();
        flags.flag_at(key(1), 7, start);
        flags.flag_at(key(2), 7, start);
        let later = start + LOST_FLAG_LIFETIME + Duration::from_secs(1);
        // An old flag is not answered, and adding one drops the old ones.
        assert!(!flags.take_at(&key(1), 7, later));
        flags.flag_at(key(3), 7, later);
        assert_eq!(flags.len(), 1);
        assert!(flags.take_at(&key(3), 7, later));
        assert_eq!(flags.len(), 0);
    }

    #[test]
    fn lost_flags_go_with_their_holding() {
        let flags = LostFlags::default();
        flags.flag(key(1), 7);
        flags.flag(key(1), 9);
        flags.flag(key(2), 7);
        // A release drops its own flag.
        flags.forget(&key(2), 7);
        assert!(!flags.take(&key(2), 7));
        // A new claim of the key drops every flag on it.
        flags.forget_key(&key(1));
        assert_eq!(flags.len(), 0);
        // A renewal takes a flag once.
        flags.flag(key(3), 7);
        assert!(flags.take(&key(3), 7));
        assert!(!flags.take(&key(3), 7));
    }
}
