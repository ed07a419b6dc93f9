//! Speck64/128 and Speck96/144 on machine words ("The SIMON and SPECK
//! Families of Lightweight Block Ciphers", Beaulieu et al., 2013).
//!
//! A round is `x = (x ⋙ 8) + y ⊕ k; y = (y ⋘ 3) ⊕ x` on two words; the round
//! keys are expanded once, when the cipher is built. `encrypt_many` runs the
//! rounds of a group of blocks lane by lane, which vectorises (compiled for
//! AVX-512 and AVX2, picked at run time; the only `unsafe` is that call). Blocks and keys are
//! read big-endian with the paper's word order (`x` first; key words
//! `ℓ_{m−2} … ℓ_0, k_0`), which is also how the `speck-cipher` crate reads
//! bytes, so the values are the same as those it produced.

/// Defines `encrypt_group` on a cipher: its `encrypt_lanes` (which is
/// `#[inline(always)]`, so it is compiled into each variant and its lane loop
/// vectorises for that width) on the widest vectors this CPU has: AVX-512,
/// AVX2, else the target's baseline (SSE2 on x86_64).
macro_rules! widest {
    ($cipher:ty, $words:ty) => {
        impl $cipher {
            fn encrypt_group(&self, x: &mut $words, y: &mut $words) {
                #[cfg(target_arch = "x86_64")]
                {
                    #[target_feature(enable = "avx512f")]
                    fn avx512(c: &$cipher, x: &mut $words, y: &mut $words) {
                        c.encrypt_lanes(x, y)
                    }
                    #[target_feature(enable = "avx2")]
                    fn avx2(c: &$cipher, x: &mut $words, y: &mut $words) {
                        c.encrypt_lanes(x, y)
                    }
                    if std::arch::is_x86_feature_detected!("avx512f") {
                        // SAFETY: the CPU has AVX-512F (checked above), the
                        // only requirement of `avx512`.
                        #[allow(unsafe_code)]
                        unsafe {
                            avx512(self, x, y)
                        };
                        return;
                    }
                    if std::arch::is_x86_feature_detected!("avx2") {
                        // SAFETY: the CPU has AVX2 (checked above).
                        #[allow(unsafe_code)]
                        unsafe {
                            avx2(self, x, y)
                        };
                        return;
                    }
                }
                self.encrypt_lanes(x, y)
            }
        }
    };
}

widest!(Speck64, [u32; L64]);
widest!(Speck96, [u64; L96]);

/// Blocks per group in [`Speck64::encrypt_many`]: two AVX-512 vectors.
const L64: usize = 32;
/// Blocks per group in [`Speck96::encrypt_many`]: two AVX-512 vectors.
const L96: usize = 16;

/// Speck64/128: 32-bit words, 4 key words, 27 rounds.
#[derive(Clone)]
pub(crate) struct Speck64 {
    rk: [u32; 27],
}

impl Speck64 {
    pub(crate) fn new(key: [u8; 16]) -> Self {
        let w = |i: usize| {
            u32::from_be_bytes([key[4 * i], key[4 * i + 1], key[4 * i + 2], key[4 * i + 3]])
        };
        // (ℓ2, ℓ1, ℓ0, k0) in the key's byte order.
        let mut l = [0u32; 27 + 2];
        (l[2], l[1], l[0]) = (w(0), w(1), w(2));
        let mut k = w(3);
        let mut rk = [0u32; 27];
        for i in 0..27 {
            rk[i] = k;
            if i + 1 < 27 {
                l[i + 3] = k.wrapping_add(l[i].rotate_right(8)) ^ i as u32;
                k = k.rotate_left(3) ^ l[i + 3];
            }
        }
        Self { rk }
    }

    #[inline]
    pub(crate) fn encrypt(&self, block: u64) -> u64 {
        let (mut x, mut y) = ((block >> 32) as u32, block as u32);
        for &k in &self.rk {
            x = x.rotate_right(8).wrapping_add(y) ^ k;
            y = y.rotate_left(3) ^ x;
        }
        (u64::from(x) << 32) | u64::from(y)
    }

