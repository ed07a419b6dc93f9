//! Per-thread blocks: the fast path that hands out values of a block this
//! thread reserved, and the slow path that reserves one and checks its
//! timestamp (see the module docs of `engine`).

use std::cell::Cell;
use std::sync::atomic::Ordering::*;

use leasehold_core::MonoTime;

#[cfg(test)]
use super::tests;
use super::{BLOCK_FIRST, BLOCK_MAX, BLOCK_WAYS, Engine, Mode, NS_PER_MS, Step};
use crate::error::GenerateError;
use crate::time::{Reading, TimeSource};

/// This thread's block of one engine: a range `next..end` of the state
/// word, reserved for engine `id` under gate epoch `epoch`, every value of
/// it with the same timestamp `millis`. One `Cell` per field, so the fast
/// path reads and writes only what it uses.
#[repr(C, align(64))]
pub(super) struct Way {
    id: Cell<u64>,
    epoch: Cell<u64>,
    next: Cell<u64>,
    end: Cell<u64>,
    /// The fast path's window: a reading (its `earliest`, in ns) below this
    /// may take the next value with no check but the gate's (0: closed).
    /// Opened only after the block's timestamp passed every check for its
    /// grant (ceiling, real time, range); it ends where the block's
    /// millisecond ends (sortable) and where the Unix offset is due to be
    /// re-read.
    until: Cell<u64>,
    /// The size of the last reservation.
    size: Cell<u64>,
    /// The timestamp (ms since the layout epoch) of every value of the block.
    millis: Cell<u64>,
    /// The nonce of state value `n` is `base + n` (wrapping).
    base: Cell<u128>,
}

impl Way {
    const fn empty() -> Self {
        Self {
            id: Cell::new(0),
            epoch: Cell::new(0),
            next: Cell::new(0),
            end: Cell::new(0),
            until: Cell::new(0),
            size: Cell::new(0),
            millis: Cell::new(0),
            base: Cell::new(0),
        }
    }
}

thread_local! {
    pub(super) static BLOCKS: [Way; BLOCK_WAYS] = const { [const { Way::empty() }; BLOCK_WAYS] };
}

impl<T: TimeSource, const SORTABLE: bool> Engine<T, SORTABLE> {
    /// A value from this thread's block (see the module docs): the fast
    /// path. The block's timestamp passed every check for its grant when its
    /// window opened ([`Engine::next_from_block_slow`]); this checks what can
    /// have changed since: the gate (`epoch`: open at a reading of which
    /// `earliest` is the lower end, and the same grant, whose ceiling can
    /// only have grown), the clock (the reading inside the window) and the
    /// block (a value left). `cur` is not read: a restart is only ever for a
    /// newer epoch than the block's, which the gate check already refuses,
    /// and a refusal in progress (`BLOCKED`) concerns the next values of
    /// the shared state, not the ones this block was already checked for.
    #[inline(always)]
    pub(super) fn next_from_block<const GATED: bool>(
        &self,
        way: &Way,
        earliest: u64,
        epoch: Option<u64>,
    ) -> Option<u128> {
        let ro = &self.ro;
        let n = way.next.get();
        if way.id.get() == ro.id
            && epoch == Some(way.epoch.get())
            && (!GATED || earliest < way.until.get())
            && n < way.end.get()
        {
            way.next.set(n + 1);
            return Some(way.base.get().wrapping_add(u128::from(n)));
        }
        None
    }

