//! `inspect`: one LIST of the pool's Leases, expiry judged on this
//! observer's clock.

use std::time::Duration;

use leasehold_core::{Fence, Floor, InspectError, PoolSpec, Reason, SlotInfo};
use tokio::time::Instant;

use crate::lease::{fence_of, floor_of, holder_of, micros_of, parse_rv};
use crate::names::{TOMBSTONE, split_identity};
use crate::strategy::KubeStrategy;
use crate::time::unique_micros;

impl KubeStrategy {
    /// What [`Strategy::inspect`](leasehold_core::Strategy::inspect) answers
    /// (see there).
    pub(crate) async fn inspect_pool(
        &self,
        pool: &PoolSpec,
    ) -> Result<Vec<SlotInfo>, InspectError> {
        let deadline = Instant::now() + self.op_timeout();
        let leases = self
            .list_pool(pool, deadline)
            .await
            .map_err(|e| InspectError::Store(Reason::new(e.to_string())))?
            .raw;
        let wall = i64::try_from(unique_micros()).unwrap_or(i64::MAX);
        let ago = |t: Option<i64>| {
            t.and_then(|t| u64::try_from(wall - t).ok())
                .map(Duration::from_micros)
        };
        let now = Instant::now();
        let mut slots: Vec<SlotInfo> = leases
            .iter()
            .map(|(slot, lease)| -> Result<SlotInfo, InspectError> {
                let rv = parse_rv(lease.metadata.resource_version.as_deref().unwrap_or(""))
                    .map_err(|e| InspectError::Store(Reason::new(e.to_string())))?;
                let recorded = fence_of(lease);
                let identity = holder_of(lease);
                let (revoked, identity) = match identity.strip_prefix(TOMBSTONE) {
                    Some(rest) => (true, rest),
                    None => (false, identity),
                };
                let split = split_identity(identity);
                let fence = match (&recorded, split) {
                    (Some((p, f)), Some((_, prefix))) if p == prefix => *f,
                    (_, Some(_)) => rv,
                    (Some((_, f)), None) => *f,
                    (None, None) => 0,
                };
                // `list_pool` refused an unreadable floor already.
                let floor = floor_of(lease).map_err(|stored| {
                    InspectError::Store(Reason::new(format!(
                        "slot {slot}: unreadable floor annotation {stored:?}"
                    )))
                })?;
                let info = SlotInfo::free(*slot, Fence(fence), Floor(floor));
                let spec = lease.spec.as_ref();
                let duration = spec
                    .and_then(|s| s.lease_duration_seconds)
                    .and_then(|s| u64::try_from(s).ok())
                    .map_or(Duration::ZERO, Duration::from_secs);
                let left = self
                    .inner
                    .caches
                    .seen(pool.name(), *slot)
                    .filter(|seen| seen.rv == rv.to_string())
                    .map_or(duration, |seen| {
                        duration.saturating_sub(now.saturating_duration_since(seen.at))
                    });
                Ok(match split {
                    _ if left.is_zero() => info,
                    Some(_) if revoked => info.revoked_until(left),
                    Some((holder, prefix)) => info.held_by_prefix(holder, prefix, left).with_ages(
                        ago(micros_of(spec.and_then(|s| s.renew_time.as_ref()))),
                        ago(micros_of(spec.and_then(|s| s.acquire_time.as_ref()))),
                    ),
                    None => info,
                })
            })
            .collect::<Result<_, _>>()?;
        slots.sort_by_key(|i| i.slot);
        Ok(slots)
    }
}
