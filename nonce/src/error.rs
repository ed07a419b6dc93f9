//! Errors: generation (act on them at run time), layout and key (fix the
//! configuration), parse (bad input).

use std::fmt;

/// Why a nonce was not generated. Nothing was handed out; retrying later is safe.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GenerateError {
    /// No lease is held: the gate is closed, or its local deadline has passed
    /// (even when nothing closed it). Generation resumes by itself once the
    /// lease manager holds a slot again.
    Closed,
    /// The lease's slot does not fit in the layout's slot field.
    SlotOutOfRange {
        /// The slot the lease gave.
        slot: u32,
        /// The layout's slot bits.
        slot_bits: u32,
    },
    /// The timestamp field is full: the layout's time range has ended.
    Exhausted {
        /// The layout's timestamp bits.
        timestamp_bits: u32,
    },
    /// This host's clock is behind the slot's floor (the highest timestamp a
    /// previous holder may have used) by more than the lease's
    /// `max_clock_skew`: its IDs could repeat the previous holder's.
    /// Generation resumes by itself once the clock passes the floor.
    ClockBehind {
        /// How far behind.
        behind: std::time::Duration,
        /// The configured bound.
        max_clock_skew: std::time::Duration,
    },
    /// The wall clock stepped forward, by more than the step the process
    /// follows at once (the smallest `max_clock_skew` of its leases, 1 s at
    /// most), and has not stayed there long enough to be believed: the time
    /// a value would carry is in doubt. Following a step that is then
    /// corrected would stamp values, and report a floor to the store, that
    /// far ahead of every clock, holding back the slot's next holder for as
    /// long. Generation resumes by itself when the clock comes back, or once
    /// the step has lasted `settle` (then it is followed).
    ClockStepped {
        /// How far the wall clock is ahead of the time this process keeps.
        ahead: std::time::Duration,
        /// How long a step must last to be followed
        /// ([`UnixOffset::SETTLE`](leasehold_core::UnixOffset::SETTLE)).
        settle: std::time::Duration,
    },
    /// The value's timestamp is past the lease's ceiling, the highest
    /// timestamp this holder has recorded in the store (the wall clock
    /// stepped forward since the last renewal). Generation resumes after the
    /// next renewal records a later ceiling.
    PastCeiling {
        /// The value's timestamp, Unix ms.
        timestamp_unix_ms: u64,
        /// The ceiling, Unix ms.
        ceiling_unix_ms: u64,
    },
}

impl fmt::Display for GenerateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Closed => f.write_str(
                "no nonce generated: no lease is held (the lease gate is closed or its local \
                 deadline has passed); wait for the lease manager to acquire or renew a slot \
                 and retry",
            ),
            Self::SlotOutOfRange { slot, slot_bits } => write!(
                f,
                "no nonce generated: the lease's slot {slot} does not fit in the layout's \
                 {slot_bits} slot bits; make the pool at most {} slots or widen slot_bits",
                1u64 << slot_bits
            ),
            Self::Exhausted { timestamp_bits } => write!(
                f,
                "no nonce generated: the {timestamp_bits}-bit timestamp field has run out; \
                 choose a layout with a later epoch or more timestamp bits"
            ),
            Self::ClockBehind {
                behind,
                max_clock_skew,
            } => write!(
                f,
                "no nonce generated: this host's clock is {behind:?} behind the slot's floor \
                 (the highest timestamp a previous holder of the slot may have used), more than \
                 max_clock_skew ({max_clock_skew:?}); its IDs could repeat the previous holder's. \
                 Fix the clock synchronisation (NTP) or raise max_clock_skew; generation resumes \
                 once the clock passes the floor"
            ),
            Self::ClockStepped { ahead, settle } => write!(
                f,
                "no nonce generated: this host's wall clock stepped {ahead:?} ahead of the time \
                 this process keeps, and values are not stamped with a time in doubt (a step \
                 that is followed and then corrected would hold back the slot's next holder for \
                 as long). Check the clock synchronisation (NTP); generation resumes when the \
                 clock comes back, or once the step has lasted {settle:?}"
            ),
            Self::PastCeiling {
                timestamp_unix_ms,
                ceiling_unix_ms,
            } => write!(
                f,
                "no nonce generated: its timestamp ({timestamp_unix_ms} ms) is past the highest \
                 timestamp this lease has recorded in the store ({ceiling_unix_ms} ms), most \
                 likely after a forward step of the wall clock; generation resumes after the \
                 next renewal records a later one"
            ),
        }
    }
}

impl std::error::Error for GenerateError {}

/// Why [`try_next`](crate::Sortable::try_next) gave no value: it would
/// have had to wait, or generation is refused (as `next` refuses).
///
/// A wait is never a refusal: nothing is wrong, the value only carries a
/// timestamp real time has not reached yet. Try again after `retry_in`
/// (`next_async` does, with the `tokio` feature). A refusal is what `next`
/// answers too: a closed gate ([`GenerateError::Closed`]) is never a wait,
/// since only the lease manager can end it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TryNextError {
    /// The next value's timestamp is ahead of this host's clock: it is
    /// handed out once the clock gets there, about `retry_in` from now.
    /// Nothing was handed out and nothing is held for the caller.
    WouldWait {
        /// How long until the clock reaches the value's timestamp.
        retry_in: std::time::Duration,
        /// Why the value is ahead of the clock.
        why: WaitReason,
    },
    /// Generation is refused, exactly as `next` would refuse.
    Refused(GenerateError),
}

