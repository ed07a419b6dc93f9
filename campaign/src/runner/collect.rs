//! What the workers left: their logs, and the calls they refused.

use std::path::Path;

use crate::record::{self, Record};

pub(crate) fn read_logs(dir: &Path) -> Vec<(u32, Vec<Record>)> {
    let mut logs = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(id) = name
            .strip_prefix('w')
            .and_then(|s| s.strip_suffix(".rec"))
            .and_then(|s| s.parse().ok())
        {
            match record::read(&entry.path()) {
                Ok(r) => logs.push((id, r)),
                Err(e) => eprintln!("campaign: {name}: {e}"),
            }
        }
    }
    logs.sort_by_key(|(id, _)| *id);
    logs
}

/// Refused generation calls reported by the workers that stopped gracefully.
pub(crate) fn refused_calls(dir: &Path) -> u64 {
    let mut n = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.path().extension().is_some_and(|e| e == "err") {
            for line in std::fs::read_to_string(entry.path())
                .unwrap_or_default()
                .lines()
            {
                if let Some(v) = line
                    .split_once(" IDs, ")
                    .and_then(|(_, r)| r.split_whitespace().next())
                    .and_then(|v| v.parse::<u64>().ok())
                {
                    n += v;
                }
            }
        }
    }
    n
}
