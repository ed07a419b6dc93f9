//! The lease gate: a lock-free view of the lease that generation code checks on
//! every call.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::clock::MonoTime;
use crate::strategy::Fence;

/// A shared, lock-free view of the current lease: slot, fence, local deadline,
/// open or closed. Cloning shares the view.
///
/// The gate **closes by itself**: [`LeaseGate::check`] compares the caller's
/// `now` with the local deadline, so once the deadline passes every check fails,
/// even if the driver task is starved or the process was frozen and no timer
/// has fired (DESIGN.md, timing rule 5). The driver also closes it explicitly
/// on loss or shutdown, before anything else happens.
///
/// ```
/// use leasehold_core::{Fence, LeaseGate, MonoTime};
/// use std::time::Duration;
/// let gate = LeaseGate::new();
/// let now = MonoTime::from_nanos(1_000);
/// assert!(gate.check(now).is_err()); // closed until a lease is held
/// gate.open(7, Fence(3), now + Duration::from_secs(1));
/// assert!(gate.check(now).is_ok());
/// assert!(gate.check(now + Duration::from_secs(1)).is_err()); // deadline passed
/// assert_eq!(gate.view().slot, 7);
/// ```
#[derive(Clone, Default)]
pub struct LeaseGate(Arc<Inner>);

#[derive(Default)]
#[repr(align(64))]
struct Inner {
    /// Local deadline in `MonoTime` nanoseconds; `0` means closed.
    deadline: AtomicU64,
    /// Grows on every `open` (every new grant); lets generators notice a new slot.
    epoch: AtomicU64,
    /// Seqlock for the consistent `view`: odd while a writer is mid-update.
    seq: AtomicU64,
    slot: AtomicU32,
    fence: AtomicU64,
}

/// The gate was closed, or its deadline had passed, at the time checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closed;

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("no lease is held: the lease gate is closed or its local deadline has passed")
    }
}

impl std::error::Error for Closed {}

/// A consistent snapshot of the gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateView {
    /// True while a lease is held (the deadline may still have passed: see
    /// [`GateView::is_open_at`]).
    pub open: bool,
    /// The slot of the current (or last) lease.
    pub slot: u32,
    /// Its fence.
    pub fence: Fence,
    /// The local deadline (meaningful when `open`).
    pub deadline: MonoTime,
    /// Grows on every new grant.
    pub epoch: u64,
}

impl GateView {
    /// True when the lease is held and `now` is before its local deadline.
    pub fn is_open_at(&self, now: MonoTime) -> bool {
        self.open && now < self.deadline
    }
}

impl LeaseGate {
    /// A closed gate.
    pub fn new() -> Self {
        Self::default()
    }

    /// The hot-path check: `Ok(epoch)` when a lease is held and `now` is before
    /// its deadline. Two atomic loads and a compare; no lock, no allocation.
    ///
    /// Compare the epoch with the one you cached: a different epoch means a new
    /// grant (maybe a new slot) — read [`LeaseGate::view`] again.
    #[inline]
    pub fn check(&self, now: MonoTime) -> Result<u64, Closed> {
        let deadline = self.0.deadline.load(Ordering::Acquire);
        if now.as_nanos() < deadline {
            Ok(self.0.epoch.load(Ordering::Acquire))
        } else {
            Err(Closed)
        }
    }

    /// [`LeaseGate::check`] at the current [`SystemClock`](crate::SystemClock) time.
    #[inline]
    pub fn check_now(&self) -> Result<u64, Closed> {
        self.check(MonoTime::now())
    }

    /// The local deadline, `MonoTime::ZERO` when closed. One atomic load.
    #[inline]
    pub fn deadline(&self) -> MonoTime {
        MonoTime::from_nanos(self.0.deadline.load(Ordering::Acquire))
    }

