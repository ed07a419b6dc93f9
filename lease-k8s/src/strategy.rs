//! The Kubernetes strategy: acquire, renew, release, revoke.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use leasehold_core::rand::SplitMix;
use leasehold_core::{
    AcquireError, Capabilities, Fence, Floor, Grant, InspectError, PoolName, PoolSpec, Reason,
    Release, Renewal, SlotInfo, Strategy, Token,
};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::api::{Api, NoAnswer, Resp};
use crate::config::KubeConfig;
use crate::error::KubeError;
use crate::names::{
    FENCE_ANNOTATION, FENCE_POINTER, FLOOR_ANNOTATION, FLOOR_POINTER, FORMAT_ANNOTATION,
    POOL_LABEL, SLOT_LABEL, TOMBSTONE, check_pool, fence_record, format_name, holder_identity,
    lease_name, split_identity,
};
use crate::time::{micro_time, unique_micros};

/// Writes one acquisition sends after one LIST before it lists again.
const WRITES_PER_LIST: u32 = 4;
/// LISTs one acquisition sends before it answers `Contention` (unless the
/// lease duration runs out first).
const MAX_LISTS: u32 = 16;
/// How long an unresolved write is remembered for adoption.
const PENDING_FOR: Duration = Duration::from_secs(600);

/// A lease store on Kubernetes: one `coordination.k8s.io/v1` Lease per slot,
/// `leasehold-<pool>-<slot>`, labelled `leasehold/pool` and `leasehold/slot`,
/// created on demand and never deleted.
///
/// - **acquire**, 2 round trips: LIST the namespace's Leases, then one write
///   to a takeable slot chosen at random: POST for an absent slot, a merge
///   PATCH conditioned on the observed resourceVersion for a released slot or
///   one this process saw unchanged for longer than its duration. 409 means
///   another acquirer won: the next candidate.
/// - **fence**: the resourceVersion of our own acquiring write.
/// - **renew**, 1 round trip: a JSON Patch whose first op `test`s the holder
///   identity; 422 is confirmed with one GET.
/// - **release**, 1 round trip: the same `test`, then an empty holder.
///
/// Cloning shares the client.
#[derive(Clone)]
pub struct KubeStrategy {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) api: Api,
    takeover_margin: Duration,
    identity: String,
    /// `(pool, slot)` → the resourceVersion last seen and when it was first
    /// seen (local monotonic time, at the answer).
    observed: Mutex<HashMap<(String, u32), Observed>>,
    /// Grant token → the floor this process last stored on its Lease.
    floors: Mutex<HashMap<Token, u64>>,
    /// Acquiring writes whose answer was lost: adopted if they landed.
    pending: Mutex<Vec<Pending>>,
    /// `(pool, slot)` whose create answered 409 although the LIST showed no
    /// Lease: a rival's, or a foreign object with our name.
    suspects: Mutex<HashSet<(String, u32)>>,
    #[cfg(feature = "stats")]
    pub(crate) stats: crate::stats::Counters,
}

#[derive(Clone, Debug)]
struct Observed {
    rv: String,
    at: Instant,
}

#[derive(Clone, Debug)]
struct Pending {
    pool: String,
    slot: u32,
    token: Token,
    holder_id: String,
    prev_floor: u64,
    stored_floor: u64,
    at: Instant,
}

/// What one LIST says about one slot.
#[derive(Clone, Debug)]
enum Slot {
    /// No Lease: POST.
    Absent,
    /// A Lease nobody holds (released): merge PATCH on its resourceVersion.
    Free {
        rv: String,
        floor: u64,
        transitions: i32,
    },
    /// Somebody holds it (or a revoked holder's tombstone).
    Held {
        rv: String,
        holder: String,
        duration: Duration,
        floor: u64,
        transitions: i32,
    },
}

/// A final error of an acquisition, or a retryable one.
fn unreachable(what: &str, detail: &str) -> AcquireError {
    AcquireError::Unreachable(Reason::new(format!("{what}: {detail}")))
}

impl KubeStrategy {
    /// The smallest TTL: `leaseDurationSeconds` counts whole seconds and must
    /// be > 0.
    pub const MIN_TTL: Duration = Duration::from_secs(1);

    /// The default bound on any single request.
    pub const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(3);

    /// The largest pool: one LIST reads every Lease of the pool.
    pub const MAX_POOL_SIZE: u32 = 4096;

    /// What the strategy supports: networked, floors persisted in the
    /// `leasehold/floor` annotation.
    pub const CAPABILITIES: Capabilities = Capabilities::coordinated(true, Self::MIN_TTL)
        .with_max_pool_size(Self::MAX_POOL_SIZE)
        .with_persisted_floor()
        .with_inspect();

    /// Builds the client (retries off, a read timeout) and, unless
    /// [`KubeConfig::preflight`] is off, checks the setup: the RBAC verbs
    /// (one access review per verb), that resourceVersions are integers,
    /// and that the namespace exists (a dry-run create). Each mistake is a
    /// final error that says what to do.
    pub async fn connect(config: KubeConfig) -> Result<Self, KubeError> {
        config.validate()?;
        let api = Api::connect(&config).await?;
        let identity = format!("k8s:{}/{}", api.server, api.namespace);
        let strategy = Self {
            inner: Arc::new(Inner {
                api,
                takeover_margin: config.takeover_margin,
                identity,
                observed: Mutex::default(),
                floors: Mutex::default(),
                pending: Mutex::default(),
                suspects: Mutex::default(),
                #[cfg(feature = "stats")]
                stats: crate::stats::Counters::default(),
            }),
        };
        if config.preflight {
            crate::preflight::run(&strategy.inner.api).await?;
        }
        Ok(strategy)
    }