    /// Encrypts [`L64`] blocks at once, held as their `x` and `y` words.
    /// The rounds of different blocks are independent, so the lane loop
    /// vectorises: 4, 8 or 16 blocks per instruction with SSE2, AVX2 or
    /// AVX-512 (which also rotates in one instruction), and two or more
    /// vectors per round keep the core busy while each waits on its own
    /// chain of dependent operations.
    #[inline(always)]
    fn encrypt_lanes(&self, x: &mut [u32; L64], y: &mut [u32; L64]) {
        for &k in &self.rk {
            for i in 0..L64 {
                x[i] = x[i].rotate_right(8).wrapping_add(y[i]) ^ k;
                y[i] = y[i].rotate_left(3) ^ x[i];
            }
        }
    }

    /// Encrypts every block of `blocks` in place: the same values as
    /// [`Speck64::encrypt`] on each, [`L64`] at a time.
    pub(crate) fn encrypt_many(&self, blocks: &mut [u64]) {
        let mut chunks = blocks.chunks_exact_mut(L64);
        for c in &mut chunks {
            let (mut x, mut y) = ([0u32; L64], [0u32; L64]);
            for i in 0..L64 {
                (x[i], y[i]) = ((c[i] >> 32) as u32, c[i] as u32);
            }
            self.encrypt_group(&mut x, &mut y);
            for i in 0..L64 {
                c[i] = (u64::from(x[i]) << 32) | u64::from(y[i]);
            }
        }
        for b in chunks.into_remainder() {
            *b = self.encrypt(*b);
        }
    }

    #[inline]
    pub(crate) fn decrypt(&self, block: u64) -> u64 {
        let (mut x, mut y) = ((block >> 32) as u32, block as u32);
        for &k in self.rk.iter().rev() {
            y = (y ^ x).rotate_right(3);
            x = ((x ^ k).wrapping_sub(y)).rotate_left(8);
        }
        (u64::from(x) << 32) | u64::from(y)
    }
}

const M48: u64 = (1 << 48) - 1;

#[inline(always)]
fn ror48(v: u64, r: u32) -> u64 {
    ((v >> r) | (v << (48 - r))) & M48
}

#[inline(always)]
fn rol48(v: u64, r: u32) -> u64 {
    ((v << r) | (v >> (48 - r))) & M48
}

/// Speck96/144: 48-bit words (in the low bits of a `u64`), 3 key words, 29
/// rounds.
#[derive(Clone)]
pub(crate) struct Speck96 {
    rk: [u64; 29],
}

impl Speck96 {
    pub(crate) fn new(key: [u8; 18]) -> Self {
        let w = |i: usize| {
            key[6 * i..6 * i + 6]
                .iter()
                .fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
        };
        // (ℓ1, ℓ0, k0) in the key's byte order.
        let mut l = [0u64; 29 + 1];
        (l[1], l[0]) = (w(0), w(1));
        let mut k = w(2);
        let mut rk = [0u64; 29];
        for i in 0..29 {
            rk[i] = k;
            if i + 1 < 29 {
                l[i + 2] = (k.wrapping_add(ror48(l[i], 8)) & M48) ^ i as u64;
                k = rol48(k, 3) ^ l[i + 2];
            }
        }
        Self { rk }
    }

    /// Encrypts the low 96 bits of `block` (`x` above `y`).
    #[inline]
    pub(crate) fn encrypt(&self, block: u128) -> u128 {
        let (mut x, mut y) = ((block >> 48) as u64 & M48, block as u64 & M48);
        for &k in &self.rk {
            x = (ror48(x, 8).wrapping_add(y) & M48) ^ k;
            y = rol48(y, 3) ^ x;
        }
        (u128::from(x) << 48) | u128::from(y)
    }

    /// Encrypts [`L96`] blocks at once (words in the low 48 bits of each lane);
    /// the lane loop vectorises as in [`Speck64::encrypt_lanes`].
    #[inline(always)]
    fn encrypt_lanes(&self, x: &mut [u64; L96], y: &mut [u64; L96]) {
        for &k in &self.rk {
            for i in 0..L96 {
                // `ror48` without its mask: the bits it leaves above bit 47
                // only reach bits above 47 of the sum, which the mask after
                // the addition clears.
                let r = (x[i] >> 8) | (x[i] << 40);
                x[i] = (r.wrapping_add(y[i]) & M48) ^ k;
                y[i] = rol48(y[i], 3) ^ x[i];
            }
        }
    }

