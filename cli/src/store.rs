//! Store URLs → strategies: one scheme per store, connected with short
//! timeouts, every failure classified into an exit code.

use std::path::PathBuf;
use std::time::Duration;

use leasehold_core::{InspectError, PoolName, PoolSpec, SlotInfo, Strategy};
use leasehold_etcd::{EtcdConfig, EtcdError, EtcdStrategy};
use leasehold_k8s::{KubeConfig, KubeError, KubeStrategy};
use leasehold_sql::{SqlConfig, SqlError, SqlStrategy};
use leasehold_valkey::{ValkeyConfig, ValkeyError, ValkeyStrategy};

use crate::StoreArgs;
use crate::error::{CliError, Exit};
use crate::redact;

/// The schemes, for error messages.
const SCHEMES: &str = "postgres://, mysql:// (MariaDB too), sqlite://FILE, redis:// or valkey://, \
     etcd://HOST:PORT, k8s://HOST:PORT (or k8s:// with a kubeconfig)";

/// Which store a URL names, and how to reach it.
#[derive(Clone, Debug)]
pub(crate) enum Target {
    /// A sqlx URL (`sqlite://` has been checked to name an existing file).
    Sql(String),
    /// A `redis://` / `rediss://` URL for fred.
    Valkey(String),
    /// `http://host:port` endpoints, and a user and password.
    Etcd(Vec<String>, Option<(String, String)>),
    /// Kubernetes.
    Kube(KubeSource),
}

#[derive(Clone, Debug)]
pub(crate) enum KubeSource {
    Url(String),
    Kubeconfig(PathBuf),
    Infer,
}

/// A connected store.
pub(crate) enum Store {
    Sql(SqlStrategy),
    Valkey(ValkeyStrategy),
    Etcd(EtcdStrategy),
    Kube(KubeStrategy),
}

fn bad_url(url: &str, why: impl std::fmt::Display) -> CliError {
    CliError::new(
        Exit::BadUrl,
        format!("bad store URL {}: {why}", redact::url(url)),
    )
}

/// Reads a store URL (no network).
pub(crate) fn parse(args: &StoreArgs) -> Result<(Target, Option<String>), CliError> {
    let url = args.url.trim();
    let Some((scheme, rest)) = url.split_once("://") else {
        if let Some(path) = url.strip_prefix("sqlite:") {
            return sqlite(url, path).map(|t| (t, None));
        }
        return Err(bad_url(
            url,
            format!("it has no scheme; use one of {SCHEMES}"),
        ));
    };
    let host_part = rest.split(['/', '?']).next().unwrap_or("");
    let needs_host = |what: &str| {
        if host_part.rsplit('@').next().unwrap_or("").is_empty() {
            Err(bad_url(url, format!("{what} needs a host")))
        } else {
            Ok(())
        }
    };
    match scheme.to_ascii_lowercase().as_str() {
        "postgres" | "postgresql" | "mysql" | "mariadb" => {
            needs_host(scheme)?;
            Ok((Target::Sql(url.to_owned()), None))
        }
        "sqlite" => sqlite(url, rest).map(|t| (t, None)),
        "redis" | "rediss" | "valkey" | "valkeys" => {
            needs_host(scheme)?;
            let fred = match scheme {
                "valkey" => format!("redis://{rest}"),
                "valkeys" => format!("rediss://{rest}"),
                _ => url.to_owned(),
            };
            Ok((Target::Valkey(fred), None))
        }
        "etcd" | "etcds" => {
            needs_host(scheme)?;
            let (auth, hosts) = match host_part.rsplit_once('@') {
                Some((userinfo, hosts)) => {
                    let (u, p) = userinfo.split_once(':').unwrap_or((userinfo, ""));
                    (
                        Some((redact::percent_decode(u), redact::percent_decode(p))),
                        hosts,
                    )
                }
                None => (None, host_part),
            };
            let proto = if scheme == "etcds" { "https" } else { "http" };
            let endpoints = hosts
                .split(',')
                .filter(|h| !h.is_empty())
                .map(|h| format!("{proto}://{h}"))
                .collect();
            Ok((Target::Etcd(endpoints, auth), None))
        }
        "k8s" | "k8s+http" | "k8s+https" | "kubernetes" => {
            let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
            let namespace = Some(path.trim_matches('/'))
                .filter(|p| !p.is_empty())
                .map(str::to_owned);
            if hosts.contains('@') {
                return Err(bad_url(
                    url,
                    "k8s:// URLs carry no credentials; use --kubeconfig FILE",
                ));
            }
            let source = if hosts.is_empty() {
                match &args.kubeconfig {
                    Some(path) => KubeSource::Kubeconfig(path.clone()),
                    None => KubeSource::Infer,
                }
            } else {
                let proto = if scheme == "k8s+https" {
                    "https"
                } else {
                    "http"
                };
                KubeSource::Url(format!("{proto}://{hosts}"))
            };
            Ok((Target::Kube(source), namespace))
        }
        "http" | "https" => Err(bad_url(
            url,
            "say which store: etcd://HOST:PORT for etcd, k8s://HOST:PORT for a Kubernetes API server",
        )),
        other => Err(bad_url(
            url,
            format!("unknown scheme {other:?}; use one of {SCHEMES}"),
        )),
    }
}

