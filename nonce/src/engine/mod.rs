//! The generation engine shared by counter and sortable nonces.
//!
//! Hot path, per call: one clock reading ([`TimeSource::now`]) and the gate
//! check (two atomic loads and a compare), then either a value from this
//! thread's block (below: a few thread-local loads and a store, no atomic
//! read-modify-write) or, for the 64-bit layouts, one
//! `fetch_add` on the state's own cache line, the gate check again and the
//! gate's ceiling (loads from the gate's read-mostly line). No lock, no
//! allocation, no logging. Everything else (a new lease, a new block, the
//! once-a-second re-anchoring to Unix time, waiting for the next millisecond
//! or for the clock to pass a floor) is on cold paths.
//!
//! State: one `AtomicU64` in a [`Tracker`] that the gate holds too
//! ([`LeaseGate::attach`]): one generation state per lease, and the driver can
//! ask it what was issued when it releases the slot.
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
//! after the grant's floor (what earlier holders of the slot may have used),
//! the millisecond the grant was observed in, every timestamp this state used
//! before, and what earlier states on this gate issued. `cur` (the epoch the
//! state belongs to, or `RESETTING`) works as a sequence lock: a value is used
//! only if `cur` was the same before and after the `fetch_add`, so a value can
//! never mix an old slot with a new counter. A value is also used only if the
//! gate is still open with the same epoch after the `fetch_add`: once the
//! driver has closed the gate, every value handed out is already counted in
//! the state it reads to report what was issued. And no value carries a
//! timestamp past the gate's ceiling, the highest timestamp the holder has
//! recorded in the store. (SeqCst on `cur`, the state and the gate: on x86 the
//! loads are plain loads and the `fetch_add` is the same `lock xadd` as with
//! Relaxed.)
//!
//! **Per-thread blocks** (layouts with at least 2^20 counter values per
//! timestamp step: the default 96- and 128-bit forms). One `fetch_add` on
//! the shared word per call makes every call bounce the word's cache line
//! between cores. These layouts instead reserve a block of consecutive
//! values of the same word with one `fetch_add` (16 at first, doubling up to
//! 1,024 while a thread uses its blocks up) and hand them out from a
//! thread-local cache. Every rule stays as it is on the one-value path:
//! - One state: a block is a range of the one word, so blocks of different
//!   threads and clones never overlap.
//! - Counted in `issued()`: the reservation moves the word, so what the
//!   state reports covers the whole block; it is made under the same
//!   `cur` sequence lock and gate re-check as a single value, so once the
//!   driver has closed the gate every block a value can still come from is
//!   counted.
//! - A block belongs to one engine (a process-unique id, never reused) and
//!   one gate epoch: a new lease (new epoch) discards it, so no value of an
//!   old grant (old slot, old start) is handed out under a new one.
//! - Every value of a block has one timestamp: a reservation that runs into
//!   the next timestamp step ends there (the values past it are counted and
//!   never handed out), and the block keeps its values' common part
//!   precomposed (`base`), so a value is `base + n`.
//! - Every call still reads the clock and checks the gate. The first value
//!   of a block is checked as on the one-value path: the ceiling, loaded
//!   after `cur` shows the grant in place and before the gate check (so a
//!   check that finds the block's epoch proves the ceiling is that
//!   grant's), and real time (a timestamp ahead of it is
//!   held back; one past the ceiling is refused, and a refusal does not
//!   consume the value). Passing opens the block's **window**, and within
//!   it the next values take the fast path: the gate open at this reading
//!   with the block's epoch (the same grant, whose ceiling only grows:
//!   `LeaseGate::extend` raises it, a new grant is a new epoch), the reading
//!   before the window's end, a value left. The
//!   window ends where the Unix offset is due to be re-read and, for
//!   sortable nonces, where the block's millisecond ends.
//! - Sortable: a block is used only within the millisecond it was reserved
//!   for; the first call in a later millisecond reserves a new one there.
//!
//! Smaller layouts (64-bit) keep one `fetch_add` per call: a block would
//! spend their few values per millisecond (2^13) on threads that do not use
//! them.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::time::Duration;

