//! Acknowledgements that are not what they look like: PostgreSQL's
//! cancelled wait for synchronous replication.
//!
//! With synchronous replication a commit waits until the synchronous
//! standbys have it. When that wait is cancelled (the session's
//! `statement_timeout`, `pg_cancel_backend`, a shutdown), PostgreSQL does not
//! fail the statement: the transaction is already committed on the primary,
//! so it answers *success* with the warning "canceling wait for synchronous
//! replication … The transaction has already committed locally, but might
//! not have been replicated to the standby." A claim or renewal answered so
//! is not proven: a failover to the standby forgets it, and the slot goes to
//! a second holder. It must count as not done (`Retry`).
//!
//! sqlx hands notices to nobody but `tracing` (events of target
//! `sqlx::postgres::notice`, raised on the task that polls the query). So
//! each operation is polled with a dispatcher of this module set as the
//! thread's default for the duration of the poll: it notes the warning and
//! passes every event and span on to the dispatcher that was the default
//! before, so the application's own subscriber sees what it always saw.
//! The warning is recognised by its English text: a server whose
//! `lc_messages` is another language words it otherwise (the session cannot
//! change `lc_messages`; it is a superuser setting), and the warning then
//! goes unseen — a limit DESIGN.md states.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::sync::OnceLock;

use tracing::dispatcher::{self, Dispatch};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};

/// The target of sqlx's events for PostgreSQL notices.
const TARGET: &str = "sqlx::postgres::notice";

/// What the warnings of a cancelled wait for synchronous replication
/// contain: "canceling wait for synchronous replication due to user
/// request" (a cancel or a timeout), "canceling the wait for synchronous
/// replication and terminating connection due to administrator command".
const CANCELLED_WAIT: &str = "wait for synchronous replication";

thread_local! {
    /// The default dispatcher from before the current watched poll.
    static OUTER: RefCell<Option<Dispatch>> = const { RefCell::new(None) };
    /// Whether the current watched poll saw the warning.
    static SEEN: Cell<bool> = const { Cell::new(false) };
}

/// Runs `fut` and answers, with its output, whether the server warned that
/// a commit's wait for synchronous replication was cancelled meanwhile: the
/// commit is then on the primary only.
///
/// Watching sets a dispatcher as the thread's default for each poll, and
/// once any dispatcher has been set, `tracing` (with its `log` feature)
/// stops turning events into `log` records for the whole process. So a
/// process that has set no dispatcher of its own is watched only where the
/// server had synchronous standbys at connect (`sync_standbys`); one that
/// has, always (nothing changes for it).
pub(crate) async fn watch<F: Future>(sync_standbys: bool, fut: F) -> (F::Output, Option<String>) {
    if !sync_standbys && !dispatcher::has_been_set() {
        return (fut.await, None);
    }
    let mut fut = std::pin::pin!(fut);
    let mut seen = false;
    let out = std::future::poll_fn(|cx| {
        let outer = dispatcher::get_default(Dispatch::clone);
        let previous = OUTER.with(|o| o.replace(Some(outer)));
        let seen_before = SEEN.replace(false);
        let poll = dispatcher::with_default(watcher(), || fut.as_mut().poll(cx));
        seen |= SEEN.replace(seen_before);
        OUTER.with(|o| *o.borrow_mut() = previous);
        poll
    })
    .await;
    let warning = seen.then(|| {
        "the server committed it but cancelled its wait for the synchronous standby (PostgreSQL \
         warned: canceling wait for synchronous replication; already committed locally, but \
         might not have been replicated): not counted, a failover to the standby would not \
         have it"
            .to_owned()
    });
    (out, warning)
}

/// The one dispatcher of the watched polls. One for the process: creating
/// a dispatcher makes `tracing` recompute every callsite's interest.
fn watcher() -> &'static Dispatch {
    static WATCHER: OnceLock<Dispatch> = OnceLock::new();
    WATCHER.get_or_init(|| Dispatch::new(Watcher))
}

