//! The invoice scheduler of the leader examples, on any strategy.
//!
//! Six replicas of a billing service run in one process, each campaigning
//! for the one slot of a leader pool with its own connection
//! ([`Leader`]); whoever leads bills one "hour" after
//! another, each bill a write to a [`Ledger`] that checks fences. The run
//! checks what leader election promises: exactly one leader, every replica
//! observing it, a killed leader replaced by another with a bigger fence, and
//! the killed leader's late write refused by the ledger itself. The examples
//! of `leasehold-sql`, `leasehold-valkey` and `leasehold-etcd` supply the
//! strategy and a ledger in their store; their tests run the same against a
//! private server.

use std::future::Future;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use leasehold_core::{BoxFuture, Elector, Fence, FenceStamp, Leader, LeaderConfig, Strategy};

use crate::servers::{ProvideError, ServerKind, Settings, provide_with};

/// How many replicas campaign.
pub const REPLICAS: usize = 6;

/// Storage that checks fences (DESIGN.md, timing rule 7): it remembers the
/// stamp of its last writer and refuses an older fence (or one of another
/// pool or slot), in the same atomic step as the write.
pub trait Ledger: Send + Sync + 'static {
    /// Bills `hour` for `replica` carrying `stamp`: `Ok(true)` when written,
    /// `Ok(false)` when refused because a newer fence has written.
    fn bill<'a>(
        &'a self,
        hour: u32,
        replica: &'a str,
        stamp: &'a FenceStamp,
    ) -> BoxFuture<'a, Result<bool, String>>;
}

/// What a run saw.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// The leader that was killed, and its fence.
    pub first: (String, Fence),
    /// The leader after it, and its fence.
    pub second: (String, Fence),
    /// Hours billed (accepted writes).
    pub billed: u32,
    /// The killed leader's late write was refused.
    pub late_write_refused: bool,
}

/// The store an example was pointed at: `--url <url>` on the command line,
/// else the variable `env_var`.
pub fn url_arg(env_var: &str) -> Option<String> {
    std::env::args()
        .skip_while(|a| a != "--url")
        .nth(1)
        .or_else(|| std::env::var(env_var).ok())
}

