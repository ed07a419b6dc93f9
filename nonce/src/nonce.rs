//! The nonce value types and their text forms: fixed-width lowercase hex
//! (`Display`) and Crockford base32 ([`Base32`]), both parsed by `FromStr`.
//! Both forms have a fixed width per size, so they sort like the numbers.

use std::fmt;
use std::str::FromStr;

use crate::error::ParseError;

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// A 64-bit nonce. `Display` is 16 hex digits; [`Nonce64::base32`] gives 13 characters.
///
/// ```
/// use leasehold_nonce::Nonce64;
/// let n = Nonce64(0x0123_4567_89ab_cdef);
/// assert_eq!(n.to_string(), "0123456789abcdef");
/// assert_eq!(n.base32().to_string(), "028T5CY4TQKFF");
/// assert_eq!("0123456789abcdef".parse::<Nonce64>().unwrap(), n);
/// assert_eq!("028T5CY4TQKFF".parse::<Nonce64>().unwrap(), n);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Nonce64(pub u64);

/// A 96-bit nonce (held in the low 96 bits of a `u128`). `Display` is 24 hex
/// digits; [`Nonce96::base32`] gives 20 characters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Nonce96(u128);

/// A 128-bit nonce. `Display` is 32 hex digits; [`Nonce128::base32`] gives 26
/// characters (the ULID alphabet and width).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Nonce128(pub u128);

impl Nonce96 {
    /// The largest value.
    pub const MAX: Self = Self((1u128 << 96) - 1);

    /// From a `u128`, or `None` when it has bits above the 96th.
    pub const fn new(value: u128) -> Option<Self> {
        if value >> 96 == 0 {
            Some(Self(value))
        } else {
            None
        }
    }

    /// The value as a `u128` (the top 32 bits are zero).
    pub const fn to_u128(self) -> u128 {
        self.0
    }

    pub(crate) const fn from_u128_truncate(value: u128) -> Self {
        Self(value & Self::MAX.0)
    }

    /// Big-endian bytes.
    pub fn to_bytes(self) -> [u8; 12] {
        let b = self.0.to_be_bytes();
        let mut out = [0; 12];
        out.copy_from_slice(&b[4..]);
        out
    }

    /// From big-endian bytes.
    pub fn from_bytes(bytes: [u8; 12]) -> Self {
        let mut b = [0; 16];
        b[4..].copy_from_slice(&bytes);
        Self(u128::from_be_bytes(b))
    }
}

impl Nonce64 {
    /// The value as an `i64` (a SQL `BIGINT` column), or `None` when its top
    /// bit is set: the value does not fit, and `as i64` would make it
    /// negative, sorting before every smaller one. Plain IDs of the default
    /// layout fit until 2094-09-07 ([`Layout::i64_until`](crate::Layout::i64_until)
    /// says when for any layout); encrypted ones often do not.
    ///
    /// ```
    /// use leasehold_nonce::Nonce64;
    /// assert_eq!(Nonce64(42).to_i64(), Some(42));
    /// assert_eq!(Nonce64(1 << 63).to_i64(), None);
    /// assert_eq!(Nonce64::try_from(42_i64), Ok(Nonce64(42)));
    /// assert!(Nonce64::try_from(-1_i64).is_err());
    /// ```
    pub fn to_i64(self) -> Option<i64> {
        i64::try_from(self.0).ok()
    }

    /// Big-endian bytes.
    pub fn to_bytes(self) -> [u8; 8] {
        self.0.to_be_bytes()
    }

    /// From big-endian bytes.
    pub fn from_bytes(bytes: [u8; 8]) -> Self {
        Self(u64::from_be_bytes(bytes))
    }
}

impl Nonce128 {
    /// Big-endian bytes.
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    /// From big-endian bytes.
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(u128::from_be_bytes(bytes))
    }
}

/// The Crockford base32 form of a nonce: fixed width, upper case, sorts like
/// the number. Made by `base32()` on a nonce; it formats without allocating.
#[derive(Clone, Copy, Debug)]
pub struct Base32 {
    value: u128,
    bits: u32,
}

impl fmt::Display for Base32 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let chars = self.bits.div_ceil(5) as usize;
        let mut buf = [0u8; 26];
        let mut v = self.value;
        for slot in buf[..chars].iter_mut().rev() {
            *slot = CROCKFORD[(v & 31) as usize];
            v >>= 5;
        }
        // The alphabet is ASCII, so this cannot fail.
        f.write_str(std::str::from_utf8(&buf[..chars]).map_err(|_| fmt::Error)?)
    }
}

