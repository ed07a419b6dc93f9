//! Clock rate drift: a worker whose clocks run fast or slow by a set rate,
//! and the conversion of what it recorded back onto the machine's real
//! timeline, where the checker compares every worker's holding periods.
//!
//! The rate is libfaketime's, preloaded into the worker process: it moves
//! `CLOCK_REALTIME`, `CLOCK_MONOTONIC`, `CLOCK_MONOTONIC_COARSE` and
//! `CLOCK_BOOTTIME` alike (and scales sleeps), which is what a host whose
//! oscillator runs off does to every reader: the lease manager's send times,
//! the gate's deadline checks, the generators' timestamps. The store and the
//! runner read the real clocks.
//!
//! What libfaketime 0.9.10 does to the clocks of a process started at real
//! time `s` (measured here, for a Rust worker whose `rustix` calls go
//! through glibc): every clock, `CLOCK_BOOTTIME` and `CLOCK_MONOTONIC`
//! included, reads `W(s) + r · (t − s)` at real time `t`, where `W(s)` is the
//! real **wall clock** at the start. So a drifting worker's "BOOTTIME"
//! readings are on no other process's scale (about 1.8 × 10⁹ s, not the
//! seconds since boot), and within the worker they advance `r` times as fast.
//! The worker does not notice: it compares its readings only with each
//! other.
//!
//! The runner therefore takes, just before it starts the worker, a real
//! `CLOCK_BOOTTIME` reading `a` (`a ≤ s`) and the machine's Unix offset
//! `u = W − BOOTTIME` at that moment, and maps every reading `T` the worker
//! recorded back to the real `CLOCK_BOOTTIME` reading
//! `a + (T − u − a) / r`. That is exact but for the start-up delay `s − a`,
//! which it misplaces by `(s − a) · |1 − 1/r|`: 0.2 ms for a 10 ms start at
//! 2 %, 5 µs at 500 ppm (and a wall-clock slew between the two reads of
//! `u`, microseconds apart).

use crate::record::Record;

/// A clock rate, in parts per million off the true rate: positive runs
/// fast, negative slow. `-20_000` is a clock that counts 0.98 s per second.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rate {
    ppm: i32,
}

impl Rate {
    /// The true rate.
    pub const EXACT: Rate = Rate { ppm: 0 };

    /// `ppm` parts per million fast (negative: slow). Refused beyond ±50 %,
    /// where a clock is broken rather than drifting.
    pub fn from_ppm(ppm: i32) -> Option<Rate> {
        (ppm.abs() <= 500_000).then_some(Rate { ppm })
    }

    /// Parts per million off.
    pub fn ppm(self) -> i32 {
        self.ppm
    }

    /// Whether the clock runs true.
    pub fn is_exact(self) -> bool {
        self.ppm == 0
    }

    /// The value of libfaketime's `FAKETIME` for this rate: no offset, the
    /// clocks scaled from the process's start.
    pub fn faketime(self) -> String {
        let r = 1_000_000 + i64::from(self.ppm);
        format!("+0 x{}.{:06}", r / 1_000_000, r % 1_000_000)
    }
}

/// A worker started with drifting clocks: where its timeline lies on the
/// real one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drifted {
    /// Its clocks' rate.
    pub rate: Rate,
    /// A real `CLOCK_BOOTTIME` reading (ns) taken just before it started.
    pub anchor_ns: u64,
    /// The machine's wall clock minus `CLOCK_BOOTTIME` (ns) at that moment:
    /// where libfaketime starts the worker's clocks.
    pub unix_offset_ns: u64,
}

impl Drifted {
    /// The real `CLOCK_BOOTTIME` reading (ns) when the worker read `t_ns`
    /// on its drifting clock. 0 (no reading) stays 0; an exact clock
    /// (no libfaketime) is on the real timeline already.
    pub fn to_real(&self, t_ns: u64) -> u64 {
        if self.rate.is_exact() || t_ns == 0 {
            return t_ns;
        }
        let own = i128::from(t_ns) - i128::from(self.unix_offset_ns);
        let since = own - i128::from(self.anchor_ns);
        let real = since * 1_000_000 / (1_000_000 + i128::from(self.rate.ppm));
        u64::try_from(i128::from(self.anchor_ns) + real).unwrap_or(0)
    }