fn sqlite(url: &str, path: &str) -> Result<Target, CliError> {
    let file = path.split('?').next().unwrap_or("");
    if file.is_empty() || file.contains(":memory:") {
        return Err(bad_url(
            url,
            "give the path of the SQLite file the holders use (sqlite://PATH)",
        ));
    }
    // sqlx would create a missing file; a tool that looks at leases must not.
    if !std::path::Path::new(file).is_file() {
        return Err(CliError::new(
            Exit::Unreachable,
            format!("no SQLite file at {file}; give the file the holders use"),
        ));
    }
    Ok(Target::Sql(url.to_owned()))
}

impl Store {
    /// Connects to the store `args` name within `--timeout`.
    pub(crate) async fn connect(args: &StoreArgs) -> Result<Self, CliError> {
        Self::connect_with(args, true).await
    }

    /// Connects; `preflight` runs the Kubernetes RBAC checks at connect.
    pub(crate) async fn connect_with(args: &StoreArgs, preflight: bool) -> Result<Self, CliError> {
        let timeout = args.timeout()?;
        let (target, namespace) = parse(args)?;
        let shown = redact::url(&args.url);
        let connecting = async {
            match target {
                Target::Sql(url) => {
                    let mut config = SqlConfig::new(url)
                        .op_timeout(timeout)
                        .max_connections(2)
                        .restart_guard(false);
                    if let Some(t) = &args.table {
                        config = config.table(t.clone());
                    }
                    SqlStrategy::connect(config)
                        .await
                        .map(Store::Sql)
                        .map_err(|e| sql_error(&shown, e))
                }
                Target::Valkey(url) => {
                    let mut config = ValkeyConfig::new(url)
                        .op_timeout(timeout)
                        // Look at an evicting server too: doctor says what is wrong.
                        .allow_eviction(true)
                        // And at one that can forget acknowledged writes: the
                        // CLI never claims a slot, so there is no claim for
                        // the restart guard to hold back.
                        .restart_guard(false);
                    if let Some(p) = &args.prefix {
                        config = config.key_prefix(p.clone());
                    }
                    ValkeyStrategy::connect(config)
                        .await
                        .map(Store::Valkey)
                        .map_err(|e| valkey_error(&shown, e))
                }
                Target::Etcd(endpoints, auth) => {
                    let mut config = EtcdConfig::new(endpoints)
                        .op_timeout(timeout)
                        .connect_timeout(timeout);
                    if let Some((user, password)) = auth {
                        config = config.user(user, password);
                    }
                    if let Some(p) = &args.prefix {
                        config = config.prefix(p.clone());
                    }
                    let strategy = EtcdStrategy::connect(config)
                        .await
                        .map_err(|e| etcd_error(&shown, e))?;
                    // The client connects lazily: one request proves the store answers.
                    match tokio::time::timeout(timeout, strategy.client().clone().status()).await {
                        Ok(Ok(_)) => Ok(Store::Etcd(strategy)),
                        Ok(Err(e)) => Err(CliError::new(
                            Exit::Unreachable,
                            format!("cannot reach etcd at {shown}: {}", short(&e.to_string())),
                        )),
                        Err(_) => Err(CliError::new(
                            Exit::Unreachable,
                            format!(
                                "cannot reach etcd at {shown}: no answer within {:.1} s (--timeout)",
                                timeout.as_secs_f64()
                            ),
                        )),
                    }
                }
                Target::Kube(source) => {
                    let mut config = match source {
                        KubeSource::Url(u) => KubeConfig::url(u),
                        KubeSource::Kubeconfig(p) => KubeConfig::from_kubeconfig(p),
                        KubeSource::Infer => KubeConfig::infer(),
                    }
                    .op_timeout(timeout)
                    .preflight(preflight);
                    if let Some(ns) = args.namespace.clone().or(namespace) {
                        config = config.namespace(ns);
                    }
                    KubeStrategy::connect(config)
                        .await
                        .map(Store::Kube)
                        .map_err(|e| kube_error(&shown, e))
                }
            }
        };
        // The backends bound their own connects; this is the backstop.
        match tokio::time::timeout(timeout + Duration::from_millis(500), connecting).await {
            Ok(r) => r,
            Err(_) => Err(CliError::new(
                Exit::Unreachable,
                format!(
                    "cannot reach {shown}: no answer within {:.1} s (--timeout)",
                    timeout.as_secs_f64()
                ),
            )),
        }
    }

