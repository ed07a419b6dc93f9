//! Renewing and releasing a held slot: one script each, on the path in use.

use fred::types::Value;
use leasehold_core::{Floor, Grant, PoolSpec, Reason, Release, Renewal};

use super::answers::{Renewed, parse_renewal, ttl_ms};
use super::{ActivePath, ValkeyStrategy, damaged};
use crate::error::Failure;

impl ValkeyStrategy {
    /// Renews `grant` ([`Strategy::renew`](leasehold_core::Strategy::renew)).
    pub(super) async fn renew_lease(
        &self,
        pool: &PoolSpec,
        grant: &Grant,
        ceiling: Floor,
    ) -> Renewal {
        let Some((ttl, applied)) = ttl_ms(pool.ttl()) else {
            return Renewal::Lost(Reason::new("ttl below 1 ms"));
        };
        let keys = self.keys(pool.name());
        let wait_keys = keys.clone();
        let slot = grant.slot.to_string();
        let ceiling = ceiling.unix_millis().to_string();
        // The settings are read again alongside, when due: their round
        // trips overlap the renewal's instead of following it.
        let script = async {
            match self.inner.path {
                ActivePath::Unsupported => None,
                // Both fields exist only while this token holds the slot: they
                // were written together with one TTL and vanish together. A
                // script, so that the floor is raised in the same atomic step.
                ActivePath::Hsetex => Some(
                    self.eval(
                        &self.inner.scripts.renew_hsetex,
                        vec![keys.leases, keys.fences],
                        vec![slot, grant.token.to_hex(), ttl, ceiling],
                    )
                    .await,
                ),
                ActivePath::Scripts => Some(
                    self.eval(
                        &self.inner.scripts.renew_scripts,
                        vec![keys.slot_key(grant.slot), keys.fences],
                        vec![grant.token.to_hex(), ttl, slot, ceiling],
                    )
                    .await,
                ),
            }
        };
        let (result, ()) = tokio::join!(script, self.watch(pool.ttl()));
        let Some(result): Option<Result<Value, Failure>> = result else {
            return Renewal::Lost(Reason::new(self.unsupported().to_string()));
        };
        if let Some(why) = self.replica_refusal() {
            return Renewal::Retry(Reason::new(why));
        }
        match result.as_ref().map(parse_renewal) {
            Ok(Some(Renewed::At(at))) => match self.wait_for_replicas(&wait_keys, grant).await {
                Ok(()) => Renewal::renewed(applied).with_store_time(at),
                Err(why) => Renewal::Retry(Reason::new(format!("renewed, but {why}"))),
            },
            Ok(Some(Renewed::NotHeld)) => Renewal::Lost(Reason::new(format!(
                "slot {} is no longer held by this token (expired, taken or revoked)",
                grant.slot
            ))),
            // Raising it to this holder's ceiling could put it below the
            // slot's real floor (the holder may still wait for its clock):
            // left as found, for an operator.
            Ok(Some(Renewed::DamagedFloor(value))) => Renewal::Lost(Reason::new(format!(
                "slot {} of pool {}: {}; the renewal leaves it as found, so stop using the slot: \
                 no claim is granted over it until it is repaired: {}",
                grant.slot,
                pool.name(),
                damaged::floor_text(&wait_keys.fences, grant.slot, &value),
                damaged::floor_fix(&wait_keys.fences, pool, grant.slot)
            ))),
            Ok(None) => Renewal::Retry(Reason::new(format!(
                "unexpected answer to the renewal: {result:?}"
            ))),
            Err(Failure::Rejected(r)) => {
                Renewal::Lost(Reason::new(format!("the server rejected the renewal: {r}")))
            }
            Err(Failure::Denied(refusal)) => {
                Renewal::Retry(Reason::new(self.explain_refusal(refusal).await))
            }
            Err(f) => Renewal::Retry(Reason::new(f.text().to_owned())),
        }
    }

    /// Releases `grant` ([`Strategy::release`](leasehold_core::Strategy::release)).
    pub(super) async fn release_lease(
        &self,
        pool: &PoolSpec,
        grant: &Grant,
        issued: Floor,
    ) -> Release {
        let keys = self.keys(pool.name());
        let issued = issued.unix_millis().to_string();
        let result = match self.inner.path {
            ActivePath::Unsupported => return Release::NotHeld,
            ActivePath::Hsetex => {
                self.eval(
                    &self.inner.scripts.release_hsetex,
                    vec![keys.leases, keys.fences],
                    vec![grant.slot.to_string(), grant.token.to_hex(), issued],
                )
                .await
            }
            ActivePath::Scripts => {
                self.eval(
                    &self.inner.scripts.release_scripts,
                    vec![keys.slot_key(grant.slot), keys.fences],
                    vec![grant.slot.to_string(), grant.token.to_hex(), issued],
                )
                .await
            }
        };
        match result {
            Ok(Value::Integer(1)) => Release::Released,
            Ok(Value::Integer(0)) => Release::NotHeld,
            Ok(other) => Release::Retry(Reason::new(format!(
                "unexpected answer to the release: {other:?}"
            ))),
            Err(Failure::Denied(refusal)) => {
                Release::Retry(Reason::new(self.explain_refusal(&refusal).await))
            }
            Err(f) => Release::Retry(Reason::new(f.text().to_owned())),
        }
    }
}
