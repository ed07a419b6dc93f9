//! A process that starts before its store waits for it. A lease manager
//! (and an elector) handed an unconnected `StoreConfig` keeps trying while
//! the store is not reachable, and acquires once the server is up; a
//! deadline that passes is an error naming the deadline and the last
//! cause; a store that answers with a refusal is not tried again.
//!
//! Each test starts a private server of its own, prepares what the store
//! needs, and kills it, so the process starts against a port where nothing
//! listens; a thread starts the server again on the same port a moment
//! later. A server that cannot be provided is reported as ignored, and
//! fails under `CI=true`.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use leasehold::{
    ConnectError, Leader, LeaderConfig, LeaseConfig, LeaseManager, StartError, StoreConfig,
    StoreWait,
};
use leasehold_conformance::servers::{ServerKind, Settings, find_binary, free_port, provide_with};
use libtest_mimic::{Arguments, Failed, Trial};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

type Outcome = Result<(), String>;

fn install_recorder() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::set_global_recorder(recorder).expect("one recorder per test binary");
    let _ = ATTEMPTS.set(snapshotter);
}

static ATTEMPTS: OnceLock<Snapshotter> = OnceLock::new();

/// The attempts counted so far for `store` (its URL as shown), by
/// outcome. A snapshot hands out what was counted since the last one, so
/// every snapshot is added up here, whichever test takes it.
fn counts(store: &str) -> BTreeMap<String, u64> {
    static TOTALS: Mutex<BTreeMap<(String, String), u64>> = Mutex::new(BTreeMap::new());
    let snapshotter = ATTEMPTS.get().expect("recorder installed in main");
    let mut totals = TOTALS.lock().unwrap_or_else(PoisonError::into_inner);
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let k = key.key();
        let label = |name: &str| {
            k.labels()
                .find(|l| l.key() == name)
                .map(|l| l.value().to_owned())
        };
        if k.name() != "leasehold_store_connect_attempts_total" {
            continue;
        }
        if let (Some(s), Some(outcome), DebugValue::Counter(n)) =
            (label("store"), label("outcome"), value)
        {
            *totals.entry((s, outcome)).or_default() += n;
        }
    }
    totals
        .iter()
        .filter(|((s, _), n)| s == store && **n > 0)
        .map(|((_, outcome), n)| (outcome.clone(), *n))
        .collect()
}

/// A server of `kind`, prepared for `pool` and then killed: its URL, and
/// the server to start again.
async fn prepared_and_down(
    kind: ServerKind,
    spec: &leasehold::PoolSpec,
) -> Result<(leasehold_conformance::servers::Server, String), String> {
    let mut server = provide_with(kind, Settings::Durable).map_err(|e| e.to_string())?;
    let url = server.store_url();
    let store = StoreConfig::from_url(&url)
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| format!("first connect: {e}"))?;
    store
        .operator()
        .prepare(Some(spec))
        .await
        .map_err(|e| format!("prepare: {e}"))?;
    drop(store);
    server.kill()?;
    Ok((server, url))
}

/// Starts `server` again after `delay`, on its own thread; the instant it
/// was asked to start is sent back.
fn start_later(
    mut server: leasehold_conformance::servers::Server,
    delay: Duration,
) -> std::thread::JoinHandle<Result<(Instant, leasehold_conformance::servers::Server), String>> {
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        let asked = Instant::now();
        server.restart()?;
        Ok((asked, server))
    })
}

