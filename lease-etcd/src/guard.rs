//! The wipe guard. A deleted prefix (`etcdctl del --prefix leasehold/`) or a
//! restored older snapshot takes a pool's slot keys away while their holders
//! still generate, and its floor keys with them: a claim granted then could
//! hand a held slot to a second holder before the first one's watch or
//! renewal notices, and the new holder's clock need not be past what the old
//! one stamped. So every claim checks, inside its own transaction, that the
//! pool's `~incarnation` key exists and no `~guard` key does. A claim that
//! finds the incarnation key missing makes both in one transaction, the
//! guard on an etcd lease of the claimer's restart span (TTL + 2 ×
//! `max_clock_skew`): by its end every holder from before the wipe has
//! passed its deadline (each one's last renewal was sent before the wipe),
//! and a successor's clock is past anything they stamped. etcd has no wall
//! clock to compare with, so the guard's own lease is the timer, on the
//! leader's clock like every lease (a leader change only extends it).

use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};
use leasehold_core::{AcquireError, Guard, GuardKind, GuardState, PoolSpec};

use crate::error::{Class, acquire_error};
use crate::keys;
use crate::strategy::EtcdStrategy;

/// What a claim found when its guard compare failed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Held {
    /// The incarnation key exists.
    pub(crate) incarnation: bool,
    /// The etcd lease of the guard key, when one exists.
    pub(crate) guard_lease: Option<i64>,
}

/// The smallest wait a guard answers: etcd checks for expired leases about
/// every 500 ms, so a guard whose lease ran out may linger that long.
const LINGER: Duration = Duration::from_millis(500);

/// The incarnation key's value when a claim or `prepare` made it with a
/// guard, and when an operator declared the pool new.
const GUARDED: &str = "made with a guard: the pool's records were found gone";
const DECLARED_NEW: &str = "declared new";

/// The compares a claim carries: the incarnation key exists and no guard
/// key does.
pub(crate) fn open_compares(prefix: &str, pool: &PoolSpec) -> [Compare; 2] {
    [
        Compare::create_revision(
            keys::incarnation_key(prefix, pool.name()),
            CompareOp::Greater,
            0,
        ),
        Compare::create_revision(keys::guard_key(prefix, pool.name()), CompareOp::Equal, 0),
    ]
}

/// The reads a claim makes when [`open_compares`] fail, in the order
/// [`held`] reads them.
pub(crate) fn held_reads(prefix: &str, pool: &PoolSpec) -> [TxnOp; 2] {
    [
        TxnOp::get(
            keys::incarnation_key(prefix, pool.name()),
            Some(GetOptions::new().with_keys_only()),
        ),
        TxnOp::get(keys::guard_key(prefix, pool.name()), None),
    ]
}

/// What [`held_reads`] found.
pub(crate) fn held(ops: &[TxnOpResponse]) -> Option<Held> {
    let (Some(TxnOpResponse::Get(incarnation)), Some(TxnOpResponse::Get(guard))) =
        (ops.first(), ops.get(1))
    else {
        return None;
    };
    Some(Held {
        incarnation: !incarnation.kvs().is_empty(),
        guard_lease: guard.kvs().first().map(|kv| kv.lease()),
    })
}

impl EtcdStrategy {
    /// The answer to a claim that found `held`: `Ok(())` when claims may go
    /// on after all (another claimer or an operator made the incarnation
    /// key without a guard meanwhile), else the retryable
    /// `StoreRestarted` with how long the guard lasts. `own_lease` is the
    /// claimer's etcd lease, which [`Self::looks_fresh`] leaves out.
    pub(crate) async fn answer_held(
        &self,
        pool: &PoolSpec,
        held: Held,
        own_lease: Option<i64>,
    ) -> Result<(), AcquireError> {
        let guard_lease = if held.incarnation {
            held.guard_lease
        } else {
            match self
                .open_guard(pool, own_lease)
                .await
                .map_err(acquire_error)?
            {
                Opened::Guard(wait) => {
                    return Err(AcquireError::StoreRestarted { resume_in: wait });
                }
                Opened::Found(lease) => lease,
            }
        };
        match guard_lease {
            None => Ok(()),
            Some(lease) => Err(AcquireError::StoreRestarted {
                resume_in: self.guard_left(lease).await.map_err(acquire_error)?,
            }),
        }
    }

