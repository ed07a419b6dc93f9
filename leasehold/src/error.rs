//! Why a store could not be opened.

/// Why [`connect`](crate::connect) or
/// [`StoreConfig::from_url`](crate::StoreConfig::from_url) failed. Every
/// message names the store by its URL as [`crate::url::redacted`] shows it
/// (no password, no secret option).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The URL names no store this build can open: no or an unknown scheme,
    /// a store whose feature is off, a bad host, port or option. Final.
    #[error("bad store URL {url}: {why}")]
    BadUrl {
        /// The URL, redacted.
        url: String,
        /// What is wrong and the accepted form.
        why: String,
    },
    /// The store did not answer, or not in time. Without
    /// [`StoreConfig::wait_for_store`](crate::StoreConfig::wait_for_store)
    /// nothing retries a failed connect by itself: check that the store
    /// runs and try again, or let `connect` wait for it.
    #[error("{message}")]
    Unreachable {
        /// The URL, redacted.
        url: String,
        /// What failed, naming the URL.
        message: String,
    },
    /// The store was still not reachable when the deadline of
    /// [`StoreConfig::wait_for_store`](crate::StoreConfig::wait_for_store)
    /// passed.
    #[error(
        "{url} was not reachable within {waited:?}, the deadline of wait_for_store ({attempts} \
         attempts); the last: {last}. Check that the store runs and that this host can reach \
         it, or wait longer"
    )]
    NotReachable {
        /// The URL, redacted.
        url: String,
        /// The deadline that passed.
        waited: std::time::Duration,
        /// How many attempts were made.
        attempts: u32,
        /// What the last attempt answered.
        last: String,
    },
    /// The store refused the credentials: a wrong user or password (in the
    /// URL, its `password_file` or the credentials callback), a user the
    /// server does not know or let in from this host, a client certificate
    /// or token it does not accept (PostgreSQL `28P01`/`28000`,
    /// MySQL/MariaDB `1045`, Valkey/Redis `WRONGPASS`/`NOAUTH`, etcd's
    /// authentication errors, Kubernetes 401). Final until the credentials
    /// are fixed; the message says "authentication" and what to check.
    #[error("{message}")]
    Authentication {
        /// The URL, redacted.
        url: String,
        /// What the store answered and what to check, naming the URL.
        message: String,
    },
    /// The store answered, and refused: permissions, a server
    /// too old, or settings that can lose leases. Final until fixed; the
    /// message says how.
    #[error("{message}")]
    Refused {
        /// The URL, redacted.
        url: String,
        /// What the store answered and the fix, naming the URL.
        message: String,
    },
}

impl ConnectError {
    /// True when trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unreachable { .. } | Self::NotReachable { .. })
    }

    /// The store's URL, redacted ([`crate::url::redacted`]).
    pub fn url(&self) -> &str {
        match self {
            Self::BadUrl { url, .. }
            | Self::Unreachable { url, .. }
            | Self::NotReachable { url, .. }
            | Self::Authentication { url, .. }
            | Self::Refused { url, .. } => url,
        }
    }

    pub(crate) fn bad_url(url: &str, why: impl std::fmt::Display) -> Self {
        Self::BadUrl {
            url: leasehold_core::url::redacted(url),
            why: why.to_string(),
        }
    }
}
