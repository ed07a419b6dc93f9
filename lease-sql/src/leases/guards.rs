//! What the guards hold back, as `leasehold doctor` shows it: one SELECT of
//! the records the claims read (the promotion guard's `~incarnation` row,
//! the pool's record row, the pool's spans) and of what the server says
//! now (its start, its incarnation), judged as the claims judge them, on
//! the server's clock, without writing.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold_core::{Guard, GuardKind, GuardState, PoolSpec, Reason};
use sqlx::Row;

use super::Leases;
use crate::dialect::with_sqlx_bounds;
use crate::engine::Engine;
use crate::error::SqlError;
use crate::failure::Failure;
use crate::statements::{LONGEST_SPAN_MICROS, RECORD_ROW};

/// Unix microseconds as a time (before 1970: 1970).
fn at(micros: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(u64::try_from(micros).unwrap_or(0))
}

fn micros(d: i64) -> Duration {
    Duration::from_micros(u64::try_from(d).unwrap_or(0))
}

/// A guard started `age` µs before `now`, for a pool whose longest
/// recorded span is `span_ms` (0: none recorded): running until that span
/// has passed, on the server's clock; where none is recorded, running
/// until the claimers' own has, unless longer ago than any span can be.
fn since(now: i64, age: i64, span_ms: i64) -> GuardState {
    let longest = i64::try_from(LONGEST_SPAN_MICROS).unwrap_or(i64::MAX);
    let span = span_ms.saturating_mul(1000);
    if age > longest || (span > 0 && age >= span) {
        return GuardState::Open;
    }
    if span > 0 {
        return GuardState::Running {
            opens_at: Some(at(now - age + span)),
            opens_in: Some(micros(span - age)),
        };
    }
    GuardState::Running {
        opens_at: None,
        opens_in: None,
    }
}

with_sqlx_bounds!([impl<D> Leases<D>] {
    /// The restart and promotion guards (with `pool`'s longest recorded
    /// span, when a pool is given) and `pool`'s wipe guard.
    pub(super) async fn guards(&self, pool: Option<&PoolSpec>) -> Result<Vec<Guard>, SqlError> {
        let name = pool.map(|p| p.name().as_str());
        let sql = self.sql.guard_reading::<D>(name);
        let row = match self.timed("reading the guards' records", self.fetch_one(sqlx::raw_sql(&sql))).await {
            Ok(row) => row,
            Err(Failure::Denied(m)) => return Err(self.denied(m).await),
            Err(f) => return Err(SqlError::Unreachable(Reason::new(f.text().to_owned()))),
        };
        let bad = |e: sqlx::Error| SqlError::Unreachable(Reason::new(format!("reading the guards' records: {e}")));
        let now: i64 = row.try_get(0).map_err(bad)?;
        let start_in: Option<i64> = row.try_get(1).map_err(bad)?;
        let restart_in: Option<i64> = row.try_get(2).map_err(bad)?;
        let span_ms: Option<i64> = row.try_get(3).map_err(bad)?;
        let recorded: Option<String> = row.try_get(4).map_err(bad)?;
        let recorded_age: Option<i64> = row.try_get(5).map_err(bad)?;
        let current: Option<String> = row.try_get(6).map_err(bad)?;
        let record_rows: i64 = row.try_get(7).map_err(bad)?;
        let record_ours: i64 = row.try_get(8).map_err(bad)?;
        let record_age: Option<i64> = row.try_get(9).map_err(bad)?;
        let span_ms = span_ms.unwrap_or(0);
        let off = |kind| {
            Guard::new(
                kind,
                GuardState::Off {
                    why: "off (durability=throwaway)".into(),
                },
            )
        };
        let mut guards = Vec::new();

        if D::ENGINE != Engine::Sqlite {
            let restart = if self.info.watched.refusal().is_some() {
                Guard::new(
                    GuardKind::Restart,
                    GuardState::Off {
                        why: "not in force: claims are refused (the FAIL above); an opt-in in \
                              the URL that accepts the server turns it on"
                            .into(),
                    },
                )
            } else if self.sql.guarded {
                // MySQL counts whole seconds of uptime, one second short.
                let start = now + start_in.unwrap_or(0)
                    - if D::ENGINE == Engine::MySql { 1_000_000 } else { 0 };
                let state = match restart_in {
                    Some(left) if span_ms > 0 && left > 0 => GuardState::Running {
                        opens_at: Some(at(now + left)),
                        opens_in: Some(micros(left)),
                    },
                    _ if span_ms > 0 => GuardState::Open,
                    _ => since(now, now - start, 0),
                };
                Guard::new(GuardKind::Restart, state)
                    .recorded("the server's start")
                    .since(at(start))
            } else {
                off(GuardKind::Restart)
            };
            guards.push(restart);
        }

        if D::incarnation(&self.info.version).is_some() {
            let promotion = if !self.sql.promotion_guarded {
                off(GuardKind::Promotion)
            } else {
                let current = current.unwrap_or_default();
                match (recorded, recorded_age) {
                    (None, _) => Guard::new(
                        GuardKind::Promotion,
                        GuardState::NotRecorded {
                            next: format!("the next claim records {current}"),
                        },
                    ),
                    (Some(r), _) if r != current => Guard::new(
                        GuardKind::Promotion,
                        GuardState::Changed { now: current },
                    )
                    .recorded(r),
                    (Some(r), age) => {
                        let age = age.unwrap_or(0);
                        Guard::new(GuardKind::Promotion, since(now, age, span_ms))
                            .recorded(r)
                            .since(at(now - age))
                    }
                }
            };
            guards.push(promotion);
        }

        if let Some(pool) = name {
            let record = format!("record row (slot {RECORD_ROW})");
            let wipe = if !self.sql.wipe_guarded {
                off(GuardKind::Wipe)
            } else if record_rows == 0 {
                Guard::new(GuardKind::Wipe, GuardState::Missing)
            } else if record_ours == 0 {
                Guard::new(GuardKind::Wipe, GuardState::Missing)
                    .recorded(format!("a {record} of another table of this name"))
            } else {
                match record_age {
                    None => Guard::new(
                        GuardKind::Wipe,
                        GuardState::Damaged {
                            what: format!(
                                "its {record} in {} has no time (acquired_at NULL): every \
                                 claim counts a full restart span from its own attempt, so \
                                 none is ever granted",
                                self.info.table
                            ),
                            fix: format!(
                                "leasehold prepare --pool {pool} (records now: claims wait \
                                 one restart span), or, with every holder of the pool \
                                 stopped, with --new-pool --yes"
                            ),
                        },
                    ),
                    Some(age) => Guard::new(GuardKind::Wipe, since(now, age, span_ms))
                        .recorded(record)
                        .since(at(now - age)),
                }
            };
            guards.push(wipe);
        }
        Ok(guards
            .into_iter()
            .map(|g| match name {
                Some(p) => g.pool(p),
                None => g,
            })
            .collect())
    }
});
