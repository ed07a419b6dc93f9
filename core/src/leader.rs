//! Leader election: a pool of one slot, and a future that runs only while the
//! slot is held.

use std::fmt;
use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, oneshot, watch};
use tokio::task::{AbortHandle, JoinHandle};

use crate::clock::MonoTime;
use crate::config::LeaseConfig;
use crate::error::{ConfigError, StartError};
use crate::events::{Hook, LeaseEvent, SUBSCRIPTION_CAPACITY, Sink, SteppedBack};
use crate::gate::LeaseGate;
use crate::leader_config::LeaderConfig;
use crate::manager::{LeaseManager, LeaseState};
use crate::opening::{OpenStore, StoreWait};
use crate::strategy::{Fence, FenceStamp, Strategy};

/// One term of leadership, handed to the leader's future.
///
/// The lease behind it is renewed in the background; retryable renewal
/// failures are retried until the local deadline, with nothing to do here.
/// When it is lost (the store took it back, or the deadline passed), the
/// gate closes first, then [`Leadership::lost`] resolves: the future should
/// stop what it is doing and return within the grace period
/// ([`LeaderBuilder::grace`]), after which it is dropped. Returning early
/// ends the term too: the lease is released for a follower. Clones used
/// by tasks the future spawned see the same. Every write the leader makes to storage
/// that checks fences carries [`Leadership::stamp`] (the fence with the pool
/// and slot that issued it), so a leader that was paused past its lease is
/// refused by the storage itself.
#[derive(Clone)]
pub struct Leadership {
    stamp: FenceStamp,
    gate: LeaseGate,
    /// The gate epoch of this term's grant.
    epoch: u64,
    lost: watch::Receiver<bool>,
}

impl Leadership {
    /// The fence of this term. Storage that checks fences needs the pool and
    /// slot that issued it too: send [`Leadership::stamp`].
    pub fn fence(&self) -> Fence {
        self.stamp.fence()
    }

    /// The fence of this term with the pool and slot that issued it: send it
    /// with every write to storage that checks fences.
    pub fn stamp(&self) -> &FenceStamp {
        &self.stamp
    }

    /// The lease gate of this term (closed once the term is over). A later
    /// term of this elector has a new gate epoch, so checks of this term's
    /// [`Leadership::is_leading`] stay false.
    pub fn gate(&self) -> &LeaseGate {
        &self.gate
    }

    /// True while this term lasts: not lost, the gate still on this term's
    /// grant (not a later one), and its local deadline not passed (checked
    /// on the clock now, even if nothing ran).
    pub fn is_leading(&self) -> bool {
        !*self.lost.borrow() && self.gate.check_now() == Ok(self.epoch)
    }

    /// Resolves once this term is over (the lease was lost, the leader's
    /// future returned, or the elector shut down). By then the gate is
    /// closed and [`Leadership::is_leading`] is false.
    pub async fn lost(&self) {
        let mut rx = self.lost.clone();
        // An error means the elector is gone: the term is over too.
        let _ = rx.wait_for(|lost| *lost).await;
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("stamp", &self.stamp)
            .field("leading", &self.is_leading())
            .finish()
    }
}

/// The current leader, as a follower observes it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderInfo {
    /// The leader's holder identity (`host/pid` by default).
    pub holder: String,
    /// The fence of its term.
    pub fence: Fence,
    /// How long it had held the lease when last read, and when that was.
    held: Option<(Duration, Instant)>,
}

impl LeaderInfo {
    /// How long the leader has held the lease, now: what the store (or this
    /// process, for its own term) last said, plus the time since. `None` when
    /// the store does not say.
    pub fn held_for(&self) -> Option<Duration> {
        self.held.map(|(held, at)| held + at.elapsed())
    }
}

type Callback<T> = Arc<dyn Fn(&T) + Send + Sync>;

/// The store of an elector, opening (connecting, and waiting for it while
/// it is not reachable) when the campaign starts.
type Opening<S> = Pin<Box<dyn Future<Output = Result<S, StartError>> + Send>>;

/// Builds an [`Elector`]: see [`Leader::builder`].
#[must_use]
pub struct LeaderBuilder<S> {
    store: Opening<S>,
    config: LeaderConfig,
    on_started: Option<Callback<Leadership>>,
    on_stopped: Option<Callback<()>>,
    on_new_leader: Option<Callback<LeaderInfo>>,
    on_error: Option<Callback<StartError>>,
    on_event: Vec<Hook<LeaseEvent>>,
    grace: Duration,
    observe_every: Option<Duration>,
}

