//! Reading Leases: the holder, the floor and fence annotations, the
//! resourceVersion as a fence, and what one LIST says about each slot.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use leasehold_core::{AcquireError, Floor, PoolSpec, Reason};
use serde_json::Value;

use crate::names::{
    FENCE_ANNOTATION, FLOOR_ANNOTATION, FORMAT_ANNOTATION, INCARNATION_ANNOTATION, POOL_LABEL,
    SLOT_LABEL, format_name, incarnation_name, lease_name,
};

/// What one LIST says about one slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// No Lease: POST.
    Absent,
    /// A Lease nobody holds (released): merge PATCH on its resourceVersion.
    Free {
        rv: String,
        floor: u64,
        transitions: i32,
    },
    /// Somebody holds it (or a revoked holder's tombstone).
    Held {
        rv: String,
        holder: String,
        duration: Duration,
        floor: u64,
        transitions: i32,
    },
}

/// What one LIST of a pool's Leases found.
#[derive(Debug, Default)]
pub(crate) struct Listed {
    /// Each slot's state.
    pub(crate) slots: HashMap<u32, Slot>,
    /// Each slot's Lease as read.
    pub(crate) raw: Vec<(u32, Lease)>,
    /// The pool's recorded ID format, if it has a format record.
    pub(crate) format: Option<String>,
    /// The pool's incarnation record, if it has one (the wipe guard).
    pub(crate) incarnation: Option<Incarnation>,
}

/// Reads the items of a LIST answer for `pool`, whose Leases live in
/// `namespace`. The pool's format record (`leasehold-<pool>-format`) gives
/// the recorded ID format and its incarnation record the wipe guard's state;
/// neither is a slot; an item is a slot only when
/// its name is the one its slot label gives (labels copied onto another
/// object do not make it a slot); slots outside the pool are left out,
/// after their resourceVersion was checked. A slot of the pool whose floor
/// annotation is unreadable or whose resourceVersion cannot be followed by
/// a bigger one, or a format record without a format, refuses the whole
/// acquisition ([`AcquireError::DamagedRecord`]): an operator must repair
/// it, and every holder of the pool meets it (a holder of that slot at its
/// next renewal that raises the floor).
pub(crate) fn parse_list(
    pool: &PoolSpec,
    namespace: &str,
    list: &Value,
) -> Result<Listed, AcquireError> {
    let mut listed = Listed::default();
    for item in list["items"].as_array().into_iter().flatten() {
        let name = item["metadata"]["name"].as_str().unwrap_or("");
        if name == format_name(pool.name()) {
            let format = format_of(item).ok_or_else(|| damaged_format(pool, namespace))?;
            listed.format = Some(format.to_owned());
            continue;
        }
        if name == incarnation_name(pool.name()) {
            let found = incarnation_of(item).ok_or_else(|| damaged_incarnation(pool, namespace))?;
            listed.incarnation = Some(found);
            continue;
        }
        // Labels copied onto another object do not make it a slot.
        let Some(slot) = item["metadata"]["labels"][SLOT_LABEL]
            .as_str()
            .and_then(|d| d.parse::<u32>().ok())
            .filter(|s| name == lease_name(pool.name(), *s))
        else {
            continue;
        };
        let lease: Lease = serde_json::from_value(item.clone()).map_err(|e| {
            AcquireError::Unreachable(Reason::new(format!(
                "LIST leases: unreadable Lease {name}: {e}"
            )))
        })?;
        let rv = parse_rv(lease.metadata.resource_version.as_deref().unwrap_or(""))?;
        if slot >= pool.size() {
            continue;
        }
        if rv == u64::MAX {
            return Err(AcquireError::DamagedRecord {
                pool: pool.name().to_string(),
                slot: Some(slot),
                what: format!(
                    "its Lease {name} in namespace {namespace} has resourceVersion {rv}, the \
                     largest a fence can be, so the next holder's fence (the resourceVersion of \
                     its write) could not be bigger (DESIGN.md rule 7)"
                ),
                fix: "a kube-apiserver backed by etcd never hands one out (etcd's revisions stay \
                      below 2^63): check what serves this API, and move the pool's Leases to a \
                      cluster whose resourceVersions can grow"
                    .to_owned(),
            });
        }
        let state =
            slot_state(&lease).map_err(|stored| damaged_floor(pool, slot, namespace, &stored))?;
        listed.slots.insert(slot, state);
        listed.raw.push((slot, lease));
    }
    Ok(listed)
}

