//! Acquisition: `LeaseGrant` (beside the ID-format check), then one
//! transaction that tries several free slots as a chain of nested
//! `if create_revision(key) == 0 then put`, inside the wipe guard's compare
//! (`guard.rs`): the pool's incarnation key exists and no guard key does.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, GetOptions, LeaseGrantOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
    TxnResponse,
};
use leasehold_core::{AcquireError, Floor, Grant, PoolSpec, Reason, Token};

use crate::call::{Replay, Sent};
use crate::damaged;
use crate::error::{Class, acquire_error};
use crate::guard::{self, Held};
use crate::keys;
use crate::strategy::EtcdStrategy;

/// Transactions one acquisition sends before it answers `Contention`.
const MAX_ROUNDS: u32 = 8;

/// Where one acquisition transaction landed.
enum Landed {
    Won {
        slot: u32,
        create_revision: i64,
        /// The slot's floor before this claim.
        floor: Floor,
    },
    /// The claim won `slot`, but its floor key held `value`, which is not
    /// a floor (read before the claim raised it).
    Damaged {
        slot: u32,
        floor_key: String,
        value: Vec<u8>,
    },
    /// No candidate was free; the slots held at that revision.
    Full { held: HashSet<u32> },
    /// The pool's incarnation key was missing or its guard key there:
    /// nothing was tried.
    Held(Held),
}

impl EtcdStrategy {
    /// Acquires a free slot of `pool`, raising its floor to `ceiling`: see
    /// [`EtcdStrategy`].
    pub(crate) async fn acquire_slot(
        &self,
        pool: &PoolSpec,
        ceiling: Floor,
    ) -> Result<Grant, AcquireError> {
        let secs = check_request(pool)?;
        let mut sent = Sent::default();
        // The format check rides beside the lease grant: no extra round trip.
        let (granted, format) =
            tokio::join!(self.grant_checked(secs, &mut sent), self.check_format(pool));
        let (mut token, mut lease_id, mut granted_ttl) = granted?;
        if let Err(e) = format {
            self.revoke_in_background(lease_id);
            return Err(e);
        }
        let mut value = keys::value(&token, pool);
        let mut rng = keys::Rng::from_os();
        let mut free: Option<Vec<u32>> = None;
        // Starting over after a broken connection is allowed for one
        // operation timeout (and within the rounds).
        let started = tokio::time::Instant::now();
        for _ in 0..MAX_ROUNDS {
            let candidates = keys::candidates(
                &mut rng,
                pool.size(),
                free.as_deref(),
                self.inner.candidates,
            );
            if candidates.is_empty() {
                self.revoke_in_background(lease_id);
                return Err(AcquireError::PoolExhausted {
                    pool: pool.name().to_string(),
                    size: pool.size(),
                });
            }
            match self
                .try_candidates(pool, &candidates, &value, lease_id, ceiling, &mut sent)
                .await
            {
                Ok(Landed::Won {
                    slot,
                    create_revision,
                    floor,
                }) => {
                    let Some(fence) = keys::fence_of(create_revision) else {
                        self.revoke_in_background(lease_id);
                        return Err(AcquireError::DamagedRecord {
                            pool: pool.name().to_string(),
                            slot: Some(slot),
                            what: format!(
                                "the claim's key got revision {create_revision}, which cannot \
                                 be a fence: positive and below {}, the largest etcd's \
                                 revisions reach, so that a bigger one can follow (DESIGN.md \
                                 rule 7)",
                                i64::MAX
                            ),
                            fix: "etcd's revision counter cannot go on: move the pool's leases \
                                  to another etcd cluster (a new cluster counts from 1)"
                                .to_owned(),
                        });
                    };
                    self.record_won(pool, slot, &sent);
                    return Ok(Grant::new(slot, token, fence, granted_ttl).with_floor(floor));
                }
                Ok(Landed::Damaged {
                    slot,
                    floor_key,
                    value,
                }) => {
                    // Put back what the claim's raise replaced, then give the
                    // slot up: nothing was issued under it.
                    let restored = self.restore_floor(&floor_key, ceiling, &value).await;
                    self.revoke_in_background(lease_id);
                    let mut what = damaged::floor_text(&floor_key, &value);
                    if let Err(class) = restored {
                        what.push_str(&format!(
                            "; the claim raised it to its ceiling and putting it back failed \
                             ({}), so it may now read as this claim's ceiling",
                            class.reason()
                        ));
                    }
                    return Err(AcquireError::DamagedRecord {
                        pool: pool.name().to_string(),
                        slot: Some(slot),
                        what,
                        fix: damaged::floor_fix(&floor_key, pool),
                    });
                }
                Ok(Landed::Full { held }) => {
                    free = Some((0..pool.size()).filter(|s| !held.contains(s)).collect());
                }
                Ok(Landed::Held(held)) => {
                    if let Err(e) = self.answer_held(pool, held, Some(lease_id)).await {
                        self.revoke_in_background(lease_id);
                        return Err(e);
                    }
                    // Made without a guard meanwhile: claims go on.
                }
                Err(class) => {
                    // The connection broke under the transaction (an endpoint
                    // went down): its put may have been applied, or may still
                    // be. Once etcd confirms the lease revoked, any such key
                    // is gone and a late put fails, so starting over on a new
                    // lease (and another endpoint) cannot leave a second key
                    // behind.
                    if sent.broken
                        && started.elapsed() < self.inner.op_timeout
                        && self.revoke_confirmed(lease_id, &mut sent).await
                    {
                        (token, lease_id, granted_ttl) =
                            self.grant_checked(secs, &mut sent).await?;
                        value = keys::value(&token, pool);
                        continue;
                    }
                    // The put may have been applied: revoking the lease deletes it.
                    self.revoke_in_background(lease_id);
                    return Err(acquire_error(class));
                }
            }
        }
        self.revoke_in_background(lease_id);
        Err(AcquireError::Contention(Reason::new(format!(
            "other acquirers took every free slot tried in {MAX_ROUNDS} transactions"
        ))))
    }

