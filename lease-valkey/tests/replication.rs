//! What connect reads of a replicated server, on two private durable Valkey
//! 8.1 servers, one made the other's replica (`REPLICAOF`): a plain URL
//! naming the replica is refused; the primary, which confirms writes
//! without its replica (`min-replicas-to-write 0`), can split brain (after
//! a failover it goes on confirming claims and renewals to the clients a
//! partition left with it): connect reports it with the setting that closes
//! it, and refuses it when asked to (`refuse_split_brain`). With
//! `min-replicas-to-write 1`, or claims that wait for a replica, it cannot;
//! and a renewal the primary then refuses for want of replicas
//! (`NOREPLICAS`) is retried, never confirmed.
//!
//! And what the claims and renewals read again later, at most once per
//! quarter TTL: settings weakened after connect (`CONFIG SET`) refuse new
//! claims until restored, and a primary made a writable replica confirms
//! no renewal.

use std::time::{Duration, Instant};

use fred::prelude::{ClientLike, Config};
use fred::types::{Builder, ClusterHash, CustomCommand, Value};
use leasehold_conformance::fresh_pool;
use leasehold_conformance::restarts::acquire_past_the_restart_guard;
use leasehold_conformance::servers::{Server, ServerKind, Settings, provide_with};
use leasehold_core::operate::doctor;
use leasehold_core::{AcquireError, Check, Floor, Renewal, Strategy, Verdict};
use leasehold_valkey::{ValkeyConfig, ValkeyError, ValkeyStrategy};

/// A primary and its replica, each a private durable server.
struct Pair {
    primary: Server,
    replica: Server,
}

impl Pair {
    /// Starts both and makes the second the first's replica; waits until
    /// the primary counts it. `None` (a SKIPPED line) where Valkey is not
    /// installed; under CI a missing server fails.
    async fn start() -> Option<Self> {
        let start = || provide_with(ServerKind::Valkey8, Settings::Durable);
        let (primary, replica) = match (start(), start()) {
            (Ok(p), Ok(r)) => (p, r),
            (Err(e), _) | (_, Err(e)) => {
                if std::env::var("CI").is_ok_and(|v| v == "true") {
                    panic!("no Valkey 8 under CI: {e}");
                }
                eprintln!("SKIPPED (no Valkey 8 here): {e}");
                return None;
            }
        };
        let (p, r) = (primary.addr().unwrap(), replica.addr().unwrap());
        assert_ne!(p, r, "two servers are needed, one the other's replica");
        let pair = Self { primary, replica };
        let port = p.port().to_string();
        let host = p.ip().to_string();
        pair.replica_cmd(&["REPLICAOF", &host, &port]).await;
        pair.wait_info("connected_slaves:1", "the replica to connect")
            .await;
        Some(pair)
    }

    fn url(server: &Server, options: &str) -> String {
        format!(
            "{}?prefix=lhreplication&op_timeout=5s{options}",
            server.store_url()
        )
    }

    fn primary_url(&self, options: &str) -> String {
        Self::url(&self.primary, options)
    }

    fn replica_url(&self, options: &str) -> String {
        Self::url(&self.replica, options)
    }

    async fn primary_cmd(&self, args: &[&str]) -> Value {
        command(&self.primary.url, args).await
    }

    async fn replica_cmd(&self, args: &[&str]) -> Value {
        command(&self.replica.url, args).await
    }

