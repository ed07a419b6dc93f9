//! The etcd driver: `etcd://` and `etcds://`, read into [`EtcdConfig`].

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use leasehold_core::credentials::CredentialSource;
use leasehold_core::drivers::{
    ConnectError, Driver, DriverConfig, bool_value, duration_value, unknown_key,
};
use leasehold_core::{BoxFuture, Operate};

use crate::{EtcdConfig, EtcdError, EtcdStrategy};

/// etcd v3: `etcd://HOST:2379,…`, over TLS `etcds://`.
pub static DRIVER: EtcdDriver = EtcdDriver;

/// The driver of [`DRIVER`].
#[derive(Clone, Copy, Debug)]
pub struct EtcdDriver;

impl Driver for EtcdDriver {
    fn store(&self) -> &'static str {
        "etcd"
    }

    fn schemes(&self) -> &'static [&'static str] {
        EtcdConfig::SCHEMES
    }

    fn parse_url(&self, url: &str) -> Result<Box<dyn DriverConfig>, ConnectError> {
        EtcdConfig::from_url(url)
            .map(|c| Box::new(c) as Box<dyn DriverConfig>)
            .map_err(|e| match e {
                EtcdError::Config(c) => ConnectError::bad_url(url, c),
                other => ConnectError::bad_url(url, other),
            })
    }

    fn http_form(&self, tls: bool) -> Option<&'static str> {
        Some(if tls {
            "etcds://HOST:2379?ca=CA.crt for etcd over TLS"
        } else {
            "etcd://HOST:2379 for etcd"
        })
    }
}

/// The option keys [`EtcdConfig`] takes by key and value.
const KEYS: &[&str] = &[
    "op_timeout",
    "refuse_at_connect",
    "durability",
    "prefix",
    "connect_timeout",
];

impl DriverConfig for EtcdConfig {
    fn clone_config(&self) -> Box<dyn DriverConfig> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let this = self.clone();
        *self = match key {
            "op_timeout" => this.op_timeout(duration_value(key, value)?),
            // It never forgets: every policy is accepted, and none changes
            // anything.
            "durability" => value
                .parse::<leasehold_core::DurabilityPolicy>()
                .map(|_| this)?,
            "connect_timeout" => this.connect_timeout(duration_value(key, value)?),
            // etcd keeps what it acknowledged, whatever its settings: there
            // is no server to refuse for its durability.
            "refuse_at_connect" => bool_value(key, value).map(|_| this)?,
            "prefix" => this.prefix(value),
            _ => return Err(unknown_key("etcd", key, KEYS)),
        };
        Ok(())
    }

    fn keys(&self) -> &'static [&'static str] {
        KEYS
    }

    fn look_only(&mut self, timeout: Duration) -> Result<(), ConnectError> {
        *self = self.clone().connect_timeout(timeout);
        Ok(())
    }

    fn credentials(&mut self, source: CredentialSource) -> Result<(), String> {
        match source.file() {
            Some(path) => {
                *self = self.clone().password_file(path);
                Ok(())
            }
            None => Err(format!(
                "{} cannot be used with etcd, which reads its password once, at connect \
                 (etcd-client renews its token with it): give etcd://USER@HOST?password_file=PATH; \
                 a credentials callback is for SQL and Valkey/Redis stores",
                source.describe()
            )),
        }
    }

    fn connect(
        self: Box<Self>,
        shown: String,
    ) -> BoxFuture<'static, Result<Arc<dyn Operate>, ConnectError>> {
        Box::pin(async move {
            match EtcdStrategy::connect(*self).await {
                Ok(s) => Ok(Arc::new(s) as Arc<dyn Operate>),
                Err(e) => Err(connect_error(&shown, e)),
            }
        })
    }

    #[cfg(feature = "harness")]
    fn harness(
        &self,
    ) -> Option<BoxFuture<'static, Result<Box<dyn leasehold_core::drivers::Harness>, String>>> {
        Some(Box::pin(crate::harness::EtcdHarness::connect(self.clone())))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// What a failed connect means to the caller.
fn connect_error(shown: &str, e: EtcdError) -> ConnectError {
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
        e @ EtcdError::Auth { .. } => ConnectError::Authentication {
            message: format!("{shown}: {e}"),
            url,
        },
        e => ConnectError::Refused {
            message: format!("{shown}: {e}"),
            url,
        },
    }
}
