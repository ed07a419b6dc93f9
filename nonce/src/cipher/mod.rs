//! Block ciphers as bijections on nonce values, and per-width key derivation.
//!
//! - 64 bits: Speck64/128 (64-bit block, 128-bit key).
//! - 96 bits: Speck96/144 (96-bit block, 144-bit key).
//! - 128 bits: AES-128.
//!
//! Key derivation: each width's key is the first 16 (Speck64/128, AES-128)
//! or 18 (Speck96/144) bytes of `SHA-256("leasehold-nonce/v1 " ‖ label ‖ 0x00 ‖ base key)`,
//! with labels `speck64/128`, `speck96/144` and `aes128`. The base key must have
//! at least 32 bytes (256 bits), so each derived key is full-strength and keys
//! of different widths are independent.

use std::fmt;

use aes::cipher::{BlockCipherDecrypt, BlockCipherEncrypt, KeyInit};
use sha2::{Digest, Sha256};

#[cfg(target_arch = "x86_64")]
mod aes_ni;
mod speck;

/// The secret that encrypted nonces are derived from: at least 32 bytes,
/// e.g. from a secret store. `Debug` does not show it.
#[derive(Clone)]
pub struct BaseKey(Vec<u8>);

impl BaseKey {
    /// The minimum length in bytes.
    pub const MIN_LEN: usize = 32;

    /// Checks the length (at least 32 bytes).
    pub fn new(bytes: &[u8]) -> Result<Self, KeyError> {
        if bytes.len() < Self::MIN_LEN {
            return Err(KeyError { len: bytes.len() });
        }
        Ok(Self(bytes.to_vec()))
    }

    fn derive<const N: usize>(&self, label: &str) -> [u8; N] {
        let mut h = Sha256::new();
        h.update(b"leasehold-nonce/v1 ");
        h.update(label.as_bytes());
        h.update([0u8]);
        h.update(&self.0);
        let digest = h.finalize();
        let mut out = [0u8; N];
        out.copy_from_slice(&digest[..N]);
        out
    }
}

impl fmt::Debug for BaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BaseKey({} bytes, redacted)", self.0.len())
    }
}

/// The base key is too short.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyError {
    len: usize,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the nonce base key has {} bytes; it needs at least {} random bytes \
             (generate them once, e.g. `openssl rand -hex 32`, and keep them in your secret store)",
            self.len,
            BaseKey::MIN_LEN
        )
    }
}

impl std::error::Error for KeyError {}

/// A block cipher used as a permutation of nonce values of one width.
#[doc(hidden)]
pub trait BlockPermutation: Clone + Send + Sync + 'static {
    /// Keyed from the base key (through the derivation above).
    fn from_base(key: &BaseKey) -> Self;
    /// Encrypts the low `BITS` bits of `value`.
    fn encrypt(&self, value: u128) -> u128;
    /// The inverse.
    fn decrypt(&self, value: u128) -> u128;
    /// [`BlockPermutation::encrypt`] on every value, in place; ciphers that
    /// can encrypt several blocks at once do.
    fn encrypt_many(&self, values: &mut [u128]) {
        for v in values {
            *v = self.encrypt(*v);
        }
    }
}

/// Speck64/128 on 64-bit nonces.
#[doc(hidden)]
#[derive(Clone)]
pub struct Speck64(speck::Speck64);

impl Speck64 {
    pub(crate) fn from_key(key: [u8; 16]) -> Self {
        Self(speck::Speck64::new(key))
    }
}

impl BlockPermutation for Speck64 {
    fn from_base(key: &BaseKey) -> Self {
        Self::from_key(key.derive("speck64/128"))
    }
    #[inline]
    fn encrypt(&self, value: u128) -> u128 {
        u128::from(self.0.encrypt(value as u64))
    }
    #[inline]
    fn decrypt(&self, value: u128) -> u128 {
        u128::from(self.0.decrypt(value as u64))
    }
    fn encrypt_many(&self, values: &mut [u128]) {
        let mut blocks = [0u64; 64];
        for chunk in values.chunks_mut(64) {
            let blocks = &mut blocks[..chunk.len()];
            for (b, v) in blocks.iter_mut().zip(chunk.iter()) {
                *b = *v as u64;
            }
            self.0.encrypt_many(blocks);
            for (v, b) in chunk.iter_mut().zip(blocks.iter()) {
                *v = u128::from(*b);
            }
        }
    }
}