    /// A consistent snapshot of slot, fence, deadline and epoch.
    pub fn view(&self) -> GateView {
        loop {
            let s1 = self.0.seq.load(Ordering::Acquire);
            if s1 % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let deadline = self.0.deadline.load(Ordering::Acquire);
            let epoch = self.0.epoch.load(Ordering::Acquire);
            let slot = self.0.slot.load(Ordering::Acquire);
            let fence = self.0.fence.load(Ordering::Acquire);
            let s2 = self.0.seq.load(Ordering::Acquire);
            if s1 == s2 {
                return GateView {
                    open: deadline != 0,
                    slot,
                    fence: Fence(fence),
                    deadline: MonoTime::from_nanos(deadline),
                    epoch,
                };
            }
        }
    }

    /// Opens the gate for a new grant: a new epoch, `slot`, `fence`, valid until
    /// `deadline`. Called by the driver (single writer).
    pub fn open(&self, slot: u32, fence: Fence, deadline: MonoTime) {
        self.write(|inner| {
            inner.deadline.store(0, Ordering::SeqCst);
            inner.epoch.fetch_add(1, Ordering::SeqCst);
            inner.slot.store(slot, Ordering::SeqCst);
            inner.fence.store(fence.0, Ordering::SeqCst);
            inner
                .deadline
                .store(deadline.as_nanos().max(1), Ordering::SeqCst);
        });
    }

    /// Moves the deadline of the current grant (after a renewal). A closed
    /// gate stays closed: a renewal that lands just after a shutdown or a
    /// reported loss must not reopen it.
    pub fn extend(&self, deadline: MonoTime) {
        self.write(|inner| {
            let _ = inner
                .deadline
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |d| {
                    (d != 0).then_some(deadline.as_nanos().max(1))
                });
        });
    }

    /// Closes the gate: every later check fails until the next `open`.
    ///
    /// A single store outside the seqlock, so it is safe from any thread at any
    /// time (a loss reported by a store watch), not only from the driver:
    /// closing changes no other field, so a concurrent `view` stays consistent.
    pub fn close(&self) {
        self.0.deadline.store(0, Ordering::SeqCst);
    }

    fn write(&self, f: impl FnOnce(&Inner)) {
        self.0.seq.fetch_add(1, Ordering::SeqCst);
        f(&self.0);
        self.0.seq.fetch_add(1, Ordering::SeqCst);
    }
}

impl fmt::Debug for LeaseGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.view().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn closes_by_itself_at_the_deadline() {
        let gate = LeaseGate::new();
        let t = MonoTime::from_nanos(5_000);
        gate.open(1, Fence(1), t + Duration::from_millis(10));
        assert!(gate.check(t).is_ok());
        assert!(gate.check(t + Duration::from_millis(9)).is_ok());
        assert_eq!(gate.check(t + Duration::from_millis(10)), Err(Closed));
    }

    #[test]
    fn epoch_grows_per_grant_not_per_renewal() {
        let gate = LeaseGate::new();
        let t = MonoTime::from_nanos(5_000);
        gate.open(1, Fence(1), t + Duration::from_secs(1));
        let e1 = gate.check(t).unwrap();
        gate.extend(t + Duration::from_secs(2));
        assert_eq!(gate.check(t).unwrap(), e1);
        gate.close();
        assert!(gate.check(t).is_err());
        gate.extend(t + Duration::from_secs(3));
        assert!(
            gate.check(t).is_err(),
            "extend must not reopen a closed gate"
        );
        gate.open(2, Fence(5), t + Duration::from_secs(1));
        assert!(gate.check(t).unwrap() > e1);
        let v = gate.view();
        assert_eq!((v.slot, v.fence, v.open), (2, Fence(5), true));
    }

    #[test]
    fn view_is_consistent_under_concurrent_writes() {
        let gate = LeaseGate::new();
        let writer = gate.clone();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop2 = stop.clone();
        let t = std::thread::spawn(move || {
            let mut i = 0u32;
            while !stop2.load(Ordering::Relaxed) {
                i = i.wrapping_add(1);
                // slot and fence always move together: fence == slot * 3
                writer.open(
                    i,
                    Fence(u64::from(i) * 3),
                    MonoTime::from_nanos(u64::from(i) + 10),
                );
            }
        });
        for _ in 0..200_000 {
            let v = gate.view();
            if v.open {
                assert_eq!(v.fence.0, u64::from(v.slot) * 3);
            }
        }
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
    }
}
