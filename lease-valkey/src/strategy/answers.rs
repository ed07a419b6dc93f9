//! Reading what the server and the scripts answer: claims, renewals, the
//! inspect script's slots, holder records and `CONFIG GET` values.

use std::time::Duration;

use fred::types::Value;
use leasehold_core::{Fence, Floor, SlotInfo};

/// The TTL in whole milliseconds, as sent to the server (`PX`), and the
/// TTL that applies: the requested one floored to the millisecond (the
/// server keeps expiries in milliseconds).
pub(super) fn ttl_ms(ttl: Duration) -> Option<(String, Duration)> {
    let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    (ms >= 1).then(|| (ms.to_string(), Duration::from_millis(ms)))
}

/// A `u64` from an integer or a decimal string reply.
pub(super) fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::String(s) => s.parse().ok(),
        Value::Bytes(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::Integer(n) => u64::try_from(*n).ok(),
        _ => None,
    }
}

/// The server's `TIME` (seconds, microseconds) as a time since the Unix
/// epoch.
pub(super) fn store_time(secs: &Value, micros: &Value) -> Option<Duration> {
    let micros = as_u64(micros).filter(|m| *m < 1_000_000)?;
    Some(Duration::from_secs(as_u64(secs)?) + Duration::from_micros(micros))
}

/// A restart span in whole milliseconds, rounded up (the guard may wait a
/// little longer, never shorter).
pub(super) fn span_ms(span: Duration) -> u64 {
    u64::try_from(span.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// What a claim script answered.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Claim {
    Granted {
        slot: u32,
        fence: u64,
        floor: Floor,
        at: Duration,
        /// The claimer's span is above the span known to be on disk, or
        /// the claim recorded the pool's ID format: the grant is used only
        /// once its writes are on disk.
        unconfirmed: bool,
    },
    Full,
    FencesLost,
    /// The restart or the promotion guard holds for this many ms.
    Restarted(u64),
    /// The wipe guard holds for this many ms: the pool's records were found
    /// gone (`scripts::wipe_functions`).
    Wiped(u64),
    /// This slot's fence is not a number the script can raise exactly.
    FenceUnusable {
        slot: u32,
        fence: String,
    },
    /// The pool recorded this ID format, not the one the claim declared.
    OtherIdFormat(String),
    /// A record the claim relies on holds `value`, which it cannot trust:
    /// the floor of `slot` (`field` `floor.<slot>`), or with no slot a
    /// record of the pool (`span`, `replid_seen`).
    Damaged {
        slot: Option<u32>,
        field: String,
        value: String,
    },
}

/// A claim script's answer: `{slot, fence, floor, secs, micros,
/// unconfirmed}` (the floor as a decimal string, exact for every `u64`; the
/// server's `TIME`; 1 when the claimer's span is above the span known to be
/// on disk or the claim recorded the pool's ID format), -1 when the pool is
/// full, -2 when its fences hash was lost, `{-3, ms, why}` while the wipe,
/// restart or promotion guard holds (`why` `wiped` for the first), `{-4, slot, fence}` for a slot whose fence is unusable, `{-5,
/// recorded}` when the pool recorded another ID format, `{-6, slot, field,
/// value}` for a damaged record (`slot` -1: the pool's).
pub(super) fn parse_claim(v: &Value) -> Option<Claim> {
    match v {
        Value::Integer(-1) => Some(Claim::Full),
        Value::Integer(-2) => Some(Claim::FencesLost),
        Value::Array(items) if (2..=3).contains(&items.len()) && items[0].as_i64() == Some(-3) => {
            let ms = u64::try_from(items[1].as_i64()?).ok()?;
            match items.get(2).and_then(Value::as_string).as_deref() {
                Some("wiped") => Some(Claim::Wiped(ms)),
                _ => Some(Claim::Restarted(ms)),
            }
        }
        Value::Array(items) if items.len() == 3 && items[0].as_i64() == Some(-4) => {
            Some(Claim::FenceUnusable {
                slot: u32::try_from(items[1].as_i64()?).ok()?,
                fence: items[2].as_string()?,
            })
        }
        Value::Array(items) if items.len() == 4 && items[0].as_i64() == Some(-6) => {
            Some(Claim::Damaged {
                slot: match items[1].as_i64()? {
                    -1 => None,
                    s => Some(u32::try_from(s).ok()?),
                },
                field: items[2].as_string()?,
                value: items[3].as_string()?,
            })
        }
        Value::Array(items) if items.len() == 2 && items[0].as_i64() == Some(-5) => {
            Some(Claim::OtherIdFormat(items[1].as_string()?))
        }
        Value::Array(items) if items.len() == 6 => Some(Claim::Granted {
            slot: u32::try_from(items[0].as_i64()?).ok()?,
            fence: u64::try_from(items[1].as_i64()?).ok()?,
            floor: Floor(as_u64(&items[2])?),
            at: store_time(&items[3], &items[4])?,
            unconfirmed: items[5].as_i64()? == 1,
        }),
        _ => None,
    }
}

/// What a renewal script answered.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Renewed {
    /// Renewed, at the server's `TIME`.
    At(Duration),
    /// The token no longer holds the slot.
    NotHeld,
    /// The token holds the slot but its floor is damaged (this value):
    /// nothing was written.
    DamagedFloor(String),
}