use leasehold_core::{Attachment, Floor, GenerationState, LeaseGate, MonoTime};

use crate::error::{BuildError, GenerateError, LayoutError, TryNextError, WaitReason};
use crate::layout::Layout;
use crate::time::{Reading, TimeSource};

const RESETTING: u64 = u64::MAX;
/// Set in `cur` (over the epoch) while generation refuses for a reason that
/// only time or a renewal can clear: callers then check on the cold path,
/// without moving the state, until it clears.
const BLOCKED: u64 = 1 << 63;
/// The next millisecond is always worth waiting for.
const MIN_WAIT: Duration = Duration::from_millis(2);
const RESYNC_EVERY: Duration = Duration::from_secs(1);
const NS_PER_MS: u64 = 1_000_000;

/// Per-thread blocks are used when a timestamp step holds at least this many
/// values (`2^shift`).
const BLOCK_MIN_SHIFT: u32 = 20;
/// A thread's first block of an engine and lease.
const BLOCK_FIRST: u64 = 16;
/// The largest block.
const BLOCK_MAX: u64 = 1024;
/// Engines a thread keeps a block for at a time (direct-mapped by id).
const BLOCK_WAYS: usize = 8;

/// Engine ids: process-unique, never reused (0: no engine).
static NEXT_ENGINE_ID: AtomicU64 = AtomicU64::new(1);
mod block;
mod cold;
#[cfg(test)]
mod tests;

use block::BLOCKS;

#[repr(align(64))]
struct Tracker {
    /// The state word (see the module docs).
    word: AtomicU64,
    /// Counter: the timestamp of `n = 0`.
    start: AtomicU64,
    /// Sortable: bits of the per-millisecond sequence in the state.
    /// Counter: `min(counter_bits, 64)`, the shift from `n` to milliseconds.
    shift: u32,
    sortable: bool,
    epoch_unix_ms: u64,
    /// A signature of the layout.
    form: u64,
    in_use: AtomicBool,
}

impl Tracker {
    /// The timestamp (ms since the layout epoch) of the next value: at least
    /// every timestamp handed out.
    fn high_water(&self) -> u64 {
        // The word before `start`: a restart stores `start` first and the
        // word second, so a read racing it sees an old word with a new start
        // (too high, which is safe) or both new, never a new word with an old
        // start (below what the previous grant handed out).
        let word = self.word.load(SeqCst);
        // A test-only pause between the two loads.
        #[cfg(test)]
        tests::hook_in_high_water();
        let start = self.start.load(SeqCst);
        if self.sortable {
            word >> self.shift
        } else {
            start + word.checked_shr(self.shift).unwrap_or(0)
        }
    }
}

impl GenerationState for Tracker {
    fn issued(&self) -> Floor {
        Floor(self.high_water() + self.epoch_unix_ms)
    }
    fn in_use(&self) -> bool {
        self.in_use.load(SeqCst)
    }
    fn form(&self) -> u64 {
        self.form
    }
}

#[repr(align(64))]
struct ReadMostly<T> {
    gate: LeaseGate,
    time: T,
    layout: Layout,
    shift: u32,
    /// `2^shift − 1` (all ones when the shift is 64).
    mask: u64,
    /// The gate epoch the state belongs to; 0 before the first lease.
    cur: AtomicU64,
    slot: AtomicU64,
    /// Timestamp (ms since the layout epoch) = (MonoTime ns + offset) / 1e6
    /// − epoch. Follows the time source's Unix offset and only grows, so
    /// timestamps never go backwards with the wall clock.
    offset: AtomicU64,
    /// MonoTime ns at which to re-read the Unix offset.
    next_resync: AtomicU64,
    /// The gate epoch a clock-behind warning was last emitted for.
    #[cfg(feature = "tracing")]
    warned: AtomicU64,
    /// This state's attachment to the gate: what earlier generation states
    /// on it issued (Unix ms), and the right to count refusals.
    attachment: Attachment,
    /// `time.guard()` in nanoseconds: a reading nearer the deadline than
    /// this is checked again with the precise clock.
    guard: u64,
    /// This engine's process-unique id (keys the per-thread blocks).
    id: u64,
    /// Whether values are handed out from per-thread blocks.
    blocks: bool,
    lock: Mutex<()>,
}

