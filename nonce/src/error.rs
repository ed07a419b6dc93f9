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
        }
    }
}

impl std::error::Error for GenerateError {}

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
