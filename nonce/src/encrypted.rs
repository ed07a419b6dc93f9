//! Encrypted nonces: a block-cipher permutation of a plain generator's values.

use std::fmt;

use crate::cipher::{BaseKey, BlockPermutation};
use crate::error::GenerateError;
use crate::generator::Plain;
use crate::layout::{Layout, Parts};
use crate::width::Width;

type NonceOf<G> = <<G as Plain>::W as Width>::Nonce;
type CipherOf<G> = <<G as Plain>::W as Width>::Cipher;

/// Encrypted nonces: each value of the wrapped [`Counter`](crate::Counter) or
/// [`Sortable`](crate::Sortable) generator, encrypted with the width's block
/// cipher (Speck64/128, Speck96/144, AES-128) under a key derived from a
/// [`BaseKey`]. A block cipher is a bijection, so the values stay unique; they
/// look random to anyone without the key; [`Encrypted::decrypt`] gives the
/// plain nonce back.
///
/// ```
/// # use leasehold_core::{Fence, LeaseGate, MonoTime};
/// # use std::time::Duration;
/// # let gate = LeaseGate::new();
/// # gate.open(5, Fence(1), MonoTime::now() + Duration::from_secs(60));
/// use leasehold_nonce::{BaseKey, Counter64, Encrypted};
/// let key = BaseKey::new(&[0x5a; 32])?; // use a real secret
/// let ids = Encrypted::new(Counter64::new(gate)?, &key);
/// let n = ids.next()?;
/// assert_eq!(ids.decode(n).slot, 5);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Encrypted<G: Plain> {
    inner: G,
    cipher: CipherOf<G>,
}

impl<G: Plain> Encrypted<G> {
    /// Wraps `inner`, with the width's key derived from `key`.
    pub fn new(inner: G, key: &BaseKey) -> Self {
        Self {
            inner,
            cipher: CipherOf::<G>::from_base(key),
        }
    }

    /// The next encrypted nonce (errors as the wrapped generator's).
    #[inline(always)]
    pub fn next(&self) -> Result<NonceOf<G>, GenerateError> {
        let plain = self.inner.next_plain()?;
        Ok(G::W::wrap(self.cipher.encrypt(plain)))
    }

    /// The plain nonce inside an encrypted one.
    pub fn decrypt(&self, nonce: NonceOf<G>) -> NonceOf<G> {
        G::W::wrap(self.cipher.decrypt(G::W::unwrap(nonce)))
    }

    /// Decrypts and takes apart.
    pub fn decode(&self, nonce: NonceOf<G>) -> Parts {
        self.layout().decode(G::W::unwrap(self.decrypt(nonce)))
    }

    /// The plain layout.
    pub fn layout(&self) -> &Layout {
        self.inner.plain_layout()
    }

    /// The wrapped generator.
    pub fn inner(&self) -> &G {
        &self.inner
    }
}

impl<G: Plain> Clone for Encrypted<G> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            cipher: self.cipher.clone(),
        }
    }
}

impl<G: Plain + fmt::Debug> fmt::Debug for Encrypted<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Encrypted")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}
