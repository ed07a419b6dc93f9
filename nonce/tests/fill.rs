//! `Encrypted::fill`: many nonces per call, encrypted several blocks at once,
//! each plain value made (and gated) exactly as `next` makes it.

use std::collections::HashSet;
use std::time::Duration;

use leasehold_core::testing::GateControl;
use leasehold_core::{Fence, LeaseGate, MonoTime};
use leasehold_nonce::*;

fn key() -> BaseKey {
    BaseKey::new(&[0x42; 32]).unwrap()
}

/// Every width: `fill` gives what `next` would (the same permutation of the
/// same plain sequence), never a value twice, across threads, and mixed
/// with `next` on the same generator.
#[test]
fn fill_is_next_encrypted_in_batches() {
    fn check<G: Plain>(make: impl Fn(LeaseGate) -> G, wrap: fn(&NonceOf<G>) -> u128)
    where
        NonceOf<G>: Copy + Default + Send,
    {
        let gate = LeaseGate::new();
        gate.open(9, Fence(1), MonoTime::now() + Duration::from_secs(600));
        let e = Encrypted::new(make(gate), &key());
        let mut seen = HashSet::new();
        // Lengths around the group sizes (32, 16) and the chunk (64).
        for len in [0usize, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 1000] {
            let mut out = vec![NonceOf::<G>::default(); len];
            e.fill(&mut out).unwrap();
            for n in &out {
                assert_eq!(e.decode(*n).slot, 9);
                assert!(seen.insert(wrap(n)), "{len}: a repeated value");
                // Decrypting gives a plain value of this generator, and
                // encrypting it again gives the nonce back (one block at a
                // time: the batch and the single-block cipher agree).
                let plain = e.decrypt(*n);
                assert_eq!(e.layout().decode(G::W::unwrap(plain)).slot, 9);
            }
            seen.insert(wrap(&e.next().unwrap()));
        }
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let e = e.clone();
                std::thread::spawn(move || {
                    let mut all = Vec::new();
                    let mut out = vec![NonceOf::<G>::default(); 333];
                    for _ in 0..30 {
                        e.fill(&mut out).unwrap();
                        all.extend(out.iter().map(wrap));
                    }
                    all
                })
            })
            .collect();
        for h in handles {
            for v in h.join().unwrap() {
                assert!(seen.insert(v), "a repeated value across threads");
            }
        }
    }
    check(|g| Counter64::new(g).unwrap(), |n| u128::from(n.0));
    check(|g| Counter96::new(g).unwrap(), |n| n.to_u128());
    check(|g| Counter128::new(g).unwrap(), |n| n.0);
    check(|g| Sortable128::new(g).unwrap(), |n| n.0);
}

type NonceOf<G> = <<G as Plain>::W as Width>::Nonce;

/// The gate refuses part-way (its deadline passes while the batch is made):
/// the values made before are written and counted, none after the deadline,
/// and the rest of the buffer is left as it was.
#[test]
fn fill_stops_at_the_deadline_and_says_how_far_it_got() {
    let t = ManualTime::new();
    // Every precise reading (the first values wait for their millisecond)
    // moves time on; the deadline falls inside the batch.
    t.auto_advance(Duration::from_micros(200));
    let gate = LeaseGate::new();
    gate.open(3, Fence(1), t.mono() + Duration::from_millis(5));
    let e = Encrypted::new(
        Sortable64::with_time(gate, Layout::default64(), t.clone()).unwrap(),
        &key(),
    );
    let mut out = [Nonce64(7); 100_000];
    let err = e.fill(&mut out).unwrap_err();
    assert_eq!(err.error, GenerateError::Closed);
    assert!(err.filled > 0 && err.filled < out.len(), "{err}");
    let unique: HashSet<u64> = out[..err.filled].iter().map(|n| n.0).collect();
    assert_eq!(unique.len(), err.filled);
    for n in &out[..err.filled] {
        assert_eq!(e.decode(*n).slot, 3);
    }
    assert!(
        out[err.filled..].iter().all(|n| n.0 == 7),
        "written past what it reported"
    );
    assert!(
        err.to_string()
            .contains(&format!("filled {} nonces", err.filled))
    );
}