/// Leader election on any strategy: the lease of a pool of one slot.
///
/// The configuration is a [`LeaderConfig`], which has no size: the pool has
/// exactly one slot, so at most one elector leads at any instant (a
/// [`LeaseConfig`](crate::LeaseConfig) converts only when it has one slot).
/// The strategy must coordinate through a store: on a fixed slot
/// ([`StaticSlot`](crate::StaticSlot), [`PodOrdinal`](crate::PodOrdinal)) every
/// replica would lead, so the elector refuses to campaign (a final
/// [`StartError::Config`]).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use leasehold_core::{Leader, LeaderConfig, Memory};
/// let config = LeaderConfig::builder("scheduler").build()?;
/// let elector = Leader::campaign(Memory::new(), config, |leadership| async move {
///     // Lead until the term is over; send leadership.fence() with every write.
///     leadership.lost().await;
/// });
/// elector.wait_leading().await?; // Err: a final error, this elector can never lead
/// assert!(elector.is_leading());
/// elector.shutdown().await;
/// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
/// ```
#[derive(Debug)]
pub struct Leader;

impl Leader {
    /// Campaigns for the pool of `config` with default callbacks: runs `lead`
    /// for every term won, until [`Elector::shutdown`].
    ///
    /// A term ends in one of three ways. **The lease is lost** (the store
    /// took it back, or renewals failed until the local deadline): the gate
    /// closes first, then [`Leadership::lost`] resolves; the future has the
    /// grace period to return before it is dropped, and the elector
    /// campaigns on. **`lead` returns** (or panics): the gate closes, the
    /// lease is released, and the elector stands back for one TTL before it
    /// campaigns again, so a follower takes over. **The elector shuts
    /// down**: as when the lease is lost, then the lease is released. A final
    /// error (a missing table, a configuration the store refuses) stops the
    /// campaign: see [`LeaderBuilder::on_error`] and [`Elector::wait_leading`].
    ///
    /// `store` is a connected strategy, or a store to connect first (the
    /// `leasehold` crate's `StoreConfig`: [`OpenStore`]): see
    /// [`Leader::builder`].
    pub fn campaign<O, F, Fut>(store: O, config: LeaderConfig, lead: F) -> Elector
    where
        O: OpenStore,
        F: FnMut(Leadership) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Self::builder(store, config).campaign(lead)
    }

    /// A builder for callbacks client-go users know: started leading,
    /// stopped leading, new leader.
    ///
    /// `store` is a connected strategy, or a store to connect first (the
    /// `leasehold` crate's `StoreConfig`: [`OpenStore`]). Such a store is
    /// connected when the campaign starts, and while it is not reachable
    /// the elector keeps trying, with the configuration's backoff, for as
    /// long as it campaigns (or until the store's own wait deadline, if it
    /// carries one: then a final [`StartError::StoreUnreachable`]). A store
    /// that refuses stops the campaign at once ([`StartError::StoreRefused`],
    /// reported as every final error is).
    pub fn builder<O: OpenStore>(store: O, config: LeaderConfig) -> LeaderBuilder<O::Strategy> {
        let wait = StoreWait::until_reached().backoff(
            config.timing().backoff_initial(),
            config.timing().backoff_max(),
        );
        LeaderBuilder {
            store: Box::pin(store.open(wait)),
            grace: config.timing().safety_margin(),
            observe_every: None,
            config,
            on_started: None,
            on_stopped: None,
            on_new_leader: None,
            on_error: None,
            on_event: Vec::new(),
        }
    }
}

impl<S: Strategy> LeaderBuilder<S> {
    /// Called when this process starts leading, before the leader's future
    /// starts.
    pub fn on_started_leading(mut self, f: impl Fn(&Leadership) + Send + Sync + 'static) -> Self {
        self.on_started = Some(Arc::new(f));
        self
    }

    /// Called when this process stops leading: after the gate closed and the
    /// leader's future returned (or was dropped after the grace period).
    pub fn on_stopped_leading(mut self, f: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_stopped = Some(Arc::new(move |()| f()));
        self
    }

    /// Called when the observed leader changes, this process included. The
    /// store is read every `renew_interval` ([`LeaderBuilder::observe_every`]);
    /// strategies that cannot be inspected report only this process's terms.
    pub fn on_new_leader(mut self, f: impl Fn(&LeaderInfo) + Send + Sync + 'static) -> Self {
        self.on_new_leader = Some(Arc::new(f));
        self
    }

