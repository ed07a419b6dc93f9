//! Expiry judged by observers on their own clocks, for stores that expire
//! nothing.
//!
//! Some stores keep no time-to-live: a Kubernetes Lease stays held until it
//! is written again, and the `renewTime` it carries is whatever its holder's
//! wall clock said. There a claimer can only judge expiry by what it
//! observed itself: the record's version and when, on its own monotonic
//! clock, the answer carrying that version first arrived. A held record may
//! be taken over once it has stayed at one version for the longer of its
//! lease duration and the claimer's TTL, plus a takeover margin, plus 2 % of
//! that wait (for clock rates), and only by a write conditioned on that
//! version. The holder's own gate closes at its request's send time plus
//! TTL minus its safety margin, before the observer's first sighting plus
//! TTL: the write that made the version was sent before the observer saw it.
//!
//! The functions here are the decisions only, on any instant type (a tokio
//! `Instant`, a [`MonoTime`](crate::MonoTime), a simulator's clock), free of
//! I/O; a store's backend feeds them what it read.
//!
//! ```
//! use std::time::Duration;
//! use leasehold_core::MonoTime;
//! use leasehold_core::observed::{Sighting, Standing, choose};
//!
//! let secs = |s: u64| MonoTime::from_nanos(s * 1_000_000_000);
//! let ttl = Duration::from_secs(10);
//! let margin = Duration::from_secs(1);
//! // Slot 0 seen at version 41 at 100 s; it is still at 41 when listed again.
//! let mut seen = Sighting::new(41, secs(100));
//! seen.observe(41, secs(105)); // unchanged: the first sighting counts
//! let listed = [(0, Some(41)), (1, None)]; // slot 1 is free
//! let at = |now| {
//!     choose(listed, now, |_, version: &Option<u64>| match version {
//!         Some(v) => Standing::Held(seen.takeover_at(v, ttl, ttl, margin)),
//!         None => Standing::Takeable,
//!     })
//! };
//! let early = at(secs(110));
//! assert_eq!(early.candidates, vec![(1, None)]);
//! // 100 s + 10 s + 1 s + 2 % of 10 s.
//! assert_eq!(early.earliest, Some(secs(111) + Duration::from_millis(200)));
//! let late = at(secs(112));
//! assert_eq!(late.candidates, vec![(0, Some(41)), (1, None)]);
//! ```

use std::ops::Add;
use std::time::Duration;

/// How long an observer waits, from its first sighting of a held record at
/// one version, before it may take the record over: the longer of the
/// record's lease duration (`lease`) and the observer's own `ttl`, plus
/// `margin`, plus 2 % of that longer one (the clocks' rates may differ).
#[must_use]
pub fn takeover_wait(lease: Duration, ttl: Duration, margin: Duration) -> Duration {
    let wait = lease.max(ttl);
    wait + margin + wait / 50
}

/// When a record first seen at `first_seen` (on the observer's monotonic
/// clock) and unchanged since may be taken over: [`takeover_wait`] later.
#[must_use]
pub fn takeover_at<I: Add<Duration, Output = I>>(
    first_seen: I,
    lease: Duration,
    ttl: Duration,
    margin: Duration,
) -> I {
    first_seen + takeover_wait(lease, ttl, margin)
}

/// A record's version as this observer last saw it, and when it first saw
/// it at that version (its own monotonic clock, as the answer arrived).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sighting<V, I> {
    /// The version seen (a Kubernetes resourceVersion).
    pub version: V,
    /// When it was first seen at that version.
    pub at: I,
}

impl<V: PartialEq, I: Copy + Add<Duration, Output = I>> Sighting<V, I> {
    /// A first sighting of `version` at `at`.
    pub fn new(version: V, at: I) -> Self {
        Self { version, at }
    }

    /// Records that the record was seen at `version` at `at`: an unchanged
    /// version keeps its first sighting; a new one starts the wait again.
    pub fn observe(&mut self, version: V, at: I) {
        if self.version != version {
            *self = Self { version, at };
        }
    }

    /// When the record, held at `version` with a lease duration of `lease`,
    /// may be taken over ([`takeover_at`]); `None` when this observer has not
    /// seen it at that version (it cannot tell how old that version is).
    #[must_use]
    pub fn takeover_at(
        &self,
        version: &V,
        lease: Duration,
        ttl: Duration,
        margin: Duration,
    ) -> Option<I> {
        (self.version == *version).then(|| takeover_at(self.at, lease, ttl, margin))
    }
}