    /// Counts a won acquisition, and drops the loss flags of the slot's
    /// earlier holdings: they have nothing left to answer.
    fn record_won(&self, pool: &PoolSpec, slot: u32, sent: &Sent) {
        let s = &self.inner.stats;
        s.acquisitions.fetch_add(1, Ordering::Relaxed);
        s.acquire_rpcs.fetch_add(sent.requests, Ordering::Relaxed);
        s.max_acquire_rpcs
            .fetch_max(sent.requests, Ordering::Relaxed);
        self.inner
            .lost
            .forget_key(&keys::slot_key(&self.inner.prefix, pool.name(), slot));
    }

    /// `LeaseGrant` with a client-chosen id; returns the token, lease id and
    /// granted TTL in seconds.
    async fn grant_lease(
        &self,
        secs: i64,
        sent: &mut Sent,
    ) -> Result<(Token, i64, i64), AcquireError> {
        let mut last = None;
        for _ in 0..3 {
            let token = Token::random();
            let Some(id) = keys::lease_id(&token) else {
                continue;
            };
            let options = LeaseGrantOptions::new().with_id(id);
            sent.replayed = false;
            match self
                .call_counted("LeaseGrant", sent, Replay::Safe, |mut c| {
                    let options = options.clone();
                    async move { c.lease_grant(secs, Some(options)).await }
                })
                .await
            {
                Ok(resp) => return Ok((token, id, resp.ttl())),
                // The id is taken: by our own first attempt when the request
                // was sent again after a broken connection (revoke that one),
                // else by a 2^-63 coincidence. Either way, draw another token.
                Err(c @ Class::Precondition(_)) => {
                    if sent.replayed {
                        self.revoke_in_background(id);
                    }
                    last = Some(c);
                }
                Err(c) => return Err(acquire_error(c)),
            }
        }
        Err(acquire_error(last.unwrap_or(Class::Uncertain(
            "no usable lease id drawn".to_owned(),
        ))))
    }

