//! A campaign worker: leases one slot per kind from a real store, generates
//! IDs as fast as it can while the lease holds, and records them into its
//! log (see `leasehold_campaign::run_worker`). The runner starts it.

use std::process::ExitCode;

fn main() -> ExitCode {
    leasehold_campaign::run_worker(std::env::args().skip(1))
}
