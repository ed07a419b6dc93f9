//! Acquisition, 2 round trips: LIST the pool's Leases, then one write to a
//! takeable slot chosen at random (`protocol.rs` decides which and how); a
//! write whose answer was lost is resolved by the ambiguity rule. The LIST
//! also reads the pool's incarnation record: the wipe guard costs no request.

use k8s_openapi::api::coordination::v1::Lease;
use leasehold_core::rand::SplitMix;
use leasehold_core::{AcquireError, Fence, Floor, Grant, PoolSpec, Reason, Renewal, Token};
use serde_json::Value;
use tokio::time::Instant;

use crate::api::NoAnswer;
use crate::cache::Pending;
use crate::lease::{
    Listed, Slot, check_ours, damaged_format, format_of, holder_of, parse_list, parse_rv,
};
use crate::names::{POOL_LABEL, format_name, holder_identity, lease_name};
use crate::protocol::{
    self, Answer, MAX_LISTS, WRITES_PER_LIST, check_recorded_format, no_answer, unreachable,
    write_error,
};
use crate::strategy::KubeStrategy;
use crate::time::{micro_time, unique_micros};

impl KubeStrategy {
    /// Acquires a slot of `pool` (only `pinned` when given), raising its
    /// floor to `ceiling`. Returns the grant and the floor stored before.
    pub(crate) async fn acquire_slot(
        &self,
        pool: &PoolSpec,
        ceiling: Floor,
        pinned: Option<u32>,
    ) -> Result<Grant, AcquireError> {
        let ceiling = ceiling.0;
        let secs = protocol::check_request(pool, pinned)?;
        // The whole acquisition never outlives the lease it would grant (an
        // answer after that is useless); each request is bounded by the
        // operation timeout too.
        let deadline = Instant::now() + pool.ttl();
        let mut sent = 0u32;
        let mut rng = SplitMix::from_os();
        for _ in 0..MAX_LISTS {
            sent += 1;
            let Listed {
                slots,
                raw,
                format,
                incarnation,
            } = self.list_pool(pool, deadline).await?;
            // Before anything is written: a pool whose Leases were wiped
            // grants nothing until the guard has passed (`guard.rs`).
            self.check_incarnation(pool, incarnation, deadline).await?;
            self.check_format(pool, format, deadline).await?;
            if let Some(won) = self
                .adopt_pending(pool, &raw, ceiling, deadline, &mut sent)
                .await
            {
                self.record_acquire(sent);
                return Ok(won);
            }
            let now = Instant::now();
            let range = protocol::slot_range(pool.size(), pinned);
            let mut choice = protocol::choose(&slots, range, now, |slot, rv, duration| {
                self.takeover_at(pool, slot, rv, duration)
            });
            if choice.candidates.is_empty() {
                let wait = choice.earliest.map(|e| e.saturating_duration_since(now));
                return Err(protocol::nothing_takeable(pool, pinned, &slots, wait));
            }
            rng.shuffle(&mut choice.candidates);
            for (slot, state) in choice.candidates.into_iter().take(WRITES_PER_LIST as usize) {
                if Instant::now() >= deadline {
                    break;
                }
                sent += 1;
                if let Some(won) = self
                    .try_slot(pool, slot, &state, secs, ceiling, deadline, &mut sent)
                    .await?
                {
                    self.record_acquire(sent);
                    return Ok(won);
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

    /// When a Lease held at `rv` may be taken over (see
    /// [`protocol::takeover_at`]).
    fn takeover_at(
        &self,
        pool: &PoolSpec,
        slot: u32,
        rv: &str,
        duration: std::time::Duration,
    ) -> Option<Instant> {
        let seen = self.inner.caches.seen(pool.name(), slot);
        protocol::takeover_at(
            seen.as_ref(),
            rv,
            duration,
            pool.ttl(),
            self.inner.takeover_margin,
        )
    }

    /// Reads the pool: the Leases labelled with it. A foreign Lease that
    /// occupies one of our names carries no such label, so it shows as a 409
    /// to our create of an "absent" slot; such a slot becomes a suspect, and
    /// a suspect still absent from a later LIST is read once: not ours is a
    /// final error.
    pub(crate) async fn list_pool(
        &self,
        pool: &PoolSpec,
        deadline: Instant,
    ) -> Result<Listed, AcquireError> {
        let api = &self.inner.api;
        let selector = format!("{POOL_LABEL}={}", pool.name());
        let resp = api
            .list(&selector, deadline)
            .await
            .map_err(|e| no_answer("LIST leases", e))?;
        let at = Instant::now();
        if !resp.ok() {
            return Err(write_error(&resp, "list", &api.namespace, pool));
        }
        let list: Value = serde_json::from_slice(&resp.body)
            .map_err(|e| unreachable("LIST leases", &format!("unreadable answer: {e}")))?;
        let listed = parse_list(pool, &api.namespace, &list)?;
        for (slot, lease) in &listed.raw {
            let rv = lease.metadata.resource_version.as_deref().unwrap_or("");
            self.inner.caches.observe(pool.name(), *slot, rv, at);
        }
        self.check_suspects(pool, &listed, deadline).await?;
        Ok(listed)
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
                let body = protocol::format_record(pool, ours);
                let resp = api
                    .create(&body, false, deadline)
                    .await
                    .map_err(|e| no_answer(&format!("POST {name}"), e))?;
                if resp.ok() {
                    return Ok(());
                }
                if resp.status != 409 {
                    return Err(write_error(&resp, "create", &api.namespace, pool));
                }
                let resp = api
                    .get(&name, deadline)
                    .await
                    .map_err(|e| no_answer(&format!("GET {name}"), e))?;
                if !resp.ok() {
                    return Err(write_error(&resp, "get", &api.namespace, pool));
                }
                let lease: Value = serde_json::from_slice(&resp.body).map_err(|e| {
                    unreachable(&format!("GET {name}"), &format!("unreadable answer: {e}"))
                })?;
                format_of(&lease)
                    .ok_or_else(|| damaged_format(pool, &api.namespace))?
                    .to_owned()
            }
        };
        check_recorded_format(pool, ours, recorded)
    }

    /// Reads each suspect slot of `pool` still absent from `listed`.
    async fn check_suspects(
        &self,
        pool: &PoolSpec,
        listed: &Listed,
        deadline: Instant,
    ) -> Result<(), AcquireError> {
        let suspects = self.inner.caches.take_suspects(pool.name());
        for slot in suspects
            .into_iter()
            .filter(|s| !listed.slots.contains_key(s))
        {
            let name = lease_name(pool.name(), slot);
            let resp = self
                .inner
                .api
                .get(&name, deadline)
                .await
                .map_err(|e| no_answer(&format!("GET {name}"), e))?;
            if resp.status == 200 {
                let lease = resp
                    .lease()
                    .map_err(|e| unreachable(&format!("GET {name}"), &e))?;
                check_ours(&lease, pool, slot, &self.inner.api.namespace)?;
            }
        }
        Ok(())
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
        let write = protocol::acquiring_write(pool, slot, state, &holder_id, secs, ceiling, &now);
        let result = match state {
            Slot::Absent => api.create(&write.body, false, deadline).await,
            Slot::Free { .. } | Slot::Held { .. } => {
                api.merge_patch(&name, &write.body, deadline).await
            }
        };
        let pending = Pending {
            pool: pool.name().as_str().to_owned(),
            slot,
            token,
            holder_id,
            prev_floor: write.prev_floor,
            stored_floor: write.stored_floor,
            at: Instant::now(),
        };
        let verb = write.verb;
        let answer = match result {
            Ok(resp) => resp,
            Err(e @ (NoAnswer::NotSent(_) | NoAnswer::Tls(..))) => {
                return Err(no_answer(&format!("{verb} {name}"), e));
            }
            Err(NoAnswer::Unknown(m)) => {
                *sent += 1;
                return self
                    .resolve_ambiguous(pool, pending, deadline, &m)
                    .await
                    .map(Some);
            }
        };
        match protocol::judge(verb, answer.status) {
            Answer::Won => {
                let lease = answer
                    .lease()
                    .map_err(|e| unreachable(&format!("{verb} {name}"), &e))?;
                let rv = lease.metadata.resource_version.unwrap_or_default();
                let fence = parse_rv(&rv)?;
                self.inner
                    .caches
                    .observe(pool.name(), slot, &rv, Instant::now());
                Ok(Some(self.granted(pool, &pending, fence)))
            }
            Answer::Next { suspect } => {
                if suspect {
                    self.inner.caches.suspect(pool.name(), slot);
                }
                Ok(None)
            }
            Answer::Ambiguous => {
                *sent += 1;
                self.resolve_ambiguous(pool, pending, deadline, &answer.message())
                    .await
                    .map(Some)
            }
            Answer::Refused => Err(write_error(&answer, verb, &api.namespace, pool)),
        }
    }

    /// The grant of the acquiring write `won`, whose Lease has resourceVersion
    /// `fence`; remembers the floor it stored.
    fn granted(&self, pool: &PoolSpec, won: &Pending, fence: u64) -> Grant {
        self.inner.caches.set_floor(won.token, won.stored_floor);
        Grant::new(won.slot, won.token, Fence(fence), pool.ttl()).with_floor(Floor(won.prev_floor))
    }

    /// The ambiguity rule: a write whose answer was lost may have been
    /// applied. One GET decides; if it cannot, the write is remembered and
    /// the next acquisition adopts the slot if it landed.
    async fn resolve_ambiguous(
        &self,
        pool: &PoolSpec,
        write: Pending,
        deadline: Instant,
        why: &str,
    ) -> Result<Grant, AcquireError> {
        let name = lease_name(pool.name(), write.slot);
        if let Ok(resp) = self.inner.api.get(&name, deadline).await
            && resp.status == 200
            && let Ok(lease) = resp.lease()
            && holder_of(&lease) == write.holder_id
        {
            let rv = lease.metadata.resource_version.unwrap_or_default();
            let fence = parse_rv(&rv)?;
            self.inner
                .caches
                .observe(pool.name(), write.slot, &rv, Instant::now());
            return Ok(self.granted(pool, &write, fence));
        }
        self.inner.caches.remember_pending(Pending {
            at: Instant::now(),
            ..write
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
        for p in self.inner.caches.pending_of(pool.name()) {
            let Some((_, lease)) = raw
                .iter()
                .find(|(slot, l)| *slot == p.slot && holder_of(l) == p.holder_id)
            else {
                continue;
            };
            self.inner.caches.forget_pending(&p.token);
            let Ok(fence) = parse_rv(lease.metadata.resource_version.as_deref().unwrap_or(""))
            else {
                continue;
            };
            let grant = Grant::new(p.slot, p.token, Fence(fence), pool.ttl())
                .with_floor(Floor(p.prev_floor));
            self.inner.caches.set_floor(p.token, p.stored_floor);
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
}
