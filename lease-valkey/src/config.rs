//! Connection settings.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use leasehold_core::credentials::{CallbackError, CredentialSource, Credentials};

use crate::tls::TlsFiles;

/// Which commands hold the leases.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Method {
    /// Probe the server at connect (`COMMAND INFO HSETEX`): HSETEX where the
    /// server has it, scripts otherwise.
    #[default]
    Auto,
    /// One hash per pool with per-field TTLs (`HSETEX`): Redis 8+, Valkey 9+.
    /// On an older server acquisition fails with a final
    /// [`AcquireError::UnsupportedServer`](leasehold_core::AcquireError::UnsupportedServer).
    Hsetex,
    /// One key per slot (`SET NX PX`) and compare-and-extend /
    /// compare-and-delete scripts: Redis 6/7, Valkey 7/8 and newer.
    Scripts,
}

/// The default per-operation timeout (`ValkeyStrategy::DEFAULT_OP_TIMEOUT`).
pub(crate) const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(1);

/// The largest key prefix accepted.
pub const MAX_PREFIX_LEN: usize = 64;

/// How to reach the server and where the pools live.
///
/// ```
/// use std::time::Duration;
/// use leasehold_valkey::{Method, ValkeyConfig};
/// let config = ValkeyConfig::new("redis://127.0.0.1:6379")
///     .key_prefix("myapp")
///     .method(Method::Auto)
///     .op_timeout(Duration::from_millis(500));
/// assert_eq!(config.prefix(), "myapp");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ValkeyConfig {
    pub(crate) url: String,
    pub(crate) prefix: String,
    pub(crate) method: Method,
    pub(crate) op_timeout: Duration,
    pub(crate) allow_eviction: bool,
    pub(crate) wait: Option<(u32, Duration)>,
    pub(crate) restart_guard: bool,
    pub(crate) one_timing: bool,
    pub(crate) require_durable: bool,
    pub(crate) refuse_at_connect: bool,
    pub(crate) refuse_split_brain: bool,
    pub(crate) tls: TlsFiles,
    pub(crate) credentials: Option<CredentialSource>,
}

impl std::fmt::Debug for ValkeyConfig {
    /// Never prints a credential: the URL as
    /// [`leasehold_core::url::redacted`] shows it, a credential source by
    /// its kind and file only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValkeyConfig")
            .field("url", &redact(&self.url))
            .field("prefix", &self.prefix)
            .field("method", &self.method)
            .field("op_timeout", &self.op_timeout)
            .field("allow_eviction", &self.allow_eviction)
            .field("wait", &self.wait)
            .field("restart_guard", &self.restart_guard)
            .field("assume_one_timing_per_pool", &self.one_timing)
            .field("require_durable", &self.require_durable)
            .field("refuse_at_connect", &self.refuse_at_connect)
            .field("refuse_split_brain", &self.refuse_split_brain)
            .field("tls_ca", &self.tls.ca)
            .field(
                "tls_client_cert",
                &self.tls.client.as_ref().map(|(cert, _)| cert),
            )
            .field("credentials", &self.credentials)
            .finish()
    }
}