    /// How long the guard on etcd lease `lease` has left: etcd answers whole
    /// seconds, rounded down, so a claim retried then may find it still
    /// there for under a second more.
    async fn guard_left(&self, lease: i64) -> Result<Duration, Class> {
        let resp = self
            .call("LeaseTimeToLive", |mut c| async move {
                c.lease_time_to_live(lease, None).await
            })
            .await;
        let secs = match resp {
            Ok(r) => r.ttl(),
            // Gone: the guard key goes with it.
            Err(Class::NotFound(_)) => 0,
            Err(c) => return Err(c),
        };
        Ok(Duration::from_secs(u64::try_from(secs).unwrap_or(0)).max(LINGER))
    }

    /// Makes `pool`'s incarnation key with a guard, unless it exists by
    /// now. The guard lasts the pool's restart span, or only twice its
    /// `max_clock_skew` when [`Self::looks_fresh`]: then no holder of any
    /// pool holds an etcd lease, so none still generates, and only the
    /// clocks are left to wait for.
    pub(crate) async fn open_guard(
        &self,
        pool: &PoolSpec,
        own_lease: Option<i64>,
    ) -> Result<Opened, Class> {
        let fresh = self.looks_fresh(pool, own_lease).await;
        let wait = if fresh {
            pool.max_clock_skew().saturating_mul(2)
        } else {
            pool.restart_span()
        };
        let secs = i64::try_from(wait.as_secs() + u64::from(wait.subsec_nanos() > 0))
            .unwrap_or(i64::MAX)
            .max(1);
        let granted = self
            .call("LeaseGrant", |mut c| async move {
                c.lease_grant(secs, None).await
            })
            .await?;
        let lease = granted.id();
        let incarnation = keys::incarnation_key(&self.inner.prefix, pool.name());
        let guard = keys::guard_key(&self.inner.prefix, pool.name());
        let txn = Txn::new()
            .when([Compare::create_revision(
                incarnation.clone(),
                CompareOp::Equal,
                0,
            )])
            .and_then([
                TxnOp::put(incarnation, GUARDED, None),
                TxnOp::put(
                    guard.clone(),
                    pool.holder(),
                    Some(etcd_client::PutOptions::new().with_lease(lease)),
                ),
            ])
            .or_else([TxnOp::get(guard, None)]);
        // Sent again after a broken connection, the first attempt's keys
        // make the compare fail and the read finds our own guard: safe.
        let resp = self
            .call("Txn", |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await;
        let resp = match resp {
            Ok(r) => r,
            Err(c) => {
                self.revoke_in_background(lease);
                return Err(c);
            }
        };
        if resp.succeeded() {
            let ttl = u64::try_from(granted.ttl()).unwrap_or(0);
            return Ok(Opened::Guard(Duration::from_secs(ttl).max(wait)));
        }
        let found = resp.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.lease()),
            _ => None,
        });
        if found != Some(lease) {
            self.revoke_in_background(lease);
        }
        Ok(Opened::Found(found))
    }

    /// True when nothing under the key prefix exists but `pool`'s own ID
    /// format key (which the claim writes beside its lease grant), and no
    /// etcd lease exists but `own_lease`: a cluster no holder uses. A
    /// cluster shared with anything that takes leases never looks fresh,
    /// and neither does one where reading the leases is refused.
    async fn looks_fresh(&self, pool: &PoolSpec, own_lease: Option<i64>) -> bool {
        let root = format!("{}/", self.inner.prefix);
        let format_key = keys::format_key(&self.inner.prefix, pool.name());
        let keys = self
            .call("Range", |mut c| {
                let root = root.clone();
                async move {
                    c.get(
                        root,
                        Some(
                            GetOptions::new()
                                .with_prefix()
                                .with_keys_only()
                                .with_limit(2),
                        ),
                    )
                    .await
                }
            })
            .await;
        let empty = keys.is_ok_and(|r| r.kvs().iter().all(|kv| kv.key() == format_key.as_bytes()));
        if !empty {
            return false;
        }
        let leases = self
            .call("LeaseLeases", |mut c| async move { c.leases().await })
            .await;
        leases.is_ok_and(|r| r.leases().iter().all(|l| Some(l.id()) == own_lease))
    }

    /// Makes `pool`'s incarnation key, guarded as [`Self::open_guard`] does
    /// when it is missing: `prepare`, which every start may run, so it must
    /// never take a wipe for a new pool. Answers how long claims wait.
    pub(crate) async fn prepare_pool(&self, pool: &PoolSpec) -> Result<Duration, Class> {
        let incarnation = keys::incarnation_key(&self.inner.prefix, pool.name());
        let found = self
            .call("Range", |mut c| {
                let incarnation = incarnation.clone();
                async move {
                    c.get(incarnation, Some(GetOptions::new().with_count_only()))
                        .await
                }
            })
            .await?;
        if found.count() > 0 {
            return Ok(Duration::ZERO);
        }
        match self.open_guard(pool, None).await? {
            Opened::Guard(wait) => Ok(wait),
            Opened::Found(None) => Ok(Duration::ZERO),
            Opened::Found(Some(lease)) => self.guard_left(lease).await,
        }
    }

    /// Makes `pool`'s incarnation key and takes any guard away: an operator
    /// has declared the pool new, with every holder stopped.
    pub(crate) async fn declare_new(&self, pool: &PoolSpec) -> Result<(), Class> {
        let txn = Txn::new().and_then([
            TxnOp::put(
                keys::incarnation_key(&self.inner.prefix, pool.name()),
                DECLARED_NEW,
                None,
            ),
            TxnOp::delete(keys::guard_key(&self.inner.prefix, pool.name()), None),
        ]);
        self.call("Txn", |mut c| {
            let txn = txn.clone();
            async move { c.txn(txn).await }
        })
        .await
        .map(drop)
    }
}

