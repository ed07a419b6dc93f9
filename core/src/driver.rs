//! The tokio driver: runs the [`Machine`] against a real strategy and clock.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::cache;
use crate::clock::MonoTime;
use crate::config::{LeaseConfig, OnLost};
use crate::error::{Reason, StartError};
use crate::gate::LeaseGate;
use crate::machine::{Action, Input, LossEvent, Machine};
use crate::pool::PoolSpec;
use crate::strategy::{Fence, Release, Renewal, Strategy};

/// What the manager is doing, for applications that watch it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// Acquiring (first lease, or a new one after a loss). Generation is off.
    Acquiring,
    /// A lease is held: generation is on until `deadline` unless renewed.
    Held {
        /// The slot.
        slot: u32,
        /// Its fence.
        fence: Fence,
        /// The local deadline.
        deadline: MonoTime,
    },
    /// The lease was lost. Generation is off; a dynamic strategy re-acquires
    /// (the state moves to `Acquiring`), a deterministic one stays here.
    Lost(LossEvent),
    /// Shut down (or startup failed). Generation is off.
    Stopped,
}

/// Runs a lease in the background: blocks in [`LeaseManager::start`] until a
/// lease is held, renews it, re-acquires after a loss, releases on shutdown.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use leasehold_core::{LeaseConfig, LeaseManager, Memory};
/// let config = LeaseConfig::builder("machine-ids").pool_size(512).build()?;
/// let manager = LeaseManager::start(Memory::new(), config).await?;
/// let view = manager.gate().view();
/// println!("slot {} fence {}", view.slot, view.fence);
/// assert!(manager.gate().check_now().is_ok());
/// let gate = manager.gate();
/// manager.shutdown().await;
/// assert!(gate.check_now().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
/// ```
pub struct LeaseManager {
    gate: LeaseGate,
    state: watch::Receiver<LeaseState>,
    shutdown: watch::Sender<bool>,
    losses: LossSignal,
    task: Option<JoinHandle<Option<Release>>>,
    pool: PoolSpec,
    /// The lease cache treats this manager's grant as live while this exists.
    _alive: Arc<()>,
}

