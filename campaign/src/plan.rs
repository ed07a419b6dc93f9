//! The faults of a run, drawn from a seed: the same seed gives the same plan,
//! so a run can be replayed (the timing of the processes themselves cannot be).

use std::time::Duration;

/// A small deterministic generator (core's SplitMix64): the same seed gives
/// the same plan.
#[derive(Clone, Debug)]
pub struct Rng(leasehold_core::rand::SplitMix);

impl Rng {
    /// Seeded.
    pub fn new(seed: u64) -> Self {
        Self(leasehold_core::rand::SplitMix::new(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }

    /// Uniform in `-limit..=limit`.
    pub fn signed(&mut self, limit: i64) -> i64 {
        let span = limit.unsigned_abs() * 2 + 1;
        self.below(span) as i64 - limit.abs()
    }
}

/// A fault the runner injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// SIGKILL a worker, restart it.
    Kill,
    /// SIGSTOP a worker for longer than the TTL, then SIGCONT.
    Stop,
    /// SIGTERM a worker (it releases), restart it.
    Term,
    /// Cut a worker off the store for longer than the TTL (its fault proxy
    /// blackholes: what it sends is held, nothing comes back, new
    /// connections hang), then let traffic pass again.
    Cut,
    /// SIGSTOP the store's server for longer than the TTL, then SIGCONT.
    Freeze,
    /// The network fails loudly for longer than the TTL: the worker's
    /// connections to the store are reset and new ones refused, then pass
    /// again.
    Reset,
    /// A slow network for longer than the TTL: everything between the
    /// worker and the store is delayed by a third of the TTL each way.
    Slow,
    /// Crash the store's server (SIGKILL, PostgreSQL `pg_ctl stop -m
    /// immediate`) and start it again on the same data (every member of
    /// a cluster).
    Restart,
    /// SIGKILL one member of a cluster, start it again on its data after
    /// longer than the TTL (one member down at a time).
    Member,
    /// SIGKILL one PostgreSQL backend serving the lease connections: the
    /// postmaster ends every other backend, replays its WAL in place and
    /// accepts connections again without restarting (its start time does
    /// not move). Only PostgreSQL has such a crash: MariaDB and
    /// Valkey/Redis are one process each, where a crash is a restart.
    BackendCrash,
    /// The failover an HA manager makes: the standby stops receiving (it
    /// falls behind), the primary goes on for a while, is SIGKILLed, the
    /// standby is promoted and the clients' address moves to it; the old
    /// primary is rebuilt as the new standby. Replicated topologies only.
    Failover,
    /// Wipe the store's lease records of the run's pools while holders
    /// run, as an operator would: SQL `TRUNCATE` (SQLite: `DELETE`) of the
    /// lease table, Valkey/Redis `FLUSHALL`, an etcd delete of each pool's
    /// key prefix, Kubernetes the pools' Lease objects deleted. The holders'
    /// renewals answer `Lost`; the wipe guard grants nothing for one restart
    /// span. Single servers (and etcd's own cluster) only, with
    /// `--wipe-heavy`.
    Wipe,
}

impl Fault {
    /// Short name, for the table and the picture.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Stop => "stop",
            Fault::Term => "term",
            Fault::Cut => "cut",
            Fault::Reset => "reset",
            Fault::Slow => "slow",
            Fault::Freeze => "freeze",
            Fault::Restart => "restart",
            Fault::Member => "member",
            Fault::BackendCrash => "backend-crash",
            Fault::Failover => "failover",
            Fault::Wipe => "wipe",
        }
    }
}

/// One planned fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Planned {
    /// When, after the start of the run.
    pub at: Duration,
    /// What.
    pub fault: Fault,
    /// Which worker (an index into the worker table; ignored for `Freeze`
    /// and `Restart`; for `BackendCrash`, which of the lease backends, in
    /// the order of their process IDs).
    pub worker: usize,
    /// How long a pause lasts (`Stop`, `Cut`, `Freeze`).
    pub pause: Duration,
}

