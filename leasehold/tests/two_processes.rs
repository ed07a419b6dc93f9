//! Two real processes on one SQLite file get distinct slots: the quickstart,
//! started twice at once, then stopped with Ctrl-C (SIGINT), releasing.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;

/// The quickstart example binary, built by `cargo test` next to this test.
fn quickstart() -> PathBuf {
    common::example("quickstart")
}

struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Running {
    fn start(bin: &PathBuf, url: &str, pool: &str, dir: &PathBuf) -> Self {
        let mut child = Command::new(bin)
            .args([
                "--url",
                url,
                "--pool",
                pool,
                "--size",
                "4",
                "--for-secs",
                "120",
            ])
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn quickstart");
        let out: ChildStdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits (polling its output until a deadline) for a line starting with `prefix`.
    fn wait_for(&mut self, prefix: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.starts_with(prefix) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "no line starting with {prefix:?} within {limit:?}; output so far: {:#?}",
                    self.seen
                ),
            }
        }
    }
}

fn slot_of(line: &str) -> u32 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("slot="))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no slot in {line:?}"))
}

#[test]
fn two_quickstarts_on_one_sqlite_file_get_distinct_slots_and_release_on_ctrl_c() {
    let bin = quickstart();
    let dir = std::env::temp_dir().join(format!("leasehold-two-procs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("shared.sqlite").display());
    let mut a = Running::start(&bin, &url, "two-procs", &dir);
    let mut b = Running::start(&bin, &url, "two-procs", &dir);
    let limit = Duration::from_secs(60);
    let slot_a = slot_of(&a.wait_for("slot=", limit));
    let slot_b = slot_of(&b.wait_for("slot=", limit));
    assert_ne!(slot_a, slot_b, "two processes got the same slot");
    // Both hold their leases now; both made nonces with their slot.
    a.wait_for("decoded nonce 0: slot", limit);
    b.wait_for("decoded nonce 0: slot", limit);
    // Ctrl-C is handled from this line on.
    a.wait_for("holding the lease", limit);
    b.wait_for("holding the lease", limit);
    for r in [&mut a, &mut b] {
        assert!(
            r.child.try_wait().unwrap().is_none(),
            "exited early: {:?}",
            r.seen
        );
        let status = leasehold_conformance::programs::command("kill")
            .unwrap()
            .args(["-INT", &r.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
    for (r, slot) in [(&mut a, slot_a), (&mut b, slot_b)] {
        let line = r.wait_for("released slot", limit);
        assert!(
            line.starts_with(&format!("released slot {slot}: Some(Released)")),
            "{line}"
        );
        assert!(r.child.wait().unwrap().success());
    }
    // Released at once: a third process gets the lowest slot again.
    let mut c = Running::start(&bin, &url, "two-procs", &dir);
    let slot_c = slot_of(&c.wait_for("slot=", limit));
    assert_eq!(
        slot_c,
        slot_a.min(slot_b),
        "released slots are free at once"
    );
    let _ = c.child.kill();
    let _ = c.child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
