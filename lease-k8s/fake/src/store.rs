//! The stored Leases and the API server's write semantics for them.
//!
//! Every rule here is marked with where it comes from: `seen` when it was
//! observed on a running kube-apiserver (as recorded in K8S.md), `source` when
//! it was only read in the apiserver's code (`k8s.io/apiserver`,
//! `pkg/registry/coordination/lease`, `apimachinery`) and not run.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

/// An answer: status and body.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Value,
}

impl Answer {
    fn ok(status: u16, body: Value) -> Self {
        Self { status, body }
    }
}

/// A `Status` failure body as the API server sends it.
pub(crate) fn failure(code: u16, reason: &str, message: impl Into<String>) -> Answer {
    Answer {
        status: code,
        body: json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message.into(),
            "reason": reason,
            "code": code,
        }),
    }
}

fn not_found(name: &str) -> Answer {
    failure(
        404,
        "NotFound",
        format!("leases.coordination.k8s.io \"{name}\" not found"),
    )
}

fn conflict(name: &str) -> Answer {
    failure(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on leases.coordination.k8s.io \"{name}\": the object \
             has been modified; please apply your changes to the latest version and try again"
        ),
    )
}

/// How resourceVersions are written (tests switch to a non-integer form).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RvFormat {
    /// Decimal integers, as every kube-apiserver release so far.
    Integer,
    /// The integer behind a prefix: an opaque, non-integer resourceVersion.
    Opaque(String),
}

/// Every stored Lease, by namespace and name, and the one counter.
pub(crate) struct Store {
    /// One counter for every write (the etcd revision).
    revision: u64,
    uids: u64,
    pub(crate) namespaces: BTreeSet<String>,
    pub(crate) leases: BTreeMap<(String, String), Value>,
    pub(crate) rv_format: RvFormat,
}

impl Store {
    pub(crate) fn new() -> Self {
        Self {
            revision: 100,
            uids: 0,
            namespaces: BTreeSet::from(["default".to_owned()]),
            leases: BTreeMap::new(),
            rv_format: RvFormat::Integer,
        }
    }

    fn next_rv(&mut self) -> String {
        self.revision += 1;
        match &self.rv_format {
            RvFormat::Integer => self.revision.to_string(),
            RvFormat::Opaque(prefix) => format!("{prefix}{}", self.revision),
        }
    }

    fn current_rv(&self) -> String {
        match &self.rv_format {
            RvFormat::Integer => self.revision.to_string(),
            RvFormat::Opaque(prefix) => format!("{prefix}{}", self.revision),
        }
    }

    fn next_uid(&mut self) -> String {
        self.uids += 1;
        format!("00000000-fake-4000-8000-{:012x}", self.uids)
    }

    /// `GET .../leases?labelSelector=...` (source: a LIST does not check that
    /// the namespace exists; it answers an empty list).
    pub(crate) fn list(&self, ns: &str, selector: Option<&str>) -> Answer {
        let selector = match selector.map(parse_selector).transpose() {
            Ok(s) => s.unwrap_or_default(),
            Err(e) => return failure(400, "BadRequest", e),
        };
        let items: Vec<Value> = self
            .leases
            .iter()
            .filter(|((n, _), _)| n == ns)
            .map(|(_, v)| v)
            .filter(|v| selector.iter().all(|req| req.matches(v)))
            .cloned()
            .collect();
        Answer::ok(
            200,
            json!({
                "kind": "LeaseList",
                "apiVersion": "coordination.k8s.io/v1",
                "metadata": {"resourceVersion": self.current_rv()},
                "items": items,
            }),
        )
    }

    /// `GET .../leases/{name}`.
    pub(crate) fn get(&self, ns: &str, name: &str) -> Answer {
        match self.leases.get(&(ns.to_owned(), name.to_owned())) {
            Some(v) => Answer::ok(200, v.clone()),
            None => not_found(name),
        }
    }

