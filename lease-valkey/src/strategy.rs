//! The strategy: connection, probe, and the three lease operations.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fred::prelude::{ClientLike, ReconnectPolicy};
use fred::types::config::{Config, UnresponsiveConfig};
use fred::types::{Builder, ClusterHash, CustomCommand, Value};
use leasehold_core::{
    AcquireError, Capabilities, ConfigError, Fence, Floor, Grant, InspectError, PoolName, PoolSpec,
    Reason, Release, Renewal, SlotInfo, Strategy, Token,
};

use crate::config::{DEFAULT_OP_TIMEOUT, Method, ValkeyConfig, check_prefix, redact};
use crate::durability::Persistence;
use crate::error::{Failure, ValkeyError, classify};
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
    /// [`Method::Hsetex`] was forced on a server without `HSETEX`: every
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
    /// <text>`, recorded by the first claim that declares one).
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

/// The HSETEX path's ownership marker for `slot` held by `token` (the
/// scripts build it themselves; this is for benchmarks and tests).
#[cfg(feature = "stats")]
pub(crate) fn marker(slot: u32, token: &Token) -> String {
    format!("token.{slot}.{}", token.to_hex())
}

struct Inner {
    client: fred::clients::Client,
    config: ValkeyConfig,
    server: ServerInfo,
    durability: Persistence,
    path: ActivePath,
    scripts: Scripts,
    round_trips: AtomicU64,
    identity: String,
    /// Claims wait (`WAITAOF`) until the pool's recorded span is on disk:
    /// the append-only file with `appendfsync everysec` or `no`, on a server
    /// with `WAITAOF`.
    fsync_claims: bool,
    /// Test hook: the next wait (for the fsync or for replicas) reconnects
    /// first.
    #[cfg(feature = "stats")]
    reconnect_before_wait: std::sync::atomic::AtomicBool,
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
            .field("durability", &self.inner.durability.to_string())
            .finish()
    }
}

impl ValkeyStrategy {
    /// The smallest TTL accepted: leases are kept in milliseconds.
    pub const MIN_TTL: Duration = Duration::from_millis(100);

    /// The per-operation timeout unless [`ValkeyConfig::op_timeout`] sets another.
    pub const DEFAULT_OP_TIMEOUT: Duration = DEFAULT_OP_TIMEOUT;

    /// Connects, probes the server (`INFO server`, `COMMAND INFO HSETEX
    /// WAITAOF`),
    /// reads what it keeps ([`ValkeyStrategy::durability`]: `CONFIG GET`),
    /// picks the path and loads its scripts. A server whose
    /// `maxmemory-policy` may evict keys is refused with
    /// [`ValkeyError::Eviction`] unless [`ValkeyConfig::allow_eviction`] says
    /// otherwise. A server that can forget acknowledged writes (not
    /// `appendonly yes` with `appendfsync always`, or unreadable) is refused
    /// with [`ValkeyError::NotDurable`], unless it runs the append-only file
    /// with `appendfsync everysec` or `no` and has `WAITAOF` (claims then
    /// wait for the fsync of the pool's recorded span), or
    /// [`ValkeyConfig::assume_one_timing_per_pool`] or
    /// [`ValkeyConfig::restart_guard`]`(false)` accepts it (never with
    /// [`ValkeyConfig::require_durable`]).
    ///
    /// Every command is bounded by the configured operation timeout: `fred`'s
    /// command and connection timeouts are set to it, a command is sent at
    /// most once (no silent re-send after a dropped connection), commands
    /// fail at once while the connection is down instead of queueing, an
    /// unresponsive connection is closed and reopened in the background, and
    /// a `tokio` timeout wraps every call as a backstop.
    pub async fn connect(config: ValkeyConfig) -> Result<Self, ValkeyError> {
        check_prefix(&config.prefix)?;
        crate::url::refuse_tls(config.url.split_once("://").map_or("", |(s, _)| s))?;
        if config.op_timeout.is_zero() {
            return Err(ConfigError::new(
                "op_timeout",
                "0s",
                "a timeout above zero, well below the renewal interval",
            )
            .into());
        }
        if let Some((replicas, wait)) = config.wait
            && (replicas == 0 || wait < Duration::from_millis(1) || wait >= config.op_timeout)
        {
            return Err(ConfigError::new(
                "wait_for_replicas",
                format!("{replicas} replicas within {wait:?}"),
                format!(
                    "at least 1 replica, within 1 ms to less than the operation timeout ({:?})",
                    config.op_timeout
                ),
            )
            .into());
        }
        let url = redact(&config.url);
        let timeout = config.op_timeout;
        let bad_url = |source: fred::error::Error| {
            ValkeyError::from(ConfigError::new(
                "url",
                format!("{url} ({source})"),
                "redis://[user:pass@]host:port[/db]",
            ))
        };
        let mut fred_config = Config::from_url(&config.url).map_err(bad_url)?;
        fred_config.fail_fast = true;
        let client = Builder::from_config(fred_config)
            .with_connection_config(|c| {
                c.connection_timeout = timeout;
                c.internal_command_timeout = timeout;
                c.max_command_attempts = 1;
                c.unresponsive = UnresponsiveConfig {
                    max_timeout: Some(timeout),
                    interval: (timeout / 4).max(Duration::from_millis(10)),
                };
                c.tcp.nodelay = Some(true);
            })
            .with_performance_config(|p| p.default_command_timeout = timeout)
            .set_policy(ReconnectPolicy::new_exponential(0, 20, 1000, 2))
            .build()
            .map_err(bad_url)?;
        let unreachable = |reason: String| ValkeyError::Unreachable {
            url: url.clone(),
            timeout,
            reason,
        };
        match tokio::time::timeout(timeout + BACKSTOP_SLACK, client.init()).await {
            Ok(Ok(_task)) => {}
            Ok(Err(e)) => return Err(unreachable(e.to_string())),
            Err(_) => {
                let _ = client.quit().await;
                return Err(unreachable("no answer".into()));
            }
        }
        let wait = config.wait;
        let mut strategy = Self {
            inner: Arc::new(Inner {
                client,
                config,
                server: ServerInfo::from_info(""),
                durability: Persistence::unknown(wait),
                path: ActivePath::Scripts,
                scripts: Scripts::new(),
                round_trips: AtomicU64::new(0),
                identity: String::new(),
                fsync_claims: false,
                #[cfg(feature = "stats")]
                reconnect_before_wait: std::sync::atomic::AtomicBool::new(false),
            }),
        };
        let server = strategy.probe(&url).await?;
        let mut durability = strategy.read_durability(&url).await?;
        if durability.evicts() == Some(true) {
            if !strategy.inner.config.allow_eviction {
                let _ = strategy.inner.client.quit().await;
                return Err(ValkeyError::Eviction {
                    server: server.to_string(),
                    policy: durability.maxmemory_policy.unwrap_or_default(),
                });
            }
            durability.eviction_allowed = true;
        }
        let config = &strategy.inner.config;
        // With the append-only file and WAITAOF, a claim waits until the
        // pool's recorded span is on disk, so the guard knows it after any
        // restart.
        let fsync_claims = config.restart_guard
            && !durability.keeps_every_write()
            && durability.fsyncs_on_request()
            && server.waitaof;
        let accepted = !config.restart_guard || config.one_timing || fsync_claims;
        if !durability.keeps_every_write() && (config.require_durable || !accepted) {
            let required = config.require_durable;
            let _ = strategy.inner.client.quit().await;
            return Err(ValkeyError::NotDurable {
                server: server.to_string(),
                settings: durability.persistence_settings(),
                durability: durability.to_string(),
                required,
            });
        }
        let path = match (strategy.inner.config.method, server.hsetex) {
            (Method::Auto | Method::Hsetex, true) => ActivePath::Hsetex,
            (Method::Auto, false) | (Method::Scripts, _) => ActivePath::Scripts,
            (Method::Hsetex, false) => ActivePath::Unsupported,
        };
        {
            let inner = Arc::get_mut(&mut strategy.inner).expect("not shared yet");
            inner.identity = format!("{url}#{}/{path}", inner.config.prefix);
            inner.server = server;
            inner.durability = durability;
            inner.path = path;
            inner.fsync_claims = fsync_claims;
        }
        if path != ActivePath::Unsupported {
            for script in strategy.inner.scripts.for_path(path == ActivePath::Hsetex) {
                strategy
                    .call::<Value>(
                        "SCRIPT",
                        ClusterHash::Random,
                        vec!["LOAD".into(), script.body.into()],
                    )
                    .await
                    .map_err(|f| strategy.failure_error("SCRIPT LOAD", &url, f))?;
            }
        }
        strategy.inner.round_trips.store(0, Ordering::Relaxed);
        Ok(strategy)
    }

