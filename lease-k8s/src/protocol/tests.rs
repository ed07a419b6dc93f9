//! The acquire protocol's decisions, one behaviour per test.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use k8s_openapi::api::coordination::v1::Lease;
use leasehold_core::{AcquireError, IdFormat, PoolName, PoolSpec};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::*;
use crate::api::Resp;
use crate::cache::Observed;
use crate::lease::{Slot, check_ours, parse_list, parse_rv, slot_state};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";
const TTL: Duration = Duration::from_secs(10);
const MARGIN: Duration = Duration::from_secs(2);

fn pool(size: u32) -> PoolSpec {
    PoolSpec::new(PoolName::new("ids").unwrap(), size, TTL).unwrap()
}

/// A Lease of slot `slot` of pool `ids` as the API server answers it.
fn lease_json(slot: u32, rv: &str, holder: &str, secs: i32) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": format!("leasehold-ids-{slot}"),
            "resourceVersion": rv,
            "labels": {"leasehold/pool": "ids", "leasehold/slot": slot.to_string()},
            "annotations": {"leasehold/floor": "500"},
        },
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": secs, "leaseTransitions": 3},
    })
}

fn lease(slot: u32, rv: &str, holder: &str, secs: i32) -> Lease {
    serde_json::from_value(lease_json(slot, rv, holder, secs)).unwrap()
}

fn held(rv: &str, secs: u64) -> Slot {
    Slot::Held {
        rv: rv.to_owned(),
        holder: format!("app_{TOKEN}"),
        duration: Duration::from_secs(secs),
        floor: 500,
        transitions: 3,
    }
}

/// The takeover times of a process that saw each slot's Lease at `rv` at
/// `seen`.
fn sighting(seen: Instant, rv: &'static str) -> impl FnMut(u32, &str, Duration) -> Option<Instant> {
    move |_, at_rv, duration| {
        let seen = Observed {
            rv: rv.to_owned(),
            at: seen,
        };
        takeover_at(Some(&seen), at_rv, duration, TTL, MARGIN)
    }
}

fn slots(list: &[(u32, Slot)]) -> HashMap<u32, Slot> {
    list.iter().cloned().collect()
}

#[test]
fn an_absent_slot_is_created_with_the_ceiling_as_its_floor() {
    let now = Instant::now();
    let choice = choose(&HashMap::new(), 0..2, now, |_, _, _| None);
    assert_eq!(
        choice.candidates,
        vec![(0, Slot::Absent), (1, Slot::Absent)]
    );
    let w = acquiring_write(&pool(2), 1, &Slot::Absent, "app_x", 10, 900, "T");
    assert_eq!(w.verb, "create");
    assert_eq!((w.prev_floor, w.stored_floor), (0, 900));
    assert_eq!(w.body["metadata"]["name"], "leasehold-ids-1");
    assert_eq!(w.body["metadata"]["labels"]["leasehold/pool"], "ids");
    assert_eq!(w.body["metadata"]["labels"]["leasehold/slot"], "1");
    assert_eq!(w.body["metadata"]["annotations"]["leasehold/floor"], "900");
    assert_eq!(w.body["spec"]["holderIdentity"], "app_x");
    assert_eq!(w.body["spec"]["leaseDurationSeconds"], 10);
    assert_eq!(w.body["spec"]["leaseTransitions"], 0);
    assert_eq!(w.body["spec"]["acquireTime"], "T");
    assert_eq!(w.body["spec"]["renewTime"], "T");
}