    /// Moves every time in `records` (the worker's log) onto the real
    /// timeline.
    pub fn retime(&self, records: &mut [Record]) {
        if self.rate.is_exact() {
            return;
        }
        for r in records {
            match r {
                Record::Run { at_ns, .. } | Record::Fenced { at_ns, .. } => {
                    *at_ns = self.to_real(*at_ns);
                }
                Record::Hold {
                    open_ns, until_ns, ..
                } => {
                    *open_ns = self.to_real(*open_ns);
                    *until_ns = self.to_real(*until_ns);
                }
                Record::SecondGeneratorRefused { .. } | Record::ClockBehind { .. } => {}
            }
        }
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ppm {
            0 => f.write_str("exact"),
            p if p % 10_000 == 0 => write!(f, "{:+}%", p / 10_000),
            p => write!(f, "{p:+} ppm"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Kind;

    const S: u64 = 1_000_000_000_000;
    /// The wall clock minus BOOTTIME: where libfaketime starts the clocks.
    const U: u64 = 1_796_000_000_000_000_000;

    fn drifted(ppm: i32) -> Drifted {
        Drifted {
            rate: Rate::from_ppm(ppm).unwrap(),
            anchor_ns: S,
            unix_offset_ns: U,
        }
    }

    #[test]
    fn the_faketime_value_names_the_rate() {
        assert_eq!(Rate::from_ppm(20_000).unwrap().faketime(), "+0 x1.020000");
        assert_eq!(Rate::from_ppm(-20_000).unwrap().faketime(), "+0 x0.980000");
        assert_eq!(Rate::from_ppm(-500).unwrap().faketime(), "+0 x0.999500");
        assert_eq!(Rate::from_ppm(500).unwrap().faketime(), "+0 x1.000500");
        assert_eq!(Rate::from_ppm(600_000), None);
    }

    #[test]
    fn a_slow_clocks_reading_comes_later_in_real_time() {
        // 0.98: after 980 ms on its own clock, 1 s has really passed.
        let slow = drifted(-20_000);
        assert_eq!(slow.to_real(U + S + 980_000_000), S + 1_000_000_000);
        // 1.02: 1,020 ms on its own clock is 1 s.
        let fast = drifted(20_000);
        assert_eq!(fast.to_real(U + S + 1_020_000_000), S + 1_000_000_000);
        // The start itself and no reading do not move; an exact clock's
        // readings are real already.
        assert_eq!(slow.to_real(U + S), S);
        assert_eq!(slow.to_real(0), 0);
        let exact = Drifted {
            rate: Rate::EXACT,
            ..slow
        };
        assert_eq!(exact.to_real(S + 7), S + 7);
    }

    #[test]
    fn a_slow_holders_deadline_passes_the_stores_expiry_unless_the_margin_covers_it() {
        // The holder sends a renewal at its reading `S` (its start, so the
        // reading is real time too); the store expires the lease one TTL
        // later on its own, true clock.
        let ttl = 2_000_000_000u64;
        let expiry = S + ttl;
        let deadline = |margin: u64, ppm: i32| drifted(ppm).to_real(U + S + ttl - margin);
        // The rule's minimum for 2 s on a 1 ms store: 2 + 1 + 20 ms.
        let min = 23_000_000;
        assert!(deadline(min, -500) < expiry);
        assert!(deadline(min, -20_000) > expiry);
        // No margin: even 500 ppm slow outlives the lease.
        assert!(deadline(0, -500) > expiry);
    }

    #[test]
    fn retime_moves_every_recorded_time_and_nothing_else() {
        let slow = drifted(-20_000);
        let mut records = [
            Record::Run {
                kind: Kind::Sortable,
                first: 1,
                last: 9,
                at_ns: U + S + 980_000_000,
            },
            Record::Hold {
                kind: Kind::Counter,
                epoch: 1,
                slot: 0,
                fence: 5,
                floor: 77,
                open_ns: U + S,
                until_ns: U + S + 1_960_000_000,
                closed: true,
            },
            Record::Fenced {
                kind: Kind::Counter,
                slot: 0,
                fence: 5,
                accepted: true,
                at_ns: 0,
            },
        ];
        slow.retime(&mut records);
        assert!(
            matches!(records[0], Record::Run { first: 1, last: 9, at_ns, .. }
            if at_ns == S + 1_000_000_000)
        );
        assert!(
            matches!(records[1], Record::Hold { floor: 77, open_ns, until_ns, .. }
            if open_ns == S && until_ns == S + 2_000_000_000)
        );
        assert!(matches!(records[2], Record::Fenced { at_ns: 0, .. }));
    }

    #[test]
    fn rates_print_as_percent_or_ppm() {
        assert_eq!(Rate::from_ppm(-20_000).unwrap().to_string(), "-2%");
        assert_eq!(Rate::from_ppm(500).unwrap().to_string(), "+500 ppm");
        assert_eq!(Rate::EXACT.to_string(), "exact");
    }
}
