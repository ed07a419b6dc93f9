//! Our nonces against the fastest Rust ID generators, side by side, with lease
//! gating switched on in ours (a real, open `LeaseGate`).
//!
//! `cargo bench -p leasehold-nonce --bench nonces` (or `cargo xtask bench nonce`).
//! Two groups: `1 thread` (ns per call) and `2 threads` (both threads share one
//! generator; the figure is wall time / total calls, i.e. ns per nonce of the
//! pair). Results and ratios: `nonce/BENCHMARKS.md`.

#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use ferroid::define_snowflake_id;
use ferroid::generator::AtomicSnowflakeGenerator;
use ferroid::id::SnowflakeTwitterId;
use ferroid::time::{MonotonicClock, TWITTER_EPOCH};
use leasehold_core::testing::GateControl;
use leasehold_core::{Fence, LeaseGate, MonoTime};
use leasehold_nonce::*;

define_snowflake_id!(
    /// Our default 64-bit layout in ferroid's terms.
    Ferroid42_9_13, u64,
    reserved: 0,
    timestamp: 42,
    machine_id: 9,
    sequence: 13
);

fn gate() -> LeaseGate {
    let g = LeaseGate::new();
    g.open(7, Fence(1), MonoTime::now() + Duration::from_secs(3600));
    g
}

/// [`FastClock`] running behind real time until [`Banked::bank`]: a
/// generator built on it starts its lease that much earlier, so a 64-bit
/// counter (2^13 values per millisecond) has minutes of milliseconds saved
/// up and runs at its burst, unlimited rate. The clock is still read and the
/// gate still checked on every call; no value waits for its millisecond.
#[derive(Clone)]
struct Banked {
    clock: FastClock,
    back: Arc<AtomicU64>,
}

impl Banked {
    fn new() -> Self {
        // Ten minutes, or half the time since boot on a fresh machine.
        let back = (MonoTime::now().as_nanos() / 2).min(600_000_000_000);
        Self {
            clock: FastClock::new(),
            back: Arc::new(AtomicU64::new(back)),
        }
    }
    fn bank(&self) {
        self.back.store(0, Ordering::SeqCst);
    }
    fn shift(&self, t: MonoTime) -> MonoTime {
        MonoTime::from_nanos(t.as_nanos() - self.back.load(Ordering::Relaxed))
    }
}

impl TimeSource for Banked {
    fn now(&self) -> Reading {
        let r = self.clock.now();
        Reading {
            earliest: self.shift(r.earliest),
            latest: self.shift(r.latest),
        }
    }
    fn precise(&self) -> MonoTime {
        self.shift(self.clock.precise())
    }
    fn unix_offset(&self, fresh: bool) -> u64 {
        self.clock.unix_offset(fresh) + self.back.load(Ordering::Relaxed)
    }
    fn wall_clock_step(&self) -> Option<Duration> {
        self.clock.wall_clock_step()
    }
    fn guard(&self) -> Duration {
        self.clock.guard()
    }
}

fn key() -> BaseKey {
    BaseKey::new(&[0x5a; 32]).unwrap()
}

/// Runs `f` on 2 threads, `iters` calls each; returns wall time / 2 so the
/// per-iteration figure is ns per nonce of the pair.
fn two_threads<F: Fn() + Sync>(iters: u64, f: &F) -> Duration {
    let barrier = Barrier::new(3);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                barrier.wait();
                for _ in 0..iters {
                    f();
                }
            });
        }
        barrier.wait();
        let start = Instant::now();
        // The scope joins both threads before returning.
        start
    })
    .elapsed()
        / 2
}

