//! The lease gate: a lock-free view of the lease that generation code checks on
//! every call, and the one place a lease's generation state is attached.
//!
//! The writers (open, extend, close, retire) are the lease manager task's alone:
//! without the driver (the `tokio` feature) or `testing` nothing calls them.
#![cfg_attr(
    not(any(feature = "tokio", feature = "test-util", test)),
    allow(dead_code)
)]

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::clock::MonoTime;
use crate::plant::{self, Plant};
use crate::strategy::{Fence, Floor};

pub use crate::clock::DEFAULT_MAX_CLOCK_SKEW;

/// A shared, lock-free view of the current lease: slot, fence, local deadline,
/// hand-over floor and ceiling, open or closed. Cloning shares the view.
///
/// The gate **closes by itself**: [`LeaseGate::check`] compares the caller's
/// `now` with the local deadline, so once the deadline passes every check fails,
/// even if the driver task is starved or the process was frozen and no timer
/// has fired (DESIGN.md, timing rule 5). The driver also closes it explicitly
/// on loss or shutdown, before anything else happens.
///
/// A gate holds **at most one generation state** at a time
/// ([`LeaseGate::attach`]): every ID generator bound to a gate shares that
/// state (by cloning the generator), so no two generators on one lease can hand
/// out the same value (DESIGN.md, timing rule 9).
///
/// **Who may do what.** Users get a gate from the lease manager
/// (`LeaseManager::gate`) and read it: [`LeaseGate::check`],
/// [`LeaseGate::view`], [`LeaseGate::deadline`], [`LeaseGate::ceiling`],
/// [`LeaseGate::issued`], [`LeaseGate::refused`]. Only the lease manager's task opens,
/// extends, closes and retires it (those calls are crate-private: a gate
/// opened or extended by hand would let generation run past the lease). A
/// generator takes part through [`LeaseGate::attach`], whose
/// [`Attachment`] is the one handle that may count refusals; it cannot open
/// the gate or move its deadline or ceiling. Tests that drive a gate by hand
/// use `leasehold_core::testing::GateControl`, behind the `test-util`
/// feature.
///
/// ```
/// use leasehold_core::{LeaseGate, MonoTime};
/// let gate = LeaseGate::new();
/// let now = MonoTime::from_nanos(1_000);
/// assert!(gate.check(now).is_err()); // closed until a lease is held
/// assert!(!gate.view().open);
/// ```
#[derive(Clone, Default)]
pub struct LeaseGate(Arc<Inner>);

#[derive(Default)]
struct Inner {
    hot: Hot,
    /// Generation calls refused (closed gate, clock behind the floor, past
    /// the ceiling): a counter for telemetry, written only on refusals.
    refused: AtomicU64,
    /// Serialises the writers (driver, drop, loss reports) and holds the
    /// attached generation state. Never taken on the generation path.
    cold: Mutex<Cold>,
}

/// Read on every generation call; written only under `cold`.
#[derive(Default)]
#[repr(C, align(64))]
struct Hot {
    /// Local deadline in `MonoTime` nanoseconds; `0` means closed.
    deadline: AtomicU64,
    /// Grows on every `open` (every new grant); lets generators notice a new slot.
    epoch: AtomicU64,
    /// Unix ms: the highest timestamp generation may use under this grant
    /// (what the holder reported to the store). `u64::MAX`: no bound.
    ceiling: AtomicU64,
    /// Seqlock for the consistent `view`: odd while a writer is mid-update.
    seq: AtomicU64,
    /// Unix ms: the grant's floor.
    floor: AtomicU64,
    /// Nanoseconds: how far behind the floor this host's clock may be.
    max_skew: AtomicU64,
    fence: AtomicU64,
    slot: AtomicU32,
}

#[derive(Default)]
struct Cold {
    /// Set by [`LeaseGate::retire`]: the gate never opens again.
    retired: bool,
    attached: Option<Attached>,
    /// The ID format of the first state attached, and what it belonged to.
    form: Option<(u64, &'static str)>,
    /// Unix ms: the highest timestamp issued by generation states detached
    /// before the current one.
    retired_issued: u64,
}

struct Attached {
    kind: &'static str,
    state: Arc<dyn GenerationState>,
}

/// The generation state of an ID generator, attached to its gate with
/// [`LeaseGate::attach`]. Implemented by `leasehold-nonce`; implement it for
/// your own generator to take part in the hand-over floor.
pub trait GenerationState: Send + Sync + 'static {
    /// The highest timestamp (Unix ms) handed out so far, including any value
    /// being handed out concurrently whose generator has not yet re-checked
    /// the gate. Called by the driver after it closed the gate.
    fn issued(&self) -> Floor;

