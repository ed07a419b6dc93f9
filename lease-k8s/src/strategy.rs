//! The Kubernetes strategy: the `KubeStrategy` type, connecting, revoking,
//! and the `Strategy` trait's glue. Acquisition is in `acquire.rs` (its
//! decisions in `protocol.rs`), renewal and release in `hold.rs`.

use std::sync::Arc;
use std::time::Duration;

use leasehold_core::{
    AcquireError, Capabilities, Floor, Grant, InspectError, PoolName, PoolSpec, Release, Renewal,
    SlotInfo, Strategy,
};
use tokio::time::Instant;

use crate::api::{Api, Resp};
use crate::cache::Caches;
use crate::config::KubeConfig;
use crate::error::KubeError;
use crate::names::{check_pool, lease_name};
use crate::protocol::{self, revoke_patch};

/// A lease store on Kubernetes: one `coordination.k8s.io/v1` Lease per slot,
/// `leasehold-<pool>-<slot>`, labelled `leasehold/pool` and `leasehold/slot`,
/// created on demand and never deleted.
///
/// - **acquire**, 2 round trips: LIST the namespace's Leases, then one write
///   to a takeable slot chosen at random: POST for an absent slot, a merge
///   PATCH conditioned on the observed resourceVersion for a released slot or
///   one this process saw unchanged for longer than its duration. 409 means
///   another acquirer won: the next candidate.
/// - **fence**: the resourceVersion of our own acquiring write.
/// - **renew**, 1 round trip: a JSON Patch whose first op `test`s the holder
///   identity; 422 is confirmed with one GET.
/// - **release**, 1 round trip: the same `test`, then an empty holder.
///
/// Cloning shares the client.
#[derive(Clone)]
pub struct KubeStrategy {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) api: Api,
    pub(crate) takeover_margin: Duration,
    identity: String,
    /// What this process remembers between requests.
    pub(crate) caches: Caches,
    #[cfg(feature = "stats")]
    pub(crate) stats: crate::stats::Counters,
}

impl KubeStrategy {
    /// The smallest TTL: `leaseDurationSeconds` counts whole seconds and must
    /// be > 0.
    pub const MIN_TTL: Duration = protocol::MIN_TTL;

    /// The default bound on any single request.
    pub const DEFAULT_OP_TIMEOUT: Duration = crate::config::DEFAULT_OP_TIMEOUT;

    /// The largest pool: one LIST reads every Lease of the pool.
    pub const MAX_POOL_SIZE: u32 = protocol::MAX_POOL_SIZE;

    /// What the strategy supports: networked, floors persisted in the
    /// `leasehold/floor` annotation.
    pub const CAPABILITIES: Capabilities = Capabilities::coordinated(true, Self::MIN_TTL)
        .with_max_pool_size(Self::MAX_POOL_SIZE)
        .with_persisted_floor()
        .with_inspect();

    /// Builds the client (retries off, a read timeout) and, unless
    /// [`KubeConfig::preflight`] is off, checks the setup: the RBAC verbs
    /// (one access review per verb), that resourceVersions are integers,
    /// and that the namespace exists (a dry-run create). Each mistake is a
    /// final error that says what to do.
    pub async fn connect(config: KubeConfig) -> Result<Self, KubeError> {
        config.validate()?;
        let api = Api::connect(&config).await?;
        let identity = format!("k8s:{}/{}", api.server, api.namespace);
        let strategy = Self {
            inner: Arc::new(Inner {
                api,
                takeover_margin: config.takeover_margin,
                identity,
                caches: Caches::default(),
                #[cfg(feature = "stats")]
                stats: crate::stats::Counters::default(),
            }),
        };
        if config.preflight {
            crate::preflight::run(&strategy.inner.api).await?;
        }
        Ok(strategy)
    }

    /// The HTTP client of the API server.
    pub(crate) fn api(&self) -> &Api {
        &self.inner.api
    }

    /// The bound on a single request.
    pub(crate) fn op_timeout(&self) -> Duration {
        self.inner.api.op_timeout
    }

    /// Request counts since connect (feature `stats`).
    #[cfg(feature = "stats")]
    pub fn stats(&self) -> crate::stats::Stats {
        self.inner.stats.read(&self.inner.api.requests)
    }

    /// The namespace holding the Leases.
    pub fn namespace(&self) -> &str {
        &self.inner.api.namespace
    }

    /// The Lease name of `slot` in `pool`: `leasehold-<pool>-<slot>`.
    pub fn lease_name(&self, pool: &PoolName, slot: u32) -> String {
        lease_name(pool, slot)
    }

