//! Key layout, stored values, lease ids, candidate choice.
//!
//! A pool's keys, under `<prefix>/<pool>/`:
//! - `<slot>` (decimal): the slot key, attached to the holder's etcd lease,
//!   value `<token hex> <holder>` (or [`TOMBSTONE`] after a revoke);
//! - `~floor/<slot>`: the slot's hand-over floor, on no lease (it outlives
//!   every holder), value the Unix milliseconds as 20 zero-padded decimal
//!   digits so that etcd's byte-wise value comparison orders floors
//!   numerically. Pool names cannot contain `~` or `/`, so no slot key of any
//!   prefix and pool is ever a floor key; and `~` sorts after every digit, so
//!   the slot range [`slot_range_end`] never includes floor keys;
//! - `~format`: the ID format the pool's holders declared (its canonical
//!   text), on no lease, written by the first claim that declares one;
//! - `~incarnation`: on no lease, made by `prepare` (or by the first claim
//!   that finds it missing): while it exists, the pool's records were not
//!   wiped since. Every claim checks it inside its own transaction;
//! - `~guard`: on an etcd lease whose TTL is the wait a claim set when it
//!   found `~incarnation` missing; no slot is granted while it exists.

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use leasehold_core::{Fence, Floor, PoolName, PoolSpec, Token};

/// The value a revoke leaves in a slot key: on the revoked holder's etcd
/// lease, so the slot stays taken until that lease expires. It carries no
/// token, so no holder's ownership compare matches it.
pub(crate) const TOMBSTONE: &str = "revoked";

/// `<prefix>/<pool>/` — the range holding a pool's slot keys.
pub(crate) fn pool_prefix(prefix: &str, pool: &PoolName) -> String {
    format!("{prefix}/{pool}/")
}

/// The end (exclusive) of the range of slot keys under `pool_prefix`: slot
/// keys are decimal, and `:` is the byte after `9`. Floor keys (`~floor/…`)
/// sort after it.
pub(crate) fn slot_range_end(pool_prefix: &str) -> String {
    format!("{pool_prefix}:")
}

/// `<prefix>/<pool>/<slot>`.
pub(crate) fn slot_key(prefix: &str, pool: &PoolName, slot: u32) -> String {
    format!("{prefix}/{pool}/{slot}")
}

/// `<prefix>/<pool>/~floor/<slot>`: the slot's floor, on no lease.
pub(crate) fn floor_key(prefix: &str, pool: &PoolName, slot: u32) -> String {
    format!("{prefix}/{pool}/~floor/{slot}")
}

/// `<prefix>/<pool>/~format`: the ID format the pool's holders generate,
/// on no lease, written once by the first claim that declares one.
pub(crate) fn format_key(prefix: &str, pool: &PoolName) -> String {
    format!("{prefix}/{pool}/~format")
}

/// `<prefix>/<pool>/~incarnation`: there while the pool's records are,
/// on no lease. A wipe of the prefix (or a restore of a snapshot taken
/// before it was made) takes it away with the slot and floor keys.
pub(crate) fn incarnation_key(prefix: &str, pool: &PoolName) -> String {
    format!("{prefix}/{pool}/~incarnation")
}

/// `<prefix>/<pool>/~guard`: on an etcd lease that ends when claims may go
/// on after the pool's records were found gone.
pub(crate) fn guard_key(prefix: &str, pool: &PoolName) -> String {
    format!("{prefix}/{pool}/~guard")
}

/// A floor as stored: 20 zero-padded decimal digits (`u64::MAX` has 20), so
/// byte-wise order is numeric order.
pub(crate) fn encode_floor(floor: Floor) -> String {
    format!("{:020}", floor.0)
}

/// A stored floor; `None` unless it is 20 decimal digits.
pub(crate) fn decode_floor(value: &[u8]) -> Option<Floor> {
    if value.len() != 20 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok().map(Floor)
}

