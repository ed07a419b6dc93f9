//! The three nonce widths as types, so a 64-bit generator hands out a `u64`-backed value.

use crate::cipher::BlockPermutation;
use crate::nonce::{Nonce64, Nonce96, Nonce128};

mod sealed {
    pub trait Sealed {}
}

/// A nonce width: [`W64`], [`W96`] or [`W128`]. Sealed.
pub trait Width: sealed::Sealed + Send + Sync + 'static {
    /// 64, 96 or 128.
    const BITS: u32;
    /// The value type handed out.
    type Nonce: Copy + Eq + Ord + std::hash::Hash + std::fmt::Debug + std::fmt::Display + Send;
    #[doc(hidden)]
    type Cipher: BlockPermutation;
    #[doc(hidden)]
    fn wrap(raw: u128) -> Self::Nonce;
    #[doc(hidden)]
    fn unwrap(nonce: Self::Nonce) -> u128;
}

/// 64-bit nonces ([`Nonce64`]); encrypted with Speck64/128.
#[derive(Clone, Copy, Debug)]
pub struct W64;
/// 96-bit nonces ([`Nonce96`]); encrypted with Speck96/144.
#[derive(Clone, Copy, Debug)]
pub struct W96;
/// 128-bit nonces ([`Nonce128`]); encrypted with AES-128.
#[derive(Clone, Copy, Debug)]
pub struct W128;

impl sealed::Sealed for W64 {}
impl sealed::Sealed for W96 {}
impl sealed::Sealed for W128 {}

impl Width for W64 {
    const BITS: u32 = 64;
    type Nonce = Nonce64;
    type Cipher = crate::cipher::Speck64;
    #[inline]
    fn wrap(raw: u128) -> Nonce64 {
        Nonce64(raw as u64)
    }
    #[inline]
    fn unwrap(nonce: Nonce64) -> u128 {
        u128::from(nonce.0)
    }
}

impl Width for W96 {
    const BITS: u32 = 96;
    type Nonce = Nonce96;
    type Cipher = crate::cipher::Speck96;
    #[inline]
    fn wrap(raw: u128) -> Nonce96 {
        Nonce96::from_u128_truncate(raw)
    }
    #[inline]
    fn unwrap(nonce: Nonce96) -> u128 {
        nonce.to_u128()
    }
}

impl Width for W128 {
    const BITS: u32 = 128;
    type Nonce = Nonce128;
    type Cipher = crate::cipher::Aes;
    #[inline]
    fn wrap(raw: u128) -> Nonce128 {
        Nonce128(raw)
    }
    #[inline]
    fn unwrap(nonce: Nonce128) -> u128 {
        nonce.0
    }
}