    /// Called once when the campaign stops for good on a final error (a
    /// missing table, a configuration the store refuses): this elector can
    /// never lead. The error says what to do. The same error is what
    /// [`Elector::wait_leading`] returns and [`Elector::error`] answers; it
    /// is also counted (`leasehold_campaigns_stopped_total`, feature
    /// `metrics`) and logged (feature `tracing`). Retryable errors (the store
    /// unreachable) are not final: the elector keeps campaigning.
    pub fn on_error(mut self, f: impl Fn(&StartError) + Send + Sync + 'static) -> Self {
        self.on_error = Some(Arc::new(f));
        self
    }

    /// Called with every [`LeaseEvent`] of this elector's leases (acquired,
    /// lost, waiting, renewed when the configuration asks for it) and
    /// [`LeaseEvent::SteppedBack`] when a term's future returned and the
    /// elector stands back. Runs on the elector's tasks: keep it short. A
    /// panic in it is caught. [`Elector::events`] delivers the same.
    pub fn on_event(mut self, f: impl Fn(&LeaseEvent) + Send + Sync + 'static) -> Self {
        self.on_event.push(Arc::new(f));
        self
    }

    /// How long a lost term's future may take to return once told, before it
    /// is dropped (default: the safety margin).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// How often followers read who leads (default: the renew interval).
    pub fn observe_every(mut self, every: Duration) -> Self {
        self.observe_every = Some(every);
        self
    }

    /// Starts campaigning: `lead` runs for every term won.
    pub fn campaign<F, Fut>(self, lead: F) -> Elector
    where
        F: FnMut(Leadership) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (stop_tx, stop_rx) = watch::channel(false);
        let (leading_tx, leading_rx) = watch::channel(None);
        let (leader_tx, leader_rx) = watch::channel(None);
        let (error_tx, error_rx) = watch::channel(None);
        // One channel for the events of every lease manager this elector
        // starts, and its own (stepped back).
        let (events_tx, first_events) = broadcast::channel(SUBSCRIPTION_CAPACITY);
        let mut lease = self.config.lease().clone();
        lease.hooks.on_event.extend(self.on_event.iter().cloned());
        lease.events = Some(events_tx.clone());
        let sink = Sink::new(lease.hooks.clone(), Some(events_tx.clone()));
        let observe_every = self
            .observe_every
            .unwrap_or(self.config.timing().renew_interval());
        // The observer starts once the store is open.
        let (opened_tx, opened_rx) = oneshot::channel();
        let observer = tokio::spawn({
            let (pool, leader, on_new_leader, stop) = (
                self.config.pool().clone(),
                leader_tx.clone(),
                self.on_new_leader.clone(),
                stop_rx.clone(),
            );
            async move {
                if let Ok(strategy) = opened_rx.await {
                    observe(strategy, pool, observe_every, leader, on_new_leader, stop).await;
                }
            }
        });
        let term: Arc<Mutex<Option<AbortHandle>>> = Arc::default();
        let task = tokio::spawn(
            Campaign {
                b: self,
                strategy: None,
                opened: Some(opened_tx),
                lease,
                sink,
                current_term: term.clone(),
                lead,
                stop: stop_rx,
                leading: leading_tx,
                leader: leader_tx,
                error: error_tx,
            }
            .run(),
        );
        Elector {
            stop: stop_tx,
            task: Some(task),
            term,
            observer,
            leading: leading_rx,
            leader: leader_rx,
            error: error_rx,
            events: events_tx,
            first_events: Mutex::new(Some(first_events)),
        }
    }
}

/// A running campaign. Dropping it stops campaigning and aborts the term in
/// progress without releasing a held lease (a later elector of this process
/// with the same holder gives it back; otherwise it expires);
/// [`Elector::shutdown`] releases it.
///
/// On errors: retryable ones (the store unreachable, the lease held by
/// another elector) are waited out while campaigning goes on; a final one
/// stops the campaign, and is what [`Elector::wait_leading`] returns,
/// [`Elector::error`] answers and [`LeaderBuilder::on_error`] is called
/// with. On loss: [`Elector::is_leading`] turns false as soon as the term's
/// gate closes (at the local deadline at the latest, even if nothing ran).
pub struct Elector {
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    /// The future of the term in progress: dropping the elector aborts it,
    /// so no write of a replaced term outlives it.
    term: Arc<Mutex<Option<AbortHandle>>>,
    observer: JoinHandle<()>,
    /// The gate of the term in progress, if any.
    leading: watch::Receiver<Option<LeaseGate>>,
    leader: watch::Receiver<Option<LeaderInfo>>,
    error: watch::Receiver<Option<StartError>>,
    events: broadcast::Sender<LeaseEvent>,
    /// The subscription made before the campaign started, for the first
    /// call of `events`.
    first_events: Mutex<Option<broadcast::Receiver<LeaseEvent>>>,
}

