//! Acquisition: one round trip claims a free slot; the rare path checks the
//! restart guard, counts the pool's rows and fills them in.

use std::time::Duration;

use leasehold_core::{AcquireError, Fence, Floor, Grant, PoolSpec, Token};
use sqlx::{ColumnIndex, Row};

use super::Leases;
use crate::dialect::{Dialect, with_sqlx_bounds};
use crate::error::SqlError;
use crate::failure::Failure;
use crate::statements::POOL_ROW;

with_sqlx_bounds!([impl<D> Leases<D>] {
    pub(super) async fn acquire(
        &self,
        pool: &PoolSpec,
        ceiling: Floor,
    ) -> Result<Grant, AcquireError> {
        self.watch_settings(pool.ttl()).await;
        // A server this configuration does not accept (connected to only
        // to be looked at, or found so by a re-read of its settings):
        // nothing is claimed on it.
        if let Some(refusal) = self.info.watched.refusal() {
            let (what, fix) = leasehold_core::operate::split_refusal(&refusal);
            return Err(AcquireError::Misconfigured { what, fix });
        }
        let mut populated = false;
        let mut rechecked = false;
        loop {
            let token = Token::random();
            match self.try_acquire(pool, &token, ceiling).await {
                Ok(Attempt::OtherFormat(recorded)) => {
                    return Err(AcquireError::OtherIdFormat {
                        pool: pool.name().to_string(),
                        recorded,
                        ours: pool.id_format().map(|f| f.text().to_owned()).unwrap_or_default(),
                    });
                }
                Ok(Attempt::Claimed(claim)) => {
                    let ttl = applied_ttl::<D>(pool.ttl());
                    return Ok(Grant::new(claim.slot, token, Fence(claim.fence), ttl)
                        .with_floor(claim.floor)
                        .with_store_time(store_time(claim.now)));
                }
                Ok(Attempt::NoFreeSlot) => {
                    // No free slot: the restart guard holds, or the pool is
                    // full, or it lacks rows (never prepared, or it grew).
                    // Rare path: check, count, fill, retry once.
                    match self.guard_holds(pool).await {
                        Ok(Some(resume_in)) => {
                            return Err(AcquireError::StoreRestarted { resume_in });
                        }
                        Ok(None) => {}
                        Err(e) => return Err(e.into()),
                    }
                    // The lowest free slot holds a floor or fence no claim
                    // can trust: final, until an operator repairs it.
                    match self.damaged_slot(pool).await {
                        Ok(Some(damaged)) => return Err(damaged),
                        Ok(None) => {}
                        Err(f) => return Err(self.to_sql_error(f).await.into()),
                    }
                    let rows = match self.count_rows(pool).await {
                        Ok(n) => n,
                        Err(f) => return Err(self.to_sql_error(f).await.into()),
                    };
                    if rows >= u64::from(pool.size()) || populated {
                        // A guard that held when the claim judged it may
                        // have opened before it was read again here: the
                        // slots the claim passed over for it are free now.
                        // Claim once more before calling the pool full.
                        let guarded =
                            self.sql.guarded || self.sql.promotion_guarded || self.sql.wipe_guarded;
                        if guarded && !rechecked {
                            rechecked = true;
                            continue;
                        }
                        return Err(AcquireError::PoolExhausted {
                            pool: pool.name().to_string(),
                            size: pool.size(),
                        });
                    }
                    self.populate(pool).await?;
                    populated = true;
                }
                Err(f) => return Err(self.to_sql_error(f).await.into()),
            }
        }
    }

    /// One acquisition attempt.
    async fn try_acquire(
        &self,
        pool: &PoolSpec,
        token: &Token,
        ceiling: Floor,
    ) -> Result<Attempt, Failure> {
        // Where a scan locks the rows it skips (`Dialect::RANDOM_START`), each
        // attempt starts at a random slot and wraps around: a second round trip
        // only when the upper part is full.
        if D::RANDOM_START && pool.size() > 1 {
            let bytes = Token::random();
            let b = bytes.as_bytes();
            let start = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) % pool.size();
            let first = self
                .try_range(pool, token, ceiling, start, pool.size())
                .await?;
            if !matches!(first, Attempt::NoFreeSlot) || start == 0 {
                return Ok(first);
            }
            return self.try_range(pool, token, ceiling, 0, start).await;
        }
        self.try_range(pool, token, ceiling, 0, pool.size()).await
    }

    /// One acquisition round trip over slots `from..to`.
    async fn try_range(
        &self,
        pool: &PoolSpec,
        token: &Token,
        ceiling: Floor,
        from: u32,
        to: u32,
    ) -> Result<Attempt, Failure> {
        let sql = self
            .sql
            .acquire::<D>(pool, token.as_bytes(), ceiling.0, from, to);
        let rows = self
            .timed("acquire", self.fetch_all(sqlx::raw_sql(&sql)))
            .await?;
        // The claim's row (four columns) if it claimed a slot, then, when the
        // claim declares a format, the pool's recorded format (one column).
        let (recorded, claimed): (Vec<_>, Vec<_>) = rows.iter().partition(|r| r.len() == 1);
        if let Some(row) = claimed.first() {
            return decode_grant::<D>(row).map(Attempt::Claimed);
        }
        let Some(ours) = pool.id_format() else {
            return Ok(Attempt::NoFreeSlot);
        };
        let recorded: Option<String> = match recorded.first() {
            Some(row) => row
                .try_get(0)
                .map_err(|e| D::classify("acquire: decoding the recorded ID format", &e))?,
            None => None,
        };
        match recorded {
            Some(r) if r == ours.text() => Ok(Attempt::NoFreeSlot),
            Some(r) => Ok(Attempt::OtherFormat(r)),
            // The claim inserts the record before it reads it: a missing
            // one is a table someone else changed.
            None => Err(Failure::Final(format!(
                "acquire: the ID format of pool {} is not recorded in {} right after the claim \
                 recorded it (the row of slot {POOL_ROW} is missing or its id_format is NULL)",
                pool.name(),
                self.info.table
            ))),
        }
    }

    /// How long the guards still hold for leases of `pool`, if they do.
    /// A pool found without its record (its rows deleted, or never
    /// prepared) is recorded as first seen now, and waits a span from then.
    async fn guard_holds(&self, pool: &PoolSpec) -> Result<Option<Duration>, SqlError> {
        let (resume_in, recorded) = match self.resume_in(pool).await {
            Ok(read) => read,
            Err(f) => return Err(self.to_sql_error(f).await),
        };
        if recorded || !self.sql.wipe_guarded {
            return Ok(resume_in);
        }
        if self.record_pool(pool, D::NOW, false).await? {
            warn_records_gone(&self.info, pool, "a claim");
        }
        match self.resume_in(pool).await {
            Ok((resume_in, _)) => Ok(resume_in),
            Err(f) => Err(self.to_sql_error(f).await),
        }
    }

    /// How long the guards still hold for leases of `pool`, if they do, and
    /// whether the pool has its record.
    async fn resume_in(&self, pool: &PoolSpec) -> Result<(Option<Duration>, bool), Failure> {
        let Some(expr) = self.sql.resume_in::<D>(pool) else {
            return Ok((None, true));
        };
        let sql = format!(
            "SELECT {expr}, ({})",
            self.sql.pool_recorded::<D>(pool.name().as_str())
        );
        let (micros, recorded): (Option<i64>, i64) = self
            .timed("restart guard", async {
                let row = self.fetch_one(sqlx::raw_sql(&sql)).await?;
                Ok((row.try_get(0)?, row.try_get(1)?))
            })
            .await?;
        let micros = micros.ok_or_else(|| {
            Failure::Final(format!(
                "the restart guard cannot read when {} started ({sql} answered NULL)",
                self.info.version
            ))
        })?;
        let resume_in = u64::try_from(micros)
            .ok()
            .filter(|&m| m > 0)
            .map(Duration::from_micros);
        Ok((resume_in, recorded > 0))
    }

    async fn count_rows(&self, pool: &PoolSpec) -> Result<u64, Failure> {
        let q = sqlx::query(&self.sql.count)
            .bind(pool.name().as_str())
            .bind(D::slot(pool.size()));
        let n: i64 = self
            .timed("count pool rows", async {
                self.fetch_one(q).await?.try_get(0)
            })
            .await?;
        u64::try_from(n).map_err(|_| Failure::Final(format!("count pool rows: COUNT(*) was {n}")))
    }
});

