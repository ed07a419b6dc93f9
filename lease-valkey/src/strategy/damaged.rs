//! What a claim, renewal or inspection says of a record in the pool's
//! fences hash it cannot trust (the scripts find it and write nothing, see
//! `scripts::floor_functions` and `scripts::damaged_functions`): which slot
//! or record, what it holds, and how to repair it.

use leasehold_core::{AcquireError, Floor, PoolSpec};

/// At most this many characters of a damaged value are shown.
const SHOWN_CHARS: usize = 64;

/// `value` quoted, cut to [`SHOWN_CHARS`] characters.
fn shown(value: &str) -> String {
    let cut: String = value.chars().take(SHOWN_CHARS).collect();
    if cut.len() < value.len() {
        format!("{cut:?}…")
    } else {
        format!("{cut:?}")
    }
}

/// What the damaged floor `value` of `slot` in the fences hash `key` means.
pub(super) fn floor_text(key: &str, slot: u32, value: &str) -> String {
    format!(
        "its floor (field floor.{slot} of {key}) is {}, not a Unix time in milliseconds (a whole \
         number from 0, without sign or leading zeros), so what its earlier holders stamped is \
         not known and could be issued again (DESIGN.md rule 8)",
        shown(value)
    )
}

/// How to repair the damaged floor of `slot` in the fences hash `key`.
pub(super) fn floor_fix(key: &str, pool: &PoolSpec, slot: u32) -> String {
    let floor = Floor::above_every_holder(pool).unix_millis();
    format!(
        "HSET {key} floor.{slot} {floor} ({floor} is this host's Unix time in ms plus the pool's \
         TTL and twice its max_clock_skew: above anything a holder of the slot can have stamped)"
    )
}

/// The claim's refusal of the damaged `field` (`value`) of the fences hash
/// `key`: the floor of `slot`, or with no slot a record of the pool.
pub(super) fn claim_refused(
    pool: &PoolSpec,
    key: &str,
    slot: Option<u32>,
    field: &str,
    value: &str,
) -> AcquireError {
    let (what, fix) = match (slot, field) {
        (Some(slot), _) => (floor_text(key, slot, value), floor_fix(key, pool, slot)),
        (None, "span") => (
            format!(
                "its restart span (field span of {key}) is {}, not whole milliseconds, so the \
                 restart guard could not wait out holders with a longer TTL or clock skew than \
                 this one (DESIGN.md rule 12)",
                shown(value)
            ),
            format!(
                "HSET {key} span <the longest TTL plus twice max_clock_skew of the pool's \
                 processes, in ms; this one's is {}>",
                pool.restart_span().as_millis()
            ),
        ),
        (None, "replid_seen") => (
            format!(
                "the time a claim first saw the server's replication ID (field replid_seen of \
                 {key}) is {}, not whole milliseconds, so the promotion guard could not tell how \
                 long to hold claims back after a failover",
                shown(value)
            ),
            format!(
                "HDEL {key} replid replid_seen (the next claim records the replication ID anew, \
                 and waits out the pool's restart span if this server took over from a primary)"
            ),
        ),
        (None, "gone_seen") => (
            format!(
                "the time a claim first saw the pool's records gone (field gone_seen of {key}) \
                 is {}, not whole milliseconds, so the wipe guard could not tell how long to \
                 hold claims back after a FLUSHALL or a deletion of the pool's keys",
                shown(value)
            ),
            format!(
                "HSET {key} gone_seen {} (this host's Unix time in ms: claims wait the pool's \
                 restart span from now), or, with every holder of the pool stopped, \
                 leasehold prepare --pool {} --new-pool",
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_millis(),
                pool.name()
            ),
        ),
        (None, other) => (
            format!("field {other} of {key} is {}", shown(value)),
            format!("make sure nothing but leasehold writes {key}"),
        ),
    };
    AcquireError::DamagedRecord {
        pool: pool.name().to_string(),
        slot,
        what,
        fix,
    }
}

/// The claim's refusal of `slot`, whose fence `fence` in the fences hash
/// `key` is not a number the script can raise exactly.
pub(super) fn fence_refused(pool: &PoolSpec, key: &str, slot: u32, fence: &str) -> AcquireError {
    AcquireError::DamagedRecord {
        pool: pool.name().to_string(),
        slot: Some(slot),
        what: format!(
            "its fence (field {slot} of {key}) is {}: a fence must be a whole number from 0 \
             below 2^53 - 1 (the largest integer the claim script counts exactly) for the next \
             holder's to be bigger (DESIGN.md rule 7)",
            shown(fence)
        ),
        fix: format!(
            "leasehold's fences follow the server's clock in µs and never come near it, so \
             something else wrote it: make sure nothing but leasehold writes {key}; a fence need \
             not be repaired to rise (the next one is at least the server's clock in µs), so \
             delete the field (HDEL {key} {slot}) once every holder of the slot has stopped"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_are_cut_on_a_char_boundary() {
        let value = "é".repeat(100);
        let text = shown(&value);
        assert!(
            text.ends_with('…') && text.contains(&"é".repeat(64)),
            "{text}"
        );
        assert!(!text.contains(&"é".repeat(65)), "{text}");
        assert_eq!(shown("-5"), "\"-5\"");
    }
}
