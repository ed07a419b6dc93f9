//! The etcd strategy: acquire, renew, release.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, GetOptions, LeaseGrantOptions, PutOptions, Txn, TxnOp,
    TxnOpResponse, TxnResponse,
};
use leasehold_core::{
    AcquireError, Capabilities, Fence, Floor, Grant, InspectError, PoolName, PoolSpec, Reason,
    Release, Renewal, SlotInfo, Strategy, Token,
};

use crate::config::{DEFAULT_OP_TIMEOUT, EtcdConfig};
use crate::error::{Class, EtcdError, broken_connection, classify, never_sent, timed_out};
use crate::keys;
use crate::lost::LostFlags;

/// Transactions one acquisition sends before it answers `Contention`.
const MAX_ROUNDS: u32 = 8;

/// A lease store on etcd: one key per slot, `<prefix>/<pool>/<slot>`,
/// attached to an etcd lease whose TTL the cluster enforces.
///
/// - **acquire**: `LeaseGrant` (a lease whose id is derived from the new
///   token), then one transaction that tries up to `candidates_per_txn` free
///   slots as a chain of nested `if create_revision(key) == 0 then put` — the
///   first free one wins; if none is free, the same transaction reads the
///   pool's keys so the next one tries slots known to be free. Two round trips
///   when a candidate is free; never a blind overwrite.
/// - **fence**: the key's `create_revision`, cluster-wide and ever-growing.
/// - **floor**: `<prefix>/<pool>/~floor/<slot>`, on no lease (it outlives
///   the holders), Unix milliseconds as 20 zero-padded digits so that etcd's
///   byte-wise compares order it numerically. The claim transaction reads it
///   (the grant's floor) and raises it to the acquirer's ceiling; no extra
///   round trip.
/// - **ID format**: `<prefix>/<pool>/~format`, on no lease: a claim that
///   declares a format sends, beside `LeaseGrant`, a transaction that
///   creates the key with it if absent and reads it otherwise; a claim of
///   another format is refused. Still two round trips.
/// - **renew**: `LeaseKeepAlive` and a transaction, in parallel; the
///   transaction raises the floor to the ceiling only if the key still
///   carries our create revision, lease and token, and reads the key
///   otherwise. `Renewed` only when the lease is alive *and* the key is ours.
/// - **release**: one transaction deletes the key and sets the floor to what
///   was issued if the key is still ours, then the lease is revoked.
/// - **revoke** ([`EtcdStrategy::revoke`]): a tombstone on the holder's own
///   etcd lease, so the slot stays taken until that lease expires.
/// - **watch**: [`EtcdStrategy::watch_loss`] reports a deleted or rewritten key
///   as soon as etcd sends the event; [`EtcdStrategy::guard`] wires it to a
///   [`LeaseManager`](leasehold_core::LeaseManager).
/// - **a member down**: a request whose connection broke or was refused is
///   sent again (another endpoint) within the same `op_timeout` when that is
///   safe: reads, keep-alives, revokes, and the token-guarded release. The
///   acquisition transaction is never sent twice on one lease; after a
///   broken connection its lease is revoked (confirmed) and it starts over
///   on a new one.
///
/// Cloning shares the connection.
#[derive(Clone)]
pub struct EtcdStrategy {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) prefix: String,
    pub(crate) op_timeout: Duration,
    candidates: u32,
    identity: String,
    /// Grants a watch saw lost: renewals answer `Lost` for them at once.
    pub(crate) lost: LostFlags,
    stats: Counters,
}

#[derive(Default)]
struct Counters {
    rpcs: AtomicU64,
    acquisitions: AtomicU64,
    acquire_rpcs: AtomicU64,
    max_acquire_rpcs: AtomicU64,
}

/// Request counts, for benchmarks and tests: with the `stats` feature only.
#[cfg(feature = "stats")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Every request sent to etcd (each is one round trip).
    pub rpcs: u64,
    /// Successful acquisitions.
    pub acquisitions: u64,
    /// Requests sent by successful acquisitions.
    pub acquire_rpcs: u64,
    /// The most requests one successful acquisition needed.
    pub max_acquire_rpcs: u64,
}