    /// `POST .../leases` (seen: 409 AlreadyExists for an existing name;
    /// source: 404 for a missing namespace, from the NamespaceLifecycle
    /// admission; a resourceVersion in the body is a 500 from storage).
    pub(crate) fn create(&mut self, ns: &str, body: &[u8], dry_run: bool) -> Answer {
        let mut obj = match decode(body) {
            Ok(v) => v,
            Err(a) => return a,
        };
        if !self.namespaces.contains(ns) {
            return failure(404, "NotFound", format!("namespaces \"{ns}\" not found"));
        }
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_owned();
        if let Err(a) = validate(&obj, &name) {
            return a;
        }
        if obj["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
        {
            return failure(
                500,
                "InternalError",
                "resourceVersion should not be set on objects to be created",
            );
        }
        let key = (ns.to_owned(), name.clone());
        if self.leases.contains_key(&key) {
            return failure(
                409,
                "AlreadyExists",
                format!("leases.coordination.k8s.io \"{name}\" already exists"),
            );
        }
        self.stamp_new(&mut obj, ns);
        if dry_run {
            // Dry run: validated and admitted, nothing stored, no revision used.
            self.revision -= 1;
            return Answer::ok(201, obj);
        }
        self.leases.insert(key, obj.clone());
        Answer::ok(201, obj)
    }

    fn stamp_new(&mut self, obj: &mut Value, ns: &str) {
        let uid = self.next_uid();
        let rv = self.next_rv();
        let meta = obj["metadata"].as_object_mut().expect("validated object");
        meta.insert("namespace".into(), json!(ns));
        meta.insert("uid".into(), json!(uid));
        meta.insert("resourceVersion".into(), json!(rv));
        meta.insert("creationTimestamp".into(), json!("2025-01-01T00:00:00Z"));
        obj["apiVersion"] = json!("coordination.k8s.io/v1");
        obj["kind"] = json!("Lease");
    }

    /// `PATCH .../leases/{name}`: JSON Patch or merge patch, applied to the
    /// current object inside the compare-and-swap (seen: PATCH never creates,
    /// 404; a failed JSON-Patch `test` is 422 with a generic message; a merge
    /// patch carrying `metadata.resourceVersion` is a condition, 409 on a
    /// mismatch; a write that changes nothing keeps the resourceVersion).
    pub(crate) fn patch(
        &mut self,
        ns: &str,
        name: &str,
        content_type: &str,
        body: &[u8],
    ) -> Answer {
        let key = (ns.to_owned(), name.to_owned());
        let Some(current) = self.leases.get(&key).cloned() else {
            return not_found(name);
        };
        let mut next = current.clone();
        let media = content_type.split(';').next().unwrap_or("").trim();
        match media {
            "application/json-patch+json" => {
                let ops: json_patch::Patch = match serde_json::from_slice(body) {
                    Ok(p) => p,
                    Err(e) => {
                        return failure(400, "BadRequest", format!("invalid JSON Patch: {e}"));
                    }
                };
                if json_patch::patch(&mut next, &ops).is_err() {
                    // The generic answer: no detail saying which op failed.
                    return failure(
                        422,
                        "Invalid",
                        "the server rejected our request due to an error in our request",
                    );
                }
            }
            "application/merge-patch+json" => {
                let patch: Value = match serde_json::from_slice(body) {
                    Ok(p) => p,
                    Err(e) => {
                        return failure(400, "BadRequest", format!("invalid merge patch: {e}"));
                    }
                };
                json_patch::merge(&mut next, &patch);
            }
            other => {
                return failure(
                    415,
                    "UnsupportedMediaType",
                    format!(
                        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json; got {other:?}"
                    ),
                );
            }
        }
        self.update_existing(&key, &current, next)
    }

    /// `PUT .../leases/{name}` (source: Leases allow create-on-update and
    /// unconditional update; a body carrying `metadata.uid` is a UID
    /// precondition, 409 when the object is gone).
    pub(crate) fn put(&mut self, ns: &str, name: &str, body: &[u8]) -> Answer {
        let obj = match decode(body) {
            Ok(v) => v,
            Err(a) => return a,
        };
        let key = (ns.to_owned(), name.to_owned());
        let Some(current) = self.leases.get(&key).cloned() else {
            if let Some(uid) = obj["metadata"]["uid"].as_str().filter(|u| !u.is_empty()) {
                return failure(
                    409,
                    "Conflict",
                    format!(
                        "Operation cannot be fulfilled on leases.coordination.k8s.io \"{name}\": \
                         Precondition failed: UID in precondition: {uid}, UID in object meta: "
                    ),
                );
            }
            if !self.namespaces.contains(ns) {
                return failure(404, "NotFound", format!("namespaces \"{ns}\" not found"));
            }
            if let Err(a) = validate(&obj, name) {
                return a;
            }
            let mut obj = obj;
            obj["metadata"]["name"] = json!(name);
            if let Some(m) = obj["metadata"].as_object_mut() {
                m.remove("resourceVersion");
            }
            self.stamp_new(&mut obj, ns);
            self.leases.insert(key, obj.clone());
            return Answer::ok(201, obj);
        };
        if let Some(uid) = obj["metadata"]["uid"].as_str().filter(|u| !u.is_empty())
            && Some(uid) != current["metadata"]["uid"].as_str()
        {
            return conflict(name);
        }
        let mut next = obj;
        // Server-owned metadata stays; an empty resourceVersion is unconditional.
        for field in ["uid", "creationTimestamp", "namespace", "name"] {
            next["metadata"][field] = current["metadata"][field].clone();
        }
        if next["metadata"]["resourceVersion"]
            .as_str()
            .is_none_or(str::is_empty)
        {
            next["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
        }
        next["apiVersion"] = current["apiVersion"].clone();
        next["kind"] = current["kind"].clone();
        self.update_existing(&key, &current, next)
    }

    /// The common tail of PATCH and PUT: the resourceVersion condition,
    /// validation, the no-op rule, the new revision.
    fn update_existing(
        &mut self,
        key: &(String, String),
        current: &Value,
        mut next: Value,
    ) -> Answer {
        let name = &key.1;
        if next["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"] {
            return conflict(name);
        }
        for field in ["uid", "name", "namespace", "creationTimestamp"] {
            if next["metadata"][field] != current["metadata"][field] {
                return failure(
                    422,
                    "Invalid",
                    format!(
                        "Lease.coordination.k8s.io \"{name}\" is invalid: metadata.{field}: \
                         Invalid value: field is immutable"
                    ),
                );
            }
        }
        if let Err(a) = validate(&next, name) {
            return a;
        }
        if &next == current {
            return Answer::ok(200, next);
        }
        next["metadata"]["resourceVersion"] = json!(self.next_rv());
        self.leases.insert(key.clone(), next.clone());
        Answer::ok(200, next)
    }

    /// `DELETE .../leases/{name}`.
    pub(crate) fn delete(&mut self, ns: &str, name: &str) -> Answer {
        match self.leases.remove(&(ns.to_owned(), name.to_owned())) {
            Some(obj) => {
                self.revision += 1;
                Answer::ok(200, obj)
            }
            None => not_found(name),
        }
    }
}

fn decode(body: &[u8]) -> Result<Value, Answer> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| failure(400, "BadRequest", format!("unable to decode the body: {e}")))?;
    if !v["metadata"].is_object() {
        return Err(failure(400, "BadRequest", "the object has no metadata"));
    }
    Ok(v)
}

