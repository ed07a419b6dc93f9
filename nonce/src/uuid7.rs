//! The 128-bit sortable nonce as an RFC 9562 version-7 UUID.
//!
//! Bits, most significant first: 48 bits of UNIX milliseconds (the nonce's
//! timestamp plus the layout's epoch), version `0111`, then 12 + 62 bits
//! around the variant `10` that carry the slot (at the top) and the sequence
//! (at the bottom). Time-ordered like the nonce, and unique because the
//! nonce is: nothing random.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::ParseError;
use crate::layout::{Layout, low_mask};
use crate::nonce::Nonce128;

/// Bits carrying the slot and the sequence: 12 (`rand_a`) + 62 (`rand_b`).
const PAYLOAD_BITS: u32 = 74;

/// An RFC 9562 version-7 UUID made from a 128-bit sortable nonce.
/// `Display`/`FromStr` use the 8-4-4-4-12 hex form; [`Uuid7::to_bytes`] gives
/// the 16 bytes a `uuid` column (or `uuid::Uuid::from_bytes`) takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Uuid7(u128);

impl Uuid7 {
    /// From a plain sortable nonce's value; the sequence must fit the payload
    /// next to the slot (always true for [`Sortable128`](crate::Sortable128)).
    ///
    /// The same as [`Uuid7::from_parts`] on the decoded fields, on 64-bit
    /// words, for a sortable generator's own values only: their sequence is
    /// below 2^21 and their slot below 2^32, so no field needs 128-bit
    /// shifts (`next_uuid7`'s hot path). A counter of 62 bits or more would
    /// lose its high bits here: [`Uuid7::from_nonce`] takes any nonce and
    /// uses [`Uuid7::from_parts`].
    #[inline]
    pub(crate) fn from_sortable(layout: &Layout, plain: u128) -> Self {
        let (cb, sb) = (layout.counter_bits(), layout.slot_bits());
        let millis = (plain >> (cb + sb)) as u64;
        let slot = ((plain >> cb) as u64) & ((1u64 << sb) - 1);
        let seq = (plain as u64) & ((1u64 << cb.min(63)) - 1);
        let unix_ms = layout.epoch_unix_ms().wrapping_add(millis) & ((1 << 48) - 1);
        let seq_bits = PAYLOAD_BITS - sb;
        // payload = slot << seq_bits | seq (74 bits): its top 12 bits are
        // rand_a, its low 62 rand_b.
        let (rand_a, rand_b) = if seq_bits >= 62 {
            (slot << (seq_bits - 62), seq & ((1 << 62) - 1))
        } else {
            (
                slot >> (62 - seq_bits),
                (slot.wrapping_shl(seq_bits) | seq) & ((1 << 62) - 1),
            )
        };
        let hi = (unix_ms << 16) | (0x7 << 12) | rand_a;
        let lo = (0b10 << 62) | rand_b;
        Self((u128::from(hi) << 64) | u128::from(lo))
    }

    /// From the fields of a sortable nonce.
    #[inline]
    pub(crate) fn from_parts(layout: &Layout, millis: u64, slot: u64, counter: u128) -> Self {
        let unix_ms = u128::from(layout.epoch_unix_ms() + millis) & low_mask(48);
        let seq_bits = PAYLOAD_BITS - layout.slot_bits();
        let payload = (u128::from(slot) << seq_bits) | (counter & low_mask(seq_bits));
        let rand_a = payload >> 62;
        let rand_b = payload & low_mask(62);
        Self((unix_ms << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b)
    }

    /// The UUID of a 128-bit sortable nonce made with `layout`, or `None` when
    /// its counter does not fit in the UUID next to the slot.
    pub fn from_nonce(layout: &Layout, nonce: Nonce128) -> Option<Self> {
        let parts = layout.decode(nonce.0);
        // Any counter that fits, not only a sortable generator's (below
        // 2^21): the field-by-field form.
        (layout.bits() == 128 && parts.counter >> (PAYLOAD_BITS - layout.slot_bits()) == 0)
            .then(|| Self::from_parts(layout, parts.millis, u64::from(parts.slot), parts.counter))
    }

    /// The nonce back, given the layout it was made with.
    pub fn to_nonce(self, layout: &Layout) -> Nonce128 {
        let millis = self.unix_millis().saturating_sub(layout.epoch_unix_ms());
        let payload = self.payload();
        let seq_bits = PAYLOAD_BITS - layout.slot_bits();
        let slot = (payload >> seq_bits) as u64;
        Nonce128(layout.compose(millis, slot, payload & low_mask(seq_bits)))
    }

    fn payload(self) -> u128 {
        (((self.0 >> 64) & 0xfff) << 62) | (self.0 & low_mask(62))
    }

    /// The 48-bit UNIX millisecond timestamp.
    pub fn unix_millis(self) -> u64 {
        (self.0 >> 80) as u64
    }

    /// The timestamp as a time.
    pub fn time(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.unix_millis())
    }