#[test]
fn a_released_slot_is_taken_at_once_on_its_resource_version() {
    let free = Slot::Free {
        rv: "41".to_owned(),
        floor: 700,
        transitions: 3,
    };
    let now = Instant::now();
    let choice = choose(&slots(&[(0, free.clone())]), 0..1, now, |_, _, _| None);
    assert_eq!(choice.candidates, vec![(0, free.clone())]);
    assert_eq!(
        slot_state(&lease(0, "41", "", 1)).unwrap(),
        Slot::Free {
            rv: "41".to_owned(),
            floor: 500,
            transitions: 3,
        }
    );
    let w = acquiring_write(&pool(1), 0, &free, "app_x", 10, 600, "T");
    assert_eq!(w.verb, "patch");
    assert_eq!(w.body["metadata"]["resourceVersion"], "41");
    assert_eq!(w.body["spec"]["leaseTransitions"], 4);
    // The floor never goes down: the higher of the stored one and ours.
    assert_eq!((w.prev_floor, w.stored_floor), (700, 700));
    assert_eq!(w.body["metadata"]["annotations"]["leasehold/floor"], "700");
    let w = acquiring_write(&pool(1), 0, &free, "app_x", 10, 800, "T");
    assert_eq!((w.prev_floor, w.stored_floor), (700, 800));
}

#[test]
fn a_held_unexpired_lease_is_not_taken() {
    let seen = Instant::now();
    let list = slots(&[(0, held("41", 10))]);
    let choice = choose(&list, 0..1, seen + TTL, sighting(seen, "41"));
    assert!(choice.candidates.is_empty());
    // Its duration or ours, whichever is longer, plus the margin and 2%.
    let expected = seen + TTL + MARGIN + TTL / 50;
    assert_eq!(choice.earliest, Some(expected));
    let longer = slots(&[(0, held("41", 30))]);
    let choice = choose(&longer, 0..1, seen, sighting(seen, "41"));
    let wait = Duration::from_secs(30);
    assert_eq!(choice.earliest, Some(seen + wait + MARGIN + wait / 50));
}

#[test]
fn an_expired_lease_is_taken_over_on_the_resource_version_seen() {
    let seen = Instant::now();
    let list = slots(&[(0, held("41", 10))]);
    let at = seen + TTL + MARGIN + TTL / 50;
    let choice = choose(&list, 0..1, at, sighting(seen, "41"));
    assert_eq!(choice.candidates, vec![(0, held("41", 10))]);
    assert_eq!(choice.earliest, None);
    // The takeover is conditioned on that resourceVersion (a renewal since
    // moves it on: 409, next candidate); the new fence is the
    // resourceVersion the API server answers to this write.
    let w = acquiring_write(&pool(1), 0, &held("41", 10), "app_y", 10, 600, "T");
    assert_eq!(w.verb, "patch");
    assert_eq!(w.body["metadata"]["resourceVersion"], "41");
    assert_eq!(w.body["spec"]["holderIdentity"], "app_y");
    assert_eq!(w.body["spec"]["leaseTransitions"], 4);
    assert_eq!((w.prev_floor, w.stored_floor), (500, 600));
}

#[test]
fn a_lease_not_seen_at_its_resource_version_is_not_taken() {
    let seen = Instant::now();
    let list = slots(&[(0, held("42", 10))]);
    // Seen at 41; the LIST says 42: the clock starts again, so no takeover
    // time is known, however late it is.
    let choice = choose(&list, 0..1, seen + TTL * 100, sighting(seen, "41"));
    assert!(choice.candidates.is_empty());
    assert_eq!(choice.earliest, None);
    assert_eq!(takeover_at(None, "42", TTL, TTL, MARGIN), None);
}

#[test]
fn a_revoked_tombstone_is_respected_until_it_expires() {
    let tombstone = lease(0, "41", &format!("revoked/app_{TOKEN}"), 10);
    let state = slot_state(&tombstone).unwrap();
    assert!(matches!(&state, Slot::Held { holder, .. } if holder.starts_with("revoked/")));
    let list = slots(&[(0, state.clone())]);
    let seen = Instant::now();
    let before = choose(&list, 0..1, seen + TTL, sighting(seen, "41"));
    assert!(before.candidates.is_empty());
    assert!(before.earliest.is_some());
    let after = choose(&list, 0..1, before.earliest.unwrap(), sighting(seen, "41"));
    assert_eq!(after.candidates, vec![(0, state)]);
}

