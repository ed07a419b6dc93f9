//! A pool whose records are gone: a `FLUSHALL`, a `FLUSHDB` or a deletion
//! of its keys while holders run, a replica promoted before it received
//! the pool, or a pool never used. The server cannot tell these apart, so
//! the claim scripts hold grants back for the pool's restart span from when
//! a claim first saw the records gone (`scripts::wipe_functions`). Here:
//! what `prepare` does, what an operator says of a new pool, and the
//! warning a held claim logs.

use std::time::{Duration, SystemTime};

use leasehold_core::guards::utc;
use leasehold_core::{AcquireError, PoolSpec};

use super::answers::span_ms;
use super::{ValkeyStrategy, damaged};
use crate::config::redact;
use crate::error::ValkeyError;

impl ValkeyStrategy {
    /// Makes `pool`'s incarnation record, as every claim does: what
    /// [`Operate::prepare`](leasehold_core::Operate::prepare) runs, and
    /// applications call on every start.
    ///
    /// A pool whose records are gone (its fences hash: a `FLUSHALL`, a
    /// `FLUSHDB`, its keys deleted, or a pool never used) may have been
    /// wiped while holders ran, so from now on no claim is granted until
    /// the pool's restart span (here this process's TTL plus twice its
    /// `max_clock_skew`) has passed: this answers how long, and logs a
    /// warning. It never hides a wipe; it starts the wait earlier. A pool
    /// that is new indeed skips the wait with
    /// [`ValkeyStrategy::declare_new_pool`]. `Ok(None)`: no wait (the
    /// pool's records are there, or `DurabilityPolicy::Throwaway`).
    pub async fn prepare_pool(&self, pool: &PoolSpec) -> Result<Option<Duration>, ValkeyError> {
        let keys = self.keys(pool.name());
        let url = redact(&self.inner.config.url);
        let on = if self.guard_on() { "1" } else { "0" };
        let answer = self
            .eval(
                &self.inner.scripts.prepare_pool,
                vec![keys.fences.clone(), keys.leases],
                vec![
                    keys.slot_prefix,
                    pool.size().to_string(),
                    span_ms(pool.restart_span()).to_string(),
                    on.to_owned(),
                ],
            )
            .await
            .map_err(|f| self.failure_error("EVALSHA (prepare the pool)", &url, f))?;
        let unexpected = || ValkeyError::Server {
            server: self.inner.server.to_string(),
            command: "EVALSHA (prepare the pool)",
            reason: format!("unexpected answer {answer:?}"),
        };
        let refused = |e: AcquireError| ValkeyError::Server {
            server: self.inner.server.to_string(),
            command: "EVALSHA (prepare the pool)",
            reason: e.to_string(),
        };
        match &answer {
            fred::types::Value::Integer(-2) => Err(refused(self.fences_lost(pool, &keys.fences))),
            fred::types::Value::Array(items) if items.len() == 4 => {
                let field = items[2].as_string().ok_or_else(unexpected)?;
                let value = items[3].as_string().ok_or_else(unexpected)?;
                Err(refused(damaged::claim_refused(
                    pool,
                    &keys.fences,
                    None,
                    &field,
                    &value,
                )))
            }
            fred::types::Value::Array(items) if items.len() == 1 => {
                let ms = items[0]
                    .as_i64()
                    .and_then(|n| u64::try_from(n).ok())
                    .ok_or_else(unexpected)?;
                if ms == 0 {
                    return Ok(None);
                }
                let wait = Duration::from_millis(ms);
                self.warn_wiped(pool, wait);
                Ok(Some(wait))
            }
            _ => Err(unexpected()),
        }
    }

    /// States that `pool` is new, or that every holder of it has stopped:
    /// its first claim then waits for nothing. Without it a pool whose
    /// records are not on the server (never used, or wiped) waits one
    /// restart span on its first claim ([`ValkeyStrategy::prepare_pool`]).
    ///
    /// **Only with every holder of the pool stopped.** The server cannot
    /// tell a new pool from one a `FLUSHALL` emptied under running holders:
    /// said of a wiped pool while a holder runs, this lets a claim take
    /// that holder's slot before its next renewal finds the lease gone.
    /// Refused, writing nothing, while a slot of the pool has a lease (or a
    /// revoked lease's tombstone) on the server, or when its fences hash is
    /// marked lost (`ValkeyError::NotNew`). The `leasehold prepare
    /// --new-pool` command calls it.
    pub async fn declare_new_pool(&self, pool: &PoolSpec) -> Result<(), ValkeyError> {
        let keys = self.keys(pool.name());
        let url = redact(&self.inner.config.url);
        let answer = self
            .eval(
                &self.inner.scripts.declare_new_pool,
                vec![keys.fences.clone(), keys.leases],
                vec![keys.slot_prefix, pool.size().to_string()],
            )
            .await
            .map_err(|f| self.failure_error("EVALSHA (declare the pool new)", &url, f))?;
        let not_new = |why: String| ValkeyError::NotNew {
            pool: pool.name().to_string(),
            why,
        };
        match &answer {
            fred::types::Value::Integer(1) => Ok(()),
            fred::types::Value::Integer(-2) => Err(not_new(format!(
                "its fences hash {} is marked lost; repair it first: {}",
                keys.fences,
                self.fences_lost(pool, &keys.fences)
            ))),
            fred::types::Value::Array(items) if items.len() == 2 => Err(not_new(format!(
                "slot {} has a lease on the server, so a holder runs (or a revoked one may \
                 still run until the lease's end); stop every holder of the pool and wait for \
                 its leases to end",
                items[1].as_i64().unwrap_or(-1)
            ))),
            _ => Err(ValkeyError::Server {
                server: self.inner.server.to_string(),
                command: "EVALSHA (declare the pool new)",
                reason: format!("unexpected answer {answer:?}"),
            }),
        }
    }

    /// The claim's answer while the wipe guard holds, after the warning.
    pub(super) fn wiped(&self, pool: &PoolSpec, resume_in: Duration) -> AcquireError {
        self.warn_wiped(pool, resume_in);
        AcquireError::StoreRestarted { resume_in }
    }

    /// A warning that `pool`'s records were found gone: why nothing is
    /// granted, until when, and how a new pool skips the wait.
    fn warn_wiped(&self, pool: &PoolSpec, wait: Duration) {
        let until = SystemTime::now() + wait;
        tracing::warn!(
            store = %redact(&self.inner.config.url),
            server = %self.inner.server,
            pool = %pool.name(),
            resume_in_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            until = %utc(until),
            "the pool's records are not on the server (FLUSHALL, FLUSHDB, its keys deleted, a \
             replica promoted before it received them, or a pool never used): a holder may \
             still be using a slot, so no slot of the pool is granted until {} (the restart \
             span, {} ms, since a claim first saw them gone). A pool that is new indeed, or \
             whose holders have all stopped, skips the wait: leasehold prepare --pool {} \
             --new-pool (ValkeyStrategy::declare_new_pool), only with every holder stopped",
            utc(until),
            span_ms(pool.restart_span()),
            pool.name()
        );
    }
}
