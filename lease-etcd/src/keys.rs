//! Key layout, stored value, lease ids, candidate choice.

use leasehold_core::{PoolName, PoolSpec, Token};

/// `<prefix>/<pool>/` — the range holding a pool's slot keys.
pub(crate) fn pool_prefix(prefix: &str, pool: &PoolName) -> String {
    format!("{prefix}/{pool}/")
}

/// `<prefix>/<pool>/<slot>`.
pub(crate) fn slot_key(prefix: &str, pool: &PoolName, slot: u32) -> String {
    format!("{prefix}/{pool}/{slot}")
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

/// True when a stored value carries `token`.
pub(crate) fn value_has_token(value: &[u8], token: &Token) -> bool {
    value.starts_with(token.to_hex().as_bytes())
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

/// A small xorshift generator seeded from the OS random source, for picking
/// candidate slots (no cryptographic need: only spreading acquirers apart).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new() -> Self {
        let b = Token::random();
        let mut s = [0u8; 8];
        s.copy_from_slice(&b.as_bytes()[..8]);
        Self(u64::from_le_bytes(s) | 1)
    }

    pub(crate) fn below(&mut self, n: u32) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        // Multiply-shift: unbiased enough for spreading candidates.
        ((u128::from(self.0 >> 32) * u128::from(n)) >> 32) as u32
    }
}

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
                let s = rng.below(size);
                if !picked.contains(&s) {
                    picked.push(s);
                }
            }
            return picked;
        }
    };
    let take = k.min(pool.len());
    for i in 0..take {
        let j = i + rng.below((pool.len() - i) as u32) as usize;
        pool.swap(i, j);
    }
    pool.truncate(take);
    pool
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn candidates_are_distinct_and_in_range() {
        let mut rng = Rng::new();
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
