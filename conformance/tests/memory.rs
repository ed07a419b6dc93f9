//! The whole behaviour suite against the in-process `Memory` store.

use std::process::ExitCode;
use std::sync::Arc;

use leasehold_conformance::{ByDriver, Glue, Store, Target};
use leasehold_core::drivers::MEMORY;
use leasehold_core::{BoxFuture, Memory, PoolSpec};

struct InMemory(Memory);

impl Glue for InMemory {
    fn connect(&self) -> BoxFuture<'_, Result<Store, String>> {
        // Every connection is a handle on the same store, like nodes sharing a database.
        let store = self.0.clone();
        Box::pin(async move { Ok(Arc::new(store) as Store) })
    }

    fn revoke<'a>(
        &'a self,
        pool: &'a PoolSpec,
        slot: u32,
    ) -> Option<BoxFuture<'a, Result<(), String>>> {
        Some(Box::pin(async move {
            if self.0.revoke(pool.name().as_str(), slot) {
                Ok(())
            } else {
                Err(format!("no live lease on slot {slot} to revoke"))
            }
        }))
    }
}

fn main() -> ExitCode {
    leasehold_conformance::run(vec![
        Target::new(
            "memory",
            "in-process Memory store",
            Arc::new(InMemory(Memory::new())),
        )
        .with_revoke(),
        // The same store through its driver, as `leasehold::connect` opens
        // it: the glue every backend can give instead of its own.
        Target::new(
            "memory-by-driver",
            "in-process Memory store, through its driver",
            Arc::new(ByDriver::new(&MEMORY, "memory://conformance-by-driver")),
        )
        .with_revoke(),
    ])
}