/// What the calls of one operation sent.
#[derive(Default)]
struct Sent {
    /// Requests sent (each is one round trip).
    requests: u64,
    /// A request was sent again after an attempt that may have reached etcd.
    replayed: bool,
    /// The last call failed on a connection that broke under it: the request
    /// may or may not have reached etcd.
    broken: bool,
}

/// Whether a request that may have reached etcd can be sent again.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Replay {
    /// Reads, keep-alives, revokes, grants with a chosen id and writes
    /// guarded by the token: a second send changes nothing a first one that
    /// landed did not.
    Safe,
    /// Only an attempt that provably never left is sent again.
    NeverSent,
}

/// Where one acquisition transaction landed.
enum Landed {
    Won {
        slot: u32,
        create_revision: i64,
        /// The slot's floor before this claim.
        floor: Floor,
    },
    /// No candidate was free; the slots held at that revision.
    Full { held: HashSet<u32> },
}

impl EtcdStrategy {
    /// etcd's usual minimum lease TTL: 1.5 × the default 1 s election timeout,
    /// rounded up to whole seconds. A cluster with a longer election timeout
    /// has a larger minimum; acquisition reports it as a configuration error.
    pub const MIN_TTL: Duration = Duration::from_secs(2);

    /// The bound on any single etcd operation unless
    /// [`EtcdConfig::op_timeout`] sets another.
    pub const DEFAULT_OP_TIMEOUT: Duration = DEFAULT_OP_TIMEOUT;

    /// The value a revoke leaves in the slot key (see [`Self::revoke`]).
    pub const TOMBSTONE: &'static str = keys::TOMBSTONE;

    /// The largest pool: a full pool's keys are read in one range (keys only).
    pub const MAX_POOL_SIZE: u32 = 16_384;

    /// What this strategy is and can do (see [`Strategy::capabilities`]).
    pub const CAPABILITIES: Capabilities = Capabilities::coordinated(true, Self::MIN_TTL)
        .with_max_pool_size(Self::MAX_POOL_SIZE)
        .with_persisted_floor()
        .with_inspect();

