//! The simulator on the code as shipped: nothing planted.

use leasehold_sim::{Params, Scenario, run_seed, sweep};

/// The same seed gives the same trace, byte for byte: a finding can be
/// replayed and shrunk. Seed 30's store crashes, is wiped and fails over to
/// a replica; seed 119's only fails over.
#[test]
fn one_seed_gives_the_same_trace_twice() {
    let params = Params::default();
    for seed in [0, 7, 30, 119, 4_242] {
        let a = run_seed(seed, &params, true);
        let b = run_seed(seed, &params, true);
        assert!(
            a.trace.lines().count() > 100,
            "seed {seed}: a trace of a whole run"
        );
        assert_eq!(a.trace, b.trace, "seed {seed}");
        if seed == 30 {
            assert!(a.trace.contains("store crashes"), "{}", a.trace);
            assert!(a.trace.contains("records are wiped"), "{}", a.trace);
        }
        if seed == 30 || seed == 119 {
            assert!(a.trace.contains("fails over to a replica"), "{}", a.trace);
        }
        assert_eq!(a.grants, b.grants);
        assert_eq!(a.held_ns, b.held_ns);
    }
}

/// Thousands of 5-process, 60-simulated-second seeds: no two processes may
/// generate on one slot at once, no timestamp is issued twice, fences only
/// grow and the fence table takes no stale write, and no process is kept
/// from generating where nothing excuses it, in every seed whose clocks the
/// margin covers, stores that crash or are wiped included, and store-clock
/// steps beyond the margin that a renewal caught. The seeds beyond it must
/// make the faults real: some of them violate.
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
    // Nor is a process kept from generating where nothing excuses it.
    if let Some((seed, v)) = &s.outage {
        panic!(
            "seed {seed} has an outage: {}\nrerun: cargo xtask sim --seeds 1 --first {seed}",
            v.what
        );
    }
    assert_eq!(s.run, 5_000);
    assert!(
        s.steps_caught > 50,
        "covered seeds with a store-clock step beyond the margin, caught by a renewal: {}",
        s.steps_caught
    );
    assert!(
        s.grants > 5_000 * 5,
        "slots change hands: {} grants",
        s.grants
    );
    assert!(
        s.beyond_violations > 0,
        "faults beyond the margin break safety somewhere: the checker sees it"
    );
    // Those seeds include stores that forget: covered seeds with a crash
    // that loses acknowledged writes, with a wipe of the pool's records, and
    // with a failover to a replica that lacks acknowledged writes.
    let scenarios: Vec<_> = (0..5_000)
        .map(|seed| Scenario::generate(seed, &params))
        .filter(Scenario::covered)
        .collect();
    let crashes = scenarios
        .iter()
        .filter(|sc| sc.store_restarts.iter().any(|r| r.2 > 0))
        .count();
    let wipes = scenarios.iter().filter(|sc| !sc.wipes.is_empty()).count();
    let promotions = scenarios
        .iter()
        .filter(|sc| sc.promotions.iter().any(|r| r.2 > 0))
        .count();
    assert!(
        promotions > 250,
        "{promotions} covered seeds with a failover that forgets"
    );
    assert!(
        crashes > 500,
        "{crashes} covered seeds with a crash that forgets"
    );
    assert!(wipes > 300, "{wipes} covered seeds with a wipe");
}

/// Rule 9 as shipped: each process's second component is refused a
/// generator of its own on the gate and clones the first, so the two share
/// one generation state; both take real IDs whenever the process may
/// generate, and no ID is issued twice.
#[test]
fn a_second_generator_on_a_gate_clones_the_first() {
    let o = run_seed(0, &Params::default(), true);
    assert!(
        o.trace
            .contains("component B's generator refused (in use): it clones A's"),
        "{}",
        o.trace
    );
    assert!(
        !o.trace.contains("build generators of their own"),
        "{}",
        o.trace
    );
    let issuing = o
        .trace
        .lines()
        .filter(|l| l.contains(" IDs A: ") && l.contains("; B: ") && !l.contains("wait"))
        .count();
    assert!(
        issuing > 10,
        "IDs taken at {issuing} instants:\n{}",
        o.trace
    );
    assert!(o.violation.is_none(), "{:?}", o.violation);
}

/// The Kubernetes mode: a quarter of the seeds run Leases that nothing
/// expires, and claimers that judge expiry on their own clocks; none of the
/// covered ones violates. In seed 5 a claimer takes a held Lease over: its
/// LIST answer shows the Lease at the resourceVersion it first saw on its own
/// clock more than the takeover wait before (`leasehold_core::observed`:
/// the TTL, the takeover margin and 2 % of the TTL), and its write on that
/// resourceVersion wins; another Lease, seen at a newer resourceVersion just
/// now, stays held.
#[test]
fn kubernetes_leases_are_taken_over_on_the_observers_clock() {
    let params = Params::default();
    let s = sweep(0, 400, &params, true, |_| {});
    assert!(s.kubernetes > 50, "{} seeds in the mode", s.kubernetes);
    assert_eq!(s.kubernetes_violations, 0, "{:?}", s.found);
    let sc = Scenario::generate(5, &params);
    let k = sc.kubernetes.expect("seed 5 runs the Kubernetes mode");
    assert!(sc.covered() && sc.store_restarts.is_empty() && sc.wipes.is_empty());
    let a = run_seed(5, &params, true);
    assert_eq!(a.trace, run_seed(5, &params, true).trace);
    assert!(a.violation.is_none(), "{}", a.trace);
    let wait = leasehold_core::observed::takeover_wait(sc.ttl, sc.ttl, k.takeover_margin);
    let lines: Vec<&str> = a.trace.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains(" takes over slot "))
        .unwrap_or_else(|| panic!("no takeover:\n{}", a.trace));
    // "slot S at rv R: first seen at A on its clock, takeover at B, now C: …"
    let ns = |s: &str| -> u64 {
        let (whole, frac) = s.split_once('.').expect("seconds.nanoseconds");
        whole.parse::<u64>().unwrap() * 1_000_000_000 + frac.parse::<u64>().unwrap()
    };
    let field = |l: &str, key: &str, end: char| -> u64 {
        let rest = l
            .split(key)
            .nth(1)
            .unwrap_or_else(|| panic!("{key} in {l}"));
        ns(rest.split(end).next().unwrap())
    };
    let slot = lines[at].split(" takes over slot ").nth(1).unwrap();
    let slot = slot.split(' ').next().unwrap();
    let expired = lines[..at]
        .iter()
        .rev()
        .find(|l| l.contains(&format!(" slot {slot} at rv ")))
        .expect("the LIST's sighting of that slot");
    assert!(expired.ends_with(": expired on this clock"), "{expired}");
    let seen = field(expired, "first seen at ", ' ');
    let takeover = field(expired, "takeover at ", ',');
    let now = field(expired, ", now ", ':');
    assert_eq!(takeover - seen, u64::try_from(wait.as_nanos()).unwrap());
    assert!(now >= takeover, "{expired}");
    assert!(lines[at + 1].contains("-> Patched"), "{}", lines[at + 1]);
    assert!(
        lines[..at]
            .iter()
            .rev()
            .take(5)
            .any(|l| l.ends_with(": held")),
        "a Lease seen moving on stays held"
    );
}