/// The contenders: a name and a thread-safe "make one ID" closure.
type Contender = (&'static str, Box<dyn Fn() + Sync>);

fn contenders() -> Vec<Contender> {
    let c64 = Counter64::new(gate()).unwrap();
    let c96 = Counter96::new(gate()).unwrap();
    let c128 = Counter128::new(gate()).unwrap();
    let s64 = Sortable64::new(gate()).unwrap();
    let s96 = Sortable96::new(gate()).unwrap();
    let s128 = Sortable128::new(gate()).unwrap();
    let u7 = Sortable128::new(gate()).unwrap();
    let snow = Sortable64::with_layout(gate(), Layout::snowflake()).unwrap();
    let e64 = Encrypted::new(Counter64::new(gate()).unwrap(), &key());
    let e96 = Encrypted::new(Counter96::new(gate()).unwrap(), &key());
    let e128 = Encrypted::new(Counter128::new(gate()).unwrap(), &key());

    let epoch = Duration::from_millis(DEFAULT_EPOCH_UNIX_MS);
    let fer_ours: Arc<AtomicSnowflakeGenerator<Ferroid42_9_13, _>> = Arc::new(
        AtomicSnowflakeGenerator::new(7, MonotonicClock::<1>::with_epoch(epoch)),
    );
    let fer_tw: Arc<AtomicSnowflakeGenerator<SnowflakeTwitterId, _>> = Arc::new(
        AtomicSnowflakeGenerator::new(7, MonotonicClock::<1>::with_epoch(TWITTER_EPOCH)),
    );
    let snowflaked = Arc::new(snowflaked::sync::Generator::new(7));

    vec![
        (
            "ours/counter64",
            Box::new(move || {
                black_box(c64.next().unwrap());
            }),
        ),
        (
            "ours/counter96",
            Box::new(move || {
                black_box(c96.next().unwrap());
            }),
        ),
        (
            "ours/counter128",
            Box::new(move || {
                black_box(c128.next().unwrap());
            }),
        ),
        (
            "ours/sortable64",
            Box::new(move || {
                black_box(s64.next().unwrap());
            }),
        ),
        (
            "ours/sortable96",
            Box::new(move || {
                black_box(s96.next().unwrap());
            }),
        ),
        (
            "ours/sortable128",
            Box::new(move || {
                black_box(s128.next().unwrap());
            }),
        ),
        (
            "ours/uuid7",
            Box::new(move || {
                black_box(u7.next_uuid7().unwrap());
            }),
        ),
        (
            "ours/sortable64-snowflake-41-10-12",
            Box::new(move || {
                black_box(snow.next().unwrap());
            }),
        ),
        (
            "ours/encrypted64-speck",
            Box::new(move || {
                black_box(e64.next().unwrap());
            }),
        ),
        (
            "ours/encrypted96-speck",
            Box::new(move || {
                black_box(e96.next().unwrap());
            }),
        ),
        (
            "ours/encrypted128-aes",
            Box::new(move || {
                black_box(e128.next().unwrap());
            }),
        ),
        (
            "uuid/now_v7",
            Box::new(|| {
                black_box(uuid::Uuid::now_v7());
            }),
        ),
        (
            "ulid/Ulid::generate",
            Box::new(|| {
                black_box(ulid::Ulid::generate());
            }),
        ),
        (
            "ferroid/atomic-42-9-13",
            Box::new(move || {
                black_box(fer_ours.next_id(|_| std::hint::spin_loop()));
            }),
        ),
        (
            "ferroid/atomic-twitter-41-10-12",
            Box::new(move || {
                black_box(fer_tw.next_id(|_| std::hint::spin_loop()));
            }),
        ),
        (
            "snowflaked/sync-41-10-12",
            Box::new(move || {
                black_box(snowflaked.generate::<u64>());
            }),
        ),
    ]
}

fn side_by_side(c: &mut Criterion) {
    let all = contenders();
    let mut one = c.benchmark_group("1 thread");
    for (name, f) in &all {
        one.bench_function(*name, |b| b.iter(f));
    }
    // ulid's monotonic generator needs `&mut`: one per thread.
    let mut g = ulid::Generator::new();
    one.bench_function("ulid/Generator (per thread)", |b| {
        b.iter(|| black_box(g.generate().unwrap()))
    });
    one.finish();

    let mut two = c.benchmark_group("2 threads");
    for (name, f) in &all {
        two.bench_function(*name, |b| b.iter_custom(|iters| two_threads(iters, f)));
    }
    two.finish();
}

/// What the gate and the clock cost: the same counter with and without them,
/// the two clocks, and the parts on their own.
fn gate_cost(c: &mut Criterion) {
    let mut g = c.benchmark_group("gate cost");
    let fast = Counter128::new(gate()).unwrap();
    let precise = Counter128::with_time(gate(), Layout::default128(), PreciseClock).unwrap();
    let sortable_precise =
        Sortable128::with_time(gate(), Layout::default128(), PreciseClock).unwrap();
    let ungated = Counter128::new(gate()).unwrap();
    ungated.next().unwrap(); // takes the lease once
    g.bench_function("counter128 gated, FastClock", |b| {
        b.iter(|| fast.next().unwrap())
    });
    g.bench_function("counter128 gated, PreciseClock", |b| {
        b.iter(|| precise.next().unwrap())
    });
    g.bench_function("sortable128 gated, PreciseClock", |b| {
        b.iter(|| sortable_precise.next().unwrap())
    });
    g.bench_function("counter128 ungated (no clock, no gate)", |b| {
        b.iter(|| ungated.next_ungated_for_bench().unwrap())
    });
    let clock = FastClock::new();
    g.bench_function("FastClock::now", |b| b.iter(|| clock.now()));
    g.bench_function("PreciseClock (MonoTime::now)", |b| b.iter(MonoTime::now));
    let gt = gate();
    let now = MonoTime::now();
    g.bench_function("LeaseGate::check", |b| b.iter(|| gt.check(black_box(now))));
    let k = key();
    let speck64 = <W64 as Width>::Cipher::from_base(&k);
    let speck96 = <W96 as Width>::Cipher::from_base(&k);
    let aes128 = <W128 as Width>::Cipher::from_base(&k);
    let mut x = 0u128;
    g.bench_function("cipher only: Speck64/128 block", |b| {
        b.iter(|| {
            x += 1;
            speck64.encrypt(black_box(x))
        })
    });
    g.bench_function("cipher only: Speck96/144 block", |b| {
        b.iter(|| {
            x += 1;
            speck96.encrypt(black_box(x))
        })
    });
    g.bench_function("cipher only: AES-128 block", |b| {
        b.iter(|| {
            x += 1;
            aes128.encrypt(black_box(x))
        })
    });
    // Many blocks per call (`BlockPermutation::encrypt_many`, what
    // `Encrypted::fill` uses): the figure is per block.
    let mut batch = [0u128; 64];
    let mut per_block = |name: &str, cipher: &dyn Fn(&mut [u128])| {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    x += 1;
                    batch[0] = x;
                    cipher(black_box(&mut batch));
                }
                start.elapsed() / 64
            })
        });
    };
    per_block(
        "cipher only: Speck64/128, 64 blocks per call (per block)",
        &|b| speck64.encrypt_many(b),
    );
    per_block(
        "cipher only: Speck96/144, 64 blocks per call (per block)",
        &|b| speck96.encrypt_many(b),
    );
    // The `aes` crate's `Aes128` on its own (what encrypted128 used before):
    // with VAES on the CPU it sets up 256-bit round keys on every call.
    let aes_crate = {
        use aes::cipher::KeyInit;
        aes::Aes128::new(&[0x5a; 16].into())
    };
    g.bench_function("cipher only: aes crate Aes128 block", |b| {
        use aes::cipher::BlockCipherEncrypt;
        b.iter(|| {
            x += 1;
            let mut block = black_box(x).to_be_bytes().into();
            aes_crate.encrypt_block(&mut block);
            block
        })
    });
    // 64-bit counters at their burst rate: the lease began minutes ago.
    let banked = Banked::new();
    let c64 = Counter64::with_time(gate(), Layout::default64(), banked.clone()).unwrap();
    let e64 = Encrypted::new(
        Counter64::with_time(gate(), Layout::default64(), banked.clone()).unwrap(),
        &k,
    );
    c64.next().unwrap();
    e64.next().unwrap();
    banked.bank();
    g.bench_function("counter64 at burst rate", |b| {
        b.iter(|| c64.next().unwrap())
    });
    g.bench_function("encrypted64 at burst rate", |b| {
        b.iter(|| e64.next().unwrap())
    });
    let mut out = [Nonce64(0); 64];
    g.bench_function("encrypted64 at burst rate, fill 64 (per nonce)", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                e64.fill(black_box(&mut out)).unwrap();
            }
            start.elapsed() / 64
        })
    });
    let counter = AtomicU64::new(0);
    g.bench_function("AtomicU64::fetch_add", |b| {
        b.iter(|| counter.fetch_add(1, Ordering::SeqCst))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(400))
        .measurement_time(Duration::from_millis(1500))
        .sample_size(20);
    targets = side_by_side, gate_cost
}
criterion_main!(benches);