/// A transaction op that raises the floor key to `floor` unless it already
/// holds more: `if value(key) > floor then nothing else put(key, floor)`. A
/// missing key fails every value compare, so it is written too. The put has
/// no lease: the floor outlives the holder.
pub(crate) fn raise_floor(floor_key: &str, floor: Floor) -> TxnOp {
    let value = encode_floor(floor);
    TxnOp::txn(
        Txn::new()
            .when([Compare::value(floor_key, CompareOp::Greater, value.clone())])
            .or_else([TxnOp::put(floor_key, value, None)]),
    )
}

/// Compares that hold only while `key` is still the grant's: the create
/// revision (the fence), the etcd lease, and a value that starts with the
/// token (`<token hex>` < value < `<token hex>` 0xFF, which no tombstone and
/// no other token's value falls between).
pub(crate) fn owned(key: &str, fence: i64, lease_id: i64, token: &Token) -> [Compare; 4] {
    let low = token.to_hex().into_bytes();
    let mut high = low.clone();
    high.push(0xFF);
    [
        Compare::create_revision(key, CompareOp::Equal, fence),
        Compare::lease(key, CompareOp::Equal, lease_id),
        Compare::value(key, CompareOp::Greater, low),
        Compare::value(key, CompareOp::Less, high),
    ]
}

/// The slot of a key under `pool_prefix`, if it is one.
pub(crate) fn slot_of(pool_prefix: &str, key: &[u8]) -> Option<u32> {
    let rest = key.strip_prefix(pool_prefix.as_bytes())?;
    std::str::from_utf8(rest).ok()?.parse().ok()
}

/// The value stored under a slot key: the token in hex, then the holder, for
/// people inspecting the store.
pub(crate) fn value(token: &Token, pool: &PoolSpec) -> String {
    format!("{} {}", token.to_hex(), pool.holder())
}

/// The etcd lease id of a grant: the token's first 8 bytes as a positive
/// `i64`. The id is chosen by the client (etcd accepts that in `LeaseGrant`),
/// so renew and release need nothing but the grant. `None` for the (2^-63)
/// tokens that would give id 0, which etcd reserves.
pub(crate) fn lease_id(token: &Token) -> Option<i64> {
    let mut b = [0u8; 8];
    b.copy_from_slice(&token.as_bytes()[..8]);
    let id = i64::from_le_bytes(b) & i64::MAX;
    (id != 0).then_some(id)
}

/// The generator that picks candidate slots (no cryptographic need: only
/// spreading acquirers apart), seeded from the OS random source.
pub(crate) type Rng = leasehold_core::rand::SplitMix;

/// Up to `k` distinct slots to try, in random order: from `free` when the
/// pool's occupancy is known, else from the whole pool `0..size`.
pub(crate) fn candidates(rng: &mut Rng, size: u32, free: Option<&[u32]>, k: u32) -> Vec<u32> {
    let k = k as usize;
    let mut pool: Vec<u32> = match free {
        Some(free) => free.to_vec(),
        None if size as usize <= 4 * k => (0..size).collect(),
        None => {
            // A large pool: rejection-sample k distinct slots.
            let mut picked = Vec::with_capacity(k);
            while picked.len() < k {
                let s = rng.below(u64::from(size)) as u32;
                if !picked.contains(&s) {
                    picked.push(s);
                }
            }
            return picked;
        }
    };
    let take = k.min(pool.len());
    for i in 0..take {
        let j = i + rng.below((pool.len() - i) as u64) as usize;
        pool.swap(i, j);
    }
    pool.truncate(take);
    pool
}

