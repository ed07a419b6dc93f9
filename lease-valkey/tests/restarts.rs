//! Store restarts on Redis 8.2 (HSETEX path), Redis 7.0 and Valkey 8.1
//! (script path) (`leasehold_conformance::restarts`): on a private
//! [`Settings::Durable`] server (the append-only file, fsynced before every
//! reply) a fence never repeats and a lease survives a crash; on a private
//! [`Settings::Lossy`] one (no persistence) the restart guard keeps a second
//! holder off the slot.

use std::process::ExitCode;
use std::sync::Arc;

use leasehold_conformance::Store;
use leasehold_conformance::restarts::{Stores, target};
use leasehold_conformance::servers::{ServerKind, Settings};
use leasehold_core::BoxFuture;
use leasehold_valkey::{ValkeyConfig, ValkeyStrategy};

struct Valkey;

async fn connect(url: &str) -> Result<ValkeyStrategy, String> {
    // The path is probed, as in production: HSETEX on Redis 8, scripts on
    // the others.
    ValkeyStrategy::connect(ValkeyConfig::new(url).key_prefix("lhrestart"))
        .await
        .map_err(|e| format!("connect: {e}"))
}

impl Stores for Valkey {
    fn connect<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<Store, String>> {
        Box::pin(async move { Ok(Arc::new(connect(url).await?) as Store) })
    }

    fn reports_lossy<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<Option<bool>, String>> {
        Box::pin(async move {
            let s = connect(url).await?;
            Ok(Some(!s.durability().keeps_every_write()))
        })
    }
}

fn main() -> ExitCode {
    // The servers live in the targets' backends and stop when the run ends.
    let mut targets = Vec::new();
    for kind in [ServerKind::Redis8, ServerKind::Redis7, ServerKind::Valkey8] {
        for settings in [Settings::Durable, Settings::Lossy] {
            targets.push(target(kind, settings, Valkey));
        }
    }
    leasehold_conformance::run(targets)
}
