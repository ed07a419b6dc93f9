//! `leasehold prepare`: creates or migrates what the store needs and, with
//! a pool, the pool's slots and its record; `--new-pool` declares the pool
//! new, after a confirmation.

use std::io::{BufRead, IsTerminal, Write};

use crate::StoreArgs;
use crate::error::{CliError, Exit};
use crate::store::{self, pool_spec};

pub(crate) async fn prepare(
    args: &StoreArgs,
    pool: Option<&str>,
    new_pool: bool,
    yes: bool,
) -> Result<Exit, CliError> {
    let spec = match pool {
        Some(name) => Some(pool_spec(name, args.pool_size().slots)?),
        None => None,
    };
    let name = pool.unwrap_or_default();
    if new_pool && !yes && !std::io::stdin().is_terminal() {
        return Err(CliError::new(
            Exit::NotConfirmed,
            format!(
                "not declaring pool {name} new: stdin is not a terminal, so nobody can confirm \
                 that every holder of the pool has stopped; add --yes"
            ),
        ));
    }
    let store = store::connect(args).await?;
    let operator = store.operator();
    if new_pool && !yes {
        eprint!(
            "declare pool {name} on {} new? Its claims stop waiting out a span after its \
             records were found gone (a wiped table). Only if every holder of the pool has \
             stopped: one still running could see its IDs issued again. [y/N] ",
            operator.describe()
        );
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        let _ = std::io::stdin().lock().read_line(&mut answer);
        if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
            return Err(CliError::new(
                Exit::NotConfirmed,
                format!("not prepared: pool {name} is unchanged"),
            ));
        }
    }
    let failed = |e: String| {
        CliError::new(
            Exit::Store,
            format!("preparing {} failed: {e}", operator.describe()),
        )
    };
    let wait = match (&spec, new_pool) {
        (Some(spec), true) => operator.prepare_new_pool(spec).await.map(|()| None),
        (spec, _) => operator.prepare(spec.as_ref()).await,
    };
    // A store that cannot tell a new pool from a wiped one holds the
    // pool's claims back: say so, and how to skip that.
    if let Some(wait) = wait.map_err(|e| failed(e.to_string()))? {
        println!(
            "pool {name}: its records are not on {} (a new pool, or one whose records were \
             wiped: a FLUSHALL, a deleted key prefix, a restored backup): no slot is granted \
             for another {} s (the claimers' restart span, TTL + 2 × max_clock_skew, from when \
             that was first seen). If the pool is new, or every holder of it has stopped, skip \
             the wait with --new-pool",
            operator.describe(),
            wait.as_secs().max(1)
        );
        return Ok(Exit::Ok);
    }
    match (pool, new_pool) {
        (None, _) => println!("prepared {}", operator.describe()),
        (Some(p), false) => println!(
            "prepared pool {p} ({} slots) on {}",
            args.pool_size().slots,
            operator.describe()
        ),
        (Some(p), true) => println!(
            "prepared pool {p} ({} slots) on {}, declared new: its claims wait for nothing",
            args.pool_size().slots,
            operator.describe()
        ),
    }
    Ok(Exit::Ok)
}
