//! The driver's spans, events and metrics carry the fields operators need,
//! and never a token or a credential.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_core::testing::GateControl;
use leasehold_core::{LeaseConfig, LeaseManager, LeaseState, Memory};
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
        self.lines.lock().unwrap().push((name, fields));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn spans_events_and_metrics_have_the_fields_and_no_secret() {
    let capture = Capture::default();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _ = tracing::subscriber::set_global_default(capture.clone());
    metrics::set_global_recorder(recorder).unwrap();

    let store = Memory::new();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let token_hex = rt.block_on(async {
        let config = LeaseConfig::builder("telemetry")
            .pool_size(2)
            .ttl(Duration::from_secs(30))
            .renew_interval(Duration::from_millis(50))
            .build()
            .unwrap();
        let manager = LeaseManager::start(store.clone(), config).await.unwrap();
        let slot = manager.gate().view().slot;
        // A renewal, a refused generation, a loss, a re-acquisition, a release.
        let first = manager.gate().deadline();
        let mut rx = manager.subscribe();
        rx.wait_for(|s| matches!(s, LeaseState::Held { deadline, .. } if *deadline > first))
            .await
            .unwrap();
        let tokens = leasehold_core::Strategy::inspect(&store, manager.pool())
            .await
            .unwrap()
            .into_iter()
            .find(|s| s.slot == slot)
            .and_then(|s| s.token_prefix)
            .unwrap();
        manager.gate().note_refused();
        let epoch = manager.gate().view().epoch;
        store.forget("telemetry", slot);
        rx.wait_for(|s| {
            matches!(s, LeaseState::Held { .. }) && manager.gate().view().epoch > epoch
        })
        .await
        .unwrap();
        manager.shutdown().await;
        tokens
    });

    let lines = capture.lines.lock().unwrap().clone();
    let find = |msg: &str| {
        lines
            .iter()
            .find(|(m, _)| m == msg)
            .map(|(_, f)| f.clone())
            .unwrap_or_else(|| panic!("no {msg:?} among {lines:#?}"))
    };
    let span = find("span leasehold.lease");
    assert_eq!(span["pool"], "telemetry");
    let acquired = find("lease acquired");
    for field in [
        "pool",
        "slot",
        "fence",
        "floor",
        "outcome",
        "latency_ms",
        "deadline_in_ms",
    ] {
        assert!(
            acquired.contains_key(field),
            "acquired lacks {field}: {acquired:?}"
        );
    }
    let lost = find("lease lost; generation stopped");
    assert_eq!(lost["cause"], "rejected");
    assert!(lost.contains_key("slot") && lost.contains_key("fence"));
    let released = find("lease released");
    assert_eq!(released["outcome"], "released");
    // The token is never in any field.
    for (msg, fields) in &lines {
        for v in fields.values().chain(std::iter::once(msg)) {
            assert!(!v.contains(&token_hex), "token prefix in {msg}: {fields:?}");
        }
    }

    let metrics: BTreeMap<String, (Vec<String>, DebugValue)> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let k = key.key();
            let labels: Vec<String> = k
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            (
                format!("{} {}", k.name(), labels.join(",")),
                (labels, value),
            )
        })
        .collect();
    let has = |name: &str, label: &str| {
        metrics
            .keys()
            .any(|k| k.starts_with(name) && k.contains("pool=telemetry") && k.contains(label))
    };
    assert!(
        has("leasehold_acquisitions_total", "outcome=acquired"),
        "{metrics:#?}"
    );
    assert!(
        has("leasehold_renewals_total", "outcome=renewed"),
        "{metrics:#?}"
    );
    assert!(
        has("leasehold_losses_total", "cause=rejected"),
        "{metrics:#?}"
    );
    assert!(
        has("leasehold_releases_total", "outcome=released"),
        "{metrics:#?}"
    );
    assert!(has("leasehold_renewal_latency_seconds", ""), "{metrics:#?}");
    assert!(has("leasehold_deadline_seconds", ""), "{metrics:#?}");
    let refused = metrics
        .iter()
        .find(|(k, _)| k.starts_with("leasehold_refused_generations_total"))
        .map(|(_, (_, v))| v);
    assert!(
        matches!(refused, Some(DebugValue::Counter(n)) if *n >= 1),
        "{refused:?}"
    );
    for k in metrics.keys() {
        assert!(!k.contains(&token_hex), "token in metric {k}");
    }
}
