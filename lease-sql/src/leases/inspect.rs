//! What operators read and do: inspecting a pool's slots (one SELECT), and
//! revoking a slot's lease behind its holder's back.

use std::time::Duration;

use leasehold_core::{Fence, Floor, InspectError, PoolSpec, Reason, SlotInfo, Token};
use sqlx::{ColumnIndex, Row};

use super::Leases;
use crate::dialect::{Dialect, with_sqlx_bounds};
use crate::error::SqlError;
use crate::failure::Failure;
use crate::statements::TOMBSTONE;

with_sqlx_bounds!([impl<D> Leases<D>] {
    pub(super) async fn revoke(&self, pool: &PoolSpec, slot: u32) -> Result<bool, SqlError> {
        let q = sqlx::query(&self.sql.revoke)
            .bind(pool.name().as_str())
            .bind(D::slot(slot));
        let n = match tokio::time::timeout(self.info.op_timeout, self.execute(q)).await {
            Err(_) => return Err(SqlError::Timeout(self.info.op_timeout)),
            Ok(Ok(n)) => n,
            Ok(Err(e)) => match D::classify("revoke", &e) {
                Failure::Denied(m) => return Err(self.denied(m).await),
                _ => return Err(SqlError::Database(e)),
            },
        };
        Ok(n > 0)
    }

    pub(super) async fn inspect(&self, pool: &PoolSpec) -> Result<Vec<SlotInfo>, InspectError> {
        let q = sqlx::query(&self.sql.inspect).bind(pool.name().as_str());
        let rows = match self.timed("inspect", self.fetch_all(q)).await {
            Ok(rows) => rows,
            Err(f) => return Err(InspectError::Store(Reason::new(self.failure_text(f).await))),
        };
        rows.iter()
            .map(|row| slot_info::<D>(row, pool, &self.info.table, &self.sql.table))
            .collect::<Result<_, _>>()
            .map_err(|e| InspectError::Store(Reason::new(format!("inspect: {e}"))))
    }
});

/// One row of the inspect statement as a [`SlotInfo`]. A live lease shows its
/// holder and token prefix; a revoked one (the tombstone) shows no holder
/// but the time until its expiry, since nobody can claim it before; a free
/// or expired one shows only its fence and floor. A negative floor or fence
/// is refused, naming the slot: no claim is granted over it either.
fn slot_info<D: Dialect>(
    row: &D::Row,
    pool: &PoolSpec,
    table: &crate::ident::TableName,
    quoted: &str,
) -> Result<SlotInfo, String>
where
    usize: ColumnIndex<D::Row>,
    i64: for<'r> sqlx::Decode<'r, D> + sqlx::Type<D>,
    String: for<'r> sqlx::Decode<'r, D> + sqlx::Type<D>,
    Vec<u8>: for<'r> sqlx::Decode<'r, D> + sqlx::Type<D>,
{
    let get = |e: sqlx::Error| e.to_string();
    let slot: D::Slot = row.try_get(0).map_err(get)?;
    let token: Option<Vec<u8>> = row.try_get(1).map_err(get)?;
    let fence: D::Fence = row.try_get(2).map_err(get)?;
    let holder: Option<String> = row.try_get(3).map_err(get)?;
    let floor: i64 = row.try_get(4).map_err(get)?;
    let micros = |i: usize| -> Result<Option<Duration>, String> {
        let v: Option<i64> = row.try_get(i).map_err(get)?;
        Ok(v.and_then(|v| u64::try_from(v).ok())
            .map(Duration::from_micros))
    };
    let (expires_in, renewed_ago, held_for) = (micros(5)?, micros(6)?, micros(7)?);
    let slot: u32 = slot
        .try_into()
        .map_err(|_| format!("a slot number out of range in {table}"))?;
    let fence: u64 = fence.try_into().map_err(|_| {
        format!(
            "slot {slot} of pool {} has a negative fence in {table}: fences are never \
             negative; something else wrote it",
            pool.name()
        )
    })?;
    let floor = u64::try_from(floor).map_err(|_| {
        format!(
            "slot {slot} of pool {} is damaged: {}; no claim is granted over it until it is \
             repaired: {}",
            pool.name(),
            super::damaged::damaged_floor_text(table, &floor.to_string()),
            super::damaged::floor_fix(quoted, pool, slot)
        )
    })?;
    let info = SlotInfo::free(slot, Fence(fence), Floor(floor));
    let live = expires_in.filter(|d| !d.is_zero());
    Ok(match (token, live) {
        (Some(t), Some(left)) if t.as_slice() == TOMBSTONE.as_slice() => info.revoked_until(left),
        (Some(t), Some(left)) => match <[u8; 16]>::try_from(t.as_slice()) {
            Ok(bytes) => info
                .held(holder.unwrap_or_default(), &Token::from_bytes(bytes), left)
                .with_ages(renewed_ago, held_for),
            Err(_) => info,
        },
        _ => info,
    })
}
