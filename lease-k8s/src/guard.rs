//! The wipe guard. Deleting a pool's Leases while their holders run
//! (`kubectl delete leases -l leasehold/pool=…`, a deleted namespace, an
//! older etcd snapshot) takes the slots' floors with them, and a claim that
//! finds a slot's Lease missing creates it at once: a second holder while
//! the first still generates until its next renewal, on a clock that need
//! not be past what the first one stamped.
//!
//! So each pool has an **incarnation record**, the Lease
//! [`incarnation_name`] (labelled with the pool, no slot), which `prepare`
//! makes. The claim's own LIST by the pool's label reads it: the check
//! costs no request. A claim (or `prepare`) that finds it missing creates
//! it as a **guard** with a POST (two claimers cannot both create it: the
//! loser's 409 reads the winner's): `renewTime` the creator's wall clock,
//! `leaseDurationSeconds` its restart span (`PoolSpec::restart_span`: TTL +
//! 2 × `max_clock_skew`) rounded up to whole seconds. Kubernetes expires
//! nothing, so every claimer judges the guard on its own wall clock, and
//! grants nothing until it reads past `renewTime` + the longer of the
//! recorded span and its own. Clocks up to `max_clock_skew` apart can end
//! the guard that much early in real time, so it lasts at least TTL +
//! `max_clock_skew` from its creation: by then every holder from before
//! the wipe has passed its deadline (its last renewal was sent before the
//! wipe, and the guard was created after a claim saw the record gone), and
//! the claimer's clock, within `max_clock_skew` of each old holder's, is
//! past anything they stamped.
//!
//! The record sorts before the pool's slots (`-` before digits), so
//! `kubectl delete` and the API server's collection delete, which go in
//! name order, take it before any slot: a claim between two of their
//! deletions finds it gone rather than a slot gone beside a record that
//! says nothing happened.

use std::time::Duration;

use leasehold_core::{AcquireError, Guard, GuardKind, GuardState, PoolSpec};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::lease::{DECLARED_NEW, GUARDED, Incarnation, damaged_incarnation, incarnation_of};
use crate::names::{INCARNATION_ANNOTATION, POOL_LABEL, incarnation_name};
use crate::protocol::{no_answer, unreachable, write_error};
use crate::strategy::KubeStrategy;
use crate::time::{micro_time, unique_micros};

/// Whole seconds, rounded up, at least 1 and at most what
/// `leaseDurationSeconds` (an int32 > 0) can hold.
fn whole_secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0)))
        .unwrap_or(i64::MAX)
        .clamp(1, i64::from(i32::MAX))
}

/// How long `found` still holds claims of `pool` back, on this host's wall
/// clock: until `since` + the longer of the recorded span and ours.
pub(crate) fn guard_left(pool: &PoolSpec, found: Incarnation) -> Duration {
    let Incarnation::Guard { since, secs } = found else {
        return Duration::ZERO;
    };
    let secs = secs.max(whole_secs(pool.restart_span()));
    let end = since.saturating_add(secs.saturating_mul(1_000_000));
    let now = i64::try_from(unique_micros()).unwrap_or(i64::MAX);
    Duration::from_micros(u64::try_from(end.saturating_sub(now)).unwrap_or(0))
}

/// The incarnation record of a guard made now for `pool`.
fn guard_record(pool: &PoolSpec) -> Value {
    let now = micro_time(unique_micros());
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": incarnation_name(pool.name()),
            "labels": {POOL_LABEL: pool.name().as_str()},
            "annotations": {INCARNATION_ANNOTATION: GUARDED},
        },
        "spec": {
            "leaseDurationSeconds": whole_secs(pool.restart_span()),
            "acquireTime": now,
            "renewTime": now,
        },
    })
}