    async fn probe(&self, url: &str) -> Result<ServerInfo, ValkeyError> {
        let info: String = self
            .call("INFO", ClusterHash::Random, vec!["server".into()])
            .await
            .map_err(|f| self.failure_error("INFO server", url, f))?;
        let mut server = ServerInfo::from_info(&info);
        match self
            .call::<Value>(
                "COMMAND",
                ClusterHash::Random,
                vec!["INFO".into(), "HSETEX".into(), "WAITAOF".into()],
            )
            .await
        {
            // An unknown command comes back as a nil entry.
            Ok(Value::Array(entries)) => {
                let known = |i: usize| entries.get(i).is_some_and(|e| !matches!(e, Value::Null));
                server.hsetex = known(0);
                server.waitaof = known(1);
            }
            Ok(_) => {}
            // COMMAND denied by an ACL: keep the answer from the version.
            Err(Failure::Denied(_) | Failure::Rejected(_)) => {}
            Err(f) => return Err(self.failure_error("COMMAND INFO HSETEX WAITAOF", url, f)),
        }
        Ok(server)
    }

    /// Reads `maxmemory-policy`, `appendonly`, `appendfsync` and `save`, one
    /// `CONFIG GET` each (Redis 6 takes one pattern per call). A server that
    /// refuses `CONFIG` (disabled, renamed, denied by an ACL) leaves them
    /// unknown.
    async fn read_durability(&self, url: &str) -> Result<Persistence, ValkeyError> {
        let mut d = Persistence::unknown(self.inner.config.wait);
        for name in ["maxmemory-policy", "appendonly", "appendfsync", "save"] {
            let value = match self
                .call::<Value>(
                    "CONFIG",
                    ClusterHash::Random,
                    vec!["GET".into(), name.into()],
                )
                .await
            {
                Ok(v) => config_value(&v),
                Err(Failure::Denied(_) | Failure::Rejected(_)) => return Ok(d),
                Err(f) => return Err(self.failure_error("CONFIG GET", url, f)),
            };
            match name {
                "maxmemory-policy" => d.maxmemory_policy = value,
                "appendonly" => d.appendonly = value.map(|v| v.eq_ignore_ascii_case("yes")),
                "appendfsync" => d.appendfsync = value,
                _ => d.save = value,
            }
        }
        Ok(d)
    }

    fn failure_error(&self, command: &'static str, url: &str, f: Failure) -> ValkeyError {
        match f {
            Failure::Transient(reason) => ValkeyError::Unreachable {
                url: url.to_owned(),
                timeout: self.inner.config.op_timeout,
                reason,
            },
            other => ValkeyError::Server {
                server: self.inner.server.to_string(),
                command,
                reason: other.text().to_owned(),
            },
        }
    }

