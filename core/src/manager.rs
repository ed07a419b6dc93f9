//! The lease manager's tokio task: runs the [`Machine`] against a real strategy and clock.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::cache;
use crate::clock::{Clock, MonoTime, SystemClock};
use crate::config::{LeaseConfig, check_margin};
use crate::error::{AcquireError, ConfigError, Reason, StartError};
use crate::events::{Acquired, LeaseEvent, Renewed, Sink, WaitCause, Waiting, panic_message};
use crate::gate::{LeaseGate, Opening};
use crate::health::{Health, Track, assess};
use crate::loss::LossEvent;
use crate::machine::{Action, Input, Machine};
use crate::opening::{OpenStore, StoreWait};
use crate::pool::PoolSpec;
use crate::strategy::{BoxFuture, Fence, Floor, Grant, Release, Renewal, Strategy};
use crate::telemetry::Telemetry;
use crate::token::Token;

#[cfg(feature = "tracing")]
fn manager_span(pool: &PoolSpec) -> tracing::Span {
    Telemetry::new(pool).span()
}

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
    /// The subscribers' channel of the task's events.
    events: broadcast::Sender<LeaseEvent>,
    /// The subscription made before the task started, for the first
    /// call of `events`.
    first_events: Mutex<Option<broadcast::Receiver<LeaseEvent>>>,
    /// What the task knows beyond the gate, for `health`.
    track: Arc<Mutex<Track>>,
    /// The wall clock of ceilings and floors.
    clock: Arc<dyn Clock>,
    shutdown: watch::Sender<bool>,
    losses: LossSignal,
    task: Option<JoinHandle<Option<Release>>>,
    pool: PoolSpec,
    /// The lease cache treats this manager's grant as live while this exists.
    _alive: Arc<()>,
}

impl LeaseManager {
    /// Starts the task and waits until the first lease is held, a final
    /// error occurs, or the acquire timeout passes (DESIGN.md, rule 6).
    ///
    /// `store` is a connected strategy, or a store to connect first (the
    /// `leasehold` crate's `StoreConfig`: [`OpenStore`]). A store that is
    /// not reachable yet is tried again, with the configuration's backoff,
    /// until the acquire timeout has passed ([`StartError::StoreUnreachable`]),
    /// unless it carries a wait of its own; a store that refuses
    /// (credentials, permissions, settings that can lose leases) stops the
    /// start at once ([`StartError::StoreRefused`]). The acquire timeout
    /// then counts again for the first lease.
    ///
    /// The configuration is checked against what the strategy supports
    /// first: a pool larger than its `max_pool_size`, or a safety margin
    /// below [`min_safety_margin`](crate::min_safety_margin) with the store's
    /// time resolution, is a [`StartError::Config`].
    pub fn start<O: OpenStore>(
        store: O,
        config: LeaseConfig,
    ) -> impl Future<Output = Result<Self, StartError>> + Send {
        let wait = StoreWait::within(config.timing.acquire_timeout())
            .backoff(config.timing.backoff_initial(), config.timing.backoff_max());
        // Opened outside the state machine below, which is generic over the
        // strategy itself: its `Send` then holds for every strategy, trait
        // objects included.
        Self::start_opening(store.open(wait), config)
    }

    async fn start_opening<S: Strategy>(
        opening: BoxFuture<'static, Result<S, StartError>>,
        config: LeaseConfig,
    ) -> Result<Self, StartError> {
        let strategy = opening.await?;
        Self::start_on(strategy, config).await
    }

