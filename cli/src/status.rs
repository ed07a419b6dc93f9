//! `leasehold status` and `leasehold watch`.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use crate::StoreArgs;
use crate::error::{CliError, Exit};
use leasehold::Store;

use crate::store::{self, pool_spec};
use crate::table;

/// Prints the pool's slots (or the store's pools).
pub(crate) async fn status(
    args: &StoreArgs,
    pool: Option<&str>,
    json: bool,
) -> Result<Exit, CliError> {
    let size = args.pool_size();
    let spec = pool.map(|p| pool_spec(p, size.slots)).transpose()?;
    let store = store::connect(args).await?;
    let Some(spec) = spec else {
        return list_pools(&store, json).await;
    };
    let (spec, size) = store::known_size(&store, spec, size).await?;
    let slots = store::inspect(&store, &spec).await?;
    let name = spec.name().as_str();
    if json {
        println!(
            "{:#}",
            table::json(name, &store.operator().describe(), &slots, size)
        );
        return Ok(Exit::Ok);
    }
    println!(
        "{}",
        table::summary(name, &store.operator().describe(), &slots, size)
    );
    let rows: Vec<Vec<String>> = slots.iter().map(table::row).collect();
    print!("{}", table::render(&rows, &|_, _| false, &|c| c.to_owned()));
    if slots.is_empty() {
        println!("(no slot of pool {name} has been used yet)");
    }
    Ok(Exit::Ok)
}

async fn list_pools(store: &Store, json: bool) -> Result<Exit, CliError> {
    let Some(pools) = store::pools(store).await? else {
        return Err(CliError::new(
            Exit::Usage,
            format!(
                "{} cannot list its pools: give the pool with --pool NAME",
                store.operator().describe()
            ),
        ));
    };
    if json {
        println!(
            "{:#}",
            serde_json::json!({"store": store.operator().describe(), "pools": pools})
        );
    } else if pools.is_empty() {
        println!("no pools on {} yet", store.operator().describe());
    } else {
        println!(
            "pools on {} (show one with --pool NAME):",
            store.operator().describe()
        );
        for p in pools {
            println!("  {p}");
        }
    }
    Ok(Exit::Ok)
}

/// Refreshes the table every `interval`, `count` times (or forever).
pub(crate) async fn watch(
    args: &StoreArgs,
    pool: &str,
    interval: Duration,
    count: Option<u64>,
) -> Result<Exit, CliError> {
    let size = args.pool_size();
    let spec = pool_spec(pool, size.slots)?;
    let store = store::connect(args).await?;
    let (spec, size) = store::known_size(&store, spec, size).await?;
    let tty = std::io::stdout().is_terminal();
    let mut before: Option<BTreeMap<u32, Vec<String>>> = None;
    let mut reads = 0u64;
    loop {
        let slots = store::inspect(&store, &spec).await?;
        reads += 1;
        let now: BTreeMap<u32, Vec<String>> =
            slots.iter().map(|s| (s.slot, table::stable(s))).collect();
        let summary = table::summary(pool, &store.operator().describe(), &slots, size);
        draw(&slots, before.as_ref(), &now, &summary, tty, interval);
        before = Some(now);
        if count.is_some_and(|n| reads >= n) {
            return Ok(Exit::Ok);
        }
        tokio::time::sleep(interval).await;
    }
}

/// Prints one refresh: on a terminal the whole screen, changed cells in
/// reverse video; elsewhere the table only when a slot changed, and what
/// changed.
fn draw(
    slots: &[leasehold::SlotInfo],
    before: Option<&BTreeMap<u32, Vec<String>>>,
    now: &BTreeMap<u32, Vec<String>>,
    summary: &str,
    tty: bool,
    interval: Duration,
) {
    let rows: Vec<Vec<String>> = slots.iter().map(table::row).collect();
    // Which stable cells differ from the previous read (none on the first).
    let changed = |i: usize, j: usize| -> bool {
        let Some(prev) = before else { return false };
        if j >= table::STABLE_COLUMNS {
            return false;
        }
        let slot = slots[i].slot;
        match prev.get(&slot) {
            Some(cells) => cells.get(j) != now[&slot].get(j),
            None => true,
        }
    };
    let stamp = jiff::Timestamp::now();
    let mut out = std::io::stdout().lock();
    if tty {
        let text = table::render(&rows, &changed, &|c| format!("\x1b[7m{c}\x1b[0m"));
        let _ = write!(
            out,
            "\x1b[H\x1b[2J{stamp:.0} every {} ms (Ctrl-C to stop)\n{summary}\n{text}",
            interval.as_millis()
        );
    } else if before != Some(now) {
        let text = table::render(&rows, &|_, _| false, &|c| c.to_owned());
        let _ = write!(out, "--- {stamp:.3}\n{summary}\n{text}");
        if let Some(prev) = before {
            let _ = writeln!(out, "changed: {}", describe_changes(prev, now));
        }
    }
    let _ = out.flush();
}

/// `slot 1 (holder, token, fence); slot 4 (gone)`.
fn describe_changes(prev: &BTreeMap<u32, Vec<String>>, now: &BTreeMap<u32, Vec<String>>) -> String {
    let mut parts = Vec::new();
    for (slot, cells) in now {
        match prev.get(slot) {
            None => parts.push(format!("slot {slot} (new)")),
            Some(old) => {
                let cols: Vec<String> = (0..table::STABLE_COLUMNS)
                    .filter(|&j| old.get(j) != cells.get(j))
                    .map(|j| table::HEADER[j].to_ascii_lowercase())
                    .collect();
                if !cols.is_empty() {
                    parts.push(format!("slot {slot} ({})", cols.join(", ")));
                }
            }
        }
    }
    for slot in prev.keys().filter(|s| !now.contains_key(s)) {
        parts.push(format!("slot {slot} (gone)"));
    }
    parts.join("; ")
}