    /// Everything the fast path does not do: reserve a block when this
    /// thread has none for this engine and grant, check the block's
    /// timestamp against the ceiling and real time (waiting for real time
    /// when it is a little ahead), then open the fast path's window.
    #[cold]
    #[inline(never)]
    pub(super) fn next_from_block_slow<const GATED: bool, M: Mode>(
        &self,
        way: &Way,
    ) -> Result<u128, M::Err> {
        let ro = &self.ro;
        way.until.set(0);
        loop {
            // `cur`, then the ceiling, then the gate check, as on the
            // one-value path: `cur` holds an epoch only once the gate's
            // writer has stored that grant's ceiling, and `open_with` moves
            // the epoch before the ceiling, so when `cur` before the load
            // and the gate check after it find the same epoch, the ceiling
            // is that grant's (or an `extend` of it). A ceiling loaded
            // before the grant was in place (another thread restarted the
            // state meanwhile) is not used: the loop loads it again.
            let c0 = ro.cur.load(SeqCst);
            let ceiling = if GATED { ro.gate.ceiling().0 } else { 0 };
            #[cfg(test)]
            tests::hook_block();
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
            if c0 != c1 {
                continue;
            }
            let now_ms = if GATED {
                self.millis(reading.earliest)
            } else {
                u64::MAX
            };
            if (way.id.get() != ro.id
                || way.epoch.get() != epoch
                || way.next.get() >= way.end.get()
                || (SORTABLE && GATED && way.millis.get() < now_ms))
                && !self.reserve::<GATED>(way, epoch, now_ms, reading)
            {
                continue;
            }
            let n = way.next.get();
            let millis = way.millis.get();
            if GATED && millis + ro.layout.epoch_unix_ms() > ceiling {
                self.block(epoch);
                return Err(self
                    .refuse(GenerateError::PastCeiling {
                        timestamp_unix_ms: millis + ro.layout.epoch_unix_ms(),
                        ceiling_unix_ms: ceiling,
                    })
                    .into());
            }
            if millis > ro.layout.max_millis() {
                return Err(GenerateError::Exhausted {
                    timestamp_bits: ro.layout.timestamp_bits(),
                }
                .into());
            }
            // Without waiting (`try_next`), the block stays this thread's:
            // its values are handed out once the clock reaches them.
            if millis > now_ms {
                match self.wait_for::<M>(millis, epoch)? {
                    Step::Ready => {}
                    Step::Retry => continue,
                }
            }
            way.next.set(n + 1);
            // Every value of the block has this timestamp, and it is now
            // within the grant's ceiling and not ahead of real time: the
            // values after this one need only the fast path's checks.
            way.until.set(if GATED {
                self.window_end(millis)
            } else {
                u64::MAX
            });
            return Ok(way.base.get().wrapping_add(u128::from(n)));
        }
    }

    /// Where the fast path's window for a block of timestamp `millis` ends
    /// (a `MonoTime` in ns): when the Unix offset is due to be re-read, and
    /// for sortable nonces at the first reading in a later millisecond, where
    /// the next call reserves a block for that millisecond. (The offset only
    /// grows: if another thread raises it meanwhile, that millisecond really
    /// ends a little earlier and a value can carry the millisecond before
    /// it, never one after real time.)
    fn window_end(&self, millis: u64) -> u64 {
        let ro = &self.ro;
        let resync = ro.next_resync.load(Relaxed);
        if SORTABLE {
            let next_ms_ns = (millis + 1 + ro.layout.epoch_unix_ms()).saturating_mul(NS_PER_MS);
            resync.min(next_ms_ns.saturating_sub(ro.offset.load(Relaxed)))
        } else {
            resync
        }
    }

    /// Reserves a block of the shared word for this thread under gate epoch
    /// `epoch` (which `cur` held when the caller looked): one `fetch_add`,
    /// then the same sequence-lock and gate re-check as a single value, so a
    /// driver that closes the gate from then on counts the whole block.
    /// False when the state or the gate moved meanwhile (the caller starts
    /// over); the reserved values are then counted but never handed out.
    #[cold]
    #[inline(never)]
    fn reserve<const GATED: bool>(
        &self,
        way: &Way,
        epoch: u64,
        now_ms: u64,
        reading: Reading,
    ) -> bool {
        let ro = &self.ro;
        let size = if way.id.get() == ro.id && way.epoch.get() == epoch {
            if way.next.get() >= way.end.get() {
                (way.size.get() * 2).min(BLOCK_MAX)
            } else {
                way.size.get()
            }
        } else {
            BLOCK_FIRST
        };
        let slot = ro.slot.load(Acquire);
        #[cfg(test)]
        tests::hook();
        let state = &self.state.word;
        let mut first = state.fetch_add(size, SeqCst);
        if SORTABLE && GATED && first >> ro.shift < now_ms {
            match self.jump(now_ms, size) {
                Some(f) => first = f,
                None => return false,
            }
        }
        let start = self.state.start.load(Acquire);
        if ro.cur.load(SeqCst) != epoch {
            return false;
        }
        if GATED && ro.gate.check(reading.latest) != Ok(epoch) {
            return false;
        }
        // One timestamp per block: a reservation that runs into the next
        // timestamp step ends there (the values past it are counted as
        // issued and never handed out).
        let step_first = first & !ro.mask;
        let end = first
            .saturating_add(size)
            .min((first | ro.mask).saturating_add(1));
        let millis = if SORTABLE {
            first >> ro.shift
        } else {
            start + first.checked_shr(ro.shift).unwrap_or(0)
        };
        // The nonce of `n` is `compose(millis, slot, n & mask)`; the counter
        // is the lowest field, so that is `compose(millis, slot, 0)` plus
        // `n − step_first`.
        let base = ro
            .layout
            .compose(millis, slot, 0)
            .wrapping_sub(u128::from(step_first));
        way.id.set(ro.id);
        way.epoch.set(epoch);
        way.next.set(first);
        way.end.set(end);
        way.until.set(0);
        way.size.set(size);
        way.millis.set(millis);
        way.base.set(base);
        true
    }
}
