//! `leasehold doctor`: one line per check, each with a verdict and a fix —
//! the store's own checks and the clock and latency every store shares
//! (`leasehold::operate::doctor`).

use leasehold::Verdict;
use leasehold::operate::doctor as checks_of;

use crate::StoreArgs;
use crate::error::{CliError, Exit};
use crate::redact;
use crate::store;

pub(crate) async fn doctor(args: &StoreArgs) -> Result<Exit, CliError> {
    let secrets = redact::secrets(&args.url);
    println!("leasehold doctor: {}", redact::url(&args.url));
    // The Kubernetes RBAC preflight is one of the checks, not a refusal.
    let store = store::connect_with(args, false).await?;
    let checks = checks_of(store.operator()).await;
    let mut fails = 0;
    let mut warns = 0;
    for c in &checks {
        match c.verdict {
            Verdict::Fail => fails += 1,
            Verdict::Warn => warns += 1,
            _ => {}
        }
        println!("{}", redact::scrub(&c.to_string(), &secrets));
    }
    match (fails, warns) {
        (0, 0) => println!("all checks passed"),
        (0, w) => println!("no check failed; {w} warning(s)"),
        (f, w) => println!("{f} check(s) FAILed, {w} warning(s)"),
    }
    Ok(if fails > 0 {
        Exit::CheckFailed
    } else {
        Exit::Ok
    })
}