    /// The per-command timeout.
    pub(crate) fn op_timeout(&self) -> Duration {
        self.inner.config.op_timeout
    }

    /// What the probe found.
    pub fn server(&self) -> &ServerInfo {
        &self.inner.server
    }

    /// What the server's configuration says about keeping leases, fences
    /// and floors (read at connect), with the warning when
    /// [`ValkeyConfig::allow_eviction`] let an evicting server through.
    pub fn persistence(&self) -> &Persistence {
        &self.inner.durability
    }

    /// Whether the claim scripts hold grants back after a restart: on a
    /// server that does not keep every acknowledged write (`appendonly
    /// yes`, `appendfsync always`), unless [`ValkeyConfig::restart_guard`]
    /// turned the guard off.
    fn guard_on(&self) -> bool {
        // (Rule 12 broken on purpose by the campaign's planted bugs; a
        // constant false otherwise.)
        let planted = leasehold_core::plant::active(leasehold_core::plant::Plant::NoRestartGuard);
        self.inner.config.restart_guard && !self.inner.durability.keeps_every_write() && !planted
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
    /// loading at connect are not counted). For benchmarks and tests: with the
    /// `stats` feature only.
    #[cfg(feature = "stats")]
    pub fn round_trips(&self) -> u64 {
        self.inner.round_trips.load(Ordering::Relaxed)
    }

    /// Ends `slot`'s lease behind its holder's back, as an operator would:
    /// the holder's next renewal is `Lost` and its release `NotHeld`.
    ///
    /// The slot is not freed at once: the holder may go on generating until
    /// its next renewal, so its slot field (HSETEX path) or slot key (script
    /// path) is overwritten with a tombstone that keeps the lease's expiry,
    /// and nobody claims the slot before the revoked lease would have
    /// expired. The next holder gets a bigger fence and the slot's floor.
    /// A lease on the other path's representation of the slot (a process
    /// that has not switched paths yet) is revoked too. Works on every path,
    /// also [`ActivePath::Unsupported`]. Returns whether a live lease was
    /// there.
    pub async fn revoke(&self, pool: &PoolSpec, slot: u32) -> Result<bool, ValkeyError> {
        let keys = self.keys(pool.name());
        let url = redact(&self.inner.config.url);
        let slot_key = keys.slot_key(slot);
        let n = self
            .eval(
                &self.inner.scripts.revoke,
                vec![keys.leases, slot_key],
                vec![slot.to_string()],
            )
            .await
            .map_err(|f| self.failure_error("EVALSHA (revoke)", &url, f))?
            .as_i64()
            .unwrap_or(0);
        Ok(n == 1)
    }

    /// One command, one round trip, bounded by the operation timeout.
    async fn call<R: fred::types::FromValue>(
        &self,
        cmd: &'static str,
        hash: ClusterHash,
        args: Vec<Value>,
    ) -> Result<R, Failure> {
        self.inner.round_trips.fetch_add(1, Ordering::Relaxed);
        let limit = self.inner.config.op_timeout + BACKSTOP_SLACK;
        let command = CustomCommand::new_static(cmd, hash, false);
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

    /// With [`ValkeyConfig::wait_for_replicas`]: proves that `grant`'s
    /// claim or renewal reached that many replicas, by [`Self::wait_after_mark`]
    /// with `WAIT replicas timeout`. `Err` says why fewer than asked may
    /// have it.
    async fn wait_for_replicas(&self, keys: &PoolKeys, grant: &Grant) -> Result<(), String> {
        let Some((replicas, timeout)) = self.inner.config.wait else {
            return Ok(());
        };
        self.wait_after_mark(keys, grant, Wait::Replicas { replicas, timeout })
            .await
    }

    /// On a server that fsyncs on request, proves that `grant`'s claim, and
    /// the pool's recorded span and ID format it relies on, are on disk, by
    /// [`Self::wait_after_mark`] with `WAITAOF 1 0 t`. Then raises
    /// `span_fsynced` to `span` so that later claims of no longer a span
    /// need not wait. `t` is three quarters of the operation timeout, so
    /// the server answers before the client gives up. `Err` says why the
    /// claim may not be on disk.
    async fn wait_for_fsync(
        &self,
        keys: &PoolKeys,
        grant: &Grant,
        span: &str,
    ) -> Result<(), String> {
        let timeout = self.inner.config.op_timeout * 3 / 4;
        self.wait_after_mark(keys, grant, Wait::Fsync { timeout })
            .await?;
        // Only an optimisation: if it is lost, later claims wait again.
        let _ = self
            .eval(
                &self.inner.scripts.raise_fsynced_span,
                vec![keys.fences.clone()],
                vec![span.to_owned()],
            )
            .await;
        Ok(())
    }

    /// Proves that what the scripts wrote for `grant` so far (its claim or
    /// renewal, and what they rely on) reached the disk or the replicas, as
    /// `wait` asks: one pipeline on one connection (and Cluster node: the
    /// pool's) sends the mark script (`scripts::MARK_LEASE`: a write of
    /// this connection, made only while the server's data holds the lease)
    /// and the wait, which answers for this connection's writes so far. The
    /// append-only file and the replication stream keep writes in order, so
    /// once the mark is fsynced or on the replicas, the claim or renewal
    /// before it is too. The claim or renewal itself may have gone out on a
    /// connection that has since been replaced: a wait alone, sent after
    /// it, would then answer at once for a connection that wrote nothing.
    /// `Err` says why it may not be proven.
    async fn wait_after_mark(
        &self,
        keys: &PoolKeys,
        grant: &Grant,
        wait: Wait,
    ) -> Result<(), String> {
        #[cfg(feature = "stats")]
        if self
            .inner
            .reconnect_before_wait
            .swap(false, Ordering::Relaxed)
        {
            let _ = self.inner.client.force_reconnection().await;
        }
        // EVAL, not EVALSHA: a lost script cache would cost a second
        // pipeline, and a second wait.
        let mark = vec![
            self.inner.scripts.mark_lease.body.into(),
            3.into(),
            keys.fences.as_str().into(),
            keys.leases.as_str().into(),
            keys.slot_key(grant.slot).into(),
            grant.slot.to_string().into(),
            grant.token.to_hex().into(),
        ];
        let hash = ClusterHash::Custom(fred::util::redis_keyslot(keys.fences.as_bytes()));
        let name = wait.command();
        let mut answers = self
            .pipeline(vec![
                ("EVAL", ClusterHash::Offset(2), mark),
                (name, hash, wait.args()),
            ])
            .await?
            .into_iter();
        match answers.next() {
            Some(Ok(Value::Integer(1))) => {}
            Some(Ok(Value::Integer(0))) => {
                return Err(format!("the lease was gone before {}", wait.what()));
            }
            Some(Ok(v)) => return Err(format!("the mark before {name} answered {v:?}")),
            Some(Err(f)) => return Err(format!("the mark before {name} failed: {}", f.text())),
            None => return Err(format!("no answer to the mark before {name}")),
        }
        match answers.next() {
            Some(Ok(v)) => wait.judge(&v),
            Some(Err(f)) => Err(format!("{name} failed: {}", f.text())),
            None => Err(format!("no answer to {name}")),
        }
    }

    /// Commands sent together in one pipeline, one round trip, on one
    /// connection: fred writes them back to back on the connection each
    /// routes to, and a connection that fails on the way fails the rest
    /// (a command is sent at most once), so none of them goes out on
    /// another connection. Bounded by the operation timeout. `Err` when the
    /// pipeline got no answer; otherwise one answer per command.
    async fn pipeline(
        &self,
        commands: Vec<(&'static str, ClusterHash, Vec<Value>)>,
    ) -> Result<Vec<Result<Value, Failure>>, String> {
        self.inner.round_trips.fetch_add(1, Ordering::Relaxed);
        let limit = self.inner.config.op_timeout + BACKSTOP_SLACK;
        let names: Vec<&str> = commands.iter().map(|(cmd, _, _)| *cmd).collect();
        let pipeline = self.inner.client.pipeline();
        for (cmd, hash, args) in commands {
            let command = CustomCommand::new_static(cmd, hash, false);
            pipeline
                .custom::<Value, Value>(command, args)
                .await
                .map_err(|e| format!("{cmd}: {e}"))?;
        }
        let answers = tokio::time::timeout(limit, pipeline.try_all::<Value>())
            .await
            .map_err(|_| format!("{}: no answer within {limit:?}", names.join(" + ")))?;
        Ok(answers
            .into_iter()
            .map(|r| r.map_err(|e| classify(&e)))
            .collect())
    }

    /// Test hook: the next claim or renewal that waits, for the fsync
    /// (`WAITAOF`) or for replicas (`WAIT`), reconnects (`fred`'s
    /// `force_reconnection`) between its script and the wait, as a dropped
    /// connection would make it do. With the `stats` feature only.
    #[cfg(feature = "stats")]
    pub fn reconnect_before_the_next_wait(&self) {
        self.inner
            .reconnect_before_wait
            .store(true, Ordering::Relaxed);
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

/// What a claim or renewal waits for after its mark
/// ([`ValkeyStrategy::wait_after_mark`]).
#[derive(Clone, Copy, Debug)]
enum Wait {
    /// `WAITAOF 1 0 timeout`: the mark fsynced on this server.
    Fsync { timeout: Duration },
    /// `WAIT replicas timeout`: the mark on that many replicas.
    Replicas { replicas: u32, timeout: Duration },
}

impl Wait {
    fn command(self) -> &'static str {
        match self {
            Self::Fsync { .. } => "WAITAOF",
            Self::Replicas { .. } => "WAIT",
        }
    }

    fn args(self) -> Vec<Value> {
        let ms = |t: Duration| {
            u64::try_from(t.as_millis())
                .unwrap_or(u64::MAX)
                .max(1)
                .to_string()
                .into()
        };
        match self {
            Self::Fsync { timeout } => vec![1.into(), 0.into(), ms(timeout)],
            Self::Replicas { replicas, timeout } => vec![i64::from(replicas).into(), ms(timeout)],
        }
    }

    fn what(self) -> &'static str {
        match self {
            Self::Fsync { .. } => "its fsync could be confirmed",
            Self::Replicas { .. } => "replicas could acknowledge it",
        }
    }

    /// `Ok` when the wait's answer proves enough; otherwise why not.
    fn judge(self, answer: &Value) -> Result<(), String> {
        match self {
            Self::Fsync { timeout } => match answer {
                Value::Array(v) if v.first().and_then(Value::as_i64) >= Some(1) => Ok(()),
                v => Err(format!(
                    "the append-only file was not fsynced within {timeout:?} (WAITAOF answered \
                     {v:?})"
                )),
            },
            Self::Replicas { replicas, timeout } => match answer.as_i64() {
                Some(n) if n >= i64::from(replicas) => Ok(()),
                Some(n) => Err(format!(
                    "only {n} of {replicas} replicas acknowledged it within {timeout:?}"
                )),
                None => Err(format!("WAIT answered {answer:?}")),
            },
        }
    }
}

/// The TTL in whole milliseconds, as sent to the server (`PX`), and the
/// TTL that applies: the requested one floored to the millisecond (the
/// server keeps expiries in milliseconds).
fn ttl_ms(ttl: Duration) -> Option<(String, Duration)> {
    let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    (ms >= 1).then(|| (ms.to_string(), Duration::from_millis(ms)))
}

/// A `u64` from an integer or a decimal string reply.
fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::String(s) => s.parse().ok(),
        Value::Bytes(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::Integer(n) => u64::try_from(*n).ok(),
        _ => None,
    }
}

/// The server's `TIME` (seconds, microseconds) as a time since the Unix
/// epoch.
fn store_time(secs: &Value, micros: &Value) -> Option<Duration> {
    let micros = as_u64(micros).filter(|m| *m < 1_000_000)?;
    Some(Duration::from_secs(as_u64(secs)?) + Duration::from_micros(micros))
}

/// A restart span in whole milliseconds, rounded up (the guard may wait a
/// little longer, never shorter).
fn span_ms(span: Duration) -> u64 {
    u64::try_from(span.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// What a claim script answered.
#[derive(Debug, PartialEq, Eq)]
enum Claim {
    Granted {
        slot: u32,
        fence: u64,
        floor: Floor,
        at: Duration,
        /// The claimer's span is above the span known to be on disk, or
        /// the claim recorded the pool's ID format: the grant is used only
        /// once its writes are on disk.
        unconfirmed: bool,
    },
    Full,
    FencesLost,
    /// The restart guard holds for this many ms.
    Restarted(u64),
    /// This slot's fence is not a number the script can raise exactly.
    FenceUnusable(u32),
    /// The pool recorded this ID format, not the one the claim declared.
    OtherIdFormat(String),
}

/// A claim script's answer: `{slot, fence, floor, secs, micros,
/// unconfirmed}` (the floor as a decimal string, exact for every `u64`; the
/// server's `TIME`; 1 when the claimer's span is above the span known to be
/// on disk or the claim recorded the pool's ID format), -1 when the pool is
/// full, -2 when its fences hash was lost, `{-3, ms}` while the restart
/// guard holds, `{-4, slot}` for a slot whose fence is unusable, `{-5,
/// recorded}` when the pool recorded another ID format.
fn parse_claim(v: &Value) -> Option<Claim> {
    match v {
        Value::Integer(-1) => Some(Claim::Full),
        Value::Integer(-2) => Some(Claim::FencesLost),
        Value::Array(items) if items.len() == 2 && items[0].as_i64() == Some(-3) => {
            Some(Claim::Restarted(u64::try_from(items[1].as_i64()?).ok()?))
        }
        Value::Array(items) if items.len() == 2 && items[0].as_i64() == Some(-4) => Some(
            Claim::FenceUnusable(u32::try_from(items[1].as_i64()?).ok()?),
        ),
        Value::Array(items) if items.len() == 2 && items[0].as_i64() == Some(-5) => {
            Some(Claim::OtherIdFormat(items[1].as_string()?))
        }
        Value::Array(items) if items.len() == 6 => Some(Claim::Granted {
            slot: u32::try_from(items[0].as_i64()?).ok()?,
            fence: u64::try_from(items[1].as_i64()?).ok()?,
            floor: Floor(as_u64(&items[2])?),
            at: store_time(&items[3], &items[4])?,
            unconfirmed: items[5].as_i64()? == 1,
        }),
        _ => None,
    }
}

/// A renewal script's answer: `{1, secs, micros}` when renewed (the server's
/// `TIME`), 0 when not held.
fn parse_renewal(v: &Value) -> Option<Option<Duration>> {
    match v {
        Value::Integer(0) => Some(None),
        Value::Array(items) if items.len() == 3 && items[0].as_i64() == Some(1) => {
            Some(Some(store_time(&items[1], &items[2])?))
        }
        _ => None,
    }
}

/// The inspect script's answer (see `scripts::INSPECT`) as slots.
fn parse_inspect(v: &Value) -> Option<Vec<SlotInfo>> {
    let Value::Array(items) = v else { return None };
    let now = store_time(items.first()?, items.get(1)?)?;
    items[2..].iter().map(|e| slot_info(e, now)).collect()
}

/// One entry of the inspect script, `{slot, fence, floor, token, pttl,
/// holder}`, at the server's time `now`.
fn slot_info(entry: &Value, now: Duration) -> Option<SlotInfo> {
    let Value::Array(f) = entry else { return None };
    let [slot, fence, floor, token, pttl, record] = f.as_slice() else {
        return None;
    };
    let info = SlotInfo::free(
        u32::try_from(slot.as_i64()?).ok()?,
        Fence(as_u64(fence)?),
        Floor(as_u64(floor)?),
    );
    let token = token.as_string().unwrap_or_default();
    let left = pttl
        .as_i64()
        .and_then(|ms| u64::try_from(ms).ok())
        .map(Duration::from_millis);
    Some(match (token.as_str(), left) {
        ("", _) | (_, None) => info,
        ("revoked", Some(left)) => info.revoked_until(left),
        (prefix, Some(left)) => {
            let record = HolderRecord::parse(&record.as_string().unwrap_or_default());
            match record.filter(|r| r.token_prefix == prefix) {
                Some(r) => {
                    let held_for = now.checked_sub(r.claimed_at);
                    let renewed_ago = r
                        .ttl
                        .checked_sub(left)
                        .map(|d| held_for.map_or(d, |h| d.min(h)));
                    info.held_by_prefix(r.holder, prefix, left)
                        .with_ages(renewed_ago, held_for)
                }
                // Claimed by a process that writes no record, or the record
                // of an earlier holder: the holder is not known.
                None => info.held_by_prefix("", prefix, left),
            }
        }
    })
}

/// A slot's holder record, `holder.<slot>` in the fences hash: `<token
/// prefix> <secs> <micros> <ttl ms> <holder>` (see `scripts::holder_function`).
struct HolderRecord {
    token_prefix: String,
    claimed_at: Duration,
    ttl: Duration,
    holder: String,
}

impl HolderRecord {
    fn parse(s: &str) -> Option<Self> {
        let mut parts = s.splitn(5, ' ');
        let token_prefix = parts.next()?.to_owned();
        let secs: u64 = parts.next()?.parse().ok()?;
        let micros: u64 = parts.next()?.parse().ok().filter(|m| *m < 1_000_000)?;
        let ttl: u64 = parts.next()?.parse().ok()?;
        Some(Self {
            token_prefix,
            claimed_at: Duration::from_secs(secs) + Duration::from_micros(micros),
            ttl: Duration::from_millis(ttl),
            holder: parts.next().unwrap_or_default().to_owned(),
        })
    }
}

/// One `CONFIG GET name` answer's value: `[name, value]` (RESP2) or
/// `{name: value}` (RESP3); `None` when the server does not know the name.
fn config_value(v: &Value) -> Option<String> {
    let value = match v {
        Value::Array(items) => items.get(1)?,
        Value::Map(map) => map.values().next()?,
        _ => return None,
    };
    value.as_string()
}

impl Strategy for ValkeyStrategy {
    async fn acquire(&self, pool: &PoolSpec, ceiling: Floor) -> Result<Grant, AcquireError> {
        let Some((ttl, applied)) = ttl_ms(pool.ttl()) else {
            return Err(AcquireError::Misconfigured {
                what: format!("ttl {:?} is below the store's 1 ms resolution", pool.ttl()),
                fix: format!("use a ttl of at least {:?}", Self::MIN_TTL),
            });
        };
        let keys = self.keys(pool.name());
        let wait_keys = keys.clone();
        let fences_key = keys.fences.clone();
        let token = Token::random();
        let ceiling = ceiling.unix_millis().to_string();
        let span = span_ms(pool.restart_span()).to_string();
        let guard = if self.guard_on() { "1" } else { "0" }.to_owned();
        let format = pool.id_format().map_or("", |f| f.text()).to_owned();
        let result = match self.inner.path {
            ActivePath::Unsupported => return Err(self.unsupported()),
            ActivePath::Hsetex => {
                self.eval(
                    &self.inner.scripts.claim_hsetex,
                    vec![keys.leases, keys.fences],
                    vec![
                        pool.size().to_string(),
                        ttl,
                        token.to_hex(),
                        ceiling,
                        keys.slot_prefix,
                        span.clone(),
                        pool.holder().to_owned(),
                        guard,
                        format.clone(),
                    ],
                )
                .await
            }
            ActivePath::Scripts => {
                self.eval(
                    &self.inner.scripts.claim_scripts,
                    vec![keys.fences, keys.leases],
                    vec![
                        pool.size().to_string(),
                        ttl,
                        token.to_hex(),
                        keys.slot_prefix,
                        ceiling,
                        span.clone(),
                        pool.holder().to_owned(),
                        guard,
                        format.clone(),
                    ],
                )
                .await
            }
        };
        let value = result.map_err(|f| match f {
            Failure::Transient(r) => AcquireError::Unreachable(Reason::new(r)),
            Failure::NoScript => AcquireError::Unreachable(Reason::new(
                "the server lost the claim script twice in a row",
            )),
            Failure::Denied(r) => AcquireError::Misconfigured {
                what: format!("{} refused the claim: {r}", self.inner.server),
                fix: "check the password and grant the user EVALSHA, EVAL and SCRIPT, and \
                      the commands the scripts call (HSETEX, HGET, HSET, HDEL, HLEN, HEXISTS, \
                      HINCRBY, HSETNX, EXISTS, SET, GET, PEXPIRE, DEL, TIME, and INFO for the \
                      restart guard) on the pool's keys (and WAIT with \
                      ValkeyConfig::wait_for_replicas, WAITAOF on a server that fsyncs once a \
                      second, CONFIG GET at connect)"
                    .into(),
            },
            Failure::Rejected(r) => AcquireError::Misconfigured {
                what: format!("{} rejected the claim: {r}", self.inner.server),
                fix: format!(
                    "make sure nothing but leasehold writes the keys {{{}:{}}}:*",
                    self.inner.config.prefix,
                    pool.name()
                ),
            },
        })?;
        match parse_claim(&value) {
            Some(Claim::Granted {
                slot,
                fence,
                floor,
                at,
                unconfirmed,
            }) => {
                let grant = Grant::new(slot, token, Fence(fence), applied)
                    .with_floor(floor)
                    .with_store_time(at);
                if self.inner.fsync_claims
                    && unconfirmed
                    && let Err(why) = self.wait_for_fsync(&wait_keys, &grant, &span).await
                {
                    // The span that tells the guard how long this lease may
                    // outlive a restart, or the pool's ID format this claim
                    // recorded, may not be on disk: a crash could forget
                    // it. Nothing was issued under it.
                    let _ = self.release(pool, &grant, grant.floor).await;
                    return Err(AcquireError::Unreachable(Reason::new(format!(
                        "claimed slot {slot} but {why}; released it"
                    ))));
                }
                if let Err(why) = self.wait_for_replicas(&wait_keys, &grant).await {
                    // Not on enough replicas: a failover could forget it.
                    // Nothing was issued under it, so the floor goes back.
                    let _ = self.release(pool, &grant, grant.floor).await;
                    return Err(AcquireError::Unreachable(Reason::new(format!(
                        "claimed slot {slot} but {why}; released it"
                    ))));
                }
                Ok(grant)
            }
            Some(Claim::OtherIdFormat(recorded)) => Err(AcquireError::OtherIdFormat {
                pool: pool.name().to_string(),
                recorded,
                ours: format,
            }),
            Some(Claim::Restarted(ms)) => Err(AcquireError::StoreRestarted {
                resume_in: Duration::from_millis(ms),
            }),
            Some(Claim::Full) => Err(AcquireError::PoolExhausted {
                pool: pool.name().to_string(),
                size: pool.size(),
            }),
            Some(Claim::FencesLost) => Err(AcquireError::Misconfigured {
                what: format!(
                    "the fences hash {fences_key} of pool {} was lost (evicted, deleted, or not \
                     replicated before a failover) while leases of the pool remained: fences \
                     would restart at 1 and floors at 0, below what earlier holders used, so \
                     {} grants no slot of this pool",
                    pool.name(),
                    self.inner.server
                ),
                fix: format!(
                    "keep the server from losing data (maxmemory-policy noeviction; AOF or RDB; \
                     WAIT for replicas), then restore {fences_key} from a backup, or set every \
                     slot's fence above any fence used before (HSET {fences_key} <slot> <n>) and \
                     its floor to the current Unix ms (HSET {fences_key} floor.<slot> <ms>) and, if \
                     the pool's processes declare an ID format, record it again (HSET \
                     {fences_key} id_format <text>), and delete the marker (HDEL {fences_key} lost)"
                ),
            }),
            Some(Claim::FenceUnusable(slot)) => Err(AcquireError::Misconfigured {
                what: format!(
                    "the fence of slot {slot} in {fences_key} (pool {}) is not a whole number \
                     below 2^53 - 1, so the claim script cannot give the next one exactly; \
                     {} grants this slot to nobody",
                    pool.name(),
                    self.inner.server
                ),
                fix: format!(
                    "make sure nothing but leasehold writes {fences_key}; a fence need not be \
                     repaired to rise (the next one is at least the server's clock in µs), so \
                     delete the field (HDEL {fences_key} {slot}) once every holder of the slot \
                     has stopped"
                ),
            }),
            None => Err(AcquireError::Misconfigured {
                what: format!("unexpected answer to the claim script: {value:?}"),
                fix: "report this as a leasehold bug, with the server version".into(),
            }),
        }
    }

    async fn renew(&self, pool: &PoolSpec, grant: &Grant, ceiling: Floor) -> Renewal {
        let Some((ttl, applied)) = ttl_ms(pool.ttl()) else {
            return Renewal::Lost(Reason::new("ttl below 1 ms"));
        };
        let keys = self.keys(pool.name());
        let wait_keys = keys.clone();
        let slot = grant.slot.to_string();
        let ceiling = ceiling.unix_millis().to_string();
        let result: Result<Value, Failure> = match self.inner.path {
            ActivePath::Unsupported => {
                return Renewal::Lost(Reason::new(self.unsupported().to_string()));
            }
            // Both fields exist only while this token holds the slot: they were
            // written together with one TTL and vanish together. A script, so
            // that the floor is raised in the same atomic step.
            ActivePath::Hsetex => {
                self.eval(
                    &self.inner.scripts.renew_hsetex,
                    vec![keys.leases, keys.fences],
                    vec![slot, grant.token.to_hex(), ttl, ceiling],
                )
                .await
            }
            ActivePath::Scripts => {
                self.eval(
                    &self.inner.scripts.renew_scripts,
                    vec![keys.slot_key(grant.slot), keys.fences],
                    vec![grant.token.to_hex(), ttl, slot, ceiling],
                )
                .await
            }
        };
        match result.as_ref().map(parse_renewal) {
            Ok(Some(Some(at))) => match self.wait_for_replicas(&wait_keys, grant).await {
                Ok(()) => Renewal::renewed(applied).with_store_time(at),
                Err(why) => Renewal::Retry(Reason::new(format!("renewed, but {why}"))),
            },
            Ok(Some(None)) => Renewal::Lost(Reason::new(format!(
                "slot {} is no longer held by this token (expired, taken or revoked)",
                grant.slot
            ))),
            Ok(None) => Renewal::Retry(Reason::new(format!(
                "unexpected answer to the renewal: {result:?}"
            ))),
            Err(Failure::Rejected(r)) => {
                Renewal::Lost(Reason::new(format!("the server rejected the renewal: {r}")))
            }
            Err(f) => Renewal::Retry(Reason::new(f.text().to_owned())),
        }
    }

    async fn release(&self, pool: &PoolSpec, grant: &Grant, issued: Floor) -> Release {
        let keys = self.keys(pool.name());
        let issued = issued.unix_millis().to_string();
        let result = match self.inner.path {
            ActivePath::Unsupported => return Release::NotHeld,
            ActivePath::Hsetex => {
                self.eval(
                    &self.inner.scripts.release_hsetex,
                    vec![keys.leases, keys.fences],
                    vec![grant.slot.to_string(), grant.token.to_hex(), issued],
                )
                .await
            }
            ActivePath::Scripts => {
                self.eval(
                    &self.inner.scripts.release_scripts,
                    vec![keys.slot_key(grant.slot), keys.fences],
                    vec![grant.slot.to_string(), grant.token.to_hex(), issued],
                )
                .await
            }
        };
        match result {
            Ok(Value::Integer(1)) => Release::Released,
            Ok(Value::Integer(0)) => Release::NotHeld,
            Ok(other) => Release::Retry(Reason::new(format!(
                "unexpected answer to the release: {other:?}"
            ))),
            Err(f) => Release::Retry(Reason::new(f.text().to_owned())),
        }
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

    /// One read-only script (one round trip) reads every slot of the pool on
    /// the server: fence and floor from the fences hash, the live token's
    /// first 8 hex digits and its TTL (`HPTTL` of the slot field, or `PTTL`
    /// of the slot key), and the holder record the claim wrote
    /// (`holder.<slot>`: identity, claim time on the server's `TIME`, TTL
    /// asked). The holder is named only while the record's token digits
    /// match the live token's; `held_for` is the server's time since the
    /// claim; `renewed_ago` is the claim's TTL minus the TTL left, since
    /// every renewal sets the TTL anew (exact while the holder renews with
    /// the TTL it claimed with, as a [`PoolSpec`] does). A revoked slot
    /// shows its tombstone's TTL and no holder.
    async fn inspect(&self, pool: &PoolSpec) -> Result<Vec<SlotInfo>, InspectError> {
        let keys = self.keys(pool.name());
        let hpttl = if self.inner.server.hsetex { "1" } else { "0" };
        let value = self
            .eval(
                &self.inner.scripts.inspect,
                vec![keys.leases, keys.fences],
                vec![pool.size().to_string(), keys.slot_prefix, hpttl.to_owned()],
            )
            .await
            .map_err(|f| InspectError::Store(Reason::new(format!("inspect: {}", f.text()))))?;
        parse_inspect(&value).ok_or_else(|| {
            InspectError::Store(Reason::new(format!(
                "unexpected answer to the inspect script from {}",
                self.inner.server
            )))
        })
    }

    fn identity(&self) -> String {
        self.inner.identity.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applied_ttl_is_floored_to_the_millisecond() {
        let (px, applied) = ttl_ms(Duration::from_micros(1_500_999)).expect("above 1 ms");
        assert_eq!(px, "1500");
        assert_eq!(applied, Duration::from_millis(1500));
        assert!(ttl_ms(Duration::from_micros(999)).is_none());
    }

    #[test]
    fn answers_carry_the_server_time() {
        let s = |v: &str| Value::from(v);
        let claim = Value::Array(vec![
            Value::Integer(3),
            Value::Integer(7),
            s("18446744073709551615"),
            s("1700000000"),
            s("250000"),
            Value::Integer(1),
        ]);
        assert_eq!(
            parse_claim(&claim),
            Some(Claim::Granted {
                slot: 3,
                fence: 7,
                floor: Floor(u64::MAX),
                at: Duration::from_millis(1_700_000_000_250),
                unconfirmed: true,
            })
        );
        let other = Value::Array(vec![Value::Integer(-5), s("ids/v1: 64 bits")]);
        assert_eq!(
            parse_claim(&other),
            Some(Claim::OtherIdFormat("ids/v1: 64 bits".into()))
        );
        let unusable = Value::Array(vec![Value::Integer(-4), Value::Integer(2)]);
        assert_eq!(parse_claim(&unusable), Some(Claim::FenceUnusable(2)));
        assert_eq!(span_ms(Duration::from_micros(62_000_001)), 62_001);
        assert_eq!(parse_claim(&Value::Integer(-1)), Some(Claim::Full));
        assert_eq!(parse_claim(&Value::Integer(-2)), Some(Claim::FencesLost));
        let renewed = Value::Array(vec![Value::Integer(1), s("1700000001"), s("5")]);
        assert_eq!(
            parse_renewal(&renewed),
            Some(Some(Duration::new(1_700_000_001, 5_000)))
        );
        assert_eq!(parse_renewal(&Value::Integer(0)), Some(None));
        // An old script's bare 1 (or microseconds out of range) is not a
        // renewal this version understands.
        assert_eq!(parse_renewal(&Value::Integer(1)), None);
        let bad = Value::Array(vec![Value::Integer(1), s("1"), s("1000000")]);
        assert_eq!(parse_renewal(&bad), None);
    }

    #[test]
    fn inspect_names_a_holder_only_while_its_record_matches_the_live_token() {
        let s = |v: &str| Value::from(v);
        let entry = |slot: i64, token: &str, pttl: i64, record: &str| {
            Value::Array(vec![
                Value::Integer(slot),
                s("4"),
                s("9000"),
                s(token),
                Value::Integer(pttl),
                s(record),
            ])
        };
        let answer = Value::Array(vec![
            s("1700000010"),
            s("0"),
            entry(
                0,
                "abcdef01",
                25_000,
                "abcdef01 1700000000 500000 30000 host/1 a b",
            ),
            entry(1, "12345678", 30_000, "abcdef01 1700000000 0 30000 earlier"),
            entry(2, "revoked", 7_000, "99999999 1700000000 0 30000 gone"),
            entry(3, "", -2, "abcdef01 1700000000 0 30000 released"),
        ]);
        let slots = parse_inspect(&answer).expect("parses");
        assert_eq!(slots.len(), 4);
        let held = &slots[0];
        assert_eq!(held.holder.as_deref(), Some("host/1 a b"));
        assert_eq!(held.token_prefix.as_deref(), Some("abcdef01"));
        assert_eq!((held.fence, held.floor), (Fence(4), Floor(9000)));
        assert_eq!(held.expires_in, Some(Duration::from_secs(25)));
        assert_eq!(held.renewed_ago, Some(Duration::from_secs(5)));
        assert_eq!(held.held_for, Some(Duration::from_millis(9_500)));
        // Another holder's record: held, by nobody known.
        assert_eq!(slots[1].holder.as_deref(), Some(""));
        assert_eq!(slots[1].token_prefix.as_deref(), Some("12345678"));
        assert!(slots[2].holder.is_none() && slots[2].token_prefix.is_none());
        assert_eq!(slots[2].expires_in, Some(Duration::from_secs(7)));
        assert!(slots[3].holder.is_none() && slots[3].expires_in.is_none());
    }
}