/// Speck96/144 on 96-bit nonces.
#[doc(hidden)]
#[derive(Clone)]
pub struct Speck96(speck::Speck96);

impl Speck96 {
    pub(crate) fn from_key(key: [u8; 18]) -> Self {
        Self(speck::Speck96::new(key))
    }
}

impl BlockPermutation for Speck96 {
    fn from_base(key: &BaseKey) -> Self {
        Self::from_key(key.derive("speck96/144"))
    }
    #[inline]
    fn encrypt(&self, value: u128) -> u128 {
        self.0.encrypt(value)
    }
    #[inline]
    fn decrypt(&self, value: u128) -> u128 {
        self.0.decrypt(value)
    }
    fn encrypt_many(&self, values: &mut [u128]) {
        self.0.encrypt_many(values)
    }
}

/// AES-128 on 128-bit nonces: AES-NI with pre-expanded round keys when the
/// CPU has it (detected once, when the cipher is built), else the `aes`
/// crate (its constant-time software backend on CPUs without AES
/// instructions).
#[doc(hidden)]
#[derive(Clone)]
pub struct Aes(AesImpl);

#[derive(Clone)]
enum AesImpl {
    #[cfg(target_arch = "x86_64")]
    Ni(aes_ni::AesNi),
    Crate(aes::Aes128),
}

impl Aes {
    pub(crate) fn from_key(key: [u8; 16]) -> Self {
        #[cfg(target_arch = "x86_64")]
        if let Some(ni) = aes_ni::AesNi::new(key) {
            return Self(AesImpl::Ni(ni));
        }
        Self::from_key_portable(key)
    }

    /// The `aes` crate's implementation, whatever the CPU has.
    pub(crate) fn from_key_portable(key: [u8; 16]) -> Self {
        Self(AesImpl::Crate(aes::Aes128::new(&key.into())))
    }
}