    /// The slot that made it, given the layout.
    pub fn slot(self, layout: &Layout) -> u32 {
        (self.payload() >> (PAYLOAD_BITS - layout.slot_bits())) as u32
    }

    /// The 16 bytes, big-endian (RFC 9562 byte order).
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    /// From 16 bytes, or `None` when the version is not 7 or the variant not RFC 9562.
    pub fn from_bytes(bytes: [u8; 16]) -> Option<Self> {
        let v = u128::from_be_bytes(bytes);
        ((v >> 76) & 0xf == 7 && (v >> 62) & 0b11 == 0b10).then_some(Self(v))
    }

    /// The value as a `u128`.
    pub fn to_u128(self) -> u128 {
        self.0
    }
}

impl fmt::Display for Uuid7 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        write!(
            f,
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            (v >> 96) as u32,
            (v >> 80) as u16,
            (v >> 64) as u16,
            (v >> 48) as u16,
            (v as u64) & 0xffff_ffff_ffff
        )
    }
}

impl FromStr for Uuid7 {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        let b = s.as_bytes();
        if b.len() != 36 || [8, 13, 18, 23].iter().any(|&i| b[i] != b'-') {
            return Err(ParseError::new("Uuid7", s, "not the 8-4-4-4-12 form"));
        }
        let mut v = 0u128;
        for (i, &c) in b.iter().enumerate() {
            if matches!(i, 8 | 13 | 18 | 23) {
                continue;
            }
            let d = (c as char).to_digit(16).ok_or(ParseError::new(
                "Uuid7",
                s,
                "a character that is not a hex digit",
            ))?;
            v = (v << 4) | u128::from(d);
        }
        Self::from_bytes(v.to_be_bytes()).ok_or(ParseError::new(
            "Uuid7",
            s,
            "not version 7 with the RFC 9562 variant",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 64-bit `from_sortable` gives what `from_parts` gives on the
    /// decoded fields, for every slot width a 128-bit sortable layout can
    /// have and sequences up to 2^21.
    #[test]
    fn from_sortable_matches_from_parts() {
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut widths = 0;
        for sb in 1..=32u32 {
            // Slot widths the builder refuses are not tested.
            let Ok(layout) = Layout::builder(128).slot_bits(sb).build() else {
                continue;
            };
            widths += 1;
            for _ in 0..2_000 {
                let millis = next() % (1 << 41);
                let slot = next() & ((1 << sb) - 1);
                let seq = u128::from(next() % (1 << 21));
                let plain = layout.compose(millis, slot, seq);
                assert_eq!(
                    Uuid7::from_sortable(&layout, plain),
                    Uuid7::from_parts(&layout, millis, slot, seq),
                    "slot bits {sb}, millis {millis}, slot {slot}, seq {seq}"
                );
            }
        }
        assert!(widths >= 16, "only {widths} slot widths tested");
    }

    /// `from_nonce` takes any 128-bit nonce whose counter fits next to the
    /// slot, also counters far above a sortable generator's 2^21: two
    /// nonces that differ only in high counter bits give two UUIDs, and
    /// each gives its nonce back.
    #[test]
    fn from_nonce_keeps_high_counter_bits() {
        let layout = Layout::builder(128).slot_bits(4).build().unwrap();
        let seq_bits = PAYLOAD_BITS - 4;
        for high in [62u32, 63, 64, 65, seq_bits - 1] {
            let a = layout.compose(1_000, 3, 5);
            let b = layout.compose(1_000, 3, 5 | (1u128 << high));
            let (ua, ub) = (
                Uuid7::from_nonce(&layout, Nonce128(a)).unwrap(),
                Uuid7::from_nonce(&layout, Nonce128(b)).unwrap(),
            );
            assert_ne!(ua, ub, "counter bit {high} lost");
            assert_eq!(ua.to_nonce(&layout), Nonce128(a));
            assert_eq!(ub.to_nonce(&layout), Nonce128(b));
        }
    }
}
