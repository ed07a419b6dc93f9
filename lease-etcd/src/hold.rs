//! Holding a grant: renew (`LeaseKeepAlive` beside a token-guarded
//! transaction) and release (one token-guarded transaction, then the lease
//! is revoked).

use etcd_client::{GetOptions, Txn, TxnOp, TxnOpResponse, TxnResponse};
use leasehold_core::{Floor, Grant, PoolSpec, Reason, Release, Renewal};

use crate::call::{Replay, Sent};
use crate::damaged;
use crate::error::Class;
use crate::keys;
use crate::strategy::EtcdStrategy;

impl EtcdStrategy {
    /// Renews `grant`, raising the floor to `ceiling`: see [`EtcdStrategy`].
    pub(crate) async fn renew_grant(
        &self,
        pool: &PoolSpec,
        grant: &Grant,
        ceiling: Floor,
    ) -> Renewal {
        let key = self.slot_key(pool.name(), grant.slot);
        let fence = i64::try_from(grant.fence.0).unwrap_or(-1);
        if self.take_flagged_lost(&key, fence) {
            return Renewal::Lost(Reason::new(
                "the watch saw the slot key deleted or rewritten",
            ));
        }
        let Some(lease_id) = keys::lease_id(&grant.token) else {
            return Renewal::Lost(Reason::new("the grant's token maps to no etcd lease"));
        };
        // The ownership check and the floor in one transaction: the floor is
        // raised only while the key is still ours (create revision, lease and
        // token; a revoke's tombstone keeps the first two but not the token),
        // and otherwise the key is read back to say why. It replaces the
        // read the renewal sent before floors were kept: still two requests
        // in parallel, one round trip. The keep-alive sent beside it may
        // extend a revoke's tombstone (same lease) by up to one TTL once: the
        // slot stays taken longer, never shorter, and after this `Lost` the
        // holder renews no more.
        let floor_key = keys::floor_key(&self.inner.prefix, pool.name(), grant.slot);
        // The floor as it was is read in the same step, to refuse a damaged
        // one (`damaged.rs`).
        let txn = Txn::new()
            .when(keys::owned(&key, fence, lease_id, &grant.token))
            .and_then([
                TxnOp::get(floor_key.clone(), None),
                keys::raise_floor(&floor_key, ceiling),
            ])
            .or_else([TxnOp::get(key.clone(), None)]);
        let (alive, checked) = tokio::join!(
            self.call("LeaseKeepAlive", |mut c| async move {
                c.lease_keep_alive(lease_id).await
            }),
            // Guarded by the token, and `max` is idempotent: safe to repeat.
            self.call("Txn", |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            }),
        );
        // A positive answer from either request decides: the key is gone,
        // someone else's or revoked, or the lease no longer exists.
        match &checked {
            Ok(resp) if !resp.succeeded() => {
                let found = resp.op_responses().into_iter().find_map(|op| match op {
                    TxnOpResponse::Get(get) => Some(get.kvs().first().cloned()),
                    _ => None,
                });
                return Renewal::Lost(Reason::new(match found.flatten() {
                    None => format!(
                        "slot key {key} no longer exists (lease expired or revoked, or deleted)"
                    ),
                    Some(kv) if kv.value() == keys::TOMBSTONE.as_bytes() => {
                        format!("slot key {key} was revoked by an operator")
                    }
                    Some(kv) => format!(
                        "slot key {key} now belongs to another holder (create revision {}, ours {fence})",
                        kv.create_revision()
                    ),
                }));
            }
            Ok(resp) => {
                if let Some(old) = damaged_floor(resp) {
                    // The raise may have replaced it: put it back, for an
                    // operator to repair, and stop using the slot.
                    let restored = self.restore_floor(&floor_key, ceiling, &old).await;
                    let mut why = format!(
                        "slot {} of pool {}: {}; the renewal leaves it as found, so stop using \
                         the slot: no claim is granted over it until it is repaired: {}",
                        grant.slot,
                        pool.name(),
                        damaged::floor_text(&floor_key, &old),
                        damaged::floor_fix(&floor_key, pool)
                    );
                    if let Err(class) = restored {
                        why.push_str(&format!(
                            " (putting it back after the renewal raised it failed: {})",
                            class.reason()
                        ));
                    }
                    return Renewal::Lost(Reason::new(why));
                }
            }
            Err(Class::NotFound(m)) => return Renewal::Lost(Reason::new(m.clone())),
            Err(_) => {}
        }
        match alive {
            Ok(_) => {}
            // Expired or revoked: etcd answers TTL 0 (see `classify`).
            Err(Class::NotFound(m)) => {
                return Renewal::Lost(Reason::new(format!("etcd lease {lease_id:x} is gone: {m}")));
            }
            Err(class) => return Renewal::Retry(class.reason()),
        }
        if let Err(class) = checked {
            return Renewal::Retry(class.reason());
        }
        if self.take_flagged_lost(&key, fence) {
            return Renewal::Lost(Reason::new(
                "the watch saw the slot key deleted or rewritten",
            ));
        }
        Renewal::renewed(grant.ttl)
    }

    /// Releases `grant`, leaving `issued` as the floor: see [`EtcdStrategy`].
    pub(crate) async fn release_grant(
        &self,
        pool: &PoolSpec,
        grant: &Grant,
        issued: Floor,
    ) -> Release {
        let key = self.slot_key(pool.name(), grant.slot);
        let fence = i64::try_from(grant.fence.0).unwrap_or(-1);
        // This holding is over whatever the answer: a loss flag for it has
        // nothing left to answer.
        self.inner.lost.forget(&key, fence);
        let Some(lease_id) = keys::lease_id(&grant.token) else {
            return Release::NotHeld;
        };
        // Free the slot and leave what was issued as its floor, in one step
        // and only while the key is still ours (not another holder's, not a
        // revoke's tombstone).
        let floor_key = keys::floor_key(&self.inner.prefix, pool.name(), grant.slot);
        let txn = Txn::new()
            .when(keys::owned(&key, fence, lease_id, &grant.token))
            .and_then([
                TxnOp::delete(key.clone(), None),
                TxnOp::put(floor_key, keys::encode_floor(issued), None),
            ])
            .or_else([TxnOp::get(key, Some(GetOptions::new().with_keys_only()))]);
        let mut sent = Sent::default();
        // Guarded by our create revision, lease and token: sending it again
        // after a broken connection can only free our own key, and once it
        // is gone the guard fails, so the floor of a later holder is never
        // overwritten.
        let outcome = match self
            .call_counted("Txn", &mut sent, Replay::Safe, |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await
        {
            Ok(resp) if resp.succeeded() => Release::Released,
            // An earlier send may have deleted it already: the key being gone
            // is then our own release.
            Ok(resp) if sent.replayed && key_absent(&resp) => Release::Released,
            Ok(_) => Release::NotHeld,
            Err(class) => return Release::Retry(class.reason()),
        };
        // The key is gone, not ours, or a revoke's tombstone on our lease.
        // Revoking our lease drops that tombstone before its expiry, which
        // is safe: the lease manager releases only after it closed the gate (rule
        // 4), so nothing is generated under this grant any more, and every
        // timestamp it could issue is at most a ceiling the floor key already
        // holds (acquire and renewals raised it; a revoke leaves it alone),
        // so the next holder starts after them, with a bigger fence.
        let _ = self
            .call("LeaseRevoke", |mut c| async move {
                c.lease_revoke(lease_id).await
            })
            .await;
        outcome
    }
}

/// The floor a successful renewal transaction read before raising it, when
/// it is not a floor (`keys::decode_floor`).
fn damaged_floor(resp: &TxnResponse) -> Option<Vec<u8>> {
    let ops = resp.op_responses();
    let Some(TxnOpResponse::Get(read)) = ops.first() else {
        return None;
    };
    let kv = read.kvs().first()?;
    keys::decode_floor(kv.value())
        .is_none()
        .then(|| kv.value().to_vec())
}

/// True when the `or_else` read of a failed release transaction found no key.
fn key_absent(resp: &TxnResponse) -> bool {
    resp.op_responses().iter().all(|op| match op {
        TxnOpResponse::Get(get) => get.kvs().is_empty(),
        _ => true,
    })
}