    /// False once no generator uses this state any more; the gate then
    /// accepts a new one.
    fn in_use(&self) -> bool;

    /// A signature of the ID format (the layout): every state attached to
    /// one gate must have the same, since values of two formats for one slot
    /// can be equal.
    fn form(&self) -> u64;
}

/// What [`LeaseGate::attach`] gives a generator: the history of the gate
/// (what earlier states issued) and the proof of attachment through which
/// it counts its refused calls for telemetry. Only `attach` makes one; it
/// can change nothing of a gate but that count. (It holds no reference to
/// the gate, so a generator keeps it beside its gate at no cost.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attachment {
    history: Floor,
}

impl Attachment {
    /// The highest timestamp (Unix ms) issued under the gate by states
    /// attached before this one: the new state starts strictly after it.
    pub fn history(&self) -> Floor {
        self.history
    }

    /// Counts a refused generation call on `gate`, the gate this
    /// attachment came from (call it on refusal paths only, never on
    /// success): [`LeaseGate::refused`] and the driver's telemetry report it.
    /// Inlined, as the one atomic add it is, into the generator's refusal
    /// paths.
    #[cold]
    #[inline]
    pub fn note_refused(&self, gate: &LeaseGate) {
        gate.note_refused();
    }
}

/// Why a generation state was not attached to a gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttachError {
    /// A generator of the same kind is already attached and in use: clone
    /// it instead (clones share its state).
    InUse {
        /// What the attached state belongs to (for example `"Sortable64"`).
        existing: &'static str,
    },
    /// A generator of another kind is already attached and in use. One lease
    /// has one generation state, which makes one kind of ID, so a clone of
    /// the first cannot help: the second kind needs a lease of its own.
    OtherKind {
        /// What the attached state belongs to (for example `"Sortable64"`).
        existing: &'static str,
        /// What was refused (for example `"Counter64"`).
        requested: &'static str,
    },
    /// Generators on this gate used another ID format (a different layout):
    /// values of two formats for one slot can be equal.
    OtherForm {
        /// What the first state belonged to.
        existing: &'static str,
    },
}

impl fmt::Display for AttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InUse { existing } => write!(
                f,
                "this lease gate already has a generator ({existing}); two generators on one \
                 lease could hand out the same value: clone that generator instead of building \
                 another one (clones share its state)"
            ),
            Self::OtherKind {
                existing,
                requested,
            } => write!(
                f,
                "this lease gate already has a generator of another kind ({existing}) in use, and \
                 a lease has one generation state, which makes one kind of ID: a {requested} \
                 generator needs a lease of its own. Start a second lease manager (it holds \
                 another slot; use a pool of its own if the ID layouts differ, since a pool \
                 keeps one ID format) and build the {requested} generator on its gate"
            ),
            Self::OtherForm { existing } => write!(
                f,
                "this lease gate's generators used another ID layout ({existing}); values of two \
                 layouts for one slot can be equal: keep one layout for a pool for its whole life"
            ),
        }
    }
}

impl std::error::Error for AttachError {}

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
#[non_exhaustive]
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
    /// The grant's floor: generation starts strictly after it.
    pub floor: Floor,
    /// The highest timestamp generation may use under this grant: what the
    /// holder has reported to the store. `Floor(u64::MAX)` when unbounded.
    pub ceiling: Floor,
    /// How far this host's clock may lag the floor before generation refuses.
    pub max_clock_skew: Duration,
}

impl GateView {
    /// True when the lease is held and `now` is before its local deadline.
    pub fn is_open_at(&self, now: MonoTime) -> bool {
        self.open && now < self.deadline
    }
}

