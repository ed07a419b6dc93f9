//! Object names, labels, holder identities and the floor annotation.

use leasehold_core::{AcquireError, PoolName, Token};

/// Label carrying the pool name.
pub const POOL_LABEL: &str = "leasehold/pool";
/// Label carrying the slot number.
pub const SLOT_LABEL: &str = "leasehold/slot";
/// Annotation carrying the slot's floor (Unix milliseconds).
pub const FLOOR_ANNOTATION: &str = "leasehold/floor";
/// JSON pointer of the floor annotation.
pub(crate) const FLOOR_POINTER: &str = "/metadata/annotations/leasehold~1floor";
/// Annotation carrying the fence of the slot's current (or last) holder, for
/// `inspect`: `<first 8 hex digits of its token> <fence>`. The fence is the
/// resourceVersion of the acquiring write, which later writes move on from,
/// so renewals, releases and revokes record it; nothing compares it.
pub const FENCE_ANNOTATION: &str = "leasehold/fence";
/// JSON pointer of the fence annotation.
pub(crate) const FENCE_POINTER: &str = "/metadata/annotations/leasehold~1fence";
/// Annotation of the pool's format record ([`format_name`]): the ID format
/// the pool's holders declared, its canonical text.
pub const FORMAT_ANNOTATION: &str = "leasehold/id-format";
/// Annotation of the pool's incarnation record ([`incarnation_name`]):
/// whether it was declared new or made with a wipe guard.
pub const INCARNATION_ANNOTATION: &str = "leasehold/incarnation";
/// Prefix of a revoked holder's tombstone in `holderIdentity`.
pub(crate) const TOMBSTONE: &str = "revoked/";

/// `leasehold-<pool>-<slot>`.
pub fn lease_name(pool: &PoolName, slot: u32) -> String {
    format!("leasehold-{pool}-{slot}")
}

/// `leasehold-<pool>-format`: a Lease that holds no slot (no slot label,
/// never held) and records the pool's ID format in an annotation. Slot
/// names end in digits, so no slot's Lease has this name.
pub fn format_name(pool: &PoolName) -> String {
    format!("leasehold-{pool}-format")
}

/// `leasehold-<pool>--incarnation`: the pool's incarnation record, a Lease
/// that holds no slot (no slot label, never held) and whose absence means
/// the pool's Leases may have been wiped (the wipe guard). Slot names end
/// in digits and the format record in `-format`, so no other object of any
/// pool has this name; and `-` sorts before digits, so a deletion in name
/// order takes it before the pool's slots.
pub fn incarnation_name(pool: &PoolName) -> String {
    format!("leasehold-{pool}--incarnation")
}

/// `<holder>_<token hex>`, matched as a whole string.
pub(crate) fn holder_identity(holder: &str, token: &Token) -> String {
    format!("{holder}_{}", token.to_hex())
}

/// A `holderIdentity` split into the holder and the first 8 hex digits of
/// its token (never more); `None` unless it ends in `_<32 hex digits>`.
pub(crate) fn split_identity(identity: &str) -> Option<(&str, &str)> {
    let (holder, token) = identity.rsplit_once('_')?;
    if token.len() != 32 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some((holder, token.get(..8)?))
}

/// The fence annotation's value for a holder with `token` and `fence`.
pub(crate) fn fence_record(token: &Token, fence: u64) -> String {
    format!("{} {fence}", &token.to_hex()[..8])
}

/// Checks that `pool` makes valid Lease names and label values: lowercase
/// letters, digits, '-' and '.', starting and ending with a letter or digit,
/// at most 63 characters.
pub(crate) fn check_pool(pool: &PoolName) -> Result<(), AcquireError> {
    let name = pool.as_str();
    let b = name.as_bytes();
    let ok = b.len() <= 63
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && is_dns1123_subdomain(&lease_name(pool, 0));
    if ok {
        Ok(())
    } else {
        Err(AcquireError::BadIdentifier {
            what: format!(
                "pool name {name:?} cannot name Kubernetes Leases (leasehold-{name}-<slot> must be \
                 a DNS-1123 subdomain and {name:?} a label value)"
            ),
            fix: "use 1 to 63 lowercase letters, digits, '-' or '.', starting and ending with a \
                  letter or digit (no '_', no capitals, no '.-')"
                .to_owned(),
        })
    }
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`, at most
/// 253 characters.
pub(crate) fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_names() {
        let ok = |s: &str| check_pool(&PoolName::new(s).unwrap()).is_ok();
        assert!(ok("ids"));
        assert!(ok("machine-ids.v2"));
        assert!(!ok("Ids"));
        assert!(!ok("my_ids"));
        assert!(!ok("-ids"));
        assert!(!ok("ids-"));
        assert!(!ok("a.-b"));
        assert!(!ok(&"a".repeat(64)));
        assert!(ok(&"a".repeat(63)));
        let e = check_pool(&PoolName::new("My_Ids").unwrap()).unwrap_err();
        assert!(!e.is_retryable());
        assert!(e.to_string().contains("lowercase"), "{e}");
    }

    /// A holder identity is whatever the Lease holds: split where its `_`
    /// is, and cut to 8 digits only when the rest is 32 hex digits, never
    /// at a byte count of anything else.
    #[test]
    fn identities_are_split_whatever_their_characters() {
        let token = "0123456789abcdef0123456789abcdef";
        assert_eq!(
            split_identity(&format!("hôte/1_{token}")),
            Some(("hôte/1", "01234567"))
        );
        for identity in [
            "é",
            "hôte_é",
            "hôte_ééééééééééééééééééééééééééééé",
            "x_0123456é89abcdef0123456789abcde",
        ] {
            assert_eq!(split_identity(identity), None, "{identity}");
        }
    }
}
