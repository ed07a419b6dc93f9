//! Connecting: the client's settings, the server probe (`INFO server`,
//! `COMMAND INFO`), what it keeps (`CONFIG GET`), the path and its scripts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use fred::prelude::{ClientLike, ReconnectPolicy};
use fred::types::config::{Config, TlsConfig, TlsConnector, TlsHostMapping, UnresponsiveConfig};
use fred::types::{Builder, ClusterHash, Value};
use leasehold_core::ConfigError;

use super::answers::config_value;
use super::{ActivePath, BACKSTOP_SLACK, Inner, Judged, Kept, Nodes, ValkeyStrategy};
use crate::acl::LeaseUserAcl;
use crate::config::{Method, ValkeyConfig, check_prefix, redact};
use crate::credentials::Provider;
use crate::durability::Persistence;
use crate::error::TlsFailure;
use crate::error::{Failure, ValkeyError};
use crate::scripts::Scripts;
use crate::server::ServerInfo;
use crate::tls::{PlainProbe, Tls, probe_plain, scheme_for_fred};

impl ValkeyStrategy {
    /// Connects, probes the server (`INFO server`, `COMMAND INFO HSETEX
    /// WAITAOF`),
    /// reads what it keeps ([`ValkeyStrategy::persistence`]: `CONFIG GET`),
    /// picks the path and loads its scripts. A server whose
    /// `maxmemory-policy` may evict keys is refused with
    /// [`ValkeyError::Eviction`] unless [`ValkeyConfig::allow_eviction`] says
    /// otherwise. A server that can forget acknowledged writes (not
    /// `appendonly yes` with `appendfsync always` and
    /// `no-appendfsync-on-rewrite no`, or unreadable) is refused with
    /// [`ValkeyError::NotDurable`], unless it runs the append-only file with
    /// `appendfsync everysec` and `no-appendfsync-on-rewrite no` and has
    /// `WAITAOF` (claims then wait for the fsync of the pool's recorded
    /// span), or the [`ValkeyConfig::durability`] policy
    /// `OneTimingPerPool` or `Throwaway` accepts it (never with the
    /// deprecated [`ValkeyConfig::require_durable`]`(true)`).
    ///
    /// Every command is bounded by the configured operation timeout: `fred`'s
    /// command and connection timeouts are set to it, a command is sent at
    /// most once (no silent re-send after a dropped connection), commands
    /// fail at once while the connection is down instead of queueing, an
    /// unresponsive connection is closed and reopened in the background, and
    /// a `tokio` timeout wraps every call as a backstop.
    pub async fn connect(config: ValkeyConfig) -> Result<Self, ValkeyError> {
        check_settings(&config)?;
        let url = redact(&config.url);
        let (client, tls) = open_client(&config, &url).await?;
        let mut strategy = Self {
            inner: Arc::new(Inner {
                client,
                config,
                server: ServerInfo::from_info(""),
                path: ActivePath::Scripts,
                scripts: Scripts::new(),
                round_trips: AtomicU64::new(0),
                identity: String::new(),
                tls: tls.map(|t| t.info),
                judged: RwLock::new(Arc::new(Judged {
                    durability: Persistence::unknown(None),
                    nodes: Vec::new(),
                    fsync_claims: false,
                    refusals: Vec::new(),
                    replication: leasehold_core::Replication::default(),
                    replica: false,
                })),
                read_at: AtomicU64::new(0),
                born: Instant::now(),
                #[cfg(feature = "stats")]
                reconnect_before_wait: std::sync::atomic::AtomicBool::new(false),
            }),
        };
        let server = strategy.probe(&url).await?;
        let refuse = strategy.inner.config.refuse_at_connect;
        let judged = match strategy.read_settings(&server, &url, refuse).await {
            Ok(judged) => judged,
            Err(refusal) => {
                let _ = strategy.inner.client.quit().await;
                return Err(refusal);
            }
        };
        if let Some(risk) = &judged.replication.split_brain {
            tracing::warn!(
                store = %url,
                server = %server,
                replication = %judged.replication.found,
                setting = %risk.setting,
                fix = %risk.fix,
                "the lease store can split brain: after a failover the old primary goes on \
                 confirming claims and renewals to the clients a partition left with it; \
                 refuse_split_brain=true refuses such a store at connect"
            );
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
            inner.judged = RwLock::new(Arc::new(judged));
            inner.path = path;
        }
        if path != ActivePath::Unsupported {
            strategy.load_scripts(path, &url).await?;
        }
        strategy.inner.round_trips.store(0, Ordering::Relaxed);
        Ok(strategy)
    }

