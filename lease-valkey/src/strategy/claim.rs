//! Claiming a slot: one script on the path in use, then, when the claim
//! asks for it, the wait for its fsync or replicas.

use std::time::Duration;

use leasehold_core::{AcquireError, Fence, Floor, Grant, PoolSpec, Reason, Strategy, Token};

use super::answers::{Claim, parse_claim, span_ms, ttl_ms};
use super::{ActivePath, PoolKeys, ValkeyStrategy, damaged};
use crate::error::Failure;

impl ValkeyStrategy {
    /// Claims a free slot of `pool` ([`Strategy::acquire`]).
    pub(super) async fn claim(
        &self,
        pool: &PoolSpec,
        ceiling: Floor,
    ) -> Result<Grant, AcquireError> {
        // A server this configuration does not accept, connected to only
        // to be looked at, or whose settings changed since connect to what
        // connect would refuse: nothing is claimed on it.
        self.watch(pool.ttl()).await;
        if let Some(refusal) = self.refusal() {
            let (what, fix) = leasehold_core::operate::split_refusal(&refusal);
            return Err(AcquireError::Misconfigured { what, fix });
        }
        let Some((ttl, applied)) = ttl_ms(pool.ttl()) else {
            return Err(AcquireError::Misconfigured {
                what: format!("ttl {:?} is below the store's 1 ms resolution", pool.ttl()),
                fix: format!("use a ttl of at least {:?}", Self::MIN_TTL),
            });
        };
        let keys = self.keys(pool.name());
        let wait_keys = keys.clone();
        let fences_key = keys.fences.clone();
        let token = Token::random();
        let ceiling = ceiling.unix_millis().to_string();
        let span = span_ms(pool.restart_span()).to_string();
        let guard = if self.guard_on() { "1" } else { "0" }.to_owned();
        let promotion = if self.guard_on() { "1" } else { "0" }.to_owned();
        let format = pool.id_format().map_or("", |f| f.text()).to_owned();
        let result = match self.inner.path {
            ActivePath::Unsupported => return Err(self.unsupported()),
            ActivePath::Hsetex => {
                self.eval(
                    &self.inner.scripts.claim_hsetex,
                    vec![keys.leases, keys.fences],
                    vec![
                        pool.size().to_string(),
                        ttl,
                        token.to_hex(),
                        ceiling,
                        keys.slot_prefix,
                        span.clone(),
                        pool.holder().to_owned(),
                        guard,
                        format.clone(),
                        promotion,
                    ],
                )
                .await
            }
            ActivePath::Scripts => {
                self.eval(
                    &self.inner.scripts.claim_scripts,
                    vec![keys.fences, keys.leases],
                    vec![
                        pool.size().to_string(),
                        ttl,
                        token.to_hex(),
                        keys.slot_prefix,
                        ceiling,
                        span.clone(),
                        pool.holder().to_owned(),
                        guard,
                        format.clone(),
                        promotion,
                    ],
                )
                .await
            }
        };
        let value = match result {
            Ok(value) => value,
            Err(Failure::Denied(refusal)) => {
                return Err(AcquireError::Misconfigured {
                    what: format!("{} refused the claim to this user", self.inner.server),
                    fix: self.explain_refusal(&refusal).await,
                });
            }
            Err(f) => return Err(self.claim_failure(pool, f)),
        };
        match parse_claim(&value) {
            Some(Claim::Granted {
                slot,
                fence,
                floor,
                at,
                unconfirmed,
            }) => {
                let grant = Grant::new(slot, token, Fence(fence), applied)
                    .with_floor(floor)
                    .with_store_time(at);
                self.confirm(pool, &wait_keys, grant, unconfirmed, &span)
                    .await
            }
            Some(Claim::OtherIdFormat(recorded)) => Err(AcquireError::OtherIdFormat {
                pool: pool.name().to_string(),
                recorded,
                ours: format,
            }),
            Some(Claim::Restarted(ms)) => Err(AcquireError::StoreRestarted {
                resume_in: Duration::from_millis(ms),
            }),
            Some(Claim::Wiped(ms)) => Err(self.wiped(pool, Duration::from_millis(ms))),
            Some(Claim::Full) => Err(AcquireError::PoolExhausted {
                pool: pool.name().to_string(),
                size: pool.size(),
            }),
            Some(Claim::FencesLost) => Err(self.fences_lost(pool, &fences_key)),
            Some(Claim::FenceUnusable { slot, fence }) => {
                Err(damaged::fence_refused(pool, &fences_key, slot, &fence))
            }
            Some(Claim::Damaged { slot, field, value }) => Err(damaged::claim_refused(
                pool,
                &fences_key,
                slot,
                &field,
                &value,
            )),
            None => Err(AcquireError::Misconfigured {
                what: format!("unexpected answer to the claim script: {value:?}"),
                fix: "report this as a leasehold bug, with the server version".into(),
            }),
        }
    }