/// A manager started while the store is down waits, and acquires once the
/// server is up: not before it was started, and with failed attempts
/// counted in between.
async fn manager_waits_for_the_store(kind: ServerKind) -> Outcome {
    let pool = format!("wait-{}", std::process::id());
    let config = LeaseConfig::builder(pool.as_str())
        .pool_size(1)
        .acquire_timeout(Duration::from_secs(90))
        .build()
        .map_err(|e| e.to_string())?;
    let (server, url) = prepared_and_down(kind, config.pool()).await?;
    let shown = leasehold::url::redacted(&url);
    let store = StoreConfig::from_url(&url).map_err(|e| e.to_string())?;
    let later = start_later(server, Duration::from_secs(2));
    let manager = LeaseManager::start(store, config)
        .await
        .map_err(|e| format!("start: {e}"))?;
    let acquired = Instant::now();
    let (asked, _server) = later.join().map_err(|_| "the restart thread panicked")??;
    if acquired < asked {
        return Err(format!(
            "acquired {:?} before the server was started",
            asked - acquired
        ));
    }
    manager.gate().check_now().map_err(|e| e.to_string())?;
    let counted = counts(&shown);
    if counted.get("unreachable").copied().unwrap_or(0) < 1
        || counted.get("connected").copied() != Some(1)
    {
        return Err(format!("attempts counted for {shown}: {counted:?}"));
    }
    manager.shutdown().await;
    Ok(())
}

/// An elector campaigning while the store is down keeps campaigning, and
/// leads once the server is up.
async fn elector_waits_for_the_store(kind: ServerKind) -> Outcome {
    let pool = format!("lead-{}", std::process::id());
    let config = LeaderConfig::builder(pool.as_str())
        .build()
        .map_err(|e| e.to_string())?;
    let (server, url) = prepared_and_down(kind, config.pool()).await?;
    let store = StoreConfig::from_url(&url).map_err(|e| e.to_string())?;
    let elector = Leader::campaign(store, config, |leadership| async move {
        leadership.lost().await;
    });
    let later = start_later(server, Duration::from_secs(2));
    tokio::time::timeout(Duration::from_secs(120), elector.wait_leading())
        .await
        .map_err(|_| "not leading within 120 s of the server's start")?
        .map_err(|e| format!("the campaign stopped: {e}"))?;
    let leading = Instant::now();
    let (asked, _server) = later.join().map_err(|_| "the restart thread panicked")??;
    if leading < asked {
        return Err("leading before the server was started".into());
    }
    if !elector.is_leading() {
        return Err("wait_leading returned, but the elector does not lead".into());
    }
    elector.shutdown().await;
    Ok(())
}

/// A deadline that passes is an error naming the deadline and the last
/// cause, after at least that long; the same for a manager.
async fn a_deadline_that_passes_names_itself_and_the_cause() -> Outcome {
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", free_port());
    let deadline = Duration::from_millis(1500);
    let began = Instant::now();
    let answer = leasehold::connect_waiting(&url, deadline).await;
    let took = began.elapsed();
    let Err(ConnectError::NotReachable {
        waited,
        attempts,
        last,
        ..
    }) = &answer
    else {
        return Err(format!("expected NotReachable, got {answer:?}"));
    };
    let text = answer.as_ref().unwrap_err().to_string();
    if *waited != deadline || !text.contains("1.5s") || !text.contains(last.as_str()) {
        return Err(format!("the message lacks the deadline or cause: {text}"));
    }
    if !last.contains("127.0.0.1") || *attempts < 2 {
        return Err(format!("last cause {last:?} after {attempts} attempts"));
    }
    if took < deadline {
        return Err(format!("gave up after {took:?}, before the deadline"));
    }

    let config = LeaseConfig::builder("never")
        .pool_size(1)
        .acquire_timeout(Duration::from_millis(1500))
        .build()
        .map_err(|e| e.to_string())?;
    let store = StoreConfig::from_url(&url).map_err(|e| e.to_string())?;
    match LeaseManager::start(store, config).await {
        Err(e @ StartError::StoreUnreachable { .. }) => {
            let text = e.to_string();
            if !text.contains("1.5s") || !text.contains("127.0.0.1") {
                return Err(format!("the message lacks the deadline or store: {text}"));
            }
            Ok(())
        }
        other => Err(format!("expected StoreUnreachable, got {other:?}")),
    }
}