    /// The HTTP client of the API server.
    pub(crate) fn api(&self) -> &Api {
        &self.inner.api
    }

    /// The bound on a single request.
    pub(crate) fn op_timeout(&self) -> Duration {
        self.inner.api.op_timeout
    }

    /// The namespace holding the Leases.
    pub fn namespace(&self) -> &str {
        &self.inner.api.namespace
    }

    /// The Lease name of `slot` in `pool`: `leasehold-<pool>-<slot>`.
    pub fn lease_name(&self, pool: &PoolName, slot: u32) -> String {
        lease_name(pool, slot)
    }

    /// Revokes the holder of `slot`: its `holderIdentity` becomes a
    /// tombstone (`revoked/<old holder>`), so the holder's next renewal is
    /// `Lost`. The tombstone is a new write, so every observer starts its
    /// expiry clock again: nobody can claim the slot before the revoked
    /// holder's lease would have ended. The floor annotation stays. True
    /// when a holder was revoked; false when nobody held the slot.
    pub async fn revoke(&self, pool: &PoolSpec, slot: u32) -> Result<bool, KubeError> {
        check_pool(pool.name()).map_err(|e| KubeError::Request {
            what: "revoke",
            detail: e.to_string(),
        })?;
        let name = lease_name(pool.name(), slot);
        let api = &self.inner.api;
        for _ in 0..5 {
            let deadline = Instant::now() + api.op_timeout;
            let resp = api
                .get(&name, deadline)
                .await
                .map_err(|e| KubeError::Request {
                    what: "GET (revoke)",
                    detail: e.text().to_owned(),
                })?;
            if resp.status == 404 {
                return Ok(false);
            }
            let lease = expect_ok(&resp, "GET (revoke)")?
                .lease()
                .map_err(|detail| KubeError::Request {
                    what: "GET (revoke)",
                    detail,
                })?;
            let holder = holder_of(&lease);
            if holder.is_empty() || holder.starts_with(TOMBSTONE) {
                return Ok(false);
            }
            let rv = lease.metadata.resource_version.clone().unwrap_or_default();
            // A holder that has not renewed yet has recorded no fence: the
            // resourceVersion is still that of its acquiring write.
            let fence = match (split_identity(holder), fence_of(&lease)) {
                (Some((_, prefix)), Some((p, f))) if p == prefix => Some(format!("{p} {f}")),
                (Some((_, prefix)), _) => Some(format!("{prefix} {rv}")),
                (None, _) => None,
            };
            let mut patch = json!({
                "metadata": {"resourceVersion": rv},
                "spec": {"holderIdentity": format!("{TOMBSTONE}{holder}")},
            });
            if let Some(fence) = fence {
                patch["metadata"]["annotations"] = json!({FENCE_ANNOTATION: fence});
            }
            let resp = api
                .merge_patch(&name, &patch, deadline)
                .await
                .map_err(|e| KubeError::Request {
                    what: "PATCH (revoke)",
                    detail: e.text().to_owned(),
                })?;
            match resp.status {
                409 => continue,
                404 => return Ok(false),
                _ => {
                    expect_ok(&resp, "PATCH (revoke)")?;
                    return Ok(true);
                }
            }
        }
        Err(KubeError::Request {
            what: "revoke",
            detail: format!("{name} kept changing; try again"),
        })
    }

    fn observed(&self) -> MutexGuard<'_, HashMap<(String, u32), Observed>> {
        self.inner
            .observed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn floors(&self) -> MutexGuard<'_, HashMap<Token, u64>> {
        self.inner
            .floors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn pending(&self) -> MutexGuard<'_, Vec<Pending>> {
        self.inner
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that `rv` of `(pool, slot)` was seen at `at`; an unchanged
    /// resourceVersion keeps its first sighting.
    fn observe(&self, pool: &PoolName, slot: u32, rv: &str, at: Instant) {
        let mut map = self.observed();
        let entry = map
            .entry((pool.as_str().to_owned(), slot))
            .or_insert_with(|| Observed {
                rv: rv.to_owned(),
                at,
            });
        if entry.rv != rv {
            *entry = Observed {
                rv: rv.to_owned(),
                at,
            };
        }
    }

    /// When a Lease held at `rv` may be taken over: its first sighting plus
    /// the longer of its duration and ours, plus the margin.
    fn takeover_at(
        &self,
        pool: &PoolSpec,
        slot: u32,
        rv: &str,
        duration: Duration,
    ) -> Option<Instant> {
        let map = self.observed();
        let seen = map.get(&(pool.name().as_str().to_owned(), slot))?;
        if seen.rv != rv {
            return None;
        }
        let wait = duration.max(pool.ttl());
        Some(seen.at + wait + self.inner.takeover_margin + wait / 50)
    }