    /// Reads the server's settings (what it keeps, its replication) and
    /// judges them under the configuration: at connect, and again by the
    /// watch. With `refuse`, the first refusal is answered (a replica's
    /// first, then eviction, then durability); without, every refusal is
    /// kept for the claims to answer and the doctor to report.
    pub(super) async fn read_settings(
        &self,
        server: &ServerInfo,
        url: &str,
        refuse: bool,
    ) -> Result<Judged, ValkeyError> {
        let (durability, nodes) = self.read_durability(url).await?;
        let (mut replication, replication_refusal, replica) =
            self.read_replication(server, url).await?;
        if let Some(refusal) = replication_refusal {
            if refuse {
                return Err(refusal);
            }
            replication.refusal = Some(refusal.to_string());
        }
        let (durability, fsync_claims, mut refusals) = self.accept(server, durability, refuse)?;
        // A replica's refusal comes first: claims answer it.
        if let Some(refusal) = replication.refusal.clone() {
            refusals.insert(0, ("replication", refusal));
        }
        Ok(Judged {
            durability,
            nodes,
            fsync_claims,
            refusals,
            replication,
            replica,
        })
    }

    /// Refuses a server that may evict keys, or that can forget writes it
    /// acknowledged, unless the configuration accepts it (with `refuse`);
    /// otherwise what it keeps, whether claims wait for the fsync of the
    /// pool's recorded span, and the refusals kept instead of raised.
    fn accept(
        &self,
        server: &ServerInfo,
        mut durability: Persistence,
        refuse: bool,
    ) -> Result<(Persistence, bool, Kept), ValkeyError> {
        let config = &self.inner.config;
        let (fsync_claims, mut refusals) = judge(config, server, &mut durability);
        if refuse && !refusals.is_empty() {
            return Err(refusals.swap_remove(0));
        }
        let kept = refusals
            .iter()
            .map(|e| {
                let check = match e {
                    ValkeyError::Eviction { .. } => "eviction",
                    _ => "persistence",
                };
                (check, e.to_string())
            })
            .collect();
        Ok((durability, fsync_claims, kept))
    }

