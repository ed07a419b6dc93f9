//! Speck64/128 and Speck96/144 on machine words ("The SIMON and SPECK
//! Families of Lightweight Block Ciphers", Beaulieu et al., 2013).
//!
//! A round is `x = (x ⋙ 8) + y ⊕ k; y = (y ⋘ 3) ⊕ x` on two words; the round
//! keys are expanded once, when the cipher is built. Blocks and keys are
//! read big-endian with the paper's word order (`x` first; key words
//! `ℓ_{m−2} … ℓ_0, k_0`), which is also how the `speck-cipher` crate reads
//! bytes, so the values are the same as those it produced.

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