/// What one acquisition round trip came to.
enum Attempt {
    /// A slot was claimed.
    Claimed(Claim),
    /// No slot was free (or the restart guard holds, or the pool lacks rows).
    NoFreeSlot,
    /// The pool records another ID format than the claim declares (its
    /// text): nothing was claimed.
    OtherFormat(String),
}

/// What a claim answered: the slot, its fence, its floor from before, and
/// the server's time (µs since the Unix epoch).
struct Claim {
    slot: u32,
    fence: u64,
    floor: Floor,
    now: i64,
}

/// The TTL the engine applies: `ttl` cut to its resolution (SQLite keeps
/// milliseconds), never more than asked.
pub(super) fn applied_ttl<D: Dialect>(ttl: Duration) -> Duration {
    let step = D::RESOLUTION.as_nanos().max(1);
    let nanos = ttl.as_nanos() / step * step;
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// A server time in µs since the Unix epoch, as the lease manager compares it.
pub(super) fn store_time(micros: i64) -> Duration {
    Duration::from_micros(u64::try_from(micros).unwrap_or(0))
}

fn decode_grant<D: Dialect>(row: &D::Row) -> Result<Claim, Failure>
where
    usize: ColumnIndex<D::Row>,
    i64: for<'r> sqlx::Decode<'r, D> + sqlx::Type<D>,
{
    let slot: D::Slot = row
        .try_get(0)
        .map_err(|e| D::classify("acquire: decoding slot", &e))?;
    let fence: D::Fence = row
        .try_get(1)
        .map_err(|e| D::classify("acquire: decoding fence", &e))?;
    let slot = slot
        .try_into()
        .map_err(|_| Failure::Schema("acquire: slot out of range".to_owned()))?;
    let fence = fence
        .try_into()
        .map_err(|_| Failure::Schema("acquire: negative fence".to_owned()))?;
    let floor: i64 = row
        .try_get(2)
        .map_err(|e| D::classify("acquire: decoding grant_floor_ms", &e))?;
    // The claim takes only a slot whose floor is from 0 (`usable_floor`).
    let floor = u64::try_from(floor).map_err(|_| {
        Failure::Final(format!(
            "acquire: the claim answered the negative floor {floor} although it claims only a \
             slot whose floor is from 0"
        ))
    })?;
    let now: i64 = row
        .try_get(3)
        .map_err(|e| D::classify("acquire: decoding the server's time", &e))?;
    Ok(Claim {
        slot,
        fence,
        floor: Floor(floor),
        now,
    })
}

/// Says why claims of `pool` wait: `who` found its record missing and
/// recorded it as first seen now.
pub(super) fn warn_records_gone(info: &super::Info, pool: &PoolSpec, who: &str) {
    #[cfg(feature = "tracing")]
    tracing::warn!(
        store = %info.identity,
        pool = %pool.name(),
        "the pool's records are gone ({who} found none): the table may have been wiped or \
         restored, or the pool is new; waiting out the span until {:?} from now, when every \
         holder that may still generate has stopped (a new pool whose holders are all stopped \
         can be prepared as new instead: SqlStrategy::ensure_new_pool)",
        pool.restart_span()
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (info, pool, who);
}