    /// Reads the pool: the Leases labelled with it. A foreign Lease that
    /// occupies one of our names carries no such label, so it shows as a 409
    /// to our create of an "absent" slot; such a slot becomes a suspect, and
    /// a suspect still absent from a later LIST is read once: not ours is a
    /// final error.
    async fn list_pool(&self, pool: &PoolSpec, deadline: Instant) -> Result<Listed, AcquireError> {
        let api = &self.inner.api;
        let selector = format!("{POOL_LABEL}={}", pool.name());
        let resp = api
            .list(&selector, deadline)
            .await
            .map_err(|e| unreachable("LIST leases", e.text()))?;
        let at = Instant::now();
        if !resp.ok() {
            return Err(write_error(&resp, "list", api, pool));
        }
        let list: Value = serde_json::from_slice(&resp.body)
            .map_err(|e| unreachable("LIST leases", &format!("unreadable answer: {e}")))?;
        let mut slots = HashMap::new();
        let mut raw = Vec::new();
        let mut format = None;
        for item in list["items"].as_array().into_iter().flatten() {
            let name = item["metadata"]["name"].as_str().unwrap_or("");
            if name == format_name(pool.name()) {
                format = Some(
                    item["metadata"]["annotations"][FORMAT_ANNOTATION]
                        .as_str()
                        .unwrap_or("")
                        .to_owned(),
                );
                continue;
            }
            // Labels copied onto another object do not make it a slot.
            let Some(slot) = item["metadata"]["labels"][SLOT_LABEL]
                .as_str()
                .and_then(|d| d.parse::<u32>().ok())
                .filter(|s| name == lease_name(pool.name(), *s))
            else {
                continue;
            };
            let lease: Lease = serde_json::from_value(item.clone()).map_err(|e| {
                unreachable("LIST leases", &format!("unreadable Lease {name}: {e}"))
            })?;
            let rv = lease.metadata.resource_version.clone().unwrap_or_default();
            parse_rv(&rv)?;
            if slot >= pool.size() {
                continue;
            }
            self.observe(pool.name(), slot, &rv, at);
            let holder = holder_of(&lease);
            let floor = floor_of(&lease);
            let transitions = lease
                .spec
                .as_ref()
                .and_then(|s| s.lease_transitions)
                .unwrap_or(0);
            let state = if holder.is_empty() {
                Slot::Free {
                    rv,
                    floor,
                    transitions,
                }
            } else {
                let secs = lease
                    .spec
                    .as_ref()
                    .and_then(|s| s.lease_duration_seconds)
                    .unwrap_or(0);
                Slot::Held {
                    rv,
                    holder: holder.to_owned(),
                    duration: Duration::from_secs(u64::try_from(secs).unwrap_or(0)),
                    floor,
                    transitions,
                }
            };
            slots.insert(slot, state);
            raw.push((slot, lease));
        }
        self.check_suspects(pool, &slots, deadline).await?;
        Ok(Listed { slots, raw, format })
    }

    /// Checks the ID format `pool` declares against the pool's format record
    /// (`recorded`, from the LIST the claim made anyway), creating the record
    /// when there is none: no extra request once it exists. Two first claims
    /// of different formats both try to create it; the API server lets one
    /// win and answers the other 409, which reads the winner's record.
    async fn check_format(
        &self,
        pool: &PoolSpec,
        recorded: Option<String>,
        deadline: Instant,
    ) -> Result<(), AcquireError> {
        let Some(ours) = pool.id_format() else {
            return Ok(());
        };
        let api = &self.inner.api;
        let name = format_name(pool.name());
        let recorded = match recorded {
            Some(text) => text,
            None => {
                let body = json!({
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {
                        "name": name,
                        "labels": {POOL_LABEL: pool.name().as_str()},
                        "annotations": {FORMAT_ANNOTATION: ours.text()},
                    },
                    "spec": {},
                });
                let resp = api
                    .create(&body, false, deadline)
                    .await
                    .map_err(|e| unreachable(&format!("POST {name}"), e.text()))?;
                if resp.ok() {
                    return Ok(());
                }
                if resp.status != 409 {
                    return Err(write_error(&resp, "create", api, pool));
                }
                let resp = api
                    .get(&name, deadline)
                    .await
                    .map_err(|e| unreachable(&format!("GET {name}"), e.text()))?;
                if !resp.ok() {
                    return Err(write_error(&resp, "get", api, pool));
                }
                let lease: Value = serde_json::from_slice(&resp.body).map_err(|e| {
                    unreachable(&format!("GET {name}"), &format!("unreadable answer: {e}"))
                })?;
                lease["metadata"]["annotations"][FORMAT_ANNOTATION]
                    .as_str()
                    .unwrap_or("")
                    .to_owned()
            }
        };
        if recorded == ours.text() {
            Ok(())
        } else {
            Err(AcquireError::OtherIdFormat {
                pool: pool.name().to_string(),
                recorded,
                ours: ours.text().to_owned(),
            })
        }
    }

    /// Reads each suspect slot of `pool` still absent from `slots`.
    async fn check_suspects(
        &self,
        pool: &PoolSpec,
        slots: &HashMap<u32, Slot>,
        deadline: Instant,
    ) -> Result<(), AcquireError> {
        let suspects: Vec<u32> = {
            let mut set = self.suspects();
            let mine: Vec<u32> = set
                .iter()
                .filter(|(p, _)| p == pool.name().as_str())
                .map(|(_, s)| *s)
                .collect();
            for slot in &mine {
                set.remove(&(pool.name().as_str().to_owned(), *slot));
            }
            mine
        };
        for slot in suspects.into_iter().filter(|s| !slots.contains_key(s)) {
            let name = lease_name(pool.name(), slot);
            let resp = self
                .inner
                .api
                .get(&name, deadline)
                .await
                .map_err(|e| unreachable(&format!("GET {name}"), e.text()))?;
            if resp.status == 200 {
                let lease = resp
                    .lease()
                    .map_err(|e| unreachable(&format!("GET {name}"), &e))?;
                check_ours(&lease, pool, slot, &self.inner.api)?;
            }
        }
        Ok(())
    }

