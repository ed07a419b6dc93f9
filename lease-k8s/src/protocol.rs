//! The decisions of the acquire protocol, free of I/O: which slots of one
//! LIST may be taken now and when the others may, what write claims a slot,
//! what its answer means, whether the pool's ID format matches ours, and
//! what a revoke writes. `acquire.rs` sends what these decide.

use std::collections::HashMap;
use std::ops::Range;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use leasehold_core::observed::{self, Sighting, Standing};
use leasehold_core::{AcquireError, IdFormat, PoolSpec, Reason};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::api::{NoAnswer, Resp};
use crate::cache::Observed;
use crate::lease::{Slot, fence_of, holder_of};
use crate::names::{
    FENCE_ANNOTATION, FLOOR_ANNOTATION, FORMAT_ANNOTATION, POOL_LABEL, SLOT_LABEL, TOMBSTONE,
    check_pool, format_name, lease_name, split_identity,
};

/// The smallest TTL: `leaseDurationSeconds` counts whole seconds and must
/// be > 0.
pub(crate) const MIN_TTL: Duration = Duration::from_secs(1);
/// The largest pool: one LIST reads every Lease of the pool.
pub(crate) const MAX_POOL_SIZE: u32 = 4096;
/// Writes one acquisition sends after one LIST before it lists again.
pub(crate) const WRITES_PER_LIST: u32 = 4;
/// LISTs one acquisition sends before it answers `Contention` (unless the
/// lease duration runs out first).
pub(crate) const MAX_LISTS: u32 = 16;

/// A retryable error of an acquisition: `what` failed with `detail`.
pub(crate) fn unreachable(what: &str, detail: &str) -> AcquireError {
    AcquireError::Unreachable(Reason::new(format!("{what}: {detail}")))
}

/// Checks what an acquisition of `pool` (only `pinned` when given) asks
/// before anything is sent; returns `leaseDurationSeconds`.
pub(crate) fn check_request(pool: &PoolSpec, pinned: Option<u32>) -> Result<i32, AcquireError> {
    check_pool(pool.name())?;
    if pool.size() > MAX_POOL_SIZE {
        return Err(AcquireError::Misconfigured {
            what: format!(
                "pool {} has {} slots; the Kubernetes strategy supports up to {}",
                pool.name(),
                pool.size(),
                MAX_POOL_SIZE
            ),
            fix: format!("use a pool of at most {MAX_POOL_SIZE} slots"),
        });
    }
    if let Some(slot) = pinned
        && slot >= pool.size()
    {
        return Err(AcquireError::Misconfigured {
            what: format!(
                "the ordinal gives slot {slot}, outside pool {} of size {}",
                pool.name(),
                pool.size()
            ),
            fix: format!("raise the pool size above {slot}"),
        });
    }
    ttl_secs(pool.ttl())
}

/// `leaseDurationSeconds`: whole seconds, rounded up, > 0.
pub(crate) fn ttl_secs(ttl: Duration) -> Result<i32, AcquireError> {
    if ttl < MIN_TTL {
        return Err(AcquireError::Misconfigured {
            what: format!(
                "ttl {ttl:?} is too short for Kubernetes Leases: leaseDurationSeconds counts whole \
                 seconds and must be at least 1"
            ),
            fix: "set ttl to at least 1s".to_owned(),
        });
    }
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    Ok(i32::try_from(secs).unwrap_or(i32::MAX))
}

/// When a Lease held at `rv` may be taken over, judged on this observer's
/// clock: its first sighting at that resourceVersion plus the longer of its
/// duration and our `ttl`, plus `margin` and 2% of that wait
/// (`leasehold_core::observed`, which the simulator runs too). `None` when
/// this process has not seen the Lease at `rv`.
pub(crate) fn takeover_at(
    seen: Option<&Observed>,
    rv: &str,
    duration: Duration,
    ttl: Duration,
    margin: Duration,
) -> Option<Instant> {
    let seen = seen?;
    Sighting::new(seen.rv.as_str(), seen.at).takeover_at(&rv, duration, ttl, margin)
}

/// The slots an acquisition considers: only the pinned one, or the pool.
pub(crate) fn slot_range(size: u32, pinned: Option<u32>) -> Range<u32> {
    match pinned {
        Some(s) => s..s + 1,
        None => 0..size,
    }
}

/// What one LIST allows: the slots that may be taken now, with their state
/// (absent, free, or held but unchanged past its takeover time), and the
/// earliest takeover time of the held slots not yet takeable.
pub(crate) type Choice = observed::Choice<Slot, Instant>;