pub(crate) struct Engine<T, const SORTABLE: bool> {
    ro: ReadMostly<T>,
    state: Arc<Tracker>,
}

impl<T, const SORTABLE: bool> Drop for Engine<T, SORTABLE> {
    fn drop(&mut self) {
        // The last clone is gone: the gate may take a new state, which starts
        // after everything this one issued.
        self.state.in_use.store(false, SeqCst);
    }
}

enum Step {
    Ready,
    Retry,
}

/// What a call does when its value's timestamp is ahead of real time: wait
/// on the calling thread (`next`: [`Wait`]) or answer how long that would
/// take ([`NoWait`]: `try_next`). Refusals are the same in both. A type
/// parameter, so `next` compiles to the same code as before `try_next`
/// existed: its error type is `GenerateError` itself and the branches of
/// the other mode are constant-folded away.
pub(crate) trait Mode {
    /// What a call answers instead of a value.
    type Err: From<GenerateError>;
    /// Whether the call waits (on its thread) for real time.
    const WAITS: bool;
    /// The answer of a call that would have waited `retry_in`.
    fn would_wait(retry_in: Duration, why: WaitReason) -> Self::Err;
}

/// `next`: waits on the calling thread.
pub(crate) struct Wait;

impl Mode for Wait {
    type Err = GenerateError;
    const WAITS: bool = true;
    fn would_wait(_: Duration, _: WaitReason) -> GenerateError {
        unreachable!("a waiting call never answers that it would wait")
    }
}

/// `try_next`: answers how long it would wait instead of waiting.
pub(crate) struct NoWait;

impl Mode for NoWait {
    type Err = TryNextError;
    const WAITS: bool = false;
    fn would_wait(retry_in: Duration, why: WaitReason) -> TryNextError {
        TryNextError::WouldWait { retry_in, why }
    }
}