/// Notes the warning; forwards everything to the outer dispatcher.
struct Watcher;

fn with_outer<T>(f: impl FnOnce(&Dispatch) -> T, none: T) -> T {
    OUTER.with(|o| match o.borrow().as_ref() {
        Some(d) => f(d),
        None => none,
    })
}

fn is_notice(meta: &Metadata<'_>) -> bool {
    meta.target() == TARGET
}

impl Subscriber for Watcher {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        // Interest is combined over every dispatcher: the application's own
        // keeps its say over the others.
        if is_notice(meta) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::WARN)
    }

    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        is_notice(meta) || with_outer(|d| d.enabled(meta), false)
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        with_outer(|d| d.new_span(span), Id::from_u64(0xDEAD))
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        with_outer(|d| d.record(span, values), ());
    }

    fn record_follows_from(&self, span: &Id, follows: &Id) {
        with_outer(|d| d.record_follows_from(span, follows), ());
    }

    fn event(&self, event: &Event<'_>) {
        if is_notice(event.metadata()) {
            let mut finder = Finder(false);
            event.record(&mut finder);
            if finder.0 {
                SEEN.set(true);
            }
        }
        with_outer(
            |d| {
                if d.enabled(event.metadata()) {
                    d.event(event);
                }
            },
            (),
        );
    }

    fn enter(&self, span: &Id) {
        with_outer(|d| d.enter(span), ());
    }

    fn exit(&self, span: &Id) {
        with_outer(|d| d.exit(span), ());
    }

    fn clone_span(&self, id: &Id) -> Id {
        with_outer(|d| d.clone_span(id), id.clone())
    }

    fn try_close(&self, id: Id) -> bool {
        with_outer(|d| d.try_close(id.clone()), false)
    }

    fn current_span(&self) -> tracing_core::span::Current {
        with_outer(|d| d.current_span(), tracing_core::span::Current::none())
    }
}

/// Finds the cancelled wait's text in an event's `message`.
struct Finder(bool);

impl Visit for Finder {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" && value.contains(CANCELLED_WAIT) {
            self.0 = true;
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" && format!("{value:?}").contains(CANCELLED_WAIT) {
            self.0 = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// An application's subscriber: counts the events it is given.
    struct Counting(Arc<AtomicUsize>);

    impl Subscriber for Counting {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, _: &Event<'_>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    async fn notice(message: &'static str) {
        tracing::event!(target: TARGET, tracing::Level::WARN, message = message);
    }

    fn block_on<F: Future>(fut: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(fut)
    }

    #[test]
    fn the_cancelled_wait_is_seen_and_the_application_still_gets_the_warning() {
        let count = Arc::new(AtomicUsize::new(0));
        let app = Dispatch::new(Counting(Arc::clone(&count)));
        let ((), warning) = dispatcher::with_default(&app, || {
            block_on(watch(
                true,
                notice("canceling wait for synchronous replication due to user request"),
            ))
        });
        assert!(warning.is_some(), "the cancelled wait went unseen");
        assert_eq!(
            count.load(Ordering::SeqCst),
            1,
            "the application lost the warning"
        );
    }

    #[test]
    fn other_notices_pass_through_unremarked() {
        let count = Arc::new(AtomicUsize::new(0));
        let app = Dispatch::new(Counting(Arc::clone(&count)));
        let ((), warning) = dispatcher::with_default(&app, || {
            block_on(watch(true, notice("there is no transaction in progress")))
        });
        assert!(warning.is_none());
        assert_eq!(count.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn without_an_application_subscriber_the_wait_is_still_seen() {
        let ((), warning) = block_on(watch(
            true,
            notice(
                "canceling the wait for synchronous replication and terminating connection due to \
             administrator command",
            ),
        ));
        assert!(warning.is_some());
    }
}