impl ValkeyConfig {
    /// A server URL as `fred` reads it: `redis://[user:pass@]host:port[/db]`,
    /// `redis-cluster://…`, `redis-sentinel://…`, and their TLS forms
    /// `rediss://`, `rediss-cluster://`, `rediss-sentinel://` (or `valkeys…`),
    /// which verify the server against the system's root certificates unless
    /// [`ValkeyConfig::tls_ca`] names a CA file. Query options are `fred`'s,
    /// not [`ValkeyConfig::from_url`]'s.
    /// Key prefix `leasehold`, [`Method::Auto`], operation timeout 1 s.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            prefix: "leasehold".into(),
            method: Method::Auto,
            op_timeout: DEFAULT_OP_TIMEOUT,
            allow_eviction: false,
            wait: None,
            restart_guard: true,
            one_timing: false,
            require_durable: false,
            refuse_at_connect: true,
            refuse_split_brain: false,
            tls: TlsFiles::default(),
            credentials: None,
        }
    }

    /// Verifies the server against the CA certificates in this PEM file
    /// instead of the system's root certificates (the URL option `ca=`).
    /// The URL must ask for TLS (`rediss://`, `valkeys://`, or their
    /// `-sentinel` and `-cluster` forms): `connect` refuses a TLS file with a
    /// plain-text URL. The file is read at `connect`.
    ///
    /// ```
    /// use leasehold_valkey::ValkeyConfig;
    /// let config = ValkeyConfig::new("rediss://cache.internal:6380")
    ///     .tls_ca("/etc/leasehold/ca.crt")
    ///     .tls_client_cert("/etc/leasehold/client.crt", "/etc/leasehold/client.key");
    /// assert!(config.uses_tls());
    /// ```
    pub fn tls_ca(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.ca = Some(path.into());
        self
    }

    /// Presents this client certificate (a PEM chain, leaf first) with its
    /// private key (PEM: PKCS #8, PKCS #1 or SEC1) when the server asks for
    /// one: mutual TLS (the URL options `cert=` and `key=`). The URL must ask
    /// for TLS, as for [`ValkeyConfig::tls_ca`]. The files are read at
    /// `connect`, which refuses a key that is not the certificate's.
    pub fn tls_client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.tls.client = Some((cert.into(), key.into()));
        self
    }

    /// Whether the URL asks for TLS (`rediss://`, `valkeys://`, and their
    /// `-sentinel` and `-cluster` forms).
    pub fn uses_tls(&self) -> bool {
        crate::tls::scheme_uses_tls(self.url.split_once("://").map_or("", |(s, _)| s))
    }

    /// Reads the password from the file at `path` **for every new
    /// connection** (the first, every reconnect, every Cluster node),
    /// instead of from the URL: a Kubernetes Secret mounted as a file,
    /// rotated in place, takes effect at the next connection, without a
    /// restart (connections already authenticated stay so). The file holds
    /// the password alone; one trailing line break is not part of it. The
    /// user is the URL's (`redis://USER@HOST`), or `default`. The URL option
    /// `password_file=PATH` says the same. A URL that carries a password
    /// too is refused.
    ///
    /// ```
    /// use leasehold_valkey::ValkeyConfig;
    /// let config = ValkeyConfig::new("redis://ids@cache.internal:6379")
    ///     .password_file("/run/secrets/valkey/password");
    /// assert!(format!("{config:?}").contains("PasswordFile"));
    /// ```
    pub fn password_file(self, path: impl Into<PathBuf>) -> Self {
        self.credential_source(CredentialSource::password_file(path))
    }

    /// Asks `callback` for the user and password **for every new
    /// connection** (the first, every reconnect, every Cluster node):
    /// short-lived tokens such as ElastiCache or MemoryDB IAM
    /// authentication tokens are made when a connection needs one. A user
    /// the callback leaves out is the URL's, or `default`. An error it
    /// returns fails that connection: at connect,
    /// [`ValkeyError::Credentials`](crate::ValkeyError::Credentials)
    /// (retryable); later the client keeps reconnecting, asking again each
    /// time, and operations meanwhile answer `Retry`. A URL that carries a
    /// password too is refused.
    ///
    /// ```no_run
    /// use leasehold_core::credentials::Credentials;
    /// use leasehold_valkey::{ValkeyConfig, ValkeyStrategy};
    /// # async fn elasticache_iam_token() -> Result<String, std::io::Error> { Ok(String::new()) }
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let config = ValkeyConfig::new("redis://ids@cache.internal:6379")
    ///     .credentials(|| async { Ok::<_, std::io::Error>(Credentials::new("ids", elasticache_iam_token().await?)) });
    /// let strategy = ValkeyStrategy::connect(config).await?;
    /// # Ok(()) }
    /// ```
    pub fn credentials<F, Fut, E>(self, callback: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Credentials, E>> + Send + 'static,
        E: Into<CallbackError>,
    {
        self.credential_source(CredentialSource::callback(callback))
    }

    /// Where the credentials come from ([`ValkeyConfig::password_file`] and
    /// [`ValkeyConfig::credentials`] set it): asked for every new
    /// connection.
    pub fn credential_source(mut self, source: CredentialSource) -> Self {
        self.credentials = Some(source);
        self
    }

    /// The restart guard (default on). A server that does not write every
    /// acknowledged write to disk before answering (anything but `appendonly
    /// yes` with `appendfsync always` and `no-appendfsync-on-rewrite no`, or
    /// settings `CONFIG GET` cannot read)
    /// comes back from a restart without leases, fences and floors it had
    /// acknowledged, and would hand a slot to a second holder while the first
    /// still generates. With the guard, the claim script grants nothing until
    /// the server has been up (`INFO server` `uptime_in_seconds`, read inside
    /// the script) for the pool's restart span: the largest TTL plus twice
    /// the `max_clock_skew` of any holder whose claim the server still
    /// remembers (the field `span` of the pool's fences hash), and at least
    /// the claimer's own ([`PoolSpec::restart_span`](leasehold_core::PoolSpec::restart_span)),
    /// answering the retryable `AcquireError::StoreRestarted` meanwhile;
    /// renewals go on. A server that keeps every write gets the guard too:
    /// the settings read now say nothing of those it ran with before its
    /// last restart (an `appendonly no` or `appendfsync no` set with `CONFIG
    /// SET` and never written to the config file loses claims in a crash,
    /// and the server comes back from its file durable), so every restart
    /// of any server holds claims back one span.
    ///
    /// Such a server forgets the recorded span together with the leases
    /// (unless it runs the append-only file with `appendfsync everysec` and
    /// `no-appendfsync-on-rewrite no` and has `WAITAOF`, Redis or Valkey
    /// 7.2+: there a claim whose span
    /// is not yet known to be on disk waits for the fsync before it is used,
    /// and the server is accepted), so
    /// [`ValkeyStrategy::connect`](crate::ValkeyStrategy::connect) refuses it
    /// with [`ValkeyError::NotDurable`](crate::ValkeyError::NotDurable)
    /// unless one of two opt-ins says what the deployment accepts:
    /// [`assume_one_timing_per_pool`](Self::assume_one_timing_per_pool)`(true)`,
    /// or `restart_guard(false)`.
    ///
    /// `restart_guard(false)` turns the guard off and accepts such a server:
    /// **what is risked** is every restart of the server (a crash, an
    /// upgrade, a reboot, an OOM kill) while leases are held, which can hand
    /// each held slot to a second holder at once, while the first still
    /// generates IDs with the same slot: duplicate IDs. Use it only for a
    /// server that is never restarted while a lease is held (a throwaway
    /// test server), or for a process that never claims (an operator's
    /// tool); every first start of a guarded server waits out one span.
    ///
    /// The same switch turns the **promotion guard** on or off, on every
    /// server, durable or not: a replica promoted to primary (a Sentinel or
    /// Cluster failover) may lack claims and renewals the old primary
    /// acknowledged, and its uptime is its own. The claim script reads the
    /// replication ID (`INFO replication`) and, after a change that may be
    /// a failover, grants nothing until the pool's restart span has passed
    /// since a claim first saw it (see the crate README, "Failover").
    /// `restart_guard(false)` therefore also risks **every failover** while
    /// leases are held.
    #[deprecated(
        since = "0.4.0",
        note = "use `.durability(DurabilityPolicy::Throwaway)` for `false`, \
                `.durability(DurabilityPolicy::Durable)` for `true`"
    )]
    pub fn restart_guard(mut self, on: bool) -> Self {
        self.restart_guard = on;
        self
    }

    /// What this process accepts of a server that can forget writes it
    /// acknowledged ([`DurabilityPolicy`](leasehold_core::DurabilityPolicy),
    /// default `Durable`; the URL option `durability=…` says the same):
    /// `Durable` refuses such a server at connect with
    /// [`ValkeyError::NotDurable`](crate::ValkeyError::NotDurable) (unless
    /// claims can wait for its fsync: `appendfsync everysec` with `WAITAOF`);
    /// `OneTimingPerPool` accepts it with the restart guard on, on the
    /// promise that every process of each pool uses the same TTL and
    /// `max_clock_skew`; `Throwaway` accepts it with the restart, promotion
    /// and wipe guards off (see [`restart_guard`](Self::restart_guard) and
    /// [`assume_one_timing_per_pool`](Self::assume_one_timing_per_pool) for
    /// what each guard waits and what each case risks).
    ///
    /// It is one word for what the deprecated
    /// [`require_durable`](Self::require_durable),
    /// [`assume_one_timing_per_pool`](Self::assume_one_timing_per_pool) and
    /// [`restart_guard`](Self::restart_guard) say together, and sets all
    /// three: a later call of one of them changes what it sets. Eviction is not among what
    /// it accepts, even `Throwaway`: an evicted key is lost with no restart
    /// for a guard to see, so [`allow_eviction`](Self::allow_eviction) stays
    /// a switch of its own.
    pub fn durability(mut self, policy: leasehold_core::DurabilityPolicy) -> Self {
        use leasehold_core::DurabilityPolicy::{Durable, OneTimingPerPool, Throwaway};
        (self.restart_guard, self.one_timing) = match policy {
            Durable => (true, false),
            OneTimingPerPool => (true, true),
            Throwaway => (false, false),
        };
        self.require_durable = false;
        self
    }

    /// Accepts a server that can forget acknowledged writes (see
    /// [`restart_guard`](Self::restart_guard)) with the restart guard on,
    /// on the promise that **every process of each pool uses the same TTL
    /// and `max_clock_skew`** (default false). After a restart that lost the
    /// pool's recorded span, the guard waits out this process's own span
    /// (its TTL plus twice its `max_clock_skew`), which covers every earlier
    /// holder only if none used a longer TTL or a larger skew.
    ///
    /// **What is risked** when the promise is broken: a holder with a longer
    /// span than the claimer's (a TTL of 60 s against 1 s, during a rollout
    /// that changes the TTL, or a larger configured skew) may still generate
    /// IDs with its slot when the claimer's shorter span has passed; the
    /// claimer is then granted that slot: duplicate IDs, until the longer
    /// lease's deadline. While the server keeps the recorded span (it was
    /// not restarted, or it persisted the span before the restart) the
    /// guard still waits the longest span any holder recorded.
    #[deprecated(
        since = "0.4.0",
        note = "use `.durability(DurabilityPolicy::OneTimingPerPool)` for `true`, \
                `.durability(DurabilityPolicy::Durable)` for `false`"
    )]
    pub fn assume_one_timing_per_pool(mut self, yes: bool) -> Self {
        self.one_timing = yes;
        self
    }

    /// Refuse to connect unless the server writes every acknowledged write
    /// to disk before answering (`appendonly yes`, `appendfsync always`,
    /// `no-appendfsync-on-rewrite no`, read with `CONFIG GET`; unreadable
    /// settings are refused too):
    /// `connect` answers [`ValkeyError::NotDurable`](crate::ValkeyError::NotDurable)
    /// naming the settings and the fix, whatever
    /// [`restart_guard`](Self::restart_guard) and
    /// [`assume_one_timing_per_pool`](Self::assume_one_timing_per_pool) say.
    /// Default false: such a server is still refused unless one of those
    /// opt-ins accepts it.
    #[deprecated(
        since = "0.4.0",
        note = "use `.durability(DurabilityPolicy::Durable)` (the default), which refuses a \
                server that can forget"
    )]
    pub fn require_durable(mut self, yes: bool) -> Self {
        self.require_durable = yes;
        self
    }

    /// Whether `connect` refuses a server that this configuration does not
    /// accept (default true): one that may evict keys
    /// ([`ValkeyError::Eviction`](crate::ValkeyError::Eviction)) or forget
    /// acknowledged writes ([`ValkeyError::NotDurable`](crate::ValkeyError::NotDurable)).
    /// With `false`, for an operator's tool that only looks (`leasehold
    /// doctor`, `status`, `revoke`), `connect` makes the same judgement and
    /// keeps it instead: [`ValkeyStrategy::refusal`](crate::ValkeyStrategy::refusal)
    /// tells it, the doctor's checks report it as a failure, and **every
    /// claim answers it** as a final `AcquireError::Misconfigured`, so such
    /// a strategy never holds a lease the default would have refused.
    pub fn refuse_at_connect(mut self, refuse: bool) -> Self {
        self.refuse_at_connect = refuse;
        self
    }

    /// Refuse a primary that can split brain (default false: `connect`
    /// accepts it, logs a `tracing` warning, and `leasehold doctor`'s
    /// `replication` line warns): `connect` answers
    /// [`ValkeyError::SplitBrain`](crate::ValkeyError::SplitBrain) naming the
    /// setting that closes it. The URL option `refuse_split_brain=true` says
    /// the same.
    ///
    /// A primary can split brain when it has replicas (`INFO replication`:
    /// `connected_slaves`) and confirms writes alone:
    /// `min-replicas-to-write 0` (or unreadable: `CONFIG GET` denied), and
    /// no [`ValkeyConfig::wait_for_replicas`]. After a failover it goes on
    /// confirming the claims and renewals of the clients a partition left
    /// with it, while the promoted replica grants the same slots to the
    /// others. `min-replicas-to-write 1` with `min-replicas-max-lag` below
    /// the pools' span makes it refuse writes instead (`NOREPLICAS`: a
    /// renewal answers `Retry`).
    ///
    /// A plain URL naming a replica is refused whatever this says:
    /// [`ValkeyError::Replica`](crate::ValkeyError::Replica).
    pub fn refuse_split_brain(mut self, yes: bool) -> Self {
        self.refuse_split_brain = yes;
        self
    }

    /// The namespace of every key: 1 to 64 characters of `A-Z a-z 0-9 _ - . :`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Forces a [`Method`] instead of probing.
    pub fn method(mut self, method: Method) -> Self {
        self.method = method;
        self
    }

    /// The longest any single operation (connect, command) may take before it
    /// is given up as `Retry`. Keep it well below the renewal budget (a
    /// fraction of the TTL).
    pub fn op_timeout(mut self, timeout: Duration) -> Self {
        self.op_timeout = timeout;
        self
    }

    /// Connects even when the server's `maxmemory-policy` may evict keys
    /// (anything but `noeviction`), which by default is refused: an evicted
    /// lease lets a second holder claim its slot while the first still
    /// generates, and an evicted fences hash makes every claim of the pool
    /// refuse until an operator repairs it. When allowed, the risk is
    /// recorded as a warning in [`ValkeyStrategy::persistence`](crate::ValkeyStrategy::persistence)
    /// (and so in the strategy's `Debug`).
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.allow_eviction = allow;
        self
    }

    /// After every claim and renewal, waits (`WAIT replicas timeout`) until
    /// at least `replicas` replicas acknowledged it, so that a failover to
    /// one of them keeps the lease, the fence and the floor. A claim that
    /// fewer replicas acknowledged within `timeout` is released and answered
    /// as retryable `Unreachable`; such a renewal answers `Retry`. Costs a
    /// second round trip per claim and renewal; `timeout` must be below the
    /// operation timeout. Off by default (see the README on failover).
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait = Some((replicas, timeout));
        self
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

