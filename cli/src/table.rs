//! The status table: cells, widths, highlights, JSON.

use std::time::Duration;

use leasehold::SlotInfo;

/// The columns of the status table.
pub(crate) const HEADER: [&str; 8] = [
    "SLOT",
    "HOLDER",
    "TOKEN",
    "FENCE",
    "FLOOR",
    "EXPIRES IN",
    "RENEWED AGO",
    "HELD FOR",
];

/// How many leading columns identify a slot's state (the rest are times,
/// which change on every read).
pub(crate) const STABLE_COLUMNS: usize = 5;

/// What a slot is: held, revoked (tombstoned until the old expiry) or free.
pub(crate) fn state(s: &SlotInfo) -> &'static str {
    match (&s.holder, s.expires_in) {
        (Some(_), _) => "held",
        (None, Some(_)) => "revoked",
        (None, None) => "free",
    }
}

/// `850 ms`, `12.3 s`, `4 min 3 s`, `2 h 5 min`.
pub(crate) fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", d.as_secs_f64())
    } else if ms < 3_600_000 {
        format!("{} min {} s", ms / 60_000, (ms / 1000) % 60)
    } else {
        format!("{} h {} min", ms / 3_600_000, (ms / 60_000) % 60)
    }
}

fn opt_duration(d: Option<Duration>) -> String {
    d.map_or_else(|| "-".into(), duration)
}

/// A Unix-millisecond time as `2026-11-30T17:16:21.123Z` (`-` for 0).
pub(crate) fn unix_ms(ms: u64) -> String {
    if ms == 0 {
        return "-".into();
    }
    i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(|| format!("{ms} ms"), |t| format!("{t:.3}"))
}

/// A slot's fence, or `-` where the store no longer knows it: fences start
/// at 1, and etcd keeps no fence for a released slot (the fence is the
/// deleted key's revision).
fn fence_text(s: &SlotInfo) -> String {
    if s.fence.0 == 0 {
        "-".into()
    } else {
        s.fence.0.to_string()
    }
}

/// The cells of one slot's row.
pub(crate) fn row(s: &SlotInfo) -> Vec<String> {
    let holder = match (state(s), &s.holder) {
        ("held", Some(h)) if h.is_empty() => "(no identity)".to_owned(),
        ("held", Some(h)) => h.clone(),
        ("revoked", _) => format!("revoked (taken for {})", opt_duration(s.expires_in)),
        _ => "free".to_owned(),
    };
    let revoked = state(s) == "revoked";
    vec![
        s.slot.to_string(),
        holder,
        s.token_prefix.clone().unwrap_or_else(|| "-".into()),
        fence_text(s),
        unix_ms(s.floor.0),
        if revoked {
            "-".into()
        } else {
            opt_duration(s.expires_in)
        },
        opt_duration(s.renewed_ago),
        opt_duration(s.held_for),
    ]
}

/// The cells that say who has the slot, without the times: what `watch`
/// compares to tell a change.
pub(crate) fn stable(s: &SlotInfo) -> Vec<String> {
    let mut cells = row(s);
    cells.truncate(STABLE_COLUMNS);
    if state(s) == "revoked" {
        cells[1] = "revoked".into();
    }
    cells
}

/// Renders `rows` under the header, columns padded; `mark(row, col)` says
/// which cells to highlight and `style` wraps them.
pub(crate) fn render(
    rows: &[Vec<String>],
    mark: &dyn Fn(usize, usize) -> bool,
    style: &dyn Fn(&str) -> String,
) -> String {
    let mut widths: Vec<usize> = HEADER.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<String>, out: &mut String| {
        let text = cells.join("  ");
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(
        HEADER
            .iter()
            .zip(&widths)
            .map(|(h, w)| format!("{h:<w$}"))
            .collect(),
        &mut out,
    );
    for (i, r) in rows.iter().enumerate() {
        line(
            r.iter()
                .zip(&widths)
                .enumerate()
                .map(|(j, (c, w))| {
                    let pad = w.saturating_sub(c.chars().count());
                    if mark(i, j) {
                        format!("{}{}", style(c), " ".repeat(pad))
                    } else {
                        format!("{c}{}", " ".repeat(pad))
                    }
                })
                .collect(),
            &mut out,
        );
    }
    out
}

/// The size of the pool `status` looks at: `--size`, what the store keeps
/// (SQL: the rows `prepare` made), or the default.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Size {
    /// How many slots the pool has.
    pub(crate) slots: u32,
    /// Where the number comes from.
    pub(crate) from: SizeFrom,
}

/// Where a pool's size comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SizeFrom {
    /// `--size`.
    Flag,
    /// The store: SQL keeps a row per slot, made by `prepare`.
    Store,
    /// Nobody: the default pool's 512.
    Assumed,
}

impl SizeFrom {
    fn as_str(self) -> &'static str {
        match self {
            SizeFrom::Flag => "flag",
            SizeFrom::Store => "store",
            SizeFrom::Assumed => "assumed",
        }
    }
}