    /// Reads the server's replication (`INFO replication`, and on a primary
    /// with replicas `CONFIG GET min-replicas-to-write` and
    /// `min-replicas-max-lag`) and judges it: what it is, and the refusal
    /// `connect` makes (a plain URL naming a replica; a primary that can
    /// split brain under [`ValkeyConfig::refuse_split_brain`]). Through
    /// Sentinel or a Cluster the client asks for primaries, so a replica
    /// found there is one mid-failover, not refused; the last of the three
    /// answers says whether the server is a replica reached by a plain URL
    /// (renewals are not confirmed on it). A server that refuses
    /// `INFO replication` or `CONFIG GET` to the user leaves them unknown.
    async fn read_replication(
        &self,
        server: &ServerInfo,
        url: &str,
    ) -> Result<(leasehold_core::Replication, Option<ValkeyError>, bool), ValkeyError> {
        use crate::replication::{Read, judge, replica_text};
        let config = &self.inner.config;
        let info: String = match self
            .call_uncounted("INFO", ClusterHash::Random, vec!["replication".into()])
            .await
        {
            Ok(info) => info,
            Err(Failure::Denied(_) | Failure::Rejected(_)) => {
                let unknown = leasehold_core::Replication::new(
                    "unknown: INFO replication was refused to the user",
                );
                return Ok((unknown, None, false));
            }
            Err(f) => return Err(self.failure_error("INFO replication", url, f)),
        };
        let mut read = Read::from_info(&info);
        if read.is_replica() {
            let (what, fix) = replica_text(&server.to_string(), &read);
            let plain = !self.inner.client.is_clustered()
                && !config
                    .url
                    .split_once("://")
                    .is_some_and(|(scheme, _)| scheme.ends_with("-sentinel"));
            let refusal = plain.then(|| ValkeyError::Replica {
                what: what.clone(),
                fix,
            });
            // Through Sentinel or a Cluster, a replica is one mid-failover
            // (the client moves to the new primary), and refuses writes
            // unless made writable: renewals go on being tried there.
            return Ok((leasehold_core::Replication::new(what), refusal, plain));
        }
        if read.replicas > 0 {
            for name in ["min-replicas-to-write", "min-replicas-max-lag"] {
                let args = vec!["GET".into(), name.into()];
                let value = match self
                    .call_uncounted::<Value>("CONFIG", ClusterHash::Random, args)
                    .await
                {
                    Ok(v) => config_value(&v),
                    Err(Failure::Denied(_) | Failure::Rejected(_)) => None,
                    Err(f) => return Err(self.failure_error("CONFIG GET", url, f)),
                };
                match name {
                    "min-replicas-to-write" => {
                        read.min_replicas = value.and_then(|v| v.trim().parse().ok());
                    }
                    _ => read.max_lag = value,
                }
            }
        }
        let replication = judge(&read, config.wait);
        let refusal = (config.refuse_split_brain && replication.split_brain.is_some())
            .then(|| ValkeyError::SplitBrain(replication.clone()));
        Ok((replication, refusal, false))
    }

