//! The generation engine shared by counter and sortable nonces.
//!
//! Hot path, per call: one clock reading ([`TimeSource::now`]), the gate check
//! (two atomic loads and a compare), a few loads from a read-mostly cache line,
//! and one `fetch_add` on the counter's own cache line. No lock, no allocation,
//! no logging. Everything else (a new lease, the once-a-second wall-clock
//! re-anchoring, waiting for the next millisecond) is on cold paths.
//!
//! State: one `AtomicU64`.
//! - Counter: `n`, the count since the current lease's start; the nonce's
//!   timestamp is `start + (n >> counter_bits)` and its counter `n` modulo
//!   `2^counter_bits`, so a 64-bit burst spends saved-up milliseconds. A value
//!   whose timestamp is ahead of real time is held back until real time gets
//!   there (it is never handed out early).
//! - Sortable: `millis << seq_bits | seq`. The first call in a new millisecond
//!   moves the state to the current millisecond with a CAS; the others
//!   `fetch_add`. When the sequence runs over, the carry moves the timestamp to
//!   the next millisecond and the caller waits for it.
//!
//! A new lease (new gate epoch) restarts the state from a timestamp strictly
//! after both the millisecond the grant was observed in and every timestamp
//! used before. `cur` (the epoch the state belongs to, or `RESETTING`) works
//! as a sequence lock: a value is used only if `cur` was the same before and
//! after the `fetch_add`, so a value can never mix an old slot with a new
//! counter. (SeqCst on `cur` and the state: on x86 the loads are plain loads
//! and the `fetch_add` is the same `lock xadd` as with Relaxed.)

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::time::Duration;

use leasehold_core::{LeaseGate, MonoTime};

use crate::error::{GenerateError, LayoutError};
use crate::layout::Layout;
use crate::time::TimeSource;

const RESETTING: u64 = u64::MAX;
const RESYNC_EVERY: Duration = Duration::from_secs(1);
const NS_PER_MS: u64 = 1_000_000;

#[repr(align(64))]
struct Padded(AtomicU64);

#[repr(align(64))]
struct ReadMostly<T> {
    gate: LeaseGate,
    time: T,
    layout: Layout,
    /// Sortable: bits of the per-millisecond sequence in the state.
    /// Counter: `min(counter_bits, 64)`, the shift from `n` to milliseconds.
    shift: u32,
    /// `2^shift − 1` (all ones when the shift is 64).
    mask: u64,
    /// The gate epoch the state belongs to; 0 before the first lease.
    cur: AtomicU64,
    slot: AtomicU64,
    /// Counter: the timestamp of `n = 0`.
    start: AtomicU64,
    /// Timestamp (ms since the layout epoch) = (MonoTime ns + offset) / 1e6.
    /// Only grows, so timestamps never go backwards with the wall clock.
    offset: AtomicU64,
    /// MonoTime ns at which to re-read the wall clock.
    next_resync: AtomicU64,
    lock: Mutex<()>,
}

pub(crate) struct Engine<T, const SORTABLE: bool> {
    ro: ReadMostly<T>,
    state: Padded,
}

enum Step {
    Ready,
    Retry,
}

impl<T: TimeSource, const SORTABLE: bool> Engine<T, SORTABLE> {
    pub(crate) fn new(gate: LeaseGate, layout: Layout, time: T) -> Result<Self, LayoutError> {
        let ctr = layout.counter_bits();
        let shift = if SORTABLE {
            ctr.min(22).min(63 - layout.timestamp_bits())
        } else {
            ctr.min(64)
        };
        let wall_ms = time.wall().as_millis();
        if wall_ms < u128::from(layout.epoch_unix_ms()) {
            return Err(LayoutError::new(
                "epoch",
                format!("{} ms after the UNIX epoch", layout.epoch_unix_ms()),
                format!("a time not in the future (the clock says {wall_ms} ms)"),
            ));
        }
        let engine = Self {
            ro: ReadMostly {
                gate,
                time,
                layout,
                shift,
                mask: if shift >= 64 {
                    u64::MAX
                } else {
                    (1 << shift) - 1
                },
                cur: AtomicU64::new(0),
                slot: AtomicU64::new(0),
                start: AtomicU64::new(0),
                offset: AtomicU64::new(0),
                next_resync: AtomicU64::new(0),
                lock: Mutex::new(()),
            },
            state: Padded(AtomicU64::new(0)),
        };
        engine.resync(engine.ro.time.precise());
        Ok(engine)
    }

    pub(crate) fn layout(&self) -> &Layout {
        &self.ro.layout
    }

    pub(crate) fn gate(&self) -> &LeaseGate {
        &self.ro.gate
    }

    #[inline]
    fn millis(&self, mono: MonoTime) -> u64 {
        (mono.as_nanos() + self.ro.offset.load(Relaxed)) / NS_PER_MS
    }

    /// The next plain nonce. With `GATED = false` the clock and the gate are
    /// skipped (benchmarks only: it measures what the check costs).
    #[inline]
    pub(crate) fn next<const GATED: bool>(&self) -> Result<u128, GenerateError> {
        let (millis, slot, counter) = self.next_parts::<GATED>()?;
        Ok(self.ro.layout.compose(millis, slot, counter))
    }