impl KubeStrategy {
    /// Checks `pool`'s incarnation record as the claim's LIST found it
    /// (`found`), making it with a guard when it is missing: `Ok` when
    /// claims may go on, else the retryable `StoreRestarted` with how long
    /// the guard has left.
    pub(crate) async fn check_incarnation(
        &self,
        pool: &PoolSpec,
        found: Option<Incarnation>,
        deadline: Instant,
    ) -> Result<(), AcquireError> {
        let found = match found {
            Some(found) => found,
            None => self.open_guard(pool, deadline).await?,
        };
        match guard_left(pool, found) {
            Duration::ZERO => Ok(()),
            resume_in => Err(AcquireError::StoreRestarted { resume_in }),
        }
    }

    /// Creates `pool`'s incarnation record as a guard that starts now; when
    /// another made it first (409), reads theirs.
    async fn open_guard(
        &self,
        pool: &PoolSpec,
        deadline: Instant,
    ) -> Result<Incarnation, AcquireError> {
        let api = &self.inner.api;
        let name = incarnation_name(pool.name());
        let record = guard_record(pool);
        let resp = api
            .create(&record, false, deadline)
            .await
            .map_err(|e| no_answer(&format!("POST {name}"), e))?;
        if resp.ok() {
            return incarnation_of(&record)
                .ok_or_else(|| damaged_incarnation(pool, &api.namespace));
        }
        if resp.status != 409 {
            return Err(write_error(&resp, "create", &api.namespace, pool));
        }
        self.read_incarnation(pool, deadline)
            .await?
            .ok_or_else(|| unreachable(&format!("GET {name}"), "deleted again after a 409"))
    }

    /// `pool`'s incarnation record, `None` when there is none.
    async fn read_incarnation(
        &self,
        pool: &PoolSpec,
        deadline: Instant,
    ) -> Result<Option<Incarnation>, AcquireError> {
        let api = &self.inner.api;
        let name = incarnation_name(pool.name());
        let resp = api
            .get(&name, deadline)
            .await
            .map_err(|e| no_answer(&format!("GET {name}"), e))?;
        if resp.status == 404 {
            return Ok(None);
        }
        if !resp.ok() {
            return Err(write_error(&resp, "get", &api.namespace, pool));
        }
        let record: Value = serde_json::from_slice(&resp.body)
            .map_err(|e| unreachable(&format!("GET {name}"), &format!("unreadable answer: {e}")))?;
        incarnation_of(&record)
            .map(Some)
            .ok_or_else(|| damaged_incarnation(pool, &api.namespace))
    }

    /// What `pool`'s wipe guard holds back, read without writing (doctor):
    /// its incarnation record missing, declared new, or a guard from
    /// `renewTime` for its recorded span, judged on this host's wall clock
    /// as a claimer judges it (a claimer with a longer span waits longer).
    pub(crate) async fn read_guard(&self, pool: &PoolSpec) -> Result<Guard, AcquireError> {
        let api = &self.inner.api;
        let deadline = Instant::now() + self.op_timeout();
        let name = incarnation_name(pool.name());
        let of = pool.name().as_str();
        let resp = api
            .get(&name, deadline)
            .await
            .map_err(|e| no_answer(&format!("GET {name}"), e))?;
        if resp.status == 404 {
            return Ok(Guard::new(GuardKind::Wipe, GuardState::Missing).pool(of));
        }
        if !resp.ok() {
            return Err(write_error(&resp, "get", &api.namespace, pool));
        }
        let record: Value = serde_json::from_slice(&resp.body)
            .map_err(|e| unreachable(&format!("GET {name}"), &format!("unreadable answer: {e}")))?;
        let at = |micros: i64| {
            std::time::UNIX_EPOCH + Duration::from_micros(u64::try_from(micros).unwrap_or(0))
        };
        let guard = match incarnation_of(&record) {
            None => {
                let (what, fix) = match damaged_incarnation(pool, &api.namespace) {
                    AcquireError::DamagedRecord { what, fix, .. } => (what, fix),
                    other => (other.to_string(), String::new()),
                };
                Guard::new(GuardKind::Wipe, GuardState::Damaged { what, fix })
            }
            Some(Incarnation::Open) => Guard::new(GuardKind::Wipe, GuardState::Open)
                .recorded(format!("Lease {name}, declared new")),
            Some(Incarnation::Guard { since, secs }) => {
                let end = since.saturating_add(secs.saturating_mul(1_000_000));
                let now = i64::try_from(unique_micros()).unwrap_or(i64::MAX);
                let state = if end > now {
                    GuardState::Running {
                        opens_at: Some(at(end)),
                        opens_in: Some(Duration::from_micros(
                            u64::try_from(end - now).unwrap_or(0),
                        )),
                    }
                } else {
                    GuardState::Open
                };
                Guard::new(GuardKind::Wipe, state)
                    .recorded(format!("Lease {name}, a guard of {secs} s"))
                    .since(at(since))
            }
        };
        Ok(guard.pool(of))
    }

