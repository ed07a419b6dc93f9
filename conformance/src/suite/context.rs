//! What every behaviour works with: a fresh pool on a connected store, and
//! a grant with the instant its request was sent.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_core::{Capabilities, Floor, Grant, PoolName, PoolSpec, Token};

use super::{Outcome, STARVED};
use crate::glue::{Glue, Store};

/// A grant and the instant its request was sent. The store counted its TTL
/// from no earlier than that, so the lease is surely live until
/// `sent + ttl`: the bound every "still held" check is judged by, taken from
/// readings, not from a guess about how loaded the machine is.
pub(super) struct Held {
    pub(super) grant: Grant,
    pub(super) sent: Instant,
}

impl Held {
    /// After a `Renewed { ttl }` to a renewal sent at `sent`.
    pub(super) fn renewed(&mut self, sent: Instant, ttl: Duration) {
        self.grant.ttl = ttl;
        self.sent = sent;
    }

    /// `Ok` when `ok`; otherwise a failure if the lease was surely live when
    /// the answer came back, and a starved outcome if it may have expired.
    pub(super) fn judge(&self, ok: bool, msg: impl FnOnce() -> String) -> Outcome {
        if ok {
            return Ok(());
        }
        // Read after the answer arrived: later than the answer, which can
        // only turn a failure into a starved run, never the reverse.
        let at = Instant::now();
        if at < self.sent + self.grant.ttl {
            Err(msg())
        } else {
            Err(format!(
                "{STARVED}{} (judged {:?} after the lease's request was sent; TTL {:?})",
                msg(),
                at - self.sent,
                self.grant.ttl
            ))
        }
    }
}

/// A fresh pool name: `t` and 12 random hex digits.
pub fn fresh_pool_name() -> PoolName {
    let hex = Token::random().to_hex();
    PoolName::new(format!("t{}", &hex[..12])).expect("valid pool name")
}

/// A pool of `size` slots with `ttl` under a fresh name
/// ([`fresh_pool_name`]): every test gets a namespace of its own.
pub fn fresh_pool(size: u32, ttl: Duration) -> Result<PoolSpec, String> {
    PoolSpec::new(fresh_pool_name(), size, ttl).map_err(|e| format!("pool spec: {e}"))
}

/// The shortest TTL worth testing expiry with on this backend.
pub(super) fn short_ttl(caps: &Capabilities) -> Duration {
    caps.min_ttl.max(Duration::from_millis(400))
}

pub(super) struct Ctx {
    pub(super) backend: Arc<dyn Glue>,
    pub(super) store: Store,
    pub(super) pool: PoolSpec,
}

impl Ctx {
    pub(super) async fn new(
        backend: Arc<dyn Glue>,
        size: u32,
        ttl: Option<Duration>,
    ) -> Result<Self, String> {
        let store = backend.connect().await?;
        let caps = store.capabilities_dyn();
        let ttl = ttl.unwrap_or_else(|| short_ttl(&caps));
        let pool = fresh_pool(size, ttl)?;
        backend.prepare(&pool).await?;
        Ok(Self {
            backend,
            store,
            pool,
        })
    }

    pub(super) async fn another(&self) -> Result<Store, String> {
        self.backend.connect().await
    }

    pub(super) async fn acquire(&self) -> Result<Grant, String> {
        self.store
            .acquire_dyn(&self.pool, Floor::NONE)
            .await
            .map_err(|e| format!("acquire: {e}"))
    }

    /// Acquires on `store`, noting when the request was sent.
    pub(super) async fn hold(&self, store: &Store) -> Result<Held, String> {
        let sent = Instant::now();
        let grant = store
            .acquire_dyn(&self.pool, Floor::NONE)
            .await
            .map_err(|e| format!("acquire: {e}"))?;
        Ok(Held { grant, sent })
    }

    /// Polls `acquire` on `store` until it succeeds (the previous holder's
    /// lease expired) or `limit` passes.
    pub(super) async fn acquire_after_expiry(&self, store: &Store) -> Result<Grant, String> {
        Ok(self.hold_after_expiry(store).await?.grant)
    }

    /// [`Ctx::acquire_after_expiry`], noting when the successful request was
    /// sent.
    pub(super) async fn hold_after_expiry(&self, store: &Store) -> Result<Held, String> {
        let limit = self.pool.ttl() * 4 + Duration::from_secs(5);
        let start = Instant::now();
        loop {
            let sent = Instant::now();
            match store.acquire_dyn(&self.pool, Floor::NONE).await {
                Ok(grant) => return Ok(Held { grant, sent }),
                Err(e) if e.is_retryable() && start.elapsed() < limit => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(format!("no takeover within {limit:?}: {e}")),
            }
        }
    }
}
