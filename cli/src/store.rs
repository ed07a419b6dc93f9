//! Store URLs → strategies: each backend crate reads the URLs of its schemes;
//! connected with short timeouts, every failure classified into an exit code.

use std::time::Duration;

use leasehold_core::{InspectError, PoolName, PoolSpec, SlotInfo, Strategy};
use leasehold_etcd::{EtcdConfig, EtcdError, EtcdStrategy};
use leasehold_k8s::{KubeConfig, KubeError, KubeStrategy};
use leasehold_sql::{SqlConfig, SqlError, SqlStrategy};
use leasehold_valkey::{ValkeyConfig, ValkeyError, ValkeyStrategy};

use crate::StoreArgs;
use crate::error::{CliError, Exit};
use crate::redact;

/// Which store a URL names, read by that store's backend crate.
#[derive(Clone, Debug)]
pub(crate) enum Target {
    Sql(SqlConfig),
    Valkey(ValkeyConfig),
    Etcd(EtcdConfig),
    Kube(KubeConfig),
}

/// A connected store.
pub(crate) enum Store {
    Sql(SqlStrategy),
    Valkey(ValkeyStrategy),
    Etcd(EtcdStrategy),
    Kube(KubeStrategy),
}

/// Every backend's schemes, with the store they name.
const BACKENDS: [(&str, &[&str]); 4] = [
    ("SQL", SqlConfig::SCHEMES),
    ("Valkey/Redis", ValkeyConfig::SCHEMES),
    ("etcd", EtcdConfig::SCHEMES),
    ("Kubernetes", KubeConfig::SCHEMES),
];