    /// [`Self::grant_lease`], refusing a TTL etcd raised (below the
    /// cluster's minimum); returns the token, lease id and granted TTL.
    async fn grant_checked(
        &self,
        secs: i64,
        sent: &mut Sent,
    ) -> Result<(Token, i64, Duration), AcquireError> {
        let (token, lease_id, granted) = self.grant_lease(secs, sent).await?;
        if granted > secs {
            self.revoke_in_background(lease_id);
            return Err(AcquireError::Misconfigured {
                what: format!(
                    "etcd raised the lease TTL from {secs}s to {granted}s: {secs}s is below this \
                     cluster's minimum lease TTL (1.5 x its election timeout)"
                ),
                fix: format!("set ttl to at least {granted}s"),
            });
        }
        let ttl = Duration::from_secs(u64::try_from(granted.max(1)).unwrap_or(1));
        Ok((token, lease_id, ttl))
    }

    /// Records the ID format `pool` declares if the pool has none yet, and
    /// refuses another one. The transaction is idempotent (it writes only a
    /// missing key, with our own text), so a replay is safe. etcd keeps the
    /// key for good (Raft-durable, on no lease): once written, every later
    /// claim of another format sees it.
    async fn check_format(&self, pool: &PoolSpec) -> Result<(), AcquireError> {
        let Some(ours) = pool.id_format() else {
            return Ok(());
        };
        let key = keys::format_key(&self.inner.prefix, pool.name());
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), ours.text(), None)])
            .or_else([TxnOp::get(key, None)]);
        let resp = self
            .call("Txn", |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await
            .map_err(acquire_error)?;
        if resp.succeeded() {
            return Ok(());
        }
        let recorded = resp
            .op_responses()
            .into_iter()
            .find_map(|op| match op {
                TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.value().to_vec()),
                _ => None,
            })
            .unwrap_or_default();
        if recorded == ours.text().as_bytes() {
            Ok(())
        } else {
            Err(AcquireError::OtherIdFormat {
                pool: pool.name().to_string(),
                recorded: String::from_utf8_lossy(&recorded).into_owned(),
                ours: ours.text().to_owned(),
            })
        }
    }

    /// One acquisition transaction over `candidates`.
    async fn try_candidates(
        &self,
        pool: &PoolSpec,
        candidates: &[u32],
        value: &str,
        lease_id: i64,
        ceiling: Floor,
        sent: &mut Sent,
    ) -> Result<Landed, Class> {
        let prefix = keys::pool_prefix(&self.inner.prefix, pool.name());
        let mut chain: Option<Txn> = None;
        for &slot in candidates.iter().rev() {
            let key = keys::slot_key(&self.inner.prefix, pool.name(), slot);
            let floor_key = keys::floor_key(&self.inner.prefix, pool.name(), slot);
            let otherwise = match chain.take() {
                Some(inner) => vec![TxnOp::txn(inner)],
                // Slot keys only: the floor keys sort after the range.
                None => vec![TxnOp::get(
                    prefix.clone(),
                    Some(
                        GetOptions::new()
                            .with_range(keys::slot_range_end(&prefix))
                            .with_keys_only(),
                    ),
                )],
            };
            // Claim, read the new key (its create revision is the fence),
            // read the floor as it was, then raise it to our ceiling: all in
            // the claim, so no holder of the slot can come between.
            chain = Some(
                Txn::new()
                    .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                    .and_then([
                        TxnOp::put(
                            key.clone(),
                            value,
                            Some(PutOptions::new().with_lease(lease_id)),
                        ),
                        TxnOp::get(key, None),
                        TxnOp::get(floor_key.clone(), None),
                        keys::raise_floor(&floor_key, ceiling),
                    ])
                    .or_else(otherwise),
            );
        }
        let chain = chain.ok_or_else(|| Class::Rejected("no candidate slot".into()))?;
        // Inside the wipe guard's compare: the same round trip.
        let txn = Txn::new()
            .when(guard::open_compares(&self.inner.prefix, pool))
            .and_then([TxnOp::txn(chain)])
            .or_else(guard::held_reads(&self.inner.prefix, pool));
        let resp = self
            // A second send could win a second slot with the same lease:
            // only an attempt that never left is repeated here.
            .call_counted("Txn", sent, Replay::NeverSent, |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await?;
        walk(&resp, candidates, &prefix)
    }
}