impl LeaseManager {
    /// Starts the driver and waits until the first lease is held, a final
    /// error occurs, or the acquire timeout passes (DESIGN.md, rule 6).
    pub async fn start<S: Strategy>(strategy: S, config: LeaseConfig) -> Result<Self, StartError> {
        let gate = LeaseGate::new();
        let alive = Arc::new(());
        let (state_tx, state_rx) = watch::channel(LeaseState::Acquiring);
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (loss_tx, loss_rx) = mpsc::unbounded_channel();
        let (started_tx, started_rx) = oneshot::channel();
        let seed = u64::from(std::process::id()) ^ MonoTime::now().as_nanos();
        let driver = Driver {
            machine: Machine::new(config.timing.clone(), strategy.deterministic(), seed),
            cache_key: (strategy.identity(), config.pool.name.to_string()),
            strategy,
            pool: config.pool.clone(),
            gate: gate.clone(),
            state: state_tx,
            on_lost: config.on_lost.clone(),
            started: Some(started_tx),
            alive: Arc::downgrade(&alive),
        };
        let task = tokio::spawn(driver.run(shutdown_rx, loss_rx));
        match started_rx.await {
            Ok(Ok(())) => Ok(Self {
                losses: LossSignal {
                    tx: loss_tx,
                    gate: gate.clone(),
                },
                gate,
                state: state_rx,
                shutdown: shutdown_tx,
                task: Some(task),
                pool: config.pool,
                _alive: alive,
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(StartError::Timeout {
                waited: config.timing.acquire_timeout,
                last: None,
            }),
        }
    }

    /// The lease gate to hand to generators.
    pub fn gate(&self) -> LeaseGate {
        self.gate.clone()
    }

    /// The current state.
    pub fn state(&self) -> LeaseState {
        self.state.borrow().clone()
    }

    /// A receiver that sees every state change.
    pub fn subscribe(&self) -> watch::Receiver<LeaseState> {
        self.state.clone()
    }

    /// A handle through which a store-side watch reports a loss as soon as
    /// it sees one, without waiting for the next renewal (see [`LossSignal`]).
    pub fn loss_signal(&self) -> LossSignal {
        self.losses.clone()
    }

    /// The pool this manager leases from.
    pub fn pool(&self) -> &PoolSpec {
        &self.pool
    }

    /// Closes the gate, then releases the lease. Returns the release outcome
    /// (`None` when no lease was held).
    pub async fn shutdown(mut self) -> Option<Release> {
        self.gate.close();
        self.shutdown.send_replace(true);
        match self.task.take() {
            Some(task) => task.await.ok().flatten(),
            None => None,
        }
    }
}

impl Drop for LeaseManager {
    /// Dropped without `shutdown`: generation stops and the driver is aborted.
    /// The lease is not released; it expires in the store, and a new manager
    /// for the same store and pool in this process renews it (lease cache).
    fn drop(&mut self) {
        self.gate.close();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl fmt::Debug for LeaseManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseManager")
            .field("pool", &self.pool.name)
            .field("state", &*self.state.borrow())
            .finish_non_exhaustive()
    }
}

/// Reports a loss the store announced on its own (an etcd watch saw the key
/// deleted, a Redis keyspace event...), so the manager does not wait for its
/// next renewal to find out.
///
/// `report` closes the gate at once if `epoch` is still the gate's current
/// epoch, then hands the loss to the driver, which runs the normal loss path:
/// loss callback, then re-acquisition. A report for an older epoch (a lease
/// already replaced) is ignored.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use leasehold_core::{LeaseConfig, LeaseManager, LeaseState, Memory, Reason};
/// let manager = LeaseManager::start(Memory::new(), LeaseConfig::builder("p").build()?).await?;
/// let epoch = manager.gate().view().epoch;
/// let mut states = manager.subscribe();
/// manager.loss_signal().report(epoch, Reason::new("key deleted"));
/// assert!(manager.gate().check_now().is_err() || manager.gate().view().epoch > epoch);
/// states.wait_for(|s| matches!(s, LeaseState::Lost(_) | LeaseState::Acquiring)).await?;
/// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
/// ```
#[derive(Clone, Debug)]
pub struct LossSignal {
    tx: mpsc::UnboundedSender<(u64, Reason)>,
    gate: LeaseGate,
}

impl LossSignal {
    /// The lease of gate epoch `epoch` is gone, for `reason`.
    pub fn report(&self, epoch: u64, reason: Reason) {
        if self.gate.view().epoch == epoch {
            self.gate.close();
        }
        let _ = self.tx.send((epoch, reason));
    }
}

/// Resolves when `shutdown` is called. A manager dropped without `shutdown`
/// never resolves it: its task is aborted and the lease is left to the cache.
async fn shutdown_requested(rx: &mut watch::Receiver<bool>) {
    loop {
        if *rx.borrow_and_update() {
            return;
        }
        if rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

struct Driver<S> {
    machine: Machine,
    strategy: S,
    pool: PoolSpec,
    gate: LeaseGate,
    state: watch::Sender<LeaseState>,
    on_lost: Option<OnLost>,
    started: Option<oneshot::Sender<Result<(), StartError>>>,
    cache_key: (String, String),
    /// Dead once the manager is dropped; the lease cache uses it to tell a
    /// live holder from an orphaned grant.
    alive: std::sync::Weak<()>,
}

macro_rules! event {
    ($($arg:tt)*) => {
        #[cfg(feature = "tracing")]
        tracing::event!($($arg)*);
    };
}

impl<S: Strategy> Driver<S> {
    async fn run(
        mut self,
        mut shutdown: watch::Receiver<bool>,
        mut losses: mpsc::UnboundedReceiver<(u64, Reason)>,
    ) -> Option<Release> {
        let mut pending: VecDeque<Action> =
            self.machine.handle(Input::Start, MonoTime::now()).into();
        let mut orphan = cache::take_orphan(&self.cache_key);
        let mut released = None;
        loop {
            while let Some(action) = pending.pop_front() {
                let input = match action {
                    Action::Acquire => {
                        let bound = self.call_bound();
                        tokio::select! {
                            input = self.acquire(orphan.take()) => Some(input),
                            _ = tokio::time::sleep_until(bound.into()) => Some(Input::AcquireFailed(
                                crate::AcquireError::Unreachable(Reason::new("acquire did not answer in time")),
                            )),
                            _ = shutdown_requested(&mut shutdown) => Some(Input::Shutdown),
                        }
                    }
                    Action::Renew(grant) => {
                        let bound = self.call_bound();
                        let sent_at = MonoTime::now();
                        tokio::select! {
                            r = self.strategy.renew(&self.pool, &grant) => Some(match r {
                                Renewal::Renewed { ttl } => Input::Renewed { ttl, sent_at },
                                Renewal::Lost(r) => Input::RenewLost(r),
                                Renewal::Retry(r) => Input::RenewRetry(r),
                            }),
                            _ = tokio::time::sleep_until(bound.into()) => Some(Input::RenewRetry(
                                Reason::new("renewal did not answer before the local deadline"),
                            )),
                            reason = self.current_loss(&mut losses) => Some(Input::RenewLost(reason)),
                            _ = shutdown_requested(&mut shutdown) => Some(Input::Shutdown),
                        }
                    }
                    Action::Open {
                        slot,
                        fence,
                        deadline,
                    } => {
                        self.gate.open(slot, fence, deadline);
                        if let Some((grant, _)) = self.machine.held() {
                            cache::put(self.cache_key.clone(), grant.clone(), &self.alive);
                        }
                        event!(tracing::Level::INFO, pool = %self.pool.name, slot, fence = fence.0, "lease acquired");
                        self.state.send_replace(LeaseState::Held {
                            slot,
                            fence,
                            deadline,
                        });
                        match self.started.take().map(|tx| tx.send(Ok(()))) {
                            // `start` was cancelled before the lease arrived:
                            // nobody will ever use or release it, so give it back.
                            Some(Err(_)) => Some(Input::Shutdown),
                            _ => None,
                        }
                    }
                    Action::Extend { deadline } => {
                        self.gate.extend(deadline);
                        self.state.send_modify(|s| {
                            if let LeaseState::Held { deadline: d, .. } = s {
                                *d = deadline;
                            }
                        });
                        None
                    }
                    Action::Close => {
                        self.gate.close();
                        None
                    }
                    Action::NotifyLost(event) => {
                        cache::forget(&self.cache_key, &self.alive);
                        event!(tracing::Level::WARN, pool = %self.pool.name, slot = event.slot, cause = ?event.cause, "lease lost; generation stopped");
                        if let Some(cb) = &self.on_lost {
                            cb(&event);
                        }
                        let reacquiring = event.reacquiring;
                        self.state.send_replace(LeaseState::Lost(event));
                        if reacquiring {
                            self.state.send_replace(LeaseState::Acquiring);
                        }
                        None
                    }
                    Action::Release(grant) => {
                        cache::forget(&self.cache_key, &self.alive);
                        let budget = self.machine.timing().ttl;
                        let outcome =
                            tokio::time::timeout(budget, self.strategy.release(&self.pool, &grant))
                                .await
                                .unwrap_or_else(|_| {
                                    Release::Retry(Reason::new("release timed out"))
                                });
                        event!(tracing::Level::INFO, pool = %self.pool.name, slot = grant.slot, ?outcome, "lease released");
                        released = Some(outcome);
                        None
                    }
                    Action::Fail(error) => {
                        self.state.send_replace(LeaseState::Stopped);
                        if let Some(tx) = self.started.take() {
                            let _ = tx.send(Err(error));
                        }
                        return None;
                    }
                    Action::Stop => {
                        self.gate.close();
                        self.state.send_replace(LeaseState::Stopped);
                        return released;
                    }
                };
                if let Some(input) = input {
                    pending.extend(self.machine.handle(input, MonoTime::now()));
                }
            }
            let input = match self.machine.next_wakeup() {
                Some(at) => tokio::select! {
                    _ = tokio::time::sleep_until(at.to_instant().into()) => Input::Tick,
                    reason = self.current_loss(&mut losses) => Input::RenewLost(reason),
                    _ = shutdown_requested(&mut shutdown) => Input::Shutdown,
                },
                None => tokio::select! {
                    reason = self.current_loss(&mut losses) => Input::RenewLost(reason),
                    _ = shutdown_requested(&mut shutdown) => Input::Shutdown,
                },
            };
            pending.extend(self.machine.handle(input, MonoTime::now()));
        }
    }

    /// The next reported loss that concerns the lease held now (reports for
    /// replaced leases are dropped).
    async fn current_loss(&self, losses: &mut mpsc::UnboundedReceiver<(u64, Reason)>) -> Reason {
        loop {
            match losses.recv().await {
                Some((epoch, reason))
                    if self.machine.held().is_some() && epoch == self.gate.view().epoch =>
                {
                    return reason;
                }
                Some(_) => {}
                None => std::future::pending::<()>().await,
            }
        }
    }

    /// Calls are bounded by the local deadline (or the acquire timeout); a
    /// re-acquisition after a loss is bounded by one TTL.
    fn call_bound(&self) -> std::time::Instant {
        let fallback = MonoTime::now() + self.machine.timing().ttl;
        self.machine
            .call_deadline()
            .unwrap_or(fallback)
            .to_instant()
    }

    async fn acquire(&self, orphan: Option<crate::Grant>) -> Input {
        if let Some(mut grant) = orphan {
            // A predecessor in this process held this grant: renew it rather
            // than take a new slot.
            let sent_at = MonoTime::now();
            if let Renewal::Renewed { ttl } = self.strategy.renew(&self.pool, &grant).await {
                grant.ttl = ttl;
                return Input::Acquired { grant, sent_at };
            }
        }
        let sent_at = MonoTime::now();
        match self.strategy.acquire(&self.pool).await {
            Ok(grant) => Input::Acquired { grant, sent_at },
            Err(e) => Input::AcquireFailed(e),
        }
    }
}
