//! The lock directory's entry in `leasehold`'s registry: the `lockdir://`
//! scheme, and its configuration by key and value.

use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use leasehold::credentials::CredentialSource;
use leasehold::drivers::{
    ConnectError, Driver, DriverConfig, bool_value, duration_value, unknown_key,
};
use leasehold::{BoxFuture, DurabilityPolicy, Operate};

use crate::LockDir;

/// The driver: `lockdir://PATH` (`lockdir:///var/lib/ids` for an absolute
/// path), with the options `op_timeout`, `refuse_at_connect` and
/// `durability`.
pub static DRIVER: LockDirDriver = LockDirDriver;

/// The driver of [`DRIVER`].
#[derive(Clone, Copy, Debug)]
pub struct LockDirDriver;

const FORM: &str = "lockdir://PATH[?op_timeout=2s], PATH a directory (lockdir:///var/lib/ids)";

impl Driver for LockDirDriver {
    fn store(&self) -> &'static str {
        "lock directory"
    }

    fn schemes(&self) -> &'static [&'static str] {
        &["lockdir"]
    }

    fn parse_url(&self, url: &str) -> Result<Box<dyn DriverConfig>, ConnectError> {
        let rest = url
            .split_once("://")
            .map(|(_, rest)| rest)
            .ok_or_else(|| ConnectError::bad_url(url, FORM))?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        if path.is_empty() {
            return Err(ConnectError::bad_url(url, format!("no directory: {FORM}")));
        }
        let mut config = LockDirConfig {
            dir: PathBuf::from(path),
            op_timeout: Duration::from_secs(2),
            durability: DurabilityPolicy::Durable,
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            config
                .set(key, value)
                .map_err(|why| ConnectError::bad_url(url, why))?;
        }
        Ok(Box::new(config))
    }

    fn local_url(&self, dir: &Path) -> Option<String> {
        Some(format!("lockdir://{}", dir.join("leases").display()))
    }
}

/// A lock directory's configuration: the directory and how long a call
/// waits for the lock and the disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockDirConfig {
    /// The directory.
    pub dir: PathBuf,
    /// How long one call may take, its wait for the lock included.
    pub op_timeout: Duration,
    /// What it accepts: every policy accepts a directory, which forgets
    /// nothing it answered; `Throwaway` also turns the wipe guard off
    /// ([`LockDir::with_wipe_guard`]).
    pub durability: DurabilityPolicy,
}

impl DriverConfig for LockDirConfig {
    fn clone_config(&self) -> Box<dyn DriverConfig> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "op_timeout" => self.op_timeout = duration_value(key, value)?,
            // Nothing is judged at connect: the directory forgets nothing
            // it answered (every change is flushed first).
            "refuse_at_connect" => drop(bool_value(key, value)?),
            "durability" => {
                self.durability = value
                    .parse()
                    .map_err(|e| format!("durability={value}: {e}"))?;
            }
            _ => return Err(unknown_key("a lock directory", key, self.keys())),
        }
        Ok(())
    }

    fn keys(&self) -> &'static [&'static str] {
        &["op_timeout", "refuse_at_connect", "durability"]
    }

    fn look_only(&mut self, timeout: Duration) -> Result<(), ConnectError> {
        if !self.dir.is_dir() {
            // Opening it would make it: a tool that only looks says so.
            return Err(ConnectError::bad_url(
                &format!("lockdir://{}", self.dir.display()),
                format!(
                    "{} is not a directory; give the directory the holders use",
                    self.dir.display()
                ),
            ));
        }
        self.op_timeout = timeout;
        Ok(())
    }

    fn credentials(&mut self, source: CredentialSource) -> Result<(), String> {
        Err(format!(
            "{} cannot be used with a lock directory, which takes no password (its file \
             permissions decide who may take leases); leave it out",
            source.describe()
        ))
    }

    fn connect(
        self: Box<Self>,
        shown: String,
    ) -> BoxFuture<'static, Result<Arc<dyn Operate>, ConnectError>> {
        Box::pin(async move {
            let guard = self.durability != DurabilityPolicy::Throwaway;
            let store =
                LockDir::open(&self.dir, self.op_timeout).map_err(|e| ConnectError::Refused {
                    message: format!(
                        "{shown}: cannot open the directory {}: {e}; make it, or give this \
                         process the right to write in it",
                        self.dir.display()
                    ),
                    url: shown.clone(),
                })?;
            Ok(Arc::new(store.with_wipe_guard(guard)) as Arc<dyn Operate>)
        })
    }

    fn harness(
        &self,
    ) -> Option<BoxFuture<'static, Result<Box<dyn leasehold::drivers::Harness>, String>>> {
        let dir = self.dir.clone();
        Some(Box::pin(async move { crate::harness::open(dir) }))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}