impl Elector {
    /// A subscription to this elector's [`LeaseEvent`]s: those of every
    /// term's lease (acquired, lost, waiting; renewed when asked for) and
    /// [`LeaseEvent::SteppedBack`]. The first call's subscription begins
    /// with the campaign; a later call's with the call. Delivered as
    /// [`LeaseManager::events`] delivers them: a subscriber that falls more
    /// than [`SUBSCRIPTION_CAPACITY`] events behind loses the oldest and is
    /// told how many (`RecvError::Lagged`).
    pub fn events(&self) -> broadcast::Receiver<LeaseEvent> {
        self.first_events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .unwrap_or_else(|| self.events.subscribe())
    }

    /// True while this process leads: a term is in progress and its lease's
    /// gate is open on the clock now. Two electors of one pool never both
    /// say so at one instant: the pool has one slot, and a term's gate closes
    /// at its local deadline, before the store can grant the slot again.
    pub fn is_leading(&self) -> bool {
        self.leading
            .borrow()
            .as_ref()
            .is_some_and(|g| g.check_now().is_ok())
    }

    /// Waits until this process leads: `Ok` once a term is in progress, or
    /// the final error that stopped the campaign ([`Elector::error`]: a
    /// missing table, a configuration the store refuses), with which it can
    /// never lead. Retryable trouble (the store unreachable, another elector
    /// leading) is waited out, so this may wait forever: bound it with
    /// `tokio::time::timeout` where that matters.
    pub async fn wait_leading(&self) -> Result<(), StartError> {
        let (mut leading, mut error) = (self.leading.clone(), self.error.clone());
        loop {
            if let Some(e) = error.borrow_and_update().clone() {
                return Err(e);
            }
            if leading.borrow_and_update().is_some() {
                return Ok(());
            }
            let open = tokio::select! {
                r = leading.changed() => r.is_ok(),
                r = error.changed() => r.is_ok(),
            };
            if !open {
                // The campaign ended: on its error, or aborted by a panic.
                return Err(self.error().unwrap_or_else(|| {
                    StartError::Panicked("the campaign task ended without leading".to_owned())
                }));
            }
        }
    }

    /// The leader last observed (this process or another), if any.
    pub fn leader(&self) -> Option<LeaderInfo> {
        self.leader.borrow().clone()
    }

    /// A receiver that sees every change of the observed leader.
    pub fn watch_leader(&self) -> watch::Receiver<Option<LeaderInfo>> {
        self.leader.clone()
    }

    /// The final error that stopped the campaign (a misconfiguration), if any:
    /// also reported once to [`LeaderBuilder::on_error`].
    pub fn error(&self) -> Option<StartError> {
        self.error.borrow().clone()
    }

    /// Stops campaigning: a term in progress ends (its future is told, then
    /// the lease is released).
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.observer.abort();
    }
}

impl Drop for Elector {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        if let Some(term) = self
            .term
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            term.abort();
        }
        self.observer.abort();
    }
}

impl fmt::Debug for Elector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Elector")
            .field("leading", &self.is_leading())
            .field("leader", &self.leader())
            .finish_non_exhaustive()
    }
}

async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// How a term ended.
enum TermEnd {
    /// The lease was lost (or replaced by a new grant).
    Lost,
    /// The elector is shutting down.
    Stopping,
    /// The leader's future returned (or panicked).
    Returned,
}

/// What a campaign owns: the builder's settings and callbacks, the leader's
/// future, and the channels through which the elector sees it.
struct Campaign<S, F> {
    b: LeaderBuilder<S>,
    /// The store, once open.
    strategy: Option<Arc<S>>,
    /// Hands the open store to the observer.
    opened: Option<oneshot::Sender<Arc<S>>>,
    /// The lease configuration of every attempt, sending its events to the
    /// elector's channel and callbacks.
    lease: LeaseConfig,
    /// The elector's own events (stepped back).
    sink: Sink,
    current_term: Arc<Mutex<Option<AbortHandle>>>,
    lead: F,
    stop: watch::Receiver<bool>,
    leading: watch::Sender<Option<LeaseGate>>,
    leader: watch::Sender<Option<LeaderInfo>>,
    error: watch::Sender<Option<StartError>>,
}