/// etcd's client opens its gRPC channel without reaching anyone, so the
/// wait proves each attempt with a round trip: an etcd where nothing
/// listens is not reached, and the deadline passes.
async fn an_etcd_that_does_not_answer_is_not_reached() -> Outcome {
    let url = format!("etcd://127.0.0.1:{}", free_port());
    let deadline = Duration::from_millis(1500);
    match leasehold::connect_waiting(&url, deadline).await {
        Err(ConnectError::NotReachable { waited, .. }) if waited == deadline => Ok(()),
        other => Err(format!("expected NotReachable, got {other:?}")),
    }
}

/// A store that answers with a refusal (here a server that can lose
/// leases: `fsync=off`) is final at once: one attempt, counted as refused,
/// though the wait would allow a minute more; the same for a manager.
async fn a_refusal_is_not_tried_again() -> Outcome {
    let server = provide_with(ServerKind::Postgres15, Settings::Fast).map_err(|e| e.to_string())?;
    let url = server.store_url();
    let shown = leasehold::url::redacted(&url);
    let answer = StoreConfig::from_url(&url)
        .map_err(|e| e.to_string())?
        .wait_for_store_with(StoreWait::within(Duration::from_secs(60)))
        .connect()
        .await;
    match &answer {
        Err(e @ ConnectError::Refused { .. }) if !e.is_retryable() => {}
        other => return Err(format!("expected a final refusal, got {other:?}")),
    }
    let counted = counts(&shown);
    let expected: BTreeMap<String, u64> = [("refused".to_owned(), 1)].into();
    if counted != expected {
        return Err(format!("attempts counted for {shown}: {counted:?}"));
    }

    let config = LeaseConfig::builder("refused")
        .pool_size(1)
        .acquire_timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| e.to_string())?;
    let store = StoreConfig::from_url(&url).map_err(|e| e.to_string())?;
    match LeaseManager::start(store, config).await {
        Err(StartError::StoreRefused(_)) => {}
        other => return Err(format!("expected StoreRefused, got {other:?}")),
    }
    let counted = counts(&shown);
    if counted.get("refused").copied() != Some(2) || counted.contains_key("unreachable") {
        return Err(format!("attempts counted for {shown}: {counted:?}"));
    }
    Ok(())
}

fn trial<F, Fut>(name: &str, kind: ServerKind, run: F) -> Trial
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Outcome>,
{
    let missing = find_binary(kind).is_none() && std::env::var(kind.env_var()).is_err();
    let ignore = missing && !leasehold_conformance::in_ci();
    let label = name.to_owned();
    Trial::test(name, move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| Failed::from(e.to_string()))?;
        rt.block_on(run())
            .map_err(|e| Failed::from(format!("{label}: {e}")))
    })
    .with_ignored_flag(ignore)
}

fn main() -> std::process::ExitCode {
    install_recorder();
    let args = Arguments::from_args();
    let trials = vec![
        trial(
            "postgres15::a_manager_started_before_the_store_acquires_once_it_is_up",
            ServerKind::Postgres15,
            || manager_waits_for_the_store(ServerKind::Postgres15),
        ),
        trial(
            "etcd::a_manager_started_before_the_store_acquires_once_it_is_up",
            ServerKind::Etcd35,
            || manager_waits_for_the_store(ServerKind::Etcd35),
        ),
        trial(
            "postgres15::an_elector_started_before_the_store_leads_once_it_is_up",
            ServerKind::Postgres15,
            || elector_waits_for_the_store(ServerKind::Postgres15),
        ),
        trial(
            "a_deadline_that_passes_names_itself_and_the_last_cause",
            ServerKind::Postgres15,
            a_deadline_that_passes_names_itself_and_the_cause,
        ),
        trial(
            "etcd::a_store_that_does_not_answer_is_not_reached",
            ServerKind::Etcd35,
            an_etcd_that_does_not_answer_is_not_reached,
        ),
        trial(
            "postgres15::a_refusal_is_final_at_once",
            ServerKind::Postgres15,
            a_refusal_is_not_tried_again,
        ),
    ];
    libtest_mimic::run(&args, trials).exit_code()
}