/// Chooses from `slots` (a LIST's states; a slot missing is absent) over
/// `range` at `now`. A held slot (also a revoked holder's tombstone) is a
/// candidate only once `takeover(slot, rv, duration)` has passed; one this
/// process never saw at its resourceVersion is passed by
/// (`leasehold_core::observed::choose`).
pub(crate) fn choose(
    slots: &HashMap<u32, Slot>,
    range: Range<u32>,
    now: Instant,
    mut takeover: impl FnMut(u32, &str, Duration) -> Option<Instant>,
) -> Choice {
    let listed = range.map(|slot| (slot, slots.get(&slot).cloned().unwrap_or(Slot::Absent)));
    observed::choose(listed, now, |slot, state| match state {
        Slot::Held { rv, duration, .. } => Standing::Held(takeover(slot, rv, *duration)),
        Slot::Absent | Slot::Free { .. } => Standing::Takeable,
    })
}

/// The answer when a LIST left no candidate: for a pinned slot, contention
/// naming its holder and when it may be taken over; else the pool is
/// exhausted.
pub(crate) fn nothing_takeable(
    pool: &PoolSpec,
    pinned: Option<u32>,
    slots: &HashMap<u32, Slot>,
    wait: Option<Duration>,
) -> AcquireError {
    let Some(slot) = pinned else {
        return AcquireError::PoolExhausted {
            pool: pool.name().to_string(),
            size: pool.size(),
        };
    };
    AcquireError::Contention(Reason::new(format!(
        "slot {slot} of pool {} is held by {}; another pod with the same ordinal (a force-deleted \
         pod may still run) holds it; it can be taken over in {} if its holder stops renewing",
        pool.name(),
        match slots.get(&slot) {
            Some(Slot::Held { holder, .. }) => holder.as_str(),
            _ => "another holder",
        },
        wait.map_or("a lease duration".to_owned(), |w| format!(
            "{:.1}s",
            w.as_secs_f64()
        )),
    )))
}

/// One acquiring write, as decided.
#[derive(Debug)]
pub(crate) struct Write {
    /// `"create"` (POST of a new Lease) or `"patch"` (merge PATCH on the
    /// observed resourceVersion).
    pub(crate) verb: &'static str,
    /// The Lease to create or the merge patch.
    pub(crate) body: Value,
    /// The slot's floor before this claim (the grant's floor).
    pub(crate) prev_floor: u64,
    /// The floor the write stores: the higher of that and our ceiling.
    pub(crate) stored_floor: u64,
}

/// The write that claims `slot` in `state` for `holder_id`: an absent slot
/// is created with our labels, transitions 0 and our ceiling as its floor; a
/// free or taken-over one is patched on the resourceVersion we saw, one
/// transition more, its floor raised to our ceiling. `now` is the
/// MicroTime written as acquire and renew time.
pub(crate) fn acquiring_write(
    pool: &PoolSpec,
    slot: u32,
    state: &Slot,
    holder_id: &str,
    secs: i32,
    ceiling: u64,
    now: &str,
) -> Write {
    match state {
        Slot::Absent => Write {
            verb: "create",
            body: json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": lease_name(pool.name(), slot),
                    "labels": {POOL_LABEL: pool.name().as_str(), SLOT_LABEL: slot.to_string()},
                    "annotations": {FLOOR_ANNOTATION: ceiling.to_string()},
                },
                "spec": {
                    "holderIdentity": holder_id,
                    "leaseDurationSeconds": secs,
                    "acquireTime": now,
                    "renewTime": now,
                    "leaseTransitions": 0,
                },
            }),
            prev_floor: 0,
            stored_floor: ceiling,
        },
        Slot::Free {
            rv,
            floor,
            transitions,
        }
        | Slot::Held {
            rv,
            floor,
            transitions,
            ..
        } => {
            let stored = (*floor).max(ceiling);
            Write {
                verb: "patch",
                body: json!({
                    "metadata": {
                        "resourceVersion": rv,
                        "annotations": {FLOOR_ANNOTATION: stored.to_string()},
                    },
                    "spec": {
                        "holderIdentity": holder_id,
                        "leaseDurationSeconds": secs,
                        "acquireTime": now,
                        "renewTime": now,
                        "leaseTransitions": transitions.saturating_add(1),
                    },
                }),
                prev_floor: *floor,
                stored_floor: stored,
            }
        }
    }
}

/// What the answer to an acquiring write means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// 200 or 201: the slot is ours; its resourceVersion is the fence.
    Won,
    /// Another acquirer won (create: the name exists; patch: the
    /// resourceVersion moved on, or the Lease was deleted since): try the
    /// next candidate. `suspect` when a create met a Lease the LIST did not
    /// show, which may be a foreign object with our name.
    Next { suspect: bool },
    /// A server error: the write may have been applied.
    Ambiguous,
    /// A definitive refusal ([`write_error`] says what it means).
    Refused,
}