/// Follows the chain of nested transaction responses to the level that won,
/// or to the range read at the bottom.
fn walk(resp: &TxnResponse, candidates: &[u32], prefix: &str) -> Result<Landed, Class> {
    let malformed = |what: &str| Class::Rejected(format!("unexpected txn response: {what}"));
    let ops = resp.op_responses();
    if !resp.succeeded() {
        return guard::held(&ops)
            .map(Landed::Held)
            .ok_or_else(|| malformed("guard shape"));
    }
    let Some(TxnOpResponse::Txn(mut level)) = ops.into_iter().next() else {
        return Err(malformed("guard shape"));
    };
    for (depth, &slot) in candidates.iter().enumerate() {
        let ops = level.op_responses();
        if level.succeeded() {
            // [put slot, get slot, get floor, raise floor]
            let (Some(TxnOpResponse::Get(claimed)), Some(TxnOpResponse::Get(floor))) =
                (ops.get(1), ops.get(2))
            else {
                return Err(malformed("claim shape"));
            };
            let kv = claimed
                .kvs()
                .first()
                .ok_or_else(|| malformed("no key after put"))?;
            let floor = match floor.kvs().first() {
                None => Floor::NONE,
                Some(f) => match keys::decode_floor(f.value()) {
                    Some(floor) => floor,
                    None => {
                        return Ok(Landed::Damaged {
                            slot,
                            floor_key: String::from_utf8_lossy(f.key()).into_owned(),
                            value: f.value().to_vec(),
                        });
                    }
                },
            };
            return Ok(Landed::Won {
                slot,
                create_revision: kv.create_revision(),
                floor,
            });
        }
        let last = depth + 1 == candidates.len();
        match (ops.into_iter().next(), last) {
            (Some(TxnOpResponse::Txn(inner)), false) => level = inner,
            (Some(TxnOpResponse::Get(range)), true) => {
                let held = range
                    .kvs()
                    .iter()
                    .filter_map(|kv| keys::slot_of(prefix, kv.key()))
                    .collect();
                return Ok(Landed::Full { held });
            }
            _ => return Err(malformed("chain shape")),
        }
    }
    Err(malformed("empty chain"))
}

/// Checks what an acquisition of `pool` asks before anything is sent;
/// returns the TTL to ask etcd for.
fn check_request(pool: &PoolSpec) -> Result<i64, AcquireError> {
    if pool.size() > EtcdStrategy::MAX_POOL_SIZE {
        return Err(AcquireError::Misconfigured {
            what: format!(
                "pool {} has {} slots; the etcd strategy supports up to {}",
                pool.name(),
                pool.size(),
                EtcdStrategy::MAX_POOL_SIZE
            ),
            fix: format!(
                "use a pool of at most {} slots",
                EtcdStrategy::MAX_POOL_SIZE
            ),
        });
    }
    ttl_secs(pool.ttl())
}

/// The TTL to ask etcd for, in whole seconds (rounded up).
fn ttl_secs(ttl: Duration) -> Result<i64, AcquireError> {
    if ttl < Duration::from_secs(1) {
        return Err(AcquireError::Misconfigured {
            what: format!(
                "ttl {ttl:?} is too short for etcd: etcd leases count whole seconds, and the \
                 cluster's minimum lease TTL is usually {}s",
                EtcdStrategy::MIN_TTL.as_secs()
            ),
            fix: format!(
                "set ttl to at least {}s (etcd's minimum is 1.5 x its election timeout)",
                EtcdStrategy::MIN_TTL.as_secs()
            ),
        });
    }
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    Ok(i64::try_from(secs).unwrap_or(i64::MAX))
}