pub(crate) use leasehold_core::url::redacted as redact;

/// The key prefix, or an error that says which are accepted.
pub(crate) fn check_prefix(prefix: &str) -> Result<(), leasehold_core::ConfigError> {
    if valid_prefix(prefix) {
        return Ok(());
    }
    Err(leasehold_core::ConfigError::new(
        "key_prefix",
        format!("{prefix:?}"),
        format!("1 to {MAX_PREFIX_LEN} characters of A-Z, a-z, 0-9, '_', '-', '.' or ':'"),
    ))
}

pub(crate) fn valid_prefix(prefix: &str) -> bool {
    (1..=MAX_PREFIX_LEN).contains(&prefix.len())
        && prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_the_password() {
        assert_eq!(
            redact("redis://user:secret@db.example:6380/2?x=y&password=secret"),
            "redis://user:***@db.example:6380/2?x=y&password=***"
        );
        assert_eq!(redact("rediss://:pw@h:1"), "rediss://:***@h:1");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
        let dbg = format!("{:?}", ValkeyConfig::new("redis://u:hunter2@h:1"));
        assert!(!dbg.contains("hunter2"), "{dbg}");
    }

    #[test]
    fn prefixes() {
        assert!(valid_prefix("leasehold"));
        assert!(valid_prefix("app:v1.ids-2"));
        assert!(!valid_prefix(""));
        assert!(!valid_prefix("a{b}"));
        assert!(!valid_prefix("sp ace"));
        assert!(!valid_prefix(&"x".repeat(65)));
    }
}
