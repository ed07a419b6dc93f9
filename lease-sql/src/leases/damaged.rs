//! Rows a claim or renewal cannot trust: a floor that is negative (or, in
//! SQLite, not an integer at all), a fence that cannot grow. The claim and
//! renewal statements leave such a row as found (see
//! `Dialect::usable_floor` and `Dialect::usable_fence`); what is here reads
//! it back, only when a claim found no slot or a renewal matched no row, to
//! say which slot it is, what it holds and how to repair it.

use leasehold_core::{AcquireError, Floor, Grant, PoolSpec, Reason};
use sqlx::Row;

use super::Leases;
use crate::dialect::with_sqlx_bounds;
use crate::failure::Failure;

with_sqlx_bounds!([impl<D> Leases<D>] {
    /// The final error naming the lowest free slot of `pool` whose floor or
    /// fence no claim can trust, if there is one: a claim picks the lowest
    /// free slot and claims it only when both can be, so that slot holds
    /// every claim back until an operator repairs it.
    pub(super) async fn damaged_slot(
        &self,
        pool: &PoolSpec,
    ) -> Result<Option<AcquireError>, Failure> {
        let what = "reading the slot that holds claims back";
        let q = sqlx::query(&self.sql.damaged)
            .bind(pool.name().as_str())
            .bind(D::slot(pool.size()));
        let rows = self.timed(what, self.fetch_all(q)).await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let text = |at: usize| -> Result<String, Failure> {
            let v: Option<String> = row.try_get(at).map_err(|e| D::classify(what, &e))?;
            Ok(v.unwrap_or_else(|| "NULL".to_owned()))
        };
        let slot: D::Slot = row.try_get(0).map_err(|e| D::classify(what, &e))?;
        let slot: u32 = slot
            .try_into()
            .map_err(|_| Failure::Final(format!("{what}: a slot number out of range")))?;
        let (floor, fence) = (text(1)?, text(2)?);
        let (floor_ok, fence_ok) = (text(3)? == "1", text(4)? == "1");
        let table = &self.info.table;
        let quoted = &self.sql.table;
        let name = pool.name();
        let (mut what, mut fix) = (Vec::new(), Vec::new());
        if !floor_ok {
            what.push(damaged_floor_text(table, &floor));
            fix.push(floor_fix(quoted, pool, slot));
        }
        if !fence_ok {
            what.push(format!(
                "its fence in {table} is {fence}: a fence must be a whole number below {}, the \
                 largest the column holds, for the next holder's to be bigger (DESIGN.md rule 7)",
                D::MAX_FENCE
            ));
            fix.push(format!(
                "leasehold's fences follow the server's clock in µs and never come near the \
                 largest, so something else wrote it: if no fenced write (FenceTable) used it, \
                 UPDATE {quoted} SET fence = 0 WHERE pool = '{name}' AND slot = {slot} (the next \
                 claim's fence is then the server's clock in µs, above every fence leasehold \
                 issued); if one did, that resource refuses every later fence of this slot: \
                 move the pool's work to a new pool name"
            ));
        }
        Ok(Some(AcquireError::DamagedRecord {
            pool: name.to_string(),
            slot: Some(slot),
            what: what.join("; and "),
            fix: fix.join("; and "),
        }))
    }

    /// Why a renewal of `grant` matched no row: its floor, when the lease
    /// is still this token's and the floor is one no renewal can trust;
    /// otherwise the lease is gone.
    pub(super) async fn lost_reason(&self, pool: &PoolSpec, grant: &Grant) -> Reason {
        let table = &self.info.table;
        let gone = || {
            Reason::new(format!(
                "slot {} of pool {} is no longer held by this token in {table} (expired, taken \
                 or revoked)",
                grant.slot,
                pool.name(),
            ))
        };
        let q = sqlx::query(&self.sql.damaged_floor)
            .bind(pool.name().as_str())
            .bind(D::slot(grant.slot))
            .bind(grant.token.as_bytes().as_slice());
        let rows = match self.timed("renew: reading the floor", self.fetch_all(q)).await {
            Ok(rows) => rows,
            Err(_) => return gone(),
        };
        let Some(Ok(floor)) = rows.first().map(|r| r.try_get::<Option<String>, _>(0)) else {
            return gone();
        };
        let floor = floor.unwrap_or_else(|| "NULL".to_owned());
        Reason::new(format!(
            "slot {} of pool {}: {}; the renewal leaves it as found, so stop using the slot: no \
             claim is granted over it until it is repaired: {}",
            grant.slot,
            pool.name(),
            damaged_floor_text(table, &floor),
            floor_fix(&self.sql.table, pool, grant.slot)
        ))
    }
});

/// What a damaged floor `shown` (as the engine shows it) of `table` means.
pub(super) fn damaged_floor_text(table: impl std::fmt::Display, shown: &str) -> String {
    format!(
        "its floor_ms in {table} is {shown}, not a Unix time in milliseconds (a whole number \
         from 0), so what its earlier holders stamped is not known and could be issued again \
         (DESIGN.md rule 8)"
    )
}

/// How to repair the damaged floor of `slot` in `table` (quoted).
pub(super) fn floor_fix(table: &str, pool: &PoolSpec, slot: u32) -> String {
    let floor = Floor::above_every_holder(pool).unix_millis();
    format!(
        "UPDATE {table} SET floor_ms = {floor} WHERE pool = '{}' AND slot = {slot} ({floor} is \
         this host's Unix time in ms plus the pool's TTL and twice its max_clock_skew: above \
         anything a holder of the slot can have stamped)",
        pool.name()
    )
}
