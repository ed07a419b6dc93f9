//! The simulator on the code as shipped: nothing planted.

use leasehold_sim::{Params, run_seed, sweep};

/// The same seed gives the same trace, byte for byte: a finding can be
/// replayed and shrunk.
#[test]
fn one_seed_gives_the_same_trace_twice() {
    let params = Params::default();
    for seed in [0, 7, 4_242] {
        let a = run_seed(seed, &params, true);
        let b = run_seed(seed, &params, true);
        assert!(
            a.trace.lines().count() > 100,
            "seed {seed}: a trace of a whole run"
        );
        assert_eq!(a.trace, b.trace, "seed {seed}");
        assert_eq!(a.grants, b.grants);
        assert_eq!(a.held_ns, b.held_ns);
    }
}

/// Thousands of 5-process, 60-simulated-second seeds: no two processes may
/// generate on one slot at once, and fences only grow, in every seed whose
/// clocks the margin covers. The seeds beyond it must make the faults real:
/// some of them violate.
#[test]
fn the_lease_code_as_shipped_holds_in_every_covered_seed() {
    let params = Params::default();
    let s = sweep(0, 5_000, &params, false, |_| {});
    if let Some((seed, v)) = &s.found {
        panic!(
            "seed {seed} violates: {}\nrerun: cargo xtask sim --seeds 1 --first {seed}",
            v.what
        );
    }
    assert_eq!(s.run, 5_000);
    assert!(
        s.grants > 5_000 * 5,
        "slots change hands: {} grants",
        s.grants
    );
    assert!(
        s.beyond_violations > 0,
        "faults beyond the margin break safety somewhere: the checker sees it"
    );
}