/// A renewal script's answer: `{1, secs, micros}` when renewed (the server's
/// `TIME`), 0 when not held, `{-6, floor}` over a damaged floor.
pub(super) fn parse_renewal(v: &Value) -> Option<Renewed> {
    match v {
        Value::Integer(0) => Some(Renewed::NotHeld),
        Value::Array(items) if items.len() == 3 && items[0].as_i64() == Some(1) => {
            Some(Renewed::At(store_time(&items[1], &items[2])?))
        }
        Value::Array(items) if items.len() == 2 && items[0].as_i64() == Some(-6) => {
            Some(Renewed::DamagedFloor(items[1].as_string()?))
        }
        _ => None,
    }
}

/// Why the inspect script's answer cannot be shown.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Unreadable {
    /// Not the shape the script answers.
    Shape,
    /// This slot's fence or floor is not a whole number from 0: what is
    /// stored (`field` of the fences hash, `value`).
    Damaged {
        slot: u32,
        field: String,
        value: String,
    },
}

/// The inspect script's answer (see `scripts::INSPECT`) as slots.
pub(super) fn parse_inspect(v: &Value) -> Result<Vec<SlotInfo>, Unreadable> {
    let Value::Array(items) = v else {
        return Err(Unreadable::Shape);
    };
    let (Some(secs), Some(micros)) = (items.first(), items.get(1)) else {
        return Err(Unreadable::Shape);
    };
    let now = store_time(secs, micros).ok_or(Unreadable::Shape)?;
    items
        .get(2..)
        .unwrap_or_default()
        .iter()
        .map(|e| slot_info(e, now))
        .collect()
}

/// One entry of the inspect script, `{slot, fence, floor, token, pttl,
/// holder}`, at the server's time `now`.
fn slot_info(entry: &Value, now: Duration) -> Result<SlotInfo, Unreadable> {
    let Value::Array(f) = entry else {
        return Err(Unreadable::Shape);
    };
    let [slot, fence, floor, token, pttl, record] = f.as_slice() else {
        return Err(Unreadable::Shape);
    };
    let slot = slot
        .as_i64()
        .and_then(|s| u32::try_from(s).ok())
        .ok_or(Unreadable::Shape)?;
    let number = |v: &Value, field: String| {
        as_u64(v).ok_or_else(|| Unreadable::Damaged {
            slot,
            field,
            value: v.as_string().unwrap_or_default(),
        })
    };
    let info = SlotInfo::free(
        slot,
        Fence(number(fence, slot.to_string())?),
        Floor(number(floor, format!("floor.{slot}"))?),
    );
    let token = token.as_string().unwrap_or_default();
    let left = pttl
        .as_i64()
        .and_then(|ms| u64::try_from(ms).ok())
        .map(Duration::from_millis);
    Ok(match (token.as_str(), left) {
        ("", _) | (_, None) => info,
        ("revoked", Some(left)) => info.revoked_until(left),
        (prefix, Some(left)) => {
            let record = HolderRecord::parse(&record.as_string().unwrap_or_default());
            match record.filter(|r| r.token_prefix == prefix) {
                Some(r) => {
                    let held_for = now.checked_sub(r.claimed_at);
                    let renewed_ago = r
                        .ttl
                        .checked_sub(left)
                        .map(|d| held_for.map_or(d, |h| d.min(h)));
                    info.held_by_prefix(r.holder, prefix, left)
                        .with_ages(renewed_ago, held_for)
                }
                // Claimed by a process that writes no record, or the record
                // of an earlier holder: the holder is not known.
                None => info.held_by_prefix("", prefix, left),
            }
        }
    })
}

