//! The command-line tool and the fault campaign with the lock directory
//! in their registry, run as a user runs them: this crate's
//! `leasehold-lockdir` and `lockdir-campaign` programs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use leasehold::{Floor, PoolName, PoolSpec, Strategy};
use leasehold_lockdir::LockDir;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lockdir-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn tool(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_leasehold-lockdir"))
        .args(args)
        .output()
        .expect("run leasehold-lockdir")
}

fn text(out: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn url(dir: &Path) -> String {
    format!("lockdir://{}", dir.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tool_shows_doctors_and_revokes_a_lease_held_in_a_lock_directory() {
    let dir = scratch("tool");
    let store = LockDir::open(&dir, Duration::from_secs(5)).unwrap();
    let pool = PoolSpec::new(PoolName::new("ids").unwrap(), 4, Duration::from_secs(60))
        .unwrap()
        .with_holder("tool-test-holder");
    leasehold::Operate::prepare_new_pool(&store, &pool)
        .await
        .unwrap();
    let grant = store.acquire(&pool, Floor(1)).await.unwrap();
    let url = url(&dir);

    let status = tool(&["status", "--url", &url, "--pool", "ids", "--size", "4"]);
    assert!(status.status.success(), "{}", text(&status));
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("tool-test-holder"),
        "{}",
        text(&status)
    );

    let pools = tool(&["status", "--url", &url]);
    assert!(pools.status.success(), "{}", text(&pools));
    assert!(
        String::from_utf8_lossy(&pools.stdout).contains("ids"),
        "{}",
        text(&pools)
    );

    let doctor = tool(&["doctor", "--url", &url]);
    assert!(doctor.status.success(), "{}", text(&doctor));
    assert!(
        String::from_utf8_lossy(&doctor.stdout).contains("lock directory"),
        "{}",
        text(&doctor)
    );

    let slot = grant.slot.to_string();
    let revoke = tool(&[
        "revoke", "--url", &url, "--pool", "ids", "--slot", &slot, "--yes",
    ]);
    assert!(revoke.status.success(), "{}", text(&revoke));
    let renewal = store.renew(&pool, &grant, Floor(2)).await;
    assert!(
        matches!(renewal, leasehold::Renewal::Lost(_)),
        "{renewal:?}"
    );

    // A directory that is not there is not made by a tool that only looks.
    let missing = tool(&["status", "--url", &url_of_missing(&dir), "--pool", "ids"]);
    assert_eq!(missing.status.code(), Some(3), "{}", text(&missing));
    assert!(!dir.join("missing").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

fn url_of_missing(dir: &Path) -> String {
    url(&dir.join("missing"))
}

#[test]
fn a_short_fault_campaign_on_a_lock_directory_finds_no_duplicate() {
    let out = Command::new(env!("CARGO_BIN_EXE_lockdir-campaign"))
        .args(["--backend", "lockdir", "--short", "--secs", "8"])
        .output()
        .expect("run lockdir-campaign");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert!(stdout.contains("| duplicates | 0 |"), "{}", text(&out));
    assert!(
        stdout.contains("| overlapping holding periods | 0 |"),
        "{}",
        text(&out)
    );
}
