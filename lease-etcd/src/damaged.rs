//! Floor keys a claim or renewal cannot trust: a value that is not 20
//! decimal digits (`keys::decode_floor`). The claim and renewal
//! transactions read the floor in the same step in which they raise it; a
//! raise compares bytes, so it can replace a damaged value that sorts below
//! the holder's ceiling (a sign, a shorter number). What is here puts such
//! a value back before the claim's lease is revoked or the renewal answers
//! `Lost`, so the damage stays for an operator to repair: replaced by a
//! ceiling, it would read as a valid floor that can be below the slot's real
//! one. And it says which slot, what it holds and how to repair it.
//!
//! A limit: a renewal transaction is sent again after a broken connection
//! (it is idempotent), and when its first send had landed, the second reads
//! the floor that send raised. A damaged value the first send replaced is
//! then not seen (a fault of the connection and a damaged floor at once).

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use leasehold_core::{Floor, PoolSpec};

use crate::error::Class;
use crate::keys;
use crate::strategy::EtcdStrategy;

/// At most this many characters of a damaged value are shown.
const SHOWN_CHARS: usize = 64;

/// `value` as text, quoted and cut to [`SHOWN_CHARS`] characters.
fn shown(value: &[u8]) -> String {
    let text = String::from_utf8_lossy(value);
    let cut: String = text.chars().take(SHOWN_CHARS).collect();
    if cut.len() < text.len() {
        format!("{cut:?}…")
    } else {
        format!("{cut:?}")
    }
}

/// What the damaged value `value` of the floor key `key` means.
pub(crate) fn floor_text(key: &str, value: &[u8]) -> String {
    format!(
        "its floor key {key} holds {}, not a floor (20 decimal digits of Unix milliseconds), so \
         what its earlier holders stamped is not known and could be issued again (DESIGN.md \
         rule 8)",
        shown(value)
    )
}

/// How to repair the damaged floor key `key` of a slot of `pool`.
pub(crate) fn floor_fix(key: &str, pool: &PoolSpec) -> String {
    let floor = Floor::above_every_holder(pool);
    format!(
        "etcdctl put {key} {} (this host's Unix time in ms plus the pool's TTL and twice its \
         max_clock_skew, as 20 digits: above anything a holder of the slot can have stamped)",
        keys::encode_floor(floor)
    )
}

impl EtcdStrategy {
    /// Puts the damaged value `old` back into the floor key `key` if the
    /// transaction that read it replaced it with `ceiling` (it did when the
    /// damaged value sorts below the ceiling's digits). Only the slot's
    /// holder writes its floor, and this holder still holds it, so nothing
    /// else has written the key since.
    pub(crate) async fn restore_floor(
        &self,
        key: &str,
        ceiling: Floor,
        old: &[u8],
    ) -> Result<(), Class> {
        let txn = Txn::new()
            .when([Compare::value(
                key,
                CompareOp::Equal,
                keys::encode_floor(ceiling),
            )])
            .and_then([TxnOp::put(key, old, None)]);
        self.call("Txn", |mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await
        .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damaged_values_are_shown_quoted_and_cut_on_a_char_boundary() {
        assert_eq!(shown(b"-5"), "\"-5\"");
        let long = "é".repeat(100);
        let text = shown(long.as_bytes());
        assert!(
            text.ends_with('…') && !text.contains(&"é".repeat(65)),
            "{text}"
        );
        assert!(shown(&[0xff, b'1']).contains('\u{fffd}'));
    }
}
