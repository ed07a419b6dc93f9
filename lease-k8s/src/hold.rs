//! Holding a grant: renew (1 round trip, a JSON Patch whose first op
//! `test`s the holder identity; 422 is confirmed with one GET) and release
//! (the same `test`, then an empty holder).

use leasehold_core::{Grant, PoolSpec, Reason, Release, Renewal};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::lease::{damaged_floor_text, floor_fix, floor_of, holder_of};
use crate::names::{FENCE_POINTER, FLOOR_POINTER, fence_record, holder_identity, lease_name};
use crate::protocol::ttl_secs;
use crate::strategy::KubeStrategy;
use crate::time::{micro_time, unique_micros};

impl KubeStrategy {
    /// Renews `grant`, raising the stored floor to `ceiling` when given.
    pub(crate) async fn renew_grant(
        &self,
        pool: &PoolSpec,
        grant: &Grant,
        ceiling: Option<u64>,
        deadline: Instant,
    ) -> Renewal {
        let api = &self.inner.api;
        let name = lease_name(pool.name(), grant.slot);
        let holder_id = holder_identity(pool.holder(), &grant.token);
        let Ok(secs) = ttl_secs(pool.ttl()) else {
            return Renewal::Retry(Reason::new("ttl below 1s"));
        };
        let mut known = self.inner.caches.floor(&grant.token);
        for _ in 0..3 {
            let mut ops =
                vec![json!({"op": "test", "path": "/spec/holderIdentity", "value": holder_id})];
            let raise = match (ceiling, known) {
                (Some(c), Some(k)) if c > k => {
                    ops.push(json!({"op": "test", "path": FLOOR_POINTER, "value": k.to_string()}));
                    ops.push(json!({"op": "add", "path": FLOOR_POINTER, "value": c.to_string()}));
                    Some(c)
                }
                (Some(_), None) => {
                    // Not stored by this process: learn it, then renew.
                    match self.read_holder(&name, &holder_id, deadline).await {
                        Ok(Read::Ours(floor)) => {
                            known = Some(floor);
                            self.inner.caches.set_floor(grant.token, floor);
                            continue;
                        }
                        Ok(Read::Gone) => return Renewal::Lost(lost_reason(&name)),
                        Ok(Read::DamagedFloor(stored)) => {
                            return Renewal::Lost(self.damaged(pool, grant, &name, &stored));
                        }
                        Err(r) => return Renewal::Retry(r),
                    }
                }
                _ => None,
            };
            ops.push(json!({"op": "add", "path": "/spec/renewTime", "value": micro_time(unique_micros())}));
            ops.push(json!({"op": "add", "path": "/spec/leaseDurationSeconds", "value": secs}));
            ops.push(json!({"op": "add", "path": FENCE_POINTER, "value": fence_record(&grant.token, grant.fence.0)}));
            let resp = match api.json_patch(&name, &Value::Array(ops), deadline).await {
                Ok(r) => r,
                Err(e) => {
                    return Renewal::Retry(Reason::new(format!("renewing {name}: {}", e.text())));
                }
            };
            match resp.status {
                200 => {
                    if let Some(c) = raise {
                        self.inner.caches.set_floor(grant.token, c);
                    }
                    return Renewal::renewed(pool.ttl());
                }
                404 => return Renewal::Lost(Reason::new(format!("Lease {name} was deleted"))),
                422 => match self.read_holder(&name, &holder_id, deadline).await {
                    Ok(Read::Gone) => return Renewal::Lost(lost_reason(&name)),
                    // Our floor test failed on a floor no renewal can
                    // raise: left as found, for an operator.
                    Ok(Read::DamagedFloor(stored)) => {
                        return Renewal::Lost(self.damaged(pool, grant, &name, &stored));
                    }
                    Ok(Read::Ours(floor)) if raise.is_some() && Some(floor) != known => {
                        // Our floor test failed, not the holder test: a
                        // renewal whose answer was lost had landed.
                        known = Some(floor);
                        self.inner.caches.set_floor(grant.token, floor);
                    }
                    Ok(Read::Ours(_)) => {
                        return Renewal::Retry(Reason::new(format!(
                            "renewing {name}: {} although the Lease is still ours",
                            resp.message()
                        )));
                    }
                    Err(r) => return Renewal::Retry(r),
                },
                _ => {
                    return Renewal::Retry(Reason::new(format!(
                        "renewing {name}: {}",
                        resp.message()
                    )));
                }
            }
        }
        Renewal::Retry(Reason::new(format!(
            "renewing {name}: the floor kept changing"
        )))
    }

