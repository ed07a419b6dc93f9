//! The strategy: its state, its one-command transport, and the `Strategy`
//! implementation. Each operation lives in a file of its own: `connect`
//! (connection and server probe), `claim`, `renew` (renewal and release),
//! `inspect` (inspect and revoke), `wait` (what a claim or renewal waits
//! for after its mark), `answers` (reading the scripts' answers) and
//! `damaged` (what is said of a record the scripts cannot trust).

mod answers;
mod claim;
mod connect;
mod damaged;
mod grants;
mod guards;
mod inspect;
mod renew;
mod wait;
mod watch;
mod wipe;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use fred::prelude::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};
use leasehold_core::{
    AcquireError, Capabilities, Floor, Grant, InspectError, PoolName, PoolSpec, Release, Renewal,
    SlotInfo, Strategy,
};

use crate::config::{DEFAULT_OP_TIMEOUT, ValkeyConfig};
use crate::durability::Persistence;
use crate::error::{Failure, classify};
use crate::scripts::{Script, Scripts};
use crate::server::ServerInfo;

/// Extra time the `tokio` backstop allows over `fred`'s own command timeout.
const BACKSTOP_SLACK: Duration = Duration::from_millis(250);

/// The path a connected strategy uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ActivePath {
    /// One hash per pool, per-field TTLs (`HSETEX`).
    Hsetex,
    /// One key per slot, scripts.
    Scripts,
    /// [`Method::Hsetex`](crate::Method::Hsetex) was forced on a server without `HSETEX`: every
    /// acquisition fails with a final `UnsupportedServer` error.
    Unsupported,
}

impl fmt::Display for ActivePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Hsetex => "hsetex",
            Self::Scripts => "scripts",
            Self::Unsupported => "unsupported",
        })
    }
}

/// The keys of one pool. They share the hash tag `{<prefix>:<pool>}`, so a
/// pool lives on one Redis Cluster slot and its scripts may touch all of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolKeys {
    /// HSETEX path: the hash of slot fields (`"17" → token`) and ownership
    /// markers (`"token.17.<token>" → "17"`), all with per-field TTLs.
    pub leases: String,
    /// Both paths: the persistent hash (no TTLs) of per-slot fences
    /// (`"17" → n`), per-slot hand-over floors (`"floor.17" → Unix ms`),
    /// per-slot holder records for `inspect` (`"holder.17" → "<8 hex digits
    /// of the token> <secs> <micros> <ttl ms> <holder>"`), and the claim
    /// scan's starting hint (`"next" → n`), the pool's restart span
    /// (`"span"`, `"span_fsynced"` → ms) and ID format (`"id_format" →
    /// <text>`, recorded by the first claim that declares one), and the
    /// promotion guard's record: the server's replication ID as last seen
    /// (`"replid"`), when a claim first saw it after a change that may be a
    /// failover (`"replid_seen"` → the server's ms, `0`: no wait), and
    /// whether the pool's server ever had replicas (`"replicated" → 1`).
    pub fences: String,
    /// Script path: slot `n`'s key is this prefix followed by `n`.
    pub slot_prefix: String,
}

impl PoolKeys {
    /// The keys of `pool` under `prefix`.
    pub fn new(prefix: &str, pool: &PoolName) -> Self {
        let tag = format!("{{{prefix}:{pool}}}");
        Self {
            leases: format!("{tag}:leases"),
            fences: format!("{tag}:fences"),
            slot_prefix: format!("{tag}:slot:"),
        }
    }

    /// Script path: the key of `slot`.
    pub fn slot_key(&self, slot: u32) -> String {
        format!("{}{slot}", self.slot_prefix)
    }
}

/// The route of a custom command in a Cluster, as `fred` 10.1 honours it:
/// of a `CustomCommand`'s `ClusterHash` it reads only `Custom(slot)`, and
/// routes every other by the first string argument (`FirstKey`): for
/// `EVALSHA` the SHA, for `EVAL` the script body, so a script went to a node
/// that does not serve its keys, got `MOVED`, and the redirected re-send
/// failed ("Too many failed write attempts": a command is sent at most
/// once). An `Offset(i)` is therefore turned into the slot of argument `i`
/// here. Without a Cluster the route is ignored.
pub(crate) fn route(hash: ClusterHash, args: &[Value]) -> ClusterHash {
    match hash {
        ClusterHash::Offset(i) => match args.get(i).and_then(Value::as_bytes) {
            Some(key) => ClusterHash::Custom(fred::util::redis_keyslot(key)),
            None => ClusterHash::Offset(i),
        },
        other => other,
    }
}

