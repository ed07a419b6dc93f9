//! Randomness without dependencies: 128 bits from the OS for tokens, and a
//! small seeded generator for everything that only needs spreading apart.

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

/// A small, fast generator (SplitMix64) for spreading and jitter: backoff
/// jitter, the candidate slots an acquirer tries, a fault campaign's plan
/// (the same seed gives the same numbers). Not for tokens or anything an
/// attacker must not guess: use [`Token::random`](crate::Token::random).
///
/// ```
/// use leasehold_core::rand::SplitMix;
/// let (mut a, mut b) = (SplitMix::new(7), SplitMix::new(7));
/// assert_eq!(a.next_u64(), b.next_u64());
/// assert!(a.below(10) < 10);
/// let mut items = [1, 2, 3, 4];
/// SplitMix::from_os().shuffle(&mut items);
/// items.sort();
/// assert_eq!(items, [1, 2, 3, 4]);
/// ```
#[derive(Clone, Debug)]
pub struct SplitMix(u64);

impl SplitMix {
    /// Seeded with `seed`: the same seed gives the same numbers.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// Seeded from the OS random source.
    pub fn from_os() -> Self {
        // Truncation keeps the low 64 random bits.
        Self(os_random_128() as u64)
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`0` when `n` is 0), by remainder: the bias is
    /// below `n / 2^64`, nothing for spreading work apart.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Shuffles `items` (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = usize::try_from(self.below(i as u64 + 1)).unwrap_or(0);
            items.swap(i, j);
        }
    }
}