    /// Connects to etcd. Without credentials no request is sent yet (the first
    /// acquisition finds out whether the cluster answers); with credentials
    /// the client authenticates now, and refused credentials are
    /// [`EtcdError::Auth`].
    pub async fn connect(config: EtcdConfig) -> Result<Self, EtcdError> {
        config.validate()?;
        let endpoints = config.public_endpoints().join(",");
        let options = config.connect_options();
        let bound = config.connect_timeout.unwrap_or(config.op_timeout) + config.op_timeout;
        let connected =
            tokio::time::timeout(bound, Client::connect(&config.endpoints, Some(options))).await;
        let client = match connected {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => {
                return Err(match (&config.user, classify(&e)) {
                    (Some((user, _)), Class::Denied(detail) | Class::Rejected(detail)) => {
                        EtcdError::Auth {
                            user: user.clone(),
                            detail,
                        }
                    }
                    (_, class) => EtcdError::Connect {
                        endpoints,
                        detail: class.reason().to_string(),
                    },
                });
            }
            Err(_) => {
                return Err(EtcdError::Connect {
                    endpoints,
                    detail: format!("no answer within {bound:?}"),
                });
            }
        };
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                identity: format!("etcd:{endpoints}/{}", config.prefix),
                prefix: config.prefix,
                op_timeout: config.op_timeout,
                candidates: config.candidates,
                lost: LostFlags::default(),
                stats: Counters::default(),
            }),
        })
    }

    /// The underlying `etcd-client` client (shared).
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The key of `slot` in `pool`: `<prefix>/<pool>/<slot>`.
    pub fn slot_key(&self, pool: &PoolName, slot: u32) -> String {
        keys::slot_key(&self.inner.prefix, pool, slot)
    }

    /// Request counts since this strategy was connected (with the `stats`
    /// feature only).
    #[cfg(feature = "stats")]
    pub fn stats(&self) -> Stats {
        let s = &self.inner.stats;
        Stats {
            rpcs: s.rpcs.load(Ordering::Relaxed),
            acquisitions: s.acquisitions.load(Ordering::Relaxed),
            acquire_rpcs: s.acquire_rpcs.load(Ordering::Relaxed),
            max_acquire_rpcs: s.max_acquire_rpcs.load(Ordering::Relaxed),
        }
    }

    /// Takes `slot` of `pool` from its holder, as an operator would, without
    /// ever letting two holders generate at once: the slot key's value is
    /// overwritten with a tombstone ([`Self::TOMBSTONE`]) that stays attached
    /// to the holder's etcd lease, but only the holding it read (a
    /// transaction on the key's create and mod revisions, so a holder that
    /// claimed the slot meanwhile is untouched). The tombstone carries no
    /// token, so the holder's next renewal is `Lost` (and its watch reports
    /// the rewrite at once) and its release is `NotHeld`; claims see the key
    /// and pass the slot by until the lease expires, which is no earlier than
    /// the holder's own local deadline. The next claim after that creates the
    /// key anew with a bigger fence, and the floor key keeps the holder's last
    /// ceiling. Returns whether a holder was there (`false` for a free slot
    /// or one already revoked).
    ///
    /// Deleting the key (or revoking the lease) instead would free the slot
    /// at once while the holder keeps generating until its next renewal: two
    /// holders of one slot. A slot key on no etcd lease (written by hand) is
    /// deleted, since a tombstone on it would never expire.
    ///
    /// Two round trips: a read and a transaction.
    pub async fn revoke(&self, pool: &PoolSpec, slot: u32) -> Result<bool, EtcdError> {
        let key = self.slot_key(pool.name(), slot);
        let failed = |class: Class| EtcdError::Request {
            what: "revoke",
            detail: class.reason().to_string(),
        };
        let read = self
            .call("Range", |mut c| {
                let key = key.clone();
                async move { c.get(key, None).await }
            })
            .await
            .map_err(failed)?;
        let Some(kv) = read.kvs().first() else {
            return Ok(false);
        };
        if kv.value() == keys::TOMBSTONE.as_bytes() {
            return Ok(false);
        }
        let lease_id = kv.lease();
        let take = if lease_id == 0 {
            TxnOp::delete(key.clone(), None)
        } else {
            // If the lease expires meanwhile, the compare fails (the key is
            // gone) or the put does (etcd refuses a put on a missing lease):
            // the tombstone never outlives the revoked lease.
            TxnOp::put(
                key.clone(),
                keys::TOMBSTONE,
                Some(PutOptions::new().with_lease(lease_id)),
            )
        };
        let txn = Txn::new()
            .when([
                Compare::create_revision(key.clone(), CompareOp::Equal, kv.create_revision()),
                Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision()),
            ])
            .and_then([take])
            .or_else([TxnOp::get(key.clone(), None)]);
        let done = self
            .call("Txn", |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await;
        match done {
            Ok(resp) if resp.succeeded() => Ok(true),
            // Sent again after a broken connection, the first send may have
            // put the tombstone (or another operator did): the holding read
            // is revoked either way.
            Ok(resp) => Ok(resp.op_responses().iter().any(|op| match op {
                TxnOpResponse::Get(get) => get.kvs().first().is_some_and(|found| {
                    found.value() == keys::TOMBSTONE.as_bytes()
                        && found.create_revision() == kv.create_revision()
                }),
                _ => false,
            })),
            // The lease expired between the read and the put: nobody holds
            // the slot any more.
            Err(Class::NotFound(_)) => Ok(false),
            Err(class) => Err(failed(class)),
        }
    }

    /// Runs one etcd request bounded by the operation timeout (the client's
    /// own timeout is the first line; this is the backstop). `request` gets a
    /// handle on the shared client. It is sent again, while the timeout
    /// allows, whenever etcd gave no final answer: the balancer may pick a
    /// live endpoint next. Only for requests that are safe to repeat
    /// ([`Replay::Safe`]).
    pub(crate) async fn call<T, F, Fut>(&self, what: &'static str, request: F) -> Result<T, Class>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.call_counted(what, &mut Sent::default(), Replay::Safe, request)
            .await
    }

    /// [`Self::call`] under `replay`, recording what was sent in `sent`.
    async fn call_counted<T, F, Fut>(
        &self,
        what: &'static str,
        sent: &mut Sent,
        replay: Replay,
        mut request: F,
    ) -> Result<T, Class>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let deadline = tokio::time::Instant::now() + self.inner.op_timeout;
        let mut attempts = 0u64;
        let mut maybe_reached = false;
        sent.broken = false;
        loop {
            self.inner.stats.rpcs.fetch_add(1, Ordering::Relaxed);
            sent.requests += 1;
            sent.replayed |= maybe_reached;
            attempts += 1;
            let attempt = request(self.inner.client.clone());
            let e = match tokio::time::timeout_at(deadline, attempt).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => e,
                Err(_) => return Err(timed_out(what, self.inner.op_timeout)),
            };
            let not_sent = never_sent(&e);
            let class = classify(&e);
            sent.broken = !not_sent && broken_connection(&e);
            let again = match replay {
                Replay::Safe => not_sent || matches!(class, Class::Uncertain(_)),
                Replay::NeverSent => not_sent,
            };
            let now = tokio::time::Instant::now();
            // Bounded by the deadline; the growing pause bounds the count.
            if !again || now >= deadline {
                return Err(class);
            }
            maybe_reached |= !not_sent;
            // Another endpoint may answer; a short pause keeps a cluster that
            // refuses everywhere from being hammered.
            let pause = Duration::from_millis(5 * attempts);
            tokio::time::sleep_until((now + pause).min(deadline)).await;
        }
    }

    /// Revokes lease `id` and waits for etcd to confirm it is gone (revoked
    /// now or before). Once it is, no key is attached to it, and no put with
    /// it still in flight can land: etcd refuses a put on a missing lease.
    async fn revoke_confirmed(&self, id: i64, sent: &mut Sent) -> bool {
        let revoked = self
            .call_counted("LeaseRevoke", sent, Replay::Safe, |mut c| async move {
                c.lease_revoke(id).await
            })
            .await;
        matches!(revoked, Ok(_) | Err(Class::NotFound(_)))
    }

    /// True (once) when a watch saw this grant lost; the flag is dropped as
    /// the renewal reports it.
    pub(crate) fn take_flagged_lost(&self, key: &str, fence: i64) -> bool {
        self.inner.lost.take(key, fence)
    }

    /// Revokes a lease in the background (an acquisition that did not use it).
    fn revoke_in_background(&self, id: i64) {
        let this = self.clone();
        tokio::spawn(async move {
            let _ = this
                .call(
                    "LeaseRevoke",
                    |mut c| async move { c.lease_revoke(id).await },
                )
                .await;
        });
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
        let txn = chain.ok_or_else(|| Class::Rejected("no candidate slot".into()))?;
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
    let mut level = resp.clone();
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
                Some(f) => keys::decode_floor(f.value()).ok_or_else(|| {
                    Class::Rejected(format!(
                        "floor key {} holds {:?}, not a floor (20 decimal digits of Unix \
                         milliseconds); it is not written by leasehold: delete it or set it to \
                         the highest timestamp issued from slot {slot}",
                        String::from_utf8_lossy(f.key()),
                        String::from_utf8_lossy(f.value())
                    ))
                })?,
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

/// True when the `or_else` read of a failed release transaction found no key.
fn key_absent(resp: &TxnResponse) -> bool {
    resp.op_responses().iter().all(|op| match op {
        TxnOpResponse::Get(get) => get.kvs().is_empty(),
        _ => true,
    })
}

fn acquire_error(class: Class) -> AcquireError {
    match class {
        Class::Uncertain(_) | Class::NotFound(_) | Class::Precondition(_) => {
            AcquireError::Unreachable(class.reason())
        }
        Class::Denied(m) => AcquireError::Misconfigured {
            what: format!("etcd refused access: {m}"),
            fix: "check the user and password, and that the user's role may read and write the \
                  key prefix and grant leases"
                .to_owned(),
        },
        Class::Rejected(m) => AcquireError::Misconfigured {
            what: format!("etcd rejected the acquisition: {m}"),
            fix: "if etcd reports too many operations in a txn, lower candidates_per_txn or raise \
                  etcd's --max-txn-ops"
                .to_owned(),
        },
    }
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
        Self::Token {
            prefix: token[..8].to_owned(),
            holder: holder.to_owned(),
        }
    }
}

