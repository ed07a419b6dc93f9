//! Randomness without dependencies.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

/// 128 bits from the OS random source.
///
/// On Unix this reads `/dev/urandom`. Elsewhere (or if that read fails) it falls
/// back to SipHash keyed by std's `RandomState`, whose keys std draws from the OS
/// random source; a process-wide counter keeps successive outputs distinct.
pub(crate) fn os_random_128() -> u128 {
    #[cfg(unix)]
    {
        use std::io::Read;
        let mut buf = [0u8; 16];
        if std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut buf))
            .is_ok()
        {
            return u128::from_le_bytes(buf);
        }
    }
    let hi = keyed_hash(0);
    let lo = keyed_hash(1);
    (u128::from(hi) << 64) | u128::from(lo)
}

fn keyed_hash(lane: u64) -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u64(lane);
    h.finish()
}

/// A small deterministic generator (SplitMix64) for jitter. Not for tokens.
#[derive(Clone, Debug)]
pub(crate) struct SplitMix(u64);

impl SplitMix {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}
