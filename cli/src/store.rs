//! Store URLs → stores, through `leasehold::connect`'s URL table: connected
//! with short timeouts, every failure classified into an exit code.

use std::time::Duration;

use leasehold::drivers::MemoryConfig;
use leasehold::{
    ConnectError, InspectError, OperateError, PoolName, PoolSpec, SlotInfo, Store, StoreConfig,
};

use crate::StoreArgs;
use crate::error::{CliError, Exit};
use crate::table;

fn from_connect(e: ConnectError) -> CliError {
    let code = match &e {
        ConnectError::BadUrl { .. } => Exit::BadUrl,
        ConnectError::Unreachable { .. } => Exit::Unreachable,
        ConnectError::Authentication { .. } => Exit::Authentication,
        _ => Exit::Store,
    };
    CliError::new(code, e.to_string())
}

fn bad_url(url: &str, why: &str) -> CliError {
    CliError::new(
        Exit::BadUrl,
        format!("bad store URL {}: {why}", leasehold::url::redacted(url)),
    )
}

/// Reads a store URL (no network), with the tool's settings: short
/// timeouts, two connections, and a look at stores a holder would refuse:
/// the backend judges the server as the URL's configuration (its opt-ins
/// included) would at connect, and keeps the refusal instead of raising it
/// ([`StoreConfig::look_only`]: doctor reports it as a FAIL, and the
/// strategy claims nothing). `--table`, `--prefix`, `--namespace` and
/// `--kubeconfig` are the store's options of those names; a store that
/// takes none of that name refuses it.
pub(crate) fn parse(args: &StoreArgs) -> Result<StoreConfig, CliError> {
    let url = args.url.trim();
    let timeout = args.timeout()?;
    let config = StoreConfig::from_url(url).map_err(from_connect)?;
    if config.backend::<MemoryConfig>().is_some() {
        return Err(bad_url(
            url,
            "an in-process store lives in its program's memory, out of this tool's reach; \
             give the URL of the store the holders use",
        ));
    }
    let kubeconfig = match &args.kubeconfig {
        Some(path) => Some(path.to_str().ok_or_else(|| {
            CliError::new(
                Exit::Usage,
                format!("--kubeconfig {}: give a path in UTF-8", path.display()),
            )
        })?),
        None => None,
    };
    let mut config = config
        .op_timeout(timeout)
        .look_only(timeout)
        .map_err(from_connect)?;
    for (key, flag, value) in [
        ("table", "--table", args.table.as_deref()),
        ("prefix", "--prefix", args.prefix.as_deref()),
        ("namespace", "--namespace", args.namespace.as_deref()),
        ("kubeconfig", "--kubeconfig", kubeconfig),
    ] {
        if let Some(value) = value {
            config = config
                .set(key, value)
                .map_err(|e| CliError::new(Exit::BadUrl, format!("{flag}: {e}")))?;
        }
    }
    Ok(config)
}

/// Connects to the store `args` name within `--timeout`, with the
/// Kubernetes RBAC checks at connect.
pub(crate) async fn connect(args: &StoreArgs) -> Result<Store, CliError> {
    connect_with(args, true).await
}

