//! `leasehold-lockdir`: the `leasehold` command-line tool with the lock
//! directory in its registry (`leasehold-lockdir status --url
//! lockdir:///var/lib/ids --pool ids`).

use std::process::ExitCode;

fn main() -> ExitCode {
    if let Err(e) = leasehold_lockdir::register() {
        eprintln!("leasehold: {e}");
        return ExitCode::from(3);
    }
    leasehold_cli::main()
}