    fn suspects(&self) -> MutexGuard<'_, HashSet<(String, u32)>> {
        self.inner
            .suspects
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Acquires a slot of `pool` (only `pinned` when given), raising its
    /// floor to `ceiling`. Returns the grant and the floor stored before.
    pub(crate) async fn acquire_slot(
        &self,
        pool: &PoolSpec,
        ceiling: Floor,
        pinned: Option<u32>,
    ) -> Result<Grant, AcquireError> {
        let ceiling = ceiling.0;
        check_pool(pool.name())?;
        if pool.size() > Self::MAX_POOL_SIZE {
            return Err(AcquireError::Misconfigured {
                what: format!(
                    "pool {} has {} slots; the Kubernetes strategy supports up to {}",
                    pool.name(),
                    pool.size(),
                    Self::MAX_POOL_SIZE
                ),
                fix: format!("use a pool of at most {} slots", Self::MAX_POOL_SIZE),
            });
        }
        if let Some(slot) = pinned
            && slot >= pool.size()
        {
            return Err(AcquireError::Misconfigured {
                what: format!(
                    "the ordinal gives slot {slot}, outside pool {} of size {}",
                    pool.name(),
                    pool.size()
                ),
                fix: format!("raise the pool size above {slot}"),
            });
        }
        let secs = ttl_secs(pool.ttl())?;
        // The whole acquisition never outlives the lease it would grant (an
        // answer after that is useless); each request is bounded by the
        // operation timeout too.
        let deadline = Instant::now() + pool.ttl();
        let mut sent = 0u32;
        let mut rng = SplitMix::from_os();
        for _ in 0..MAX_LISTS {
            sent += 1;
            let Listed { slots, raw, format } = self.list_pool(pool, deadline).await?;
            self.check_format(pool, format, deadline).await?;
            if let Some(won) = self
                .adopt_pending(pool, &raw, ceiling, deadline, &mut sent)
                .await
            {
                self.record_acquire(sent);
                return Ok(won);
            }
            let now = Instant::now();
            let mut candidates = Vec::new();
            let mut earliest: Option<Instant> = None;
            let range = match pinned {
                Some(s) => s..s + 1,
                None => 0..pool.size(),
            };
            for slot in range {
                match slots.get(&slot).cloned().unwrap_or(Slot::Absent) {
                    Slot::Held {
                        rv,
                        duration,
                        holder,
                        floor,
                        transitions,
                    } => match self.takeover_at(pool, slot, &rv, duration) {
                        Some(at) if at <= now => candidates.push((
                            slot,
                            Slot::Held {
                                rv,
                                duration,
                                holder,
                                floor,
                                transitions,
                            },
                        )),
                        Some(at) => earliest = Some(earliest.map_or(at, |e| e.min(at))),
                        None => {}
                    },
                    other => candidates.push((slot, other)),
                }
            }
            if candidates.is_empty() {
                let wait = earliest.map(|e| e.saturating_duration_since(now));
                return Err(match pinned {
                    Some(slot) => AcquireError::Contention(Reason::new(format!(
                        "slot {slot} of pool {} is held by {}; another pod with the same ordinal \
                         (a force-deleted pod may still run) holds it; it can be taken over in {} \
                         if its holder stops renewing",
                        pool.name(),
                        match slots.get(&slot) {
                            Some(Slot::Held { holder, .. }) => holder.as_str(),
                            _ => "another holder",
                        },
                        wait.map_or("a lease duration".to_owned(), |w| format!(
                            "{:.1}s",
                            w.as_secs_f64()
                        )),
                    ))),
                    None => AcquireError::PoolExhausted {
                        pool: pool.name().to_string(),
                        size: pool.size(),
                    },
                });
            }
            rng.shuffle(&mut candidates);
            for (slot, state) in candidates.into_iter().take(WRITES_PER_LIST as usize) {
                if Instant::now() >= deadline {
                    break;
                }
                sent += 1;
                match self
                    .try_slot(pool, slot, &state, secs, ceiling, deadline, &mut sent)
                    .await?
                {
                    Some(won) => {
                        self.record_acquire(sent);
                        return Ok(won);
                    }
                    None => continue,
                }
            }
            if Instant::now() >= deadline {
                break;
            }
        }
        Err(AcquireError::Contention(Reason::new(format!(
            "other acquirers won every slot this acquisition tried ({sent} requests)"
        ))))
    }

    fn record_acquire(&self, sent: u32) {
        #[cfg(feature = "stats")]
        self.inner.stats.acquired(sent);
        #[cfg(not(feature = "stats"))]
        let _ = sent;
    }

