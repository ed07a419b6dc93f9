//! A store URL → the backend that reads it, and the connect.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use leasehold_core::Memory;
#[cfg(feature = "etcd")]
use leasehold_etcd::{EtcdConfig, EtcdError, EtcdStrategy};
#[cfg(feature = "k8s")]
use leasehold_k8s::{KubeConfig, KubeError, KubeStrategy};
#[cfg(feature = "_sql")]
use leasehold_sql::{SqlConfig, SqlError, SqlStrategy};
#[cfg(feature = "valkey")]
use leasehold_valkey::{ValkeyConfig, ValkeyError, ValkeyStrategy};

use crate::ConnectError;
use crate::store::{Inner, Store};

/// Every store this crate knows: its schemes, the cargo feature that
/// compiles it in, and its name in messages. A scheme of a store whose
/// feature is off is refused with the feature to turn on.
pub const STORES: &[StoreSchemes] = &[
    StoreSchemes {
        store: "SQL",
        schemes: &["postgres", "postgresql"],
        feature: "postgres",
    },
    StoreSchemes {
        store: "SQL",
        schemes: &["mysql", "mariadb"],
        feature: "mysql",
    },
    StoreSchemes {
        store: "SQL",
        schemes: &["sqlite"],
        feature: "sqlite",
    },
    StoreSchemes {
        store: "Valkey/Redis",
        schemes: &[
            "redis",
            "rediss",
            "valkey",
            "valkeys",
            "redis-sentinel",
            "rediss-sentinel",
            "valkey-sentinel",
            "valkeys-sentinel",
            "redis-cluster",
            "rediss-cluster",
            "valkey-cluster",
            "valkeys-cluster",
        ],
        feature: "valkey",
    },
    StoreSchemes {
        store: "etcd",
        schemes: &["etcd", "etcds"],
        feature: "etcd",
    },
    StoreSchemes {
        store: "Kubernetes",
        schemes: &["k8s", "k8s+http", "k8s+https", "kubernetes"],
        feature: "k8s",
    },
    StoreSchemes {
        store: "in-process",
        schemes: &["memory"],
        feature: "",
    },
];

/// One row of [`STORES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreSchemes {
    /// The store, for messages (`SQL`, `Valkey/Redis`).
    pub store: &'static str,
    /// The URL schemes it reads.
    pub schemes: &'static [&'static str],
    /// The cargo feature of `leasehold` that compiles it in (empty: always).
    pub feature: &'static str,
}

impl StoreSchemes {
    /// Whether this build has the store.
    pub fn compiled(&self) -> bool {
        const ON: [(&str, bool); 7] = [
            ("", true),
            ("postgres", cfg!(feature = "postgres")),
            ("mysql", cfg!(feature = "mysql")),
            ("sqlite", cfg!(feature = "sqlite")),
            ("valkey", cfg!(feature = "valkey")),
            ("etcd", cfg!(feature = "etcd")),
            ("k8s", cfg!(feature = "k8s")),
        ];
        ON.iter()
            .any(|&(feature, on)| on && feature == self.feature)
    }
}