/// A revision as a fence: `None` unless it is positive (every key's create
/// revision is) and below `i64::MAX`, the largest etcd's revisions reach: a
/// fence there could not be followed by a bigger one.
pub(crate) fn fence_of(revision: i64) -> Option<Fence> {
    (revision > 0 && revision < i64::MAX)
        .then(|| u64::try_from(revision).ok())
        .flatten()
        .map(Fence)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn candidates_are_distinct_and_in_range() {
        let mut rng = Rng::from_os();
        for size in [1, 3, 16, 64, 65, 512, 100_000] {
            let c = candidates(&mut rng, size, None, 16);
            assert_eq!(c.len(), (size as usize).min(16));
            assert!(c.iter().all(|&s| s < size));
            assert_eq!(c.iter().collect::<HashSet<_>>().len(), c.len());
        }
        let free = [3, 9, 11];
        let c = candidates(&mut rng, 512, Some(&free), 16);
        assert_eq!(c.iter().collect::<HashSet<_>>(), free.iter().collect());
    }

    #[test]
    fn keys_round_trip() {
        let pool = PoolName::new("ids").unwrap();
        let prefix = pool_prefix("lh", &pool);
        assert_eq!(prefix, "lh/ids/");
        assert_eq!(slot_key("lh", &pool, 42), "lh/ids/42");
        assert_eq!(slot_of(&prefix, b"lh/ids/42"), Some(42));
        assert_eq!(slot_of(&prefix, b"lh/idsx/42"), None);
        assert_eq!(slot_of(&prefix, b"lh/ids/x"), None);
        let floor = floor_key("lh", &pool, 42);
        assert_eq!(floor, "lh/ids/~floor/42");
        assert_eq!(slot_of(&prefix, floor.as_bytes()), None);
        // Slot keys fall in the slot range, floor keys after it.
        let end = slot_range_end(&prefix);
        for slot in [0, 9, 42, 16_383] {
            let key = slot_key("lh", &pool, slot);
            assert!(key.as_str() >= prefix.as_str() && key < end, "{key}");
        }
        assert!(floor >= end);
        for key in [incarnation_key("lh", &pool), guard_key("lh", &pool)] {
            assert!(key >= end, "{key}");
            assert_eq!(slot_of(&prefix, key.as_bytes()), None);
        }
    }

    #[test]
    fn stored_floors_order_like_numbers() {
        let values = [0, 1, 9, 10, 999, 1_000, 1_764_000_000_000, u64::MAX];
        for pair in values.windows(2) {
            let (a, b) = (encode_floor(Floor(pair[0])), encode_floor(Floor(pair[1])));
            assert_eq!(a.len(), 20);
            assert!(a.as_bytes() < b.as_bytes(), "{a} vs {b}");
        }
        for v in values {
            assert_eq!(
                decode_floor(encode_floor(Floor(v)).as_bytes()),
                Some(Floor(v))
            );
        }
        assert_eq!(decode_floor(b"123"), None);
        assert_eq!(decode_floor(b"0000000000000000012x"), None);
        assert_eq!(decode_floor(TOMBSTONE.as_bytes()), None);
    }

    #[test]
    fn the_token_range_holds_our_values_only() {
        let pool = PoolSpec::new(
            PoolName::new("ids").unwrap(),
            4,
            std::time::Duration::from_secs(10),
        )
        .unwrap();
        let token = Token::random();
        let low = token.to_hex().into_bytes();
        let mut high = low.clone();
        high.push(0xFF);
        let inside = |v: &[u8]| v > low.as_slice() && v < high.as_slice();
        assert!(inside(value(&token, &pool).as_bytes()));
        assert!(inside(
            value(&token, &pool.clone().with_holder("")).as_bytes()
        ));
        assert!(!inside(TOMBSTONE.as_bytes()));
        assert!(!inside(value(&Token::random(), &pool).as_bytes()));
        assert!(!inside(b""));
    }

    /// A revision is a fence only where a bigger one can follow it: never
    /// 0 or negative (read as 0 it would repeat), never `i64::MAX`.
    #[test]
    fn revisions_are_fences_only_where_a_bigger_one_can_follow() {
        assert_eq!(fence_of(1), Some(Fence(1)));
        assert_eq!(fence_of(i64::MAX - 1), Some(Fence(i64::MAX as u64 - 1)));
        for revision in [0, -1, i64::MIN, i64::MAX] {
            assert_eq!(fence_of(revision), None, "{revision}");
        }
    }

    #[test]
    fn lease_id_is_positive_and_follows_the_token() {
        let t = Token::random();
        let id = lease_id(&t).unwrap();
        assert!(id > 0);
        assert_eq!(lease_id(&t), Some(id));
        assert_eq!(lease_id(&Token::from_bytes([0; 16])), None);
    }
}