impl<S, F, Fut> Campaign<S, F>
where
    S: Strategy,
    F: FnMut(Leadership) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    /// Campaigns until stopped: a lease manager per attempt; a term per grant.
    async fn run(mut self) {
        let opened = tokio::select! {
            opened = &mut self.b.store => opened,
            () = stopped(&mut self.stop) => return,
        };
        let strategy = match opened {
            Ok(strategy) => Arc::new(strategy),
            Err(e) => {
                self.give_up(&e);
                return;
            }
        };
        if let Some(tx) = self.opened.take() {
            let _ = tx.send(strategy.clone());
        }
        self.strategy = Some(strategy);
        while !*self.stop.borrow() {
            let manager = match self.start_manager().await {
                Some(Ok(m)) => m,
                // A follower: the slot is held elsewhere. Keep asking.
                Some(Err(StartError::Timeout { .. })) => continue,
                Some(Err(e)) => {
                    self.give_up(&e);
                    return;
                }
                None => return,
            };
            if self.follow(manager).await.is_break() {
                return;
            }
        }
    }

    /// Asks for the lease; `None` when the elector stopped meanwhile. A
    /// fixed slot is refused: every replica configured with it would lead.
    async fn start_manager(&mut self) -> Option<Result<LeaseManager, StartError>> {
        let strategy = self.strategy.clone()?;
        if strategy.capabilities().coordinated {
            let start = LeaseManager::start(strategy, self.lease.clone());
            tokio::select! {
                m = start => Some(m),
                () = stopped(&mut self.stop) => None,
            }
        } else {
            Some(Err(StartError::Config(ConfigError::new(
                "strategy",
                "a fixed slot (StaticSlot, PodOrdinal)",
                "a strategy that coordinates through a store (SQL, Valkey/Redis, etcd, \
                 Kubernetes; Memory within one process): a fixed slot is held by every replica \
                 configured with it, so every one of them would lead",
            ))))
        }
    }

    /// A final error stops the campaign: reported to `wait_leading`,
    /// `error()` and the `on_error` callback.
    fn give_up(&self, e: &StartError) {
        crate::telemetry::Telemetry::new(self.b.config.pool()).campaign_stopped(e);
        self.error.send_replace(Some(e.clone()));
        call(&self.b.on_error, e);
    }

    /// Follows `manager`'s states, leading a term per grant. Continues when
    /// the campaign should ask for a lease again; breaks when it stops.
    async fn follow(&mut self, manager: LeaseManager) -> ControlFlow<()> {
        let mut states = manager.subscribe();
        loop {
            let state = states.borrow_and_update().clone();
            match state {
                LeaseState::Held { .. } => match self.term(&manager, &mut states).await {
                    TermEnd::Lost => {}
                    TermEnd::Stopping => {
                        manager.shutdown().await;
                        return ControlFlow::Break(());
                    }
                    TermEnd::Returned => return self.stand_back(manager).await,
                },
                LeaseState::Stopped => return ControlFlow::Continue(()),
                LeaseState::Acquiring | LeaseState::Lost(_) => {
                    tokio::select! {
                        changed = states.changed() => if changed.is_err() {
                            return ControlFlow::Continue(());
                        },
                        () = stopped(&mut self.stop) => {
                            manager.shutdown().await;
                            return ControlFlow::Break(());
                        }
                    }
                }
            }
        }
    }

    /// Leads one term of the grant `manager` holds now, until the lease is
    /// lost, the elector stops or the leader's future returns. The gate is
    /// closed before the future is told, and the future has a grace period
    /// to return unless it already did.
    async fn term(
        &mut self,
        manager: &LeaseManager,
        states: &mut watch::Receiver<LeaseState>,
    ) -> TermEnd {
        // Fence and epoch from one snapshot: the same grant.
        let view = manager.gate().view();
        let (fence, epoch) = (view.fence, view.epoch);
        let (lost_tx, lost_rx) = watch::channel(false);
        let leadership = Leadership {
            stamp: FenceStamp::new(self.b.config.pool().name().clone(), view.slot, fence),
            gate: manager.gate(),
            epoch,
            lost: lost_rx,
        };
        // Read before anyone can see this process leading.
        let began = Instant::now();
        self.leading.send_replace(Some(manager.gate()));
        let me = LeaderInfo {
            holder: self.b.config.pool().holder().to_owned(),
            fence,
            held: Some((Duration::ZERO, began)),
        };
        if self.leader.send_if_modified(|l| replace_if_new(l, &me)) {
            call(&self.b.on_new_leader, &me);
        }
        call(&self.b.on_started, &leadership);
        let mut term = tokio::spawn((self.lead)(leadership));
        *self
            .current_term
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(term.abort_handle());
        let end = tokio::select! {
            () = term_over(states, epoch, manager) => TermEnd::Lost,
            () = stopped(&mut self.stop) => TermEnd::Stopping,
            _ = &mut term => TermEnd::Returned,
        };
        if !matches!(end, TermEnd::Lost) {
            // Close the gate before telling the future.
            manager.gate().close();
        }
        lost_tx.send_replace(true);
        self.leading.send_replace(None);
        if !matches!(end, TermEnd::Returned)
            && tokio::time::timeout(self.b.grace, &mut term).await.is_err()
        {
            term.abort();
        }
        self.current_term
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        call(&self.b.on_stopped, &());
        end
    }

    /// The leader's future returned, so the term is over: give the lease
    /// back, and stand back for a TTL so that a follower, which asks at
    /// least every `backoff_max` (at most a TTL), takes over.
    async fn stand_back(&mut self, manager: LeaseManager) -> ControlFlow<()> {
        let view = manager.gate().view();
        manager.shutdown().await;
        let ttl = self.b.config.timing().ttl();
        let _panics = self.sink.emit(LeaseEvent::SteppedBack(SteppedBack {
            slot: view.slot,
            fence: view.fence,
            until: MonoTime::now() + ttl,
        }));
        tokio::select! {
            () = tokio::time::sleep(ttl) => ControlFlow::Continue(()),
            () = stopped(&mut self.stop) => ControlFlow::Break(()),
        }
    }
}