/// An example's exit: success, or the error on one line and failure.
pub fn exit(result: Result<Report, String>) -> ExitCode {
    match result {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("leader example failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// For the examples' tests: runs `example` (an example's `run`, given the
/// URL) to completion on a multi-threaded runtime; panics with its error.
pub fn block_on<F, Fut>(url: String, example: F)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Result<Report, String>>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    if let Err(e) = runtime.block_on(example(url.clone())) {
        panic!("on {url}: {e}");
    }
}

/// For the examples' tests: [`block_on`] on a private server of `kind`
/// from the provider chain, with durable settings: the examples connect with
/// the library's defaults, as a user's would, and those refuse a store that
/// can forget acknowledged writes. A missing server is said loudly, and
/// fails under `CI=true`.
pub fn on_server<F, Fut>(kind: ServerKind, example: F)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Result<Report, String>>,
{
    match provide_with(kind, Settings::Durable) {
        Ok(server) => block_on(server.url.clone(), example),
        Err(ProvideError::Missing(missing)) if !crate::in_ci() => {
            eprintln!("NOT RUN on {}: {missing}", kind.name())
        }
        // Missing under CI, or a kind that cannot run durable (a test's
        // mistake): a failure either way.
        Err(e) => panic!("{e}"),
    }
}

/// The lease settings of a run: `ttl`, renewals every quarter of it.
fn config(pool: &str, replica: usize, ttl: Duration) -> Result<LeaderConfig, String> {
    LeaderConfig::builder(pool)
        .holder(format!("replica-{replica}"))
        .ttl(ttl)
        .renew_interval(ttl / 4)
        .safety_margin(ttl / 5)
        .acquire_timeout(ttl)
        .build()
        .map_err(|e| e.to_string())
}

/// State shared by the replicas of one run.
#[derive(Default)]
struct Shared {
    /// The next hour to bill.
    hour: AtomicU32,
    billed: AtomicU32,
    /// Terms won, in order: replica and stamp.
    terms: Mutex<Vec<(usize, FenceStamp)>>,
    /// An error a leader met (the ledger unreachable): ends the run.
    error: Mutex<Option<String>>,
    /// Two replicas were seen leading at once.
    two_leaders: AtomicBool,
}

impl Shared {
    fn terms(&self) -> Vec<(usize, Fence)> {
        self.stamps()
            .into_iter()
            .map(|(i, s)| (i, s.fence()))
            .collect()
    }

    fn stamps(&self) -> Vec<(usize, FenceStamp)> {
        self.terms
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Runs the scheduler: [`REPLICAS`] electors on the leader pool `pool`
/// (fresh per run) with leases of `ttl`, each on a strategy from `connect`,
/// billing to `ledger`. Prints what happens; `Err` says which promise was
/// broken, or that the store failed. Waits are bounded by generous
/// deadlines (a fixed 30 s plus 10 TTLs), never by sleeps.
pub async fn run<S, C, Fut, L>(
    pool: &str,
    ttl: Duration,
    mut connect: C,
    ledger: Arc<L>,
) -> Result<Report, String>
where
    S: Strategy,
    C: FnMut(usize) -> Fut,
    Fut: Future<Output = Result<S, String>>,
    L: Ledger,
{
    let shared = Arc::new(Shared::default());
    let mut electors: Vec<Option<Elector>> = Vec::with_capacity(REPLICAS);
    for i in 0..REPLICAS {
        let strategy = connect(i).await?;
        electors.push(Some(elector(
            strategy,
            config(pool, i, ttl)?,
            i,
            shared.clone(),
            ledger.clone(),
        )));
    }
    let outcome = act(&mut electors, &shared, ttl, ledger.as_ref()).await;
    for e in electors.into_iter().flatten() {
        e.shutdown().await;
    }
    let report = outcome?;
    if shared.two_leaders.load(Ordering::SeqCst) {
        return Err("two replicas led at once".into());
    }
    println!(
        "ok: one leader at a time ({} then {}), {} hours billed, the killed leader's late write \
         refused by its fence",
        report.first.0, report.second.0, report.billed
    );
    Ok(report)
}

/// One replica: campaigns, and bills while it leads.
fn elector<S: Strategy, L: Ledger>(
    strategy: S,
    config: LeaderConfig,
    i: usize,
    shared: Arc<Shared>,
    ledger: Arc<L>,
) -> Elector {
    let me = format!("replica-{i}");
    let every = config.timing().ttl() / 4;
    let on_start = shared.clone();
    let (who, who2) = (me.clone(), me.clone());
    Leader::builder(strategy, config)
        .observe_every(every)
        .on_started_leading(move |l| {
            println!("{who}: started leading with fence {}", l.fence());
            on_start
                .terms
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((i, l.stamp().clone()));
        })
        .on_stopped_leading(move || println!("{who2}: stopped leading"))
        .on_new_leader(move |info| {
            if i == 0 {
                println!(
                    "replicas observe a new leader: {} (fence {})",
                    info.holder, info.fence
                );
            }
        })
        .campaign(move |leadership| {
            let (shared, ledger, me) = (shared.clone(), ledger.clone(), me.clone());
            async move {
                while leadership.is_leading() {
                    let hour = shared.hour.load(Ordering::SeqCst);
                    match ledger.bill(hour, &me, leadership.stamp()).await {
                        Ok(true) => {
                            shared.hour.fetch_add(1, Ordering::SeqCst);
                            shared.billed.fetch_add(1, Ordering::SeqCst);
                        }
                        Ok(false) => {
                            println!("{me}: hour {hour} refused: a bigger fence has written");
                            break;
                        }
                        Err(e) => {
                            shared
                                .error
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .get_or_insert(e);
                            break;
                        }
                    }
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(25)) => {}
                        () = leadership.lost() => break,
                    }
                }
            }
        })
}

/// Which replicas lead now; notes two at once.
fn leading(electors: &[Option<Elector>], shared: &Shared) -> Vec<usize> {
    let now: Vec<usize> = electors
        .iter()
        .enumerate()
        .filter(|(_, e)| e.as_ref().is_some_and(Elector::is_leading))
        .map(|(i, _)| i)
        .collect();
    if now.len() > 1 {
        shared.two_leaders.store(true, Ordering::SeqCst);
    }
    now
}

/// Polls `done` every 10 ms until it answers, a leader met an error, an
/// elector stopped on a final error, or `limit` passes (then the error says
/// what every replica saw).
async fn wait_for<T>(
    what: &str,
    limit: Duration,
    electors: &[Option<Elector>],
    shared: &Shared,
    mut done: impl FnMut() -> Option<T>,
) -> Result<T, String> {
    let give_up = Instant::now() + limit;
    loop {
        if let Some(e) = shared
            .error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        {
            return Err(format!("the ledger failed: {e}"));
        }
        if let Some((i, e)) = electors
            .iter()
            .enumerate()
            .find_map(|(i, e)| Some((i, e.as_ref()?.error()?)))
        {
            return Err(format!("replica-{i} stopped campaigning: {e}"));
        }
        if let Some(v) = done() {
            return Ok(v);
        }
        if Instant::now() >= give_up {
            let seen: Vec<_> = electors
                .iter()
                .map(|e| e.as_ref().map(|e| (e.is_leading(), e.leader())))
                .collect();
            return Err(format!(
                "{what}: not within {limit:?}; terms {:?}, billed {}, replicas (leading, \
                 observed leader): {seen:?}",
                shared.terms(),
                shared.billed.load(Ordering::SeqCst)
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The replica leading now, if exactly one does, with the fence of its
/// current term.
fn current(electors: &[Option<Elector>], shared: &Shared) -> Option<(usize, Fence)> {
    let now = leading(electors, shared);
    let term = shared.terms().last().copied()?;
    (now == [term.0]).then_some(term)
}

/// Leadership may change hands at any time (a machine too slow to renew
/// loses its lease, and that is the design working), so every step reads
/// the leader anew; only what must never happen fails at once: two
/// leaders, a new fence not above the old, a stale write accepted.
async fn act<L: Ledger>(
    electors: &mut [Option<Elector>],
    shared: &Shared,
    ttl: Duration,
    ledger: &L,
) -> Result<Report, String> {
    let limit = Duration::from_secs(30) + ttl * 10;
    let name = |i: usize| format!("replica-{i}");
    let (leader, fence) = wait_for(
        "a leader that every replica observes",
        limit,
        electors,
        shared,
        || {
            let (i, fence) = current(electors, shared)?;
            electors
                .iter()
                .flatten()
                .all(|e| {
                    e.leader()
                        .is_some_and(|l| l.holder == name(i) && l.fence == fence)
                })
                .then_some((i, fence))
        },
    )
    .await?;
    println!(
        "all {REPLICAS} replicas observe {} as the leader (fence {fence})",
        name(leader)
    );
    wait_for("a bill", limit, electors, shared, || {
        (shared.billed.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await?;
    let (first, first_fence) = wait_for("a leader", limit, electors, shared, || {
        current(electors, shared)
    })
    .await?;
    println!(
        "{} (fence {first_fence}) is killed: no release, its lease runs out",
        name(first)
    );
    drop(electors[first].take());
    let (second, second_fence) = wait_for("a new leader", limit, electors, shared, || {
        current(electors, shared).filter(|(i, _)| *i != first)
    })
    .await?;
    println!("{} leads with fence {second_fence}", name(second));
    if second_fence <= first_fence {
        return Err(format!(
            "the new leader's fence {second_fence} is not above the killed leader's {first_fence}"
        ));
    }
    let billed = shared.billed.load(Ordering::SeqCst);
    wait_for("a bill by the new leader", limit, electors, shared, || {
        (shared.billed.load(Ordering::SeqCst) > billed).then_some(())
    })
    .await?;
    let hour = shared.hour.load(Ordering::SeqCst);
    let first_stamp = shared
        .stamps()
        .into_iter()
        .find(|(i, s)| *i == first && s.fence() == first_fence)
        .map(|(_, s)| s)
        .ok_or("the killed leader's term is not recorded")?;
    if ledger.bill(hour, &name(first), &first_stamp).await? {
        return Err(format!(
            "the killed leader's late write (fence {first_fence}) was accepted after fence \
             {second_fence} wrote"
        ));
    }
    println!(
        "{}'s late write for hour {hour} with fence {first_fence}: refused",
        name(first)
    );
    Ok(Report {
        first: (name(first), first_fence),
        second: (name(second), second_fence),
        billed: shared.billed.load(Ordering::SeqCst),
        late_write_refused: true,
    })
}