    /// Encrypts every block of `blocks` in place (the low 96 bits of each):
    /// the same values as [`Speck96::encrypt`], [`L96`] at a time.
    pub(crate) fn encrypt_many(&self, blocks: &mut [u128]) {
        let mut chunks = blocks.chunks_exact_mut(L96);
        for c in &mut chunks {
            let (mut x, mut y) = ([0u64; L96], [0u64; L96]);
            for i in 0..L96 {
                (x[i], y[i]) = ((c[i] >> 48) as u64 & M48, c[i] as u64 & M48);
            }
            self.encrypt_group(&mut x, &mut y);
            for i in 0..L96 {
                c[i] = (u128::from(x[i]) << 48) | u128::from(y[i]);
            }
        }
        for b in chunks.into_remainder() {
            *b = self.encrypt(*b);
        }
    }

    #[inline]
    pub(crate) fn decrypt(&self, block: u128) -> u128 {
        let (mut x, mut y) = ((block >> 48) as u64 & M48, block as u64 & M48);
        for &k in self.rk.iter().rev() {
            y = ror48(y ^ x, 3);
            x = rol48((x ^ k).wrapping_sub(y) & M48, 8);
        }
        (u128::from(x) << 48) | u128::from(y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xorshift(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed;
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// Many blocks at once give, block by block, what one block at a time
    /// gives: on this CPU's widest vectors, on the portable lanes, and for
    /// every length (the remainder past the last full group is done one by
    /// one).
    #[test]
    fn many_at_once_match_one_at_a_time() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        for _ in 0..20 {
            let mut key64 = [0u8; 16];
            key64.iter_mut().for_each(|b| *b = next() as u8);
            let mut key96 = [0u8; 18];
            key96.iter_mut().for_each(|b| *b = next() as u8);
            let (s64, s96) = (Speck64::new(key64), Speck96::new(key96));
            for len in [0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100] {
                let plain64: Vec<u64> = (0..len).map(|_| next()).collect();
                let mut many = plain64.clone();
                s64.encrypt_many(&mut many);
                let one: Vec<u64> = plain64.iter().map(|&b| s64.encrypt(b)).collect();
                assert_eq!(many, one, "Speck64, {len} blocks");
                let plain96: Vec<u128> = (0..len)
                    .map(|_| (u128::from(next()) << 64 | u128::from(next())) & ((1 << 96) - 1))
                    .collect();
                let mut many = plain96.clone();
                s96.encrypt_many(&mut many);
                let one: Vec<u128> = plain96.iter().map(|&b| s96.encrypt(b)).collect();
                assert_eq!(many, one, "Speck96, {len} blocks");
            }
            // The portable lanes, whatever this CPU has.
            let (mut x, mut y) = ([0u32; L64], [0u32; L64]);
            x.iter_mut().for_each(|w| *w = next() as u32);
            y.iter_mut().for_each(|w| *w = next() as u32);
            let want: Vec<u64> = (0..L64)
                .map(|i| s64.encrypt(u64::from(x[i]) << 32 | u64::from(y[i])))
                .collect();
            s64.encrypt_lanes(&mut x, &mut y);
            let got: Vec<u64> = (0..L64)
                .map(|i| u64::from(x[i]) << 32 | u64::from(y[i]))
                .collect();
            assert_eq!(got, want, "Speck64 portable lanes");
            let (mut x, mut y) = ([0u64; L96], [0u64; L96]);
            x.iter_mut().for_each(|w| *w = next() & M48);
            y.iter_mut().for_each(|w| *w = next() & M48);
            let want: Vec<u128> = (0..L96)
                .map(|i| s96.encrypt(u128::from(x[i]) << 48 | u128::from(y[i])))
                .collect();
            s96.encrypt_lanes(&mut x, &mut y);
            let got: Vec<u128> = (0..L96)
                .map(|i| u128::from(x[i]) << 48 | u128::from(y[i]))
                .collect();
            assert_eq!(got, want, "Speck96 portable lanes");
        }
    }
}