/// The ID format a format record carries, if it carries one.
pub(crate) fn format_of(record: &Value) -> Option<&str> {
    record["metadata"]["annotations"][FORMAT_ANNOTATION].as_str()
}

/// The refusal of a pool whose format record carries no format.
pub(crate) fn damaged_format(pool: &PoolSpec, namespace: &str) -> AcquireError {
    let name = format_name(pool.name());
    AcquireError::DamagedRecord {
        pool: pool.name().to_string(),
        slot: None,
        what: format!(
            "its format record, Lease {name} in namespace {namespace}, has no \
             {FORMAT_ANNOTATION} annotation, so the ID format its holders generate is not known"
        ),
        fix: format!(
            "kubectl annotate lease -n {namespace} {name} {FORMAT_ANNOTATION}=<the format text \
             the pool's processes declare> --overwrite"
        ),
    }
}

/// What the unreadable floor annotation `stored` of a slot's Lease means.
pub(crate) fn damaged_floor_text(name: &str, namespace: &str, stored: &str) -> String {
    format!(
        "its Lease {name} in namespace {namespace} has the floor annotation \
         {FLOOR_ANNOTATION}={stored:?}, not a Unix time in milliseconds (a whole number from 0), \
         so what its earlier holders stamped is not known and could be issued again (DESIGN.md \
         rule 8)"
    )
}

/// How to repair the floor annotation of `slot`'s Lease.
pub(crate) fn floor_fix(pool: &PoolSpec, slot: u32, namespace: &str) -> String {
    let floor = Floor::above_every_holder(pool).unix_millis();
    format!(
        "kubectl annotate lease -n {namespace} {} {FLOOR_ANNOTATION}={floor} --overwrite ({floor} \
         is this host's Unix time in ms plus the pool's TTL and twice its max_clock_skew: above \
         anything a holder of the slot can have stamped)",
        lease_name(pool.name(), slot)
    )
}

/// The refusal of `slot`, whose floor annotation holds `stored`.
fn damaged_floor(pool: &PoolSpec, slot: u32, namespace: &str, stored: &str) -> AcquireError {
    AcquireError::DamagedRecord {
        pool: pool.name().to_string(),
        slot: Some(slot),
        what: damaged_floor_text(&lease_name(pool.name(), slot), namespace, stored),
        fix: floor_fix(pool, slot, namespace),
    }
}

/// A slot's state as its Lease says: free when nobody holds it, else held
/// (a revoked holder's tombstone is held too). `Err` with the stored value
/// when its floor annotation is unreadable.
pub(crate) fn slot_state(lease: &Lease) -> Result<Slot, String> {
    let rv = lease.metadata.resource_version.clone().unwrap_or_default();
    let holder = holder_of(lease);
    let floor = floor_of(lease)?;
    let spec = lease.spec.as_ref();
    let transitions = spec.and_then(|s| s.lease_transitions).unwrap_or(0);
    if holder.is_empty() {
        return Ok(Slot::Free {
            rv,
            floor,
            transitions,
        });
    }
    let secs = spec.and_then(|s| s.lease_duration_seconds).unwrap_or(0);
    Ok(Slot::Held {
        rv,
        holder: holder.to_owned(),
        duration: Duration::from_secs(u64::try_from(secs).unwrap_or(0)),
        floor,
        transitions,
    })
}

/// `holderIdentity`, or "" when nobody holds the Lease.
pub(crate) fn holder_of(lease: &Lease) -> &str {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or("")
}

/// The floor annotation: 0 when absent (a Lease never claimed with a
/// floor, as in every store: nothing recorded is nothing issued), `Err`
/// with the stored value when it is not a whole number from 0 (a sign, a
/// fraction, letters, above `u64::MAX`). Read as 0, such a floor would let
/// the next holder issue what its earlier holders stamped.
pub(crate) fn floor_of(lease: &Lease) -> Result<u64, String> {
    let Some(stored) = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(FLOOR_ANNOTATION))
    else {
        return Ok(0);
    };
    match stored.parse::<u64>() {
        Ok(floor) if !stored.starts_with('+') => Ok(floor),
        _ => Err(stored.clone()),
    }
}

