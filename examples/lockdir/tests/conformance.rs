//! The whole behaviour suite on a lock directory, reached through its
//! driver as `leasehold::connect` reaches it: the suite's glue is the one
//! every backend can give (`ByDriver`), and nothing here is the store's own.

use std::process::ExitCode;
use std::sync::Arc;

use leasehold_conformance::{ByDriver, Target};

fn main() -> ExitCode {
    let dir = std::env::temp_dir().join(format!("lockdir-conformance-{}", std::process::id()));
    let url = format!("lockdir://{}", dir.display());
    let code = leasehold_conformance::run(vec![
        Target::new(
            "lockdir",
            format!("lock directory {}, through its driver", dir.display()),
            Arc::new(ByDriver::new(&leasehold_lockdir::DRIVER, url)),
        )
        .with_revoke(),
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    code
}