/// The HSETEX path's ownership marker for `slot` held by `token` (the
/// scripts build it themselves; this is for benchmarks and tests).
#[cfg(feature = "stats")]
pub(crate) fn marker(slot: u32, token: &leasehold_core::Token) -> String {
    format!("token.{slot}.{}", token.to_hex())
}

struct Inner {
    client: fred::clients::Client,
    config: ValkeyConfig,
    server: ServerInfo,
    path: ActivePath,
    scripts: Scripts,
    round_trips: AtomicU64,
    identity: String,
    /// What the connection trusts and presents, when the URL asks for TLS.
    tls: Option<crate::TlsInfo>,
    /// The server's settings as last read and judged: at connect, then by
    /// the watch (`watch.rs`) at most once per quarter TTL.
    judged: RwLock<Arc<Judged>>,
    /// When the settings were last read, in ms since `born`.
    read_at: AtomicU64,
    born: Instant,
    /// Test hook: the next wait (for the fsync or for replicas) reconnects
    /// first.
    #[cfg(feature = "stats")]
    reconnect_before_wait: std::sync::atomic::AtomicBool,
}

/// Refusals kept instead of raised, each with the doctor's check that
/// reports it (`eviction`, `persistence`, `replication`).
pub(crate) type Kept = Vec<(&'static str, String)>;

/// Each Cluster primary, named by its address, with what it keeps.
pub(crate) type Nodes = Vec<(String, Persistence)>;

/// What the strategy judged of the server's settings under its
/// configuration: the one judgement behind the refusal at connect, the
/// claims' refusals, the watch and the doctor's checks.
#[derive(Clone, Debug)]
pub(crate) struct Judged {
    /// What the server keeps, as read (in a Cluster, the weakest
    /// primary's answer).
    durability: Persistence,
    /// In a Cluster, what each primary keeps (empty otherwise).
    nodes: Nodes,
    /// Claims wait (`WAITAOF`) until the pool's recorded span is on disk:
    /// the append-only file with `appendfsync everysec` and
    /// `no-appendfsync-on-rewrite no`, on a server with `WAITAOF`.
    fsync_claims: bool,
    /// What `connect` would have refused, kept instead
    /// ([`ValkeyConfig::refuse_at_connect`]`(false)`, or found later by the
    /// watch): every claim answers the first. Each with the doctor's check
    /// that reports it.
    refusals: Kept,
    /// The server's replication, with what `connect` would have refused
    /// for it when told not to refuse.
    replication: leasehold_core::Replication,
    /// The server a plain URL names is a replica (found by the watch; at
    /// connect it is refused unless only looked at): renewals are not
    /// confirmed on it. Through Sentinel or a Cluster a replica is one
    /// mid-failover, which the client leaves for the new primary.
    replica: bool,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // fred's connection task outlives the client handle; stop it.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let client = self.client.clone();
            rt.spawn(async move {
                let _ = client.quit().await;
            });
        }
    }
}

/// Leases in Valkey or Redis through `fred`. Cheap to clone (one shared
/// connection, commands are pipelined).
///
/// See the crate documentation for the data layout and the safety argument.
#[derive(Clone)]
pub struct ValkeyStrategy {
    inner: Arc<Inner>,
}

impl fmt::Debug for ValkeyStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ValkeyStrategy")
            .field("identity", &self.inner.identity)
            .field("server", &self.inner.server.to_string())
            .field("path", &self.inner.path)
            .field("durability", &self.judged().durability.to_string())
            .field("tls", &self.inner.tls.as_ref().map(ToString::to_string))
            .finish()
    }
}

impl ValkeyStrategy {
    /// The smallest TTL accepted: leases are kept in milliseconds.
    pub const MIN_TTL: Duration = Duration::from_millis(100);

    /// The per-operation timeout unless [`ValkeyConfig::op_timeout`] sets another.
    pub const DEFAULT_OP_TIMEOUT: Duration = DEFAULT_OP_TIMEOUT;

    /// The per-command timeout.
    pub(crate) fn op_timeout(&self) -> Duration {
        self.inner.config.op_timeout
    }

    /// What the probe found.
    pub fn server(&self) -> &ServerInfo {
        &self.inner.server
    }

