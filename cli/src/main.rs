//! `leasehold`: look at and operate the leases of a store (see README.md).

fn main() -> std::process::ExitCode {
    leasehold_cli::main()
}