/// Connects; `preflight` runs the Kubernetes RBAC checks at connect (doctor
/// runs them as one of its checks instead). One round trip proves the store
/// answers: some clients connect lazily.
pub(crate) async fn connect_with(args: &StoreArgs, preflight: bool) -> Result<Store, CliError> {
    let timeout = args.timeout()?;
    let config = parse(args)?;
    // The checks of the store's permissions at connect, where the store
    // has them as an option (Kubernetes RBAC).
    let config = if config.takes("preflight") {
        config
            .set("preflight", if preflight { "true" } else { "false" })
            .map_err(from_connect)?
    } else {
        config
    };
    let shown = config.shown_url();
    let connecting = async {
        let store = config.connect().await.map_err(from_connect)?;
        match store.operator().ping().await {
            Err(OperateError::Unreachable(why)) => Err(CliError::new(
                Exit::Unreachable,
                format!("cannot reach {shown}: {why}"),
            )),
            // It answered, if only with an error: doctor tells what is wrong.
            _ => Ok(store),
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

/// The slots of `pool`, or an error with its exit code.
pub(crate) async fn inspect(store: &Store, pool: &PoolSpec) -> Result<Vec<SlotInfo>, CliError> {
    store.operator().slots(pool).await.map_err(|e| match e {
        InspectError::Unsupported => CliError::new(
            Exit::Unsupported,
            format!(
                "{} cannot list the slots of a pool yet (this leasehold build has no inspect for it)",
                store.operator().describe()
            ),
        ),
        other => CliError::new(Exit::Store, other.to_string()),
    })
}

/// The pool's size from the store when `--size` did not give it and the
/// store keeps it (SQL: the rows `prepare` made), with the spec to read it
/// with; otherwise both as they were.
pub(crate) async fn known_size(
    store: &Store,
    spec: PoolSpec,
    size: table::Size,
) -> Result<(PoolSpec, table::Size), CliError> {
    if size.from != table::SizeFrom::Assumed {
        return Ok((spec, size));
    }
    let name = spec.name().as_str();
    match store.operator().pool_size(name).await {
        Ok(Some(slots)) => {
            let size = table::Size {
                slots,
                from: table::SizeFrom::Store,
            };
            Ok((pool_spec(name, slots)?, size))
        }
        Ok(None) => Ok((spec, size)),
        Err(e) => Err(CliError::new(Exit::Store, format!("{e} (--table)"))),
    }
}

/// The pools the store has, when it can tell.
pub(crate) async fn pools(store: &Store) -> Result<Option<Vec<String>>, CliError> {
    match store.operator().pools().await {
        Ok(pools) => Ok(Some(pools)),
        Err(OperateError::Unsupported(_)) => Ok(None),
        // SQL: the pools of the table the tool was told to read.
        Err(e) => Err(CliError::new(Exit::Store, format!("{e} (--table)"))),
    }
}

/// A pool spec for looking at (or revoking in) pool `name`.
pub(crate) fn pool_spec(name: &str, size: u32) -> Result<PoolSpec, CliError> {
    let usage = |e: leasehold::ConfigError| CliError::new(Exit::Usage, e.to_string());
    let name = PoolName::new(name).map_err(usage)?;
    PoolSpec::new(name, size.max(1), Duration::from_secs(30)).map_err(usage)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(url: &str) -> StoreArgs {
        StoreArgs {
            url_arg: None,
            url_file: None,
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
    #[cfg(all(
        feature = "postgres",
        feature = "mysql",
        feature = "valkey",
        feature = "etcd",
        feature = "k8s"
    ))]
    #[test]
    fn schemes_reach_their_backend() {
        for (url, store) in [
            ("postgres://u@h/db", "SQL"),
            ("MARIADB://u@h/db", "SQL"),
            ("redis://h:6379", "Valkey/Redis"),
            ("valkey://h", "Valkey/Redis"),
            ("etcd://a:2379,b:2379", "etcd"),
            ("k8s://h:8001/ids", "Kubernetes"),
            ("k8s+https://h:6443", "Kubernetes"),
            ("kubernetes://", "Kubernetes"),
        ] {
            let config = parse(&args(url)).unwrap_or_else(|e| panic!("{url}: {e:?}"));
            assert_eq!(config.store(), store, "{url}");
        }
    }

    #[cfg(all(
        feature = "sqlite",
        feature = "postgres",
        feature = "mysql",
        feature = "valkey",
        feature = "etcd",
        feature = "k8s"
    ))]
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
                "say which store the address is: etcds://HOST:2379?ca=CA.crt for etcd over TLS",
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
            ("memory://ids", Exit::BadUrl, "out of this tool's reach"),
        ] {
            let (got, message) = refusal(url);
            assert_eq!(got, code, "{url}: {message}");
            assert!(message.contains(needle), "{url}: {message}");
        }
    }
}