    /// Polls the primary's `INFO replication` until it holds `line`.
    async fn wait_info(&self, line: &str, what: &str) {
        let limit = Instant::now() + Duration::from_secs(60);
        loop {
            let info = self.primary_cmd(&["INFO", "replication"]).await;
            let text = info.as_string().unwrap_or_default();
            if text.lines().any(|l| l.trim() == line) {
                return;
            }
            assert!(Instant::now() < limit, "waited 60 s for {what}: {text}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// One command to the server at `url`, on a connection of its own.
async fn command(url: &str, args: &[&str]) -> Value {
    let client = Builder::from_config(Config::from_url(url).unwrap())
        .build()
        .unwrap();
    client.init().await.unwrap();
    let (name, rest) = args.split_first().unwrap();
    let cmd = CustomCommand::new(name.to_string(), ClusterHash::Random, false);
    let rest: Vec<String> = rest.iter().map(|a| (*a).to_owned()).collect();
    let answer = client
        .custom::<Value, String>(cmd, rest)
        .await
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    let _ = client.quit().await;
    answer
}

async fn connect(url: &str) -> Result<ValkeyStrategy, ValkeyError> {
    ValkeyStrategy::connect(ValkeyConfig::from_url(url)?).await
}

/// The doctor's `replication` line for `s`.
async fn replication_line(s: &ValkeyStrategy) -> Check {
    doctor(s)
        .await
        .into_iter()
        .find(|c| c.name == "replication")
        .expect("a replication line")
}

/// A slot of `pool` held on `s`: the fresh pool declared new, so that its
/// first claim is not held back as a possibly wiped pool's, and claimed
/// once the server's start no longer holds claims back (every restart,
/// the first included, does for one span).
async fn hold(s: &ValkeyStrategy, pool: &leasehold_core::PoolSpec) -> leasehold_core::Grant {
    s.declare_new_pool(pool)
        .await
        .expect("declare the fresh pool new");
    acquire_past_the_restart_guard(s, pool, Floor::NONE)
        .await
        .expect("a claim")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_url_naming_a_replica_is_refused() {
    let Some(pair) = Pair::start().await else {
        return;
    };
    match connect(&pair.replica_url("")).await {
        Err(e @ ValkeyError::Replica { .. }) => {
            let text = e.to_string();
            assert!(text.contains("is a replica of"), "{text}");
            assert!(text.contains("redis-sentinel://"), "{text}");
        }
        Err(e) => panic!("a replica must be refused as one: {e:?}"),
        Ok(s) => panic!("a replica was accepted: {:?}", s.replication()),
    }
    // An operator's look keeps the refusal: the doctor FAILs the
    // replication line, and a claim answers it.
    let config = ValkeyConfig::from_url(&pair.replica_url(""))
        .unwrap()
        .refuse_at_connect(false);
    let s = ValkeyStrategy::connect(config).await.expect("a look");
    let line = replication_line(&s).await;
    assert_eq!(line.verdict, Verdict::Fail, "{line}");
    assert!(line.detail.contains("is a replica"), "{line}");
    let pool = fresh_pool(1, Duration::from_secs(10)).unwrap();
    match s.acquire(&pool, Floor::NONE).await {
        Err(AcquireError::Misconfigured { what, .. }) => {
            assert!(what.contains("is a replica"), "{what}");
        }
        other => panic!("a claim on a replica must be refused: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_that_writes_without_its_replica_can_split_brain_reported_or_refused() {
    let Some(pair) = Pair::start().await else {
        return;
    };
    let s = connect(&pair.primary_url("")).await.expect("a primary");
    let risk = s.replication().split_brain.clone().expect("a split brain");
    assert_eq!(
        (risk.setting.as_str(), risk.value.as_str()),
        ("min-replicas-to-write", "0")
    );
    let line = replication_line(&s).await;
    assert_eq!(line.verdict, Verdict::Warn, "{line}");
    let fix = line.fix.clone().unwrap_or_default();
    assert!(fix.contains("min-replicas-to-write 1"), "{line}");
    assert!(fix.contains("refuse_split_brain=true"), "{line}");
    match connect(&pair.primary_url("&refuse_split_brain=true")).await {
        Err(e @ ValkeyError::SplitBrain(_)) => {
            assert!(e.to_string().contains("min-replicas-to-write"), "{e}");
        }
        Err(e) => panic!("expected a split-brain refusal: {e:?}"),
        Ok(s) => panic!("refuse_split_brain accepted {:?}", s.replication()),
    }
    // Claims that wait for a replica close it too.
    let waiting = ValkeyConfig::from_url(&pair.primary_url("&refuse_split_brain=true"))
        .unwrap()
        .wait_for_replicas(1, Duration::from_secs(1));
    let s = ValkeyStrategy::connect(waiting)
        .await
        .expect("claims that wait for a replica cannot split brain");
    assert!(
        s.replication().split_brain.is_none(),
        "{:?}",
        s.replication()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_min_replicas_to_write_the_primary_cannot_split_brain_and_its_refusals_are_retried() {
    let Some(pair) = Pair::start().await else {
        return;
    };
    for (name, value) in [
        ("min-replicas-max-lag", "1"),
        ("min-replicas-to-write", "1"),
    ] {
        pair.primary_cmd(&["CONFIG", "SET", name, value]).await;
    }
    pair.wait_info("min_slaves_good_slaves:1", "the replica to count as good")
        .await;
    let s = connect(&pair.primary_url("&refuse_split_brain=true"))
        .await
        .expect("a primary that needs a replica to write");
    assert!(
        s.replication().split_brain.is_none(),
        "{:?}",
        s.replication()
    );
    let line = replication_line(&s).await;
    assert_eq!(line.verdict, Verdict::Ok, "{line}");

    // The primary loses its replica: it refuses writes (NOREPLICAS), and
    // a renewal it refuses is a Retry, a claim a retryable error.
    let pool = fresh_pool(2, Duration::from_secs(10)).unwrap();
    let grant = hold(&s, &pool).await;
    pair.replica_cmd(&["REPLICAOF", "NO", "ONE"]).await;
    pair.wait_info("min_slaves_good_slaves:0", "the replica to be gone")
        .await;
    let renewal = s.renew(&pool, &grant, Floor::NONE).await;
    assert!(
        matches!(renewal, Renewal::Retry { .. }),
        "a renewal the primary refuses for want of replicas must be retried: {renewal:?}"
    );
    match s.acquire(&pool, Floor::NONE).await {
        Err(e) => assert!(e.is_retryable(), "{e:?}"),
        Ok(g) => panic!("a claim was granted without a replica: {g:?}"),
    }
}

/// Polls `what` (a claim or a renewal, answered as text) until `done` holds
/// for its answer, or fails after `limit`: the watch reads the settings
/// again at most once per quarter TTL (at least a second apart), so a
/// change is seen after a number of operations no test can fix in advance.
async fn until<F, Fut>(
    limit: Duration,
    what: &str,
    mut op: F,
    done: impl Fn(&str) -> bool,
) -> String
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = String>,
{
    let deadline = Instant::now() + limit;
    loop {
        let answer = op().await;
        if done(&answer) {
            return answer;
        }
        assert!(
            Instant::now() < deadline,
            "waited {limit:?} for {what}; the last answer: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A claim on `s`, as text; a granted slot is released at once, so that
/// the pool never fills.
async fn claim_text(s: &ValkeyStrategy, pool: &leasehold_core::PoolSpec) -> String {
    match s.acquire(pool, Floor::NONE).await {
        Ok(g) => {
            let _ = s.release(pool, &g, Floor::NONE).await;
            "granted".to_owned()
        }
        Err(e) => format!("{e:?}: {e}"),
    }
}

/// An operator weakens a durable server after connect, with `CONFIG SET`
/// and without a restart: the settings read at connect no longer hold.
/// Each weakening is seen by the next claims (the settings are read again
/// at most once per quarter TTL) and refused as connect would refuse it,
/// naming the setting, until the setting is restored. Renewals go on
/// meanwhile: a held lease is not endangered by what a crash could lose,
/// because the restart guard holds claims back after any restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_weakened_after_connect_refuse_new_claims_until_restored_while_renewals_go_on() {
    let server = match provide_with(ServerKind::Valkey8, Settings::Durable) {
        Ok(server) => server,
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("no Valkey 8 under CI: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED (no Valkey 8 here): {e}");
            return;
        }
    };
    let s = connect(&Pair::url(&server, ""))
        .await
        .expect("a durable server");
    assert!(s.persistence().keeps_every_write(), "{}", s.persistence());
    let pool = fresh_pool(4, Duration::from_secs(4)).unwrap();
    let held = hold(&s, &pool).await;
    let limit = Duration::from_secs(30);
    for (setting, weak, durable) in [
        ("appendonly", "no", "yes"),
        ("no-appendfsync-on-rewrite", "yes", "no"),
        ("maxmemory-policy", "allkeys-lru", "noeviction"),
    ] {
        command(&server.url, &["CONFIG", "SET", setting, weak]).await;
        // Each try renews the held lease too: renewals go on throughout
        // (a renewal not confirmed is retried; a lost lease fails).
        let renewed = std::sync::atomic::AtomicUsize::new(0);
        let renew_and_claim = || async {
            match s.renew(&pool, &held, Floor::NONE).await {
                Renewal::Renewed { .. } => {
                    renewed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Renewal::Lost(why) => {
                    panic!("the held lease was lost after CONFIG SET {setting} {weak}: {why}")
                }
                _ => {}
            }
            claim_text(&s, &pool).await
        };
        let refused = until(
            limit,
            &format!("a claim refused after CONFIG SET {setting} {weak}"),
            renew_and_claim,
            |a| a.starts_with("Misconfigured"),
        )
        .await;
        assert!(refused.contains(setting), "{refused}");
        let check = if setting == "maxmemory-policy" {
            "eviction"
        } else {
            "persistence"
        };
        let line = doctor(&s)
            .await
            .into_iter()
            .find(|c| c.name == check)
            .expect("the doctor's line");
        assert_eq!(line.verdict, Verdict::Fail, "{line}");
        command(&server.url, &["CONFIG", "SET", setting, durable]).await;
        until(
            limit,
            &format!("a claim granted after CONFIG SET {setting} {durable}"),
            renew_and_claim,
            |a| a == "granted",
        )
        .await;
        assert!(
            renewed.load(std::sync::atomic::Ordering::Relaxed) > 0,
            "no renewal was confirmed after CONFIG SET {setting} {weak}"
        );
    }
}

/// The server a process connected to as a primary becomes a replica of
/// another (an operator swapped their roles), and it is writable
/// (`replica-read-only no`), so it would confirm renewals that the new
/// primary never sees. Once the settings are read again, renewals are
/// retried, not confirmed, and claims are refused; when the server is a
/// primary again, both resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_made_a_writable_replica_after_connect_confirms_no_renewal() {
    let Some(pair) = Pair::start().await else {
        return;
    };
    let s = connect(&pair.primary_url("")).await.expect("the primary");
    let pool = fresh_pool(2, Duration::from_secs(12)).unwrap();
    let held = hold(&s, &pool).await;
    // The replica has the lease; the roles are swapped.
    pair.primary_cmd(&["WAIT", "1", "5000"]).await;
    pair.replica_cmd(&["REPLICAOF", "NO", "ONE"]).await;
    pair.primary_cmd(&["CONFIG", "SET", "replica-read-only", "no"])
        .await;
    let (host, port) = {
        let addr = pair.replica.addr().unwrap();
        (addr.ip().to_string(), addr.port().to_string())
    };
    pair.primary_cmd(&["REPLICAOF", &host, &port]).await;
    pair.wait_info("master_link_status:up", "the old primary to follow the new")
        .await;
    let limit = Duration::from_secs(30);
    let renew_text = || async {
        match s.renew(&pool, &held, Floor::NONE).await {
            Renewal::Renewed { .. } => "renewed".to_owned(),
            other => format!("{other:?}"),
        }
    };
    let retried = until(
        limit,
        "a renewal retried on the server made a replica",
        renew_text,
        |a| a.starts_with("Retry"),
    )
    .await;
    assert!(retried.contains("replica"), "{retried}");
    let refused = claim_text(&s, &pool).await;
    assert!(
        refused.starts_with("Misconfigured") && refused.contains("replica"),
        "{refused}"
    );
    pair.primary_cmd(&["REPLICAOF", "NO", "ONE"]).await;
    // Its lease may have run out meanwhile (the new primary expired it and
    // told its replica): a claim shows that the server is trusted again.
    until(
        limit,
        "a claim once the server is a primary again",
        || claim_text(&s, &pool),
        |a| a == "granted",
    )
    .await;
}