    async fn start_on<S: Strategy>(strategy: S, config: LeaseConfig) -> Result<Self, StartError> {
        let caps = strategy.capabilities();
        if config.pool.size > caps.max_pool_size {
            return Err(StartError::Config(ConfigError::new(
                "pool_size",
                config.pool.size.to_string(),
                format!("1 to {} (the most this store supports)", caps.max_pool_size),
            )));
        }
        check_margin(
            config.timing.ttl(),
            config.timing.safety_margin(),
            caps.time_resolution,
        )
        .map_err(StartError::Config)?;
        // Before the first ceiling is reported (the gate does it again with
        // every grant): no wall-clock step larger than this lease's skew is
        // followed before it settles (DESIGN.md, rule 10).
        SystemClock::limit_wall_clock_steps(config.timing.max_clock_skew());
        let gate = LeaseGate::new();
        if let Some(format) = config.pool.id_format() {
            gate.declare_form(format.code());
        }
        let alive = Arc::new(());
        let (state_tx, state_rx) = watch::channel(LeaseState::Acquiring);
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (loss_tx, loss_rx) = mpsc::unbounded_channel();
        let (started_tx, mut started_rx) = oneshot::channel();
        let sink = Sink::new(config.hooks.clone(), config.events.clone());
        let events = sink.tx.clone();
        let first_events = Mutex::new(Some(events.subscribe()));
        let track = Arc::new(Mutex::new(Track {
            since: Some(MonoTime::now()),
            ..Track::default()
        }));
        let seed = u64::from(std::process::id()) ^ MonoTime::now().as_nanos();
        let task = Task {
            machine: Machine::new(config.timing.clone(), caps.deterministic, seed)
                .with_store_resolution(caps.time_resolution),
            // One logical holder per (store, pool, holder identity): a task
            // restarted with the same holder renews its predecessor's lease;
            // replicas with different holders in one process never share it.
            cache_key: (
                strategy.identity(),
                format!("{}\u{0}{}", config.pool.name, config.pool.holder),
            ),
            strategy,
            pool: config.pool.clone(),
            gate: gate.clone(),
            state: state_tx,
            sink,
            track: track.clone(),
            started: Some(started_tx),
            alive: Arc::downgrade(&alive),
            opened: None,
            cached: None,
            telemetry: Telemetry::new(&config.pool),
            clock: config.clock.clone(),
            acquire_latency: std::time::Duration::ZERO,
            orphan: None,
            released: None,
        };
        #[cfg(feature = "tracing")]
        let run = tracing::Instrument::instrument(
            task.run(shutdown_rx, loss_rx),
            manager_span(&config.pool),
        );
        #[cfg(not(feature = "tracing"))]
        let run = task.run(shutdown_rx, loss_rx);
        let mut task = tokio::spawn(run);
        // Until `start` returns a manager, dropping this future (a timeout, a
        // lost `select!`) must not leave a task nobody can stop: the guard
        // then asks it to shut down, which closes the gate and gives back
        // whatever lease it holds.
        let mut starting = Starting {
            shutdown: Some(shutdown_tx),
            gate: gate.clone(),
        };
        let started = match (&mut started_rx).await {
            Ok(answer) => Some(answer),
            // The task ended without answering: find out whether it panicked.
            Err(_) => match (&mut task).await {
                Err(e) if e.is_panic() => {
                    return Err(StartError::Panicked(panic_message(e.into_panic())));
                }
                _ => None,
            },
        };
        match started {
            Some(Ok(())) => Ok(Self {
                losses: LossSignal {
                    tx: loss_tx,
                    gate: gate.clone(),
                },
                gate,
                state: state_rx,
                events,
                first_events,
                track,
                clock: config.clock.clone(),
                shutdown: starting.disarm(),
                task: Some(task),
                pool: config.pool,
                _alive: alive,
            }),
            Some(Err(e)) => Err(e),
            None => Err(StartError::Timeout {
                waited: config.timing.acquire_timeout(),
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

    /// A receiver that sees every state change. A renewal changes the
    /// state too (its `deadline`): for what happens to the lease (acquired,
    /// lost, waiting), with renewals only when asked for, see
    /// [`LeaseManager::events`].
    pub fn subscribe(&self) -> watch::Receiver<LeaseState> {
        self.state.clone()
    }

    /// A subscription to this manager's [`LeaseEvent`]s: acquired, lost
    /// (with its cause), waiting (the store's restart guard, a new grant's
    /// floor), and renewed when the configuration asks for it
    /// ([`report_renewals`](crate::LeaseConfigBuilder::report_renewals)).
    /// The first call's subscription begins with `start` (its first event
    /// is the first lease's [`LeaseEvent::Acquired`], after any waiting
    /// `start` did); a later call's with the call.
    ///
    /// The task never waits for a subscriber: one that falls more than
    /// [`SUBSCRIPTION_CAPACITY`](crate::events::SUBSCRIPTION_CAPACITY)
    /// events behind loses the oldest, and its next `recv` answers
    /// `RecvError::Lagged(n)` with how many (see the [`events`](crate::events)
    /// module). `recv` answers `RecvError::Closed` once the manager is
    /// gone.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use leasehold_core::{LeaseConfig, LeaseEvent, LeaseManager, Memory, Reason};
    /// let manager = LeaseManager::start(Memory::new(), LeaseConfig::builder("ids").build()?).await?;
    /// let mut events = manager.events();
    /// // The lease `start` waited for.
    /// assert!(matches!(events.recv().await?, LeaseEvent::Acquired(_)));
    /// let epoch = manager.gate().view().epoch;
    /// manager.loss_signal().report(epoch, Reason::new("the key was deleted"));
    /// match events.recv().await? {
    ///     LeaseEvent::Lost(loss) => assert!(loss.reacquiring),
    ///     other => panic!("{other:?}"),
    /// }
    /// assert!(matches!(events.recv().await?, LeaseEvent::Acquired(_)));
    /// manager.shutdown().await;
    /// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
    /// ```
    pub fn events(&self) -> broadcast::Receiver<LeaseEvent> {
        self.first_events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .unwrap_or_else(|| self.events.subscribe())
    }

    /// Readiness and liveness now (see [`Health`]): ready when a lease is
    /// held and this host's clock has passed its floor (generation would
    /// succeed); otherwise why not, since when or until when, and a
    /// `Retry-After`. Live while the task runs and can still acquire (it
    /// has not panicked, and a fixed slot was not lost for good).
    ///
    /// A plain value: any HTTP framework turns it into a response
    /// ([`Health::status`], a `Retry-After` header of
    /// [`Health::retry_after_secs`], [`Health::reason`] as the body; for
    /// liveness [`Health::live_status`]). A whole axum service with
    /// `/readyz`, `/livez` and an ID endpoint is the `leasehold` crate's
    /// `examples/id_service.rs`, which its tests run.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use leasehold_core::{LeaseConfig, LeaseManager, Memory};
    /// let manager = LeaseManager::start(Memory::new(), LeaseConfig::builder("ids").build()?).await?;
    /// let health = manager.health();
    /// assert!(health.ready && health.live);
    /// assert_eq!((health.status, health.retry_after), (200, None));
    /// manager.shutdown().await;
    /// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
    /// ```
    pub fn health(&self) -> Health {
        let now = MonoTime::now();
        let track = self
            .track
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let alive = self.task.as_ref().is_some_and(|t| !t.is_finished());
        assess(
            &self.gate.view(),
            Some(&track),
            alive,
            self.clock.unix_offset(false),
            SystemClock::wall_clock_step(),
            now,
        )
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
    /// Dropped without `shutdown`: generation stops for good (the gate is
    /// retired, so a task that is opening a grant on another thread at this
    /// very moment cannot reopen it) and the task is aborted. The lease is
    /// not released; it expires in the store, and a new manager for the same
    /// store and pool in this process renews it (lease cache).
    fn drop(&mut self) {
        self.gate.retire();
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

/// Shuts the task down if `start` is dropped before it returns a manager.
struct Starting {
    shutdown: Option<watch::Sender<bool>>,
    gate: LeaseGate,
}

impl Starting {
    /// `start` returns a manager: it owns the task from now on.
    fn disarm(&mut self) -> watch::Sender<bool> {
        self.shutdown
            .take()
            .unwrap_or_else(|| watch::channel(true).0)
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            self.gate.close();
            shutdown.send_replace(true);
        }
    }
}

/// Reports a loss the store announced on its own (an etcd watch saw the key
/// deleted, a Redis keyspace event...), so the manager does not wait for its
/// next renewal to find out.
///
/// `report` closes the gate at once if `epoch` is still the gate's current
/// epoch (atomically: a newer grant opening meanwhile stays open), then hands
/// the loss to the task, which runs the normal loss path: loss callback,
/// then re-acquisition. A report for an older epoch (a lease already
/// replaced) is ignored.
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
        if self.gate.close_if_epoch(epoch) {
            let _ = self.tx.send((epoch, reason));
        }
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

struct Task<S> {
    machine: Machine,
    strategy: S,
    pool: PoolSpec,
    gate: LeaseGate,
    state: watch::Sender<LeaseState>,
    /// The callbacks and the subscribers.
    sink: Sink,
    /// What `health` reads beyond the gate.
    track: Arc<Mutex<Track>>,
    started: Option<oneshot::Sender<Result<(), StartError>>>,
    cache_key: (String, String),
    /// Dead once the manager is dropped; the lease cache uses it to tell a
    /// live holder from an orphaned grant.
    alive: std::sync::Weak<()>,
    /// The token of the grant the gate was last opened with.
    opened: Option<Token>,
    /// The token of the grant this task put into the lease cache.
    cached: Option<Token>,
    telemetry: Telemetry,
    /// How long the last acquisition took.
    acquire_latency: std::time::Duration,
    /// A grant a dropped predecessor in this process left in the lease
    /// cache, given back before the first acquisition.
    orphan: Option<(Grant, LeaseGate)>,
    /// The outcome of the last release, returned by `shutdown`.
    released: Option<Release>,
    /// The wall clock of ceilings and floors (`LeaseConfigBuilder::clock`).
    clock: Arc<dyn Clock>,
}

/// What the task does after performing one action.
enum Step {
    /// Nothing to tell the machine.
    Done,
    /// Feed this input to the machine; its actions follow the queued ones.
    Feed(Input),
    /// Shutdown interrupted a call: the queued actions no longer apply, so
    /// they are dropped and the machine's answer to this input replaces them.
    Interrupt(Input),
    /// The task ends with this outcome.
    Exit(Option<Release>),
}

/// What the task listens to while it waits or calls the store.
struct Inbox {
    shutdown: watch::Receiver<bool>,
    losses: mpsc::UnboundedReceiver<(u64, Reason)>,
}

impl<S: Strategy> Task<S> {
    /// Asks the machine for its actions and performs them one at a time;
    /// with none left, waits for the next wakeup, loss report or shutdown.
    async fn run(
        mut self,
        shutdown: watch::Receiver<bool>,
        losses: mpsc::UnboundedReceiver<(u64, Reason)>,
    ) -> Option<Release> {
        let mut inbox = Inbox { shutdown, losses };
        let mut pending: VecDeque<Action> =
            self.machine.handle(Input::Start, MonoTime::now()).into();
        self.orphan = cache::take_orphan(&self.cache_key);
        loop {
            while let Some(action) = pending.pop_front() {
                match self.perform(action, &mut inbox).await {
                    Step::Done => {}
                    Step::Feed(input) => {
                        pending.extend(self.machine.handle(input, MonoTime::now()));
                    }
                    Step::Interrupt(input) => {
                        pending.clear();
                        pending.extend(self.machine.handle(input, MonoTime::now()));
                    }
                    Step::Exit(outcome) => return outcome,
                }
            }
            let input = self.wait(&mut inbox).await;
            pending.extend(self.machine.handle(input, MonoTime::now()));
        }
    }

    /// Performs one action of the machine.
    async fn perform(&mut self, action: Action, inbox: &mut Inbox) -> Step {
        match action {
            Action::Acquire { until } => self.acquire(until, inbox).await,
            Action::Renew { grant, until } => self.renew(grant, until, inbox).await,
            Action::Open(opening) => self.open(opening),
            Action::Extend { deadline, ceiling } => self.extend(deadline, ceiling),
            Action::Close => self.close(),
            Action::NotifyLost(event) => self.notify_lost(event),
            Action::Release { grant, until } => self.release(grant, until).await,
            Action::Fail(error) => self.fail(error),
            Action::Stop => self.stop(),
        }
    }

    /// No action is due: waits for the machine's next wakeup, a loss report
    /// for the lease held now, or shutdown.
    async fn wait(&self, inbox: &mut Inbox) -> Input {
        if self.machine.held().is_none() {
            self.tracked(|t| t.next_attempt = self.machine.next_wakeup());
        }
        match self.machine.next_wakeup() {
            Some(at) => tokio::select! {
                _ = tokio::time::sleep_until(at.to_instant().into()) => Input::Tick,
                reason = self.current_loss(&mut inbox.losses) => Input::RenewLost(reason),
                _ = shutdown_requested(&mut inbox.shutdown) => Input::Shutdown,
            },
            None => tokio::select! {
                reason = self.current_loss(&mut inbox.losses) => Input::RenewLost(reason),
                _ = shutdown_requested(&mut inbox.shutdown) => Input::Shutdown,
            },
        }
    }

    /// Asks the store for a grant, bounded by `until`; shutdown interrupts it.
    async fn acquire(&mut self, until: MonoTime, inbox: &mut Inbox) -> Step {
        let started = MonoTime::now();
        let orphan = self.orphan.take();
        let input = tokio::select! {
            input = self.request_grant(orphan) => input,
            _ = tokio::time::sleep_until(until.to_instant().into()) => Input::AcquireFailed(
                crate::AcquireError::Unreachable(Reason::new("acquire did not answer in time")),
            ),
            _ = shutdown_requested(&mut inbox.shutdown) => Input::Shutdown,
        };
        let now = MonoTime::now();
        self.acquire_latency = now.saturating_since(started);
        if let Input::AcquireFailed(e) = &input {
            self.telemetry.acquire_failed(e, self.acquire_latency);
            if let AcquireError::StoreRestarted { resume_in } = e {
                self.telemetry.guard_waiting(*resume_in);
                let until = now + *resume_in;
                self.tracked(|t| t.guard_until = Some(until));
                self.emit(LeaseEvent::Waiting(Waiting {
                    until,
                    cause: WaitCause::StoreRestarted,
                }));
            }
        }
        Step::Feed(input)
    }

    /// Renews `grant`, bounded by the local deadline `until`. A loss report
    /// for the lease ends the wait as a loss; shutdown abandons the renewal.
    async fn renew(&mut self, grant: Grant, until: MonoTime, inbox: &mut Inbox) -> Step {
        let sent_at = MonoTime::now();
        let ceiling = self.ceiling(sent_at);
        let answer = tokio::select! {
            r = self.strategy.renew(&self.pool, &grant, ceiling) => r,
            _ = tokio::time::sleep_until(until.to_instant().into()) => Renewal::Retry(
                Reason::new("renewal did not answer before the local deadline"),
            ),
            reason = self.current_loss(&mut inbox.losses) => Renewal::Lost(reason),
            _ = shutdown_requested(&mut inbox.shutdown) => return Step::Interrupt(Input::Shutdown),
        };
        let now = MonoTime::now();
        let deadline = match &answer {
            Renewal::Renewed { ttl, .. } => self.machine.timing().deadline(sent_at, *ttl),
            _ => until,
        };
        self.telemetry.renewal(
            grant.slot,
            &answer,
            now.saturating_since(sent_at),
            deadline.saturating_since(now),
        );
        self.telemetry.refused(self.gate.refused());
        Step::Feed(match answer {
            Renewal::Renewed { ttl, store_time } => Input::Renewed {
                ttl,
                sent_at,
                ceiling,
                store_time,
            },
            Renewal::Lost(r) => Input::RenewLost(r),
            Renewal::Retry(r) => Input::RenewRetry(r),
        })
    }

    /// Opens the gate with a new grant, records it in the lease cache and
    /// answers `start` if it is still waiting.
    fn open(&mut self, opening: Opening) -> Step {
        self.gate.open_with(opening);
        if let Some((grant, _)) = self.machine.held() {
            self.opened = Some(grant.token);
            if cache::put(
                self.cache_key.clone(),
                grant.clone(),
                &self.gate,
                &self.alive,
            ) {
                self.cached = Some(grant.token);
            }
        }
        let (slot, fence, deadline) = (opening.slot, opening.fence, opening.deadline);
        self.telemetry.acquired(
            slot,
            fence,
            opening.floor,
            self.acquire_latency,
            deadline.saturating_since(MonoTime::now()),
        );
        #[cfg(feature = "tracing")]
        warn_if_behind(
            &self.pool,
            opening.floor,
            self.unix_millis_at(MonoTime::now()),
        );
        self.state.send_replace(LeaseState::Held {
            slot,
            fence,
            deadline,
        });
        self.tracked(|t| *t = Track::default());
        // The gate is open with the grant: generation may go on.
        self.emit(LeaseEvent::Acquired(Acquired {
            slot,
            fence,
            floor: opening.floor,
            deadline,
            epoch: self.gate.view().epoch,
        }));
        // Generators wait until this host's clock passes the floor.
        let ready_at_unix_ns = (opening.floor.0 + 1).saturating_mul(1_000_000);
        let ready_at =
            MonoTime::from_nanos(ready_at_unix_ns.saturating_sub(self.clock.unix_offset(false)));
        if ready_at > MonoTime::now() {
            self.emit(LeaseEvent::Waiting(Waiting {
                until: ready_at,
                cause: WaitCause::Floor,
            }));
        }
        match self.started.take().map(|tx| tx.send(Ok(()))) {
            // `start` was cancelled before the lease arrived: nobody will
            // ever use or release it, so give it back.
            Some(Err(_)) => Step::Feed(Input::Shutdown),
            _ => Step::Done,
        }
    }

    /// A renewal moved the local deadline and the ceiling.
    fn extend(&mut self, deadline: MonoTime, ceiling: Floor) -> Step {
        self.gate.extend(deadline, ceiling);
        self.state.send_modify(|s| {
            if let LeaseState::Held { deadline: d, .. } = s {
                *d = deadline;
            }
        });
        if let Some((grant, _)) = self.machine.held() {
            let (slot, fence) = (grant.slot, grant.fence);
            self.emit(LeaseEvent::Renewed(Renewed {
                slot,
                fence,
                deadline,
            }));
        }
        Step::Done
    }

    /// Stops generation.
    fn close(&mut self) -> Step {
        self.gate.close();
        Step::Done
    }

    /// Runs the loss callbacks and tells the subscribers (the gate is
    /// already closed: rule 4), then publishes the state, then `Acquiring`
    /// when a new lease is sought.
    fn notify_lost(&mut self, event: LossEvent) -> Step {
        self.forget_cached();
        self.telemetry.lost(&event);
        let now = MonoTime::now();
        self.tracked(|t| {
            *t = Track {
                since: Some(now),
                lost: Some(event.cause.clone()),
                for_good: !event.reacquiring,
                ..Track::default()
            };
        });
        self.emit(LeaseEvent::Lost(event.clone()));
        let reacquiring = event.reacquiring;
        self.state.send_replace(LeaseState::Lost(event));
        if reacquiring {
            self.state.send_replace(LeaseState::Acquiring);
        }
        Step::Done
    }

    /// Gives `grant` back, bounded by `until`, and keeps the outcome for
    /// `shutdown` to return.
    async fn release(&mut self, grant: Grant, until: MonoTime) -> Step {
        let started = MonoTime::now();
        if let Some((outcome, issued)) = self.give_back(&grant, until).await {
            self.telemetry.released(
                grant.slot,
                &outcome,
                issued,
                MonoTime::now().saturating_since(started),
            );
            self.telemetry.refused(self.gate.refused());
            self.released = Some(outcome);
        }
        Step::Done
    }

    /// Startup failed: `start` returns this error.
    fn fail(&mut self, error: StartError) -> Step {
        self.tracked(|t| t.stopped = true);
        self.state.send_replace(LeaseState::Stopped);
        if let Some(tx) = self.started.take() {
            let _ = tx.send(Err(error));
        }
        Step::Exit(None)
    }

    /// The machine stopped: generation stays off for good.
    fn stop(&mut self) -> Step {
        self.gate.close();
        self.tracked(|t| t.stopped = true);
        self.state.send_replace(LeaseState::Stopped);
        Step::Exit(self.released.take())
    }

    /// Runs the callbacks for `event` and sends it to the subscribers. A
    /// panicking callback must not kill the task (the state would stay as
    /// it was and nothing would re-acquire): it is caught and logged.
    fn emit(&self, event: LeaseEvent) {
        let kind = match &event {
            LeaseEvent::Acquired(_) => "acquired",
            LeaseEvent::Renewed(_) => "renewed",
            LeaseEvent::Lost(_) => "lost",
            LeaseEvent::Waiting(_) => "waiting",
            LeaseEvent::SteppedBack(_) => "stepped back",
        };
        for message in self.sink.emit(event) {
            self.telemetry.callback_panicked(kind, &message);
        }
    }

    /// Updates what `health` reads beyond the gate.
    fn tracked(&self, f: impl FnOnce(&mut Track)) {
        f(&mut self.track.lock().unwrap_or_else(PoisonError::into_inner));
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

    /// The ceiling to report with a request sent at `sent_at`: the Unix time
    /// of the local deadline it would give (the highest timestamp generation
    /// may use until then), with a freshly measured process-wide offset.
    fn ceiling(&self, sent_at: MonoTime) -> Floor {
        let offset = self.clock.unix_offset(true);
        let deadline = self.machine.timing().deadline(sent_at, self.pool.ttl);
        Floor(unix_millis(deadline, offset))
    }

    /// The Unix time, in milliseconds, of `t` on the configured wall clock.
    fn unix_millis_at(&self, t: MonoTime) -> u64 {
        unix_millis(t, self.clock.unix_offset(false))
    }

    /// What to leave as the floor when giving `grant` up: the highest
    /// timestamp issued under it. The gate is closed by now, so no later value
    /// can pass it. Without a generation state attached to the gate, anything
    /// up to now may have been issued; a grant the gate never opened with
    /// issued nothing.
    fn issued(&self, grant: &Grant) -> Floor {
        if self.opened != Some(grant.token) {
            return grant.floor;
        }
        let issued = self
            .gate
            .issued()
            .unwrap_or_else(|| Floor(self.unix_millis_at(MonoTime::now())));
        issued.max(grant.floor)
    }

    /// Forgets this task's entry in the lease cache. False when a successor
    /// in this process took it over (this task was dropped meanwhile).
    fn forget_cached(&mut self) -> bool {
        match self.cached.take() {
            Some(_) => cache::forget(&self.cache_key, &self.alive),
            None => true,
        }
    }

    /// Releases `grant`, bounded by `until`. `None` when the grant is no
    /// longer this task's to release: a successor manager in this process
    /// took it over from the lease cache and is renewing it.
    async fn give_back(&mut self, grant: &Grant, until: MonoTime) -> Option<(Release, Floor)> {
        if self.cached == Some(grant.token) && !self.forget_cached() {
            return None;
        }
        let issued = self.issued(grant);
        let outcome = tokio::time::timeout_at(
            until.to_instant().into(),
            self.strategy.release(&self.pool, grant, issued),
        )
        .await
        .unwrap_or_else(|_| Release::Retry(Reason::new("release timed out")));
        Some((outcome, issued))
    }

    /// Asks the store for a grant, after giving back `orphan`, a grant a
    /// dropped predecessor in this process left behind.
    async fn request_grant(&self, orphan: Option<(Grant, LeaseGate)>) -> Input {
        if let Some((grant, old_gate)) = orphan {
            // A predecessor in this process (same store, pool and holder) was
            // dropped holding this grant. Its generators stopped (its gate is
            // retired), but code of its may still hold its fence: give the
            // grant back, leaving what its generators issued as the floor,
            // and acquire anew, so this holder's fence is a new one (the
            // store hands the freed slot out first where it can).
            let issued = old_gate
                .issued()
                .unwrap_or_else(|| Floor(self.unix_millis_at(MonoTime::now())))
                .max(grant.floor);
            let _ = self.strategy.release(&self.pool, &grant, issued).await;
        }
        let sent_at = MonoTime::now();
        let ceiling = self.ceiling(sent_at);
        match self.strategy.acquire(&self.pool, ceiling).await {
            Ok(grant) => Input::Acquired {
                grant,
                sent_at,
                ceiling,
            },
            Err(e) => Input::AcquireFailed(e),
        }
    }
}

/// The Unix time, in milliseconds, of `t` with the Unix offset `offset`
/// (rounded down), as `SystemClock::unix_millis_at` computes it.
fn unix_millis(t: MonoTime, offset: u64) -> u64 {
    t.as_nanos().saturating_add(offset) / 1_000_000
}

/// Warns when this host's clock is behind the floor of a new grant: its
/// generators wait for the clock to pass it (up to the configured
/// `max_clock_skew`) or refuse.
#[cfg(feature = "tracing")]
fn warn_if_behind(pool: &PoolSpec, floor: Floor, now: u64) {
    if floor.0 > now {
        tracing::warn!(
            pool = %pool.name,
            floor = floor.0,
            behind_ms = floor.0 - now,
            "this host's clock is behind the slot's floor (the previous holder's last timestamp): \
             generation waits for it to pass the floor; check the clock synchronisation (NTP)"
        );
    }
}