    /// One acquiring write. `Ok(None)`: another acquirer won, try the next.
    #[allow(clippy::too_many_arguments)]
    async fn try_slot(
        &self,
        pool: &PoolSpec,
        slot: u32,
        state: &Slot,
        secs: i32,
        ceiling: u64,
        deadline: Instant,
        sent: &mut u32,
    ) -> Result<Option<Grant>, AcquireError> {
        let api = &self.inner.api;
        let token = Token::random();
        let holder_id = holder_identity(pool.holder(), &token);
        let name = lease_name(pool.name(), slot);
        let now = micro_time(unique_micros());
        let (result, prev_floor, stored_floor, verb) = match state {
            Slot::Absent => {
                let body = json!({
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {
                        "name": name,
                        "labels": {POOL_LABEL: pool.name().as_str(), SLOT_LABEL: slot.to_string()},
                        "annotations": {FLOOR_ANNOTATION: ceiling.to_string()},
                    },
                    "spec": {
                        "holderIdentity": holder_id,
                        "leaseDurationSeconds": secs,
                        "acquireTime": now,
                        "renewTime": now,
                        "leaseTransitions": 0,
                    },
                });
                (
                    api.create(&body, false, deadline).await,
                    0,
                    ceiling,
                    "create",
                )
            }
            Slot::Free {
                rv,
                floor,
                transitions,
            }
            | Slot::Held {
                rv,
                floor,
                transitions,
                ..
            } => {
                let stored = (*floor).max(ceiling);
                let patch = json!({
                    "metadata": {
                        "resourceVersion": rv,
                        "annotations": {FLOOR_ANNOTATION: stored.to_string()},
                    },
                    "spec": {
                        "holderIdentity": holder_id,
                        "leaseDurationSeconds": secs,
                        "acquireTime": now,
                        "renewTime": now,
                        "leaseTransitions": transitions.saturating_add(1),
                    },
                });
                (
                    api.merge_patch(&name, &patch, deadline).await,
                    *floor,
                    stored,
                    "patch",
                )
            }
        };
        let answer = match result {
            Ok(resp) => resp,
            Err(NoAnswer::NotSent(m)) => return Err(unreachable(&format!("{verb} {name}"), &m)),
            Err(NoAnswer::Unknown(m)) => {
                *sent += 1;
                return self
                    .resolve_ambiguous(
                        pool,
                        slot,
                        token,
                        &holder_id,
                        prev_floor,
                        stored_floor,
                        deadline,
                        &m,
                    )
                    .await
                    .map(Some);
            }
        };
        match answer.status {
            200 | 201 => {
                let lease = answer
                    .lease()
                    .map_err(|e| unreachable(&format!("{verb} {name}"), &e))?;
                let rv = lease.metadata.resource_version.unwrap_or_default();
                let fence = parse_rv(&rv)?;
                self.observe(pool.name(), slot, &rv, Instant::now());
                Ok(Some(self.granted(
                    pool,
                    slot,
                    token,
                    fence,
                    prev_floor,
                    stored_floor,
                )))
            }
            // Another acquirer won (create: the name exists; patch: the
            // resourceVersion moved on). 404 on a patch: deleted since.
            409 => {
                if verb == "create" {
                    self.suspects()
                        .insert((pool.name().as_str().to_owned(), slot));
                }
                Ok(None)
            }
            404 if verb == "patch" => Ok(None),
            s if s >= 500 => {
                *sent += 1;
                self.resolve_ambiguous(
                    pool,
                    slot,
                    token,
                    &holder_id,
                    prev_floor,
                    stored_floor,
                    deadline,
                    &answer.message(),
                )
                .await
                .map(Some)
            }
            _ => Err(write_error(&answer, verb, api, pool)),
        }
    }

    fn granted(
        &self,
        pool: &PoolSpec,
        slot: u32,
        token: Token,
        fence: u64,
        prev: u64,
        stored: u64,
    ) -> Grant {
        self.floors().insert(token, stored);
        Grant::new(slot, token, Fence(fence), pool.ttl()).with_floor(Floor(prev))
    }

    /// The ambiguity rule: a write whose answer was lost may have been
    /// applied. One GET decides; if it cannot, the write is remembered and
    /// the next acquisition adopts the slot if it landed.
    #[allow(clippy::too_many_arguments)]
    async fn resolve_ambiguous(
        &self,
        pool: &PoolSpec,
        slot: u32,
        token: Token,
        holder_id: &str,
        prev_floor: u64,
        stored_floor: u64,
        deadline: Instant,
        why: &str,
    ) -> Result<Grant, AcquireError> {
        let name = lease_name(pool.name(), slot);
        if let Ok(resp) = self.inner.api.get(&name, deadline).await
            && resp.status == 200
            && let Ok(lease) = resp.lease()
            && holder_of(&lease) == holder_id
        {
            let rv = lease.metadata.resource_version.unwrap_or_default();
            let fence = parse_rv(&rv)?;
            self.observe(pool.name(), slot, &rv, Instant::now());
            return Ok(self.granted(pool, slot, token, fence, prev_floor, stored_floor));
        }
        let mut pending = self.pending();
        pending.retain(|p| p.at.elapsed() < PENDING_FOR);
        pending.push(Pending {
            pool: pool.name().as_str().to_owned(),
            slot,
            token,
            holder_id: holder_id.to_owned(),
            prev_floor,
            stored_floor,
            at: Instant::now(),
        });
        Err(unreachable(
            &format!("acquiring {name}"),
            &format!("{why} (the write may still land; the next acquisition adopts it if it did)"),
        ))
    }

