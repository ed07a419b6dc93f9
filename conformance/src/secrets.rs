//! Checks that a credential never shows: in `Debug` or `Display` of configs,
//! strategies and errors, in any `tracing` span or event ([`capture`]), and
//! in any metric's name, labels or description ([`capture_metrics`]).
//! [`in_user_info`] and [`in_query`] plant a password in a store URL the two
//! ways a URL carries one.
//!
//! ```
//! use leasehold_conformance::secrets::{Secret, Shown};
//! let secret = Secret::new();
//! let url = format!("postgres://app:{}@db/app", secret.as_str());
//! let mut shown = Shown::new(&secret);
//! shown.text("redacted", "postgres://db/app");
//! assert!(shown.verdict().is_ok());
//! shown.text("leaky", &url);
//! assert!(shown.verdict().unwrap_err().contains("leaky"));
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use leasehold_core::Token;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

use crate::suite::Outcome;

/// A password no text could contain by chance.
#[derive(Clone, Debug)]
pub struct Secret(String);

impl Secret {
    /// A fresh one: `pw` and 16 random hex digits.
    pub fn new() -> Self {
        Self(format!("pw{}", &Token::random().to_hex()[..16]))
    }

    /// A given password (for a server set up with it).
    pub fn given(password: impl Into<String>) -> Self {
        Self(password.into())
    }

    /// The password.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Secret {
    fn default() -> Self {
        Self::new()
    }
}

/// What was shown, by where it was shown.
pub struct Shown {
    secret: Secret,
    texts: Vec<(String, String)>,
}

impl Shown {
    /// Nothing shown yet.
    pub fn new(secret: &Secret) -> Self {
        Self {
            secret: secret.clone(),
            texts: Vec::new(),
        }
    }

    /// Notes `text`, shown as `what`.
    pub fn text(&mut self, what: &str, text: &str) -> &mut Self {
        self.texts.push((what.to_owned(), text.to_owned()));
        self
    }

    /// Notes `Debug` and `Display` of `value`.
    pub fn both<T: fmt::Debug + fmt::Display>(&mut self, what: &str, value: &T) -> &mut Self {
        self.text(&format!("{what} (Debug)"), &format!("{value:?}"))
            .text(&format!("{what} (Display)"), &format!("{value}"))
    }

    /// Notes `Debug` of `value`.
    pub fn debug<T: fmt::Debug>(&mut self, what: &str, value: &T) -> &mut Self {
        self.text(&format!("{what} (Debug)"), &format!("{value:?}"))
    }

    /// Notes every metric name, label and description the process's
    /// recorder captured so far (see [`capture_metrics`]).
    pub fn metrics(&mut self) -> &mut Self {
        let lines = capture_metrics()
            .lines
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default();
        for line in lines {
            self.texts.push(("a metric".to_owned(), line));
        }
        self
    }

    /// Notes every span and event the process's subscriber captured so far
    /// (see [`capture`]).
    pub fn traces(&mut self) -> &mut Self {
        let lines = capture()
            .lines
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default();
        for line in lines {
            self.texts
                .push(("a tracing span or event".to_owned(), line));
        }
        self
    }

    /// `Ok` when no text contains the secret; otherwise names where it showed.
    pub fn verdict(&self) -> Outcome {
        let leaks: Vec<String> = self
            .texts
            .iter()
            .filter(|(_, t)| t.contains(self.secret.as_str()))
            .map(|(what, t)| format!("{what}: {t}"))
            .collect();
        if leaks.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "the password shows in {} place(s): {}",
                leaks.len(),
                leaks.join(" | ")
            ))
        }
    }

    /// How many texts were checked.
    pub fn count(&self) -> usize {
        self.texts.len()
    }
}

/// Every span and event of the process, formatted (installed as the global
/// `tracing` subscriber on first use; a process that set another keeps it,
/// and [`Shown::traces`] then sees nothing, which [`capture_installed`]
/// tells).
#[derive(Clone, Default)]
pub struct Capture {
    lines: Arc<Mutex<Vec<String>>>,
    next: Arc<AtomicU64>,
    installed: bool,
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

impl Capture {
    fn push(&self, kind: &str, name: &str, fields: BTreeMap<String, String>) {
        if let Ok(mut lines) = self.lines.lock() {
            lines.push(format!("{kind} {name} {fields:?}"));
        }
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut fields = BTreeMap::new();
        span.record(&mut Fields(&mut fields));
        self.push("span", span.metadata().name(), fields);
        Id::from_u64(self.next.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &Id, values: &Record<'_>) {
        let mut fields = BTreeMap::new();
        values.record(&mut Fields(&mut fields));
        self.push("record", "", fields);
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        self.push("event", event.metadata().target(), fields);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// The process's capture, installed on first call.
pub fn capture() -> &'static Capture {
    static CAPTURE: OnceLock<Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let mut c = Capture::default();
        c.installed = tracing::subscriber::set_global_default(c.clone()).is_ok();
        c
    })
}

/// Whether [`capture`] is the process's subscriber (no other was set first).
pub fn capture_installed() -> bool {
    capture().installed
}

/// How many spans and events were captured so far.
pub fn captured() -> usize {
    capture().lines.lock().map(|l| l.len()).unwrap_or(0)
}

/// Every metric the process registers and describes, as text: name,
/// labels, unit and description (installed as the global `metrics`
/// recorder on first use; a process that set another keeps it, and
/// [`Shown::metrics`] then sees nothing, which
/// [`metrics_capture_installed`] tells). Values are numbers: not kept.
#[derive(Clone, Default)]
pub struct MetricsCapture {
    lines: Arc<Mutex<Vec<String>>>,
    installed: bool,
}

impl MetricsCapture {
    fn push(&self, line: String) {
        if let Ok(mut lines) = self.lines.lock() {
            lines.push(line);
        }
    }