/// A slot's holder record, `holder.<slot>` in the fences hash: `<token
/// prefix> <secs> <micros> <ttl ms> <holder>` (see `scripts::holder_function`).
struct HolderRecord {
    token_prefix: String,
    claimed_at: Duration,
    ttl: Duration,
    holder: String,
}

impl HolderRecord {
    fn parse(s: &str) -> Option<Self> {
        let mut parts = s.splitn(5, ' ');
        let token_prefix = parts.next()?.to_owned();
        let secs: u64 = parts.next()?.parse().ok()?;
        let micros: u64 = parts.next()?.parse().ok().filter(|m| *m < 1_000_000)?;
        let ttl: u64 = parts.next()?.parse().ok()?;
        Some(Self {
            token_prefix,
            claimed_at: Duration::from_secs(secs) + Duration::from_micros(micros),
            ttl: Duration::from_millis(ttl),
            holder: parts.next().unwrap_or_default().to_owned(),
        })
    }
}

/// One `CONFIG GET name` answer's value: `[name, value]` (RESP2) or
/// `{name: value}` (RESP3); `None` when the server does not know the name.
pub(super) fn config_value(v: &Value) -> Option<String> {
    let value = match v {
        Value::Array(items) => items.get(1)?,
        Value::Map(map) => map.values().next()?,
        _ => return None,
    };
    value.as_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applied_ttl_is_floored_to_the_millisecond() {
        let (px, applied) = ttl_ms(Duration::from_micros(1_500_999)).expect("above 1 ms");
        assert_eq!(px, "1500");
        assert_eq!(applied, Duration::from_millis(1500));
        assert!(ttl_ms(Duration::from_micros(999)).is_none());
    }

    #[test]
    fn answers_carry_the_server_time() {
        let s = |v: &str| Value::from(v);
        let claim = Value::Array(vec![
            Value::Integer(3),
            Value::Integer(7),
            s("18446744073709551615"),
            s("1700000000"),
            s("250000"),
            Value::Integer(1),
        ]);
        assert_eq!(
            parse_claim(&claim),
            Some(Claim::Granted {
                slot: 3,
                fence: 7,
                floor: Floor(u64::MAX),
                at: Duration::from_millis(1_700_000_000_250),
                unconfirmed: true,
            })
        );
        let other = Value::Array(vec![Value::Integer(-5), s("ids/v1: 64 bits")]);
        assert_eq!(
            parse_claim(&other),
            Some(Claim::OtherIdFormat("ids/v1: 64 bits".into()))
        );
        let unusable = Value::Array(vec![Value::Integer(-4), Value::Integer(2), s("-1")]);
        assert_eq!(
            parse_claim(&unusable),
            Some(Claim::FenceUnusable {
                slot: 2,
                fence: "-1".into()
            })
        );
        let floor = Value::Array(vec![
            Value::Integer(-6),
            Value::Integer(3),
            s("floor.3"),
            s("-5"),
        ]);
        assert_eq!(
            parse_claim(&floor),
            Some(Claim::Damaged {
                slot: Some(3),
                field: "floor.3".into(),
                value: "-5".into()
            })
        );
        let span = Value::Array(vec![
            Value::Integer(-6),
            Value::Integer(-1),
            s("span"),
            s("x"),
        ]);
        assert_eq!(
            parse_claim(&span),
            Some(Claim::Damaged {
                slot: None,
                field: "span".into(),
                value: "x".into()
            })
        );
        assert_eq!(span_ms(Duration::from_micros(62_000_001)), 62_001);
        assert_eq!(parse_claim(&Value::Integer(-1)), Some(Claim::Full));
        assert_eq!(parse_claim(&Value::Integer(-2)), Some(Claim::FencesLost));
        let held = |why: &str| Value::Array(vec![Value::Integer(-3), Value::Integer(4000), s(why)]);
        assert_eq!(parse_claim(&held("wiped")), Some(Claim::Wiped(4000)));
        assert_eq!(parse_claim(&held("restart")), Some(Claim::Restarted(4000)));
        assert_eq!(
            parse_claim(&held("promotion")),
            Some(Claim::Restarted(4000))
        );
        let unnamed = Value::Array(vec![Value::Integer(-3), Value::Integer(7)]);
        assert_eq!(parse_claim(&unnamed), Some(Claim::Restarted(7)));
        let renewed = Value::Array(vec![Value::Integer(1), s("1700000001"), s("5")]);
        assert_eq!(
            parse_renewal(&renewed),
            Some(Renewed::At(Duration::new(1_700_000_001, 5_000)))
        );
        assert_eq!(parse_renewal(&Value::Integer(0)), Some(Renewed::NotHeld));
        let damaged = Value::Array(vec![Value::Integer(-6), s("abc")]);
        assert_eq!(
            parse_renewal(&damaged),
            Some(Renewed::DamagedFloor("abc".into()))
        );
        // An old script's bare 1 (or microseconds out of range) is not a
        // renewal this version understands.
        assert_eq!(parse_renewal(&Value::Integer(1)), None);
        let bad = Value::Array(vec![Value::Integer(1), s("1"), s("1000000")]);
        assert_eq!(parse_renewal(&bad), None);
    }

    #[test]
    fn inspect_names_a_holder_only_while_its_record_matches_the_live_token() {
        let s = |v: &str| Value::from(v);
        let entry = |slot: i64, token: &str, pttl: i64, record: &str| {
            Value::Array(vec![
                Value::Integer(slot),
                s("4"),
                s("9000"),
                s(token),
                Value::Integer(pttl),
                s(record),
            ])
        };
        let answer = Value::Array(vec![
            s("1700000010"),
            s("0"),
            entry(
                0,
                "abcdef01",
                25_000,
                "abcdef01 1700000000 500000 30000 host/1 a b",
            ),
            entry(1, "12345678", 30_000, "abcdef01 1700000000 0 30000 earlier"),
            entry(2, "revoked", 7_000, "99999999 1700000000 0 30000 gone"),
            entry(3, "", -2, "abcdef01 1700000000 0 30000 released"),
        ]);
        let slots = parse_inspect(&answer).expect("parses");
        assert_eq!(slots.len(), 4);
        let held = &slots[0];
        assert_eq!(held.holder.as_deref(), Some("host/1 a b"));
        assert_eq!(held.token_prefix.as_deref(), Some("abcdef01"));
        assert_eq!((held.fence, held.floor), (Fence(4), Floor(9000)));
        assert_eq!(held.expires_in, Some(Duration::from_secs(25)));
        assert_eq!(held.renewed_ago, Some(Duration::from_secs(5)));
        assert_eq!(held.held_for, Some(Duration::from_millis(9_500)));
        // Another holder's record: held, by nobody known.
        assert_eq!(slots[1].holder.as_deref(), Some(""));
        assert_eq!(slots[1].token_prefix.as_deref(), Some("12345678"));
        assert!(slots[2].holder.is_none() && slots[2].token_prefix.is_none());
        assert_eq!(slots[2].expires_in, Some(Duration::from_secs(7)));
        assert!(slots[3].holder.is_none() && slots[3].expires_in.is_none());
    }

    /// A stored floor or fence that is not a whole number from 0 is named,
    /// never shown as 0.
    #[test]
    fn inspect_names_a_damaged_floor_or_fence() {
        let s = |v: &str| Value::from(v);
        let answer = |fence: &str, floor: &str| {
            Value::Array(vec![
                s("1700000010"),
                s("0"),
                Value::Array(vec![
                    Value::Integer(2),
                    s(fence),
                    s(floor),
                    s(""),
                    Value::Integer(-2),
                    s(""),
                ]),
            ])
        };
        assert_eq!(
            parse_inspect(&answer("4", "-5")),
            Err(Unreadable::Damaged {
                slot: 2,
                field: "floor.2".into(),
                value: "-5".into()
            })
        );
        assert_eq!(
            parse_inspect(&answer("x", "9000")),
            Err(Unreadable::Damaged {
                slot: 2,
                field: "2".into(),
                value: "x".into()
            })
        );
        assert!(parse_inspect(&answer("4", "9000")).is_ok());
    }
}