    /// Loads the scripts of `path` (`SCRIPT LOAD`), so that the first
    /// operations find them by SHA.
    async fn load_scripts(&self, path: ActivePath, url: &str) -> Result<(), ValkeyError> {
        for script in self.inner.scripts.for_path(path == ActivePath::Hsetex) {
            self.call::<Value>(
                "SCRIPT",
                ClusterHash::Random,
                vec!["LOAD".into(), script.body.into()],
            )
            .await
            .map_err(|f| self.failure_error("SCRIPT LOAD", url, f))?;
        }
        Ok(())
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

    /// Reads `maxmemory-policy`, `appendonly`, `appendfsync`,
    /// `no-appendfsync-on-rewrite` and `save`, one `CONFIG GET` each (Redis 6 takes one pattern per call). A server that
    /// refuses `CONFIG` (disabled, renamed, denied by an ACL) leaves them
    /// unknown.
    ///
    /// In a Cluster, `CONFIG GET` answers for the one node it reaches, and
    /// a pool lives on any primary: every primary the client is connected
    /// to (all of them, from the slot map) is read, and the weakest answer
    /// is kept (one that may evict, else one that can forget a write, else
    /// the first), so that `connect` refuses a cluster with one
    /// non-durable primary; each primary's answer comes too. Replicas are
    /// not read here: one promoted later is read by the watch, among the
    /// primaries, while the promotion guard still holds claims back on it.
    async fn read_durability(&self, url: &str) -> Result<(Persistence, Nodes), ValkeyError> {
        let client = &self.inner.client;
        if !client.is_clustered() {
            return Ok((self.read_durability_of(None, url).await?, Vec::new()));
        }
        let mut primaries = client.active_connections();
        primaries.sort_by_key(|s| s.to_string());
        let mut weakest: Option<Persistence> = None;
        let mut nodes = Vec::new();
        for server in primaries {
            let name = server.to_string();
            let d = self.read_durability_of(Some(server), url).await?;
            nodes.push((name, d.clone()));
            let rank = |p: &Persistence| match (p.evicts(), p.keeps_every_write()) {
                (Some(true), _) => 2,
                (_, false) => 1,
                _ => 0,
            };
            if weakest.as_ref().is_none_or(|w| rank(&d) > rank(w)) {
                weakest = Some(d);
            }
        }
        let weakest = weakest.unwrap_or_else(|| Persistence::unknown(self.inner.config.wait));
        Ok((weakest, nodes))
    }

    /// [`ValkeyStrategy::read_durability`] on one server: `node` (a Cluster
    /// primary) or wherever the client sends commands.
    async fn read_durability_of(
        &self,
        node: Option<fred::types::config::Server>,
        url: &str,
    ) -> Result<Persistence, ValkeyError> {
        let mut d = Persistence::unknown(self.inner.config.wait);
        for name in [
            "maxmemory-policy",
            "appendonly",
            "appendfsync",
            "no-appendfsync-on-rewrite",
            "save",
        ] {
            let args = vec!["GET".into(), name.into()];
            let answer = match &node {
                None => {
                    self.call_uncounted::<Value>("CONFIG", ClusterHash::Random, args)
                        .await
                }
                Some(server) => self.call_on(server, "CONFIG", args).await,
            };
            let value = match answer {
                Ok(v) => config_value(&v),
                Err(Failure::Denied(refusal)) => {
                    d.config_denied = Some(
                        LeaseUserAcl::new(&self.inner.config.prefix)
                            .rule_for(&refusal)
                            .unwrap_or_else(|| "+config|get".to_owned()),
                    );
                    return Ok(d);
                }
                Err(Failure::Rejected(_)) => return Ok(d),
                Err(f) => return Err(self.failure_error("CONFIG GET", url, f)),
            };
            match name {
                "maxmemory-policy" => d.maxmemory_policy = value,
                "appendonly" => d.appendonly = value.map(|v| v.eq_ignore_ascii_case("yes")),
                "appendfsync" => d.appendfsync = value,
                "no-appendfsync-on-rewrite" => {
                    d.no_appendfsync_on_rewrite = value.map(|v| v.eq_ignore_ascii_case("yes"));
                }
                _ => d.save = value,
            }
        }
        Ok(d)
    }

    /// One command to one Cluster node, bounded by the operation timeout.
    async fn call_on(
        &self,
        server: &fred::types::config::Server,
        cmd: &'static str,
        args: Vec<Value>,
    ) -> Result<Value, Failure> {
        let limit = self.inner.config.op_timeout + BACKSTOP_SLACK;
        let command = fred::types::CustomCommand::new_static(cmd, ClusterHash::Random, false);
        let node = self.inner.client.with_cluster_node(server.clone());
        match tokio::time::timeout(limit, node.custom::<Value, Value>(command, args)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(crate::error::classify(&e)),
            Err(_) => Err(Failure::Transient(format!(
                "{cmd} on {server}: no answer within {limit:?}"
            ))),
        }
    }

    pub(super) fn failure_error(
        &self,
        command: &'static str,
        url: &str,
        f: Failure,
    ) -> ValkeyError {
        match f {
            Failure::Transient(reason) => ValkeyError::Unreachable {
                url: url.to_owned(),
                timeout: self.inner.config.op_timeout,
                reason,
            },
            Failure::Denied(reason) if crate::error::is_authentication_reply(&reason) => {
                ValkeyError::Authentication {
                    url: url.to_owned(),
                    reason,
                }
            }
            Failure::Denied(refusal) => {
                let acl = self.lease_user_acl();
                let rules: Vec<String> = acl.rule_for(&refusal).into_iter().collect();
                let user = self
                    .inner
                    .config
                    .url_user()
                    .unwrap_or_else(|| "default".into());
                ValkeyError::Denied {
                    server: self.inner.server.to_string(),
                    command,
                    explained: crate::error::refusal_text(&refusal, &rules, &user, &acl),
                }
            }
            other => ValkeyError::Server {
                server: self.inner.server.to_string(),
                command,
                reason: other.text().to_owned(),
            },
        }
    }
}

/// What `connect` judges of a server whose probe found `server` and whose
/// settings are `durability`, under `config`: whether claims wait for the
/// fsync of the pool's recorded span, and every refusal, eviction first
/// (none: accepted). The one judgement behind the refusal at connect and
/// the doctor's checks. Marks an eviction the configuration allows.
pub(crate) fn judge(
    config: &ValkeyConfig,
    server: &ServerInfo,
    durability: &mut Persistence,
) -> (bool, Vec<ValkeyError>) {
    let mut refusals = Vec::new();
    if durability.evicts() == Some(true) {
        if config.allow_eviction {
            durability.eviction_allowed = true;
        } else {
            refusals.push(ValkeyError::Eviction {
                server: server.to_string(),
                policy: durability.maxmemory_policy.clone().unwrap_or_default(),
            });
        }
    }
    // With the append-only file and WAITAOF, a claim waits until the
    // pool's recorded span is on disk, so the guard knows it after any
    // restart.
    let fsync_claims = config.restart_guard
        && !durability.keeps_every_write()
        && durability.fsyncs_on_request()
        && server.waitaof;
    let accepted = !config.restart_guard || config.one_timing || fsync_claims;
    if !durability.keeps_every_write() && (config.require_durable || !accepted) {
        refusals.push(ValkeyError::NotDurable {
            server: server.to_string(),
            settings: durability.persistence_settings(),
            durability: durability.to_string(),
            required: config.require_durable,
            waitaof: server.waitaof,
        });
    }
    (fsync_claims, refusals)
}

/// The settings `connect` refuses before it opens anything: the key
/// prefix, TLS files with a plain-text URL (or in a query `fred` does not
/// read), a zero operation timeout, and a replica wait that
/// cannot end before the operation timeout.
fn check_settings(config: &ValkeyConfig) -> Result<(), ValkeyError> {
    check_prefix(&config.prefix)?;
    config.check_credentials()?;
    crate::url::refuse_unread_tls_options(&config.url)?;
    if !config.uses_tls() && !config.tls.is_empty() {
        let scheme = config.url.split_once("://").map_or("", |(s, _)| s);
        return Err(crate::url::plain_with_tls_files(
            &scheme.to_ascii_lowercase(),
            &config.tls,
        ));
    }
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
    Ok(())
}

/// The `fred` client of `config`, every timeout set to the operation
/// timeout (`url` is the URL without credentials), and its connection
/// opened; with its TLS when the URL asks for it.
async fn open_client(
    config: &ValkeyConfig,
    url: &str,
) -> Result<(fred::clients::Client, Option<Tls>), ValkeyError> {
    let timeout = config.op_timeout;
    let bad_url = |source: fred::error::Error| {
        ValkeyError::from(ConfigError::new(
            "url",
            format!("{url} ({source})"),
            "redis://[user:pass@]host:port[/db]",
        ))
    };
    let tls = if config.uses_tls() {
        Some(Tls::new(&config.tls)?)
    } else {
        None
    };
    // fred reads the URL with a plain-text scheme, and gets the TLS
    // configuration built here: it would otherwise build its own from the
    // system's roots alone.
    let (scheme, rest) = config.url.split_once("://").unwrap_or(("", &config.url));
    let for_fred = format!("{}://{rest}", scheme_for_fred(scheme));
    let mut fred_config = Config::from_url(&for_fred).map_err(bad_url)?;
    fred_config.fail_fast = true;
    fred_config.tls = tls.as_ref().map(|t| TlsConfig {
        connector: TlsConnector::from(t.config.clone()),
        hostnames: TlsHostMapping::None,
    });
    let hosts = fred_config.server.hosts();
    // A credential source answers for every new connection, in place of
    // the URL's password (which `check_settings` made sure is absent).
    let failure = config.credentials.as_ref().map(|source| {
        let provider = Provider::new(source.clone(), config.url_user(), url.to_owned());
        let failure = provider.failure();
        fred_config.credential_provider = Some(Arc::new(provider));
        failure
    });
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
        url: url.to_owned(),
        timeout,
        reason,
    };
    // `closed`: the connection failed (fred's I/O errors), rather than the
    // server answering with an error (a wrong password) or not in time.
    let (reason, closed) = match tokio::time::timeout(timeout + BACKSTOP_SLACK, client.init()).await
    {
        Ok(Ok(_task)) => return Ok((client, tls)),
        Ok(Err(e)) => {
            // A credential source that failed is the cause, whatever the
            // connection then did.
            let failed = failure
                .as_ref()
                .and_then(|f| f.lock().map(|mut f| f.take()).unwrap_or(None));
            if let Some(error) = failed {
                let _ = tokio::time::timeout(timeout, client.quit()).await;
                return Err(ValkeyError::Credentials {
                    store: url.to_owned(),
                    error,
                });
            }
            // A refused password is not a connection problem; a refused
            // command (NOPERM) is the ACL's, named by the connect's probe.
            let details = e.details().trim_start();
            if details.starts_with("NOPERM") {
                let _ = tokio::time::timeout(timeout, client.quit()).await;
                let acl = LeaseUserAcl::new(&config.prefix);
                let rules: Vec<String> = acl.rule_for(details).into_iter().collect();
                let user = config.url_user().unwrap_or_else(|| "default".into());
                return Err(ValkeyError::Denied {
                    server: url.to_owned(),
                    command: "the connection's setup",
                    explained: crate::error::refusal_text(details, &rules, &user, &acl),
                });
            }
            if crate::error::is_authentication(&e) {
                let _ = tokio::time::timeout(timeout, client.quit()).await;
                return Err(ValkeyError::Authentication {
                    url: url.to_owned(),
                    reason: e.details().to_owned(),
                });
            }
            (e.to_string(), *e.kind() == fred::error::ErrorKind::IO)
        }
        Err(_) => ("no answer".to_owned(), false),
    };
    let _ = tokio::time::timeout(timeout, client.quit()).await;
    Err(
        match tls_failure(tls.as_ref(), &hosts, &reason, closed, timeout).await {
            Some(failure) => ValkeyError::Tls {
                url: url.to_owned(),
                failure,
            },
            None => unreachable(reason),
        },
    )
}