/// How many slots are held, revoked and free. A store lists only the slots
/// that were ever used, so every other slot of the pool is free too; a slot
/// listed past the size makes the pool that much larger.
struct Counts {
    held: usize,
    revoked: usize,
    free: usize,
    size: usize,
}

fn counts(slots: &[SlotInfo], size: Size) -> Counts {
    let count = |st: &str| slots.iter().filter(|s| state(s) == st).count();
    let listed_end = slots.iter().map(|s| s.slot as usize + 1).max().unwrap_or(0);
    let size = (size.slots as usize).max(listed_end);
    let (held, revoked) = (count("held"), count("revoked"));
    Counts {
        held,
        revoked,
        free: size.saturating_sub(held + revoked),
        size,
    }
}

/// One line above the table: how many slots are held, revoked, free.
pub(crate) fn summary(pool: &str, store: &str, slots: &[SlotInfo], size: Size) -> String {
    let c = counts(slots, size);
    let assumed = match size.from {
        SizeFrom::Flag | SizeFrom::Store => "",
        SizeFrom::Assumed => " (an assumed size: give the pool's with --size)",
    };
    format!(
        "pool {pool} on {store}: {} held, {} revoked, {} free of {} slots{assumed} (times on \
         the store's clock)",
        c.held, c.revoked, c.free, c.size
    )
}

/// The slots as JSON (durations in milliseconds).
pub(crate) fn json(pool: &str, store: &str, slots: &[SlotInfo], size: Size) -> serde_json::Value {
    let ms = |d: Option<Duration>| d.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let c = counts(slots, size);
    serde_json::json!({
        "pool": pool,
        "store": store,
        "size": c.size,
        "size_given": size.from == SizeFrom::Flag,
        "size_from": size.from.as_str(),
        "held": c.held,
        "revoked": c.revoked,
        "free": c.free,
        "slots": slots.iter().map(|s| serde_json::json!({
            "slot": s.slot,
            "state": state(s),
            "holder": s.holder,
            "token_prefix": s.token_prefix,
            "fence": (s.fence.0 != 0).then_some(s.fence.0),
            "floor_unix_ms": s.floor.0,
            "expires_in_ms": ms(s.expires_in),
            "renewed_ago_ms": ms(s.renewed_ago),
            "held_for_ms": ms(s.held_for),
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration(Duration::from_millis(850)), "850 ms");
        assert_eq!(duration(Duration::from_millis(12_340)), "12.3 s");
        assert_eq!(duration(Duration::from_secs(243)), "4 min 3 s");
        assert_eq!(duration(Duration::from_secs(7500)), "2 h 5 min");
        assert_eq!(unix_ms(1_735_689_600_123), "2025-01-01T00:00:00.123Z");
    }

    fn held(slot: u32) -> SlotInfo {
        let mut s = SlotInfo::free(slot, leasehold::Fence(1), leasehold::Floor(0));
        s.holder = Some(format!("worker-{slot}"));
        s.expires_in = Some(Duration::from_secs(20));
        s
    }

    /// A store lists only the slots ever used: the others are free too.
    #[test]
    fn never_used_slots_count_as_free() {
        let slots = [held(0), held(1), held(2)];
        let size = Size {
            slots: 512,
            from: SizeFrom::Flag,
        };
        let line = summary("ids", "PostgreSQL 18.6", &slots, size);
        assert_eq!(
            line,
            "pool ids on PostgreSQL 18.6: 3 held, 0 revoked, 509 free of 512 slots (times on the \
             store's clock)"
        );
        let v = json("ids", "PostgreSQL 18.6", &slots, size);
        assert_eq!(
            (v["size"].as_u64(), v["free"].as_u64()),
            (Some(512), Some(509))
        );
        // A released slot is listed, and free either way.
        let slots = [
            held(0),
            SlotInfo::free(1, leasehold::Fence(2), leasehold::Floor(0)),
        ];
        let size = Size {
            slots: 4,
            from: SizeFrom::Flag,
        };
        assert!(
            summary("ids", "s", &slots, size).contains(": 1 held, 0 revoked, 3 free of 4 slots")
        );
    }

    /// Without --size the count rests on an assumption, and says so; a slot
    /// listed past the size shows the pool is larger than that.
    #[test]
    fn an_assumed_size_is_named_and_listed_slots_extend_it() {
        let size = Size {
            slots: 512,
            from: SizeFrom::Assumed,
        };
        let line = summary("ids", "s", &[held(0)], size);
        assert!(
            line.contains(": 1 held, 0 revoked, 511 free of 512 slots (an assumed size"),
            "{line}"
        );
        let size = Size {
            slots: 2,
            from: SizeFrom::Flag,
        };
        let line = summary("ids", "s", &[held(0), held(5)], size);
        assert!(
            line.contains(": 2 held, 0 revoked, 4 free of 6 slots"),
            "{line}"
        );
    }
}
