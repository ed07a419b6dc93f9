//! The suite's glue for any backend, written once: a store reached through
//! its driver, as `leasehold::connect` reaches it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use leasehold_core::drivers::Driver;
use leasehold_core::{BoxFuture, Operate, PoolSpec};

use crate::glue::{Glue, Store};

/// A backend under test reached through its driver: the URL read by the
/// driver (`Driver::parse_url`), options set by key and value as the URL's
/// query says them, connected by the driver, each test's pool declared new
/// and a lease revoked through `Operate`, and the fault proxy put in front
/// by giving the driver the proxy's address in the URL. A backend whose
/// suite needs nothing else gives this instead of a `Glue` of its own.
///
/// ```
/// use leasehold_conformance::ByDriver;
/// use leasehold_core::drivers::MEMORY;
/// let backend = ByDriver::new(&MEMORY, "memory://by-driver-doc");
/// assert_eq!(backend.url(), "memory://by-driver-doc");
/// ```
pub struct ByDriver {
    driver: &'static dyn Driver,
    url: String,
    options: Vec<(String, String)>,
    addr: Option<SocketAddr>,
}

impl ByDriver {
    /// The store at `url`, through `driver`. Its address, for the fault
    /// proxy, is the URL's one `HOST:PORT` when the host is an IP address;
    /// a URL of several hosts or none (a file, a name) is not proxied.
    pub fn new(driver: &'static dyn Driver, url: impl Into<String>) -> Self {
        let url = url.into();
        let addr = url
            .split_once("://")
            .map(|(_, rest)| rest)
            .and_then(|rest| rest.split(['/', '?']).next())
            .map(|authority| authority.rsplit('@').next().unwrap_or(authority))
            .and_then(|host| host.parse().ok());
        Self {
            driver,
            url,
            options: Vec::new(),
            addr,
        }
    }

    /// Sets the option `key` to `value` on every connection
    /// (`DriverConfig::set`).
    pub fn option(mut self, key: &str, value: &str) -> Self {
        self.options.push((key.to_owned(), value.to_owned()));
        self
    }

    /// The URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A store connected through the driver to `url`, with the options and
    /// `op_timeout` when given.
    async fn open(
        &self,
        url: &str,
        op_timeout: Option<Duration>,
    ) -> Result<Arc<dyn Operate>, String> {
        let mut config = self.driver.parse_url(url).map_err(|e| e.to_string())?;
        for (key, value) in &self.options {
            config.set(key, value)?;
        }
        if let Some(timeout) = op_timeout {
            config.set("op_timeout", &format!("{}ms", timeout.as_millis().max(1)))?;
        }
        config
            .connect(leasehold_core::url::redacted(url))
            .await
            .map_err(|e| e.to_string())
    }
}

impl Glue for ByDriver {
    fn connect(&self) -> BoxFuture<'_, Result<Store, String>> {
        Box::pin(async move {
            let store: Store = self.open(&self.url, None).await?;
            Ok(store)
        })
    }

    fn connect_via(
        &self,
        addr: SocketAddr,
        op_timeout: Duration,
    ) -> BoxFuture<'_, Result<Store, String>> {
        Box::pin(async move {
            let own = self
                .addr
                .ok_or("this store's URL names no one address to proxy")?;
            let url = self.url.replacen(&own.to_string(), &addr.to_string(), 1);
            let store: Store = self.open(&url, Some(op_timeout)).await?;
            Ok(store)
        })
    }

    fn store_addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// Every test's pool is fresh (a random name) and nobody has held it:
    /// declared new, so that its first claim does not wait out the span a
    /// pool first seen without its records waits.
    fn prepare<'a>(&'a self, pool: &'a PoolSpec) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let store = self.open(&self.url, None).await?;
            let done = store
                .prepare_new_pool(pool)
                .await
                .map_err(|e| format!("declare the pool new: {e}"));
            store.close().await;
            done
        })
    }

    fn revoke<'a>(
        &'a self,
        pool: &'a PoolSpec,
        slot: u32,
    ) -> Option<BoxFuture<'a, Result<(), String>>> {
        Some(Box::pin(async move {
            let store = self.open(&self.url, None).await?;
            let revoked = store.revoke(pool, slot).await;
            store.close().await;
            match revoked.map_err(|e| e.to_string())? {
                true => Ok(()),
                false => Err(format!("revoke: slot {slot} had no live lease")),
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_core::drivers::MEMORY;

    /// The proxy's address is the URL's one IP `HOST:PORT`, and nothing
    /// else.
    #[test]
    fn the_address_to_proxy_is_the_urls_one_ip_host() {
        for (url, addr) in [
            ("postgres://u:p@127.0.0.1:5432/db", Some("127.0.0.1:5432")),
            ("redis://127.0.0.1:6379", Some("127.0.0.1:6379")),
            ("etcd://127.0.0.1:2379,127.0.0.1:2380", None),
            ("sqlite:///tmp/x.db", None),
            ("memory://x", None),
        ] {
            let got = ByDriver::new(&MEMORY, url).store_addr();
            assert_eq!(got, addr.map(|a| a.parse().unwrap()), "{url}");
        }
    }
}
