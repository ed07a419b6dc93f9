//! Encrypted nonces: a block-cipher permutation of a plain generator's values.

use std::fmt;

use crate::cipher::{BaseKey, BlockPermutation};
use crate::error::{FillError, GenerateError, TryNextError};
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
/// # use leasehold_core::testing::GateControl;
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

    /// The next encrypted nonce (errors, and waiting for the floor, as the
    /// wrapped generator's `next`: at most the lease's `max_clock_skew`).
    #[inline(always)]
    pub fn next(&self) -> Result<NonceOf<G>, GenerateError> {
        let plain = self.inner.next_plain()?;
        Ok(G::W::wrap(self.cipher.encrypt(plain)))
    }

    /// The next encrypted nonce if it can be handed out now, without
    /// waiting: as the wrapped generator's `try_next`.
    #[inline]
    pub fn try_next(&self) -> Result<NonceOf<G>, TryNextError> {
        let plain = self.inner.try_next_plain()?;
        Ok(G::W::wrap(self.cipher.encrypt(plain)))
    }

    /// The next encrypted nonce, for async code: as the wrapped generator's
    /// `next_async` (it sleeps on the runtime's timer where `next` would
    /// wait on the thread, and never waits for a lease).
    #[cfg(feature = "tokio")]
    pub async fn next_async(&self) -> Result<NonceOf<G>, GenerateError> {
        crate::asynch::until_ready(|| self.try_next()).await
    }

    /// Fills `out` with encrypted nonces. Each plain value is made exactly
    /// as [`Encrypted::next`] makes it (every one checks the gate at its own
    /// clock reading, and may wait as `next` does: for the next millisecond,
    /// or for a new lease's floor at most the lease's `max_clock_skew`); they are then encrypted together, 32 Speck64 or 16
    /// Speck96 blocks at once on the CPU's widest vectors (AVX-512, AVX2,
    /// else SSE2), which costs a few nanoseconds a block where one block on
    /// its own costs 18 (Speck64) to 64 (Speck96). AES is not batched: one
    /// block already costs about 3 ns.
    ///
    /// When the gate refuses part-way, the values made so far are encrypted
    /// and written, and the error says how many:
    ///
    /// ```
    /// # use leasehold_core::{Fence, LeaseGate, MonoTime};
    /// # use leasehold_core::testing::GateControl;
    /// # use std::time::Duration;
    /// use leasehold_nonce::{BaseKey, Counter64, Encrypted, GenerateError, Nonce64};
    /// let gate = LeaseGate::new();
    /// gate.open(5, Fence(1), MonoTime::now() + Duration::from_secs(60));
    /// let ids = Encrypted::new(Counter64::new(gate.clone())?, &BaseKey::new(&[0x5a; 32])?);
    /// let mut batch = [Nonce64(0); 1000];
    /// ids.fill(&mut batch)?;
    /// assert!(batch.iter().all(|&n| ids.decode(n).slot == 5));
    /// gate.close();
    /// let e = ids.fill(&mut batch).unwrap_err();
    /// assert_eq!((e.filled, e.error), (0, GenerateError::Closed));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn fill(&self, out: &mut [NonceOf<G>]) -> Result<(), FillError> {
        const CHUNK: usize = 64;
        let mut plain = [0u128; CHUNK];
        let mut done = 0;
        while done < out.len() {
            let n = (out.len() - done).min(CHUNK);
            let mut made = 0;
            let mut refused = None;
            for v in &mut plain[..n] {
                match self.inner.next_plain() {
                    Ok(p) => *v = p,
                    Err(e) => {
                        refused = Some(e);
                        break;
                    }
                }
                made += 1;
            }
            self.cipher.encrypt_many(&mut plain[..made]);
            for (o, v) in out[done..done + made].iter_mut().zip(&plain[..made]) {
                *o = G::W::wrap(*v);
            }
            done += made;
            if let Some(error) = refused {
                return Err(FillError {
                    filled: done,
                    error,
                });
            }
        }
        Ok(())
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
