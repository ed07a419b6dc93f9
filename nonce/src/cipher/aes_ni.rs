//! AES-128 on one block with AES-NI, with the round keys expanded once.
//!
//! Why not `aes::Aes128` alone: on a CPU that has VAES (`vaes` in
//! /proc/cpuinfo), the `aes` crate (0.9) routes every call through its
//! VAES backend, which first broadcasts all eleven round keys into 256-bit
//! registers (a 352-byte copy on the stack) before it encrypts the one block
//! with the 128-bit instructions, behind a closure-based backend interface
//! and a call that cannot be inlined. That per-call set-up, not the cipher,
//! was the ~60 ns per block (the `cipher only` rows of the `nonces` bench; callgrind
//! cannot show it, as valgrind has no VAES and the crate then takes its plain
//! AES-NI path). Here the round
//! keys live in the cipher as `__m128i` and one call runs the ten rounds.
//!
//! The only `unsafe` is the call into the `#[target_feature(enable = "aes")]`
//! functions, made only after `is_x86_feature_detected!("aes")` said yes
//! when the cipher was built ([`AesNi::new`] returns `None` otherwise, and the
//! caller falls back to the `aes` crate's software or hardware backend).

#![allow(unsafe_code)]

use core::arch::x86_64::{
    __m128i, _mm_aesdec_si128, _mm_aesdeclast_si128, _mm_aesenc_si128, _mm_aesenclast_si128,
    _mm_aesimc_si128, _mm_aeskeygenassist_si128, _mm_cvtsi128_si64, _mm_set_epi64x,
    _mm_shuffle_epi32, _mm_slli_si128, _mm_unpackhi_epi64, _mm_xor_si128,
};

/// Encryption and decryption round keys (the decryption keys are the
/// "equivalent inverse cipher" ones, `aesimc` of the middle keys).
#[derive(Clone, Copy)]
pub(crate) struct AesNi {
    enc: [__m128i; 11],
    dec: [__m128i; 11],
}

/// The AES state register for a block given as a big-endian `u128` (byte 0
/// of the block is the most significant byte of the value).
#[inline]
#[target_feature(enable = "aes")]
fn load(v: u128) -> __m128i {
    let le = v.swap_bytes();
    _mm_set_epi64x((le >> 64) as i64, le as i64)
}

#[inline]
#[target_feature(enable = "aes")]
fn store(b: __m128i) -> u128 {
    let lo = _mm_cvtsi128_si64(b) as u64;
    let hi = _mm_cvtsi128_si64(_mm_unpackhi_epi64(b, b)) as u64;
    ((u128::from(hi) << 64) | u128::from(lo)).swap_bytes()
}

#[inline]
#[target_feature(enable = "aes")]
fn expand_round<const RCON: i32>(prev: __m128i) -> __m128i {
    let mut t1 = prev;
    let t2 = _mm_shuffle_epi32(_mm_aeskeygenassist_si128(t1, RCON), 0xff);
    let mut t3 = _mm_slli_si128(t1, 4);
    t1 = _mm_xor_si128(t1, t3);
    t3 = _mm_slli_si128(t3, 4);
    t1 = _mm_xor_si128(t1, t3);
    t3 = _mm_slli_si128(t3, 4);
    t1 = _mm_xor_si128(t1, t3);
    _mm_xor_si128(t1, t2)
}

#[target_feature(enable = "aes")]
fn expand(key: u128) -> AesNi {
    let mut enc = [load(key); 11];
    enc[1] = expand_round::<0x01>(enc[0]);
    enc[2] = expand_round::<0x02>(enc[1]);
    enc[3] = expand_round::<0x04>(enc[2]);
    enc[4] = expand_round::<0x08>(enc[3]);
    enc[5] = expand_round::<0x10>(enc[4]);
    enc[6] = expand_round::<0x20>(enc[5]);
    enc[7] = expand_round::<0x40>(enc[6]);
    enc[8] = expand_round::<0x80>(enc[7]);
    enc[9] = expand_round::<0x1b>(enc[8]);
    enc[10] = expand_round::<0x36>(enc[9]);
    let mut dec = enc;
    dec[0] = enc[10];
    for i in 1..10 {
        dec[i] = _mm_aesimc_si128(enc[10 - i]);
    }
    dec[10] = enc[0];
    AesNi { enc, dec }
}

#[inline]
#[target_feature(enable = "aes")]
fn encrypt(keys: &[__m128i; 11], block: u128) -> u128 {
    let mut b = _mm_xor_si128(load(block), keys[0]);
    for &k in &keys[1..10] {
        b = _mm_aesenc_si128(b, k);
    }
    store(_mm_aesenclast_si128(b, keys[10]))
}

#[inline]
#[target_feature(enable = "aes")]
fn decrypt(keys: &[__m128i; 11], block: u128) -> u128 {
    let mut b = _mm_xor_si128(load(block), keys[0]);
    for &k in &keys[1..10] {
        b = _mm_aesdec_si128(b, k);
    }
    store(_mm_aesdeclast_si128(b, keys[10]))
}

impl AesNi {
    /// `None` when this CPU has no AES-NI.
    pub(crate) fn new(key: [u8; 16]) -> Option<Self> {
        if !std::arch::is_x86_feature_detected!("aes") {
            return None;
        }
        // SAFETY: the CPU has AES-NI (checked just above); `expand` needs
        // nothing else (SSE2 is part of x86_64).
        Some(unsafe { expand(u128::from_be_bytes(key)) })
    }

    #[inline]
    pub(crate) fn encrypt(&self, block: u128) -> u128 {
        // SAFETY: `self` exists only if `new` found AES-NI on this CPU.
        unsafe { encrypt(&self.enc, block) }
    }

    #[inline]
    pub(crate) fn decrypt(&self, block: u128) -> u128 {
        // SAFETY: as in `encrypt`.
        unsafe { decrypt(&self.dec, block) }
    }
}