    /// The next plain nonce as (timestamp, slot, counter).
    #[inline]
    pub(crate) fn next_parts<const GATED: bool>(&self) -> Result<(u64, u64, u128), GenerateError> {
        let ro = &self.ro;
        loop {
            let (reading, epoch) = if GATED {
                let r = ro.time.now();
                match ro.gate.check(r.latest) {
                    Ok(e) => (r.earliest, e),
                    Err(_) => return Err(GenerateError::Closed),
                }
            } else {
                (MonoTime::ZERO, ro.cur.load(Relaxed))
            };
            let c1 = ro.cur.load(SeqCst);
            if c1 != epoch || (GATED && reading.as_nanos() >= ro.next_resync.load(Relaxed)) {
                self.cold(epoch)?;
                continue;
            }
            let now_ms = if GATED {
                self.millis(reading)
            } else {
                u64::MAX
            };
            let slot = ro.slot.load(Acquire);
            let (millis, counter) = if SORTABLE {
                let mut p = self.state.0.fetch_add(1, SeqCst);
                if GATED && p >> ro.shift < now_ms {
                    match self.jump(now_ms) {
                        Some(q) => p = q,
                        None => continue,
                    }
                }
                (p >> ro.shift, u128::from(p & ro.mask))
            } else {
                let n = self.state.0.fetch_add(1, SeqCst);
                let start = ro.start.load(Acquire);
                (
                    start + n.checked_shr(ro.shift).unwrap_or(0),
                    u128::from(n & ro.mask),
                )
            };
            if ro.cur.load(SeqCst) != c1 {
                continue;
            }
            if millis > ro.layout.max_millis() {
                return Err(GenerateError::Exhausted {
                    timestamp_bits: ro.layout.timestamp_bits(),
                });
            }
            if millis > now_ms {
                match self.wait_for(millis, c1)? {
                    Step::Ready => {}
                    Step::Retry => continue,
                }
            }
            return Ok((millis, slot, counter));
        }
    }

    /// Sortable, first call in a new millisecond: move the state to `now_ms`
    /// and claim its sequence 0. `None` when another thread moved it first.
    #[cold]
    #[inline(never)]
    fn jump(&self, now_ms: u64) -> Option<u64> {
        let shift = self.ro.shift;
        let target = now_ms << shift;
        let mut s = self.state.0.load(SeqCst);
        while s >> shift < now_ms {
            match self
                .state
                .0
                .compare_exchange_weak(s, target + 1, SeqCst, SeqCst)
            {
                Ok(_) => return Some(target),
                Err(actual) => s = actual,
            }
        }
        None
    }

    /// Holds a value back until real time reaches its timestamp. The gate is
    /// checked again on every reading; a new lease meanwhile discards it.
    #[cold]
    #[inline(never)]
    fn wait_for(&self, millis: u64, epoch: u64) -> Result<Step, GenerateError> {
        let mut spins = 0u32;
        loop {
            let m = self.ro.time.precise();
            match self.ro.gate.check(m) {
                Err(_) => return Err(GenerateError::Closed),
                Ok(e) if e != epoch => return Ok(Step::Retry),
                Ok(_) => {}
            }
            if self.ro.cur.load(SeqCst) != epoch {
                return Ok(Step::Retry);
            }
            if self.millis(m) >= millis {
                return Ok(Step::Ready);
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// A new lease, or time to re-read the wall clock.
    #[cold]
    #[inline(never)]
    fn cold(&self, epoch: u64) -> Result<(), GenerateError> {
        let ro = &self.ro;
        let _guard = ro.lock.lock().unwrap_or_else(|e| e.into_inner());
        if ro.cur.load(SeqCst) != epoch {
            return self.restart(epoch);
        }
        let m = ro.time.precise();
        if m.as_nanos() >= ro.next_resync.load(Relaxed) {
            self.resync(m);
        }
        Ok(())
    }

    /// Restarts the state for the lease of gate epoch `epoch`. Holds the lock.
    fn restart(&self, epoch: u64) -> Result<(), GenerateError> {
        let ro = &self.ro;
        let view = ro.gate.view();
        if !view.open || view.epoch != epoch {
            // The gate moved on since the caller checked it; the caller checks again.
            return Ok(());
        }
        let slot_bits = ro.layout.slot_bits();
        if u64::from(view.slot) >> slot_bits != 0 {
            return Err(GenerateError::SlotOutOfRange {
                slot: view.slot,
                slot_bits,
            });
        }
        ro.cur.store(RESETTING, SeqCst);
        let m = ro.time.precise();
        self.resync(m);
        let observed = self.millis(m);
        let state = self.state.0.load(SeqCst);
        let last = if SORTABLE {
            state >> ro.shift
        } else {
            ro.start.load(SeqCst) + state.checked_shr(ro.shift).unwrap_or(0)
        };
        let begin = observed.max(last) + 1;
        if begin > ro.layout.max_millis() {
            return Err(GenerateError::Exhausted {
                timestamp_bits: ro.layout.timestamp_bits(),
            });
        }
        self.state
            .0
            .store(if SORTABLE { begin << ro.shift } else { 0 }, SeqCst);
        ro.start.store(begin, SeqCst);
        ro.slot.store(u64::from(view.slot), SeqCst);
        ro.cur.store(epoch, SeqCst);
        Ok(())
    }

    /// Re-anchors timestamps to the wall clock; the offset only grows.
    fn resync(&self, m: MonoTime) {
        let ro = &self.ro;
        let wall = ro.time.wall().as_nanos();
        let since_epoch = wall.saturating_sub(u128::from(ro.layout.epoch_unix_ms()) * 1_000_000);
        let offset = u64::try_from(since_epoch)
            .unwrap_or(u64::MAX)
            .saturating_sub(m.as_nanos());
        ro.offset.fetch_max(offset, SeqCst);
        ro.next_resync.store((m + RESYNC_EVERY).as_nanos(), Relaxed);
    }
}
