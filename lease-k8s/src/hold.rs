//! Holding a grant: renew (1 round trip, a JSON Patch whose first op
//! `test`s the holder identity; 422 is confirmed with one GET) and release
//! (the same `test`, then an empty holder).

use leasehold_core::{Grant, PoolSpec, Reason, Release, Renewal};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::lease::{floor_of, holder_of};
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
                        Ok(Some(floor)) => {
                            known = Some(floor);
                            self.inner.caches.set_floor(grant.token, floor);
                            continue;
                        }
                        Ok(None) => return Renewal::Lost(lost_reason(&name)),
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
                    Ok(None) => return Renewal::Lost(lost_reason(&name)),
                    Ok(Some(floor)) if raise.is_some() && Some(floor) != known => {
                        // Our floor test failed, not the holder test: a
                        // renewal whose answer was lost had landed.
                        known = Some(floor);
                        self.inner.caches.set_floor(grant.token, floor);
                    }
                    Ok(Some(_)) => {
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

    /// GETs `name`: `Some(stored floor)` when `holder_id` holds it, `None`
    /// when it is gone or held by another.
    async fn read_holder(
        &self,
        name: &str,
        holder_id: &str,
        deadline: Instant,
    ) -> Result<Option<u64>, Reason> {
        match self.inner.api.get(name, deadline).await {
            Ok(resp) if resp.status == 404 => Ok(None),
            Ok(resp) if resp.status == 200 => {
                let lease = resp.lease().map_err(Reason::new)?;
                Ok((holder_of(&lease) == holder_id).then(|| floor_of(&lease)))
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
                Ok(None) => Release::NotHeld,
                Ok(Some(_)) => {
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

fn lost_reason(name: &str) -> Reason {
    Reason::new(format!("Lease {name} is held by another holder or gone"))
}