    /// Adopts a slot whose acquiring write landed after its answer was
    /// lost: one renewal makes it ours from now on (observers restart their
    /// clocks at that write, so the holder's deadline counts from this call).
    async fn adopt_pending(
        &self,
        pool: &PoolSpec,
        raw: &[(u32, Lease)],
        ceiling: u64,
        deadline: Instant,
        sent: &mut u32,
    ) -> Option<Grant> {
        let candidates: Vec<Pending> = {
            let pending = self.pending();
            if pending.is_empty() {
                return None;
            }
            pending
                .iter()
                .filter(|p| p.pool == pool.name().as_str())
                .cloned()
                .collect()
        };
        for p in candidates {
            let Some((_, lease)) = raw
                .iter()
                .find(|(slot, l)| *slot == p.slot && holder_of(l) == p.holder_id)
            else {
                continue;
            };
            self.pending().retain(|q| q.token != p.token);
            let Ok(fence) = parse_rv(lease.metadata.resource_version.as_deref().unwrap_or(""))
            else {
                continue;
            };
            let grant = Grant::new(p.slot, p.token, Fence(fence), pool.ttl())
                .with_floor(Floor(p.prev_floor));
            self.floors().insert(p.token, p.stored_floor);
            *sent += 1;
            if let Renewal::Renewed { .. } = self
                .renew_grant(pool, &grant, Some(ceiling), deadline)
                .await
            {
                return Some(grant);
            }
        }
        None
    }

    /// Renews `grant`, raising the stored floor to `ceiling` when given.
    pub(crate) async fn renew_grant(
        &self,
        pool: &PoolSpec,
        grant: &Grant,
        ceiling: Option<u64>,
        deadline: Instant,
    ) -> Renewal {
        let api = &self.inner.api;
        let name = lease_name(pool.name(), grant.slot);
        let holder_id = holder_identity(pool.holder(), &grant.token);
        let Ok(secs) = ttl_secs(pool.ttl()) else {
            return Renewal::Retry(Reason::new("ttl below 1s"));
        };
        let mut known = self.floors().get(&grant.token).copied();
        for _ in 0..3 {
            let mut ops =
                vec![json!({"op": "test", "path": "/spec/holderIdentity", "value": holder_id})];
            let raise = match (ceiling, known) {
                (Some(c), Some(k)) if c > k => {
                    ops.push(json!({"op": "test", "path": FLOOR_POINTER, "value": k.to_string()}));
                    ops.push(json!({"op": "add", "path": FLOOR_POINTER, "value": c.to_string()}));
                    Some(c)
                }
                (Some(_), None) => {
                    // Not stored by this process: learn it, then renew.
                    match self.read_holder(&name, &holder_id, deadline).await {
                        Ok(Some(floor)) => {
                            known = Some(floor);
                            self.floors().insert(grant.token, floor);
                            continue;
                        }
                        Ok(None) => return Renewal::Lost(lost_reason(&name)),
                        Err(r) => return Renewal::Retry(r),
                    }
                }
                _ => None,
            };
            ops.push(json!({"op": "add", "path": "/spec/renewTime", "value": micro_time(unique_micros())}));
            ops.push(json!({"op": "add", "path": "/spec/leaseDurationSeconds", "value": secs}));
            ops.push(json!({"op": "add", "path": FENCE_POINTER, "value": fence_record(&grant.token, grant.fence.0)}));
            let resp = match api.json_patch(&name, &Value::Array(ops), deadline).await {
                Ok(r) => r,
                Err(e) => {
                    return Renewal::Retry(Reason::new(format!("renewing {name}: {}", e.text())));
                }
            };
            match resp.status {
                200 => {
                    if let Some(c) = raise {
                        self.floors().insert(grant.token, c);
                    }
                    return Renewal::renewed(pool.ttl());
                }
                404 => return Renewal::Lost(Reason::new(format!("Lease {name} was deleted"))),
                422 => match self.read_holder(&name, &holder_id, deadline).await {
                    Ok(None) => return Renewal::Lost(lost_reason(&name)),
                    Ok(Some(floor)) if raise.is_some() && Some(floor) != known => {
                        // Our floor test failed, not the holder test: a
                        // renewal whose answer was lost had landed.
                        known = Some(floor);
                        self.floors().insert(grant.token, floor);
                    }
                    Ok(Some(_)) => {
                        return Renewal::Retry(Reason::new(format!(
                            "renewing {name}: {} although the Lease is still ours",
                            resp.message()
                        )));
                    }
                    Err(r) => return Renewal::Retry(r),
                },
                _ => {
                    return Renewal::Retry(Reason::new(format!(
                        "renewing {name}: {}",
                        resp.message()
                    )));
                }
            }
        }
        Renewal::Retry(Reason::new(format!(
            "renewing {name}: the floor kept changing"
        )))
    }

    /// GETs `name`: `Some(stored floor)` when `holder_id` holds it, `None`
    /// when it is gone or held by another.
    async fn read_holder(
        &self,
        name: &str,
        holder_id: &str,
        deadline: Instant,
    ) -> Result<Option<u64>, Reason> {
        match self.inner.api.get(name, deadline).await {
            Ok(resp) if resp.status == 404 => Ok(None),
            Ok(resp) if resp.status == 200 => {
                let lease = resp.lease().map_err(Reason::new)?;
                Ok((holder_of(&lease) == holder_id).then(|| floor_of(&lease)))
            }
            Ok(resp) => Err(Reason::new(format!("reading {name}: {}", resp.message()))),
            Err(e) => Err(Reason::new(format!("reading {name}: {}", e.text()))),
        }
    }

