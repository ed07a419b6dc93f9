//! What a Sentinel topology does when its Sentinels cannot make a failover
//! by themselves (stopped with `SIGSTOP`, as a starved machine stops them):
//! it asks one that still runs for the failover, and when none can make
//! it, says so and puts the topology back, so that the failover can be
//! tried again. A failover that did not happen is never reported as one.

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use leasehold_conformance::in_ci;
use leasehold_conformance::programs;
use leasehold_conformance::servers::{ServerKind, find_binary};
use leasehold_conformance::topology::FailoverError;
use leasehold_conformance::topology::sentinel::{Reply, SentinelTopology, SentinelTuning};

/// How long a test waits for what a topology does in the background.
const WAIT: Duration = Duration::from_secs(120);

/// The topology on Valkey 8 with `tuning`, or `None` (said) when this
/// machine has no Valkey 8; a missing server fails under CI.
fn topology(tuning: SentinelTuning) -> Option<SentinelTopology> {
    let kind = ServerKind::Valkey8;
    if find_binary(kind).is_none() {
        assert!(!in_ci(), "no {kind} binary: {}", kind.install_hint());
        eprintln!("no {kind} binary ({}): skipped", kind.install_hint());
        return None;
    }
    Some(SentinelTopology::start_tuned(kind, tuning).expect("a Sentinel topology"))
}

/// Processes stopped with `SIGSTOP`, resumed (`SIGCONT`) by
/// [`Stopped::resume`] or on drop.
struct Stopped(Vec<u32>);

impl Stopped {
    fn new(pids: Vec<u32>) -> Self {
        signal("STOP", &pids);
        Self(pids)
    }

    fn resume(&mut self) {
        signal("CONT", &self.0);
        self.0.clear();
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        self.resume();
    }
}

fn signal(which: &str, pids: &[u32]) {
    if pids.is_empty() {
        return;
    }
    let status = programs::command("kill")
        .expect("kill")
        .arg(format!("-{which}"))
        .args(pids.iter().map(u32::to_string))
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{which} {pids:?}: {status}");
}

/// Waits until `until` holds, for [`WAIT`] at most; whether it did.
fn wait_until(mut until: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + WAIT;
    while !until() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

fn listening(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

/// With two of the three Sentinels stopped, the third cannot find the
/// killed primary down by quorum and no election is held; asked for the
/// failover, it makes it alone, and the failover says it was asked for.
#[test]
fn a_failover_the_sentinels_do_not_make_is_asked_of_one_that_runs() {
    let tuning = SentinelTuning {
        force_after: Some(Duration::from_secs(5)),
        ..SentinelTuning::LOADED_MACHINE
    };
    let Some(mut t) = topology(tuning) else {
        return;
    };
    let old = t.primary_addr();
    let first = t.sentinel_addrs()[0];
    let mut others = Stopped::new(t.sentinel_pids()[1..].to_vec());
    let made = std::thread::scope(|s| {
        // The stopped Sentinels run again once the first names the new
        // primary, so that they learn of it.
        // (Resumed after the wait all the same, so that the failover's
        // answer says what happened.)
        s.spawn(|| {
            wait_until(|| matches!(named_primary(first), Some(addr) if addr != old));
            others.resume();
        });
        t.fail_over(Duration::ZERO)
    });
    let made = made.expect("a failover, asked for");
    assert!(made.forced, "the failover was not asked for: {made:?}");
    assert_ne!(t.primary_addr(), old, "the primary did not change");
}

/// The primary a Sentinel names, asked on a connection of its own.
fn named_primary(sentinel: SocketAddr) -> Option<SocketAddr> {
    use std::io::{BufRead, BufReader, Write};
    let mut stream = TcpStream::connect_timeout(&sentinel, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let name = SentinelTopology::SERVICE;
    stream
        .write_all(
            format!(
                "*3\r\n$8\r\nSENTINEL\r\n$23\r\nGET-MASTER-ADDR-BY-NAME\r\n${}\r\n{name}\r\n",
                name.len()
            )
            .as_bytes(),
        )
        .ok()?;
    let mut reader = BufReader::new(stream);
    let mut lines = Vec::new();
    for _ in 0..5 {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        lines.push(line.trim_end().to_owned());
    }
    // *2, $len, host, $len, port
    format!("{}:{}", lines[2], lines[4]).parse().ok()
}

/// With every Sentinel stopped no failover can be made: the topology says
/// so (a failover not promoted, and why), starts the killed primary again
/// as the primary, and once the Sentinels run again it fails over.
#[test]
fn a_failover_no_sentinel_can_make_is_said_and_the_topology_put_back() {
    let tuning = SentinelTuning {
        force_after: Some(Duration::from_secs(2)),
        promotion_wait: Duration::from_secs(10),
        ..SentinelTuning::LOADED_MACHINE
    };
    let Some(mut t) = topology(tuning) else {
        return;
    };
    let old = t.primary_addr();
    let mut sentinels = Stopped::new(t.sentinel_pids());
    let outcome = std::thread::scope(|s| {
        // The Sentinels run again once the killed primary was started
        // again: after the failover was given up.
        s.spawn(|| {
            let _ = wait_until(|| !listening(old)) && wait_until(|| listening(old));
            sentinels.resume();
        });
        t.fail_over(Duration::ZERO)
    });
    match outcome {
        Err(FailoverError::NotPromoted(why)) => {
            assert!(why.contains("not answering"), "{why}");
        }
        other => panic!("a failover no Sentinel could make answered {other:?}"),
    }
    assert_eq!(
        t.primary_addr(),
        old,
        "the killed primary is the primary again"
    );
    let replica = t.replica_addr();
    let info = t.info_replication(replica).expect("the replica's INFO");
    assert!(
        info.contains("master_link_status:up"),
        "the replica does not follow the primary again: {info}"
    );
    assert_eq!(
        t.command(old, &["SET", "after", "put-back"])
            .expect("a write"),
        Reply::Status("OK".into())
    );
    let made = t
        .fail_over(Duration::ZERO)
        .expect("a failover once the Sentinels run again");
    assert_ne!(
        t.primary_addr(),
        old,
        "the primary did not change: {made:?}"
    );
}