#[test]
fn the_format_record_is_never_a_slot() {
    let mut record = json!({
        "metadata": {
            "name": "leasehold-ids-format",
            "resourceVersion": "7",
            "labels": {"leasehold/pool": "ids"},
            "annotations": {"leasehold/id-format": "ids/v1"},
        },
        "spec": {},
    });
    let listed = parse_list(&pool(4), "default", &json!({"items": [record.clone()]})).unwrap();
    assert_eq!(listed.format.as_deref(), Some("ids/v1"));
    assert!(listed.slots.is_empty() && listed.raw.is_empty());
    // Not even with a slot label copied onto it.
    record["metadata"]["labels"]["leasehold/slot"] = json!("0");
    let listed = parse_list(&pool(4), "default", &json!({"items": [record]})).unwrap();
    assert!(listed.slots.is_empty());
    // So slot 0 is absent, and a claim creates it.
    let choice = choose(&listed.slots, 0..1, Instant::now(), |_, _, _| None);
    assert_eq!(choice.candidates, vec![(0, Slot::Absent)]);
}

#[test]
fn a_listed_lease_is_a_slot_only_under_its_own_name() {
    let mut copied = lease_json(1, "9", "", 1);
    copied["metadata"]["name"] = json!("something-else");
    let items = json!({"items": [lease_json(0, "8", &format!("app_{TOKEN}"), 10), copied]});
    let listed = parse_list(&pool(4), "default", &items).unwrap();
    assert_eq!(listed.format, None);
    assert_eq!(listed.slots.len(), 1);
    assert_eq!(listed.slots[&0], held("8", 10));
    assert_eq!(listed.raw.len(), 1);
}

#[test]
fn slots_outside_the_pool_are_left_out_once_their_resource_version_is_read() {
    let items = json!({"items": [lease_json(5, "8", "", 1)]});
    let listed = parse_list(&pool(4), "default", &items).unwrap();
    assert!(listed.slots.is_empty());
    let bad = json!({"items": [lease_json(5, "opaque", "", 1)]});
    let e = parse_list(&pool(4), "default", &bad).unwrap_err();
    assert!(matches!(e, AcquireError::UnsupportedServer { .. }), "{e}");
}

#[test]
fn a_resource_version_that_is_not_an_integer_is_final() {
    assert_eq!(parse_rv("123").unwrap(), 123);
    let items = json!({"items": [lease_json(0, "abc", "", 1)]});
    let e = parse_list(&pool(4), "default", &items).unwrap_err();
    assert!(!e.is_retryable());
    assert!(e.to_string().contains("\"abc\""), "{e}");
}

#[test]
fn the_id_format_record_refuses_another_format() {
    let ours = IdFormat::new(1, "ids/v1").unwrap();
    let p = pool(4).with_id_format(ours.clone());
    assert!(check_recorded_format(&p, &ours, "ids/v1".to_owned()).is_ok());
    let e = check_recorded_format(&p, &ours, "ids/v2".to_owned()).unwrap_err();
    assert!(
        matches!(&e, AcquireError::OtherIdFormat { recorded, ours, .. }
            if recorded == "ids/v2" && ours == "ids/v1"),
        "{e}"
    );
    assert!(!e.is_retryable());
    // The record is a Lease nobody ever holds, labelled with the pool only.
    let record = format_record(&p, &ours);
    assert_eq!(record["metadata"]["name"], "leasehold-ids-format");
    assert_eq!(
        record["metadata"]["labels"],
        json!({"leasehold/pool": "ids"})
    );
    assert_eq!(
        record["metadata"]["annotations"]["leasehold/id-format"],
        "ids/v1"
    );
    assert_eq!(record["spec"], json!({}));
}

#[test]
fn the_answer_to_a_write_decides_the_next_step() {
    assert_eq!(judge("create", 201), Answer::Won);
    assert_eq!(judge("patch", 200), Answer::Won);
    assert_eq!(judge("create", 409), Answer::Next { suspect: true });
    assert_eq!(judge("patch", 409), Answer::Next { suspect: false });
    assert_eq!(judge("patch", 404), Answer::Next { suspect: false });
    assert_eq!(judge("create", 404), Answer::Refused);
    assert_eq!(judge("create", 504), Answer::Ambiguous);
    assert_eq!(judge("patch", 500), Answer::Ambiguous);
    assert_eq!(judge("patch", 403), Answer::Refused);
    assert_eq!(judge("patch", 422), Answer::Refused);
}

