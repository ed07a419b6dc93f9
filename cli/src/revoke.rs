//! `leasehold revoke`: each backend's safe revoke (a tombstone until the old
//! expiry), after a confirmation.

use std::io::{BufRead, IsTerminal, Write};

use crate::StoreArgs;
use crate::error::{CliError, Exit};
use crate::store::{self, pool_spec};
use crate::table;

pub(crate) async fn revoke(
    args: &StoreArgs,
    pool: &str,
    slot: u32,
    yes: bool,
) -> Result<Exit, CliError> {
    let spec = pool_spec(pool, args.pool_size().slots.max(slot.saturating_add(1)))?;
    if !yes && !std::io::stdin().is_terminal() {
        return Err(CliError::new(
            Exit::NotConfirmed,
            format!(
                "not revoking slot {slot} of pool {pool}: stdin is not a terminal, so nobody \
                 can confirm; add --yes"
            ),
        ));
    }
    let store = store::connect(args).await?;
    if !yes {
        eprint!(
            "revoke slot {slot} of pool {pool} on {}? Its holder loses the lease at its next \
             renewal; the slot stays taken until the lease would have expired. [y/N] ",
            store.operator().describe()
        );
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        let _ = std::io::stdin().lock().read_line(&mut answer);
        if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
            return Err(CliError::new(
                Exit::NotConfirmed,
                format!("not revoked: slot {slot} of pool {pool} is unchanged"),
            ));
        }
    }
    let revoked = store.operator().revoke(&spec, slot).await.map_err(|e| {
        CliError::new(
            Exit::Store,
            format!("revoking slot {slot} of pool {pool} failed: {e}"),
        )
    })?;
    if !revoked {
        println!(
            "slot {slot} of pool {pool} was not held (free, expired or revoked already): nothing revoked"
        );
        return Ok(Exit::Ok);
    }
    // How long the tombstone keeps the slot taken, when the store can say.
    let left = match store::inspect(&store, &spec).await {
        Ok(slots) => slots
            .iter()
            .find(|s| s.slot == slot)
            .and_then(|s| s.expires_in),
        Err(_) => None,
    };
    let until = match left {
        Some(d) => {
            let at = jiff::Timestamp::now()
                .checked_add(jiff::SignedDuration::try_from(d).unwrap_or_default())
                .unwrap_or_else(|_| jiff::Timestamp::now());
            format!(
                "about {at:.0} (in {}, by the store's clock)",
                table::duration(d)
            )
        }
        None => "the revoked lease would have expired (at most the pool's TTL)".into(),
    };
    println!(
        "slot {slot} of pool {pool} revoked; it stays taken until {until}, and its holder's \
         next renewal is refused"
    );
    Ok(Exit::Ok)
}