fn positive_fence(revision: i64) -> Fence {
    Fence(u64::try_from(revision).unwrap_or(0))
}

impl Strategy for EtcdStrategy {
    async fn acquire(&self, pool: &PoolSpec, ceiling: Floor) -> Result<Grant, AcquireError> {
        if pool.size() > Self::MAX_POOL_SIZE {
            return Err(AcquireError::Misconfigured {
                what: format!(
                    "pool {} has {} slots; the etcd strategy supports up to {}",
                    pool.name(),
                    pool.size(),
                    Self::MAX_POOL_SIZE
                ),
                fix: format!("use a pool of at most {} slots", Self::MAX_POOL_SIZE),
            });
        }
        let secs = ttl_secs(pool.ttl())?;
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
                    let s = &self.inner.stats;
                    s.acquisitions.fetch_add(1, Ordering::Relaxed);
                    s.acquire_rpcs.fetch_add(sent.requests, Ordering::Relaxed);
                    s.max_acquire_rpcs
                        .fetch_max(sent.requests, Ordering::Relaxed);
                    // Earlier holdings of this key are over: their loss flags
                    // have nothing left to answer.
                    self.inner.lost.forget_key(&keys::slot_key(
                        &self.inner.prefix,
                        pool.name(),
                        slot,
                    ));
                    return Ok(Grant::new(
                        slot,
                        token,
                        positive_fence(create_revision),
                        granted_ttl,
                    )
                    .with_floor(floor));
                }
                Ok(Landed::Full { held }) => {
                    free = Some((0..pool.size()).filter(|s| !held.contains(s)).collect());
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

    async fn renew(&self, pool: &PoolSpec, grant: &Grant, ceiling: Floor) -> Renewal {
        let key = self.slot_key(pool.name(), grant.slot);
        let fence = i64::try_from(grant.fence.0).unwrap_or(-1);
        if self.take_flagged_lost(&key, fence) {
            return Renewal::Lost(Reason::new(
                "the watch saw the slot key deleted or rewritten",
            ));
        }
        let Some(lease_id) = keys::lease_id(&grant.token) else {
            return Renewal::Lost(Reason::new("the grant's token maps to no etcd lease"));
        };
        // The ownership check and the floor in one transaction: the floor is
        // raised only while the key is still ours (create revision, lease and
        // token; a revoke's tombstone keeps the first two but not the token),
        // and otherwise the key is read back to say why. It replaces the
        // read the renewal sent before floors were kept: still two requests
        // in parallel, one round trip. The keep-alive sent beside it may
        // extend a revoke's tombstone (same lease) by up to one TTL once: the
        // slot stays taken longer, never shorter, and after this `Lost` the
        // holder renews no more.
        let floor_key = keys::floor_key(&self.inner.prefix, pool.name(), grant.slot);
        let txn = Txn::new()
            .when(keys::owned(&key, fence, lease_id, &grant.token))
            .and_then([keys::raise_floor(&floor_key, ceiling)])
            .or_else([TxnOp::get(key.clone(), None)]);
        let (alive, checked) = tokio::join!(
            self.call("LeaseKeepAlive", |mut c| async move {
                c.lease_keep_alive(lease_id).await
            }),
            // Guarded by the token, and `max` is idempotent: safe to repeat.
            self.call("Txn", |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            }),
        );
        // A positive answer from either request decides: the key is gone,
        // someone else's or revoked, or the lease no longer exists.
        match &checked {
            Ok(resp) if !resp.succeeded() => {
                let found = resp.op_responses().into_iter().find_map(|op| match op {
                    TxnOpResponse::Get(get) => Some(get.kvs().first().cloned()),
                    _ => None,
                });
                return Renewal::Lost(Reason::new(match found.flatten() {
                    None => format!(
                        "slot key {key} no longer exists (lease expired or revoked, or deleted)"
                    ),
                    Some(kv) if kv.value() == keys::TOMBSTONE.as_bytes() => {
                        format!("slot key {key} was revoked by an operator")
                    }
                    Some(kv) => format!(
                        "slot key {key} now belongs to another holder (create revision {}, ours {fence})",
                        kv.create_revision()
                    ),
                }));
            }
            Ok(_) => {}
            Err(Class::NotFound(m)) => return Renewal::Lost(Reason::new(m.clone())),
            Err(_) => {}
        }
        match alive {
            Ok(_) => {}
            // Expired or revoked: etcd answers TTL 0 (see `classify`).
            Err(Class::NotFound(m)) => {
                return Renewal::Lost(Reason::new(format!("etcd lease {lease_id:x} is gone: {m}")));
            }
            Err(class) => return Renewal::Retry(class.reason()),
        }
        if let Err(class) = checked {
            return Renewal::Retry(class.reason());
        }
        if self.take_flagged_lost(&key, fence) {
            return Renewal::Lost(Reason::new(
                "the watch saw the slot key deleted or rewritten",
            ));
        }
        Renewal::renewed(grant.ttl)
    }