    /// Releases `grant`, storing `issued` as the floor when given.
    pub(crate) async fn release_grant(
        &self,
        pool: &PoolSpec,
        grant: &Grant,
        issued: Option<u64>,
    ) -> Release {
        let api = &self.inner.api;
        let name = lease_name(pool.name(), grant.slot);
        let holder_id = holder_identity(pool.holder(), &grant.token);
        let deadline = Instant::now() + api.op_timeout.min(pool.ttl());
        let mut ops = vec![
            json!({"op": "test", "path": "/spec/holderIdentity", "value": holder_id}),
            json!({"op": "add", "path": "/spec/holderIdentity", "value": ""}),
            json!({"op": "add", "path": "/spec/leaseDurationSeconds", "value": 1}),
            json!({"op": "add", "path": "/spec/renewTime", "value": micro_time(unique_micros())}),
            json!({"op": "add", "path": FENCE_POINTER, "value": fence_record(&grant.token, grant.fence.0)}),
        ];
        if let Some(floor) = issued {
            ops.push(json!({"op": "add", "path": FLOOR_POINTER, "value": floor.to_string()}));
        }
        let resp = match api.json_patch(&name, &Value::Array(ops), deadline).await {
            Ok(r) => r,
            Err(e) => {
                return Release::Retry(Reason::new(format!("releasing {name}: {}", e.text())));
            }
        };
        let outcome = match resp.status {
            200 => Release::Released,
            404 => Release::NotHeld,
            422 => match self.read_holder(&name, &holder_id, deadline).await {
                Ok(None) => Release::NotHeld,
                Ok(Some(_)) => {
                    Release::Retry(Reason::new(format!("releasing {name}: {}", resp.message())))
                }
                Err(r) => Release::Retry(r),
            },
            _ => Release::Retry(Reason::new(format!("releasing {name}: {}", resp.message()))),
        };
        if !matches!(outcome, Release::Retry(_)) {
            self.floors().remove(&grant.token);
        }
        outcome
    }
}

fn lost_reason(name: &str) -> Reason {
    Reason::new(format!("Lease {name} is held by another holder or gone"))
}

pub(crate) fn holder_of(lease: &Lease) -> &str {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or("")
}

fn floor_of(lease: &Lease) -> u64 {
    lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(FLOOR_ANNOTATION))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The fence annotation: the first 8 hex digits of the recording holder's
/// token and its fence.
fn fence_of(lease: &Lease) -> Option<(String, u64)> {
    let v = lease.metadata.annotations.as_ref()?.get(FENCE_ANNOTATION)?;
    let (prefix, fence) = v.split_once(' ')?;
    Some((prefix.to_owned(), fence.parse().ok()?))
}

/// Microseconds since the Unix epoch of a MicroTime, if set.
fn micros_of(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>) -> Option<i64> {
    t.map(|t| t.0.as_microsecond())
}

/// A resourceVersion as a fence; not an integer is final.
pub(crate) fn parse_rv(rv: &str) -> Result<u64, AcquireError> {
    rv.parse::<u64>().map_err(|_| AcquireError::UnsupportedServer {
        what: format!(
            "the API server answered resourceVersion {rv:?}, which is not an integer, so it cannot \
             be a fence"
        ),
        fix: "use a kube-apiserver backed by etcd (every release so far; guaranteed from \
              Kubernetes 1.35, KEP-5504), or another lease store"
            .to_owned(),
    })
}

/// A Lease named like our slot must carry our labels.
fn check_ours(lease: &Lease, pool: &PoolSpec, slot: u32, api: &Api) -> Result<(), AcquireError> {
    let labels = lease.metadata.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    if label(POOL_LABEL) == Some(pool.name().as_str())
        && label(SLOT_LABEL) == Some(&slot.to_string())
    {
        return Ok(());
    }
    let name = lease_name(pool.name(), slot);
    Err(AcquireError::BadIdentifier {
        what: format!(
            "Lease {name} in namespace {} was not made by leasehold (it lacks the labels \
             {POOL_LABEL}={} and {SLOT_LABEL}={slot}); something else owns this name",
            api.namespace,
            pool.name()
        ),
        fix: format!(
            "choose another pool name, or delete the foreign Lease if nothing uses it (kubectl \
             delete lease -n {} {name})",
            api.namespace
        ),
    })
}

/// A definitive error answer to an acquisition's request.
/// What one LIST of a pool's Leases found.
struct Listed {
    /// Each slot's state.
    slots: HashMap<u32, Slot>,
    /// Each slot's Lease as read.
    raw: Vec<(u32, Lease)>,
    /// The pool's recorded ID format, if it has a format record.
    format: Option<String>,
}

fn write_error(resp: &Resp, verb: &str, api: &Api, pool: &PoolSpec) -> AcquireError {
    let msg = resp.message();
    match resp.status {
        403 => AcquireError::Misconfigured {
            what: format!(
                "RBAC: this identity may not `{verb}` coordination.k8s.io/leases in namespace {} \
                 ({msg})",
                api.namespace
            ),
            fix: "apply lease-k8s/deploy/rbac.yaml: a Role with get, list, create and patch on \
                  leases, bound to the pod's ServiceAccount"
                .to_owned(),
        },
        404 if verb == "create" => AcquireError::Misconfigured {
            what: format!("namespace {:?} does not exist ({msg})", api.namespace),
            fix: format!(
                "create it (kubectl create namespace {}) or configure the namespace the Leases \
                 should live in",
                api.namespace
            ),
        },
        429 => {
            AcquireError::Unreachable(Reason::new(format!("the API server is throttling ({msg})")))
        }
        s if s >= 500 => AcquireError::Unreachable(Reason::new(format!("{verb} leases: {msg}"))),
        _ => AcquireError::Misconfigured {
            what: format!(
                "the API server rejected `{verb}` on a Lease of pool {}: {msg}",
                pool.name()
            ),
            fix: "check the pool name and ttl; this is a bug if they are valid".to_owned(),
        },
    }
}