/// Every scheme, grouped by store: `postgres, postgresql, mysql, mariadb,
/// sqlite (SQL); redis, … (Valkey/Redis); …`.
pub fn schemes_text() -> String {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for row in STORES {
        match groups.iter_mut().find(|(store, _)| *store == row.store) {
            Some((_, schemes)) => schemes.extend(row.schemes),
            None => groups.push((row.store, row.schemes.to_vec())),
        }
    }
    groups
        .iter()
        .map(|(store, schemes)| format!("{} ({store})", schemes.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A store, read from its URL and not yet connected: adjust the backend's
/// own settings, then [`StoreConfig::connect`].
///
/// ```
/// use std::time::Duration;
/// use leasehold::{StoreConfig, StoreKind};
/// let config = StoreConfig::from_url("sqlite://ids.sqlite")?.op_timeout(Duration::from_secs(2));
/// assert!(matches!(config.kind(), StoreKind::Sql(_)));
/// # Ok::<(), leasehold::ConnectError>(())
/// ```
#[derive(Clone, Debug)]
pub struct StoreConfig {
    url: String,
    kind: StoreKind,
}

/// Which store a [`StoreConfig`] opens, with that backend's configuration.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum StoreKind {
    /// An in-process [`Memory`] store: `memory://NAME`; every connect of one
    /// name in one process opens the same store.
    Memory(String),
    /// PostgreSQL, MySQL/MariaDB or SQLite.
    #[cfg(feature = "_sql")]
    Sql(SqlConfig),
    /// Valkey or Redis.
    #[cfg(feature = "valkey")]
    Valkey(ValkeyConfig),
    /// etcd v3.
    #[cfg(feature = "etcd")]
    Etcd(EtcdConfig),
    /// Kubernetes Leases.
    #[cfg(feature = "k8s")]
    Kube(KubeConfig),
}

/// `url`'s scheme, lowercased (`sqlite:PATH`, sqlx's form, is `sqlite`).
fn scheme(url: &str) -> Result<String, ConnectError> {
    match url.split_once("://") {
        Some((scheme, _)) if !scheme.is_empty() => Ok(scheme.to_ascii_lowercase()),
        _ if url
            .get(..7)
            .is_some_and(|s| s.eq_ignore_ascii_case("sqlite:")) =>
        {
            Ok("sqlite".to_owned())
        }
        _ => Err(ConnectError::bad_url(
            url,
            format!("it has no scheme; use one of {}", schemes_text()),
        )),
    }
}

impl StoreConfig {
    /// Reads `url` (no network): the backend whose schemes include the URL's
    /// reads the rest, and refuses what it cannot use with the accepted form.
    pub fn from_url(url: &str) -> Result<Self, ConnectError> {
        let url = url.trim();
        let scheme = scheme(url)?;
        let Some(row) = STORES.iter().find(|r| r.schemes.contains(&scheme.as_str())) else {
            if matches!(scheme.as_str(), "http" | "https") {
                return Err(ConnectError::bad_url(
                    url,
                    "say which store: etcd://HOST:PORT for etcd, k8s://HOST:PORT for a \
                     Kubernetes API server",
                ));
            }
            return Err(ConnectError::bad_url(
                url,
                format!("unknown scheme {scheme:?}; use one of {}", schemes_text()),
            ));
        };
        if !row.compiled() {
            return Err(ConnectError::bad_url(
                url,
                format!(
                    "{scheme}:// is a {} store, left out of this build; enable the `{}` feature \
                     of the leasehold crate",
                    row.store, row.feature
                ),
            ));
        }
        #[allow(unused_variables)] // with no networked store compiled in
        let bad = |e: &dyn std::fmt::Display| ConnectError::bad_url(url, e);
        let kind = match row.feature {
            "" => StoreKind::Memory(memory_name(url)),
            #[cfg(feature = "_sql")]
            "postgres" | "mysql" | "sqlite" => {
                StoreKind::Sql(SqlConfig::from_url(url).map_err(|e| match e {
                    SqlError::Config(c) => bad(&c),
                    other => bad(&other),
                })?)
            }
            #[cfg(feature = "valkey")]
            "valkey" => StoreKind::Valkey(ValkeyConfig::from_url(url).map_err(|e| match e {
                ValkeyError::Config(c) => bad(&c),
                other => bad(&other),
            })?),
            #[cfg(feature = "etcd")]
            "etcd" => StoreKind::Etcd(EtcdConfig::from_url(url).map_err(|e| match e {
                EtcdError::Config(c) => bad(&c),
                other => bad(&other),
            })?),
            #[cfg(feature = "k8s")]
            "k8s" => StoreKind::Kube(KubeConfig::from_url(url).map_err(|e| match e {
                KubeError::Config(c) => bad(&c),
                other => bad(&other),
            })?),
            other => unreachable!("feature {other} is compiled in but has no backend arm"),
        };
        Ok(Self {
            url: url.to_owned(),
            kind,
        })
    }

    /// The store and its backend's configuration.
    pub fn kind(&self) -> &StoreKind {
        &self.kind
    }

    /// The URL, password masked, as messages show it.
    pub fn shown_url(&self) -> String {
        leasehold_core::url::masked(&self.url)
    }

    /// The bound on each store operation, whatever the store.
    pub fn op_timeout(self, timeout: Duration) -> Self {
        let _ = timeout; // unused with no networked store compiled in
        self.map(|kind| match kind {
            StoreKind::Memory(name) => StoreKind::Memory(name),
            #[cfg(feature = "_sql")]
            StoreKind::Sql(c) => StoreKind::Sql(c.op_timeout(timeout)),
            #[cfg(feature = "valkey")]
            StoreKind::Valkey(c) => StoreKind::Valkey(c.op_timeout(timeout)),
            #[cfg(feature = "etcd")]
            StoreKind::Etcd(c) => StoreKind::Etcd(c.op_timeout(timeout)),
            #[cfg(feature = "k8s")]
            StoreKind::Kube(c) => StoreKind::Kube(c.op_timeout(timeout)),
        })
    }

    fn map(mut self, f: impl FnOnce(StoreKind) -> StoreKind) -> Self {
        let kind = std::mem::replace(&mut self.kind, StoreKind::Memory(String::new()));
        self.kind = f(kind);
        self
    }

    /// Changes the SQL configuration, when the store is SQL.
    #[cfg(feature = "_sql")]
    pub fn map_sql(self, f: impl FnOnce(SqlConfig) -> SqlConfig) -> Self {
        self.map(|kind| match kind {
            StoreKind::Sql(c) => StoreKind::Sql(f(c)),
            other => other,
        })
    }

    /// Changes the Valkey/Redis configuration, when the store is one.
    #[cfg(feature = "valkey")]
    pub fn map_valkey(self, f: impl FnOnce(ValkeyConfig) -> ValkeyConfig) -> Self {
        self.map(|kind| match kind {
            StoreKind::Valkey(c) => StoreKind::Valkey(f(c)),
            other => other,
        })
    }

    /// Changes the etcd configuration, when the store is etcd.
    #[cfg(feature = "etcd")]
    pub fn map_etcd(self, f: impl FnOnce(EtcdConfig) -> EtcdConfig) -> Self {
        self.map(|kind| match kind {
            StoreKind::Etcd(c) => StoreKind::Etcd(f(c)),
            other => other,
        })
    }

    /// Changes the Kubernetes configuration, when the store is Kubernetes.
    #[cfg(feature = "k8s")]
    pub fn map_kube(self, f: impl FnOnce(KubeConfig) -> KubeConfig) -> Self {
        self.map(|kind| match kind {
            StoreKind::Kube(c) => StoreKind::Kube(f(c)),
            other => other,
        })
    }

    /// Connects with the backend's own `connect`: its checks of the server
    /// (version, durability, permissions) run, and each refusal says what to
    /// do.
    pub async fn connect(self) -> Result<Store, ConnectError> {
        let shown = self.shown_url();
        let inner = match self.kind {
            StoreKind::Memory(name) => Inner::Memory(memory(&name)),
            #[cfg(feature = "_sql")]
            StoreKind::Sql(c) => Inner::Sql(
                SqlStrategy::connect(c)
                    .await
                    .map_err(|e| sql_error(&shown, e))?,
            ),
            #[cfg(feature = "valkey")]
            StoreKind::Valkey(c) => Inner::Valkey(
                ValkeyStrategy::connect(c)
                    .await
                    .map_err(|e| valkey_error(&shown, e))?,
            ),
            #[cfg(feature = "etcd")]
            StoreKind::Etcd(c) => Inner::Etcd(
                EtcdStrategy::connect(c)
                    .await
                    .map_err(|e| etcd_error(&shown, e))?,
            ),
            #[cfg(feature = "k8s")]
            StoreKind::Kube(c) => Inner::Kube(
                KubeStrategy::connect(c)
                    .await
                    .map_err(|e| kube_error(&shown, e))?,
            ),
        };
        Ok(Store::new(inner, shown))
    }
}

/// `memory://NAME` → `NAME` (empty for `memory://`).
fn memory_name(url: &str) -> String {
    url.split_once("://")
        .map(|(_, rest)| rest.trim_end_matches('/').to_owned())
        .unwrap_or_default()
}

/// The process's in-memory store of `name`.
fn memory(name: &str) -> Memory {
    static STORES: Mutex<Option<HashMap<String, Memory>>> = Mutex::new(None);
    let mut stores = STORES.lock().unwrap_or_else(PoisonError::into_inner);
    stores
        .get_or_insert_with(HashMap::new)
        .entry(name.to_owned())
        .or_default()
        .clone()
}

#[cfg(feature = "_sql")]
fn sql_error(shown: &str, e: SqlError) -> ConnectError {
    let url = shown.to_owned();
    match e {
        SqlError::Config(c) => ConnectError::BadUrl {
            url,
            why: c.to_string(),
        },
        e @ (SqlError::Unreachable(_) | SqlError::Timeout(_)) => ConnectError::Unreachable {
            message: format!("cannot reach {shown}: {e}"),
            url,
        },
        e => ConnectError::Refused {
            message: format!("cannot use {shown}: {e}"),
            url,
        },
    }
}

#[cfg(feature = "valkey")]
fn valkey_error(shown: &str, e: ValkeyError) -> ConnectError {
    let url = shown.to_owned();
    match e {
        ValkeyError::Config(c) => ConnectError::BadUrl {
            url,
            why: c.to_string(),
        },
        // Its message names the URL already (without credentials).
        e @ ValkeyError::Unreachable { .. } => ConnectError::Unreachable {
            message: e.to_string(),
            url,
        },
        // A refused certificate, or TLS on one side only: final until the
        // configuration or the certificates change; the message names the
        // URL and the fix.
        e @ ValkeyError::Tls { .. } => ConnectError::Refused {
            message: e.to_string(),
            url,
        },
        e => ConnectError::Refused {
            message: format!("{shown}: {e}"),
            url,
        },
    }
}

#[cfg(feature = "etcd")]
fn etcd_error(shown: &str, e: EtcdError) -> ConnectError {
    let url = shown.to_owned();
    match e {
        EtcdError::Config(c) => ConnectError::BadUrl {
            url,
            why: c.to_string(),
        },
        e @ EtcdError::Connect { .. } => ConnectError::Unreachable {
            message: format!("{shown}: {e}"),
            url,
        },
        e => ConnectError::Refused {
            message: format!("{shown}: {e}"),
            url,
        },
    }
}

#[cfg(feature = "k8s")]
fn kube_error(shown: &str, e: KubeError) -> ConnectError {
    let url = shown.to_owned();
    match e {
        KubeError::Config(c) => ConnectError::BadUrl {
            url,
            why: c.to_string(),
        },
        e @ KubeError::Connect { .. } => ConnectError::Unreachable {
            message: format!("{shown}: {e}"),
            url,
        },
        e => ConnectError::Refused {
            message: format!("{shown}: {e}"),
            url,
        },
    }
}

#[cfg(all(test, feature = "_sql"))]
mod tests {
    use super::*;

    /// A TLS failure at connect (an expired or untrusted certificate, a
    /// client certificate refused) is final, in the backend's words.
    #[test]
    fn a_tls_refusal_is_final_and_keeps_its_cause_and_fix() {
        let e = sql_error(
            "postgres://h/db",
            SqlError::Tls {
                what: "connecting to postgres://h/db: the server's certificate has expired".into(),
                fix: "renew the server's certificate".into(),
            },
        );
        assert!(matches!(e, ConnectError::Refused { .. }), "{e:?}");
        assert!(!e.is_retryable());
        assert!(
            e.to_string()
                .ends_with("has expired; renew the server's certificate"),
            "{e}"
        );
    }
}
