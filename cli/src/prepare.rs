//! `leasehold prepare`: creates what the store needs for a pool (the
//! store's own `prepare`), and, with `--new-pool`, states that the pool is
//! new so that its first claim waits for nothing.

use crate::StoreArgs;
use crate::error::{CliError, Exit};
use crate::store::{self, pool_spec};

pub(crate) async fn prepare(
    args: &StoreArgs,
    pool: &str,
    new_pool: bool,
) -> Result<Exit, CliError> {
    let spec = pool_spec(pool, args.pool_size().slots)?;
    let store = store::connect(args).await?;
    let failed =
        |e: String| CliError::new(Exit::Store, format!("preparing pool {pool} failed: {e}"));
    #[cfg(feature = "valkey")]
    if let Some(valkey) = store.valkey() {
        if new_pool {
            valkey
                .declare_new_pool(&spec)
                .await
                .map_err(|e| failed(e.to_string()))?;
            println!(
                "pool {pool} declared new on {}: its first claim waits for nothing",
                store.operator().describe()
            );
            return Ok(Exit::Ok);
        }
        // The tool does not know the pool's TTL: the wait it reports is
        // the claimers' own, which they compute themselves.
        let wait = valkey
            .prepare_pool(&spec)
            .await
            .map_err(|e| failed(e.to_string()))?;
        match wait {
            None => println!("pool {pool} is prepared on {}", store.operator().describe()),
            Some(_) => println!(
                "pool {pool}: its records are not on {} (a new pool, or one wiped by FLUSHALL, \
                 FLUSHDB or a deletion of its keys): no slot is granted until the claimers' \
                 restart span (TTL + 2 × max_clock_skew) has passed from now. If the pool is \
                 new, or every holder of it has stopped, skip the wait with --new-pool",
                store.operator().describe()
            ),
        }
        return Ok(Exit::Ok);
    }
    if new_pool {
        return Err(CliError::new(
            Exit::Usage,
            format!(
                "--new-pool: {} holds no wait for a new pool, so there is nothing to skip; \
                 leave it out",
                store.operator().describe()
            ),
        ));
    }
    store
        .operator()
        .prepare(Some(&spec))
        .await
        .map_err(|e| failed(e.to_string()))?;
    println!("pool {pool} is prepared on {}", store.operator().describe());
    Ok(Exit::Ok)
}