fn base32_digit(c: u8) -> Option<u128> {
    let c = c.to_ascii_uppercase();
    let d = match c {
        b'O' => 0,
        b'I' | b'L' => 1,
        _ => CROCKFORD.iter().position(|&a| a == c)?,
    };
    Some(d as u128)
}

/// Parses `bits / 4` hex digits or `ceil(bits / 5)` base32 characters.
pub(crate) fn parse_text(s: &str, bits: u32, what: &'static str) -> Result<u128, ParseError> {
    let hex_len = (bits / 4) as usize;
    let b32_len = bits.div_ceil(5) as usize;
    let bytes = s.as_bytes();
    if bytes.len() == hex_len {
        let mut v = 0u128;
        for &c in bytes {
            let d = (c as char).to_digit(16).ok_or(ParseError::new(
                what,
                s,
                "a character that is not a hex digit",
            ))?;
            v = (v << 4) | u128::from(d);
        }
        Ok(v)
    } else if bytes.len() == b32_len {
        let too_large = || ParseError::new(what, s, "a value too large for the width");
        if bits == 128 && base32_digit(bytes[0]).is_some_and(|d| d > 7) {
            return Err(too_large());
        }
        let mut v = 0u128;
        for &c in bytes {
            let d = base32_digit(c).ok_or(ParseError::new(
                what,
                s,
                "a character outside the Crockford base32 alphabet",
            ))?;
            v = (v << 5) | d;
        }
        if bits < 128 && v >> bits != 0 {
            return Err(too_large());
        }
        Ok(v)
    } else {
        Err(ParseError::new(what, s, "the wrong length"))
    }
}

macro_rules! text_forms {
    ($t:ident, $bits:expr, $hex:expr, $get:expr, $make:expr) => {
        impl $t {
            /// The Crockford base32 form.
            pub fn base32(self) -> Base32 {
                Base32 {
                    value: $get(self),
                    bits: $bits,
                }
            }
        }

        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:0width$x}", $get(*self), width = $hex)
            }
        }

        impl FromStr for $t {
            type Err = ParseError;
            /// Hex (as `Display` writes it) or Crockford base32 (as `base32()` writes it).
            fn from_str(s: &str) -> Result<Self, ParseError> {
                parse_text(s, $bits, stringify!($t)).map($make)
            }
        }
    };
}

text_forms!(Nonce64, 64, 16, |n: Nonce64| u128::from(n.0), |v| Nonce64(
    v as u64
));
text_forms!(Nonce96, 96, 24, |n: Nonce96| n.0, Nonce96);
text_forms!(Nonce128, 128, 32, |n: Nonce128| n.0, Nonce128);

impl TryFrom<Nonce64> for i64 {
    type Error = std::num::TryFromIntError;

    /// Refuses a value with its top bit set (see [`Nonce64::to_i64`]).
    fn try_from(nonce: Nonce64) -> Result<Self, Self::Error> {
        i64::try_from(nonce.0)
    }
}

impl TryFrom<i64> for Nonce64 {
    type Error = std::num::TryFromIntError;

    /// A value read back from a signed column; refuses a negative one.
    fn try_from(value: i64) -> Result<Self, Self::Error> {
        u64::try_from(value).map(Self)
    }
}

impl From<Nonce64> for u128 {
    fn from(n: Nonce64) -> u128 {
        u128::from(n.0)
    }
}

impl From<Nonce96> for u128 {
    fn from(n: Nonce96) -> u128 {
        n.0
    }
}

impl From<Nonce128> for u128 {
    fn from(n: Nonce128) -> u128 {
        n.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_widths_and_errors() {
        let n = Nonce96::MAX;
        assert_eq!(n.to_string().len(), 24);
        assert_eq!(n.base32().to_string().len(), 20);
        assert_eq!(n.base32().to_string().parse::<Nonce96>().unwrap(), n);
        assert_eq!(Nonce128(u128::MAX).base32().to_string().len(), 26);
        assert!("8ZZZZZZZZZZZZZZZZZZZZZZZZZ".parse::<Nonce128>().is_err());
        let e = "xyz".parse::<Nonce64>().unwrap_err().to_string();
        assert!(e.contains("Nonce64") && e.contains("16 hex digits"), "{e}");
        assert!("0123456789abcdeg".parse::<Nonce64>().is_err());
    }
}
