//! The etcd strategy: the `EtcdStrategy` type, connecting, revoking, and
//! the `Strategy` trait's glue. Sending requests is in `call.rs`,
//! acquisition in `acquire.rs`, renewal and release in `hold.rs`.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
#[cfg(feature = "stats")]
use std::sync::atomic::Ordering;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};
use leasehold_core::{
    AcquireError, Capabilities, Floor, Grant, InspectError, PoolName, PoolSpec, Release, Renewal,
    SlotInfo, Strategy,
};

use crate::config::{DEFAULT_OP_TIMEOUT, EtcdConfig};
use crate::error::{Class, EtcdError, classify};
use crate::keys;
use crate::lost::LostFlags;
use crate::tls::Transport;

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
    pub(crate) candidates: u32,
    identity: String,
    /// How the client connects, for the messages of failed connections.
    pub(crate) transport: Transport,
    /// The endpoints' hosts, for the same messages.
    pub(crate) hosts: String,
    /// The URL's user, when it has one.
    pub(crate) user: Option<String>,
    /// The endpoints, without credentials (for doctor's TLS handshake).
    #[cfg(feature = "tls")]
    pub(crate) endpoints: Vec<String>,
    /// The TLS files of an `etcds://` URL (for the same).
    #[cfg(feature = "tls")]
    pub(crate) tls_files: Option<crate::tls::TlsFiles>,
    /// Grants a watch saw lost: renewals answer `Lost` for them at once.
    pub(crate) lost: LostFlags,
    pub(crate) stats: Counters,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) rpcs: AtomicU64,
    pub(crate) acquisitions: AtomicU64,
    pub(crate) acquire_rpcs: AtomicU64,
    pub(crate) max_acquire_rpcs: AtomicU64,
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

    /// Connects to etcd, and sends one request to see that a connection
    /// can be made: with credentials it authenticates (refused credentials
    /// are [`EtcdError::Auth`]), without them it asks for the `STATUS` of
    /// an endpoint. A connection that TLS stops, or the lack of it (a
    /// certificate either side refuses, a plain-text client at a TLS-only
    /// server or the reverse), is [`EtcdError::Tls`], which names the cause
    /// and the fix. Any other failure of that request is left to the first
    /// acquisition: a cluster that does not answer yet is no error here.
    /// A password file ([`EtcdConfig::password_file`]) is read here; a
    /// file that cannot be read is [`EtcdError::Connect`] naming it.
    pub async fn connect(config: EtcdConfig) -> Result<Self, EtcdError> {
        config.validate()?;
        let endpoints = config.public_endpoints().join(",");
        let config = config
            .with_password_from_file()
            .await
            .map_err(|e| EtcdError::Connect {
                endpoints: endpoints.clone(),
                detail: e.to_string(),
            })?;
        let options = config.connect_options()?;
        let bound = config.connect_timeout.unwrap_or(config.op_timeout) + config.op_timeout;
        let connected =
            tokio::time::timeout(bound, Client::connect(&config.endpoints, Some(options))).await;
        let client = match connected {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => {
                if let Some(tls) = tls_failure(&e, &config, &endpoints).await {
                    return Err(tls);
                }
                let class = classify(&e, &config.transport(), &config.hosts());
                return Err(match (&config.user, class) {
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
        if config.user.is_none() {
            let status = tokio::time::timeout(config.op_timeout, client.clone().status()).await;
            if let Ok(Err(e)) = status
                && let Some(tls) = tls_failure(&e, &config, &endpoints).await
            {
                return Err(tls);
            }
        }
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                identity: format!("etcd:{endpoints}/{}", config.prefix),
                transport: config.transport(),
                hosts: config.hosts(),
                user: config.user.as_ref().map(|(name, _)| name.clone()),
                #[cfg(feature = "tls")]
                endpoints: config.public_endpoints(),
                #[cfg(feature = "tls")]
                tls_files: match &config.tls {
                    Some(crate::config::Tls::Files(files)) => Some(files.clone()),
                    _ => None,
                },
                prefix: config.prefix,
                op_timeout: config.op_timeout,
                candidates: config.candidates,
                lost: LostFlags::default(),
                stats: Counters::default(),
            }),
        })
    }

    /// The per-request timeout.
    pub(crate) fn op_timeout(&self) -> Duration {
        self.inner.op_timeout
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

    /// True (once) when a watch saw this grant lost; the flag is dropped as
    /// the renewal reports it.
    pub(crate) fn take_flagged_lost(&self, key: &str, fence: i64) -> bool {
        self.inner.lost.take(key, fence)
    }
}

/// The error for `e` when TLS, or the lack of it, is what failed: a
/// handshake the client or the server refused; or (with the `tls` feature),
/// after a broken connection, a server that answers on the same port in the
/// other way: a TLS handshake to a plain-text client, plain HTTP/2 to a TLS
/// client.
async fn tls_failure(
    e: &etcd_client::Error,
    config: &EtcdConfig,
    endpoints: &str,
) -> Option<EtcdError> {
    let transport = config.transport();
    let failure = match classify(e, &transport, &config.hosts()) {
        Class::Tls(failure) => Some(failure),
        #[cfg(feature = "tls")]
        _ if crate::error::broken_connection(e) => {
            crate::tls::other_side(&config.public_endpoints(), &transport, config.op_timeout).await
        }
        _ => None,
    }?;
    Some(EtcdError::Tls {
        endpoints: endpoints.to_owned(),
        what: failure.what,
        fix: failure.fix,
    })
}

impl Strategy for EtcdStrategy {
    async fn acquire(&self, pool: &PoolSpec, ceiling: Floor) -> Result<Grant, AcquireError> {
        self.acquire_slot(pool, ceiling).await
    }

    async fn renew(&self, pool: &PoolSpec, grant: &Grant, ceiling: Floor) -> Renewal {
        self.renew_grant(pool, grant, ceiling).await
    }

    async fn release(&self, pool: &PoolSpec, grant: &Grant, issued: Floor) -> Release {
        self.release_grant(pool, grant, issued).await
    }

    /// One range read of the pool's keys (slot keys and `~floor/` keys),
    /// then `LeaseTimeToLive` for each slot key's etcd lease (at most
    /// 32 at a time): the time left is on the cluster's
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
        self.inspect_pool(pool).await
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