    /// What kind of store, for messages: `PostgreSQL 18.1`, `Valkey 8.1.4`, `etcd`, `Kubernetes`.
    pub(crate) fn describe(&self) -> String {
        match self {
            Store::Sql(s) => s.server_version().to_owned(),
            Store::Valkey(s) => s.server().to_string(),
            Store::Etcd(_) => "etcd".into(),
            Store::Kube(s) => format!("Kubernetes (namespace {})", s.namespace()),
        }
    }

    /// The slots of `pool`, or an error with its exit code.
    pub(crate) async fn inspect(&self, pool: &PoolSpec) -> Result<Vec<SlotInfo>, CliError> {
        let r = match self {
            Store::Sql(s) => s.inspect(pool).await,
            Store::Valkey(s) => s.inspect(pool).await,
            Store::Etcd(s) => s.inspect(pool).await,
            Store::Kube(s) => s.inspect(pool).await,
        };
        r.map_err(|e| match e {
            InspectError::Unsupported => CliError::new(
                Exit::Unsupported,
                format!(
                    "{} cannot list the slots of a pool yet (this leasehold build has no inspect for it)",
                    self.describe()
                ),
            ),
            other => CliError::new(Exit::Store, other.to_string()),
        })
    }

    /// The pools the store has, when it can tell (SQL: the pool column).
    pub(crate) async fn pools(&self) -> Result<Option<Vec<String>>, CliError> {
        let Store::Sql(s) = self else {
            return Ok(None);
        };
        use leasehold_sql::sqlx;
        let sql = format!(
            "SELECT DISTINCT pool FROM {} ORDER BY pool",
            s.table().as_str()
        );
        let rows: Result<Vec<(String,)>, sqlx::Error> = if let Some(p) = s.postgres() {
            sqlx::query_as(&sql).fetch_all(p).await
        } else if let Some(p) = s.mysql() {
            // The pool column is VARBINARY on MySQL/MariaDB.
            sqlx::query_as::<_, (Vec<u8>,)>(&sql)
                .fetch_all(p)
                .await
                .map(|rows| {
                    rows.into_iter()
                        .map(|(b,)| (String::from_utf8_lossy(&b).into_owned(),))
                        .collect()
                })
        } else if let Some(p) = s.sqlite() {
            sqlx::query_as(&sql).fetch_all(p).await
        } else {
            return Ok(None);
        };
        match rows {
            Ok(rows) => Ok(Some(rows.into_iter().map(|(p,)| p).collect())),
            Err(e) => Err(CliError::new(
                Exit::Store,
                format!(
                    "cannot list the pools in table {} ({}): {e}; is this the lease table? \
                     (--table)",
                    s.table().as_str(),
                    s.server_version()
                ),
            )),
        }
    }
}

/// A pool spec for looking at (or revoking in) pool `name`.
pub(crate) fn pool_spec(name: &str, size: u32) -> Result<PoolSpec, CliError> {
    let usage = |e: leasehold_core::ConfigError| CliError::new(Exit::Usage, e.to_string());
    let name = PoolName::new(name).map_err(usage)?;
    PoolSpec::new(name, size.max(1), Duration::from_secs(30)).map_err(usage)
}

/// A gRPC error without its debug dump of nested sources.
fn short(text: &str) -> &str {
    text.split(", source:").next().unwrap_or(text)
}

fn sql_error(shown: &str, e: SqlError) -> CliError {
    let code = match &e {
        SqlError::Config(_) => Exit::BadUrl,
        SqlError::Unreachable(_) | SqlError::Timeout(_) | SqlError::Refused { .. } => {
            Exit::Unreachable
        }
        _ => Exit::Store,
    };
    let verb = if code == Exit::Unreachable {
        "cannot reach"
    } else {
        "cannot use"
    };
    CliError::new(code, format!("{verb} {shown}: {e}"))
}

fn valkey_error(shown: &str, e: ValkeyError) -> CliError {
    let code = match &e {
        ValkeyError::Config(_) => Exit::BadUrl,
        ValkeyError::Unreachable { .. } => Exit::Unreachable,
        _ => Exit::Store,
    };
    match code {
        // Its message names the URL already (without credentials).
        Exit::Unreachable => CliError::new(code, e.to_string()),
        _ => CliError::new(code, format!("{shown}: {e}")),
    }
}

fn etcd_error(shown: &str, e: EtcdError) -> CliError {
    let code = match &e {
        EtcdError::Config(_) => Exit::BadUrl,
        EtcdError::Connect { .. } | EtcdError::Auth { .. } => Exit::Unreachable,
        _ => Exit::Store,
    };
    CliError::new(code, format!("{shown}: {e}"))
}

fn kube_error(shown: &str, e: KubeError) -> CliError {
    let code = match &e {
        KubeError::Config(_) => Exit::BadUrl,
        KubeError::Connect { .. } => Exit::Unreachable,
        _ => Exit::Store,
    };
    CliError::new(code, format!("{shown}: {e}"))
}
