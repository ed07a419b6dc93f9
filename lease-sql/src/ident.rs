//! Validated SQL identifiers: the lease table's name is never interpolated
//! unchecked.

use std::fmt;

use leasehold_core::ConfigError;

/// The default lease table.
pub const DEFAULT_TABLE: &str = "leasehold_leases";

/// A validated table name: 1 to 63 characters of `a-z 0-9 _`, starting with a
/// letter or `_`. Lower case only, so PostgreSQL's case folding, MySQL's
/// file-system-dependent case rules and SQLite agree on the name; it is quoted
/// anyway in every statement, so reserved words are fine too.
///
/// ```
/// use leasehold_sql::TableName;
/// assert!(TableName::new("leasehold_leases").is_ok());
/// assert!(TableName::new("leases; DROP TABLE users").is_err());
/// assert!(TableName::new("Leases").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TableName(String);

impl TableName {
    /// Validates `name`; the error says what is accepted.
    pub fn new(name: impl Into<String>) -> Result<Self, ConfigError> {
        let name = name.into();
        let mut bytes = name.bytes();
        let first_ok = bytes
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'_');
        let rest_ok = bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if first_ok && rest_ok && name.len() <= 63 {
            Ok(Self(name))
        } else {
            Err(ConfigError::new(
                "table",
                format!("{name:?}"),
                "1 to 63 characters of a-z, 0-9 and '_', starting with a letter or '_' \
                 (for example \"leasehold_leases\")",
            ))
        }
    }

    /// The name, unquoted.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name between `quote`s (safe: the alphabet needs no escaping).
    pub(crate) fn quoted(&self, quote: char) -> String {
        format!("{quote}{}{quote}", self.0)
    }
}

impl Default for TableName {
    fn default() -> Self {
        Self(DEFAULT_TABLE.to_owned())
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TableName({:?})", self.0)
    }
}

/// Lower-case hex of `bytes`, for literals in statements sent as plain text.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["a", "_x", "leasehold_leases", "t1", &"a".repeat(63)] {
            assert!(TableName::new(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "1a",
            "A",
            "a-b",
            "a b",
            "a\"b",
            "a`b",
            "a;b",
            &"a".repeat(64),
        ] {
            let e = TableName::new(bad).unwrap_err();
            assert_eq!(e.field(), "table");
            assert!(e.to_string().contains("a-z"), "{e}");
        }
        assert_eq!(TableName::default().quoted('`'), "`leasehold_leases`");
        assert_eq!(hex(&[0, 0xab, 0x10]), "00ab10");
    }
}
