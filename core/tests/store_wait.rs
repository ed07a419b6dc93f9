//! Waiting for a store that is not reachable yet: one warn line per failed
//! attempt, with the store's URL redacted and the reason, and every attempt
//! counted by outcome; a refusal is not tried again.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_core::opening::{StoreWait, WaitError, wait_for_store};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// A span or an event: its name or message, and its fields.
type Line = (String, BTreeMap<String, String>);

/// Every span and event.
#[derive(Clone, Default)]
struct Capture {
    lines: Arc<Mutex<Vec<Line>>>,
    next: Arc<AtomicU64>,
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut fields = BTreeMap::new();
        span.record(&mut Fields(&mut fields));
        let name = format!("span {}", span.metadata().name());
        self.lines.lock().unwrap().push((name, fields));
        Id::from_u64(self.next.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let name = fields.remove("message").unwrap_or_default();
        fields.insert("level".to_owned(), event.metadata().level().to_string());
        self.lines.lock().unwrap().push((name, fields));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn each_failed_attempt_is_one_redacted_warning_and_counted() {
    let capture = Capture::default();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::set_global_recorder(recorder).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let url = "postgres://app:s3cret@127.0.0.1:5/db?sslpassword=hush";
    let wait = StoreWait::within(Duration::from_secs(60))
        .backoff(Duration::from_millis(1), Duration::from_millis(2));
    let answers = Mutex::new(vec![
        Ok(7),
        Err("connection refused".to_owned()),
        Err("the database system is starting up".to_owned()),
    ]);
    let reached = tracing::subscriber::with_default(capture.clone(), || {
        rt.block_on(wait_for_store(
            url,
            wait,
            |_: &String| true,
            || {
                let answer = answers.lock().unwrap().pop().unwrap();
                async move { answer }
            },
        ))
    });
    assert_eq!(reached, Ok(7));
    let refused = tracing::subscriber::with_default(capture.clone(), || {
        rt.block_on(wait_for_store(
            url,
            wait,
            |_: &String| false,
            || async { Err::<(), _>("password authentication failed".to_owned()) },
        ))
    });
    assert_eq!(
        refused,
        Err(WaitError::Refused(
            "password authentication failed".to_owned()
        ))
    );

    let lines = capture.lines.lock().unwrap().clone();
    let shown = "postgres://app:***@127.0.0.1:5/db?sslpassword=***";
    let warned: Vec<&Line> = lines
        .iter()
        .filter(|(_, f)| f.get("level").is_some_and(|l| l == "WARN"))
        .collect();
    assert_eq!(warned.len(), 3, "{lines:?}");
    // The answers are popped from the end: the first attempt hears "starting up".
    for (reason, (_, fields)) in [
        "the database system is starting up",
        "connection refused",
        "password authentication failed",
    ]
    .iter()
    .zip(&warned)
    {
        assert_eq!(
            fields.get("store").map(String::as_str),
            Some(shown),
            "{fields:?}"
        );
        assert_eq!(
            fields.get("reason").map(String::as_str),
            Some(*reason),
            "{fields:?}"
        );
    }
    for (msg, fields) in &lines {
        let all = format!("{msg} {fields:?}");
        assert!(!all.contains("s3cret") && !all.contains("hush"), "{all}");
    }

    let counts: BTreeMap<String, u64> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| {
            let k = key.key();
            (k.name() == "leasehold_store_connect_attempts_total").then_some(())?;
            let store = k.labels().find(|l| l.key() == "store")?.value().to_owned();
            assert_eq!(store, shown);
            let outcome = k
                .labels()
                .find(|l| l.key() == "outcome")?
                .value()
                .to_owned();
            match value {
                DebugValue::Counter(n) => Some((outcome, n)),
                _ => None,
            }
        })
        .collect();
    let expected: BTreeMap<String, u64> = [
        ("unreachable".to_owned(), 2),
        ("connected".to_owned(), 1),
        ("refused".to_owned(), 1),
    ]
    .into();
    assert_eq!(counts, expected);
}
