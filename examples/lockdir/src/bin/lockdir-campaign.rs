//! `lockdir-campaign`: the fault campaign with the lock directory in its
//! registry, its workers this same program (`lockdir-campaign --backend
//! lockdir --short`).

use std::process::ExitCode;

fn main() -> ExitCode {
    if let Err(e) = leasehold_lockdir::register() {
        eprintln!("campaign: {e}");
        return ExitCode::from(2);
    }
    leasehold_campaign::main()
}