    async fn release(&self, pool: &PoolSpec, grant: &Grant, issued: Floor) -> Release {
        let key = self.slot_key(pool.name(), grant.slot);
        let fence = i64::try_from(grant.fence.0).unwrap_or(-1);
        // This holding is over whatever the answer: a loss flag for it has
        // nothing left to answer.
        self.inner.lost.forget(&key, fence);
        let Some(lease_id) = keys::lease_id(&grant.token) else {
            return Release::NotHeld;
        };
        // Free the slot and leave what was issued as its floor, in one step
        // and only while the key is still ours (not another holder's, not a
        // revoke's tombstone).
        let floor_key = keys::floor_key(&self.inner.prefix, pool.name(), grant.slot);
        let txn = Txn::new()
            .when(keys::owned(&key, fence, lease_id, &grant.token))
            .and_then([
                TxnOp::delete(key.clone(), None),
                TxnOp::put(floor_key, keys::encode_floor(issued), None),
            ])
            .or_else([TxnOp::get(key, Some(GetOptions::new().with_keys_only()))]);
        let mut sent = Sent::default();
        // Guarded by our create revision, lease and token: sending it again
        // after a broken connection can only free our own key, and once it
        // is gone the guard fails, so the floor of a later holder is never
        // overwritten.
        let outcome = match self
            .call_counted("Txn", &mut sent, Replay::Safe, |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await
        {
            Ok(resp) if resp.succeeded() => Release::Released,
            // An earlier send may have deleted it already: the key being gone
            // is then our own release.
            Ok(resp) if sent.replayed && key_absent(&resp) => Release::Released,
            Ok(_) => Release::NotHeld,
            Err(class) => return Release::Retry(class.reason()),
        };
        // The key is gone, not ours, or a revoke's tombstone on our lease.
        // Revoking our lease drops that tombstone before its expiry, which
        // is safe: the driver releases only after it closed the gate (rule
        // 4), so nothing is generated under this grant any more, and every
        // timestamp it could issue is at most a ceiling the floor key already
        // holds (acquire and renewals raised it; a revoke leaves it alone),
        // so the next holder starts after them, with a bigger fence.
        let _ = self
            .call("LeaseRevoke", |mut c| async move {
                c.lease_revoke(lease_id).await
            })
            .await;
        outcome
    }

    /// One range read of the pool's keys (slot keys and `~floor/` keys),
    /// then `LeaseTimeToLive` for each slot key's etcd lease (at most
    /// [`INSPECT_PARALLEL`] at a time): the time left is on the cluster's
    /// clock, in the whole seconds etcd answers (the lease ends less than a
    /// second after it). A held slot shows the holder stored with its token
    /// (`<token hex> <holder>`, only the token's first 8 hex digits leave
    /// this function), its fence (the key's create revision) and
    /// `renewed_ago` (the granted TTL minus the TTL left, since a keep-alive
    /// restores the granted TTL; whole seconds); `held_for` is `None`: etcd
    /// keeps no time of the claim. A slot nobody holds shows its floor and
    /// fence 0: its fence (the deleted key's create revision) is gone, and
    /// the next holder's is bigger than any earlier one. Not one snapshot: a
    /// lease that ends between the reads shows as free.
    async fn inspect(&self, pool: &PoolSpec) -> Result<Vec<SlotInfo>, InspectError> {
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
                let floor = keys::decode_floor(kv.value()).unwrap_or(Floor::NONE);
                slots
                    .entry(slot)
                    .and_modify(|i| i.floor = floor)
                    .or_insert_with(|| SlotInfo::free(slot, Fence(0), floor));
            } else if let Some(slot) = keys::slot_of(&prefix, kv.key()) {
                let fence = positive_fence(kv.create_revision());
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

    fn capabilities(&self) -> Capabilities {
        Self::CAPABILITIES
    }

    fn identity(&self) -> String {
        self.inner.identity.clone()
    }
}

impl std::fmt::Debug for EtcdStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStrategy")
            .field("identity", &self.inner.identity)
            .field("op_timeout", &self.inner.op_timeout)
            .finish_non_exhaustive()
    }
}