/// Resolves when the term of gate epoch `epoch` is over: the state left
/// `Held` or a new grant replaced it.
async fn term_over(states: &mut watch::Receiver<LeaseState>, epoch: u64, manager: &LeaseManager) {
    loop {
        if states.changed().await.is_err() {
            return;
        }
        let held = matches!(*states.borrow_and_update(), LeaseState::Held { .. });
        if !held || manager.gate().view().epoch != epoch {
            return;
        }
    }
}

fn call<T>(cb: &Option<Callback<T>>, arg: &T) {
    if let Some(cb) = cb {
        // A panicking callback must not stop the campaign.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cb(arg)));
    }
}

/// Records `new` as the leader; true when that is a change (another holder
/// or term). For the same term, only a missing `held` is filled in: the
/// first reading, aged on this process's clock, stays true, and this
/// process's own reading of its term (taken before it said it leads) is a
/// lower bound no store reading can spoil.
fn replace_if_new(current: &mut Option<LeaderInfo>, new: &LeaderInfo) -> bool {
    match current {
        Some(c) if c.holder == new.holder && c.fence == new.fence => {
            if c.held.is_none() {
                c.held = new.held;
            }
            false
        }
        _ => {
            *current = Some(new.clone());
            true
        }
    }
}

/// Reads who holds slot 0 every `every`, and reports changes.
async fn observe<S: Strategy>(
    strategy: Arc<S>,
    pool: crate::PoolSpec,
    every: Duration,
    leader: watch::Sender<Option<LeaderInfo>>,
    on_new_leader: Option<Callback<LeaderInfo>>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        match strategy.inspect(&pool).await {
            Ok(slots) => {
                let now = slots
                    .into_iter()
                    .find(|s| s.slot == 0 && s.holder.is_some())
                    .map(|s| LeaderInfo {
                        holder: s.holder.unwrap_or_default(),
                        fence: s.fence,
                        held: s.held_for.map(|h| (h, Instant::now())),
                    });
                match now {
                    Some(info) => {
                        if leader.send_if_modified(|l| replace_if_new(l, &info)) {
                            call(&on_new_leader, &info);
                        }
                    }
                    None => {
                        leader.send_if_modified(|l| l.take().is_some());
                    }
                }
            }
            // Nothing to observe with: only this process's terms are reported.
            Err(crate::InspectError::Unsupported) => return,
            Err(crate::InspectError::Store(_)) => {}
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = stopped(&mut stop) => return,
        }
    }
}