/// Why a value's timestamp is ahead of this host's clock (see
/// [`TryNextError::WouldWait`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitReason {
    /// The lease is new and this host's clock has not passed the slot's
    /// floor yet (the highest timestamp a previous holder of the slot may
    /// have used, DESIGN.md rule 8): at most the lease's `max_clock_skew`
    /// (further behind, generation refuses with
    /// [`GenerateError::ClockBehind`]).
    Floor,
    /// The values of the current millisecond are used up (or, for 64-bit
    /// counter nonces, the milliseconds saved up since the lease began):
    /// the next value carries a later millisecond. Under a millisecond.
    NextMillisecond,
}

impl TryNextError {
    /// How long to wait before trying again, when it is a wait.
    pub fn retry_in(&self) -> Option<std::time::Duration> {
        match self {
            Self::WouldWait { retry_in, .. } => Some(*retry_in),
            Self::Refused(_) => None,
        }
    }
}

impl From<GenerateError> for TryNextError {
    fn from(e: GenerateError) -> Self {
        Self::Refused(e)
    }
}

impl fmt::Display for TryNextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::WouldWait {
                retry_in,
                why: WaitReason::Floor,
            } => write!(
                f,
                "no nonce yet: this host's clock has not passed the slot's floor (the highest \
                 timestamp a previous holder may have used); try again in {retry_in:?} \
                 (next_async waits without blocking the thread)"
            ),
            Self::WouldWait {
                retry_in,
                why: WaitReason::NextMillisecond,
            } => write!(
                f,
                "no nonce yet: this millisecond's values are used up; try again in {retry_in:?} \
                 (next_async waits without blocking the thread)"
            ),
            Self::Refused(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for TryNextError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Refused(e) => Some(e),
            Self::WouldWait { .. } => None,
        }
    }
}

/// Why a generator could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// The layout is invalid (see [`LayoutError`]).
    Layout(LayoutError),
    /// The gate refused this generator: one of the same kind is in use
    /// already (clone it), one of another kind is (that kind needs a lease of
    /// its own), or earlier ones used another layout.
    Gate(leasehold_core::AttachError),
}

impl From<LayoutError> for BuildError {
    fn from(e: LayoutError) -> Self {
        Self::Layout(e)
    }
}

impl From<leasehold_core::AttachError> for BuildError {
    fn from(e: leasehold_core::AttachError) -> Self {
        Self::Gate(e)
    }
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Layout(e) => e.fmt(f),
            Self::Gate(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Layout(e) => Some(e),
            Self::Gate(e) => Some(e),
        }
    }
}

/// An invalid layout, found at construction. Names the field, the value and
/// what it should be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutError {
    /// The layout field at fault.
    pub field: &'static str,
    /// The value given.
    pub value: String,
    /// What is allowed.
    pub expected: String,
}

impl LayoutError {
    pub(crate) fn new(
        field: &'static str,
        value: impl fmt::Display,
        expected: impl Into<String>,
    ) -> Self {
        Self {
            field,
            value: value.to_string(),
            expected: expected.into(),
        }
    }
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid nonce layout: {} = {}; {}",
            self.field, self.value, self.expected
        )
    }
}

impl std::error::Error for LayoutError {}

/// Text that is not a nonce or UUID of the expected form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    what: &'static str,
    input: String,
    problem: &'static str,
}

impl ParseError {
    pub(crate) fn new(what: &'static str, input: &str, problem: &'static str) -> Self {
        let input = input.chars().take(64).collect();
        Self {
            what,
            input,
            problem,
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let forms = match self.what {
            "Nonce64" => "16 hex digits or 13 Crockford base32 characters",
            "Nonce96" => "24 hex digits or 20 Crockford base32 characters",
            "Nonce128" => "32 hex digits or 26 Crockford base32 characters",
            _ => "8-4-4-4-12 hex digits with version 7 and the RFC 9562 variant",
        };
        write!(
            f,
            "cannot parse {:?} as a {}: {}; expected {forms}",
            self.input, self.what, self.problem
        )
    }
}

impl std::error::Error for ParseError {}

/// [`Encrypted::fill`](crate::Encrypted::fill) stopped before the end of
/// its buffer: the first `filled` values are nonces that can be used, the
/// rest of the buffer is untouched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FillError {
    /// How many values at the start of the buffer were written.
    pub filled: usize,
    /// Why the next one was not generated.
    pub error: GenerateError,
}

impl fmt::Display for FillError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "filled {} nonces, then stopped: {}",
            self.filled, self.error
        )
    }
}

impl std::error::Error for FillError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}