    /// The acquisition error of a claim script that failed.
    fn claim_failure(&self, pool: &PoolSpec, f: Failure) -> AcquireError {
        match f {
            Failure::Transient(r) => AcquireError::Unreachable(Reason::new(r)),
            Failure::NoScript => AcquireError::Unreachable(Reason::new(
                "the server lost the claim script twice in a row",
            )),
            Failure::Denied(r) => AcquireError::Misconfigured {
                what: format!("{} refused the claim: {r}", self.inner.server),
                fix: format!(
                    "check the password, and grant the user the lease user's ACL: {}",
                    self.lease_user_acl()
                ),
            },
            Failure::Rejected(r) => AcquireError::Misconfigured {
                what: format!("{} rejected the claim: {r}", self.inner.server),
                fix: format!(
                    "make sure nothing but leasehold writes the keys {{{}:{}}}:*",
                    self.inner.config.prefix,
                    pool.name()
                ),
            },
        }
    }

    /// Uses `grant` once what it relies on is proven: on disk when the
    /// claim was unconfirmed and claims wait for the fsync, and on the
    /// replicas [`ValkeyConfig::wait_for_replicas`](crate::ValkeyConfig::wait_for_replicas)
    /// asks for. Otherwise releases it: nothing was issued under it.
    async fn confirm(
        &self,
        pool: &PoolSpec,
        wait_keys: &PoolKeys,
        grant: Grant,
        unconfirmed: bool,
        span: &str,
    ) -> Result<Grant, AcquireError> {
        let slot = grant.slot;
        if self.fsync_claims()
            && unconfirmed
            && let Err(why) = self.wait_for_fsync(wait_keys, &grant, span).await
        {
            // The span that tells the guard how long this lease may
            // outlive a restart, or the pool's ID format this claim
            // recorded, may not be on disk: a crash could forget
            // it. Nothing was issued under it.
            let _ = self.release(pool, &grant, grant.floor).await;
            return Err(AcquireError::Unreachable(Reason::new(format!(
                "claimed slot {slot} but {why}; released it"
            ))));
        }
        if let Err(why) = self.wait_for_replicas(wait_keys, &grant).await {
            // Not on enough replicas: a failover could forget it.
            // Nothing was issued under it, so the floor goes back.
            let _ = self.release(pool, &grant, grant.floor).await;
            return Err(AcquireError::Unreachable(Reason::new(format!(
                "claimed slot {slot} but {why}; released it"
            ))));
        }
        Ok(grant)
    }

    /// The pool's fences hash was lost while leases of the pool remained.
    pub(super) fn fences_lost(&self, pool: &PoolSpec, fences_key: &str) -> AcquireError {
        AcquireError::Misconfigured {
            what: format!(
                "the fences hash {fences_key} of pool {} was lost (evicted, deleted, or not \
                 replicated before a failover) while leases of the pool remained: fences \
                 would restart at 1 and floors at 0, below what earlier holders used, so \
                 {} grants no slot of this pool",
                pool.name(),
                self.inner.server
            ),
            fix: format!(
                "keep the server from losing data (maxmemory-policy noeviction; AOF or RDB; \
                 WAIT for replicas), then restore {fences_key} from a backup, or set every \
                 slot's fence above any fence used before (HSET {fences_key} <slot> <n>) and \
                 its floor to at least {floor} (HSET {fences_key} floor.<slot> {floor}: this \
                 host's Unix time in ms plus the pool's TTL and twice its max_clock_skew, above \
                 anything a holder can have stamped) and, if the pool's processes declare an \
                 ID format, record it again (HSET {fences_key} id_format <text>), and delete \
                 the marker (HDEL {fences_key} lost)",
                floor = Floor::above_every_holder(pool).unix_millis()
            ),
        }
    }
}