/// The fence annotation: the first 8 hex digits of the recording holder's
/// token and its fence.
pub(crate) fn fence_of(lease: &Lease) -> Option<(String, u64)> {
    let v = lease.metadata.annotations.as_ref()?.get(FENCE_ANNOTATION)?;
    let (prefix, fence) = v.split_once(' ')?;
    Some((prefix.to_owned(), fence.parse().ok()?))
}

/// Microseconds since the Unix epoch of a MicroTime, if set.
pub(crate) fn micros_of(t: Option<&MicroTime>) -> Option<i64> {
    t.map(|t| t.0.as_microsecond())
}

/// A resourceVersion as a fence; not an integer is final.
pub(crate) fn parse_rv(rv: &str) -> Result<u64, AcquireError> {
    rv.parse::<u64>().map_err(|_| AcquireError::UnsupportedServer {
        what: format!(
            "the API server answered resourceVersion {rv:?}, which is not an integer, so it cannot \
             be a fence"
        ),
        fix: "use a kube-apiserver backed by etcd (every release so far; guaranteed from \
              Kubernetes 1.35, KEP-5504), or another lease store"
            .to_owned(),
    })
}

/// A Lease named like our slot must carry our labels.
pub(crate) fn check_ours(
    lease: &Lease,
    pool: &PoolSpec,
    slot: u32,
    namespace: &str,
) -> Result<(), AcquireError> {
    let labels = lease.metadata.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    if label(POOL_LABEL) == Some(pool.name().as_str())
        && label(SLOT_LABEL) == Some(&slot.to_string())
    {
        return Ok(());
    }
    let name = lease_name(pool.name(), slot);
    Err(AcquireError::BadIdentifier {
        what: format!(
            "Lease {name} in namespace {namespace} was not made by leasehold (it lacks the labels \
             {POOL_LABEL}={} and {SLOT_LABEL}={slot}); something else owns this name",
            pool.name()
        ),
        fix: format!(
            "choose another pool name, or delete the foreign Lease if nothing uses it (kubectl \
             delete lease -n {namespace} {name})"
        ),
    })
}

/// The record's annotation when a claim or `prepare` made it with a guard.
pub(crate) const GUARDED: &str = "guarded: the pool's records were found gone";
/// The record's annotation when an operator declared the pool new.
pub(crate) const DECLARED_NEW: &str = "declared new";

/// What a pool's incarnation record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Incarnation {
    /// Declared new: nothing to wait for.
    Open,
    /// A guard from `since` (Unix µs on its creator's clock) for `secs`.
    Guard { since: i64, secs: i64 },
}

/// Reads an incarnation record; `None` when it is damaged (neither
/// declared new nor a guard with its start and length).
pub(crate) fn incarnation_of(item: &Value) -> Option<Incarnation> {
    if item["metadata"]["annotations"][INCARNATION_ANNOTATION].as_str() == Some(DECLARED_NEW) {
        return Some(Incarnation::Open);
    }
    let lease: Lease = serde_json::from_value(item.clone()).ok()?;
    let spec = lease.spec.as_ref()?;
    let since = micros_of(spec.renew_time.as_ref())?;
    let secs = i64::from(spec.lease_duration_seconds?);
    Some(Incarnation::Guard { since, secs })
}

/// The refusal of a pool whose incarnation record is damaged.
pub(crate) fn damaged_incarnation(pool: &PoolSpec, namespace: &str) -> AcquireError {
    let name = incarnation_name(pool.name());
    AcquireError::DamagedRecord {
        pool: pool.name().to_string(),
        slot: None,
        what: format!(
            "its incarnation record, Lease {name} in namespace {namespace}, is neither declared \
             new nor a guard with renewTime and leaseDurationSeconds, so whether the pool's \
             Leases were wiped while holders ran is not known"
        ),
        fix: format!(
            "kubectl delete lease -n {namespace} {name} (the next claim makes it again with a \
             guard: claims wait one restart span), or, with every holder of the pool stopped, \
             `leasehold prepare --new-pool`"
        ),
    }
}
