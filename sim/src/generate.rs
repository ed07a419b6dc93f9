//! The real ID generators of `leasehold-nonce`, run on each process's
//! simulated clocks, and the checker's record of every ID they issue.
//!
//! Each process (each incarnation: a restart builds anew) has two
//! components that each build a [`Sortable64`] on the process's one gate, as
//! two parts of an application that each take the lease manager's gate
//! would. The gate holds one generation state per lease (DESIGN.md, rule 9):
//! as shipped it refuses the second build ([`AttachError::InUse`]) and the
//! second component clones the first generator, sharing its state; with the
//! `second-generation-state` plant the second gets a state of its own.
//!
//! Their time source ([`SimTime`]) reads the process's monotonic clock at
//! the simulated instant, and maps it to Unix time through the process's
//! own [`UnixOffset`], the one the simulated lease manager measures its
//! ceilings with (one offset per process, as `SystemClock` keeps it), so a
//! wall-clock step held pending stops these generators as it stops the
//! real ones.
//!
//! At each instant a window opens (the process may generate: not paused,
//! and the real gate says yes at its clock's reading) each component takes
//! a few IDs with `try_next`, which never waits: where a value's timestamp
//! is ahead of the clock (the next millisecond after a new lease, a floor
//! ahead of this host) it answers how long it would wait, and the
//! component takes nothing until a later window. Waiting (`next`) would
//! spin on a clock that only moves between events.
//!
//! The checker keeps every ID issued, with its issuer (process,
//! incarnation, component) and the true instant. The IDs carry the slot,
//! so they are unique in the pool: any two equal are an ID issued twice.
//! The interval check of the stamps (the worst case: generating all through
//! each window) stays as it is; the real IDs are a check beside it.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use leasehold_core::{AttachError, MonoTime, UnixOffset};
use leasehold_nonce::{BuildError, Layout, Reading, Sortable64, TimeSource, TryNextError};

use crate::{Violation, World, secs};

/// IDs each component takes at each instant its process may generate: a
/// few, so that a second generation state shows, at little cost a seed.
const PER_INSTANT: usize = 2;

/// The components' names in the trace and in violations.
const COMPONENTS: [&str; 2] = ["A", "B"];

/// One process's clocks as its generators read them: the monotonic reading
/// at the simulated instant, set by the world before each call, and the
/// process's Unix offset. Exact (no coarse clock), so `guard` is zero.
/// Clones share the clocks.
#[derive(Clone, Debug)]
pub(crate) struct SimTime(Arc<Clocks>);

#[derive(Debug)]
struct Clocks {
    /// The process's monotonic clock (ns) at the instant simulated.
    mono: AtomicU64,
    /// `wall − mono` (ns) as the process would measure it at that instant.
    measured: AtomicU64,
    /// The process's Unix offset, shared with its lease manager.
    unix: Arc<UnixOffset>,
}

impl SimTime {
    fn new(unix: Arc<UnixOffset>) -> Self {
        Self(Arc::new(Clocks {
            mono: AtomicU64::new(0),
            measured: AtomicU64::new(0),
            unix,
        }))
    }

    /// Moves the clocks to an instant: the monotonic reading and the
    /// measured `wall − mono` there.
    fn set(&self, mono: u64, measured: u64) {
        self.0.mono.store(mono, Ordering::Relaxed);
        self.0.measured.store(measured, Ordering::Relaxed);
    }

    fn mono(&self) -> MonoTime {
        MonoTime::from_nanos(self.0.mono.load(Ordering::Relaxed))
    }

    /// A fresh measurement, through the process's `UnixOffset::observe`.
    fn measure(&self) -> u64 {
        let measured = self.0.measured.load(Ordering::Relaxed);
        self.0.unix.observe(measured, self.mono())
    }
}

impl TimeSource for SimTime {
    fn now(&self) -> Reading {
        Reading::exact(self.mono())
    }
    fn precise(&self) -> MonoTime {
        self.mono()
    }
    fn unix_offset(&self, fresh: bool) -> u64 {
        match self.0.unix.get() {
            0 => self.measure(),
            _ if fresh => self.measure(),
            offset => offset,
        }
    }
    fn wall_clock_step(&self) -> Option<Duration> {
        self.0.unix.step()
    }
}

/// One ID as the checker records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Issued {
    id: u64,
    /// True ns.
    at: u64,
    proc: usize,
    incarnation: u32,
    component: u8,
}

/// One process's generators (its current incarnation's) and every ID its
/// incarnations issued.
#[derive(Default)]
pub(crate) struct Ids {
    time: Option<SimTime>,
    /// Component A's generator and component B's: its own, or a clone of
    /// A's when the gate refused it one.
    components: Vec<Sortable64<SimTime>>,
    issued: Vec<Issued>,
}