    /// `prepare`: makes `pool`'s incarnation record where it is missing,
    /// with a guard, since a missing record may be a wipe with holders
    /// still running (every start may call this, so it must never take a
    /// wipe for a new pool). Answers how long claims wait.
    pub(crate) async fn prepare_pool(&self, pool: &PoolSpec) -> Result<Duration, AcquireError> {
        let deadline = Instant::now() + self.op_timeout();
        let found = match self.read_incarnation(pool, deadline).await? {
            Some(found) => found,
            None => self.open_guard(pool, deadline).await?,
        };
        Ok(guard_left(pool, found))
    }

    /// Declares `pool` new: its incarnation record says so and carries no
    /// guard, so claims go on at once. Only with every holder of the pool
    /// stopped.
    pub(crate) async fn declare_new(&self, pool: &PoolSpec) -> Result<(), AcquireError> {
        let api = &self.inner.api;
        let deadline = Instant::now() + self.op_timeout();
        let name = incarnation_name(pool.name());
        let record = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "labels": {POOL_LABEL: pool.name().as_str()},
                "annotations": {INCARNATION_ANNOTATION: DECLARED_NEW},
            },
            "spec": {},
        });
        let resp = api
            .create(&record, false, deadline)
            .await
            .map_err(|e| no_answer(&format!("POST {name}"), e))?;
        if resp.ok() {
            return Ok(());
        }
        if resp.status != 409 {
            return Err(write_error(&resp, "create", &api.namespace, pool));
        }
        // There already: mark it declared and take the guard's times away.
        let patch = json!({
            "metadata": {"annotations": {INCARNATION_ANNOTATION: DECLARED_NEW}},
            "spec": {"acquireTime": null, "renewTime": null, "leaseDurationSeconds": null},
        });
        let resp = api
            .merge_patch(&name, &patch, deadline)
            .await
            .map_err(|e| no_answer(&format!("PATCH {name}"), e))?;
        if resp.ok() {
            Ok(())
        } else {
            Err(write_error(&resp, "patch", &api.namespace, pool))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_round_up_to_whole_seconds() {
        assert_eq!(whole_secs(Duration::from_millis(3000)), 3);
        assert_eq!(whole_secs(Duration::from_millis(3001)), 4);
        assert_eq!(whole_secs(Duration::ZERO), 1);
        assert_eq!(whole_secs(Duration::MAX), i64::from(i32::MAX));
    }

    #[test]
    fn records_are_read_as_declared_a_guard_or_damaged() {
        let declared = json!({"metadata": {"annotations": {INCARNATION_ANNOTATION: DECLARED_NEW}}});
        assert_eq!(incarnation_of(&declared), Some(Incarnation::Open));
        let guard = json!({
            "metadata": {"name": "x", "annotations": {INCARNATION_ANNOTATION: GUARDED}},
            "spec": {"renewTime": "1970-01-01T00:00:01.000000Z", "leaseDurationSeconds": 32},
        });
        assert_eq!(
            incarnation_of(&guard),
            Some(Incarnation::Guard {
                since: 1_000_000,
                secs: 32
            })
        );
        let damaged = json!({"metadata": {"name": "x"}, "spec": {"leaseDurationSeconds": 32}});
        assert_eq!(incarnation_of(&damaged), None);
    }
}