impl EtcdStrategy {
    /// What `pool`'s wipe guard holds back, read without writing (doctor):
    /// its incarnation key (missing: the pool was never prepared, or its
    /// keys were deleted), and the guard key's etcd lease with its time
    /// left. etcd keeps no wall-clock time of a key, so the record's
    /// revision stands for when it was made.
    pub(crate) async fn read_guard(&self, pool: &PoolSpec) -> Result<Guard, Class> {
        let txn = Txn::new().and_then([
            TxnOp::get(keys::incarnation_key(&self.inner.prefix, pool.name()), None),
            TxnOp::get(keys::guard_key(&self.inner.prefix, pool.name()), None),
        ]);
        let resp = self
            .call("Txn", |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await?;
        let ops = resp.op_responses();
        let first = |i: usize| match ops.get(i) {
            Some(TxnOpResponse::Get(get)) => get.kvs().first().cloned(),
            _ => None,
        };
        let (incarnation, guard) = (first(0), first(1));
        let name = pool.name().as_str();
        let Some(record) = incarnation else {
            return Ok(Guard::new(GuardKind::Wipe, GuardState::Missing).pool(name));
        };
        let value = String::from_utf8_lossy(record.value()).into_owned();
        let recorded = format!(
            "{}, made at revision {}",
            if value == DECLARED_NEW || value == GUARDED {
                value.clone()
            } else {
                format!("{value:?}")
            },
            record.create_revision()
        );
        let mut since = None;
        let state = match guard {
            Some(kv) if kv.lease() != 0 => {
                let lease = kv.lease();
                let resp = self
                    .call("LeaseTimeToLive", |mut c| async move {
                        c.lease_time_to_live(lease, None).await
                    })
                    .await;
                let (granted, left) = match resp {
                    Ok(r) => (r.granted_ttl(), r.ttl()),
                    Err(Class::NotFound(_)) => (0, 0),
                    Err(c) => return Err(c),
                };
                let secs = |s: i64| Duration::from_secs(u64::try_from(s).unwrap_or(0));
                let now = std::time::SystemTime::now();
                // Whole seconds, rounded down: it was made up to a second
                // later than this says, and ends up to a second later.
                since = Some(now - secs(granted.saturating_sub(left)));
                let left = secs(left).max(LINGER);
                GuardState::Running {
                    opens_at: Some(now + left),
                    opens_in: Some(left),
                }
            }
            // A guard key on no lease never ends: claims wait for it forever.
            Some(_) => GuardState::Damaged {
                what: format!(
                    "the guard key {} is on no etcd lease, so it never ends: the pool's claims \
                     wait for ever",
                    keys::guard_key(&self.inner.prefix, pool.name())
                ),
                fix: format!(
                    "with every holder of the pool stopped: leasehold prepare --pool {name} \
                     --new-pool --yes (or etcdctl del {})",
                    keys::guard_key(&self.inner.prefix, pool.name())
                ),
            },
            None => GuardState::Open,
        };
        let guard = Guard::new(GuardKind::Wipe, state)
            .pool(name)
            .recorded(recorded);
        Ok(match since {
            Some(at) => guard.since(at),
            None => guard,
        })
    }
}

/// What [`EtcdStrategy::open_guard`] did.
pub(crate) enum Opened {
    /// Made the incarnation key with a guard that lasts this long.
    Guard(Duration),
    /// The incarnation key was there by then; the guard's etcd lease, if a
    /// guard was there too.
    Found(Option<i64>),
}