    /// What the server's configuration says about keeping leases, fences
    /// and floors (read at connect, and again at most once per quarter TTL
    /// by the next claim or renewal), with the warning when
    /// [`ValkeyConfig::allow_eviction`] let an evicting server through.
    pub fn persistence(&self) -> Persistence {
        self.judged().durability.clone()
    }

    /// The server's replication as last read (at connect, then at most
    /// once per quarter TTL): a primary and how many replicas it has,
    /// whether it can split brain and the setting that closes it (see
    /// [`ValkeyConfig::refuse_split_brain`]).
    pub fn replication(&self) -> leasehold_core::Replication {
        self.judged().replication.clone()
    }

    /// In a Cluster, what each primary keeps, as last read (the watch reads
    /// a promoted replica among them); empty otherwise.
    pub(crate) fn node_persistence(&self) -> Nodes {
        self.judged().nodes.clone()
    }

    /// The settings as last judged.
    fn judged(&self) -> Arc<Judged> {
        Arc::clone(
            &self
                .inner
                .judged
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Whether the claim scripts hold grants back after a restart (the
    /// restart guard) and after a failover to a replica (the promotion
    /// guard, see `scripts::promotion_functions`), on every server, durable
    /// or not. The settings read at connect say nothing of those the server
    /// ran with before its last restart: a `CONFIG SET appendonly no` or
    /// `appendfsync no`, never written to the config file, loses claims in a
    /// crash, and the server comes back durable from its file. And a
    /// promoted replica may lack what the old primary acknowledged, whatever
    /// either keeps. Off only with
    /// [`DurabilityPolicy::Throwaway`](leasehold_core::DurabilityPolicy::Throwaway).
    fn guard_on(&self) -> bool {
        // (Rule 12 broken on purpose by the campaign's planted bugs; a
        // constant false otherwise.)
        let planted = leasehold_core::plant::active(leasehold_core::plant::Plant::NoRestartGuard);
        self.inner.config.restart_guard && !planted
    }

    /// The connection's TLS, when the URL asks for it (`rediss://`,
    /// `valkeys://`, and their `-sentinel` and `-cluster` forms): the CA the
    /// server is verified against (or the system's roots), the client
    /// certificate, and the protocol of the latest handshake. `None`: plain
    /// text. Every TLS connection verifies the server's certificate and host
    /// name; there is no unverified TLS.
    pub fn tls(&self) -> Option<&crate::TlsInfo> {
        self.inner.tls.as_ref()
    }

    /// What `connect` would have refused this server for under its
    /// configuration, kept because [`ValkeyConfig::refuse_at_connect`] was
    /// `false`: the text of the [`ValkeyError`](crate::ValkeyError) it
    /// would have answered (eviction before durability). `None`: the server
    /// is accepted. Every claim answers it as a final
    /// `AcquireError::Misconfigured`.
    pub fn refusal(&self) -> Option<String> {
        self.judged().refusals.first().map(|(_, text)| text.clone())
    }

    /// The opt-in that accepted a server that can forget acknowledged
    /// writes, as its URL option (`None`: none was needed).
    pub(crate) fn opt_in(&self) -> Option<&'static str> {
        let config = &self.inner.config;
        let judged = self.judged();
        if judged.durability.keeps_every_write() || judged.fsync_claims {
            None
        } else if !config.restart_guard {
            Some("durability=throwaway")
        } else if config.one_timing {
            Some("durability=one-timing-per-pool")
        } else {
            None
        }
    }

    /// Whether claims wait for the fsync of the pool's recorded span.
    pub(crate) fn fsync_claims(&self) -> bool {
        self.judged().fsync_claims
    }

    /// The kept refusal the doctor's check `check` (`eviction`,
    /// `persistence`) reports.
    pub(crate) fn refusal_of(&self, check: &str) -> Option<String> {
        self.judged()
            .refusals
            .iter()
            .find(|(c, _)| *c == check)
            .map(|(_, text)| text.clone())
    }

    /// The path in use.
    pub fn path(&self) -> ActivePath {
        self.inner.path
    }

    /// The `fred` client, for inspection and administration.
    pub fn client(&self) -> &fred::clients::Client {
        &self.inner.client
    }

    /// The keys of `pool`.
    pub fn keys(&self, pool: &PoolName) -> PoolKeys {
        PoolKeys::new(&self.inner.config.prefix, pool)
    }

    /// Commands sent since connect (one per round trip; the probe and script
    /// loading at connect, and the re-reads of the server's settings at most
    /// once per quarter TTL, are not counted). For benchmarks and tests: with the
    /// `stats` feature only.
    #[cfg(feature = "stats")]
    pub fn round_trips(&self) -> u64 {
        self.inner.round_trips.load(Ordering::Relaxed)
    }

    /// One command, one round trip, bounded by the operation timeout.
    async fn call<R: fred::types::FromValue>(
        &self,
        cmd: &'static str,
        hash: ClusterHash,
        args: Vec<Value>,
    ) -> Result<R, Failure> {
        self.inner.round_trips.fetch_add(1, Ordering::Relaxed);
        self.call_uncounted(cmd, hash, args).await
    }

    /// [`Self::call`], not counted in [`Self::round_trips`]: the reads of
    /// the server's settings, at connect and by the watch.
    async fn call_uncounted<R: fred::types::FromValue>(
        &self,
        cmd: &'static str,
        hash: ClusterHash,
        args: Vec<Value>,
    ) -> Result<R, Failure> {
        let limit = self.inner.config.op_timeout + BACKSTOP_SLACK;
        let command = CustomCommand::new_static(cmd, route(hash, &args), false);
        match tokio::time::timeout(limit, self.inner.client.custom::<R, Value>(command, args)).await
        {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(classify(&e)),
            Err(_) => Err(Failure::Transient(format!(
                "{cmd}: no answer within {limit:?}"
            ))),
        }
    }

    /// Runs a script by SHA; if the server lost it, sends the body once.
    async fn eval(
        &self,
        script: &Script,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> Result<Value, Failure> {
        let build = |head: &str| {
            let mut v: Vec<Value> = Vec::with_capacity(2 + keys.len() + args.len());
            v.push(head.into());
            v.push(Value::Integer(keys.len() as i64));
            v.extend(keys.iter().map(|k| Value::from(k.as_str())));
            v.extend(args.iter().map(|a| Value::from(a.as_str())));
            v
        };
        match self
            .call("EVALSHA", ClusterHash::Offset(2), build(&script.sha))
            .await
        {
            Err(Failure::NoScript) => {
                self.call("EVAL", ClusterHash::Offset(2), build(script.body))
                    .await
            }
            other => other,
        }
        .map_err(|f| match f {
            Failure::Rejected(r) => Failure::Rejected(format!("script {}: {r}", script.name)),
            f => f,
        })
    }

    fn unsupported(&self) -> AcquireError {
        AcquireError::UnsupportedServer {
            what: format!(
                "HSETEX is not supported by this server ({}); it needs Redis 8+ or Valkey 9+",
                self.inner.server
            ),
            fix: "upgrade the server, or use Method::Auto or Method::Scripts (the script \
                  strategy: one key per slot, SET NX PX), which works on this server"
                .into(),
        }
    }
}

impl Strategy for ValkeyStrategy {
    async fn acquire(&self, pool: &PoolSpec, ceiling: Floor) -> Result<Grant, AcquireError> {
        self.claim(pool, ceiling).await
    }

    async fn renew(&self, pool: &PoolSpec, grant: &Grant, ceiling: Floor) -> Renewal {
        self.renew_lease(pool, grant, ceiling).await
    }

    async fn release(&self, pool: &PoolSpec, grant: &Grant, issued: Floor) -> Release {
        self.release_lease(pool, grant, issued).await
    }

    /// Field and key TTLs are kept in milliseconds; every slot's floor is
    /// kept in the fences hash (`floor.<slot>`, no TTL) and written by the
    /// same script as the claim, renewal or release it comes with.
    fn capabilities(&self) -> Capabilities {
        Capabilities::coordinated(true, Self::MIN_TTL)
            .with_time_resolution(Duration::from_millis(1))
            .with_persisted_floor()
            .with_inspect()
    }

    /// Every slot of the pool as the store records it: the holder while its
    /// lease is live, the fence, the floor and the TTL left; a revoked slot
    /// shows its tombstone's TTL and no holder.
    async fn inspect(&self, pool: &PoolSpec) -> Result<Vec<SlotInfo>, InspectError> {
        self.inspect_slots(pool).await
    }

    fn identity(&self) -> String {
        self.inner.identity.clone()
    }
}
