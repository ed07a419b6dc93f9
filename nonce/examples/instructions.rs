//! One operation, `N` times, inside one function, for counting instructions
//! per call with callgrind (load-independent, unlike wall-clock figures):
//!
//! ```sh
//! cargo build --profile bench -p leasehold-nonce --example instructions
//! valgrind --tool=callgrind --toggle-collect='*measured*' --callgrind-out-file=/dev/null \
//!     target/release/examples/instructions counter128 1000000
//! ```
//!
//! `Collected` ÷ N is the instructions per call. With `cpu` as a third
//! argument it prints the op's **thread CPU time** per call instead (best of
//! 7 rounds of N; `CLOCK_THREAD_CPUTIME_ID`, so time spent waiting for a core
//! on a loaded machine is not counted), and with `cpu2` the same on two
//! threads sharing the op (CPU time per call of each thread, and the wall
//! time per call of the pair). Ops: `counter64`,
//! `counter96`, `counter128`, `sortable128`, `uuid7`, `encrypted64`,
//! `encrypted96`, `encrypted128`, `speck64`, `speck96`, `aes`,
//! `aes-crate` (the `aes` crate's `Aes128`, as used before), `fetch_add`,
//! `uuid-now-v7`, and `try_next` instead of `next`: `counter128-try`,
//! `sortable128-try`, `counter64-try` (spinning while it would wait).

#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aes::cipher::{BlockCipherEncrypt, KeyInit};
use leasehold_core::testing::GateControl;
use leasehold_core::{Fence, LeaseGate, MonoTime};
use leasehold_nonce::*;

fn gate() -> LeaseGate {
    let g = LeaseGate::new();
    g.open(7, Fence(1), MonoTime::now() + Duration::from_secs(3600));
    g
}

