//! The fake API server's semantics, one test each, over plain HTTP/1.1.
//!
//! Each test says where its behaviour comes from:
//! - **seen**: observed on a running kube-apiserver (recorded in K8S.md, from
//!   a prototype that drove a real kube client through it);
//! - **source**: only read in the apiserver's code (`k8s.io/apiserver`
//!   registry and handlers, `apimachinery` validation), not run against a
//!   real server. If a real server disagrees, the fake is wrong.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use leasehold_k8s_fake::{FakeApiServer, Fault, Verb};
use serde_json::{Value, json};

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases";

struct Answer {
    status: u16,
    headers: String,
    body: Value,
}

/// One request on its own connection; `None` when the connection closed
/// without an answer.
fn send(
    fake: &FakeApiServer,
    method: &str,
    path: &str,
    ctype: &str,
    body: &Value,
) -> Option<Answer> {
    let mut s = TcpStream::connect(fake.addr()).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let body = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: fake\r\nconnection: close\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("write");
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some(Answer {
        status,
        headers: head.to_lowercase(),
        body: serde_json::from_str(body).unwrap_or(Value::Null),
    })
}

fn post(fake: &FakeApiServer, lease: &Value) -> Answer {
    send(fake, "POST", LEASES, "application/json", lease).expect("answer")
}

fn patch(fake: &FakeApiServer, name: &str, ctype: &str, body: &Value) -> Answer {
    send(fake, "PATCH", &format!("{LEASES}/{name}"), ctype, body).expect("answer")
}

fn lease(name: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "labels": {"leasehold/pool": "p"}},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 5,
                 "renewTime": "2025-01-01T00:00:00.000000Z"},
    })
}

