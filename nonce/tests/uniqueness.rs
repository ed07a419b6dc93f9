//! 8 threads × 1M nonces for every type and size, all distinct. Each generator
//! is gated by a real, open `LeaseGate`.

use std::time::Duration;

use leasehold_core::testing::GateControl;
use leasehold_core::{Fence, LeaseGate, MonoTime};
use leasehold_nonce::*;

const THREADS: usize = 8;
const PER_THREAD: usize = 1_000_000;

fn open_gate(slot: u32) -> LeaseGate {
    let gate = LeaseGate::new();
    gate.open(slot, Fence(1), MonoTime::now() + Duration::from_secs(600));
    gate
}

/// Runs `next` on 8 threads, checks per-thread order when asked, then that
/// all 8M values are distinct.
fn all_distinct<F>(next: F, ordered: bool)
where
    F: Fn() -> u128 + Sync,
{
    let per_thread: Vec<Vec<u128>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    let mut v = Vec::with_capacity(PER_THREAD);
                    for _ in 0..PER_THREAD {
                        v.push(next());
                    }
                    v
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    if ordered {
        for v in &per_thread {
            assert!(
                v.windows(2).all(|w| w[0] < w[1]),
                "not increasing within a thread"
            );
        }
    }
    let mut all: Vec<u128> = per_thread.into_iter().flatten().collect();
    assert_eq!(all.len(), THREADS * PER_THREAD);
    all.sort_unstable();
    let dup = all.windows(2).find(|w| w[0] == w[1]);
    assert!(dup.is_none(), "duplicate nonce {dup:x?}");
}

macro_rules! unique {
    ($name:ident, $make:expr, $ordered:expr) => {
        #[test]
        fn $name() {
            let g = $make;
            all_distinct(|| u128::from(g.next().unwrap()), $ordered);
        }
    };
}

unique!(counter64, Counter64::new(open_gate(1)).unwrap(), true);
unique!(counter96, Counter96::new(open_gate(2)).unwrap(), true);
unique!(counter128, Counter128::new(open_gate(3)).unwrap(), true);
unique!(sortable64, Sortable64::new(open_gate(4)).unwrap(), true);
unique!(sortable96, Sortable96::new(open_gate(5)).unwrap(), true);
unique!(sortable128, Sortable128::new(open_gate(6)).unwrap(), true);

fn key() -> BaseKey {
    BaseKey::new(b"an example base key of 32+ bytes, never use it").unwrap()
}

unique!(
    encrypted_counter64,
    Encrypted::new(Counter64::new(open_gate(7)).unwrap(), &key()),
    false
);
unique!(
    encrypted_counter96,
    Encrypted::new(Counter96::new(open_gate(8)).unwrap(), &key()),
    false
);
unique!(
    encrypted_counter128,
    Encrypted::new(Counter128::new(open_gate(9)).unwrap(), &key()),
    false
);
unique!(
    encrypted_sortable64,
    Encrypted::new(Sortable64::new(open_gate(10)).unwrap(), &key()),
    false
);

#[test]
fn uuid7() {
    let g = Sortable128::new(open_gate(11)).unwrap();
    all_distinct(|| g.next_uuid7().unwrap().to_u128(), true);
}

#[test]
fn snowflake_layout() {
    let g = Sortable64::with_layout(open_gate(1023), Layout::snowflake()).unwrap();
    all_distinct(
        || {
            let n = g.next().unwrap();
            assert!(n.0 >> 63 == 0, "the sign bit is reserved");
            u128::from(n)
        },
        true,
    );
}