impl BlockPermutation for Aes {
    fn from_base(key: &BaseKey) -> Self {
        Self::from_key(key.derive("aes128"))
    }
    #[inline]
    fn encrypt(&self, value: u128) -> u128 {
        match &self.0 {
            #[cfg(target_arch = "x86_64")]
            AesImpl::Ni(ni) => ni.encrypt(value),
            AesImpl::Crate(c) => {
                let mut block = value.to_be_bytes().into();
                c.encrypt_block(&mut block);
                u128::from_be_bytes(block.0)
            }
        }
    }
    #[inline]
    fn decrypt(&self, value: u128) -> u128 {
        match &self.0 {
            #[cfg(target_arch = "x86_64")]
            AesImpl::Ni(ni) => ni.decrypt(value),
            AesImpl::Crate(c) => {
                let mut block = value.to_be_bytes().into();
                c.decrypt_block(&mut block);
                u128::from_be_bytes(block.0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex<const N: usize>(s: &str) -> [u8; N] {
        let s: String = s.split_whitespace().collect();
        let mut out = [0u8; N];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
        }
        out
    }

    /// "The SIMON and SPECK Families of Lightweight Block Ciphers" (Beaulieu
    /// et al., 2013), Appendix C: Speck64/128.
    #[test]
    fn speck64_128_paper_vector() {
        let c = Speck64::from_key(hex("1b1a1918 13121110 0b0a0908 03020100"));
        let pt = u128::from(u64::from_be_bytes(hex("3b726574 7475432d")));
        let ct = u128::from(u64::from_be_bytes(hex("8c6fa548 454e028b")));
        assert_eq!(c.encrypt(pt), ct);
        assert_eq!(c.decrypt(ct), pt);
    }

    /// Same paper, Appendix C: Speck96/144.
    #[test]
    fn speck96_144_paper_vector() {
        let c = Speck96::from_key(hex("151413121110 0d0c0b0a0908 050403020100"));
        let from12 = |b: [u8; 12]| b.iter().fold(0u128, |acc, &x| (acc << 8) | u128::from(x));
        let pt = from12(hex("656d6974206e 69202c726576"));
        let ct = from12(hex("2bf31072228a 7ae440252ee6"));
        assert_eq!(c.encrypt(pt), ct);
        assert_eq!(c.decrypt(ct), pt);
    }

    /// FIPS-197, Appendix C.1: AES-128, on both paths (AES-NI when this CPU
    /// has it, and the `aes` crate).
    #[test]
    fn aes128_fips197_vector() {
        let key = hex("000102030405060708090a0b0c0d0e0f");
        let pt = u128::from_be_bytes(hex("00112233445566778899aabbccddeeff"));
        let ct = u128::from_be_bytes(hex("69c4e0d86a7b0430d8cdb78070b4c55a"));
        for c in [Aes::from_key(key), Aes::from_key_portable(key)] {
            assert_eq!(c.encrypt(pt), ct);
            assert_eq!(c.decrypt(ct), pt);
        }
    }

    /// Encrypting with the AES-NI path equals the `aes` crate for keys and
    /// blocks drawn at random (so the expanded keys agree too). With
    /// `RUSTFLAGS='--cfg aes_backend="soft"'` the `aes` crate runs its
    /// software backend, and this checks the fallback against AES-NI.
    #[test]
    fn aes_ni_equals_the_aes_crate() {
        let mut r = SplitMix(1);
        for _ in 0..2_000 {
            let key = r.next128().to_be_bytes();
            let (fast, portable) = (Aes::from_key(key), Aes::from_key_portable(key));
            for _ in 0..8 {
                let v = r.next128();
                let e = fast.encrypt(v);
                assert_eq!(e, portable.encrypt(v));
                assert_eq!(fast.decrypt(e), v);
                assert_eq!(portable.decrypt(e), v);
            }
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("aes") {
            assert!(matches!(Aes::from_key([0; 16]).0, AesImpl::Ni(_)));
        }
    }

    /// The word-level Speck gives exactly what `speck-cipher` (used before)
    /// gave: existing encrypted nonces keep their values and still decrypt.
    #[test]
    fn speck_equals_speck_cipher() {
        use speck_cipher::cipher::{BlockCipherEncrypt, KeyInit};
        let mut r = SplitMix(2);
        for _ in 0..2_000 {
            let k = r.next128().to_be_bytes();
            let old = speck_cipher::Speck64_128::new(&k.into());
            let new = Speck64::from_key(k);
            let mut k18 = [0u8; 18];
            k18[..16].copy_from_slice(&k);
            k18[16..].copy_from_slice(&r.next128().to_be_bytes()[..2]);
            let old96 = speck_cipher::Speck96_144::new(&k18.into());
            let new96 = Speck96::from_key(k18);
            for _ in 0..8 {
                let v = r.next128();
                let mut b = (v as u64).to_be_bytes().into();
                old.encrypt_block(&mut b);
                let e = u128::from(u64::from_be_bytes(b.0));
                assert_eq!(new.encrypt(v), e);
                assert_eq!(new.decrypt(e), u128::from(v as u64));

                let v96 = v & ((1 << 96) - 1);
                let mut b: [u8; 12] = v96.to_be_bytes()[4..].try_into().unwrap();
                let mut block = b.into();
                old96.encrypt_block(&mut block);
                b = block.0;
                let e = b.iter().fold(0u128, |acc, &x| (acc << 8) | u128::from(x));
                assert_eq!(new96.encrypt(v96), e);
                assert_eq!(new96.decrypt(e), v96);
            }
        }
    }

    /// A deterministic pseudo-random source for the cross-checks.
    struct SplitMix(u64);

    impl SplitMix {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        fn next128(&mut self) -> u128 {
            (u128::from(self.next()) << 64) | u128::from(self.next())
        }
    }

    #[test]
    fn key_rules() {
        let e = BaseKey::new(&[7; 31]).unwrap_err();
        assert!(e.to_string().contains("at least 32"), "{e}");
        let k = BaseKey::new(&[7; 32]).unwrap();
        assert!(!format!("{k:?}").contains('7'));
        // Different labels, different keys; same base key, same keys.
        assert_ne!(k.derive::<16>("aes128"), k.derive::<16>("speck64/128"));
        assert_eq!(
            k.derive::<16>("aes128"),
            BaseKey::new(&[7; 32]).unwrap().derive::<16>("aes128")
        );
    }
}