impl<T: TimeSource, const SORTABLE: bool> Engine<T, SORTABLE> {
    pub(crate) fn new(
        gate: LeaseGate,
        layout: Layout,
        time: T,
        kind: &'static str,
    ) -> Result<Self, BuildError> {
        let ctr = layout.counter_bits();
        let shift = if SORTABLE {
            // At most 2^21 values per millisecond: the sequence keeps one bit
            // of carry below the timestamp.
            ctr.min(21).min(63 - layout.timestamp_bits())
        } else {
            ctr.min(64)
        };
        let offset = time.unix_offset(true);
        let wall_ms = (time.precise().as_nanos().saturating_add(offset)) / NS_PER_MS;
        if wall_ms < layout.epoch_unix_ms() {
            return Err(LayoutError::new(
                "epoch",
                format!("{} ms after the UNIX epoch", layout.epoch_unix_ms()),
                format!("a time not in the future (the clock says {wall_ms} ms)"),
            )
            .into());
        }
        let state = Arc::new(Tracker {
            word: AtomicU64::new(0),
            start: AtomicU64::new(0),
            shift,
            sortable: SORTABLE,
            epoch_unix_ms: layout.epoch_unix_ms(),
            form: layout.signature(),
            in_use: AtomicBool::new(true),
        });
        let attachment = gate.attach(kind, state.clone())?;
        let time_guard = time.guard();
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
                offset: AtomicU64::new(offset),
                next_resync: AtomicU64::new(0),
                #[cfg(feature = "tracing")]
                warned: AtomicU64::new(0),
                attachment,
                guard: u64::try_from(time_guard.as_nanos()).unwrap_or(u64::MAX),
                id: NEXT_ENGINE_ID.fetch_add(1, Relaxed),
                blocks: shift >= BLOCK_MIN_SHIFT,
                lock: Mutex::new(()),
            },
            state,
        };
        engine.resync(engine.ro.time.precise(), false);
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
        ((mono.as_nanos() + self.ro.offset.load(Relaxed)) / NS_PER_MS)
            .saturating_sub(self.ro.layout.epoch_unix_ms())
    }

    /// Layout milliseconds from Unix milliseconds.
    fn layout_ms(&self, unix_ms: u64) -> u64 {
        unix_ms.saturating_sub(self.ro.layout.epoch_unix_ms())
    }

    /// The next plain nonce. With `GATED = false` the clock and the gate are
    /// skipped (benchmarks only: it measures what the check costs). `M`
    /// says whether a value ahead of real time is waited for ([`Wait`]) or
    /// answered with the time left ([`NoWait`]).
    #[inline(always)]
    pub(crate) fn next<const GATED: bool, M: Mode>(&self) -> Result<u128, M::Err> {
        if self.ro.blocks {
            let ro = &self.ro;
            // The clock and the gate outside the thread-local access, so
            // that the closure stays small and is inlined (a `u128` returned
            // through memory from a call costs a store-forwarding stall).
            let (earliest, epoch) = if GATED {
                let r = ro.time.now();
                let trusted = MonoTime::from_nanos(r.latest.as_nanos().saturating_add(ro.guard));
                (r.earliest.as_nanos(), ro.gate.check(trusted).ok())
            } else {
                (0, Some(ro.cur.load(Relaxed)))
            };
            // `try_with` cannot fail for this key (const, no destructor);
            // were it ever to, the one-value path below takes the value.
            if let Ok(Some(v)) = BLOCKS.try_with(|ways| {
                self.next_from_block::<GATED>(&ways[ro.id as usize % BLOCK_WAYS], earliest, epoch)
            }) {
                return Ok(v);
            }
            if let Ok(r) = BLOCKS.try_with(|ways| {
                self.next_from_block_slow::<GATED, M>(&ways[self.ro.id as usize % BLOCK_WAYS])
            }) {
                return r;
            }
        }
        self.next_composed::<GATED, M>()
    }

    /// [`Engine::next_one`], composed.
    #[inline]
    fn next_composed<const GATED: bool, M: Mode>(&self) -> Result<u128, M::Err> {
        let (millis, slot, counter) = self.next_one::<GATED, M>()?;
        Ok(self.ro.layout.compose(millis, slot, counter))
    }

    /// A reading, and the gate's epoch if it is open at that reading. A
    /// reading too near the deadline to trust is replaced by a precise one.
    /// Always inlined: the one-value path is generic over its waiting mode,
    /// and without the hint the compiler stopped inlining this into it (24
    /// more instructions a call, counted with callgrind).
    #[inline(always)]
    fn read(&self) -> Result<(Reading, u64), GenerateError> {
        let ro = &self.ro;
        let r = ro.time.now();
        let trusted = MonoTime::from_nanos(r.latest.as_nanos().saturating_add(ro.guard));
        match ro.gate.check(trusted) {
            Ok(e) => Ok((r, e)),
            Err(_) => self.read_precise(),
        }
    }

    #[cold]
    #[inline(never)]
    fn read_precise(&self) -> Result<(Reading, u64), GenerateError> {
        let r = Reading::exact(self.ro.time.precise());
        match self.ro.gate.check(r.latest) {
            Ok(e) => Ok((r, e)),
            Err(_) => Err(self.refuse(GenerateError::Closed)),
        }
    }

    /// Counts a refusal on the gate (for telemetry) and returns `e`.
    #[cold]
    fn refuse(&self, e: GenerateError) -> GenerateError {
        self.ro.attachment.note_refused(&self.ro.gate);
        e
    }

    /// One value per call: one `fetch_add` on the shared word.
    #[inline]
    fn next_one<const GATED: bool, M: Mode>(&self) -> Result<(u64, u64, u128), M::Err> {
        let ro = &self.ro;
        let state = &self.state.word;
        loop {
            let (reading, epoch) = if GATED {
                self.read()?
            } else {
                (Reading::exact(MonoTime::ZERO), ro.cur.load(Relaxed))
            };
            let c1 = ro.cur.load(SeqCst);
            if c1 != epoch || (GATED && reading.earliest.as_nanos() >= ro.next_resync.load(Relaxed))
            {
                self.cold(epoch)?;
                continue;
            }
            let now_ms = if GATED {
                self.millis(reading.earliest)
            } else {
                u64::MAX
            };
            if !M::WAITS && GATED {
                // Without waiting: look before taking a value. A value
                // whose timestamp is ahead of the clock would be dropped
                // (counted as issued, never handed out), and a caller that
                // tries again at once would push the state further ahead
                // with every try.
                let next_ms = self.state.high_water();
                if next_ms > now_ms {
                    match self.wait_for::<M>(next_ms, c1)? {
                        Step::Ready => {}
                        Step::Retry => continue,
                    }
                }
            }
            let slot = ro.slot.load(Acquire);
            #[cfg(test)]
            tests::hook();
            let (millis, counter) = if SORTABLE {
                let mut p = state.fetch_add(1, SeqCst);
                if GATED && p >> ro.shift < now_ms {
                    match self.jump(now_ms, 1) {
                        Some(q) => p = q,
                        None => continue,
                    }
                }
                (p >> ro.shift, u128::from(p & ro.mask))
            } else {
                let n = state.fetch_add(1, SeqCst);
                let start = self.state.start.load(Acquire);
                (
                    start + n.checked_shr(ro.shift).unwrap_or(0),
                    u128::from(n & ro.mask),
                )
            };
            if ro.cur.load(SeqCst) != c1 {
                continue;
            }
            if GATED {
                // The ceiling first, then the re-check: `extend` only raises
                // the ceiling of a grant and `open_with` changes the epoch,
                // so a ceiling read before a re-check that passes is this
                // grant's own.
                let ceiling = ro.gate.ceiling().0;
                // Still the same open lease after the state moved: a driver
                // that closes the gate from now on counts this value in what
                // it reports as issued.
                if ro.gate.check(reading.latest) != Ok(epoch) {
                    continue;
                }
                // A test-only pause between the re-check and the ceiling
                // comparison.
                #[cfg(test)]
                tests::hook_after_recheck();
                if millis + ro.layout.epoch_unix_ms() > ceiling {
                    self.block(c1);
                    return Err(self
                        .refuse(GenerateError::PastCeiling {
                            timestamp_unix_ms: millis + ro.layout.epoch_unix_ms(),
                            ceiling_unix_ms: ceiling,
                        })
                        .into());
                }
            }
            if millis > ro.layout.max_millis() {
                return Err(GenerateError::Exhausted {
                    timestamp_bits: ro.layout.timestamp_bits(),
                }
                .into());
            }
            if millis > now_ms {
                match self.wait_for::<M>(millis, c1)? {
                    Step::Ready => {}
                    Step::Retry => continue,
                }
            }
            return Ok((millis, slot, counter));
        }
    }

    /// Sortable, first call in a new millisecond: move the state to `now_ms`
    /// and claim its first `n` sequence numbers. `None` when another thread
    /// moved it first.
    #[cold]
    #[inline(never)]
    fn jump(&self, now_ms: u64, n: u64) -> Option<u64> {
        let shift = self.ro.shift;
        let target = now_ms << shift;
        let state = &self.state.word;
        let mut s = state.load(SeqCst);
        while s >> shift < now_ms {
            match state.compare_exchange_weak(s, target + n, SeqCst, SeqCst) {
                Ok(_) => return Some(target),
                Err(actual) => s = actual,
            }
        }
        None
    }
}
