//! The Valkey/Redis driver: every scheme of a server, a Sentinel set or a
//! Cluster, read into [`ValkeyConfig`].

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use leasehold_core::credentials::CredentialSource;
use leasehold_core::drivers::{
    ConnectError, Driver, DriverConfig, bool_value, duration_value, unknown_key,
};
use leasehold_core::{BoxFuture, Operate};

use crate::{ValkeyConfig, ValkeyError, ValkeyStrategy};

/// Valkey and Redis: `redis://`, `valkey://`, their TLS forms (`rediss://`,
/// `valkeys://`), Sentinel (`redis-sentinel://`, …) and Cluster
/// (`redis-cluster://`, …).
pub static DRIVER: ValkeyDriver = ValkeyDriver;

/// The driver of [`DRIVER`].
#[derive(Clone, Copy, Debug)]
pub struct ValkeyDriver;

impl Driver for ValkeyDriver {
    fn store(&self) -> &'static str {
        "Valkey/Redis"
    }

    fn schemes(&self) -> &'static [&'static str] {
        ValkeyConfig::SCHEMES
    }

    fn parse_url(&self, url: &str) -> Result<Box<dyn DriverConfig>, ConnectError> {
        ValkeyConfig::from_url(url)
            .map(|c| Box::new(c) as Box<dyn DriverConfig>)
            .map_err(|e| match e {
                ValkeyError::Config(c) => ConnectError::bad_url(url, c),
                other => ConnectError::bad_url(url, other),
            })
    }
}

/// The option keys [`ValkeyConfig`] takes by key and value.
const KEYS: &[&str] = &["op_timeout", "refuse_at_connect", "durability", "prefix"];

impl DriverConfig for ValkeyConfig {
    fn clone_config(&self) -> Box<dyn DriverConfig> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let this = self.clone();
        *self = match key {
            "op_timeout" => this.op_timeout(duration_value(key, value)?),
            "durability" => this.durability(value.parse()?),
            "refuse_at_connect" => this.refuse_at_connect(bool_value(key, value)?),
            "prefix" => {
                crate::config::check_prefix(value).map_err(|e| e.to_string())?;
                this.key_prefix(value)
            }
            _ => return Err(unknown_key("Valkey/Redis", key, KEYS)),
        };
        Ok(())
    }

    fn keys(&self) -> &'static [&'static str] {
        KEYS
    }

    fn look_only(&mut self, _timeout: Duration) -> Result<(), ConnectError> {
        *self = self.clone().refuse_at_connect(false);
        Ok(())
    }

    fn credentials(&mut self, source: CredentialSource) -> Result<(), String> {
        *self = self.clone().credential_source(source);
        Ok(())
    }

    fn connect(
        self: Box<Self>,
        shown: String,
    ) -> BoxFuture<'static, Result<Arc<dyn Operate>, ConnectError>> {
        Box::pin(async move {
            match ValkeyStrategy::connect(*self).await {
                Ok(s) => Ok(Arc::new(s) as Arc<dyn Operate>),
                Err(e) => Err(connect_error(&shown, e)),
            }
        })
    }

    #[cfg(feature = "harness")]
    fn harness(
        &self,
    ) -> Option<BoxFuture<'static, Result<Box<dyn leasehold_core::drivers::Harness>, String>>> {
        Some(Box::pin(crate::harness::ValkeyHarness::connect(
            self.clone(),
        )))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// What a failed connect means to the caller: a bad URL, a store not
/// reachable (retryable), credentials refused, or a refusal to fix.
pub(crate) fn connect_error(shown: &str, e: ValkeyError) -> ConnectError {
    let url = shown.to_owned();
    match e {
        ValkeyError::Config(c) => ConnectError::BadUrl {
            url,
            why: c.to_string(),
        },
        // Their messages name the URL already (without credentials).
        e @ (ValkeyError::Unreachable { .. } | ValkeyError::Credentials { .. }) => {
            ConnectError::Unreachable {
                message: e.to_string(),
                url,
            }
        }
        e @ ValkeyError::Authentication { .. } => ConnectError::Authentication {
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