fn resp(status: u16) -> Resp {
    Resp {
        status,
        body: Bytes::from_static(br#"{"message":"nope"}"#),
        retry_after: None,
    }
}

#[test]
fn refusals_say_what_to_do() {
    let p = pool(4);
    let e = write_error(&resp(403), "create", "apps", &p);
    assert!(!e.is_retryable());
    assert!(e.to_string().contains("may not `create`"), "{e}");
    let e = write_error(&resp(404), "create", "apps", &p);
    assert!(
        e.to_string().contains("namespace \"apps\" does not exist"),
        "{e}"
    );
    assert!(write_error(&resp(429), "patch", "apps", &p).is_retryable());
    assert!(write_error(&resp(503), "list", "apps", &p).is_retryable());
    assert!(!write_error(&resp(422), "patch", "apps", &p).is_retryable());
}

#[test]
fn a_pinned_slot_is_the_only_one_tried() {
    assert_eq!(slot_range(8, Some(3)), 3..4);
    assert_eq!(slot_range(8, None), 0..8);
    let list = slots(&[(3, held("41", 10))]);
    let seen = Instant::now();
    let choice = choose(&list, slot_range(8, Some(3)), seen, sighting(seen, "41"));
    assert!(choice.candidates.is_empty());
    let wait = choice.earliest.map(|e| e.saturating_duration_since(seen));
    let e = nothing_takeable(&pool(8), Some(3), &list, wait);
    assert!(matches!(e, AcquireError::Contention(_)), "{e}");
    let text = e.to_string();
    assert!(text.contains(&format!("held by app_{TOKEN}")), "{text}");
    assert!(text.contains("taken over in 12.2s"), "{text}");
    let e = nothing_takeable(&pool(8), None, &list, wait);
    assert!(
        matches!(e, AcquireError::PoolExhausted { size: 8, .. }),
        "{e}"
    );
}

#[test]
fn a_request_is_checked_before_anything_is_sent() {
    assert_eq!(check_request(&pool(4), None).unwrap(), 10);
    assert_eq!(check_request(&pool(4), Some(3)).unwrap(), 10);
    let e = check_request(&pool(4), Some(4)).unwrap_err();
    assert!(e.to_string().contains("outside pool ids of size 4"), "{e}");
    let e = check_request(&pool(MAX_POOL_SIZE + 1), None).unwrap_err();
    assert!(!e.is_retryable());
    let bad = PoolSpec::new(PoolName::new("My_Ids").unwrap(), 4, TTL).unwrap();
    assert!(matches!(
        check_request(&bad, None),
        Err(AcquireError::BadIdentifier { .. })
    ));
    assert_eq!(ttl_secs(Duration::from_millis(1200)).unwrap(), 2);
    assert_eq!(ttl_secs(Duration::from_secs(1)).unwrap(), 1);
    assert!(ttl_secs(Duration::from_millis(900)).is_err());
}

#[test]
fn a_foreign_lease_with_our_name_is_a_final_error() {
    let ours = lease(2, "5", "", 1);
    assert!(check_ours(&ours, &pool(4), 2, "apps").is_ok());
    let mut foreign = lease_json(2, "5", "", 1);
    foreign["metadata"]["labels"] = json!({});
    let foreign: Lease = serde_json::from_value(foreign).unwrap();
    let e = check_ours(&foreign, &pool(4), 2, "apps").unwrap_err();
    assert!(matches!(e, AcquireError::BadIdentifier { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("kubectl delete lease -n apps leasehold-ids-2"),
        "{e}"
    );
}

#[test]
fn a_revoke_writes_a_tombstone_with_the_holders_fence() {
    assert!(revoke_patch(&lease(0, "41", "", 1)).is_none());
    let tombstone = format!("revoked/app_{TOKEN}");
    assert!(revoke_patch(&lease(0, "41", &tombstone, 10)).is_none());
    // Not renewed yet: the fence is the acquiring write's resourceVersion.
    let patch = revoke_patch(&lease(0, "41", &format!("app_{TOKEN}"), 10)).unwrap();
    assert_eq!(patch["metadata"]["resourceVersion"], "41");
    assert_eq!(patch["spec"]["holderIdentity"], tombstone.as_str());
    assert_eq!(
        patch["metadata"]["annotations"]["leasehold/fence"],
        "01234567 41"
    );
    // Renewed: the fence it recorded.
    let mut renewed = lease_json(0, "45", &format!("app_{TOKEN}"), 10);
    renewed["metadata"]["annotations"]["leasehold/fence"] = json!("01234567 41");
    let patch = revoke_patch(&serde_json::from_value(renewed).unwrap()).unwrap();
    assert_eq!(patch["metadata"]["resourceVersion"], "45");
    assert_eq!(
        patch["metadata"]["annotations"]["leasehold/fence"],
        "01234567 41"
    );
    // A holder not written by leasehold: no fence to record.
    let patch = revoke_patch(&lease(0, "41", "someone", 10)).unwrap();
    assert_eq!(patch["metadata"].get("annotations"), None);
}

/// An unreadable floor annotation is refused, naming the slot, never read
/// as 0 (the next holder would issue what earlier ones stamped); an absent
/// one is a Lease never claimed with a floor: 0, as in every store.
#[test]
fn an_unreadable_floor_annotation_refuses_the_pool() {
    for bad in ["-5", "abc", "1.5", "+5", "", "18446744073709551616", " 5"] {
        let mut item = lease_json(2, "8", "", 1);
        item["metadata"]["annotations"]["leasehold/floor"] = json!(bad);
        let e = parse_list(&pool(4), "ns1", &json!({"items": [item]})).unwrap_err();
        assert!(
            matches!(e, AcquireError::DamagedRecord { slot: Some(2), .. }),
            "{bad:?}: {e:?}"
        );
        assert!(!e.is_retryable());
        let text = e.to_string();
        for needle in [
            "slot 2",
            "leasehold-ids-2",
            "ns1",
            &format!("{bad:?}"),
            "kubectl annotate lease -n ns1 leasehold-ids-2 leasehold/floor=",
        ] {
            assert!(text.contains(needle), "{bad:?}: {needle} missing: {text}");
        }
    }
    let mut item = lease_json(2, "8", "", 1);
    item["metadata"]["annotations"] = json!({});
    let listed = parse_list(&pool(4), "ns1", &json!({"items": [item]})).unwrap();
    assert!(matches!(listed.slots[&2], Slot::Free { floor: 0, .. }));
    let mut item = lease_json(2, "8", "", 1);
    item["metadata"]["annotations"]["leasehold/floor"] = json!("18446744073709551615");
    let listed = parse_list(&pool(4), "ns1", &json!({"items": [item]})).unwrap();
    assert!(matches!(
        listed.slots[&2],
        Slot::Free {
            floor: u64::MAX,
            ..
        }
    ));
}

/// A Lease at the largest resourceVersion a fence can be could not be
/// followed by a bigger fence: refused, naming the slot.
#[test]
fn a_resource_version_at_the_largest_fence_refuses_the_pool() {
    let items = json!({"items": [lease_json(1, "18446744073709551615", "", 1)]});
    let e = parse_list(&pool(4), "default", &items).unwrap_err();
    assert!(
        matches!(e, AcquireError::DamagedRecord { slot: Some(1), .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("18446744073709551615"), "{e}");
    let items = json!({"items": [lease_json(1, "18446744073709551614", "", 1)]});
    assert!(parse_list(&pool(4), "default", &items).is_ok());
}

/// A format record without a format is refused, never read as the empty
/// format.
#[test]
fn a_format_record_without_a_format_refuses_the_pool() {
    let record = json!({
        "metadata": {
            "name": "leasehold-ids-format",
            "resourceVersion": "7",
            "labels": {"leasehold/pool": "ids"},
        },
        "spec": {},
    });
    let e = parse_list(&pool(4), "default", &json!({"items": [record]})).unwrap_err();
    assert!(
        matches!(e, AcquireError::DamagedRecord { slot: None, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("leasehold/id-format"), "{e}");
}