#[inline(never)]
fn measured(n: u64, f: &mut dyn FnMut(u64)) {
    for i in 0..n {
        f(i);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let op = args.get(1).map_or("counter128", String::as_str);
    let n: u64 = args.get(2).map_or(1_000_000, |s| s.parse().unwrap());
    let key = BaseKey::new(&[0x5a; 32]).unwrap();
    let mut f: Box<dyn FnMut(u64)> = match op {
        "counter64" => {
            let g = Counter64::new(gate()).unwrap();
            Box::new(move |_| {
                black_box(g.next().unwrap());
            })
        }
        "counter96" => {
            let g = Counter96::new(gate()).unwrap();
            Box::new(move |_| {
                black_box(g.next().unwrap());
            })
        }
        "counter128" => {
            let g = Counter128::new(gate()).unwrap();
            Box::new(move |_| {
                black_box(g.next().unwrap());
            })
        }
        "sortable128" => {
            let g = Sortable128::new(gate()).unwrap();
            Box::new(move |_| {
                black_box(g.next().unwrap());
            })
        }
        "uuid7" => {
            let g = Sortable128::new(gate()).unwrap();
            Box::new(move |_| {
                black_box(g.next_uuid7().unwrap());
            })
        }
        "counter128-try" => {
            let g = Counter128::new(gate()).unwrap();
            Box::new(move |_| {
                black_box(try_until_ready(|| g.try_next()));
            })
        }
        "sortable128-try" => {
            let g = Sortable128::new(gate()).unwrap();
            Box::new(move |_| {
                black_box(try_until_ready(|| g.try_next()));
            })
        }
        "counter64-try" => {
            let g = Counter64::new(gate()).unwrap();
            Box::new(move |_| {
                black_box(try_until_ready(|| g.try_next()));
            })
        }
        "encrypted64" => {
            let g = Encrypted::new(Counter64::new(gate()).unwrap(), &key);
            Box::new(move |_| {
                black_box(g.next().unwrap());
            })
        }
        "encrypted96" => {
            let g = Encrypted::new(Counter96::new(gate()).unwrap(), &key);
            Box::new(move |_| {
                black_box(g.next().unwrap());
            })
        }
        "encrypted128" => {
            let g = Encrypted::new(Counter128::new(gate()).unwrap(), &key);
            Box::new(move |_| {
                black_box(g.next().unwrap());
            })
        }
        "speck64" => {
            let c = <W64 as Width>::Cipher::from_base(&key);
            Box::new(move |i| {
                black_box(c.encrypt(black_box(u128::from(i))));
            })
        }
        "speck96" => {
            let c = <W96 as Width>::Cipher::from_base(&key);
            Box::new(move |i| {
                black_box(c.encrypt(black_box(u128::from(i))));
            })
        }
        "aes" => {
            let c = <W128 as Width>::Cipher::from_base(&key);
            Box::new(move |i| {
                black_box(c.encrypt(black_box(u128::from(i))));
            })
        }
        "aes-crate" => {
            let c = aes::Aes128::new(&[0x5a; 16].into());
            Box::new(move |i| {
                let mut block = u128::from(black_box(i)).to_be_bytes().into();
                c.encrypt_block(&mut block);
                black_box(block);
            })
        }
        "fetch_add" => {
            let a = AtomicU64::new(0);
            Box::new(move |_| {
                black_box(a.fetch_add(1, Ordering::SeqCst));
            })
        }
        "uuid-now-v7" => Box::new(|_| {
            black_box(uuid::Uuid::now_v7());
        }),
        other => panic!("unknown op {other}"),
    };
    match args.get(3).map(String::as_str) {
        Some("cpu") => {
            let best = (0..7)
                .map(|_| {
                    let t0 = thread_cpu_ns();
                    measured(n, &mut f);
                    (thread_cpu_ns() - t0) as f64 / n as f64
                })
                .fold(f64::INFINITY, f64::min);
            println!("{op}: {best:.2} ns CPU per call (best of 7 x {n})");
        }
        Some("cpu2") => {
            // The op is `FnMut` for one thread; build one per thread that
            // shares the generator: rebuild by name and share through an Arc.
            drop(f);
            let shared = shared_op(op);
            let mut best = (f64::INFINITY, f64::INFINITY);
            for _ in 0..7 {
                let barrier = std::sync::Barrier::new(3);
                let (cpu, wall) = std::thread::scope(|s| {
                    let hs: Vec<_> = (0..2)
                        .map(|_| {
                            let (shared, barrier) = (&shared, &barrier);
                            s.spawn(move || {
                                barrier.wait();
                                let t0 = thread_cpu_ns();
                                for i in 0..n {
                                    shared(i);
                                }
                                (thread_cpu_ns() - t0) as f64 / n as f64
                            })
                        })
                        .collect();
                    barrier.wait();
                    let w0 = std::time::Instant::now();
                    let cpu: f64 = hs.into_iter().map(|h| h.join().unwrap()).sum::<f64>() / 2.0;
                    (cpu, w0.elapsed().as_nanos() as f64 / (2 * n) as f64)
                });
                best = (best.0.min(cpu), best.1.min(wall));
            }
            println!(
                "{op}: {:.2} ns CPU per call per thread, {:.2} ns wall per nonce of the pair (2 threads, best of 7 x {n} each)",
                best.0, best.1
            );
        }
        _ => measured(n, &mut f),
    }
}

/// `try_next` until it hands out a value, spinning while it would wait.
#[inline(always)]
fn try_until_ready<T>(f: impl Fn() -> Result<T, TryNextError>) -> T {
    loop {
        match f() {
            Ok(v) => return v,
            Err(TryNextError::WouldWait { .. }) => std::hint::spin_loop(),
            Err(e) => panic!("{e}"),
        }
    }
}

fn thread_cpu_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// The generators of `main`, shareable between threads.
fn shared_op(op: &str) -> Box<dyn Fn(u64) + Sync> {
    let key = BaseKey::new(&[0x5a; 32]).unwrap();
    match op {
        "counter128" => {
            let g = Counter128::new(gate()).unwrap();
            Box::new(move |_| {
                black_box(g.next().unwrap());
            })
        }
        "counter96" => {
            let g = Counter96::new(gate()).unwrap();
            Box::new(move |_| {
                black_box(g.next().unwrap());
            })
        }
        "sortable128" => {
            let g = Sortable128::new(gate()).unwrap();
            Box::new(move |_| {
                black_box(g.next().unwrap());
            })
        }
        "uuid7" => {
            let g = Sortable128::new(gate()).unwrap();
            Box::new(move |_| {
                black_box(g.next_uuid7().unwrap());
            })
        }
        "encrypted128" => {
            let g = Encrypted::new(Counter128::new(gate()).unwrap(), &key);
            Box::new(move |_| {
                black_box(g.next().unwrap());
            })
        }
        "fetch_add" => {
            let a = AtomicU64::new(0);
            Box::new(move |_| {
                black_box(a.fetch_add(1, Ordering::SeqCst));
            })
        }
        "uuid-now-v7" => Box::new(|_| {
            black_box(uuid::Uuid::now_v7());
        }),
        other => panic!("no two-thread form of {other}"),
    }
}