/// Judges the `status` answered to a write of `verb`.
pub(crate) fn judge(verb: &str, status: u16) -> Answer {
    match status {
        200 | 201 => Answer::Won,
        409 => Answer::Next {
            suspect: verb == "create",
        },
        404 if verb == "patch" => Answer::Next { suspect: false },
        s if s >= 500 => Answer::Ambiguous,
        _ => Answer::Refused,
    }
}

/// A definitive error answer to an acquisition's request.
pub(crate) fn write_error(
    resp: &Resp,
    verb: &str,
    namespace: &str,
    pool: &PoolSpec,
) -> AcquireError {
    let msg = resp.message();
    match resp.status {
        401 => AcquireError::Misconfigured {
            what: format!(
                "the API server accepts none of this client's credentials for `{verb}` ({msg})"
            ),
            fix: "give the kubeconfig's user a client certificate signed by the cluster's client \
                  CA (client-certificate and client-key, or their -data forms) or a valid bearer \
                  token (token or tokenFile)"
                .to_owned(),
        },
        403 => AcquireError::Misconfigured {
            what: format!(
                "RBAC: this identity may not `{verb}` coordination.k8s.io/leases in namespace \
                 {namespace} ({msg})"
            ),
            fix: "apply lease-k8s/deploy/rbac.yaml: a Role with get, list, create and patch on \
                  leases, bound to the pod's ServiceAccount"
                .to_owned(),
        },
        404 if verb == "create" => AcquireError::Misconfigured {
            what: format!("namespace {namespace:?} does not exist ({msg})"),
            fix: format!(
                "create it (kubectl create namespace {namespace}) or configure the namespace the \
                 Leases should live in"
            ),
        },
        429 => {
            AcquireError::Unreachable(Reason::new(format!("the API server is throttling ({msg})")))
        }
        s if s >= 500 => AcquireError::Unreachable(Reason::new(format!("{verb} leases: {msg}"))),
        _ => AcquireError::Misconfigured {
            what: format!(
                "the API server rejected `{verb}` on a Lease of pool {}: {msg}",
                pool.name()
            ),
            fix: "check the pool name and ttl; this is a bug if they are valid".to_owned(),
        },
    }
}

/// The pool's format record to create when the pool has none: a Lease
/// that is never held, labelled with the pool only, carrying our format.
pub(crate) fn format_record(pool: &PoolSpec, ours: &IdFormat) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": format_name(pool.name()),
            "labels": {POOL_LABEL: pool.name().as_str()},
            "annotations": {FORMAT_ANNOTATION: ours.text()},
        },
        "spec": {},
    })
}

/// Our format against the one `recorded` for the pool: another is refused.
pub(crate) fn check_recorded_format(
    pool: &PoolSpec,
    ours: &IdFormat,
    recorded: String,
) -> Result<(), AcquireError> {
    if recorded == ours.text() {
        Ok(())
    } else {
        Err(AcquireError::OtherIdFormat {
            pool: pool.name().to_string(),
            recorded,
            ours: ours.text().to_owned(),
        })
    }
}

/// The merge patch that revokes `lease`'s holder: a tombstone
/// (`revoked/<holder>`) conditioned on the resourceVersion read, recording
/// the holder's fence (the one it recorded when its token digits match,
/// else the resourceVersion, still that of its acquiring write before its
/// first renewal). `None` when nobody holds the Lease or it is revoked
/// already.
pub(crate) fn revoke_patch(lease: &Lease) -> Option<Value> {
    let holder = holder_of(lease);
    if holder.is_empty() || holder.starts_with(TOMBSTONE) {
        return None;
    }
    let rv = lease.metadata.resource_version.clone().unwrap_or_default();
    // A holder that has not renewed yet has recorded no fence: the
    // resourceVersion is still that of its acquiring write.
    let fence = match (split_identity(holder), fence_of(lease)) {
        (Some((_, prefix)), Some((p, f))) if p == prefix => Some(format!("{p} {f}")),
        (Some((_, prefix)), _) => Some(format!("{prefix} {rv}")),
        (None, _) => None,
    };
    let mut patch = json!({
        "metadata": {"resourceVersion": rv},
        "spec": {"holderIdentity": format!("{TOMBSTONE}{holder}")},
    });
    if let Some(fence) = fence {
        patch["metadata"]["annotations"] = json!({FENCE_ANNOTATION: fence});
    }
    Some(patch)
}

#[cfg(test)]
mod tests;

/// The error of an acquisition's request that got no answer: a refused TLS
/// handshake is a setup mistake (final), anything else retryable.
pub(crate) fn no_answer(what: &str, e: NoAnswer) -> AcquireError {
    match e {
        NoAnswer::Tls(failure, _) => AcquireError::Misconfigured {
            what: format!("{what}: TLS to the API server failed: {}", failure.what),
            fix: failure.fix,
        },
        e => unreachable(what, e.text()),
    }
}