fn rv(a: &Answer) -> u64 {
    a.body["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .expect("integer resourceVersion")
}

const JSON_PATCH: &str = "application/json-patch+json";
const MERGE_PATCH: &str = "application/merge-patch+json";

/// seen: one counter for every write, increasing across objects.
#[test]
fn resource_versions_come_from_one_counter() {
    let fake = FakeApiServer::start().unwrap();
    let a = rv(&post(&fake, &lease("a")));
    let b = rv(&post(&fake, &lease("b")));
    let a2 = rv(&patch(
        &fake,
        "a",
        MERGE_PATCH,
        &json!({"spec": {"holderIdentity": "x"}}),
    ));
    assert!(a < b && b < a2, "{a} {b} {a2}");
}

/// seen: creating an existing name is 409 AlreadyExists.
#[test]
fn create_conflicts() {
    let fake = FakeApiServer::start().unwrap();
    assert_eq!(post(&fake, &lease("a")).status, 201);
    let again = post(&fake, &lease("a"));
    assert_eq!(again.status, 409);
    assert_eq!(again.body["reason"], "AlreadyExists");
}

/// seen: PATCH never creates: 404 on a missing object, both patch types.
#[test]
fn patch_on_a_missing_lease_is_404() {
    let fake = FakeApiServer::start().unwrap();
    for ctype in [JSON_PATCH, MERGE_PATCH] {
        let body = if ctype == JSON_PATCH {
            json!([])
        } else {
            json!({})
        };
        assert_eq!(patch(&fake, "nope", ctype, &body).status, 404);
    }
    assert!(fake.lease("default", "nope").is_none());
}

/// seen: a failed JSON-Patch `test` is 422 with a generic message that does
/// not say which op failed, and nothing is applied.
#[test]
fn failed_test_op_is_422_and_applies_nothing() {
    let fake = FakeApiServer::start().unwrap();
    let created = rv(&post(&fake, &lease("a")));
    let ans = patch(
        &fake,
        "a",
        JSON_PATCH,
        &json!([
            {"op": "test", "path": "/spec/holderIdentity", "value": "b"},
            {"op": "add", "path": "/spec/holderIdentity", "value": "c"},
        ]),
    );
    assert_eq!(ans.status, 422);
    assert!(
        !ans.body["message"]
            .as_str()
            .unwrap()
            .contains("holderIdentity")
    );
    let stored = fake.lease("default", "a").unwrap();
    assert_eq!(stored["spec"]["holderIdentity"], "a");
    assert_eq!(stored["metadata"]["resourceVersion"], created.to_string());
}

/// seen: a merge patch carrying metadata.resourceVersion is a condition:
/// 409 when it is not the current one, applied when it is.
#[test]
fn merge_patch_resource_version_is_a_condition() {
    let fake = FakeApiServer::start().unwrap();
    let created = rv(&post(&fake, &lease("a")));
    let stale = patch(
        &fake,
        "a",
        MERGE_PATCH,
        &json!({
        "metadata": {"resourceVersion": (created - 1).to_string()}, "spec": {"holderIdentity": "b"}}),
    );
    assert_eq!(stale.status, 409);
    let fresh = patch(
        &fake,
        "a",
        MERGE_PATCH,
        &json!({
        "metadata": {"resourceVersion": created.to_string()}, "spec": {"holderIdentity": "b"}}),
    );
    assert_eq!(fresh.status, 200);
    assert!(rv(&fresh) > created);
}

/// seen: a write that changes nothing answers 200 with the same
/// resourceVersion.
#[test]
fn no_op_write_keeps_the_resource_version() {
    let fake = FakeApiServer::start().unwrap();
    let created = rv(&post(&fake, &lease("a")));
    let same = patch(
        &fake,
        "a",
        MERGE_PATCH,
        &json!({"spec": {"holderIdentity": "a"}}),
    );
    assert_eq!(same.status, 200);
    assert_eq!(rv(&same), created);
}

/// source (registry/generic/registry/store.go Update: Leases allow create on
/// update; the body's uid is a precondition): PUT re-creates a deleted Lease,
/// unless the body carries the uid, then 409.
#[test]
fn put_recreates_a_deleted_lease_unless_the_uid_is_sent() {
    let fake = FakeApiServer::start().unwrap();
    let created = post(&fake, &lease("a"));
    let uid = created.body["metadata"]["uid"].as_str().unwrap().to_owned();
    assert!(fake.delete("default", "a"));
    let mut with_uid = lease("a");
    with_uid["metadata"]["uid"] = json!(uid);
    let ans = send(
        &fake,
        "PUT",
        &format!("{LEASES}/a"),
        "application/json",
        &with_uid,
    )
    .unwrap();
    assert_eq!(ans.status, 409);
    assert!(fake.lease("default", "a").is_none());
    let ans = send(
        &fake,
        "PUT",
        &format!("{LEASES}/a"),
        "application/json",
        &lease("a"),
    )
    .unwrap();
    assert_eq!(ans.status, 201);
    assert_ne!(ans.body["metadata"]["uid"], json!(uid));
}

/// seen: names must be DNS-1123 subdomains: 422 Invalid.
#[test]
fn bad_names_are_rejected() {
    let fake = FakeApiServer::start().unwrap();
    for name in ["Upper", "under_score", "a.-b", "-a"] {
        let ans = post(&fake, &lease(name));
        assert_eq!(ans.status, 422, "{name}");
        assert_eq!(ans.body["reason"], "Invalid");
    }
}

/// source (apimachinery metav1.MicroTime UnmarshalJSON parses RFC3339Micro):
/// a MicroTime without exactly six fractional digits fails decoding, 400;
/// (source, coordination validation) leaseDurationSeconds must be > 0, 422.
#[test]
fn bad_micro_time_and_duration_are_rejected() {
    let fake = FakeApiServer::start().unwrap();
    for bad in ["2025-01-01T00:00:00Z", "2025-01-01T00:00:00.123Z", "now"] {
        let mut l = lease("a");
        l["spec"]["renewTime"] = json!(bad);
        assert_eq!(post(&fake, &l).status, 400, "{bad}");
    }
    let mut l = lease("a");
    l["spec"]["leaseDurationSeconds"] = json!(0);
    assert_eq!(post(&fake, &l).status, 422);
    assert_eq!(post(&fake, &lease("a")).status, 201);
    let ans = patch(
        &fake,
        "a",
        JSON_PATCH,
        &json!([
        {"op": "add", "path": "/spec/renewTime", "value": "2025-01-01T00:00:00Z"}]),
    );
    assert_eq!(ans.status, 400);
}

/// source (plugin/pkg/admission/namespace/lifecycle): a create in a
/// missing namespace is 404 `namespaces "x" not found`; source (the registry
/// does not look the namespace up for a LIST): a LIST there is an empty list.
#[test]
fn missing_namespace() {
    let fake = FakeApiServer::start().unwrap();
    let path = "/apis/coordination.k8s.io/v1/namespaces/nope/leases";
    let ans = send(&fake, "POST", path, "application/json", &lease("a")).unwrap();
    assert_eq!(ans.status, 404);
    assert!(
        ans.body["message"]
            .as_str()
            .unwrap()
            .contains("namespaces \"nope\" not found")
    );
    let list = send(&fake, "GET", path, "", &Value::Null).unwrap();
    assert_eq!(list.status, 200);
    assert_eq!(list.body["items"], json!([]));
}

/// Label selectors (seen: equality selectors on labels); dry runs (source:
/// `dryRun=All` runs validation and admission and stores nothing).
#[test]
fn label_selector_and_dry_run() {
    let fake = FakeApiServer::start().unwrap();
    post(&fake, &lease("a"));
    let mut other = lease("b");
    other["metadata"]["labels"] = json!({"leasehold/pool": "q"});
    post(&fake, &other);
    let list = send(
        &fake,
        "GET",
        &format!("{LEASES}?labelSelector=leasehold%2Fpool%3Dp"),
        "",
        &Value::Null,
    )
    .unwrap();
    let names: Vec<&str> = list.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a"]);
    let dry = send(
        &fake,
        "POST",
        &format!("{LEASES}?dryRun=All"),
        "application/json",
        &lease("c"),
    )
    .unwrap();
    assert_eq!(dry.status, 201);
    assert!(fake.lease("default", "c").is_none());
}

/// Fault switches: a status, "apply, then fail", a dropped connection
/// (applied or not), 403 per verb (and in access reviews), 429 with
/// Retry-After, a delay; counted rules run out.
#[test]
fn fault_switches() {
    let fake = FakeApiServer::start().unwrap();
    fake.faults().set_times(Verb::Create, Fault::Status(503), 1);
    assert_eq!(post(&fake, &lease("a")).status, 503);
    assert!(fake.lease("default", "a").is_none());
    fake.faults()
        .set_times(Verb::Create, Fault::ApplyThenStatus(504), 1);
    assert_eq!(post(&fake, &lease("a")).status, 504);
    assert!(fake.lease("default", "a").is_some());
    fake.faults().set_times(Verb::Create, Fault::Drop, 1);
    assert!(send(&fake, "POST", LEASES, "application/json", &lease("b")).is_none());
    assert!(fake.lease("default", "b").is_none());
    fake.faults()
        .set_times(Verb::Create, Fault::ApplyThenDrop, 1);
    assert!(send(&fake, "POST", LEASES, "application/json", &lease("b")).is_none());
    assert!(fake.lease("default", "b").is_some());
    fake.faults().set(Verb::Patch, Fault::Forbidden);
    assert_eq!(patch(&fake, "a", MERGE_PATCH, &json!({})).status, 403);
    let review = |verb: &str| {
        let body = json!({"spec": {"resourceAttributes": {"verb": verb, "group": "coordination.k8s.io", "resource": "leases"}}});
        send(
            &fake,
            "POST",
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            "application/json",
            &body,
        )
        .unwrap()
        .body["status"]["allowed"]
            .clone()
    };
    assert_eq!(review("patch"), json!(false));
    assert_eq!(review("get"), json!(true));
    fake.faults().clear();
    fake.faults().set_times(
        Verb::List,
        Fault::TooManyRequests {
            retry_after_secs: 7,
        },
        1,
    );
    let throttled = send(&fake, "GET", LEASES, "", &Value::Null).unwrap();
    assert_eq!(throttled.status, 429);
    assert!(
        throttled.headers.contains("retry-after: 7"),
        "{}",
        throttled.headers
    );
    assert_eq!(
        send(&fake, "GET", LEASES, "", &Value::Null).unwrap().status,
        200
    );
    fake.faults()
        .set_times(Verb::Get, Fault::Delay(Duration::from_millis(200)), 1);
    let start = std::time::Instant::now();
    assert_eq!(
        send(&fake, "GET", &format!("{LEASES}/a"), "", &Value::Null)
            .unwrap()
            .status,
        200
    );
    assert!(start.elapsed() >= Duration::from_millis(200));
}