    fn describe(&self, key: metrics::KeyName, unit: Option<metrics::Unit>, text: &str) {
        self.push(format!("describe {} {unit:?} {text}", key.as_str()));
    }

    fn register(&self, key: &metrics::Key) {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        self.push(format!("register {} {labels:?}", key.name()));
    }
}

impl metrics::Recorder for MetricsCapture {
    fn describe_counter(
        &self,
        key: metrics::KeyName,
        unit: Option<metrics::Unit>,
        text: metrics::SharedString,
    ) {
        self.describe(key, unit, &text);
    }
    fn describe_gauge(
        &self,
        key: metrics::KeyName,
        unit: Option<metrics::Unit>,
        text: metrics::SharedString,
    ) {
        self.describe(key, unit, &text);
    }
    fn describe_histogram(
        &self,
        key: metrics::KeyName,
        unit: Option<metrics::Unit>,
        text: metrics::SharedString,
    ) {
        self.describe(key, unit, &text);
    }
    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        self.register(key);
        metrics::Counter::noop()
    }
    fn register_gauge(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        self.register(key);
        metrics::Gauge::noop()
    }
    fn register_histogram(
        &self,
        key: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        self.register(key);
        metrics::Histogram::noop()
    }
}

/// The process's metrics capture, installed on first call.
pub fn capture_metrics() -> &'static MetricsCapture {
    static CAPTURE: OnceLock<MetricsCapture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let mut c = MetricsCapture::default();
        c.installed = metrics::set_global_recorder(c.clone()).is_ok();
        c
    })
}

/// Whether [`capture_metrics`] is the process's recorder.
pub fn metrics_capture_installed() -> bool {
    capture_metrics().installed
}

/// How many metric registrations and descriptions were captured so far.
pub fn captured_metrics() -> usize {
    capture_metrics().lines.lock().map(|l| l.len()).unwrap_or(0)
}

/// `url` with `secret` as the password of its user info: the user it
/// names is kept (`user` when it names none).
///
/// ```
/// use leasehold_conformance::secrets::{in_query, in_user_info};
/// assert_eq!(in_user_info("postgres://app@db/app", "app", "pw"), "postgres://app:pw@db/app");
/// assert_eq!(in_user_info("redis://h:6379", "default", "pw"), "redis://default:pw@h:6379");
/// assert_eq!(in_query("redis://h:6379?prefix=p", "pw"), "redis://h:6379?prefix=p&password=pw");
/// ```
pub fn in_user_info(url: &str, user: &str, secret: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let before_path = rest.split(['/', '?']).next().unwrap_or(rest);
    let (named, host) = match before_path.rsplit_once('@') {
        Some((u, _)) => (u.split(':').next().unwrap_or(u), &rest[u.len() + 1..]),
        None => (user, rest),
    };
    format!("{scheme}://{named}:{secret}@{host}")
}

/// `url` with `password=secret` added to its query string.
pub fn in_query(url: &str, secret: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}password={secret}")
}

/// Runs a lease manager on `store` through acquisition, a few renewals
/// (every 50 ms for 300 ms) and shutdown, so that the driver emits its spans
/// and events with whatever the store's answers carry; notes the strategy's
/// `identity()` and the manager's errors in `shown`.
pub async fn exercise(store: crate::Store, shown: &mut Shown) -> Outcome {
    use std::time::Duration;

    use leasehold_core::{LeaseConfig, LeaseManager};

    shown.text("identity()", &store.identity_dyn());
    let pool = crate::suite::fresh_pool_name();
    let config = LeaseConfig::builder(pool.as_str())
        .pool_size(2)
        .ttl(Duration::from_secs(10))
        .renew_interval(Duration::from_millis(50))
        .acquire_timeout(Duration::from_secs(20))
        .build()
        .map_err(|e| e.to_string())?;
    let before = captured();
    let before_metrics = captured_metrics();
    let manager = match LeaseManager::start(store, config).await {
        Ok(m) => m,
        Err(e) => {
            shown.both("LeaseManager::start error", &e);
            return Err(format!("start: {e}"));
        }
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    manager.shutdown().await;
    if capture_installed() && captured() == before {
        return Err("the driver emitted no span or event: nothing was checked".to_owned());
    }
    // Metrics register once per name and labels: a pool of its own
    // registers anew.
    if metrics_capture_installed() && captured_metrics() == before_metrics {
        return Err("the driver registered no metric: nothing was checked".to_owned());
    }
    Ok(())
}