impl World<'_> {
    /// The process's components build their generators on its gate (at its
    /// start and at each restart, on the new gate): A first, then B, which
    /// clones A's when the gate refuses it a state of its own.
    pub(crate) fn build_generators(&mut self, p: usize) {
        let time = SimTime::new(Arc::clone(&self.procs[p].unix));
        time.set(self.local(p).as_nanos(), self.measured_offset(p));
        let gate = self.procs[p].gate.clone();
        let layout = Layout::default64();
        let mut components = Vec::with_capacity(2);
        let note = match Sortable64::with_time(gate.clone(), layout, time.clone()) {
            Err(e) => format!("component A's generator refused: {e}"),
            Ok(a) => match Sortable64::with_time(gate, layout, time.clone()) {
                Ok(b) => {
                    components.push(a);
                    components.push(b);
                    "components A and B build generators of their own on its gate".to_string()
                }
                Err(BuildError::Gate(AttachError::InUse { .. })) => {
                    components.push(a.clone());
                    components.push(a);
                    "component B's generator refused (in use): it clones A's".to_string()
                }
                Err(e) => {
                    components.push(a);
                    format!("component B's generator refused: {e}")
                }
            },
        };
        let ids = &mut self.procs[p].ids;
        ids.time = Some(time);
        ids.components = components;
        if self.trace_on {
            self.log(Some(p), format_args!("{note}"));
        }
    }

    /// The process may generate now (a window opened): each component takes
    /// a few IDs from its real generator, and the checker records them.
    pub(crate) fn generate(&mut self, p: usize) {
        let mono = self.local(p).as_nanos();
        let measured = self.measured_offset(p);
        let now = self.now;
        let trace_on = self.trace_on;
        let mut note = String::new();
        let proc = &mut self.procs[p];
        let incarnation = proc.incarnation;
        let ids = &mut proc.ids;
        let Some(time) = &ids.time else {
            return;
        };
        time.set(mono, measured);
        for (c, g) in ids.components.iter().enumerate() {
            if trace_on {
                let _ = write!(note, "{}{}:", if c > 0 { "; " } else { "" }, COMPONENTS[c]);
            }
            for _ in 0..PER_INSTANT {
                match g.try_next() {
                    Ok(n) => {
                        ids.issued.push(Issued {
                            id: n.0,
                            at: now,
                            proc: p,
                            incarnation,
                            component: c as u8,
                        });
                        if trace_on {
                            let _ = write!(note, " {}", n.0);
                        }
                    }
                    Err(e) => {
                        if trace_on {
                            match e {
                                TryNextError::WouldWait { retry_in, .. } => {
                                    let _ = write!(note, " would wait {retry_in:?}");
                                }
                                TryNextError::Refused(e) => {
                                    let _ = write!(note, " refused ({e:?})");
                                }
                                other => {
                                    let _ = write!(note, " {other:?}");
                                }
                            }
                        }
                        break;
                    }
                }
            }
        }
        if trace_on {
            self.log(Some(p), format_args!("IDs {note}"));
        }
    }

    /// The highest timestamp (Unix ms) the generation states on the
    /// process's gate issued, as the lease manager reports it when it
    /// releases the slot (`LeaseGate::issued`); 0 when none was attached.
    pub(crate) fn issued_by_generators(&self, p: usize) -> u64 {
        self.procs[p].gate.issued().map_or(0, |f| f.0)
    }

    /// The first ID issued twice (by true time), over every process and
    /// incarnation: IDs carry their slot, so two equal IDs are one too many
    /// whoever issued them.
    pub(crate) fn reissued(&self) -> Option<Violation> {
        // The values alone first (cheap to sort); the issuers only of the
        // values found twice, which as shipped are none.
        let mut values: Vec<u64> = self
            .procs
            .iter()
            .flat_map(|pr| pr.ids.issued.iter().map(|i| i.id))
            .collect();
        values.sort_unstable();
        let mut twice: Vec<u64> = values
            .windows(2)
            .filter(|w| w[0] == w[1])
            .map(|w| w[0])
            .collect();
        if twice.is_empty() {
            return None;
        }
        twice.dedup();
        let mut all: Vec<Issued> = self
            .procs
            .iter()
            .flat_map(|pr| pr.ids.issued.iter().copied())
            .filter(|i| twice.binary_search(&i.id).is_ok())
            .collect();
        all.sort_unstable();
        let mut first: Option<(Issued, Issued)> = None;
        for pair in all.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if a.id == b.id && first.is_none_or(|(_, f)| b.at < f.at) {
                first = Some((a, b));
            }
        }
        let (a, b) = first?;
        let layout = Layout::default64();
        let parts = layout.decode(a.id);
        let who = |i: &Issued| {
            format!(
                "p{} (incarnation {}, component {}) at {}",
                i.proc,
                i.incarnation,
                COMPONENTS[usize::from(i.component)],
                secs(i.at).trim_start()
            )
        };
        Some(Violation {
            at: b.at,
            what: format!(
                "slot {}: ID {} (stamped {} Unix ms, sequence {}) issued twice: by {} and by {}",
                parts.slot,
                a.id,
                parts.millis + layout.epoch_unix_ms(),
                parts.counter,
                who(&a),
                who(&b)
            ),
        })
    }
}
