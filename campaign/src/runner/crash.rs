//! A backend crash on PostgreSQL: one client backend SIGKILLed, aimed at a
//! fresh claim; the postmaster ends every other backend and recovers in
//! place, and what that did is recorded.

use std::time::{Duration, Instant};

use leasehold::sql::sqlx::{self, Connection, PgConnection, Row};

use super::serving::{Store, signal};

/// What one backend crash did.
pub(crate) struct Crash {
    /// The backend killed.
    pub(crate) pid: u32,
    /// Until the server accepted a connection again.
    pub(crate) recovery: Duration,
    /// The postmaster's start time did not move: crash recovery in place,
    /// not a restart (what the restart guard cannot see).
    pub(crate) in_place: bool,
    /// How long before the kill the newest claim of any slot was made.
    pub(crate) after_claim: Option<Duration>,
    /// The server came back without that claim: it forgot a lease it had
    /// granted (on PostgreSQL, only where the lease sessions commit
    /// asynchronously).
    pub(crate) forgot_claim: bool,
}

/// A backend crash is aimed at a claim younger than this: the moment a
/// server that forgets loses the most (a new holder generating on a claim
/// the server no longer has). A backend crash loses only the WAL not yet
/// written out of the server's buffers, which the WAL writer writes as soon
/// as a page is full: with the campaign's traffic, within a fraction of a
/// second.
pub(crate) const AIM_AFTER_CLAIM: Duration = Duration::from_millis(50);

/// The postmaster's start time: it moves on a restart, not on a crash
/// recovered in place.
const STARTED: &str = "SELECT CAST(pg_postmaster_start_time() AS TEXT)";

/// The newest claim of any slot.
const CLAIMS: &str = "SELECT CAST(max(acquired_at) AS TEXT) FROM leasehold_leases";

impl Store {
    /// SIGKILLs one client backend of a PostgreSQL server this process
    /// started: one serving the lease connections (`application_name =
    /// 'leasehold'`) where there is one, else any; `which` picks among them
    /// in the order of their process IDs. The kill waits (up to `aim`) for
    /// a claim younger than [`AIM_AFTER_CLAIM`] in the lease table. Returns
    /// once the server accepts connections again (it ends every other
    /// backend and replays its WAL in place), at most 60 s later.
    pub(crate) fn crash_backend(
        &self,
        which: usize,
        aim: Duration,
    ) -> Result<Option<Crash>, String> {
        let url = self.url.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async move {
            let (mut conn, before) = ready(&url).await?;
            let after_claim = aim_at_claim(&mut conn, aim).await?;
            let Some(pid) = pick_backend(&mut conn, which).await? else {
                return Ok(None);
            };
            let newest_before: Option<String> = sqlx::query_scalar(CLAIMS)
                .fetch_one(&mut conn)
                .await
                .map_err(|e| e.to_string())?;
            let _ = conn.close().await;
            let at = Instant::now();
            signal(pid, "KILL");
            let (after, newest_after) = recovered(&url, at, pid).await?;
            Ok(Some(Crash {
                pid,
                recovery: at.elapsed(),
                in_place: after == before,
                after_claim,
                forgot_claim: newest_after < newest_before,
            }))
        })
    }
}

/// A connection of the runner's own (not one the crash should hit).
async fn connect(url: &str) -> Result<PgConnection, String> {
    let opts: sqlx::postgres::PgConnectOptions = url
        .parse::<sqlx::postgres::PgConnectOptions>()
        .map_err(|e| format!("{url}: {e}"))?
        .application_name("campaign-runner");
    tokio::time::timeout(Duration::from_secs(5), PgConnection::connect_with(&opts))
        .await
        .map_err(|_| "no connection within 5 s".to_owned())?
        .map_err(|e| e.to_string())
}

/// A connection once the server lets clients in, and its postmaster's
/// start time. The server may still be recovering from an earlier fault (a
/// restart replays its WAL before it lets clients in).
async fn ready(url: &str) -> Result<(PgConnection, String), String> {
    let waiting = Instant::now();
    loop {
        let tried = async {
            let mut c = connect(url).await?;
            let t: String = sqlx::query_scalar(STARTED)
                .fetch_one(&mut c)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>((c, t))
        };
        match tried.await {
            Ok(ready) => return Ok(ready),
            Err(e) if waiting.elapsed() > Duration::from_secs(60) => {
                return Err(format!("the server did not let clients in for 60 s: {e}"));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Waits (up to `aim`) for a claim younger than [`AIM_AFTER_CLAIM`];
/// returns the age of the newest claim (none before the first).
async fn aim_at_claim(conn: &mut PgConnection, aim: Duration) -> Result<Option<Duration>, String> {
    // The age of the newest claim, in µs.
    let newest = "SELECT CAST(EXTRACT(EPOCH FROM (CURRENT_TIMESTAMP(6) - max(acquired_at))) \
                  * 1000000 AS BIGINT) FROM leasehold_leases";
    let aiming = Instant::now();
    loop {
        let age: Option<i64> = sqlx::query_scalar(newest)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| e.to_string())?;
        let age = age.map(|us| Duration::from_micros(us.max(0).unsigned_abs()));
        if age.is_some_and(|a| a <= AIM_AFTER_CLAIM) || aiming.elapsed() >= aim {
            return Ok(age);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The backend to kill: the `which`-th of the lease connections' backends
/// (in the order of their process IDs) where there is one, else of any
/// client backend's; none when there is no other client.
async fn pick_backend(conn: &mut PgConnection, which: usize) -> Result<Option<u32>, String> {
    let rows = sqlx::query(
        "SELECT pid, application_name = 'leasehold' AS lease FROM pg_stat_activity \
         WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() ORDER BY pid",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| e.to_string())?;
    let all: Vec<(i32, bool)> = rows
        .iter()
        .map(|r| (r.get::<i32, _>(0), r.get::<bool, _>(1)))
        .collect();
    let lease: Vec<i32> = all.iter().filter(|(_, l)| *l).map(|(p, _)| *p).collect();
    let pool = if lease.is_empty() {
        all.iter().map(|(p, _)| *p).collect()
    } else {
        lease
    };
    Ok(pool
        .get(which % pool.len().max(1))
        .map(|pid| pid.unsigned_abs()))
}

/// Waits (at most 60 s after the kill at `at`) until the server accepts
/// connections again; returns its postmaster's start time and its newest
/// claim then.
async fn recovered(url: &str, at: Instant, pid: u32) -> Result<(String, Option<String>), String> {
    // The postmaster notices the crash, ends every backend and recovers;
    // until then connections fail or are refused.
    tokio::time::sleep(Duration::from_millis(20)).await;
    loop {
        if at.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "the server did not accept connections within 60 s of killing backend {pid}"
            ));
        }
        if let Ok(mut c) = connect(url).await
            && let Ok(t) = sqlx::query_scalar::<_, String>(STARTED)
                .fetch_one(&mut c)
                .await
            && let Ok(newest) = sqlx::query_scalar::<_, Option<String>>(CLAIMS)
                .fetch_one(&mut c)
                .await
        {
            let _ = c.close().await;
            return Ok((t, newest));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
