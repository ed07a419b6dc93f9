//! `inspect`: one range read of the pool's keys, then `LeaseTimeToLive` per
//! held slot.

use std::time::Duration;

use etcd_client::GetOptions;
use leasehold_core::{Fence, Floor, InspectError, PoolSpec, Reason, SlotInfo};

use crate::damaged;
use crate::error::Class;
use crate::keys;
use crate::strategy::EtcdStrategy;

/// How many `LeaseTimeToLive` requests `inspect` has in flight at once.
const INSPECT_PARALLEL: usize = 32;

/// What a slot key's value says (see [`keys::value`]), keeping no more of
/// the token than its first 8 hex digits.
enum Holding {
    Token { prefix: String, holder: String },
    Revoked,
    Unknown,
}

impl Holding {
    fn of(value: &[u8]) -> Self {
        if value == keys::TOMBSTONE.as_bytes() {
            return Self::Revoked;
        }
        let Ok(value) = std::str::from_utf8(value) else {
            return Self::Unknown;
        };
        let (token, holder) = value.split_once(' ').unwrap_or((value, ""));
        if token.len() != 32 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Self::Unknown;
        }
        let Some(prefix) = token.get(..8) else {
            return Self::Unknown;
        };
        Self::Token {
            prefix: prefix.to_owned(),
            holder: holder.to_owned(),
        }
    }
}

impl EtcdStrategy {
    /// What [`Strategy::inspect`](leasehold_core::Strategy::inspect)
    /// answers (see there).
    pub(crate) async fn inspect_pool(
        &self,
        pool: &PoolSpec,
    ) -> Result<Vec<SlotInfo>, InspectError> {
        let prefix = keys::pool_prefix(&self.inner.prefix, pool.name());
        let floor_prefix = format!("{prefix}~floor/");
        let store = |class: Class| InspectError::Store(class.reason());
        let read = self
            .call("Range", |mut c| {
                let prefix = prefix.clone();
                async move { c.get(prefix, Some(GetOptions::new().with_prefix())).await }
            })
            .await
            .map_err(store)?;
        let mut slots = std::collections::BTreeMap::<u32, SlotInfo>::new();
        let mut leases = Vec::new();
        for kv in read.kvs() {
            if let Some(slot) = keys::slot_of(&floor_prefix, kv.key()) {
                let key = String::from_utf8_lossy(kv.key());
                let floor = keys::decode_floor(kv.value()).ok_or_else(|| {
                    InspectError::Store(Reason::new(format!(
                        "slot {slot} of pool {} is damaged: {}; no claim is granted over it \
                         until it is repaired: {}",
                        pool.name(),
                        damaged::floor_text(&key, kv.value()),
                        damaged::floor_fix(&key, pool)
                    )))
                })?;
                slots
                    .entry(slot)
                    .and_modify(|i| i.floor = floor)
                    .or_insert_with(|| SlotInfo::free(slot, Fence(0), floor));
            } else if let Some(slot) = keys::slot_of(&prefix, kv.key()) {
                let fence = keys::fence_of(kv.create_revision()).ok_or_else(|| {
                    InspectError::Store(Reason::new(format!(
                        "slot {slot} of pool {}: its key has revision {}, which is no fence",
                        pool.name(),
                        kv.create_revision()
                    )))
                })?;
                let info = slots
                    .entry(slot)
                    .or_insert_with(|| SlotInfo::free(slot, fence, Floor::NONE));
                info.fence = fence;
                if kv.lease() != 0 {
                    leases.push((slot, kv.lease(), Holding::of(kv.value())));
                }
            }
        }
        let mut left = Vec::with_capacity(leases.len());
        for chunk in leases.chunks(INSPECT_PARALLEL) {
            let mut reads = tokio::task::JoinSet::new();
            for &(slot, id, _) in chunk {
                let this = self.clone();
                reads.spawn(async move {
                    let ttl = this
                        .call("LeaseTimeToLive", |mut c| async move {
                            c.lease_time_to_live(id, None).await
                        })
                        .await;
                    (slot, ttl)
                });
            }
            while let Some(done) = reads.join_next().await {
                let (slot, ttl) = done.map_err(|e| {
                    InspectError::Store(Reason::new(format!("inspect task failed: {e}")))
                })?;
                match ttl {
                    Ok(r) if r.ttl() >= 0 => left.push((slot, r.ttl(), r.granted_ttl())),
                    Ok(_) | Err(Class::NotFound(_)) => {}
                    Err(class) => return Err(store(class)),
                }
            }
        }
        for (slot, ttl, granted) in left {
            let Some((_, _, holding)) = leases.iter().find(|(s, _, _)| *s == slot) else {
                continue;
            };
            let Some(info) = slots.remove(&slot) else {
                continue;
            };
            let secs = |n: i64| Duration::from_secs(u64::try_from(n).unwrap_or(0));
            let info = match holding {
                Holding::Revoked => info.revoked_until(secs(ttl)),
                Holding::Token { prefix, holder } => info
                    .held_by_prefix(holder.clone(), prefix, secs(ttl))
                    .with_ages(Some(secs(granted.saturating_sub(ttl))), None),
                Holding::Unknown => info,
            };
            slots.insert(slot, info);
        }
        Ok(slots
            .into_values()
            .filter(|i| i.slot < pool.size())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slot key's value is whatever the store holds: only a token of 32
    /// hex digits is cut to 8, never a byte count of anything else.
    #[test]
    fn a_slot_value_is_read_whole_whatever_its_characters() {
        let token = "0123456789abcdef0123456789abcdef";
        let Holding::Token { prefix, holder } = Holding::of(format!("{token} hôte/1").as_bytes())
        else {
            panic!("a token and a holder")
        };
        assert_eq!((prefix.as_str(), holder.as_str()), ("01234567", "hôte/1"));
        for value in [
            "é",
            "ééééééééééééééééééééééééééééééé",
            "0123456é89abcdef0123456789abcde",
        ] {
            assert!(
                matches!(Holding::of(value.as_bytes()), Holding::Unknown),
                "{value}"
            );
        }
    }
}
