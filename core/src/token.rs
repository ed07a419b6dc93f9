//! Ownership tokens.

use std::fmt;

/// A 128-bit ownership token drawn from the operating system's random source.
///
/// Renew and release match on the token, so a retried renewal is idempotent and
/// nobody can release a slot they do not hold.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token([u8; 16]);

impl Token {
    /// A fresh random token.
    pub fn random() -> Self {
        Self(crate::rand::os_random_128().to_le_bytes())
    }

    /// A token from its 16 bytes (as read back from a store).
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }

    /// The 16 bytes.
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// Lower-case hex, 32 characters.
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(32);
        for b in self.0 {
            s.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
            s.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
        }
        s
    }

    /// Parses 32 hex characters.
    pub fn from_hex(s: &str) -> Option<Self> {
        let s = s.as_bytes();
        if s.len() != 32 {
            return None;
        }
        let mut out = [0u8; 16];
        for (i, pair) in s.chunks_exact(2).enumerate() {
            let hi = (pair[0] as char).to_digit(16)?;
            let lo = (pair[1] as char).to_digit(16)?;
            out[i] = u8::try_from(hi * 16 + lo).ok()?;
        }
        Some(Self(out))
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Token {
    /// Only a prefix: enough to tell tokens apart in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({}…)", &self.to_hex()[..8])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_distinct() {
        let a = Token::random();
        let b = Token::random();
        assert_ne!(a, b);
        assert_eq!(Token::from_hex(&a.to_hex()), Some(a));
        assert_eq!(Token::from_hex("zz"), None);
    }
}