fn expect_ok<'a>(resp: &'a Resp, what: &'static str) -> Result<&'a Resp, KubeError> {
    if resp.ok() {
        Ok(resp)
    } else {
        Err(KubeError::Request {
            what,
            detail: resp.message(),
        })
    }
}

/// `leaseDurationSeconds`: whole seconds, rounded up, > 0.
pub(crate) fn ttl_secs(ttl: Duration) -> Result<i32, AcquireError> {
    if ttl < KubeStrategy::MIN_TTL {
        return Err(AcquireError::Misconfigured {
            what: format!(
                "ttl {ttl:?} is too short for Kubernetes Leases: leaseDurationSeconds counts whole \
                 seconds and must be at least 1"
            ),
            fix: "set ttl to at least 1s".to_owned(),
        });
    }
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    Ok(i32::try_from(secs).unwrap_or(i32::MAX))
}

impl Strategy for KubeStrategy {
    async fn acquire(&self, pool: &PoolSpec, ceiling: Floor) -> Result<Grant, AcquireError> {
        self.acquire_slot(pool, ceiling, None).await
    }

    async fn renew(&self, pool: &PoolSpec, grant: &Grant, ceiling: Floor) -> Renewal {
        let deadline = Instant::now() + self.inner.api.op_timeout.min(pool.ttl());
        self.renew_grant(pool, grant, Some(ceiling.0), deadline)
            .await
    }

    async fn release(&self, pool: &PoolSpec, grant: &Grant, issued: Floor) -> Release {
        self.release_grant(pool, grant, Some(issued.0)).await
    }

    /// One LIST of the pool's Leases. Expiry here is judged on the
    /// **observer's clock**, as the strategy judges takeovers (README, rule
    /// 1): `expires_in` is the lease duration minus the time since this
    /// process first saw the Lease's current resourceVersion (a strategy that
    /// never saw it before counts from this LIST, so a fresh observer
    /// reports the whole duration: an upper bound); the strategy takes a
    /// slot over only its takeover margin later. A Lease unchanged for its
    /// whole duration shows as free. `renewed_ago` and `held_for` come from
    /// `renewTime` and `acquireTime`, which the holder wrote on its wall
    /// clock, read on this host's wall clock: for people, never for expiry.
    /// The fence is the one the holder recorded in the `leasehold/fence`
    /// annotation (renewals, releases and revokes write it) when its token
    /// digits match, else the resourceVersion, which is still the acquiring
    /// write's until the holder's first renewal. `holderIdentity` shows
    /// the holder and only the first 8 hex digits of its token.
    async fn inspect(&self, pool: &PoolSpec) -> Result<Vec<SlotInfo>, InspectError> {
        let deadline = Instant::now() + self.op_timeout();
        let leases = self
            .list_pool(pool, deadline)
            .await
            .map_err(|e| InspectError::Store(Reason::new(e.to_string())))?
            .raw;
        let wall = i64::try_from(unique_micros()).unwrap_or(i64::MAX);
        let ago = |t: Option<i64>| {
            t.and_then(|t| u64::try_from(wall - t).ok())
                .map(Duration::from_micros)
        };
        let now = Instant::now();
        let mut slots: Vec<SlotInfo> = leases
            .iter()
            .map(|(slot, lease)| {
                let rv = lease.metadata.resource_version.as_deref().unwrap_or("");
                let rv = rv.parse::<u64>().unwrap_or(0);
                let recorded = fence_of(lease);
                let identity = holder_of(lease);
                let (revoked, identity) = match identity.strip_prefix(TOMBSTONE) {
                    Some(rest) => (true, rest),
                    None => (false, identity),
                };
                let split = split_identity(identity);
                let fence = match (&recorded, split) {
                    (Some((p, f)), Some((_, prefix))) if p == prefix => *f,
                    (_, Some(_)) => rv,
                    (Some((_, f)), None) => *f,
                    (None, None) => 0,
                };
                let info = SlotInfo::free(*slot, Fence(fence), Floor(floor_of(lease)));
                let spec = lease.spec.as_ref();
                let duration = spec
                    .and_then(|s| s.lease_duration_seconds)
                    .and_then(|s| u64::try_from(s).ok())
                    .map_or(Duration::ZERO, Duration::from_secs);
                let left = self
                    .observed()
                    .get(&(pool.name().as_str().to_owned(), *slot))
                    .filter(|seen| seen.rv == rv.to_string())
                    .map_or(duration, |seen| {
                        duration.saturating_sub(now.saturating_duration_since(seen.at))
                    });
                match split {
                    _ if left.is_zero() => info,
                    Some(_) if revoked => info.revoked_until(left),
                    Some((holder, prefix)) => info.held_by_prefix(holder, prefix, left).with_ages(
                        ago(micros_of(spec.and_then(|s| s.renew_time.as_ref()))),
                        ago(micros_of(spec.and_then(|s| s.acquire_time.as_ref()))),
                    ),
                    None => info,
                }
            })
            .collect();
        slots.sort_by_key(|i| i.slot);
        Ok(slots)
    }

    fn capabilities(&self) -> Capabilities {
        Self::CAPABILITIES
    }

    fn identity(&self) -> String {
        self.inner.identity.clone()
    }
}

impl std::fmt::Debug for KubeStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeStrategy")
            .field("identity", &self.inner.identity)
            .field("op_timeout", &self.inner.api.op_timeout)
            .field("takeover_margin", &self.inner.takeover_margin)
            .finish_non_exhaustive()
    }
}