    /// Revokes the holder of `slot`: its `holderIdentity` becomes a
    /// tombstone (`revoked/<old holder>`), so the holder's next renewal is
    /// `Lost`. The tombstone is a new write, so every observer starts its
    /// expiry clock again: nobody can claim the slot before the revoked
    /// holder's lease would have ended. The floor annotation stays. True
    /// when a holder was revoked; false when nobody held the slot.
    pub async fn revoke(&self, pool: &PoolSpec, slot: u32) -> Result<bool, KubeError> {
        check_pool(pool.name()).map_err(|e| KubeError::Request {
            what: "revoke",
            detail: e.to_string(),
        })?;
        let name = lease_name(pool.name(), slot);
        let api = &self.inner.api;
        for _ in 0..5 {
            let deadline = Instant::now() + api.op_timeout;
            let resp = api
                .get(&name, deadline)
                .await
                .map_err(|e| KubeError::Request {
                    what: "GET (revoke)",
                    detail: e.text().to_owned(),
                })?;
            if resp.status == 404 {
                return Ok(false);
            }
            let lease = expect_ok(&resp, "GET (revoke)")?
                .lease()
                .map_err(|detail| KubeError::Request {
                    what: "GET (revoke)",
                    detail,
                })?;
            let Some(patch) = revoke_patch(&lease) else {
                return Ok(false);
            };
            let resp = api
                .merge_patch(&name, &patch, deadline)
                .await
                .map_err(|e| KubeError::Request {
                    what: "PATCH (revoke)",
                    detail: e.text().to_owned(),
                })?;
            match resp.status {
                409 => continue,
                404 => return Ok(false),
                _ => {
                    expect_ok(&resp, "PATCH (revoke)")?;
                    return Ok(true);
                }
            }
        }
        Err(KubeError::Request {
            what: "revoke",
            detail: format!("{name} kept changing; try again"),
        })
    }
}

fn expect_ok<'a>(resp: &'a Resp, what: &'static str) -> Result<&'a Resp, KubeError> {
    if resp.ok() {
        Ok(resp)
    } else {
        Err(KubeError::Request {
            what,
            detail: resp.message(),
        })
    }
}

impl Strategy for KubeStrategy {
    async fn acquire(&self, pool: &PoolSpec, ceiling: Floor) -> Result<Grant, AcquireError> {
        self.acquire_slot(pool, ceiling, None).await
    }

    async fn renew(&self, pool: &PoolSpec, grant: &Grant, ceiling: Floor) -> Renewal {
        let deadline = Instant::now() + self.inner.api.op_timeout.min(pool.ttl());
        self.renew_grant(pool, grant, Some(ceiling.0), deadline)
            .await
    }

    async fn release(&self, pool: &PoolSpec, grant: &Grant, issued: Floor) -> Release {
        self.release_grant(pool, grant, Some(issued.0)).await
    }

    /// One LIST of the pool's Leases. Expiry here is judged on the
    /// **observer's clock**, as the strategy judges takeovers (README, rule
    /// 1): `expires_in` is the lease duration minus the time since this
    /// process first saw the Lease's current resourceVersion (a strategy that
    /// never saw it before counts from this LIST, so a fresh observer
    /// reports the whole duration: an upper bound); the strategy takes a
    /// slot over only its takeover margin later. A Lease unchanged for its
    /// whole duration shows as free. `renewed_ago` and `held_for` come from
    /// `renewTime` and `acquireTime`, which the holder wrote on its wall
    /// clock, read on this host's wall clock: for people, never for expiry.
    /// The fence is the one the holder recorded in the `leasehold/fence`
    /// annotation (renewals, releases and revokes write it) when its token
    /// digits match, else the resourceVersion, which is still the acquiring
    /// write's until the holder's first renewal. `holderIdentity` shows
    /// the holder and only the first 8 hex digits of its token.
    async fn inspect(&self, pool: &PoolSpec) -> Result<Vec<SlotInfo>, InspectError> {
        self.inspect_pool(pool).await
    }

    fn capabilities(&self) -> Capabilities {
        Self::CAPABILITIES
    }

    fn identity(&self) -> String {
        self.inner.identity.clone()
    }
}

impl std::fmt::Debug for KubeStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeStrategy")
            .field("identity", &self.inner.identity)
            .field("op_timeout", &self.inner.api.op_timeout)
            .field("takeover_margin", &self.inner.takeover_margin)
            .finish_non_exhaustive()
    }
}