    /// Why the renewal of `grant` (its Lease `name`) ends over the
    /// unreadable floor annotation `stored`.
    fn damaged(&self, pool: &PoolSpec, grant: &Grant, name: &str, stored: &str) -> Reason {
        let ns = &self.inner.api.namespace;
        Reason::new(format!(
            "slot {} of pool {}: {}; the renewal leaves it as found, so stop using the slot: no \
             claim is granted over it until it is repaired: {}",
            grant.slot,
            pool.name(),
            damaged_floor_text(name, ns, stored),
            floor_fix(pool, grant.slot, ns)
        ))
    }

    /// GETs `name`: whether `holder_id` holds it, and its floor.
    async fn read_holder(
        &self,
        name: &str,
        holder_id: &str,
        deadline: Instant,
    ) -> Result<Read, Reason> {
        match self.inner.api.get(name, deadline).await {
            Ok(resp) if resp.status == 404 => Ok(Read::Gone),
            Ok(resp) if resp.status == 200 => {
                let lease = resp.lease().map_err(Reason::new)?;
                if holder_of(&lease) != holder_id {
                    return Ok(Read::Gone);
                }
                Ok(match floor_of(&lease) {
                    Ok(floor) => Read::Ours(floor),
                    Err(stored) => Read::DamagedFloor(stored),
                })
            }
            Ok(resp) => Err(Reason::new(format!("reading {name}: {}", resp.message()))),
            Err(e) => Err(Reason::new(format!("reading {name}: {}", e.text()))),
        }
    }

    /// Releases `grant`, storing `issued` as the floor when given.
    pub(crate) async fn release_grant(
        &self,
        pool: &PoolSpec,
        grant: &Grant,
        issued: Option<u64>,
    ) -> Release {
        let api = &self.inner.api;
        let name = lease_name(pool.name(), grant.slot);
        let holder_id = holder_identity(pool.holder(), &grant.token);
        let deadline = Instant::now() + api.op_timeout.min(pool.ttl());
        let mut ops = vec![
            json!({"op": "test", "path": "/spec/holderIdentity", "value": holder_id}),
            json!({"op": "add", "path": "/spec/holderIdentity", "value": ""}),
            json!({"op": "add", "path": "/spec/leaseDurationSeconds", "value": 1}),
            json!({"op": "add", "path": "/spec/renewTime", "value": micro_time(unique_micros())}),
            json!({"op": "add", "path": FENCE_POINTER, "value": fence_record(&grant.token, grant.fence.0)}),
        ];
        if let Some(floor) = issued {
            ops.push(json!({"op": "add", "path": FLOOR_POINTER, "value": floor.to_string()}));
        }
        let resp = match api.json_patch(&name, &Value::Array(ops), deadline).await {
            Ok(r) => r,
            Err(e) => {
                return Release::Retry(Reason::new(format!("releasing {name}: {}", e.text())));
            }
        };
        let outcome = match resp.status {
            200 => Release::Released,
            404 => Release::NotHeld,
            422 => match self.read_holder(&name, &holder_id, deadline).await {
                Ok(Read::Gone) => Release::NotHeld,
                Ok(Read::Ours(_) | Read::DamagedFloor(_)) => {
                    Release::Retry(Reason::new(format!("releasing {name}: {}", resp.message())))
                }
                Err(r) => Release::Retry(r),
            },
            _ => Release::Retry(Reason::new(format!("releasing {name}: {}", resp.message()))),
        };
        if !matches!(outcome, Release::Retry(_)) {
            self.inner.caches.forget_floor(&grant.token);
        }
        outcome
    }
}

/// What a GET of a held Lease found.
enum Read {
    /// This holder holds it; its floor.
    Ours(u64),
    /// Gone, or held by another.
    Gone,
    /// This holder holds it, but its floor annotation is unreadable (the
    /// value stored).
    DamagedFloor(String),
}

fn lost_reason(name: &str) -> Reason {
    Reason::new(format!("Lease {name} is held by another holder or gone"))
}