/// The schemes, for error messages.
fn schemes() -> String {
    BACKENDS
        .iter()
        .map(|(store, schemes)| format!("{} ({store})", schemes.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

fn bad_url(url: &str, why: impl std::fmt::Display) -> CliError {
    CliError::new(
        Exit::BadUrl,
        format!("bad store URL {}: {why}", redact::url(url)),
    )
}

/// Reads a store URL (no network): the backend whose schemes include the
/// URL's reads it.
pub(crate) fn parse(args: &StoreArgs) -> Result<Target, CliError> {
    let url = args.url.trim();
    let scheme = match url.split_once("://") {
        Some((scheme, _)) => scheme.to_ascii_lowercase(),
        // sqlx's `sqlite:PATH`.
        None if url
            .get(..7)
            .is_some_and(|s| s.eq_ignore_ascii_case("sqlite:")) =>
        {
            "sqlite".to_owned()
        }
        None => {
            return Err(bad_url(
                url,
                format!("it has no scheme; use one of {}", schemes()),
            ));
        }
    };
    let bad = |e: &dyn std::fmt::Display| bad_url(url, e);
    if SqlConfig::SCHEMES.contains(&scheme.as_str()) {
        let config = SqlConfig::from_url(url).map_err(|e| match e {
            SqlError::Config(c) => bad(&c),
            other => bad(&other),
        })?;
        if let Some(file) = config.sqlite_path() {
            sqlite_file(url, file)?;
        }
        Ok(Target::Sql(config))
    } else if ValkeyConfig::SCHEMES.contains(&scheme.as_str()) {
        ValkeyConfig::from_url(url)
            .map(Target::Valkey)
            .map_err(|e| match e {
                ValkeyError::Config(c) => bad(&c),
                other => bad(&other),
            })
    } else if EtcdConfig::SCHEMES.contains(&scheme.as_str()) {
        EtcdConfig::from_url(url)
            .map(Target::Etcd)
            .map_err(|e| match e {
                EtcdError::Config(c) => bad(&c),
                other => bad(&other),
            })
    } else if KubeConfig::SCHEMES.contains(&scheme.as_str()) {
        let config = KubeConfig::from_url(url).map_err(|e| match e {
            KubeError::Config(c) => bad(&c),
            other => bad(&other),
        })?;
        Ok(Target::Kube(match &args.kubeconfig {
            Some(path) => config.or_kubeconfig(path),
            None => config,
        }))
    } else if matches!(scheme.as_str(), "http" | "https") {
        Err(bad_url(
            url,
            "say which store: etcd://HOST:PORT for etcd, k8s://HOST:PORT for a Kubernetes API server",
        ))
    } else {
        Err(bad_url(
            url,
            format!("unknown scheme {scheme:?}; use one of {}", schemes()),
        ))
    }
}

/// The SQLite file must be the one the holders use: sqlx would create a
/// missing file, and a tool that looks at leases must not.
fn sqlite_file(url: &str, file: &str) -> Result<(), CliError> {
    if file.contains(":memory:") {
        return Err(bad_url(
            url,
            "give the path of the SQLite file the holders use (sqlite://PATH)",
        ));
    }
    if !std::path::Path::new(file).is_file() {
        return Err(CliError::new(
            Exit::Unreachable,
            format!("no SQLite file at {file}; give the file the holders use"),
        ));
    }
    Ok(())
}

impl Store {
    /// Connects to the store `args` name within `--timeout`.
    pub(crate) async fn connect(args: &StoreArgs) -> Result<Self, CliError> {
        Self::connect_with(args, true).await
    }

    /// Connects; `preflight` runs the Kubernetes RBAC checks at connect.
    pub(crate) async fn connect_with(args: &StoreArgs, preflight: bool) -> Result<Self, CliError> {
        let timeout = args.timeout()?;
        let target = parse(args)?;
        let shown = redact::url(&args.url);
        let connecting = async {
            match target {
                Target::Sql(config) => {
                    let mut config = config
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
                Target::Valkey(config) => {
                    let mut config = config
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
                Target::Etcd(config) => {
                    let mut config = config.op_timeout(timeout).connect_timeout(timeout);
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
                Target::Kube(config) => {
                    let mut config = config.op_timeout(timeout).preflight(preflight);
                    if let Some(ns) = args.namespace.clone() {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(url: &str) -> StoreArgs {
        StoreArgs {
            url: url.to_owned(),
            timeout: 5.0,
            table: None,
            prefix: None,
            namespace: None,
            kubeconfig: None,
            size: None,
        }
    }

    fn refusal(url: &str) -> (Exit, String) {
        match parse(&args(url)) {
            Ok(t) => panic!("{url} was accepted: {t:?}"),
            Err(e) => (e.code, e.message),
        }
    }

    /// Each scheme reaches the backend that owns it.
    #[test]
    fn schemes_reach_their_backend() {
        for (url, store) in [
            ("postgres://u@h/db", "sql"),
            ("MARIADB://u@h/db", "sql"),
            ("redis://h:6379", "valkey"),
            ("valkey://h", "valkey"),
            ("etcd://a:2379,b:2379", "etcd"),
            ("k8s://h:8001/ids", "kube"),
            ("k8s+https://h:6443", "kube"),
            ("kubernetes://", "kube"),
        ] {
            let got = match parse(&args(url)).unwrap_or_else(|e| panic!("{url}: {e:?}")) {
                Target::Sql(_) => "sql",
                Target::Valkey(_) => "valkey",
                Target::Etcd(_) => "etcd",
                Target::Kube(_) => "kube",
            };
            assert_eq!(got, store, "{url}");
        }
    }

    #[test]
    fn refusals_name_the_fix() {
        for (url, code, needle) in [
            (
                "postgress://u@h/db",
                Exit::BadUrl,
                "unknown scheme \"postgress\"; use one of postgres, postgresql, mysql, mariadb, \
                 sqlite (SQL); redis,",
            ),
            (
                "localhost:5432",
                Exit::BadUrl,
                "it has no scheme; use one of postgres",
            ),
            (
                "https://h:2379",
                Exit::BadUrl,
                "say which store: etcd://HOST:PORT",
            ),
            ("postgres:///db", Exit::BadUrl, "postgres:// needs a host"),
            ("redis://h:99999", Exit::BadUrl, "bad port \"99999\""),
            (
                "etcd://h?tabel=x",
                Exit::BadUrl,
                "unknown query option \"tabel\"",
            ),
            ("k8s://u:p@h", Exit::BadUrl, "carry no credentials"),
            (
                "sqlite::memory:",
                Exit::BadUrl,
                "the SQLite file the holders use",
            ),
            (
                "sqlite:///nonexistent/x.db",
                Exit::Unreachable,
                "no SQLite file at /nonexistent/x.db",
            ),
        ] {
            let (got, message) = refusal(url);
            assert_eq!(got, code, "{url}: {message}");
            assert!(message.contains(needle), "{url}: {message}");
        }
    }
}