/// What the store's server can take, for [`plan`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreFaults {
    /// The store is reached over the network (through a fault proxy per
    /// worker), so a worker can be cut off it.
    pub cut: bool,
    /// The server can be frozen (SIGSTOP).
    pub freeze: bool,
    /// The server can be crashed and restarted.
    pub restart: bool,
    /// Restart-heavy: every other fault is a store restart.
    pub restart_heavy: bool,
    /// The store is a cluster whose members can be killed one at a time.
    pub member: bool,
    /// One backend of the server can crash without the server restarting
    /// (PostgreSQL).
    pub backend_crash: bool,
    /// Crash-heavy: every other fault is a backend crash (alternating with
    /// store restarts when restart-heavy too).
    pub crash_heavy: bool,
    /// The store is a replicated topology that can fail over; every other
    /// fault is then a failover.
    pub failover: bool,
    /// The store's lease records can be wiped by the runner (a single
    /// server, a file, etcd's own cluster or the fake API server).
    pub wipe: bool,
    /// Wipe-heavy: every other fault is a wipe (taking turns with the
    /// other heavy kinds).
    pub wipe_heavy: bool,
}

/// The faults of a run of `length` with `workers` workers and leases of `ttl`:
/// one every `every` (± half of it), after a quiet first `every`, none in the
/// last two TTLs. `store` says what the store's server can take.
pub fn plan(
    rng: &mut Rng,
    length: Duration,
    every: Duration,
    workers: usize,
    ttl: Duration,
    store: StoreFaults,
) -> Vec<Planned> {
    let mut kinds = vec![Fault::Kill, Fault::Stop, Fault::Term];
    if store.cut {
        kinds.push(Fault::Cut);
    }
    if store.freeze {
        kinds.push(Fault::Freeze);
    }
    if store.restart {
        kinds.push(Fault::Restart);
    }
    if store.cut {
        // The other network faults, after every kind of the earlier plans
        // (so the first faults of a seed stay what they were).
        kinds.push(Fault::Reset);
        kinds.push(Fault::Slow);
    }
    if store.member {
        // Member kills are what a cluster adds: twice as likely.
        kinds.push(Fault::Member);
        kinds.push(Fault::Member);
    }
    if store.backend_crash {
        kinds.push(Fault::BackendCrash);
    }
    // The kinds that every other fault cycles through. A wipe only with
    // its flag (so the plans of earlier seeds stay what they were), and
    // first, so that a short run with other heavy kinds too wipes at its
    // first heavy fault.
    let mut heavy_kinds = Vec::new();
    if store.wipe && store.wipe_heavy {
        heavy_kinds.push(Fault::Wipe);
    }
    if store.restart && store.restart_heavy {
        heavy_kinds.push(Fault::Restart);
    }
    if store.backend_crash && store.crash_heavy {
        heavy_kinds.push(Fault::BackendCrash);
    }
    if store.failover {
        heavy_kinds.push(Fault::Failover);
    }
    let heavy = !heavy_kinds.is_empty();
    let mut out = Vec::new();
    let every_ms = every.as_millis() as u64;
    let mut at = every;
    let end = length.saturating_sub(ttl * 2);
    while at < end {
        // The first faults go through every kind once, then at random.
        // Restart- or crash-heavy: every other fault is one of those (in
        // turn when both), the others as usual.
        let nth = if heavy { out.len() / 2 } else { out.len() };
        let fault = if heavy && out.len() % 2 == 1 {
            heavy_kinds[(out.len() / 2) % heavy_kinds.len()]
        } else if nth < kinds.len() {
            kinds[nth]
        } else {
            kinds[rng.below(kinds.len() as u64) as usize]
        };
        let worker = rng.below(workers as u64) as usize;
        // Longer than the TTL by 20 to 100 %.
        let pause = ttl + ttl * (20 + rng.below(81) as u32) / 100;
        out.push(Planned {
            at,
            fault,
            worker,
            pause,
        });
        at += Duration::from_millis(every_ms / 2 + rng.below(every_ms.max(1)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(2);

    /// A store that can take nothing beyond the workers' own faults.
    const NONE: StoreFaults = StoreFaults {
        cut: false,
        freeze: false,
        restart: false,
        restart_heavy: false,
        member: false,
        backend_crash: false,
        crash_heavy: false,
        failover: false,
        wipe: false,
        wipe_heavy: false,
    };
    /// A server reached over the network, which can be frozen.
    const NETWORKED: StoreFaults = StoreFaults {
        cut: true,
        freeze: true,
        ..NONE
    };
    /// A file store (SQLite): no cut, but its process can be frozen.
    const FILE: StoreFaults = StoreFaults {
        freeze: true,
        ..NONE
    };
    /// A cluster whose members can be killed.
    const CLUSTER: StoreFaults = StoreFaults {
        cut: true,
        restart: true,
        member: true,
        ..NONE
    };
    /// PostgreSQL: one backend can crash.
    const POSTGRES: StoreFaults = StoreFaults {
        cut: true,
        restart: true,
        backend_crash: true,
        ..NONE
    };

    /// The plan of a one-minute run of five workers with a fault every two
    /// TTLs.
    fn plan_of(seed: u64, store: StoreFaults) -> Vec<Planned> {
        plan(
            &mut Rng::new(seed),
            Duration::from_secs(60),
            TTL * 2,
            5,
            TTL,
            store,
        )
    }

    /// The first `n` faults of a plan.
    fn first(plan: &[Planned], n: usize) -> Vec<Fault> {
        plan.iter().take(n).map(|p| p.fault).collect()
    }

    #[test]
    fn a_seed_replays_its_plan_and_every_kind_comes_first() {
        let a = plan_of(7, NETWORKED);
        let b = plan_of(7, NETWORKED);
        let c = plan_of(8, NETWORKED);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(
            first(&a, 5),
            [
                Fault::Kill,
                Fault::Stop,
                Fault::Term,
                Fault::Cut,
                Fault::Freeze
            ]
        );
        for p in &a {
            assert!(p.worker < 5 && p.pause > TTL && p.pause <= TTL * 2);
            assert!(p.at < Duration::from_secs(56));
        }
    }

    /// A file store (SQLite): no network fault; a store that can take
    /// nothing: no fault of the store's own.
    #[test]
    fn a_store_gets_only_the_faults_it_can_take() {
        let file = plan_of(7, FILE);
        assert_eq!(
            first(&file, 4),
            [Fault::Kill, Fault::Stop, Fault::Term, Fault::Freeze]
        );
        assert!(
            file.iter()
                .all(|p| !matches!(p.fault, Fault::Cut | Fault::Reset | Fault::Slow))
        );
        let none = plan_of(7, NONE);
        assert!(
            none.iter()
                .all(|p| !matches!(p.fault, Fault::Freeze | Fault::Restart | Fault::Cut))
        );
        assert!(none.iter().all(|p| p.fault != Fault::Member));
    }

    #[test]
    fn a_restart_heavy_plan_restarts_every_other_time() {
        let heavy = plan_of(
            7,
            StoreFaults {
                cut: true,
                freeze: false,
                restart: true,
                restart_heavy: true,
                ..NONE
            },
        );
        let restarts = heavy.iter().filter(|p| p.fault == Fault::Restart).count();
        assert!(
            restarts * 2 + 1 >= heavy.len(),
            "{restarts} restarts of {}",
            heavy.len()
        );
        assert!(heavy.iter().any(|p| p.fault == Fault::Cut));
    }

    /// A cluster: member kills join after the other kinds, and come up at
    /// random later on.
    #[test]
    fn member_kills_join_a_cluster_plan_after_the_other_kinds() {
        let cluster = plan_of(7, CLUSTER);
        assert_eq!(
            first(&cluster, 8),
            [
                Fault::Kill,
                Fault::Stop,
                Fault::Term,
                Fault::Cut,
                Fault::Restart,
                Fault::Reset,
                Fault::Slow,
                Fault::Member
            ]
        );
        assert!(cluster.iter().skip(8).any(|p| p.fault == Fault::Member));
    }

    /// PostgreSQL: backend crashes join last; only there.
    #[test]
    fn backend_crashes_join_a_postgres_plan_last_and_no_other() {
        assert_eq!(
            first(&plan_of(7, POSTGRES), 7),
            [
                Fault::Kill,
                Fault::Stop,
                Fault::Term,
                Fault::Cut,
                Fault::Restart,
                Fault::Reset,
                Fault::Slow,
            ]
        );
        assert_eq!(plan_of(7, POSTGRES)[7].fault, Fault::BackendCrash);
        assert!(
            [NETWORKED, FILE, NONE, CLUSTER]
                .into_iter()
                .flat_map(|store| plan_of(7, store))
                .all(|p| p.fault != Fault::BackendCrash)
        );
    }

    /// Crash- and restart-heavy: every other fault, in turn.
    #[test]
    fn crash_and_restart_heavy_take_every_other_fault_in_turn() {
        let both = plan_of(
            7,
            StoreFaults {
                restart_heavy: true,
                crash_heavy: true,
                ..POSTGRES
            },
        );
        let odd: Vec<_> = both.iter().skip(1).step_by(2).map(|p| p.fault).collect();
        assert!(odd.len() >= 4, "{both:?}");
        for (i, f) in odd.iter().enumerate() {
            let want = [Fault::Restart, Fault::BackendCrash][i % 2];
            assert_eq!(*f, want, "{both:?}");
        }
    }

    /// Wipe-heavy: every other fault a wipe, taking turns with restarts
    /// (the wipe first); never without the flag, nor on a store the runner
    /// cannot wipe.
    #[test]
    fn a_wipe_heavy_plan_wipes_every_other_time_and_only_then() {
        let wipes = |store| -> Vec<usize> {
            plan_of(7, store)
                .iter()
                .enumerate()
                .filter(|(_, p)| p.fault == Fault::Wipe)
                .map(|(i, _)| i)
                .collect()
        };
        let alone = plan_of(
            7,
            StoreFaults {
                wipe: true,
                wipe_heavy: true,
                ..NETWORKED
            },
        );
        for (i, p) in alone.iter().enumerate() {
            assert_eq!(p.fault == Fault::Wipe, i % 2 == 1, "fault {i}: {alone:?}");
        }
        let with_restarts = plan_of(
            7,
            StoreFaults {
                restart: true,
                restart_heavy: true,
                wipe: true,
                wipe_heavy: true,
                ..NETWORKED
            },
        );
        let odd: Vec<_> = with_restarts
            .iter()
            .skip(1)
            .step_by(2)
            .map(|p| p.fault)
            .collect();
        assert!(odd.len() >= 4, "{with_restarts:?}");
        for (i, f) in odd.iter().enumerate() {
            assert_eq!(
                *f,
                [Fault::Wipe, Fault::Restart][i % 2],
                "{with_restarts:?}"
            );
        }
        // The flag without a store that can be wiped, or a store that can
        // be wiped without the flag: no wipe, and the plan of the seed is
        // what it was.
        assert!(
            wipes(StoreFaults {
                wipe_heavy: true,
                ..NETWORKED
            })
            .is_empty()
        );
        let unflagged = StoreFaults {
            wipe: true,
            ..POSTGRES
        };
        assert!(wipes(unflagged).is_empty());
        assert_eq!(plan_of(7, unflagged), plan_of(7, POSTGRES));
    }

    #[test]
    fn signed_stays_within_its_limit() {
        let mut r = Rng::new(1);
        assert!(
            (0..1000)
                .map(|_| r.signed(3))
                .all(|v| (-3..=3).contains(&v))
        );
    }

    #[test]
    fn a_replicated_store_fails_over_every_other_fault() {
        let store = StoreFaults {
            cut: true,
            failover: true,
            ..NONE
        };
        let plan = plan(
            &mut Rng::new(7),
            Duration::from_secs(120),
            TTL * 2,
            5,
            TTL,
            store,
        );
        assert!(plan.len() > 10);
        for (i, p) in plan.iter().enumerate() {
            assert_eq!(
                p.fault == Fault::Failover,
                i % 2 == 1,
                "fault {i}: {:?}",
                p.fault
            );
        }
    }
}
