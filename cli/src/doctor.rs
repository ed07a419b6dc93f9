//! `leasehold doctor`: one line per check, each with a verdict and a fix —
//! the store's own checks and the clock and latency every store shares
//! (`leasehold::operate::doctor`), then what the store's guards hold back
//! (`Operate::guards`): of the pool named, or of every pool the store can
//! list.

use leasehold::guards::guard_check;
use leasehold::operate::doctor as checks_of;
use leasehold::{Check, OperateError, PoolSpec, Store, Verdict};

use crate::StoreArgs;
use crate::error::{CliError, Exit};
use crate::redact;
use crate::store::{self, pool_spec};

pub(crate) async fn doctor(args: &StoreArgs, pool: Option<&str>) -> Result<Exit, CliError> {
    let secrets = redact::secrets(&args.url);
    let shown = redact::url(&args.url);
    println!("leasehold doctor: {shown}");
    let named = pool
        .map(|p| pool_spec(p, args.pool_size().slots))
        .transpose()?;
    // The Kubernetes RBAC preflight is one of the checks, not a refusal.
    let store = store::connect_with(args, false).await?;
    let mut checks = checks_of(store.operator()).await;
    checks.extend(guard_checks(&store, named, args, &shown).await);
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

/// The guards' lines: of `named`, else of every pool the store lists (a
/// store that cannot list its pools shows what it can tell of itself and
/// says how to name one). A line two pools share (a store-wide guard) is
/// shown once.
async fn guard_checks(
    store: &Store,
    named: Option<PoolSpec>,
    args: &StoreArgs,
    url: &str,
) -> Vec<Check> {
    let operator = store.operator();
    // What keeps a pool's lines from showing, after the lines shown.
    let mut notes = Vec::new();
    let pools = match named {
        Some(spec) => vec![spec],
        None => match operator.pools().await {
            Ok(names) => {
                if names.is_empty() {
                    notes.push(Check::new(
                        Verdict::NotApplicable,
                        "wipe",
                        "no pool in the store yet: no incarnation record to read",
                    ));
                }
                names
                    .iter()
                    .filter_map(|n| pool_spec(n, args.pool_size().slots).ok())
                    .collect()
            }
            Err(OperateError::Unsupported(_)) => {
                notes.push(Check::new(
                    Verdict::NotApplicable,
                    "wipe",
                    format!(
                        "{} cannot list its pools: name one with --pool NAME to read its \
                         incarnation record",
                        operator.describe()
                    ),
                ));
                Vec::new()
            }
            // A missing table is the schema line's FAIL already.
            Err(e) => {
                notes.push(Check::new(
                    Verdict::NotApplicable,
                    "wipe",
                    format!("no pool's records read: the pools could not be listed ({e})"),
                ));
                return notes;
            }
        },
    };
    let mut readings = Vec::new();
    if pools.is_empty() {
        readings.push(operator.guards(None).await);
    }
    for spec in &pools {
        readings.push(operator.guards(Some(spec)).await);
    }
    let mut lines: Vec<Check> = Vec::new();
    for reading in readings {
        match reading {
            Ok(guards) => lines.extend(guards.iter().map(|g| guard_check(g, url))),
            Err(e) => lines.push(Check::new(
                Verdict::Fail,
                "guards",
                format!("the guards' records could not be read: {e}"),
            )),
        }
    }
    let mut checks: Vec<Check> = Vec::new();
    for line in lines.into_iter().chain(notes) {
        if !checks.contains(&line) {
            checks.push(line);
        }
    }
    checks
}