/// What a gate is opened with: a new grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Opening {
    /// The slot.
    pub slot: u32,
    /// Its fence.
    pub fence: Fence,
    /// The local deadline.
    pub deadline: MonoTime,
    /// The grant's floor (from the store).
    pub floor: Floor,
    /// The highest timestamp reported to the store for this grant.
    pub ceiling: Floor,
    /// How far behind the floor this host's clock may be.
    pub max_clock_skew: Duration,
}

impl Opening {
    /// A grant of `slot` with `fence` until `deadline`: no floor, no ceiling,
    /// the default clock skew. The driver adds floor and ceiling.
    pub const fn new(slot: u32, fence: Fence, deadline: MonoTime) -> Self {
        Self {
            slot,
            fence,
            deadline,
            floor: Floor::NONE,
            ceiling: Floor(u64::MAX),
            max_clock_skew: DEFAULT_MAX_CLOCK_SKEW,
        }
    }

    /// Sets the floor and the ceiling.
    pub const fn with_floor(mut self, floor: Floor, ceiling: Floor) -> Self {
        self.floor = floor;
        self.ceiling = ceiling;
        self
    }

    /// Sets how far behind the floor this host's clock may be.
    pub const fn with_max_clock_skew(mut self, skew: Duration) -> Self {
        self.max_clock_skew = skew;
        self
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
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
        let deadline = self.0.hot.deadline.load(Ordering::SeqCst);
        // Without the `planted-bugs` feature the plant is a constant false.
        let now = if plant::active(Plant::GateIgnoresDeadline) {
            MonoTime::ZERO
        } else {
            now
        };
        if now.as_nanos() < deadline {
            Ok(self.0.hot.epoch.load(Ordering::SeqCst))
        } else if plant::active(Plant::GenerateBeforeGrant)
            && self.0.hot.epoch.load(Ordering::SeqCst) == 0
        {
            // Without the `planted-bugs` feature the plant is a constant
            // false and this branch is not compiled in.
            Ok(0)
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
        MonoTime::from_nanos(self.0.hot.deadline.load(Ordering::SeqCst))
    }

    /// The ceiling (Unix ms) of the current grant: generation must not use a
    /// later timestamp. One atomic load.
    #[inline]
    pub fn ceiling(&self) -> Floor {
        Floor(self.0.hot.ceiling.load(Ordering::SeqCst))
    }

    /// Counts a refused generation call (generators do it through their
    /// [`Attachment`], on their refusal paths, never on success).
    #[cold]
    pub(crate) fn note_refused(&self) {
        self.0.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Generation calls refused so far.
    pub fn refused(&self) -> u64 {
        self.0.refused.load(Ordering::Relaxed)
    }

    /// A consistent snapshot of slot, fence, deadline, epoch, floor and ceiling.
    pub fn view(&self) -> GateView {
        let h = &self.0.hot;
        loop {
            let s1 = h.seq.load(Ordering::SeqCst);
            if s1 % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let deadline = h.deadline.load(Ordering::SeqCst);
            let view = GateView {
                open: deadline != 0,
                slot: h.slot.load(Ordering::SeqCst),
                fence: Fence(h.fence.load(Ordering::SeqCst)),
                deadline: MonoTime::from_nanos(deadline),
                epoch: h.epoch.load(Ordering::SeqCst),
                floor: Floor(h.floor.load(Ordering::SeqCst)),
                ceiling: Floor(h.ceiling.load(Ordering::SeqCst)),
                max_clock_skew: Duration::from_nanos(h.max_skew.load(Ordering::SeqCst)),
            };
            if h.seq.load(Ordering::SeqCst) == s1 {
                return view;
            }
        }
    }
}

/// The writers: the lease manager task's calls (and, for tests, `testing`).
impl LeaseGate {
    /// Opens the gate for a new grant of `slot` with `fence` until `deadline`,
    /// with no floor and no ceiling: for gates driven by hand (examples,
    /// tests). The lease manager's task uses [`LeaseGate::open_with`].
    #[cfg(any(test, feature = "test-util"))]
    pub(crate) fn open(&self, slot: u32, fence: Fence, deadline: MonoTime) {
        self.open_with(Opening::new(slot, fence, deadline));
    }

    /// Opens the gate for a new grant: a new epoch, its slot, fence, floor and
    /// ceiling, valid until its deadline. A retired gate stays closed.
    pub(crate) fn open_with(&self, o: Opening) {
        // No wall-clock step larger than this lease's skew is followed
        // before it settles (DESIGN.md, rule 10).
        crate::clock::SystemClock::limit_wall_clock_steps(o.max_clock_skew);
        let cold = self.lock();
        if cold.retired {
            return;
        }
        self.write(|h| {
            h.deadline.store(0, Ordering::SeqCst);
            h.epoch.fetch_add(1, Ordering::SeqCst);
            h.slot.store(o.slot, Ordering::SeqCst);
            h.fence.store(o.fence.0, Ordering::SeqCst);
            let floor = if plant::active(Plant::NoFloor) {
                Floor::NONE
            } else {
                o.floor
            };
            h.floor.store(floor.0, Ordering::SeqCst);
            h.ceiling.store(o.ceiling.0, Ordering::SeqCst);
            h.max_skew.store(nanos(o.max_clock_skew), Ordering::SeqCst);
            h.deadline
                .store(o.deadline.as_nanos().max(1), Ordering::SeqCst);
        });
        drop(cold);
    }

    /// Moves the deadline and the ceiling of the current grant (after a
    /// renewal). A closed gate stays closed: a renewal that lands just after a
    /// shutdown or a reported loss must not reopen it.
    pub(crate) fn extend(&self, deadline: MonoTime, ceiling: Floor) {
        let _cold = self.lock();
        if self.0.hot.deadline.load(Ordering::SeqCst) == 0 {
            return;
        }
        self.write(|h| {
            // The ceiling first: a generator that sees the new deadline sees
            // a ceiling at least as new (both were confirmed by the store).
            h.ceiling.fetch_max(ceiling.0, Ordering::SeqCst);
            h.deadline
                .store(deadline.as_nanos().max(1), Ordering::SeqCst);
        });
    }

    /// Closes the gate: every later check fails until the next `open`.
    /// Safe from any thread (the driver, a store watch reporting a loss).
    pub(crate) fn close(&self) {
        let _cold = self.lock();
        self.0.hot.deadline.store(0, Ordering::SeqCst);
    }

    /// Closes the gate if `epoch` is still its epoch (the lease a loss report
    /// is about). A newer grant is left open. Returns whether it closed.
    pub(crate) fn close_if_epoch(&self, epoch: u64) -> bool {
        let _cold = self.lock();
        let current = self.0.hot.epoch.load(Ordering::SeqCst) == epoch;
        if current {
            self.0.hot.deadline.store(0, Ordering::SeqCst);
        }
        current
    }

    /// Fixes the ID format generators on this gate must have: a state of
    /// another form is refused ([`AttachError::OtherForm`]). The lease
    /// manager declares the format of [`LeaseConfig::id_format`] (the one
    /// the store checks across processes), so a generator of another layout
    /// cannot use a lease that was claimed for this one. Returns false, and
    /// changes nothing, when generators of another form were attached before.
    ///
    /// [`LeaseConfig::id_format`]: crate::LeaseConfigBuilder::id_format
    pub(crate) fn declare_form(&self, form: u64) -> bool {
        let mut cold = self.lock();
        match cold.form {
            Some((existing, _)) => existing == form,
            None => {
                cold.form = Some((form, "the format declared with LeaseConfig::id_format"));
                true
            }
        }
    }

    /// Closes the gate for good: it never opens again (the lease manager that
    /// drives it is gone). An `open` racing with this stays closed.
    pub(crate) fn retire(&self) {
        let mut cold = self.lock();
        cold.retired = true;
        self.0.hot.deadline.store(0, Ordering::SeqCst);
    }

    /// Whether the gate was retired (its lease manager is gone).
    pub(crate) fn is_retired(&self) -> bool {
        self.lock().retired
    }

    /// Runs `f` inside the seqlock. Callers hold the writer lock.
    fn write(&self, f: impl FnOnce(&Hot)) {
        self.0.hot.seq.fetch_add(1, Ordering::SeqCst);
        f(&self.0.hot);
        self.0.hot.seq.fetch_add(1, Ordering::SeqCst);
    }
}

impl LeaseGate {
    /// Attaches the gate's generation state. `kind` names the generator for
    /// the error a second one gets.
    ///
    /// Returns the [`Attachment`]: the highest timestamp (Unix ms) issued
    /// under this gate by states attached before (the new state starts
    /// strictly after it), and the handle through which the generator counts
    /// its refusals. This is the only call a generator makes besides reading
    /// the gate; it cannot open the gate or move its deadline or ceiling.
    /// Refused while an attached state is still in use
    /// ([`AttachError::InUse`] for one of the same kind,
    /// [`AttachError::OtherKind`] for one of another kind), and for a state
    /// of another ID format than the first one.
    pub fn attach(
        &self,
        kind: &'static str,
        state: Arc<dyn GenerationState>,
    ) -> Result<Attachment, AttachError> {
        let mut cold = self.lock();
        if let Some(old) = &cold.attached
            && old.state.in_use()
            && !plant::active(Plant::SecondGenerationState)
        {
            return Err(if old.kind == kind {
                AttachError::InUse { existing: old.kind }
            } else {
                AttachError::OtherKind {
                    existing: old.kind,
                    requested: kind,
                }
            });
        }
        match cold.form {
            Some((form, existing)) if form != state.form() => {
                return Err(AttachError::OtherForm { existing });
            }
            Some(_) => {}
            None => cold.form = Some((state.form(), kind)),
        }
        if let Some(old) = cold.attached.take() {
            cold.retired_issued = cold.retired_issued.max(old.state.issued().0);
        }
        cold.attached = Some(Attached { kind, state });
        Ok(Attachment {
            history: Floor(cold.retired_issued),
        })
    }

    /// The highest timestamp (Unix ms) the generation states attached to this
    /// gate have handed out, or `None` when none was ever attached. Close the
    /// gate first: then no later value can exceed it.
    pub fn issued(&self) -> Option<Floor> {
        let cold = self.lock();
        let attached = cold.attached.as_ref()?;
        Some(Floor(cold.retired_issued.max(attached.state.issued().0)))
    }

    fn lock(&self) -> MutexGuard<'_, Cold> {
        self.0.cold.lock().unwrap_or_else(PoisonError::into_inner)
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
    use std::sync::atomic::AtomicBool;

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
    fn a_declared_form_refuses_generators_of_another_layout() {
        struct State(u64);
        impl GenerationState for State {
            fn issued(&self) -> Floor {
                Floor(0)
            }
            fn in_use(&self) -> bool {
                false
            }
            fn form(&self) -> u64 {
                self.0
            }
        }
        let gate = LeaseGate::new();
        assert!(gate.declare_form(7));
        assert!(matches!(
            gate.attach("Other", Arc::new(State(8))),
            Err(AttachError::OtherForm { .. })
        ));
        assert!(gate.attach("Same", Arc::new(State(7))).is_ok());
        assert!(!gate.declare_form(9), "the attached form stays");
    }

    #[test]
    fn epoch_grows_per_grant_not_per_renewal() {
        let gate = LeaseGate::new();
        let t = MonoTime::from_nanos(5_000);
        gate.open_with(
            Opening::new(1, Fence(1), t + Duration::from_secs(1)).with_floor(Floor(10), Floor(20)),
        );
        let e1 = gate.check(t).unwrap();
        gate.extend(t + Duration::from_secs(2), Floor(30));
        assert_eq!(gate.check(t).unwrap(), e1);
        assert_eq!((gate.view().floor, gate.ceiling()), (Floor(10), Floor(30)));
        gate.close();
        assert!(gate.check(t).is_err());
        gate.extend(t + Duration::from_secs(3), Floor(40));
        assert!(
            gate.check(t).is_err(),
            "extend must not reopen a closed gate"
        );
        gate.open(2, Fence(5), t + Duration::from_secs(1));
        assert!(gate.check(t).unwrap() > e1);
        let v = gate.view();
        assert_eq!((v.slot, v.fence, v.open), (2, Fence(5), true));
        assert_eq!((v.floor, v.ceiling), (Floor::NONE, Floor(u64::MAX)));
    }

    #[test]
    fn a_loss_report_for_an_older_grant_leaves_the_new_one_open() {
        let gate = LeaseGate::new();
        let t = MonoTime::from_nanos(5_000);
        gate.open(1, Fence(1), t + Duration::from_secs(1));
        let old = gate.view().epoch;
        gate.open(1, Fence(2), t + Duration::from_secs(1));
        assert!(!gate.close_if_epoch(old));
        assert!(gate.check(t).is_ok());
        assert!(gate.close_if_epoch(old + 1));
        assert!(gate.check(t).is_err());
    }

    /// Every grant lowers the process's wall-clock step limit to its
    /// `max_clock_skew`: a step that is followed and corrected later then
    /// leaves the slot's floor no further ahead than the next holder waits.
    #[test]
    fn a_grant_limits_the_wall_clock_steps_followed_at_once() {
        let skew = Duration::from_millis(300);
        let t = MonoTime::from_nanos(5_000);
        LeaseGate::new().open_with(
            Opening::new(1, Fence(1), t + Duration::from_secs(1)).with_max_clock_skew(skew),
        );
        assert!(crate::SystemClock::wall_clock_step_limit() <= skew);
    }

    #[test]
    fn a_retired_gate_never_opens_again() {
        let gate = LeaseGate::new();
        let t = MonoTime::from_nanos(5_000);
        gate.retire();
        gate.open(1, Fence(1), t + Duration::from_secs(1));
        assert!(gate.check(t).is_err());
    }

    struct State {
        issued: AtomicU64,
        in_use: AtomicBool,
    }

    impl GenerationState for State {
        fn issued(&self) -> Floor {
            Floor(self.issued.load(Ordering::SeqCst))
        }
        fn in_use(&self) -> bool {
            self.in_use.load(Ordering::SeqCst)
        }
        fn form(&self) -> u64 {
            1
        }
    }

    #[test]
    fn one_generation_state_at_a_time_and_its_history_is_kept() {
        let gate = LeaseGate::new();
        assert_eq!(gate.issued(), None);
        let first = Arc::new(State {
            issued: AtomicU64::new(100),
            in_use: AtomicBool::new(true),
        });
        assert_eq!(
            gate.attach("First", first.clone()).map(|a| a.history()),
            Ok(Floor(0))
        );
        assert_eq!(gate.issued(), Some(Floor(100)));
        let second = Arc::new(State {
            issued: AtomicU64::new(0),
            in_use: AtomicBool::new(true),
        });
        let err = gate
            .attach("First", second.clone())
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err, AttachError::InUse { existing: "First" });
        assert!(err.to_string().contains("clone"), "{err}");
        // Another kind cannot be a clone of the first: it needs its own lease.
        let err = gate
            .attach("Second", second.clone())
            .map(|_| ())
            .unwrap_err();
        assert_eq!(
            err,
            AttachError::OtherKind {
                existing: "First",
                requested: "Second"
            }
        );
        let msg = err.to_string();
        assert!(
            msg.contains("lease of its own") && !msg.contains("clone"),
            "{msg}"
        );
        // Once the first is gone, a new one starts after everything it issued.
        first.issued.store(150, Ordering::SeqCst);
        first.in_use.store(false, Ordering::SeqCst);
        assert_eq!(
            gate.attach("Second", second).map(|a| a.history()),
            Ok(Floor(150))
        );
        assert_eq!(gate.issued(), Some(Floor(150)));
    }

    #[test]
    fn view_is_consistent_under_concurrent_writes() {
        let gate = LeaseGate::new();
        let writer = gate.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let t = std::thread::spawn(move || {
            let mut i = 0u32;
            while !stop2.load(Ordering::Relaxed) {
                i = i.wrapping_add(1);
                // slot, fence and floor always move together.
                writer.open_with(
                    Opening::new(
                        i,
                        Fence(u64::from(i) * 3),
                        MonoTime::from_nanos(u64::from(i) + 10),
                    )
                    .with_floor(Floor(u64::from(i) * 5), Floor(u64::from(i) * 7)),
                );
            }
        });
        for _ in 0..200_000 {
            let v = gate.view();
            if v.open {
                assert_eq!(v.fence.0, u64::from(v.slot) * 3);
                assert_eq!(v.floor.0, u64::from(v.slot) * 5);
                assert_eq!(v.ceiling.0, u64::from(v.slot) * 7);
            }
        }
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
    }
}