/// Decoding and validation of a Lease (seen: bad names are 422 Invalid;
/// source: a MicroTime that is not RFC 3339 with exactly six fractional digits
/// fails decoding, 400; `leaseDurationSeconds` must be > 0, 422).
fn validate(obj: &Value, name: &str) -> Result<(), Answer> {
    let invalid = |field: &str, value: &Value, why: &str| {
        failure(
            422,
            "Invalid",
            format!(
                "Lease.coordination.k8s.io \"{name}\" is invalid: {field}: Invalid value: {value}: {why}"
            ),
        )
    };
    let bad_request = |field: &str, value: &Value| {
        failure(
            400,
            "BadRequest",
            format!(
                "Lease in version \"v1\" cannot be handled as a Lease: {field}: parsing time \
                 {value} as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse"
            ),
        )
    };
    let spec = &obj["spec"];
    for field in ["renewTime", "acquireTime"] {
        let v = &spec[field];
        if !v.is_null() && !v.as_str().is_some_and(is_micro_time) {
            return Err(bad_request(&format!("spec.{field}"), v));
        }
    }
    if !spec["leaseDurationSeconds"].is_null() && !spec["leaseDurationSeconds"].is_i64() {
        return Err(failure(
            400,
            "BadRequest",
            "Lease in version \"v1\" cannot be handled as a Lease: spec.leaseDurationSeconds: not an integer",
        ));
    }
    if spec["leaseDurationSeconds"]
        .as_i64()
        .is_some_and(|d| d <= 0)
    {
        return Err(invalid(
            "spec.leaseDurationSeconds",
            &spec["leaseDurationSeconds"],
            "must be greater than 0",
        ));
    }
    if !spec["holderIdentity"].is_null() && !spec["holderIdentity"].is_string() {
        return Err(failure(
            400,
            "BadRequest",
            "Lease in version \"v1\" cannot be handled as a Lease: spec.holderIdentity: not a string",
        ));
    }
    if !is_dns1123_subdomain(name) {
        return Err(invalid(
            "metadata.name",
            &json!(name),
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
             '-' or '.', and must start and end with an alphanumeric character",
        ));
    }
    if let Some(labels) = obj["metadata"]["labels"].as_object() {
        for (k, v) in labels {
            let ok = v.as_str().is_some_and(is_label_value);
            if !ok {
                return Err(invalid(
                    &format!("metadata.labels[{k}]"),
                    v,
                    "a valid label must be an empty string or consist of alphanumeric characters, \
                     '-', '_' or '.', and must start and end with an alphanumeric character (at most 63)",
                ));
            }
        }
    }
    Ok(())
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`, at most
/// 253 characters.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

fn is_label_value(s: &str) -> bool {
    let b = s.as_bytes();
    b.is_empty()
        || (b.len() <= 63
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')))
}

/// `2006-01-02T15:04:05.000000Z07:00`: exactly six fractional digits.
pub fn is_micro_time(s: &str) -> bool {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let num = |r: std::ops::Range<usize>| {
        s.get(r)
            .and_then(|d| d.parse::<u32>().ok())
            .unwrap_or(u32::MAX)
    };
    if b.len() < 27
        || !digits(0..4)
        || b[4] != b'-'
        || !digits(5..7)
        || b[7] != b'-'
        || !digits(8..10)
        || b[10] != b'T'
        || !digits(11..13)
        || b[13] != b':'
        || !digits(14..16)
        || b[16] != b':'
        || !digits(17..19)
        || b[19] != b'.'
        || !digits(20..26)
    {
        return false;
    }
    let zone_ok = match &b[26..] {
        [b'Z'] => true,
        [sign, h1, h2, b':', m1, m2] => {
            matches!(sign, b'+' | b'-') && [h1, h2, m1, m2].iter().all(|d| d.is_ascii_digit())
        }
        _ => false,
    };
    zone_ok
        && (1..=12).contains(&num(5..7))
        && (1..=31).contains(&num(8..10))
        && num(11..13) < 24
        && num(14..16) < 60
        && num(17..19) < 61
}

/// One requirement of a label selector.
enum Requirement {
    Eq(String, String),
    Ne(String, String),
    Exists(String),
}

impl Requirement {
    fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        match self {
            Self::Eq(k, v) => labels[k].as_str() == Some(v),
            Self::Ne(k, v) => labels[k].as_str() != Some(v),
            Self::Exists(k) => labels[k].is_string(),
        }
    }
}

fn parse_selector(s: &str) -> Result<Vec<Requirement>, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|part| {
            let part = part.trim();
            if let Some((k, v)) = part.split_once("!=") {
                Ok(Requirement::Ne(k.trim().into(), v.trim().into()))
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Ok(Requirement::Eq(k.trim().into(), v.trim().into()))
            } else if part.contains([' ', '(', ')']) {
                Err(format!("unable to parse requirement: {part:?} (the fake supports =, ==, != and existence)"))
            } else {
                Ok(Requirement::Exists(part.into()))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_time_needs_six_digits() {
        assert!(is_micro_time("2025-03-01T10:00:00.123456Z"));
        assert!(is_micro_time("2025-03-01T10:00:00.123456+02:00"));
        assert!(!is_micro_time("2025-03-01T10:00:00Z"));
        assert!(!is_micro_time("2025-03-01T10:00:00.123Z"));
        assert!(!is_micro_time("2025-13-01T10:00:00.123456Z"));
        assert!(!is_micro_time("yesterday"));
    }

    #[test]
    fn names() {
        assert!(is_dns1123_subdomain("leasehold-ids-0"));
        assert!(is_dns1123_subdomain("a.b-c"));
        assert!(!is_dns1123_subdomain("Leasehold"));
        assert!(!is_dns1123_subdomain("a_b"));
        assert!(!is_dns1123_subdomain("a.-b"));
        assert!(!is_dns1123_subdomain(&"a".repeat(254)));
    }
}
