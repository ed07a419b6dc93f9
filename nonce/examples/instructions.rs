//! One operation, `N` times, inside one function, for counting instructions
//! per call with callgrind (load-independent, unlike wall-clock figures):
//!
//! ```sh
//! cargo build --profile bench -p leasehold-nonce --example instructions
//! valgrind --tool=callgrind --toggle-collect='*measured*' --callgrind-out-file=/dev/null \
//!     target/release/examples/instructions counter128 1000000
//! ```
//!
//! `Collected` ÷ N is the instructions per call. Ops: `counter64`,
//! `counter96`, `counter128`, `sortable128`, `uuid7`, `encrypted64`,
//! `encrypted96`, `encrypted128`, `speck64`, `speck96`, `aes`,
//! `aes-crate` (the `aes` crate's `Aes128`, as used before), `fetch_add`,
//! `uuid-now-v7`.

#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aes::cipher::{BlockCipherEncrypt, KeyInit};
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
    measured(n, &mut f);
}