/// How a slot stands for a claimer, as one read of the store says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing<I> {
    /// Nobody holds it (absent or released): it may be taken now.
    Takeable,
    /// Someone holds it; when it may be taken over, if this observer can
    /// tell (see [`Sighting::takeover_at`]).
    Held(Option<I>),
}

/// What one read of a pool allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice<S, I> {
    /// The slots that may be taken now, with their state, in the order read.
    pub candidates: Vec<(u32, S)>,
    /// The earliest takeover time of the held slots not yet takeable.
    pub earliest: Option<I>,
}

impl<S, I> Default for Choice<S, I> {
    fn default() -> Self {
        Self {
            candidates: Vec::new(),
            earliest: None,
        }
    }
}

/// Chooses from `slots` (each slot with its state) at `now`: a slot is a
/// candidate when `standing` finds it takeable, or held with a takeover time
/// that has passed; a held slot whose takeover time is still ahead counts
/// towards [`Choice::earliest`], and one with no known takeover time is
/// passed by.
pub fn choose<S, I: Copy + Ord>(
    slots: impl IntoIterator<Item = (u32, S)>,
    now: I,
    mut standing: impl FnMut(u32, &S) -> Standing<I>,
) -> Choice<S, I> {
    let mut choice = Choice::default();
    for (slot, state) in slots {
        match standing(slot, &state) {
            Standing::Takeable => {}
            Standing::Held(Some(at)) if at <= now => {}
            Standing::Held(Some(at)) => {
                choice.earliest = Some(choice.earliest.map_or(at, |e: I| e.min(at)));
                continue;
            }
            Standing::Held(None) => continue,
        }
        choice.candidates.push((slot, state));
    }
    choice
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(10);
    const MARGIN: Duration = Duration::from_secs(2);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_wait_is_the_longer_duration_plus_the_margin_and_two_percent() {
        assert_eq!(takeover_wait(TTL, TTL, MARGIN), ms(12_200));
        assert_eq!(takeover_wait(ms(30_000), TTL, MARGIN), ms(32_600));
        assert_eq!(takeover_wait(ms(1_000), TTL, MARGIN), ms(12_200));
        assert_eq!(
            takeover_wait(ms(1_000), ms(1_000), Duration::ZERO),
            ms(1_020)
        );
        assert_eq!(takeover_at(ms(5_000), TTL, TTL, MARGIN), ms(17_200));
    }

    #[test]
    fn an_unchanged_version_keeps_its_first_sighting() {
        let mut s = Sighting::new("41", ms(0));
        s.observe("41", ms(5_000));
        assert_eq!(s, Sighting::new("41", ms(0)));
        assert_eq!(s.takeover_at(&"41", TTL, TTL, MARGIN), Some(ms(12_200)));
        // A write moved it on: the wait starts again, and the old version's
        // takeover time is gone.
        s.observe("42", ms(6_000));
        assert_eq!(s.takeover_at(&"41", TTL, TTL, MARGIN), None);
        assert_eq!(s.takeover_at(&"42", TTL, TTL, MARGIN), Some(ms(18_200)));
    }

    #[test]
    fn held_slots_wait_for_their_takeover_time_and_unseen_ones_are_passed_by() {
        let slots = [(0, 'f'), (1, 'h'), (2, 'u'), (3, 'l')];
        let standing = |_: u32, s: &char| match s {
            'h' => Standing::Held(Some(ms(9_000))),
            'l' => Standing::Held(Some(ms(7_000))),
            'u' => Standing::Held(None),
            _ => Standing::Takeable,
        };
        let c = choose(slots, ms(6_000), standing);
        assert_eq!(c.candidates, vec![(0, 'f')]);
        assert_eq!(c.earliest, Some(ms(7_000)));
        let c = choose(slots, ms(7_000), standing);
        assert_eq!(c.candidates, vec![(0, 'f'), (3, 'l')]);
        assert_eq!(c.earliest, Some(ms(9_000)));
        let c = choose(slots, ms(60_000), standing);
        assert_eq!(c.candidates, vec![(0, 'f'), (1, 'h'), (3, 'l')]);
        assert_eq!(c.earliest, None);
    }
}