/// What TLS has to do with a failed connect, if anything: a refused server
/// certificate or client certificate (seen by the handshakes), a TLS URL to
/// a server that answers in plain text, or a plain-text URL to a server
/// that closes plain-text connections (both found by a plain-text `PING` to
/// the URL's servers, in turn, until one tells).
async fn tls_failure(
    tls: Option<&Tls>,
    hosts: &[fred::types::config::Server],
    reason: &str,
    closed: bool,
    timeout: Duration,
) -> Option<TlsFailure> {
    if let Some(failure) = tls.and_then(|t| t.failure(reason, closed)) {
        return Some(failure);
    }
    // A handshake that verified the server failed afterwards for a reason
    // the server did not say: no probe tells more.
    if tls.is_some_and(Tls::any_verified) {
        return None;
    }
    // fred lists the URL's first host last.
    for server in hosts.iter().rev() {
        let at = || format!("{}:{}", server.host, server.port);
        match (probe_plain(&server.host, server.port, timeout).await, tls) {
            (PlainProbe::Answered, Some(_)) => {
                return Some(TlsFailure::ServerIsPlain { server: at() });
            }
            (PlainProbe::Closed, None) => return Some(TlsFailure::ServerWantsTls { server: at() }),
            (PlainProbe::Closed, Some(_)) => {
                return Some(TlsFailure::Handshake {
                    reason: reason.to_owned(),
                });
            }
            (PlainProbe::Answered, None) => return None,
            (PlainProbe::Unknown, _) => {}
        }
    }
    None
}
