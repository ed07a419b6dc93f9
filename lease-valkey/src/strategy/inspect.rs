//! What operators read and do: inspecting a pool's slots, and revoking a
//! slot's lease behind its holder's back.

use leasehold_core::{InspectError, PoolSpec, Reason, SlotInfo};

use super::answers::{Unreadable, parse_inspect};
use super::{ValkeyStrategy, damaged};
use crate::config::redact;
use crate::error::ValkeyError;

impl ValkeyStrategy {
    /// Ends `slot`'s lease behind its holder's back, as an operator would:
    /// the holder's next renewal is `Lost` and its release `NotHeld`.
    ///
    /// The slot is not freed at once: the holder may go on generating until
    /// its next renewal, so its slot field (HSETEX path) or slot key (script
    /// path) is overwritten with a tombstone that keeps the lease's expiry,
    /// and nobody claims the slot before the revoked lease would have
    /// expired. The next holder gets a bigger fence and the slot's floor.
    /// A lease on the other path's representation of the slot (a process
    /// that has not switched paths yet) is revoked too. Works on every path,
    /// also [`ActivePath::Unsupported`](crate::ActivePath::Unsupported). Returns whether a live lease was
    /// there.
    pub async fn revoke(&self, pool: &PoolSpec, slot: u32) -> Result<bool, ValkeyError> {
        let keys = self.keys(pool.name());
        let url = redact(&self.inner.config.url);
        let slot_key = keys.slot_key(slot);
        let answer = self
            .eval(
                &self.inner.scripts.revoke,
                vec![keys.leases, slot_key],
                vec![slot.to_string()],
            )
            .await
            .map_err(|f| self.failure_error("EVALSHA (revoke)", &url, f))?;
        match answer.as_i64() {
            Some(n @ (0 | 1)) => Ok(n == 1),
            _ => Err(ValkeyError::Server {
                server: self.inner.server.to_string(),
                command: "EVALSHA (revoke)",
                reason: format!("the revoke script answered {answer:?}, not 0 or 1"),
            }),
        }
    }

    /// One read-only script (one round trip) reads every slot of the pool on
    /// the server: fence and floor from the fences hash, the live token's
    /// first 8 hex digits and its TTL (`HPTTL` of the slot field, or `PTTL`
    /// of the slot key), and the holder record the claim wrote
    /// (`holder.<slot>`: identity, claim time on the server's `TIME`, TTL
    /// asked). The holder is named only while the record's token digits
    /// match the live token's; `held_for` is the server's time since the
    /// claim; `renewed_ago` is the claim's TTL minus the TTL left, since
    /// every renewal sets the TTL anew (exact while the holder renews with
    /// the TTL it claimed with, as a [`PoolSpec`] does). A revoked slot
    /// shows its tombstone's TTL and no holder.
    pub(super) async fn inspect_slots(
        &self,
        pool: &PoolSpec,
    ) -> Result<Vec<SlotInfo>, InspectError> {
        let keys = self.keys(pool.name());
        let hpttl = if self.inner.server.hsetex { "1" } else { "0" };
        let value = self
            .eval(
                &self.inner.scripts.inspect,
                vec![keys.leases, keys.fences],
                vec![pool.size().to_string(), keys.slot_prefix, hpttl.to_owned()],
            )
            .await
            .map_err(|f| InspectError::Store(Reason::new(format!("inspect: {}", f.text()))))?;
        let fences = self.keys(pool.name()).fences;
        parse_inspect(&value).map_err(|e| {
            InspectError::Store(Reason::new(match e {
                Unreadable::Shape => format!(
                    "unexpected answer to the inspect script from {}",
                    self.inner.server
                ),
                Unreadable::Damaged { slot, field, value } if field.starts_with("floor.") => {
                    format!(
                        "slot {slot} of pool {} is damaged: {}; no claim is granted over it \
                         until it is repaired: {}",
                        pool.name(),
                        damaged::floor_text(&fences, slot, &value),
                        damaged::floor_fix(&fences, pool, slot)
                    )
                }
                Unreadable::Damaged { slot, value, .. } => {
                    damaged::fence_refused(pool, &fences, slot, &value).to_string()
                }
            }))
        })
    }
}
