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
    // The kinds that every other fault cycles through.
    let mut heavy_kinds = Vec::new();
    if store.restart && store.restart_heavy {
        heavy_kinds.push(Fault::Restart);
    }
    if store.backend_crash && store.crash_heavy {
        heavy_kinds.push(Fault::BackendCrash);
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

    #[test]
    fn a_seed_replays_its_plan_and_every_kind_comes_first() {
        let ttl = Duration::from_secs(2);
        let networked = StoreFaults {
            cut: true,
            freeze: true,
            ..StoreFaults::default()
        };
        let plan_of = |seed, store| {
            plan(
                &mut Rng::new(seed),
                Duration::from_secs(60),
                ttl * 2,
                5,
                ttl,
                store,
            )
        };
        let a = plan_of(7, networked);
        let b = plan_of(7, networked);
        let c = plan_of(8, networked);
        assert_eq!(a, b);
        assert_ne!(a, c);
        let first: Vec<_> = a.iter().take(5).map(|p| p.fault).collect();
        assert_eq!(
            first,
            [
                Fault::Kill,
                Fault::Stop,
                Fault::Term,
                Fault::Cut,
                Fault::Freeze
            ]
        );
        for p in &a {
            assert!(p.worker < 5 && p.pause > ttl && p.pause <= ttl * 2);
            assert!(p.at < Duration::from_secs(56));
        }
        // A file store (SQLite): no cut, and a frozen-less store no freeze.
        let file = plan_of(
            7,
            StoreFaults {
                freeze: true,
                ..StoreFaults::default()
            },
        );
        let first: Vec<_> = file.iter().take(4).map(|p| p.fault).collect();
        assert_eq!(
            first,
            [Fault::Kill, Fault::Stop, Fault::Term, Fault::Freeze]
        );
        assert!(
            file.iter()
                .all(|p| !matches!(p.fault, Fault::Cut | Fault::Reset | Fault::Slow))
        );
        let none = plan_of(7, StoreFaults::default());
        assert!(
            none.iter()
                .all(|p| !matches!(p.fault, Fault::Freeze | Fault::Restart | Fault::Cut))
        );
        let heavy = plan_of(
            7,
            StoreFaults {
                cut: true,
                freeze: false,
                restart: true,
                restart_heavy: true,
                ..StoreFaults::default()
            },
        );
        let restarts = heavy.iter().filter(|p| p.fault == Fault::Restart).count();
        assert!(
            restarts * 2 + 1 >= heavy.len(),
            "{restarts} restarts of {}",
            heavy.len()
        );
        assert!(heavy.iter().any(|p| p.fault == Fault::Cut));
        // A cluster: member kills join after the other kinds, and come
        // up at random later on.
        let cluster = plan_of(
            7,
            StoreFaults {
                cut: true,
                restart: true,
                member: true,
                ..StoreFaults::default()
            },
        );
        let first: Vec<_> = cluster.iter().take(8).map(|p| p.fault).collect();
        assert_eq!(
            first,
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
        assert!(none.iter().all(|p| p.fault != Fault::Member));
        // PostgreSQL: backend crashes join last; only there.
        let postgres = StoreFaults {
            cut: true,
            restart: true,
            backend_crash: true,
            ..StoreFaults::default()
        };
        let first: Vec<_> = plan_of(7, postgres)
            .iter()
            .take(7)
            .map(|p| p.fault)
            .collect();
        assert_eq!(
            first,
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
        assert_eq!(plan_of(7, postgres)[7].fault, Fault::BackendCrash);
        assert!(
            [a, file, none, cluster]
                .iter()
                .flatten()
                .all(|p| p.fault != Fault::BackendCrash)
        );
        // Crash- and restart-heavy: every other fault, in turn.
        let both = plan_of(
            7,
            StoreFaults {
                restart_heavy: true,
                crash_heavy: true,
                ..postgres
            },
        );
        let odd: Vec<_> = both.iter().skip(1).step_by(2).map(|p| p.fault).collect();
        assert!(odd.len() >= 4, "{both:?}");
        for (i, f) in odd.iter().enumerate() {
            let want = [Fault::Restart, Fault::BackendCrash][i % 2];
            assert_eq!(*f, want, "{both:?}");
        }
        let mut r = Rng::new(1);
        assert!(
            (0..1000)
                .map(|_| r.signed(3))
                .all(|v| (-3..=3).contains(&v))
        );
    }
}
