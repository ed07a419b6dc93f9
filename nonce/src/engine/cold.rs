//! The cold paths: a new lease (restart), the once-a-second re-reading of
//! the Unix offset, waiting for real time to reach a timestamp, and the
//! refusals that only time or a renewal can clear.

use std::sync::atomic::Ordering::*;
use std::time::Duration;

use leasehold_core::{MonoTime, UnixOffset};

use super::{BLOCKED, Engine, MIN_WAIT, Mode, NS_PER_MS, RESETTING, RESYNC_EVERY, Step};
use crate::error::{GenerateError, WaitReason};
use crate::time::TimeSource;

impl<T: TimeSource, const SORTABLE: bool> Engine<T, SORTABLE> {
    /// Holds a value back until real time reaches its timestamp. The gate is
    /// checked again on every reading; a new lease meanwhile discards it. A
    /// timestamp further ahead than the gate's `max_clock_skew` (this host's
    /// clock is behind the slot's floor) is refused at once.
    ///
    /// Without waiting ([`Mode::WAITS`] false, `try_next`): the same checks
    /// at one precise reading, then how long the wait would be instead of
    /// the wait.
    #[cold]
    #[inline(never)]
    pub(super) fn wait_for<M: Mode>(&self, millis: u64, epoch: u64) -> Result<Step, M::Err> {
        let first = self.ro.time.precise();
        let now_ms = self.millis(first);
        if now_ms < millis {
            let max_skew = self.ro.gate.view().max_clock_skew;
            let ahead = Duration::from_millis(millis - now_ms);
            // The next millisecond is always worth waiting for.
            if ahead > max_skew.max(MIN_WAIT) {
                self.block(epoch);
                self.warn_behind(epoch, ahead, max_skew);
                return Err(self
                    .refuse(GenerateError::ClockBehind {
                        behind: ahead,
                        max_clock_skew: max_skew,
                    })
                    .into());
            }
        }
        let mut spins = 0u32;
        let mut m = first;
        loop {
            match self.ro.gate.check(m) {
                Err(_) => return Err(self.refuse(GenerateError::Closed).into()),
                Ok(e) if e != epoch => return Ok(Step::Retry),
                Ok(_) => {}
            }
            if self.ro.cur.load(SeqCst) != epoch {
                return Ok(Step::Retry);
            }
            if self.millis(m) >= millis {
                return Ok(Step::Ready);
            }
            if !M::WAITS {
                return Err(M::would_wait(
                    self.time_until(millis, m),
                    self.why_ahead(now_ms),
                ));
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
            m = self.ro.time.precise();
        }
    }

    /// How long from the reading `m` until the timestamp `millis` (ms since
    /// the layout epoch) is real time, with the Unix offset as it is now.
    fn time_until(&self, millis: u64, m: MonoTime) -> Duration {
        let unix_ns = (millis + self.ro.layout.epoch_unix_ms()).saturating_mul(NS_PER_MS);
        let at = unix_ns.saturating_sub(self.ro.offset.load(Relaxed));
        Duration::from_nanos(at.saturating_sub(m.as_nanos()).max(1))
    }

    /// Why a value is ahead of the clock, which reads `now_ms`: the slot's
    /// floor, or this state's own use of the milliseconds up to now.
    fn why_ahead(&self, now_ms: u64) -> WaitReason {
        let floor = self.layout_ms(self.ro.gate.view().floor.0);
        if floor >= now_ms && floor > 0 {
            WaitReason::Floor
        } else {
            WaitReason::NextMillisecond
        }
    }

    #[allow(unused_variables)]
    fn warn_behind(&self, epoch: u64, behind: Duration, max_skew: Duration) {
        #[cfg(feature = "tracing")]
        if self.ro.warned.swap(epoch, Relaxed) != epoch {
            tracing::warn!(
                slot = self.ro.slot.load(Relaxed),
                behind_ms = behind.as_millis() as u64,
                max_clock_skew_ms = max_skew.as_millis() as u64,
                "no nonce generated: this host's clock is {behind:?} behind the slot's floor \
                 (the highest timestamp a previous holder may have used), more than \
                 max_clock_skew ({max_skew:?}); fix the clock synchronisation (NTP) or raise \
                 max_clock_skew"
            );
        }
    }

    /// Marks generation for `epoch` as refusing (see [`BLOCKED`]): the
    /// refusals after this one leave the state where it is.
    #[cold]
    pub(super) fn block(&self, epoch: u64) {
        let _ = self
            .ro
            .cur
            .compare_exchange(epoch, epoch | BLOCKED, SeqCst, SeqCst);
    }

    /// While blocked: refuses, without moving the state, until the wall
    /// clock has no step pending and the next value would be neither past
    /// the ceiling nor too far ahead of the clock; then unblocks. Holds the
    /// lock.
    fn unblock(&self, epoch: u64) -> Result<(), GenerateError> {
        let ro = &self.ro;
        let m = ro.time.precise();
        if m.as_nanos() >= ro.next_resync.load(Relaxed) {
            // Once a second, as when generating: has a step settled, or
            // been corrected?
            self.resync(m, true);
        }
        if let Some(ahead) = ro.time.wall_clock_step() {
            return Err(self.refuse(GenerateError::ClockStepped {
                ahead,
                settle: UnixOffset::SETTLE,
            }));
        }
        let now_ms = self.millis(m);
        let state_ms = self.state.high_water();
        let next_ms = if SORTABLE {
            state_ms.max(now_ms)
        } else {
            state_ms
        };
        let unix = next_ms + ro.layout.epoch_unix_ms();
        let ceiling = ro.gate.ceiling().0;
        if unix > ceiling {
            return Err(self.refuse(GenerateError::PastCeiling {
                timestamp_unix_ms: unix,
                ceiling_unix_ms: ceiling,
            }));
        }
        let max_skew = ro.gate.view().max_clock_skew;
        let ahead = Duration::from_millis(next_ms.saturating_sub(now_ms));
        if ahead > max_skew.max(MIN_WAIT) {
            return Err(self.refuse(GenerateError::ClockBehind {
                behind: ahead,
                max_clock_skew: max_skew,
            }));
        }
        let _ = ro
            .cur
            .compare_exchange(epoch | BLOCKED, epoch, SeqCst, SeqCst);
        Ok(())
    }

    /// A new lease, a refusal to re-check, or time to re-read the Unix
    /// offset.
    #[cold]
    #[inline(never)]
    pub(super) fn cold(&self, epoch: u64) -> Result<(), GenerateError> {
        let ro = &self.ro;
        let _guard = ro.lock.lock().unwrap_or_else(|e| e.into_inner());
        let cur = ro.cur.load(SeqCst);
        if cur == epoch | BLOCKED {
            return self.unblock(epoch);
        }
        if cur != epoch {
            self.restart(epoch)?;
        } else {
            let m = ro.time.precise();
            if m.as_nanos() >= ro.next_resync.load(Relaxed) {
                self.resync(m, true);
            }
        }
        self.refuse_if_stepped(epoch)
    }

    /// After a fresh look at the wall clock: while it has stepped forward
    /// further than the offset follows at once, generation stops (see
    /// [`UnixOffset`]). Values handed out meanwhile carry the offset from
    /// before the step, which never went backwards: safe, only late.
    fn refuse_if_stepped(&self, epoch: u64) -> Result<(), GenerateError> {
        match self.ro.time.wall_clock_step() {
            None => Ok(()),
            Some(ahead) => {
                self.block(epoch);
                self.warn_stepped(ahead);
                Err(self.refuse(GenerateError::ClockStepped {
                    ahead,
                    settle: UnixOffset::SETTLE,
                }))
            }
        }
    }

    #[allow(unused_variables)]
    fn warn_stepped(&self, ahead: Duration) {
        #[cfg(feature = "tracing")]
        tracing::warn!(
            slot = self.ro.slot.load(Relaxed),
            ahead_ms = ahead.as_millis() as u64,
            settle_s = UnixOffset::SETTLE.as_secs(),
            "no nonce generated: this host's wall clock stepped {ahead:?} ahead of the time this \
             process keeps; generation stops until the clock comes back or the step has lasted \
             {:?} (a step that is followed and then corrected would hold back the slot's next \
             holder for as long); check the clock synchronisation (NTP)",
            UnixOffset::SETTLE
        );
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
        self.resync(m, true);
        let observed = self.millis(m);
        let begin = observed
            .max(self.state.high_water())
            .max(self.layout_ms(view.floor.0))
            .max(self.layout_ms(ro.attachment.history().0))
            + 1;
        if begin > ro.layout.max_millis() {
            return Err(GenerateError::Exhausted {
                timestamp_bits: ro.layout.timestamp_bits(),
            });
        }
        // `start` before the word (see `Tracker::high_water`).
        self.state.start.store(begin, SeqCst);
        self.state
            .word
            .store(if SORTABLE { begin << ro.shift } else { 0 }, SeqCst);
        ro.slot.store(u64::from(view.slot), SeqCst);
        ro.cur.store(epoch, SeqCst);
        Ok(())
    }

    /// Re-reads the Unix offset (freshly measured when `fresh`); the offset
    /// only grows.
    pub(super) fn resync(&self, m: MonoTime, fresh: bool) {
        let ro = &self.ro;
        ro.offset.fetch_max(ro.time.unix_offset(fresh), SeqCst);
        ro.next_resync.store((m + RESYNC_EVERY).as_nanos(), Relaxed);
    }
}
