//! The real `leasehold` binary against real private servers from the
//! conformance provider chain (SQLite files, PostgreSQL, MariaDB, Redis,
//! Valkey, etcd) and the FAKE Kubernetes API server (`k8s-fake::…`).
//!
//! State is set up with the backend crates (acquire, release, renew), the
//! binary is run, and its output is compared with expected text in which
//! the volatile parts (durations, times, ports, versions) are normalised.
//!
//! A backend whose server cannot be provided is reported as ignored (failed
//! under `CI=true`), never as passed. Tests of `status`/`watch` on a store
//! whose strategy cannot inspect yet are ignored; their counterpart
//! `…::status_unsupported_exit_5` runs instead.

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::{
    DurabilityPolicy, DynStrategy, Floor, Grant, InspectError, OperateError, PoolName, PoolSpec,
    Renewal, StoreConfig,
};
use leasehold_conformance::servers::{self, ServerKind};
use libtest_mimic::{Arguments, Failed, Trial};

#[path = "../../leasehold/tests/common/accounts.rs"]
mod accounts;

const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

/// The ceiling every test acquisition reports: its floor shows as this time.
const CEILING: Floor = Floor(1_800_000_000_000);
const CEILING_TEXT: &str = "2027-01-15T08:00:00.000Z";
/// What a released slot reports it issued.
const ISSUED: Floor = Floor(1_800_000_123_456);
const ISSUED_TEXT: &str = "2027-01-15T08:02:03.456Z";

type TestResult = Result<(), String>;

/// A store under test: how the CLI reaches it and how the test sets up state.
struct Env {
    label: String,
    /// The URL given to the binary.
    url: String,
    /// A strategy on the same store.
    strategy: Arc<dyn DynStrategy>,
    /// Whether the strategy can inspect (status/watch tests run only then).
    inspect: bool,
    /// Lists pools without --pool (SQL).
    lists_pools: bool,
    /// Kept alive for the whole run.
    _keep: Vec<Box<dyn std::any::Any + Send + Sync>>,
    sqlite_dir: Option<std::path::PathBuf>,
    /// Where `url` names a lease user: the admin's URL.
    admin_url: Option<String>,
}

/// One runtime for the whole run: the strategies' connections live on it.
fn rt() -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime")
    })
}

fn run(args: &[&str]) -> Output {
    run_with(args, &[], None)
}

fn run_with(args: &[&str], env: &[(&str, &str)], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env("TZ", "UTC")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    // The URL is given by the test alone: a LEASEHOLD_URL of the caller's
    // would be a second source.
    cmd.env_remove("LEASEHOLD_URL");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run leasehold");
    if let Some(input) = stdin {
        let mut si = child.stdin.take().expect("stdin");
        si.write_all(input.as_bytes()).expect("write stdin");
    }
    child.wait_with_output().expect("leasehold output")
}

fn text(o: &Output) -> (String, String, i32) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        o.status.code().unwrap_or(-1),
    )
}

fn expect_code(o: &Output, code: i32) -> TestResult {
    let (out, err, got) = text(o);
    if got == code {
        Ok(())
    } else {
        Err(format!(
            "exit code {got}, expected {code}\n--- stdout\n{out}--- stderr\n{err}"
        ))
    }
}

/// stderr is one line starting `leasehold: ` (no panic, no backtrace).
fn one_line_error(o: &Output) -> Result<String, String> {
    let (_, err, _) = text(o);
    let lines: Vec<&str> = err.lines().collect();
    if lines.len() == 1 && lines[0].starts_with("leasehold: ") && !err.contains("panicked") {
        Ok(lines[0].to_owned())
    } else {
        Err(format!("stderr is not one `leasehold:` line:\n{err}"))
    }
}

fn same(got: &str, want: &str) -> TestResult {
    if got == want {
        Ok(())
    } else {
        Err(format!("--- got\n{got}--- want\n{want}"))
    }
}

/// Like [`same`], but a `<dur?>` in `want` also accepts `-` (a store that
/// does not know when a lease was renewed or acquired).
fn same_pattern(got: &str, want: &str) -> TestResult {
    let fits = |g: &str, w: &str| {
        let (gc, wc): (Vec<&str>, Vec<&str>) = (g.split(" | ").collect(), w.split(" | ").collect());
        gc.len() == wc.len()
            && gc
                .iter()
                .zip(&wc)
                .all(|(g, w)| g == w || (*w == "<dur?>" && matches!(*g, "<dur>" | "-")))
    };
    let (gl, wl): (Vec<&str>, Vec<&str>) = (got.lines().collect(), want.lines().collect());
    if gl.len() == wl.len() && gl.iter().zip(&wl).all(|(g, w)| fits(g, w)) {
        Ok(())
    } else {
        Err(format!("--- got\n{got}--- want\n{want}"))
    }
}

// ---- normalisation ----

fn is_duration(cell: &str) -> bool {
    let w: Vec<&str> = cell.split(' ').collect();
    let num = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit() || c == '.');
    match w.as_slice() {
        [n, "ms" | "s"] => num(n),
        [a, "min", b, "s"] | [a, "h", b, "min"] => num(a) && num(b),
        _ => false,
    }
}

fn is_time(s: &str) -> bool {
    let b = s.as_bytes();
    s.len() >= 20 && b[4] == b'-' && b[10] == b'T' && s.ends_with('Z')
}

/// A cell with its volatile parts replaced: durations `<dur>`, times `<time>`.
fn norm_cell(cell: &str) -> String {
    if is_duration(cell) {
        return "<dur>".into();
    }
    if let Some(inner) = cell
        .strip_prefix("revoked (taken for ")
        .and_then(|r| r.strip_suffix(')'))
        && is_duration(inner)
    {
        return "revoked (taken for <dur>)".into();
    }
    cell.to_owned()
}

/// A table with cells split on runs of two or more spaces, normalised, and
/// joined with ` | `; other lines are kept.
fn norm_table(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let cells: Vec<String> = line
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(norm_cell)
            .collect();
        out.push_str(&cells.join(" | "));
        out.push('\n');
    }
    out
}

/// Replaces every word that is a time with `<time>`, and the duration in
/// `(in 59.9 s, …` with `<dur>`.
fn norm_words(text: &str) -> String {
    let words: Vec<&str> = text.split(' ').collect();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = words[i];
        if is_time(w) {
            out.push("<time>".into());
        } else if w == "(in"
            && let (Some(n), Some(unit)) = (words.get(i + 1), words.get(i + 2))
            && let Some(rest) = unit.strip_prefix("ms").or_else(|| unit.strip_prefix('s'))
            && is_duration(&format!("{n} {}", &unit[..unit.len() - rest.len()]))
        {
            out.push(format!("(in <dur>{rest}"));
            i += 3;
            continue;
        } else {
            out.push(w.to_owned());
        }
        i += 1;
    }
    out.join(" ")
}

// ---- set-up with the backend crates ----

fn unique_pool() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let i = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("cli{:x}x{i}", n % 0xffff_ffff)
}

fn spec(pool: &str, size: u32, holder: &str) -> PoolSpec {
    PoolSpec::new(
        PoolName::new(pool).expect("pool name"),
        size,
        Duration::from_secs(60),
    )
    .expect("pool spec")
    .with_holder(holder)
}

/// On etcd and Kubernetes (whose wipe guard no option turns off, as
/// `DurabilityPolicy::Throwaway` does for these tests' SQL and Valkey stores), a
/// pool with none of its records may be one whose records were wiped, so
/// its first claim waits a span unless the pool is declared new: these
/// tests' pools are fresh, and said so (`Operate::prepare_new_pool`).
async fn declared_new_where_guarded(env: &Env, pool: &PoolSpec) -> Result<(), String> {
    if !(env.label.starts_with("etcd") || env.label.starts_with("k8s")) {
        return Ok(());
    }
    let store = StoreConfig::from_url(&env.url)
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    store
        .operator()
        .prepare_new_pool(pool)
        .await
        .map_err(|e| format!("declare the pool new: {e}"))
}

/// Three slots of a fresh pool: `a` and `b` held (by `worker-a`, `worker-b`),
/// `c` acquired by `worker-c` and released. Returns the pool and grants.
fn three_slots(env: &Env) -> Result<(String, [Grant; 3]), String> {
    let pool = unique_pool();
    rt().block_on(async {
        declared_new_where_guarded(env, &spec(&pool, 3, "worker-a")).await?;
        let mut grants = Vec::new();
        for holder in ["worker-a", "worker-b", "worker-c"] {
            let g = env
                .strategy
                .acquire_dyn(&spec(&pool, 3, holder), CEILING)
                .await
                .map_err(|e| format!("acquire for {holder}: {e}"))?;
            grants.push(g);
        }
        let release = env
            .strategy
            .release_dyn(&spec(&pool, 3, "worker-c"), &grants[2], ISSUED)
            .await;
        if !matches!(release, leasehold::Release::Released) {
            return Err(format!("release: {release:?}"));
        }
        let [a, b, c]: [Grant; 3] = grants.try_into().map_err(|_| "three grants")?;
        Ok((pool, [a, b, c]))
    })
}

fn revoke_cli(env: &Env, pool: &str, slot: u32) -> Result<String, String> {
    let o = run(&[
        "revoke",
        "--url",
        &env.url,
        "--pool",
        pool,
        "--slot",
        &slot.to_string(),
        "--yes",
    ]);
    expect_code(&o, 0)?;
    Ok(text(&o).0)
}

// ---- tests for every store ----

/// `revoke --yes` ends the lease (the holder's next renewal is Lost) and
/// says how long the slot stays taken.
fn revoke_leaves_tombstone(env: &Env) -> TestResult {
    let (pool, [a, b, _c]) = three_slots(env)?;
    let out = revoke_cli(env, &pool, b.slot)?;
    let until = if env.inspect {
        "about <time> (in <dur>, by the store's clock)"
    } else {
        "the revoked lease would have expired (at most the pool's TTL)"
    };
    same(
        &norm_words(&out),
        &format!(
            "slot {} of pool {pool} revoked; it stays taken until {until}, and its holder's next \
             renewal is refused\n",
            b.slot
        ),
    )?;
    let renewal = rt().block_on(
        env.strategy
            .renew_dyn(&spec(&pool, 3, "worker-b"), &b, CEILING),
    );
    if !matches!(renewal, Renewal::Lost(_)) {
        return Err(format!("the revoked holder's renewal answered {renewal:?}"));
    }
    // The slot is taken (tombstone): a new acquisition gets neither a nor b.
    let other = rt().block_on(
        env.strategy
            .acquire_dyn(&spec(&pool, 3, "worker-d"), CEILING),
    );
    match other {
        Ok(g) if g.slot == b.slot || g.slot == a.slot => {
            return Err(format!("slot {} was granted again while taken", g.slot));
        }
        _ => {}
    }
    // Revoking a free slot revokes nothing, and says so.
    let o = run(&[
        "revoke", "--url", &env.url, "--pool", &pool, "--slot", "7", "--size", "8", "--yes",
    ]);
    expect_code(&o, 0)?;
    same(
        &text(&o).0,
        &format!(
            "slot 7 of pool {pool} was not held (free, expired or revoked already): nothing revoked\n"
        ),
    )
}

/// `status` prints the pool's table: held, revoked and free slots.
fn status_table(env: &Env) -> TestResult {
    let (pool, [a, b, c]) = three_slots(env)?;
    revoke_cli(env, &pool, b.slot)?;
    // Slots 0..3 were used; the other five of the pool count as free.
    let o = run(&["status", "--url", &env.url, "--pool", &pool, "--size", "8"]);
    expect_code(&o, 0)?;
    let out = text(&o).0;
    let (summary, table) = out.split_once('\n').ok_or("no summary line")?;
    if !(summary.starts_with(&format!("pool {pool} on "))
        && summary.ends_with(": 1 held, 1 revoked, 6 free of 8 slots (times on the store's clock)"))
    {
        return Err(format!("summary line: {summary}"));
    }
    let tok = |g: &Grant| g.token.to_hex()[..8].to_owned();
    let mut rows = [
        (
            a.slot,
            format!(
                "{} | worker-a | {} | {} | {CEILING_TEXT} | <dur> | <dur?> | <dur?>",
                a.slot,
                tok(&a),
                a.fence.0
            ),
        ),
        (
            b.slot,
            format!(
                "{} | revoked (taken for <dur>) | - | {} | {CEILING_TEXT} | - | - | -",
                b.slot, b.fence.0
            ),
        ),
        (
            c.slot,
            format!(
                "{} | free | - | {} | {ISSUED_TEXT} | - | - | -",
                c.slot,
                // etcd forgets a released slot's fence (its key's revision).
                if env.label.starts_with("etcd") {
                    "-".to_owned()
                } else {
                    c.fence.0.to_string()
                }
            ),
        ),
    ];
    rows.sort();
    let mut want =
        "SLOT | HOLDER | TOKEN | FENCE | FLOOR | EXPIRES IN | RENEWED AGO | HELD FOR\n".to_owned();
    for (_, r) in rows {
        want.push_str(&r);
        want.push('\n');
    }
    same_pattern(&norm_table(table), &want)?;
    // The same as JSON.
    let o = run(&[
        "status", "--url", &env.url, "--pool", &pool, "--size", "8", "--json",
    ]);
    expect_code(&o, 0)?;
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).map_err(|e| format!("--json output: {e}"))?;
    let counts = ["size", "held", "revoked", "free"].map(|k| v[k].as_u64());
    if counts != [Some(8), Some(1), Some(1), Some(6)] {
        return Err(format!("JSON size, held, revoked, free: {counts:?}"));
    }
    let states: Vec<(u64, String)> = v["slots"]
        .as_array()
        .ok_or("no slots array")?
        .iter()
        .map(|s| {
            (
                s["slot"].as_u64().unwrap_or(99),
                s["state"].as_str().unwrap_or("?").to_owned(),
            )
        })
        .collect();
    let mut want: Vec<(u64, String)> = vec![
        (a.slot.into(), "held".into()),
        (b.slot.into(), "revoked".into()),
        (c.slot.into(), "free".into()),
    ];
    want.sort();
    if states != want {
        return Err(format!("JSON states {states:?}, expected {want:?}"));
    }
    if v["slots"].to_string().contains(&a.token.to_hex()) {
        return Err("the JSON carries a whole token".into());
    }
    Ok(())
}

/// Without `--size`, a SQL store answers how many slots the pool has (the
/// rows `prepare` made for it); every other store keeps no size, so the
/// summary says the default 512 is assumed.
fn status_size_from_the_store(env: &Env) -> TestResult {
    let pool = unique_pool();
    let sql = matches!(
        env.label.as_str(),
        "sqlite" | "postgres-latest" | "postgres15" | "mariadb"
    );
    rt().block_on(async {
        let store = StoreConfig::from_url(&env.url)
            .map_err(|e| e.to_string())?
            .map(|c: leasehold::sql::SqlConfig| c.durability(DurabilityPolicy::Throwaway))
            .map(|c: leasehold::valkey::ValkeyConfig| c.durability(DurabilityPolicy::Throwaway))
            .connect()
            .await
            .map_err(|e| e.to_string())?;
        // With an ID format, as users are told to declare: the store keeps
        // it on a row of the pool's own, which is not a slot.
        let declared = spec(&pool, 20, "worker-a").with_id_format(
            leasehold::IdFormat::new(1, "status test: 64-bit IDs").map_err(|e| e.to_string())?,
        );
        store
            .operator()
            .prepare(Some(&declared))
            .await
            .map_err(|e| format!("prepare: {e}"))?;
        declared_new_where_guarded(env, &declared).await?;
        env.strategy
            .acquire_dyn(&declared, CEILING)
            .await
            .map_err(|e| format!("acquire: {e}"))?;
        Ok::<_, String>(())
    })?;
    let o = run(&["status", "--url", &env.url, "--pool", &pool]);
    expect_code(&o, 0)?;
    let out = text(&o).0;
    let summary = out.lines().next().unwrap_or_default();
    let want = if sql {
        ": 1 held, 0 revoked, 19 free of 20 slots (times on the store's clock)"
    } else {
        ": 1 held, 0 revoked, 511 free of 512 slots (an assumed size: give the pool's with \
         --size) (times on the store's clock)"
    };
    if !summary.ends_with(want) {
        return Err(format!(
            "summary line: {summary}\nexpected it to end with {want:?}"
        ));
    }
    let o = run(&["status", "--url", &env.url, "--pool", &pool, "--json"]);
    expect_code(&o, 0)?;
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).map_err(|e| format!("--json output: {e}"))?;
    let (size, from) = (v["size"].as_u64(), v["size_from"].as_str());
    let want = if sql {
        (Some(20), Some("store"))
    } else {
        (Some(512), Some("assumed"))
    };
    if (size, from) != want {
        return Err(format!(
            "JSON size {size:?} from {from:?}, expected {want:?}"
        ));
    }
    // --size still wins (larger than the pool, so that the held slot,
    // wherever the claim put it, is inside it).
    let o = run(&["status", "--url", &env.url, "--pool", &pool, "--size", "30"]);
    expect_code(&o, 0)?;
    let out = text(&o).0;
    if !out
        .lines()
        .next()
        .unwrap_or_default()
        .contains(" free of 30 slots (times")
    {
        return Err(format!("with --size 30:\n{out}"));
    }
    Ok(())
}

/// Without --pool: the pools (SQL), or a usage error naming --pool.
fn status_without_pool(env: &Env) -> TestResult {
    let (pool, _) = three_slots(env)?;
    let o = run(&["status", "--url", &env.url]);
    if env.lists_pools {
        expect_code(&o, 0)?;
        let out = text(&o).0;
        if !out.lines().any(|l| l.trim() == pool) {
            return Err(format!("pool {pool} not listed:\n{out}"));
        }
        Ok(())
    } else {
        expect_code(&o, 2)?;
        let line = one_line_error(&o)?;
        if line.ends_with("cannot list its pools: give the pool with --pool NAME") {
            Ok(())
        } else {
            Err(format!("unexpected error: {line}"))
        }
    }
}

/// A store whose strategy cannot inspect yet: exit 5, one line.
fn status_unsupported_exit_5(env: &Env) -> TestResult {
    let o = run(&["status", "--url", &env.url, "--pool", "ids"]);
    expect_code(&o, 5)?;
    let line = one_line_error(&o)?;
    if line.ends_with(
        "cannot list the slots of a pool yet (this leasehold build has no inspect for it)",
    ) {
        Ok(())
    } else {
        Err(format!("unexpected error: {line}"))
    }
}

/// `watch` on a pipe prints the first table, then a table each time a slot
/// changes (with what changed), and stops after --count reads.
fn watch_prints_changes(env: &Env) -> TestResult {
    let (pool, [_a, b, _c]) = three_slots(env)?;
    let mut child = Command::new(BIN)
        .args([
            "watch",
            "--url",
            &env.url,
            "--pool",
            &pool,
            "--size",
            "3",
            "--interval",
            "100",
            "--count",
            "600",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let stdout = child.stdout.take().ok_or("stdout")?;
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut lines = Vec::new();
    let wait_for = |pred: &dyn Fn(&str) -> bool, lines: &mut Vec<String>| -> TestResult {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx
                .recv_timeout(left)
                .map_err(|_| format!("watch output so far:\n{}", lines.join("\n")))?;
            let hit = pred(&line);
            lines.push(line);
            if hit {
                return Ok(());
            }
        }
    };
    let r = (|| {
        wait_for(
            &|l| l.contains("2 held, 0 revoked, 1 free of 3"),
            &mut lines,
        )?;
        revoke_cli(env, &pool, b.slot)?;
        wait_for(&|l| l.starts_with("changed: "), &mut lines)
    })();
    let _ = child.kill();
    let _ = child.wait();
    r?;
    let tables = lines.iter().filter(|l| l.starts_with("--- ")).count();
    if tables != 2 {
        return Err(format!(
            "expected 2 tables (start, one change):\n{}",
            lines.join("\n")
        ));
    }
    same(
        lines.last().map_or("", String::as_str),
        &format!("changed: slot {} (holder, token)", b.slot),
    )
}

/// Runs the binary on a pseudo-terminal (util-linux `script`), with
/// `input` on its stdin.
fn run_on_tty(args: &[&str], input: &str) -> Result<Output, String> {
    let mut script = leasehold_conformance::programs::command("script")?;
    let line = std::iter::once(BIN)
        .chain(args.iter().copied())
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect::<Vec<_>>()
        .join(" ");
    let mut child = script
        .args(["-qec", &line, "/dev/null"])
        .env("TZ", "UTC")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("script: {e}"))?;
    child
        .stdin
        .take()
        .ok_or("no stdin")?
        .write_all(input.as_bytes())
        .map_err(|e| format!("writing to script: {e}"))?;
    child
        .wait_with_output()
        .map_err(|e| format!("waiting for script: {e}"))
}

/// On a terminal, revoke asks: `n` changes nothing (exit 6), `y` revokes.
fn revoke_asks_on_a_terminal(env: &Env) -> TestResult {
    let (pool, [_a, b, _c]) = three_slots(env)?;
    let slot = b.slot.to_string();
    let args = [
        "revoke", "--url", &env.url, "--pool", &pool, "--slot", &slot,
    ];
    let o = run_on_tty(&args, "n\n")?;
    expect_code(&o, 6)?;
    let out = text(&o).0;
    if !(out.contains(&format!("revoke slot {slot} of pool {pool} on "))
        && out.contains("[y/N] ")
        && out.contains(&format!(
            "not revoked: slot {slot} of pool {pool} is unchanged"
        )))
    {
        return Err(format!("after `n`:\n{out}"));
    }
    let spec_b = spec(&pool, 3, "worker-b");
    let renewal = rt().block_on(env.strategy.renew_dyn(&spec_b, &b, CEILING));
    if !matches!(renewal, Renewal::Renewed { .. }) {
        return Err(format!(
            "after `n` the holder's renewal answered {renewal:?}"
        ));
    }
    let o = run_on_tty(&args, "y\n")?;
    expect_code(&o, 0)?;
    if !text(&o).0.contains(&format!(
        "slot {slot} of pool {pool} revoked; it stays taken until"
    )) {
        return Err(format!("after `y`:\n{}", text(&o).0));
    }
    let renewal = rt().block_on(env.strategy.renew_dyn(&spec_b, &b, CEILING));
    if matches!(renewal, Renewal::Lost(_)) {
        Ok(())
    } else {
        Err(format!(
            "after `y` the holder's renewal answered {renewal:?}"
        ))
    }
}

/// On a terminal, watch clears and redraws the screen on every read.
fn watch_redraws_on_a_terminal(env: &Env) -> TestResult {
    let (pool, _) = three_slots(env)?;
    let o = run_on_tty(
        &[
            "watch",
            "--url",
            &env.url,
            "--pool",
            &pool,
            "--interval",
            "50",
            "--count",
            "3",
        ],
        "",
    )?;
    expect_code(&o, 0)?;
    let out = text(&o).0;
    let frames = out.matches("\x1b[H\x1b[2J").count();
    if frames == 3 && out.contains("every 50 ms (Ctrl-C to stop)") {
        Ok(())
    } else {
        Err(format!("{frames} frames:\n{out:?}"))
    }
}

/// `watch --count N` stops by itself after N reads.
fn watch_count_stops(env: &Env) -> TestResult {
    let (pool, _) = three_slots(env)?;
    let o = run(&[
        "watch",
        "--url",
        &env.url,
        "--pool",
        &pool,
        "--interval",
        "50",
        "--count",
        "3",
    ]);
    expect_code(&o, 0)?;
    let out = text(&o).0;
    // Nothing changed between the reads: the table is printed once.
    let tables = out.lines().filter(|l| l.starts_with("--- ")).count();
    if tables == 1 {
        Ok(())
    } else {
        Err(format!("expected one table:\n{out}"))
    }
}

/// Parses doctor output into `(verdict, check)` pairs, and checks the frame.
/// `(verdict, check)` pairs, the whole output (for failure messages), the exit code.
type Doctor = (Vec<(String, String)>, String, i32);

/// The names of the guards' lines.
const GUARD_LINES: [&str; 4] = ["restart", "promotion", "wipe", "guards"];

fn doctor_lines(env: &Env) -> Result<Doctor, String> {
    let o = run(&["doctor", "--url", &env.url]);
    let (out, err, code) = text(&o);
    if !err.is_empty() {
        return Err(format!("doctor wrote to stderr:\n{err}"));
    }
    let mut lines = out.lines();
    let first = lines.next().unwrap_or("");
    if !first.starts_with("leasehold doctor: ") {
        return Err(format!("first line: {first}"));
    }
    let mut pairs = Vec::new();
    let mut last = String::new();
    for l in lines.by_ref() {
        let mut w = l.split_whitespace();
        if let (Some(v @ ("ok" | "warn" | "FAIL" | "n/a")), Some(name)) = (w.next(), w.next()) {
            // The guards' lines depend on the pools other tests make at
            // the same time: `doctor_wipe_guard` reads them, of its own.
            if !GUARD_LINES.contains(&name) {
                pairs.push((v.to_owned(), name.to_owned()));
            }
        }
    }
    last.push_str(&out);
    Ok((pairs, last, code))
}

fn doctor_expect(env: &Env, want: &[(&str, &str)], code: i32) -> TestResult {
    let (pairs, last, got) = doctor_lines(env)?;
    // `ok|warn`: either (latency and a measured clock offset depend on how
    // busy the machine is; neither may FAIL).
    let fits = pairs.len() == want.len()
        && pairs
            .iter()
            .zip(want)
            .all(|((v, n), (wv, wn))| n == wn && wv.split('|').any(|w| w == v));
    if !fits || got != code {
        return Err(format!(
            "doctor on {}: got {pairs:?} (exit {got}), expected {want:?} (exit {code}); \
             output:\n{last}",
            env.label
        ));
    }
    Ok(())
}

// ---- stores ----

/// The store at `url`, connected through `leasehold`'s URL table as the
/// tool connects (prepared, with no restart guard: these private servers are
/// never restarted under a test's leases).
fn store_env(
    label: &str,
    url: String,
    keep: Vec<Box<dyn std::any::Any + Send + Sync>>,
) -> Result<Env, String> {
    let store = rt().block_on(async {
        let store = StoreConfig::from_url(&url)
            .map_err(|e| e.to_string())?
            .map(|c: leasehold::sql::SqlConfig| c.durability(DurabilityPolicy::Throwaway))
            .map(|c: leasehold::valkey::ValkeyConfig| c.durability(DurabilityPolicy::Throwaway))
            .connect()
            .await
            .map_err(|e| e.to_string())?;
        store
            .operator()
            .prepare(None)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(store)
    })?;
    let lists_pools = !matches!(
        rt().block_on(store.operator().pools()),
        Err(OperateError::Unsupported(_))
    );
    let strategy: Arc<dyn DynStrategy> = Arc::new(store);
    Ok(Env {
        label: label.into(),
        url,
        inspect: can_inspect(strategy.as_ref()),
        lists_pools,
        strategy,
        _keep: keep,
        sqlite_dir: None,
        admin_url: None,
    })
}

/// Whether `strategy` inspects (Unsupported says no).
fn can_inspect(strategy: &dyn DynStrategy) -> bool {
    let pool = spec("probe", 1, "probe");
    !matches!(
        rt().block_on(strategy.inspect_dyn(&pool)),
        Err(InspectError::Unsupported)
    )
}

fn provide(kind: ServerKind) -> Result<servers::Server, String> {
    servers::provide(kind).map_err(|m| m.to_string())
}

fn sqlite_env() -> Result<Env, String> {
    let dir = std::env::temp_dir().join(format!("leasehold-cli-{}", unique_pool()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let url = format!("sqlite://{}/leases.db", dir.display());
    let mut env = store_env("sqlite", url, Vec::new())?;
    env.sqlite_dir = Some(dir);
    Ok(env)
}

fn server_env(label: &str, kind: ServerKind) -> Result<Env, String> {
    let server = provide(kind)?;
    let url = server.store_url();
    store_env(label, url, vec![Box::new(server)])
}

fn k8s_fake_env() -> Result<Env, String> {
    let fake = Arc::new(leasehold_k8s_fake::FakeApiServer::start().map_err(|e| e.to_string())?);
    eprintln!("leasehold-cli tests: {}", fake.describe());
    store_env(
        "k8s-fake",
        format!("k8s://{}", fake.addr()),
        vec![Box::new(fake)],
    )
}

// ---- store-specific tests ----

fn sqlite_doctor(env: &Env) -> TestResult {
    doctor_expect(
        env,
        &[
            ("ok", "server"),
            ("ok", "path"),
            ("ok", "schema"),
            ("ok", "durability"),
            ("ok", "replication"),
            ("n/a", "clock"),
            ("ok|warn", "latency"),
        ],
        0,
    )
}

/// A SQLite file without the lease table: doctor FAILs the schema check and
/// exits 1; status exits 7 with one line.
fn sqlite_missing_table(env: &Env) -> TestResult {
    let dir = env.sqlite_dir.as_ref().ok_or("no dir")?;
    let path = dir.join("empty.db");
    std::fs::write(&path, b"").map_err(|e| e.to_string())?;
    let url = format!("sqlite://{}", path.display());
    let o = run(&["doctor", "--url", &url]);
    expect_code(&o, 1)?;
    let out = text(&o).0;
    let schema = out
        .lines()
        .find(|l| l.starts_with("FAIL  schema"))
        .ok_or_else(|| format!("no FAIL schema line:\n{out}"))?;
    same(
        schema,
        "FAIL  schema        the lease table leasehold_leases does not exist (sqlite) — fix: \
         create it with `SqlStrategy::ensure_pool(&pool)` (or `ensure_table()`), or apply \
         lease-sql/migrations/sqlite/0001_leasehold_leases.sql, 0002_leasehold_floor.sql, \
         0003_leasehold_span.sql and 0005_leasehold_id_format.sql (written for the default \
         table name leasehold_leases)",
    )?;
    let o = run(&["status", "--url", &url, "--pool", "ids"]);
    expect_code(&o, 7)?;
    one_line_error(&o).map(drop)
}

fn sql_server_doctor(env: &Env) -> TestResult {
    // Servers started for speed (fsync off / log flushed once a second) are
    // not durable: refused at connect, so doctor FAILs.
    doctor_expect(
        env,
        &[
            ("ok", "server"),
            ("ok", "path"),
            ("ok", "schema"),
            ("FAIL", "durability"),
            ("ok", "replication"),
            // Plain text on the loopback: no network to read it on.
            ("ok", "tls"),
            ("ok", "grants"),
            ("ok|warn", "clock"),
            ("ok|warn", "latency"),
        ],
        1,
    )
}

/// The TLS-only PostgreSQL 15 (client certificates, `cert` authentication),
/// reached as a lease user made with `lease_user_sql` (SELECT, INSERT and
/// UPDATE on the lease table, known by the certificate
/// `LEASE_CLIENT_NAME`), the admin (`CLIENT_NAME`) having prepared.
fn tls_lease_user_env() -> Result<Env, String> {
    use leasehold::sql::{SqlConfig, SqlStrategy, TableName, lease_user_sql, sqlx};
    use leasehold_conformance::tls::{CLIENT_NAME, LEASE_CLIENT_NAME, Pki};
    let server = servers::provide_tls_with(ServerKind::Postgres15, servers::Settings::Durable)
        .map_err(|m| m.to_string())?;
    let pki = Pki::shared()?;
    let admin = server.url.clone();
    let path = |p: &std::path::Path| p.display().to_string();
    let url = admin
        .replacen(
            &format!("//{CLIENT_NAME}@"),
            &format!("//{LEASE_CLIENT_NAME}@"),
            1,
        )
        .replacen(&path(&pki.client.cert), &path(&pki.lease_client.cert), 1)
        .replacen(&path(&pki.client.key), &path(&pki.lease_client.key), 1);
    if !url.contains(&path(&pki.lease_client.key)) || url == admin {
        return Err(format!("no lease user's certificate in {url}"));
    }
    let mut env = store_env(
        "postgres15-tls-lease-user",
        admin.clone(),
        vec![Box::new(server)],
    )?;
    rt().block_on(async {
        let s = SqlStrategy::connect(
            SqlConfig::new(admin.as_str()).durability(DurabilityPolicy::Throwaway),
        )
        .await
        .map_err(|e| e.to_string())?;
        // Known by its certificate: the password is never asked for.
        let statements = lease_user_sql(
            s.engine(),
            &TableName::default(),
            "postgres",
            LEASE_CLIENT_NAME,
            "unused",
        )
        .map_err(|e| e.to_string())?;
        for sql in statements {
            sqlx::raw_sql(&sql)
                .execute(s.postgres().ok_or("not PostgreSQL")?)
                .await
                .map_err(|e| format!("{sql}: {e}"))?;
        }
        s.close().await;
        Ok::<_, String>(())
    })?;
    env.url = url;
    env.admin_url = Some(admin);
    Ok(env)
}

/// Runs `sql` as the admin of `env`.
fn as_admin(env: &Env, sql: &str) -> TestResult {
    use leasehold::sql::{SqlConfig, SqlStrategy, sqlx};
    let admin = env.admin_url.as_deref().ok_or("no admin")?;
    rt().block_on(async {
        let s = SqlStrategy::connect(SqlConfig::new(admin).durability(DurabilityPolicy::Throwaway))
            .await
            .map_err(|e| e.to_string())?;
        let r = sqlx::raw_sql(sql)
            .execute(s.postgres().ok_or("not PostgreSQL")?)
            .await
            .map(drop)
            .map_err(|e| format!("{sql}: {e}"));
        s.close().await;
        r
    })
}

/// Doctor as the lease user over verified TLS: the tls line names the TLS
/// version and a verified certificate, the grants line is ok, exit 0. With
/// INSERT revoked, the grants line FAILs naming the GRANT to add, exit 1.
fn tls_lease_user_doctor(env: &Env) -> TestResult {
    let want = |grants| {
        [
            ("ok", "server"),
            ("ok", "path"),
            ("ok", "schema"),
            // A durable server: what connect accepts without an opt-in.
            ("ok", "durability"),
            ("ok", "replication"),
            ("ok", "tls"),
            (grants, "grants"),
            ("ok|warn", "clock"),
            ("ok|warn", "latency"),
        ]
    };
    doctor_expect(env, &want("ok"), 0)?;
    let (_, out, _) = doctor_lines(env)?;
    println!("{out}");
    lease_user_reads_the_guards(&env.url)?;
    let tls = out
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("tls"))
        .unwrap_or("");
    if !(tls.contains("TLSv1.")
        && tls.contains("server certificate verified (sslmode=verify-full)"))
    {
        return Err(format!("the tls line: {tls:?}"));
    }
    let user = leasehold_conformance::tls::LEASE_CLIENT_NAME;
    as_admin(
        env,
        &format!("REVOKE INSERT ON TABLE leasehold_leases FROM {user}"),
    )?;
    let failed = doctor_expect(env, &want("FAIL"), 1).and_then(|()| doctor_lines(env));
    as_admin(
        env,
        &format!("GRANT INSERT ON TABLE leasehold_leases TO {user}"),
    )?;
    let (_, out, _) = failed?;
    println!("{out}");
    let grant = format!("GRANT INSERT ON TABLE \"public\".\"leasehold_leases\" TO {user}");
    let line = out
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("grants"))
        .unwrap_or("");
    if line.contains(&grant) && !line.contains("GRANT SELECT") && !line.contains("GRANT UPDATE") {
        Ok(())
    } else {
        Err(format!(
            "the grants line does not name {grant:?} alone: {line}"
        ))
    }
}

/// Doctor as a lease user reads the guards of a pool never prepared: its
/// missing incarnation record is a warning, and no line FAILs (a durable
/// server: nothing refused).
fn lease_user_reads_the_guards(url: &str) -> TestResult {
    let pool = unique_pool();
    let o = run(&["doctor", "--url", url, "--pool", &pool]);
    let (out, err, code) = text(&o);
    println!("{out}");
    let wipe = line_of(&out, "wipe");
    if code != 0
        || !err.is_empty()
        || !wipe.starts_with("warn")
        || !wipe.contains(&format!("pool {pool}: no incarnation record"))
        || out.lines().any(|l| l.starts_with("FAIL"))
    {
        return Err(format!(
            "doctor --pool as the lease user (exit {code}):\n{out}{err}"
        ));
    }
    Ok(())
}

/// What `leasehold::connect` does with `url`: `Ok(())`, or its error.
fn connects(url: &str) -> Result<(), leasehold::ConnectError> {
    rt().block_on(async { leasehold::connect(url).await.map(drop) })
}

/// Doctor's output and exit code on `url`.
fn doctor_on(url: &str) -> (String, i32) {
    let o = run(&["doctor", "--url", url, "--timeout", "5"]);
    let (out, err, code) = text(&o);
    (format!("{out}{err}"), code)
}

/// The line of `check` with verdict `verdict` in doctor's output, with the
/// lines under it (its fixes).
fn check_block(out: &str, verdict: &str, check: &str) -> Result<String, String> {
    let head = format!("{verdict:<4}  {check:<12}  ");
    let mut lines = out.lines().skip_while(|l| !l.starts_with(&head));
    let first = lines
        .next()
        .ok_or_else(|| format!("no `{verdict} {check}` line:\n{out}"))?;
    let rest: Vec<&str> = lines.take_while(|l| l.starts_with("    ")).collect();
    Ok(std::iter::once(first)
        .chain(rest)
        .collect::<Vec<_>>()
        .join("\n"))
}

/// Doctor's verdict on `url` is `connect`'s: connect refuses it, doctor
/// FAILs `check` with the fix and the opt-in (exit 1); with the opt-in in
/// the URL, connect accepts it and doctor passes with a warning (exit 0).
fn doctor_judges_as_connect(url: &str, check: &str, needles: &[&str]) -> TestResult {
    match connects(url) {
        Err(leasehold::ConnectError::Refused { message, .. }) => {
            let first = message.lines().next().unwrap_or_default();
            if first.len() > 160 || !message.contains("\n  - ") {
                return Err(format!(
                    "the refusal is not a short line and a list:\n{message}"
                ));
            }
        }
        other => return Err(format!("connect {url}: {other:?}, expected a refusal")),
    }
    let (out, code) = doctor_on(url);
    if code != 1 {
        return Err(format!("doctor exit {code}, expected 1:\n{out}"));
    }
    let block = check_block(&out, "FAIL", check)?;
    for needle in needles.iter().chain(&["durability=one-timing-per-pool"]) {
        if !block.contains(needle) {
            return Err(format!("the FAIL lacks {needle:?}:\n{block}"));
        }
    }
    let accepted = with_option(url, "durability=one-timing-per-pool");
    connects(&accepted).map_err(|e| format!("connect with the opt-in: {e}"))?;
    let (out, code) = doctor_on(&accepted);
    if code != 0 {
        return Err(format!("doctor with the opt-in: exit {code}:\n{out}"));
    }
    let block = check_block(&out, "warn", check)?;
    if !block.contains("accepted by durability=one-timing-per-pool") {
        return Err(format!("the warning does not name the opt-in:\n{block}"));
    }
    Ok(())
}

/// The private SQL servers run for speed (PostgreSQL `fsync=off`, MariaDB
/// `innodb_flush_log_at_trx_commit=0`): connect refuses them, and so does
/// doctor, until the URL opts in.
fn sql_doctor_judges_as_connect(env: &Env) -> TestResult {
    let setting = if env.label.starts_with("postgres") {
        "fsync = off"
    } else {
        "innodb_flush_log_at_trx_commit = 0"
    };
    doctor_judges_as_connect(
        &env.url,
        "durability",
        &[setting, "durability=one-timing-per-pool"],
    )
}

/// The private Valkey/Redis servers run without persistence: connect
/// refuses them, and so does doctor, until the URL opts in.
fn valkey_doctor_judges_as_connect(env: &Env) -> TestResult {
    doctor_judges_as_connect(
        &env.url,
        "persistence",
        &["appendonly no", "durability=one-timing-per-pool"],
    )
}

/// `CONFIG SET name value` on the Valkey/Redis at `url`.
fn config_set(url: &str, name: &str, value: &str) -> TestResult {
    let url = url.replacen("valkey://", "redis://", 1);
    rt().block_on(async {
        use fred::prelude::*;
        let client = Builder::from_config(Config::from_url(&url).map_err(|e| e.to_string())?)
            .build()
            .map_err(|e| e.to_string())?;
        client.init().await.map_err(|e| e.to_string())?;
        let cmd = fred::types::CustomCommand::new_static(
            "CONFIG",
            fred::types::ClusterHash::Random,
            false,
        );
        let answer: Result<fred::types::Value, _> =
            client.custom(cmd, vec!["SET", name, value]).await;
        let _ = client.quit().await;
        answer.map(drop).map_err(|e| e.to_string())
    })
}

/// A field of pool `pool`'s fences hash under the default prefix.
fn fences_field(url: &str, pool: &str, field: &str) -> Result<Option<String>, String> {
    let url = url.replacen("valkey://", "redis://", 1);
    rt().block_on(async {
        use fred::prelude::*;
        let client = Builder::from_config(Config::from_url(&url).map_err(|e| e.to_string())?)
            .build()
            .map_err(|e| e.to_string())?;
        client.init().await.map_err(|e| e.to_string())?;
        let cmd = fred::types::CustomCommand::new_static(
            "HGET",
            fred::types::ClusterHash::FirstKey,
            false,
        );
        let key = format!("{{leasehold:{pool}}}:fences");
        let answer: Result<Option<String>, _> = client.custom(cmd, vec![key.as_str(), field]).await;
        let _ = client.quit().await;
        answer.map_err(|e| e.to_string())
    })
}

/// `prepare` on a Valkey pool the server has no record of says that its
/// first grant waits one span and how to skip it, and records when it saw
/// the pool gone; `--new-pool` ends that wait; it is refused (exit 7) while
/// a slot of the pool has a lease.
fn valkey_prepare_new_pool(env: &Env) -> TestResult {
    let pool = unique_pool();
    let o = run(&["prepare", "--url", &env.url, "--pool", &pool, "--size", "2"]);
    expect_code(&o, 0)?;
    let (out, _, _) = text(&o);
    if !(out.contains("records are not on") && out.contains("--new-pool")) {
        return Err(format!("prepare of a pool never used said: {out}"));
    }
    match fences_field(&env.url, &pool, "gone_seen")? {
        Some(ms) if ms != "0" => {}
        other => return Err(format!("prepare recorded gone_seen {other:?}")),
    }
    let o = run(&[
        "prepare",
        "--url",
        &env.url,
        "--pool",
        &pool,
        "--size",
        "2",
        "--new-pool",
        "--yes",
    ]);
    expect_code(&o, 0)?;
    let seen = fences_field(&env.url, &pool, "gone_seen")?;
    if seen.as_deref() != Some("0") {
        return Err(format!("--new-pool left gone_seen {seen:?}"));
    }
    let held = rt()
        .block_on(
            env.strategy
                .acquire_dyn(&spec(&pool, 2, "worker-a"), CEILING),
        )
        .map_err(|e| format!("acquire: {e}"))?;
    let o = run(&[
        "prepare",
        "--url",
        &env.url,
        "--pool",
        &pool,
        "--size",
        "2",
        "--new-pool",
        "--yes",
    ]);
    expect_code(&o, 7)?;
    let line = one_line_error(&o)?;
    if !line.contains(&format!("slot {} has a lease", held.slot)) {
        return Err(format!("--new-pool over a held slot said: {line}"));
    }
    Ok(())
}

/// Redis 7.0 (no WAITAOF) with the append-only file fsynced every second:
/// refused, with no `everysec` advice; Valkey 8.1 (WAITAOF) with the same
/// settings is accepted by both; and with `no-appendfsync-on-rewrite yes`
/// refused again.
fn valkey_aof_everysec(_env: &Env) -> TestResult {
    let redis7 = provide(ServerKind::Redis7)?;
    let url = redis7.store_url();
    config_set(&redis7.url, "appendonly", "yes")?;
    config_set(&redis7.url, "appendfsync", "everysec")?;
    doctor_judges_as_connect(&url, "persistence", &["lacks WAITAOF"])?;
    let (out, _) = doctor_on(&url);
    if out.contains("or fix: appendonly yes, appendfsync everysec") {
        return Err(format!(
            "everysec offered to a server without WAITAOF:\n{out}"
        ));
    }
    let valkey = provide(ServerKind::Valkey8)?;
    let url = valkey.store_url();
    config_set(&valkey.url, "appendonly", "yes")?;
    config_set(&valkey.url, "appendfsync", "everysec")?;
    connects(&url).map_err(|e| format!("Valkey 8.1 with everysec: {e}"))?;
    let (out, code) = doctor_on(&url);
    if code != 0 {
        return Err(format!(
            "doctor on Valkey 8.1 with everysec: exit {code}\n{out}"
        ));
    }
    check_block(&out, "warn", "persistence")?;
    config_set(&valkey.url, "no-appendfsync-on-rewrite", "yes")?;
    doctor_judges_as_connect(
        &url,
        "persistence",
        &[
            "no-appendfsync-on-rewrite yes",
            "or fix: appendonly yes, appendfsync everysec",
        ],
    )
}

/// A wrong password is "authentication failed", exit 9, on PostgreSQL,
/// MariaDB and Valkey alike (a server of its own, whose users have
/// passwords).
fn wrong_password_exit_9(env: &Env) -> TestResult {
    use accounts::{Accounts, Family};
    let (kind, family) = if env.label.starts_with("postgres") {
        (ServerKind::PostgresLatest, Family::Postgres)
    } else if env.label.starts_with("mariadb") {
        (ServerKind::MariaDb, Family::MariaDb)
    } else {
        (ServerKind::Valkey8, Family::Valkey)
    };
    let server = provide(kind)?;
    let accounts = rt().block_on(Accounts::new(server, family))?;
    let user = accounts::fresh("cliauth");
    rt().block_on(accounts.create_user(&user, "right-Pw-1"))?;
    let url = with_user_info(&accounts.url_of(&user), &user, Some("wrong-Pw-2"));
    for command in [&["doctor"][..], &["status", "--pool", "ids"]] {
        let mut args = command.to_vec();
        args.extend(["--url", url.as_str(), "--timeout", "5"]);
        let o = run(&args);
        expect_code(&o, 9).map_err(|e| format!("{command:?}: {e}"))?;
        let line = one_line_error(&o)?;
        if !line.contains("authentication failed") || !line.contains("password_file") {
            return Err(format!("{command:?}: {line}"));
        }
        if line.contains("wrong-Pw-2") || line.contains("cannot reach") {
            return Err(format!("{command:?}: {line}"));
        }
    }
    match connects(&url) {
        Err(leasehold::ConnectError::Authentication { .. }) => Ok(()),
        other => Err(format!("connect: {other:?}")),
    }
}

fn valkey_doctor(env: &Env) -> TestResult {
    // Private servers run without persistence: refused at connect, a FAIL.
    let (pairs, _, code) = doctor_lines(env)?;
    let names: Vec<&str> = pairs.iter().map(|(_, n)| n.as_str()).collect();
    if names
        != [
            "server",
            "tls",
            "grants",
            "path",
            "eviction",
            "persistence",
            "replication",
            "clock",
            "latency",
        ]
    {
        return Err(format!("checks {pairs:?}"));
    }
    let verdict = |n: &str| {
        pairs
            .iter()
            .find(|(_, name)| name == n)
            .map_or("", |(v, _)| v.as_str())
    };
    if verdict("eviction") != "ok"
        || verdict("persistence") != "FAIL"
        || verdict("tls") != "ok"
        || verdict("grants") != "ok"
        || verdict("replication") != "ok"
        || code != 1
    {
        return Err(format!("verdicts {pairs:?}, exit {code}"));
    }
    Ok(())
}

/// The password of the lease users the doctor tests make.
const LEASE_PASSWORD: &str = "lease-user-secret";

/// Makes `user` on the server at `admin_url` (its default user, the
/// administrator, over the URL's TLS) with the lease user's ACL for keys
/// under `prefix` on that server, less the rules in `without`.
fn valkey_lease_user(admin_url: &str, user: &str, prefix: &str, without: &[&str]) -> TestResult {
    use leasehold::valkey::{LeaseUserAcl, ValkeyConfig, ValkeyStrategy};
    rt().block_on(async {
        let admin = ValkeyStrategy::connect(
            ValkeyConfig::from_url(admin_url)
                .map_err(|e| e.to_string())?
                .durability(DurabilityPolicy::Throwaway),
        )
        .await
        .map_err(|e| e.to_string())?;
        let mut args = vec![
            "SETUSER".to_owned(),
            user.to_owned(),
            "reset".to_owned(),
            "on".to_owned(),
            format!(">{LEASE_PASSWORD}"),
        ];
        args.extend(
            LeaseUserAcl::for_server(prefix, admin.server())
                .rules()
                .into_iter()
                .filter(|r| !without.contains(&r.as_str())),
        );
        let cmd =
            fred::types::CustomCommand::new_static("ACL", fred::types::ClusterHash::Random, false);
        use fred::prelude::ClientLike;
        let answer: Result<fred::types::Value, _> = admin.client().custom(cmd, args).await;
        answer.map(drop).map_err(|e| e.to_string())
    })
}

/// `leasehold doctor` on Redis 7 over TLS only (client certificates), as a
/// lease user with exactly the lease user's ACL: the `tls` line says TLS
/// 1.3 and verified, `grants` is ok, exit 0. The output is kept in
/// `LEASEHOLD_DOCTOR_OUTPUT` when set. The same user less `+evalsha` FAILs
/// `grants`, naming the rule, exit 1.
fn valkey_tls_lease_user_doctor(_env: &Env) -> TestResult {
    let server = servers::provide_tls_with(ServerKind::Redis7, servers::Settings::Durable)
        .map_err(|m| m.to_string())?;
    let admin_url = server.url.clone();
    valkey_lease_user(&admin_url, "lease", "leasehold", &[])?;
    valkey_lease_user(&admin_url, "lease-no-evalsha", "leasehold", &["+evalsha"])?;
    let as_user = |user: &str| {
        admin_url.replacen(
            "rediss://",
            &format!("rediss://{user}:{LEASE_PASSWORD}@"),
            1,
        )
    };
    let o = run(&["doctor", "--url", &as_user("lease")]);
    let (out, err, code) = text(&o);
    if let Ok(path) = std::env::var("LEASEHOLD_DOCTOR_OUTPUT") {
        std::fs::write(&path, &out).map_err(|e| format!("{path}: {e}"))?;
    }
    let line = |name: &str| {
        out.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or("")
            .to_owned()
    };
    let tls = line("tls");
    let grants = line("grants");
    if code != 0
        || !err.is_empty()
        || !tls.starts_with("ok")
        || !tls.contains("TLS 1.3, server verified (chain and host name)")
        || !grants.starts_with("ok")
        || out.contains(LEASE_PASSWORD)
    {
        return Err(format!(
            "doctor as the lease user (exit {code}):
{out}{err}"
        ));
    }
    lease_user_reads_the_guards(&as_user("lease"))?;
    let o = run(&["doctor", "--url", &as_user("lease-no-evalsha")]);
    let (out, _, code) = text(&o);
    let grants = line_of(&out, "grants");
    if code != 1
        || !grants.starts_with("FAIL")
        || !grants.contains("the user lacks +evalsha")
        || !grants.contains("ACL SETUSER lease-no-evalsha +evalsha")
    {
        return Err(format!(
            "doctor without +evalsha (exit {code}):
{out}"
        ));
    }
    Ok(())
}

/// `leasehold doctor` on etcd 3.5 over mutual TLS only: the `tls` line
/// gives the version its own handshake agreed on (not `TLS` alone) and
/// what verified the server.
fn etcd_tls_doctor(_env: &Env) -> TestResult {
    let server = servers::provide_tls(ServerKind::Etcd35).map_err(|m| m.to_string())?;
    let o = run(&["doctor", "--url", &server.store_url()]);
    let (out, err, code) = text(&o);
    let tls = line_of(&out, "tls");
    if code != 0
        || !tls.starts_with("ok")
        // etcd 3.5.1 offers up to TLS 1.2 (measured); the version is read,
        // whichever it is.
        || !["TLS 1.2, ", "TLS 1.3, "].iter().any(|v| tls.contains(v))
        || !tls.contains("server verified (chain and host name) against the CA in")
        || !tls.contains("client certificate")
    {
        return Err(format!("doctor over TLS (exit {code}):\n{out}{err}"));
    }
    Ok(())
}

/// The line of doctor's `check`.
fn line_of(out: &str, check: &str) -> String {
    out.lines()
        .find(|l| l.split_whitespace().nth(1) == Some(check))
        .unwrap_or("")
        .to_owned()
}

/// An evicting Valkey (a server of its own: the setting is server-wide)
/// FAILs doctor with the fix, exit 1.
fn valkey_eviction_fails(_env: &Env) -> TestResult {
    let server = provide(ServerKind::Valkey8)?;
    let url = server.url.clone();
    let cli_url = server.store_url();
    let set = |policy: &str| {
        rt().block_on(async {
            use fred::prelude::*;
            let client = Builder::from_config(Config::from_url(&url).map_err(|e| e.to_string())?)
                .build()
                .map_err(|e| e.to_string())?;
            client.init().await.map_err(|e| e.to_string())?;
            let cmd = fred::types::CustomCommand::new_static(
                "CONFIG",
                fred::types::ClusterHash::Random,
                false,
            );
            let _: fred::types::Value = client
                .custom(cmd, vec!["SET", "maxmemory-policy", policy])
                .await
                .map_err(|e| e.to_string())?;
            let _ = client.quit().await;
            Ok::<_, String>(())
        })
    };
    set("allkeys-lru")?;
    (|| {
        let o = run(&["doctor", "--url", &cli_url]);
        expect_code(&o, 1)?;
        let out = text(&o).0;
        let block = check_block(&out, "FAIL", "eviction")?;
        if !(block.contains("maxmemory-policy allkeys-lru")
            && block.contains("- fix: CONFIG SET maxmemory-policy noeviction")
            && block.contains("allow_eviction=true"))
        {
            return Err(block);
        }
        // With the opt-in connect accepts it, and doctor warns.
        let allowed = with_option(&cli_url, "allow_eviction=true");
        match connects(&cli_url) {
            Err(leasehold::ConnectError::Refused { .. }) => {}
            other => return Err(format!("connect: {other:?}")),
        }
        let (out, _) = doctor_on(&allowed);
        check_block(&out, "warn", "eviction").map(drop)
    })()
}

/// Deletes every record of `pool` behind the tool's back, as a
/// `DELETE … WHERE pool = …`, a `DEL` of the pool's keys, an `etcdctl del
/// --prefix` or a `kubectl delete leases` would.
fn wipe_pool(env: &Env, url: &str, table: &str, pool: &str) -> TestResult {
    if let Some(fake) = env
        ._keep
        .iter()
        .find_map(|k| k.downcast_ref::<Arc<leasehold_k8s_fake::FakeApiServer>>())
    {
        let mut gone = 0;
        for (name, _) in fake.leases("default") {
            if name.starts_with(&format!("leasehold-{pool}-")) && fake.delete("default", &name) {
                gone += 1;
            }
        }
        return if gone > 0 {
            Ok(())
        } else {
            Err(format!("no Lease of pool {pool} to delete"))
        };
    }
    rt().block_on(async {
        let store = StoreConfig::from_url(url)
            .map_err(|e| e.to_string())?
            .map(|c: leasehold::sql::SqlConfig| c.durability(DurabilityPolicy::Throwaway))
            .map(|c: leasehold::valkey::ValkeyConfig| c.durability(DurabilityPolicy::Throwaway))
            .connect()
            .await
            .map_err(|e| e.to_string())?;
        if let Some(sql) = store.strategy::<leasehold::sql::SqlStrategy>() {
            use leasehold::sql::sqlx;
            let delete = format!("DELETE FROM {table} WHERE pool = '{pool}'");
            let done = if let Some(p) = sql.postgres() {
                sqlx::raw_sql(&delete).execute(p).await.map(drop)
            } else if let Some(p) = sql.mysql() {
                sqlx::raw_sql(&delete).execute(p).await.map(drop)
            } else if let Some(p) = sql.sqlite() {
                sqlx::raw_sql(&delete).execute(p).await.map(drop)
            } else {
                return Err("an engine this test does not know".to_owned());
            };
            return done.map_err(|e| format!("{delete}: {e}"));
        }
        if let Some(valkey) = store.strategy::<leasehold::valkey::ValkeyStrategy>() {
            use fred::prelude::*;
            let keys = valkey.keys(&PoolName::new(pool).map_err(|e| e.to_string())?);
            let cmd = fred::types::CustomCommand::new_static(
                "DEL",
                fred::types::ClusterHash::FirstKey,
                false,
            );
            let deleted: i64 = valkey
                .client()
                .custom(
                    cmd,
                    vec![keys.slot_key(0), keys.slot_key(1), keys.fences, keys.leases],
                )
                .await
                .map_err(|e| format!("DEL: {e}"))?;
            return if deleted > 0 {
                Ok(())
            } else {
                Err(format!("no key of pool {pool} to delete"))
            };
        }
        if let Some(etcd) = store.strategy::<leasehold::etcd::EtcdStrategy>() {
            use leasehold::etcd::etcd_client::DeleteOptions;
            let resp = etcd
                .client()
                .clone()
                .delete(
                    format!("leasehold/{pool}/"),
                    Some(DeleteOptions::new().with_prefix()),
                )
                .await
                .map_err(|e| format!("delete the prefix: {e}"))?;
            return if resp.deleted() > 0 {
                Ok(())
            } else {
                Err(format!("no key of pool {pool} to delete"))
            };
        }
        Err("a store this test cannot wipe".to_owned())
    })
}

/// Damages `pool`'s incarnation record so that no claim can trust it: a
/// record row without its time (SQL), a `gone_seen` that is not whole
/// milliseconds (Valkey/Redis), a guard key on no etcd lease (etcd), a
/// record Lease that is a guard without its start (Kubernetes).
fn damage_record(env: &Env, url: &str, table: &str, pool: &str) -> TestResult {
    if let Some(fake) = env
        ._keep
        .iter()
        .find_map(|k| k.downcast_ref::<Arc<leasehold_k8s_fake::FakeApiServer>>())
    {
        let name = format!("leasehold-{pool}--incarnation");
        fake.insert_raw(
            "default",
            &name,
            serde_json::json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": name,
                    "namespace": "default",
                    "resourceVersion": "1",
                    "labels": {"leasehold/pool": pool},
                    "annotations": {"leasehold/incarnation": "guarded"},
                },
                "spec": {"leaseDurationSeconds": 32},
            }),
        );
        return Ok(());
    }
    rt().block_on(async {
        let store = StoreConfig::from_url(url)
            .map_err(|e| e.to_string())?
            .map(|c: leasehold::sql::SqlConfig| c.durability(DurabilityPolicy::Throwaway))
            .map(|c: leasehold::valkey::ValkeyConfig| c.durability(DurabilityPolicy::Throwaway))
            .connect()
            .await
            .map_err(|e| e.to_string())?;
        if let Some(sql) = store.strategy::<leasehold::sql::SqlStrategy>() {
            use leasehold::sql::sqlx;
            let update = format!(
                "UPDATE {table} SET acquired_at = NULL \
                 WHERE pool = '{pool}' AND slot = 2147483646"
            );
            let done = if let Some(p) = sql.postgres() {
                sqlx::raw_sql(&update).execute(p).await.map(drop)
            } else if let Some(p) = sql.mysql() {
                sqlx::raw_sql(&update).execute(p).await.map(drop)
            } else if let Some(p) = sql.sqlite() {
                sqlx::raw_sql(&update).execute(p).await.map(drop)
            } else {
                return Err("an engine this test does not know".to_owned());
            };
            return done.map_err(|e| format!("{update}: {e}"));
        }
        if let Some(valkey) = store.strategy::<leasehold::valkey::ValkeyStrategy>() {
            use fred::prelude::*;
            let keys = valkey.keys(&PoolName::new(pool).map_err(|e| e.to_string())?);
            let cmd = fred::types::CustomCommand::new_static(
                "HSET",
                fred::types::ClusterHash::FirstKey,
                false,
            );
            let _: i64 = valkey
                .client()
                .custom(cmd, vec![keys.fences.as_str(), "gone_seen", "soon"])
                .await
                .map_err(|e| format!("HSET: {e}"))?;
            return Ok(());
        }
        if let Some(etcd) = store.strategy::<leasehold::etcd::EtcdStrategy>() {
            etcd.client()
                .clone()
                .put(format!("leasehold/{pool}/~guard"), "x", None)
                .await
                .map_err(|e| format!("put the guard key: {e}"))?;
            return Ok(());
        }
        Err("a store this test cannot damage".to_owned())
    })
}

/// The doctor line `verdict  wipe` of `pool`, or why not.
fn wipe_line(url: &str, pool: &str, verdict: &str) -> Result<String, String> {
    let o = run(&["doctor", "--url", url, "--pool", pool]);
    let (out, err, _) = text(&o);
    out.lines()
        .find(|l| {
            l.starts_with(&format!("{verdict:<4}  wipe")) && l.contains(&format!("pool {pool}:"))
        })
        .map(str::to_owned)
        .ok_or_else(|| format!("no `{verdict} wipe` line of pool {pool}:\n{out}{err}"))
}

/// Doctor shows the wipe guard's incarnation record of the pool named: a
/// pool declared new has it (ok); a pool never prepared has none (a
/// warning whose fix is the `prepare` that makes it, naming the store and
/// the pool); a pool whose records were deleted and then prepared again
/// (as every start does) has a guard running (a warning with when it
/// opens); a record no claim can trust FAILs.
fn doctor_wipe_guard(env: &Env) -> TestResult {
    let (fresh, never) = (unique_pool(), unique_pool());
    // SQL: a table of the test's own, since doctor without --pool reads
    // every pool of a table, and the damaged record this test leaves would
    // FAIL the doctor of every other test on the shared one.
    let sql = ["sqlite", "postgres", "mariadb"]
        .iter()
        .any(|p| env.label.starts_with(p));
    let table = if sql {
        format!("lhwipe_{}", unique_pool())
    } else {
        "leasehold_leases".to_owned()
    };
    let url = if sql {
        with_option(&env.url, &format!("table={table}"))
    } else {
        env.url.clone()
    };
    let url = url.as_str();
    let prepare = |pool: &str, new: bool| {
        let mut args = vec!["prepare", "--url", url, "--pool", pool, "--size", "2"];
        if new {
            args.extend(["--new-pool", "--yes"]);
        }
        expect_code(&run(&args), 0)
    };
    prepare(&fresh, true)?;
    let line = wipe_line(url, &fresh, "ok")?;
    if !line.contains("incarnation record present") || !line.contains("claims wait for nothing") {
        return Err(format!("a pool declared new: {line}"));
    }
    println!("{line}");
    let line = wipe_line(url, &never, "warn")?;
    let fix = format!(
        "fix: leasehold prepare --url {} --pool {never} (",
        leasehold::url::redacted(url)
    );
    if !line.contains("no incarnation record")
        || !line.contains(&fix)
        || !line.contains("--new-pool --yes")
    {
        return Err(format!("a pool never prepared: {line}"));
    }
    println!("{line}");
    // A slot claimed, so that the pool has records on every store, and (on
    // etcd) an etcd lease outlives the wipe: a cluster with no lease at all
    // would get a guard of only 2 × max_clock_skew.
    // (SQL: the pool's rows, in the test's own table, are its records.)
    if !sql {
        rt().block_on(
            env.strategy
                .acquire_dyn(&spec(&fresh, 2, "worker-a"), CEILING),
        )
        .map_err(|e| format!("acquire: {e}"))?;
    }
    let before = std::time::SystemTime::now();
    wipe_pool(env, url, &table, &fresh)?;
    prepare(&fresh, false)?;
    let line = wipe_line(url, &fresh, "warn")?;
    println!("{line}");
    if !line.contains("the pool's records were found gone at")
        || !line.contains("guard running: no slot is granted until")
        || !line.contains("--new-pool --yes")
    {
        return Err(format!("a wiped pool prepared again: {line}"));
    }
    // When it was seen gone: after the wipe, on a clock (or, on etcd, in
    // whole seconds of a lease's TTL) within two seconds of this one.
    let at = line
        .split("found gone at ")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .ok_or_else(|| format!("no time: {line}"))?;
    let shown = leasehold::guards::utc(before - Duration::from_secs(2));
    if at < shown.as_str() {
        return Err(format!(
            "seen gone at {at}, before the wipe ({shown}): {line}"
        ));
    }
    // A record no claim can trust: FAIL, exit 1, with its repair.
    damage_record(env, url, &table, &fresh)?;
    let line = wipe_line(url, &fresh, "FAIL")?;
    println!("{line}");
    let code = run(&["doctor", "--url", url, "--pool", &fresh])
        .status
        .code();
    if !line.contains("fix:") || code != Some(1) {
        return Err(format!("a damaged record (exit {code:?}): {line}"));
    }
    Ok(())
}

/// Doctor with the URL an application that opts in uses
/// (`durability=one-timing-per-pool`: the restart guard on, on these
/// speed-tuned servers), after a claim: the restart guard's line names the
/// server's start and the span recorded has passed; the promotion guard's
/// names the identity the claim recorded (PostgreSQL's first timeline,
/// MariaDB's server ID, Valkey's replication ID), which waits for nothing.
fn doctor_restart_and_promotion_guards(env: &Env) -> TestResult {
    let url = with_option(&env.url, "durability=one-timing-per-pool");
    let pool = unique_pool();
    let o = run(&[
        "prepare",
        "--url",
        &url,
        "--pool",
        &pool,
        "--size",
        "2",
        "--new-pool",
        "--yes",
    ]);
    expect_code(&o, 0)?;
    // A span of 3 s (TTL 1 s, max_clock_skew 1 s): the restart guard holds
    // claims until the server has been up that long.
    let spec = PoolSpec::new(
        PoolName::new(&pool).map_err(|e| e.to_string())?,
        2,
        Duration::from_secs(1),
    )
    .map_err(|e| e.to_string())?
    .with_holder("worker-a");
    let deadline = Instant::now() + Duration::from_secs(30);
    rt().block_on(async {
        let store = StoreConfig::from_url(&url)
            .map_err(|e| e.to_string())?
            .connect()
            .await
            .map_err(|e| e.to_string())?;
        loop {
            match store.acquire_dyn(&spec, CEILING).await {
                Ok(_) => return Ok::<_, String>(()),
                Err(leasehold::AcquireError::StoreRestarted { resume_in })
                    if Instant::now() < deadline =>
                {
                    tokio::time::sleep(resume_in.min(Duration::from_millis(500))).await;
                }
                Err(e) => return Err(format!("acquire: {e}")),
            }
        }
    })?;
    let before = std::time::SystemTime::now();
    let o = run(&["doctor", "--url", &url, "--pool", &pool]);
    let (out, err, _) = text(&o);
    println!("{out}");
    let restart = line_of(&out, "restart");
    let promotion = line_of(&out, "promotion");
    let identity = if env.label.starts_with("postgres") {
        "timeline 00000001, first seen long past"
    } else if env.label.starts_with("mariadb") {
        "server_id 1, first seen long past"
    } else {
        "replication ID "
    };
    let started = restart
        .split("the server started at ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .unwrap_or("");
    if !restart.starts_with(&format!(
        "ok    restart       pool {pool}: the server started at "
    )) || !restart.contains("more than a restart span ago")
        || started > leasehold::guards::utc(before).as_str()
        || !promotion.starts_with(&format!("ok    promotion     pool {pool}: {identity}"))
        || !promotion.contains("claims wait for nothing")
    {
        return Err(format!("doctor with the restart guard on:\n{out}{err}"));
    }
    Ok(())
}

fn etcd_doctor(env: &Env) -> TestResult {
    doctor_expect(
        env,
        &[
            ("ok", "server"),
            ("ok", "cluster"),
            ("ok", "tls"),
            ("n/a", "grants"),
            ("ok", "path"),
            ("n/a", "durability"),
            ("ok", "replication"),
            ("n/a", "clock"),
            ("ok|warn", "latency"),
        ],
        0,
    )
}

fn k8s_fake_doctor(env: &Env) -> TestResult {
    doctor_expect(
        env,
        &[
            ("ok", "server"),
            ("ok", "rbac"),
            ("n/a", "durability"),
            ("ok", "replication"),
            ("n/a", "clock"),
            ("ok|warn", "latency"),
        ],
        0,
    )
}

/// A fake API server of its own forbids `patch`: doctor's RBAC check
/// FAILs with the fix, exit 1.
fn k8s_fake_doctor_rbac_forbidden(_env: &Env) -> TestResult {
    let fake = leasehold_k8s_fake::FakeApiServer::start().map_err(|e| e.to_string())?;
    fake.faults().set(
        leasehold_k8s_fake::Verb::Patch,
        leasehold_k8s_fake::Fault::Forbidden,
    );
    let o = run(&["doctor", "--url", &format!("k8s://{}", fake.addr())]);
    expect_code(&o, 1)?;
    let out = text(&o).0;
    let line = out
        .lines()
        .find(|l| l.starts_with("FAIL  rbac"))
        .ok_or_else(|| format!("no FAIL rbac line:\n{out}"))?;
    if line.contains("may not `patch` coordination.k8s.io/leases in namespace \"default\"")
        && line.contains("apply lease-k8s/deploy/rbac.yaml")
    {
        Ok(())
    } else {
        Err(line.to_owned())
    }
}

/// The password in a URL is never printed: not by status or doctor on a
/// server that accepts it, not in the error of one that cannot be reached.
fn password_not_echoed(env: &Env) -> TestResult {
    const SECRET: &str = "Sup3r-s3cret-pw";
    let with_password = env
        .url
        .replacen("://postgres@", &format!("://postgres:{SECRET}@"), 1);
    let unreachable = format!("postgres://postgres:{SECRET}@127.0.0.1:1/postgres");
    for args in [
        vec!["status", "--url", &with_password],
        vec!["doctor", "--url", &with_password],
        vec!["status", "--url", &unreachable, "--pool", "ids"],
        vec!["doctor", "--url", &unreachable],
        vec![
            "status",
            "--url",
            "postgres://postgres:Sup3r-s3cret-pw@[bad",
            "--pool",
            "x",
        ],
    ] {
        let o = run(&args);
        let (out, err, _) = text(&o);
        if out.contains(SECRET) || err.contains(SECRET) {
            return Err(format!("{args:?} printed the password:\n{out}{err}"));
        }
    }
    let o = run(&["status", "--url", &unreachable, "--pool", "ids"]);
    expect_code(&o, 4)?;
    let line = one_line_error(&o)?;
    if line.contains("postgres://postgres:***@127.0.0.1:1/postgres") {
        Ok(())
    } else {
        Err(format!("the redacted URL is missing: {line}"))
    }
}

/// `url` with `user:password@` (`password` `None`: `user@`) in its user
/// info, keeping a user it names already.
fn with_user_info(url: &str, user: &str, password: Option<&str>) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (user, host) = match rest.split_once('@') {
        Some((u, h)) if !u.contains('/') => (u.split(':').next().unwrap_or(u), h),
        _ => (user, rest),
    };
    match password {
        Some(pw) => format!("{scheme}://{user}:{pw}@{host}"),
        None => format!("{scheme}://{user}@{host}"),
    }
}

/// `url` with the query option `option` (`key=value`) added.
fn with_option(url: &str, option: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{option}")
}

/// An ACL user `user` with `password` on the Valkey/Redis at `url` (a new
/// user on the shared server: the default user, which the other tests use,
/// is untouched).
fn valkey_acl_user(url: &str, user: &str, password: &str) -> TestResult {
    let url = url.replacen("valkey://", "redis://", 1);
    rt().block_on(async {
        use fred::prelude::*;
        let client = Builder::from_config(Config::from_url(&url).map_err(|e| e.to_string())?)
            .build()
            .map_err(|e| e.to_string())?;
        client.init().await.map_err(|e| e.to_string())?;
        let cmd =
            fred::types::CustomCommand::new_static("ACL", fred::types::ClusterHash::Random, false);
        let pw = format!(">{password}");
        let answer: Result<fred::types::Value, _> = client
            .custom(cmd, vec!["SETUSER", user, "on", &pw, "~*", "&*", "+@all"])
            .await;
        let _ = client.quit().await;
        answer.map(drop).map_err(|e| e.to_string())
    })
}

/// No output of the tool shows a password planted in the URL's user info,
/// in its query string (`?password=`), or in a file it names
/// (`password_file=`), with the URL from `--url`, `--url-file` or
/// `LEASEHOLD_URL`, in `doctor`, `status`, `watch` and `revoke`. Where the
/// store takes the password (PostgreSQL, which trusts the test's
/// connections; Valkey/Redis, through an ACL user made with it) doctor
/// runs its checks; elsewhere the commands fail, and say so without it.
fn secrets_never_shown(env: &Env) -> TestResult {
    let secret = format!("Pl4nted{}", unique_pool());
    let takes = env.label.starts_with("postgres")
        || env.label.starts_with("valkey")
        || env.label.starts_with("redis");
    let user = "leasehold_cli";
    if env.label.starts_with("valkey") || env.label.starts_with("redis") {
        valkey_acl_user(&env.url, user, &secret)?;
    }
    let dir = std::env::temp_dir().join(format!("leasehold-cli-secret-{}", unique_pool()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let password_file = dir.join("password");
    std::fs::write(&password_file, format!("{secret}\n")).map_err(|e| e.to_string())?;
    let url_file = dir.join("url");
    let url_file_arg = url_file.to_str().ok_or("temp path")?.to_owned();
    let forms = [
        (
            "user info",
            with_user_info(&env.url, user, Some(&secret)),
            takes,
        ),
        (
            "query string",
            with_option(&env.url, &format!("password={secret}")),
            env.label.starts_with("postgres"),
        ),
        (
            "password_file",
            with_option(
                &with_user_info(&env.url, user, None),
                &format!("password_file={}", password_file.display()),
            ),
            takes,
        ),
    ];
    let pool = unique_pool();
    let outcome = (|| {
        for (form, url, connects) in &forms {
            let commands: [&[&str]; 4] = [
                &["doctor"],
                &["status", "--pool", &pool, "--size", "2"],
                &[
                    "watch",
                    "--pool",
                    &pool,
                    "--size",
                    "2",
                    "--count",
                    "1",
                    "--interval",
                    "50",
                ],
                &[
                    "revoke", "--pool", &pool, "--slot", "0", "--size", "2", "--yes",
                ],
            ];
            let mut runs: Vec<(String, Output)> = Vec::new();
            for command in commands {
                let mut args = command.to_vec();
                args.extend(["--url", url.as_str(), "--timeout", "3"]);
                runs.push((format!("{command:?} --url"), run(&args)));
            }
            std::fs::write(&url_file, format!("{url}\n")).map_err(|e| e.to_string())?;
            runs.push((
                "doctor --url-file".into(),
                run(&["doctor", "--url-file", &url_file_arg, "--timeout", "3"]),
            ));
            runs.push((
                "doctor with LEASEHOLD_URL".into(),
                run_with(
                    &["doctor", "--timeout", "3"],
                    &[("LEASEHOLD_URL", url)],
                    None,
                ),
            ));
            for (what, o) in &runs {
                let (out, err, code) = text(o);
                if out.contains(&secret) || err.contains(&secret) {
                    return Err(format!("{form}: {what} printed the password:\n{out}{err}"));
                }
                // Doctor ran its checks (0: all passed or warned, 1: one failed).
                if *connects && what.starts_with("[\"doctor\"]") && !matches!(code, 0 | 1) {
                    return Err(format!(
                        "{form}: {what} did not connect (exit {code}):\n{out}{err}"
                    ));
                }
            }
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

// ---- tests without a server ----

/// `prepare` on SQLite (a file of its own): the pool prepared by the call
/// that creates the table is new; a pool prepared on the table that was
/// there may be one whose rows were deleted, so its claims wait out a span;
/// `--new-pool` (confirmed with `--yes`) declares it new and they wait for
/// nothing.
fn prepare_declares_a_sql_pool_new_only_when_told() -> TestResult {
    let dir = servers::private_dir("cli-prepare")?;
    let file = dir.join("leases.sqlite");
    std::fs::write(&file, b"").map_err(|e| e.to_string())?;
    let url = format!("sqlite://{}", file.display());
    let prepare = |extra: &[&str]| {
        let mut args = vec!["prepare", "--url", url.as_str(), "--size", "2"];
        args.extend_from_slice(extra);
        run(&args)
    };
    // A claim with every guard on, as an application makes it.
    let claim = |pool: &str| {
        rt().block_on(async {
            let store = StoreConfig::from_url(&url)
                .map_err(|e| e.to_string())?
                .connect()
                .await
                .map_err(|e| e.to_string())?;
            let strategy: Arc<dyn DynStrategy> = Arc::new(store);
            Ok::<_, String>(strategy.acquire_dyn(&spec(pool, 2, "cli"), CEILING).await)
        })
    };
    let outcome = (|| {
        expect_code(&prepare(&["--pool", "first"]), 0)?;
        if let Err(e) = claim("first")? {
            return Err(format!("the pool prepared with its table waited: {e}"));
        }
        expect_code(&prepare(&["--pool", "second"]), 0)?;
        let waits = |when: &str| match claim("second") {
            Ok(Err(leasehold::AcquireError::StoreRestarted { .. })) => Ok(()),
            other => Err(format!(
                "{when}, a pool first prepared on the table that was there answered {other:?}, \
                 not StoreRestarted"
            )),
        };
        waits("with no --new-pool")?;
        // Nobody can confirm on a pipe: nothing changes.
        expect_code(&prepare(&["--pool", "second", "--new-pool"]), 6)?;
        waits("after --new-pool was not confirmed")?;
        expect_code(&prepare(&["--pool", "second", "--new-pool", "--yes"]), 0)?;
        if let Err(e) = claim("second")? {
            return Err(format!("the pool declared new waited: {e}"));
        }
        // --new-pool names a pool.
        expect_code(&prepare(&["--new-pool", "--yes"]), 2)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

fn offline_trials() -> Vec<Trial> {
    let t = |name: &str, f: fn() -> TestResult| {
        Trial::test(format!("offline::{name}"), move || {
            f().map_err(Failed::from)
        })
    };
    vec![
        t(
            "prepare_declares_a_sql_pool_new_only_when_told",
            prepare_declares_a_sql_pool_new_only_when_told,
        ),
        t("help_documents_exit_codes", || {
            let o = run(&["--help"]);
            expect_code(&o, 0)?;
            let out = text(&o).0;
            for code in [
                "  3  bad store URL",
                "  4  the store cannot be reached",
                "  5  this store cannot list",
                "  9  authentication failed",
            ] {
                if !out.contains(code) {
                    return Err(format!("--help lacks {code:?}:\n{out}"));
                }
            }
            Ok(())
        }),
        t("help_names_every_url_source", || {
            for args in [&["status", "--help"][..], &["doctor", "--help"]] {
                let o = run(args);
                expect_code(&o, 0)?;
                let out = text(&o).0;
                for needle in [
                    "--url <URL>",
                    "--url-file <PATH>",
                    "LEASEHOLD_URL",
                    "password_file",
                ] {
                    if !out.contains(needle) {
                        return Err(format!("{args:?} lacks {needle:?}:\n{out}"));
                    }
                }
            }
            Ok(())
        }),
        t("the_url_comes_from_exactly_one_source", url_sources),
        t("unknown_scheme_exit_3", || {
            let o = run(&["status", "--url", "ftp://h/x", "--pool", "ids"]);
            expect_code(&o, 3)?;
            same(
                &one_line_error(&o)?,
                "leasehold: bad store URL ftp://h/x: unknown scheme \"ftp\"; use one of \
                 postgres, postgresql, mysql, mariadb, sqlite (SQL); redis, rediss, valkey, \
                 valkeys, redis-sentinel, rediss-sentinel, valkey-sentinel, valkeys-sentinel, \
                 redis-cluster, rediss-cluster, valkey-cluster, valkeys-cluster (Valkey/Redis); etcd, etcds (etcd); k8s, k8s+http, k8s+https, \
                 kubernetes (Kubernetes); memory (in-process)",
            )
        }),
        t("url_without_scheme_exit_3", || {
            let o = run(&["doctor", "--url", "localhost:5432"]);
            expect_code(&o, 3)?;
            one_line_error(&o).map(drop)
        }),
        t("unreachable_exit_4_one_line", || {
            for url in [
                "postgres://u@127.0.0.1:1/db",
                "mysql://root@127.0.0.1:1/x",
                "redis://127.0.0.1:1",
                "etcd://127.0.0.1:1",
                "k8s://127.0.0.1:1",
            ] {
                let o = run(&["status", "--url", url, "--pool", "ids", "--timeout", "2"]);
                expect_code(&o, 4).map_err(|e| format!("{url}: {e}"))?;
                let line = one_line_error(&o).map_err(|e| format!("{url}: {e}"))?;
                // The command has given up: no retry is coming.
                if line.contains("will retry") {
                    return Err(format!("{url}: promises a retry: {line}"));
                }
            }
            Ok(())
        }),
        t("timeout_is_short", || {
            // A port that accepts but never answers (a listener nobody serves).
            let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
            let url = format!(
                "postgres://u@{}/db",
                l.local_addr().map_err(|e| e.to_string())?
            );
            let start = Instant::now();
            let o = run(&["status", "--url", &url, "--pool", "ids", "--timeout", "1"]);
            expect_code(&o, 4)?;
            one_line_error(&o)?;
            if start.elapsed() > Duration::from_secs(20) {
                return Err(format!("took {:?}", start.elapsed()));
            }
            Ok(())
        }),
        t("missing_sqlite_file_exit_4", || {
            let o = run(&[
                "status",
                "--url",
                "sqlite:///nonexistent/leases.db",
                "--pool",
                "ids",
            ]);
            expect_code(&o, 4)?;
            same(
                &one_line_error(&o)?,
                "leasehold: no SQLite file at /nonexistent/leases.db; give the file the holders use",
            )?;
            if std::path::Path::new("/nonexistent/leases.db").exists() {
                return Err("status created the file".into());
            }
            Ok(())
        }),
        t("password_not_echoed_unreachable", || {
            for url in [
                "postgres://me:Pw-xyzzy-42@127.0.0.1:1/db",
                "redis://me:Pw-xyzzy-42@127.0.0.1:1",
                "etcd://me:Pw-xyzzy-42@127.0.0.1:1",
                "mysql://me:Pw%2Dxyzzy%2D42@127.0.0.1:1/x",
                "gopher://me:Pw-xyzzy-42@h",
            ] {
                let o = run(&["status", "--url", url, "--pool", "ids", "--timeout", "2"]);
                let (out, err, _) = text(&o);
                if out.contains("xyzzy") || err.contains("xyzzy") {
                    return Err(format!("{url}: printed the password:\n{out}{err}"));
                }
                one_line_error(&o)?;
            }
            Ok(())
        }),
        t("revoke_refuses_without_yes_when_not_a_terminal", || {
            let o = run(&[
                "revoke",
                "--url",
                "sqlite:///nonexistent.db",
                "--pool",
                "ids",
                "--slot",
                "3",
            ]);
            expect_code(&o, 6)?;
            same(
                &one_line_error(&o)?,
                "leasehold: not revoking slot 3 of pool ids: stdin is not a terminal, so nobody \
                 can confirm; add --yes",
            )
        }),
        t("decode_u64_hex_base32", || {
            // slot 7, counter 42, 1000 ms after the default epoch.
            let v: u64 = (1000 << 22) | (7 << 13) | 42;
            let b32 = leasehold::nonce::Nonce64(v).base32().to_string();
            let hex = format!("0x{v:x}");
            let dec = v.to_string();
            let o = run(&["decode", &dec, &hex, &b32]);
            expect_code(&o, 0)?;
            let body = "  layout   default64 (64 bits: 42 timestamp, 9 slot, 13 counter; epoch 2025-01-01T00:00:00.000Z)\n  \
                        time     2025-01-01T00:00:01.000Z (UTC), 2025-01-01 00:00:01.000 +00:00 (UTC)\n  \
                        slot     7\n  counter  42\n";
            same(
                &text(&o).0,
                &format!("{dec} (decimal)\n{body}\n{hex} (hex)\n{body}\n{b32} (base32)\n{body}"),
            )
        }),
        t("decode_snowflake_and_stdin", || {
            let l = leasehold::nonce::Layout::snowflake();
            let v: u64 = (5000 << 22) | (1023 << 12) | 4095;
            assert_eq!(l.decode(v).slot, 1023);
            let o = run_with(
                &["decode", "--layout", "snowflake"],
                &[],
                Some(&format!("{v}\n\n")),
            );
            expect_code(&o, 0)?;
            same(
                &text(&o).0,
                &format!(
                    "{v} (decimal)\n  layout   snowflake (64 bits: 1 reserved, 41 timestamp, 10 slot, 12 counter; epoch 2025-01-01T00:00:00.000Z)\n  \
                     time     2025-01-01T00:00:05.000Z (UTC), 2025-01-01 00:00:05.000 +00:00 (UTC)\n  \
                     slot     1023\n  counter  4095\n"
                ),
            )
        }),
        t("decode_uuid7_and_encrypted", decode_uuid7_and_encrypted),
        t(
            "decode_refuses_digits_that_read_as_hex_and_decimal_showing_both",
            decode_refuses_ambiguous_digits,
        ),
        t(
            "decode_reads_what_display_prints",
            decode_reads_what_display_prints,
        ),
        t("decode_bad_input_exit_8", || {
            let o = run(&["decode", "not-an-id"]);
            expect_code(&o, 8)?;
            let (_, err, _) = text(&o);
            same(
                &err,
                "leasehold: cannot decode \"not-an-id\": not an ID: give a u64, 0x-hex, 16/24/32 hex \
                 digits, 13/20/26 Crockford base32 characters or a UUIDv7\n\
                 leasehold: 1 of 1 IDs could not be decoded\n",
            )?;
            let o = run(&["decode", "1", "--key-file", "/nonexistent/key"]);
            expect_code(&o, 8)?;
            one_line_error(&o).map(drop)
        }),
    ]
}

/// The slot and counter lines `decode` prints for `v` in the 64-bit layout.
fn slot_and_counter(v: u64) -> String {
    let parts = leasehold::nonce::Layout::default64().decode(u128::from(v));
    format!("  slot     {}\n  counter  {}\n", parts.slot, parts.counter)
}

/// A `Nonce64` whose Display (16 hex digits) has no letter is a valid
/// decimal number too: `decode` refuses to guess, shows both readings, and
/// reads it as `--hex` or `--decimal` says.
fn decode_refuses_ambiguous_digits() -> TestResult {
    let id = "0388990780404000";
    let as_hex = u64::from_str_radix(id, 16).map_err(|e| e.to_string())?;
    let as_decimal: u64 = id
        .parse()
        .map_err(|e: std::num::ParseIntError| e.to_string())?;
    assert_eq!(leasehold::nonce::Nonce64(as_hex).to_string(), id);

    let o = run(&["decode", id]);
    expect_code(&o, 8)?;
    let (out, err, _) = text(&o);
    if !out.is_empty() {
        return Err(format!("printed a reading of an ambiguous ID:\n{out}"));
    }
    for part in [
        "ambiguous",
        "give --hex or --decimal",
        &format!("{id} (hex)"),
        &format!("{id} (decimal)"),
        &slot_and_counter(as_hex),
        &slot_and_counter(as_decimal),
        "leasehold: 1 of 1 IDs could not be decoded",
    ] {
        if !err.contains(part) {
            return Err(format!("the refusal lacks {part:?}:\n{err}"));
        }
    }
    if err.matches("  time     ").count() != 2 {
        return Err(format!("the refusal does not show both times:\n{err}"));
    }

    let o = run(&["decode", "--hex", id]);
    expect_code(&o, 0)?;
    let out = text(&o).0;
    if !out.starts_with(&format!("{id} (hex)\n")) || !out.contains(&slot_and_counter(as_hex)) {
        return Err(format!("--hex did not read it as hex:\n{out}"));
    }
    let o = run(&["decode", "--decimal", id]);
    expect_code(&o, 0)?;
    let out = text(&o).0;
    if !out.starts_with(&format!("{id} (decimal)\n"))
        || !out.contains(&slot_and_counter(as_decimal))
    {
        return Err(format!("--decimal did not read it as decimal:\n{out}"));
    }
    let o = run(&["decode", "--hex", "--decimal", id]);
    expect_code(&o, 2)
}

/// What `Display` prints decodes as that ID without a flag: 16 hex digits
/// with a letter, and 24 hex digits with no letter (too large for a
/// decimal u64, so not ambiguous).
fn decode_reads_what_display_prints() -> TestResult {
    let v: u64 = (1000 << 22) | (7 << 13) | 42;
    let shown = leasehold::nonce::Nonce64(v).to_string();
    let o = run(&["decode", &shown]);
    expect_code(&o, 0)?;
    let out = text(&o).0;
    if !out.starts_with(&format!("{shown} (hex)\n")) || !out.contains(&slot_and_counter(v)) {
        return Err(format!("{shown} was not read as its Display:\n{out}"));
    }
    let wide = "100003980000000000000123";
    let o = run(&["decode", wide]);
    expect_code(&o, 0)?;
    let out = text(&o).0;
    if !out.starts_with(&format!("{wide} (hex)\n")) || !out.contains("96 bits") {
        return Err(format!("{wide} was not read as 96-bit hex:\n{out}"));
    }
    Ok(())
}

/// The URL is read from `--url`, `--url-file` (a trailing newline allowed)
/// or `LEASEHOLD_URL`, from exactly one of them: none or several is a usage
/// error (exit 2) naming them.
fn url_sources() -> TestResult {
    let dir = std::env::temp_dir().join(format!("leasehold-cli-url-{}", unique_pool()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let file = dir.join("url");
    // An unknown scheme: exit 3 proves the URL was read, without a server.
    std::fs::write(&file, "ftp://h/x\n").map_err(|e| e.to_string())?;
    let file = file.to_str().ok_or("temp path")?.to_owned();
    let bad_url = "leasehold: bad store URL ftp://h/x: unknown scheme \"ftp\"";
    for (args, env) in [
        (vec!["status", "--url", "ftp://h/x", "--pool", "p"], None),
        (vec!["status", "--url-file", &file, "--pool", "p"], None),
        (vec!["doctor"], Some("ftp://h/x")),
    ] {
        let env: Vec<(&str, &str)> = env.map(|v| ("LEASEHOLD_URL", v)).into_iter().collect();
        let o = run_with(&args, &env, None);
        expect_code(&o, 3).map_err(|e| format!("{args:?} {env:?}: {e}"))?;
        let line = one_line_error(&o)?;
        if !line.starts_with(bad_url) {
            return Err(format!("{args:?} {env:?}: {line}"));
        }
    }
    for (args, env, want) in [
        (
            vec!["doctor"],
            None,
            "leasehold: no store URL: give it with --url URL, --url-file PATH or the environment \
             variable LEASEHOLD_URL",
        ),
        (
            vec!["doctor", "--url", "ftp://h/x"],
            Some("ftp://h/y"),
            "leasehold: the store URL is given 2 ways (--url, LEASEHOLD_URL); give it one way: \
             --url, --url-file or LEASEHOLD_URL",
        ),
        (
            vec![
                "status",
                "--url",
                "ftp://h/x",
                "--url-file",
                &file,
                "--pool",
                "p",
            ],
            None,
            "leasehold: the store URL is given 2 ways (--url, --url-file); give it one way: \
             --url, --url-file or LEASEHOLD_URL",
        ),
    ] {
        let env: Vec<(&str, &str)> = env.map(|v| ("LEASEHOLD_URL", v)).into_iter().collect();
        let o = run_with(&args, &env, None);
        expect_code(&o, 2).map_err(|e| format!("{args:?}: {e}"))?;
        same(&one_line_error(&o)?, want)?;
    }
    let missing = dir.join("missing");
    let o = run(&["doctor", "--url-file", missing.to_str().unwrap_or("")]);
    expect_code(&o, 2)?;
    let line = one_line_error(&o)?;
    let _ = std::fs::remove_dir_all(&dir);
    if line.contains("--url-file") && line.contains("cannot read it") {
        Ok(())
    } else {
        Err(line)
    }
}

/// A UUIDv7 and an encrypted 64-bit nonce made by leasehold-nonce itself,
/// decoded by the binary.
fn decode_uuid7_and_encrypted() -> TestResult {
    use leasehold::testing::GateControl;
    use leasehold::{Fence, LeaseGate, MonoTime};
    let gate = LeaseGate::new();
    gate.open(5, Fence(1), MonoTime::now() + Duration::from_secs(60));
    let ids = leasehold::nonce::Sortable128::new(gate.clone()).map_err(|e| e.to_string())?;
    let uuid = ids.next_uuid7().map_err(|e| e.to_string())?;
    drop(ids);
    let o = run(&["decode", &uuid.to_string()]);
    expect_code(&o, 0)?;
    let out = text(&o).0;
    if !(out.starts_with(&format!("{uuid} (UUIDv7)\n  layout   default128 "))
        && out.contains("\n  slot     5\n"))
    {
        return Err(out);
    }
    let dir = std::env::temp_dir().join(format!("leasehold-cli-key-{}", unique_pool()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let key_file = dir.join("key");
    std::fs::write(&key_file, [0x5a; 32]).map_err(|e| e.to_string())?;
    let key = leasehold::nonce::BaseKey::new(&[0x5a; 32]).map_err(|e| e.to_string())?;
    let gate = LeaseGate::new();
    gate.open(9, Fence(1), MonoTime::now() + Duration::from_secs(60));
    let enc = leasehold::nonce::Encrypted::new(
        leasehold::nonce::Counter64::new(gate).map_err(|e| e.to_string())?,
        &key,
    );
    let n = enc.next().map_err(|e| e.to_string())?;
    let plain = enc.decrypt(n);
    let parts = enc.decode(n);
    let o = run(&[
        "decode",
        &n.to_string(),
        "--key-file",
        key_file.to_str().unwrap_or(""),
    ]);
    expect_code(&o, 0)?;
    let out = text(&o).0;
    let want_plain = format!("\n  plain    0x{plain} (decrypted)\n");
    let want_slot = format!(
        "\n  slot     {}\n  counter  {}\n",
        parts.slot, parts.counter
    );
    let _ = std::fs::remove_dir_all(&dir);
    if out.contains(&want_plain) && out.contains(&want_slot) && parts.slot == 9 {
        Ok(())
    } else {
        Err(format!("{out}\nwanted {want_plain:?} and {want_slot:?}"))
    }
}

// ---- the run ----

type StoreTest = fn(&Env) -> TestResult;

/// The tests every store runs; `true`: needs inspect, `false`: needs its
/// absence (the counterpart), `None`: always.
const COMMON: &[(&str, Option<bool>, StoreTest)] = &[
    ("revoke_leaves_tombstone", None, revoke_leaves_tombstone),
    ("status_without_pool", None, status_without_pool),
    ("status_table", Some(true), status_table),
    (
        "status_size_from_the_store",
        Some(true),
        status_size_from_the_store,
    ),
    ("watch_prints_changes", Some(true), watch_prints_changes),
    ("watch_count_stops", Some(true), watch_count_stops),
    (
        "status_unsupported_exit_5",
        Some(false),
        status_unsupported_exit_5,
    ),
    ("secrets_never_shown", None, secrets_never_shown),
];

struct Group {
    label: &'static str,
    setup: Box<dyn Fn() -> Result<Env, String>>,
    extra: Vec<(&'static str, StoreTest)>,
    /// A server that must be there under CI.
    server: bool,
    /// Whether the tests every store runs ([`COMMON`]) run on it too.
    common: bool,
}

fn groups() -> Vec<Group> {
    let server =
        |label: &'static str, kind: ServerKind, extra: Vec<(&'static str, StoreTest)>| Group {
            label,
            setup: Box::new(move || server_env(label, kind)),
            extra,
            server: true,
            common: true,
        };
    vec![
        Group {
            label: "sqlite",
            setup: Box::new(sqlite_env),
            extra: vec![
                ("doctor", sqlite_doctor as StoreTest),
                ("doctor_wipe_guard", doctor_wipe_guard),
                ("doctor_missing_table_fails", sqlite_missing_table),
                ("revoke_asks_on_a_terminal", revoke_asks_on_a_terminal),
                ("watch_redraws_on_a_terminal", watch_redraws_on_a_terminal),
            ],
            server: false,
            common: true,
        },
        server(
            "postgres-latest",
            ServerKind::PostgresLatest,
            vec![
                ("doctor", sql_server_doctor as StoreTest),
                ("doctor_wipe_guard", doctor_wipe_guard),
                (
                    "doctor_restart_and_promotion_guards",
                    doctor_restart_and_promotion_guards,
                ),
                ("password_not_echoed", password_not_echoed),
                ("doctor_judges_as_connect", sql_doctor_judges_as_connect),
                ("wrong_password_exit_9", wrong_password_exit_9),
            ],
        ),
        server(
            "postgres15",
            ServerKind::Postgres15,
            vec![("doctor", sql_server_doctor as StoreTest)],
        ),
        // Doctor only: its test revokes a grant of the lease user for a while.
        Group {
            label: "postgres15-tls-lease-user",
            setup: Box::new(tls_lease_user_env),
            extra: vec![("doctor", tls_lease_user_doctor as StoreTest)],
            server: true,
            common: false,
        },
        server(
            "mariadb",
            ServerKind::MariaDb,
            vec![
                ("doctor", sql_server_doctor as StoreTest),
                ("doctor_wipe_guard", doctor_wipe_guard),
                (
                    "doctor_restart_and_promotion_guards",
                    doctor_restart_and_promotion_guards,
                ),
                ("doctor_judges_as_connect", sql_doctor_judges_as_connect),
                ("wrong_password_exit_9", wrong_password_exit_9),
            ],
        ),
        server(
            "valkey8",
            ServerKind::Valkey8,
            vec![
                ("doctor", valkey_doctor as StoreTest),
                ("doctor_wipe_guard", doctor_wipe_guard),
                (
                    "doctor_restart_and_promotion_guards",
                    doctor_restart_and_promotion_guards,
                ),
                ("doctor_eviction_fails", valkey_eviction_fails),
                ("doctor_judges_as_connect", valkey_doctor_judges_as_connect),
                ("doctor_aof_everysec", valkey_aof_everysec),
                ("prepare_new_pool", valkey_prepare_new_pool),
                ("wrong_password_exit_9", wrong_password_exit_9),
            ],
        ),
        server(
            "redis8",
            ServerKind::Redis8,
            vec![("doctor", valkey_doctor as StoreTest)],
        ),
        server(
            "redis7",
            ServerKind::Redis7,
            vec![(
                "doctor_tls_lease_user",
                valkey_tls_lease_user_doctor as StoreTest,
            )],
        ),
        server(
            "etcd35",
            ServerKind::Etcd35,
            vec![
                ("doctor", etcd_doctor as StoreTest),
                ("doctor_wipe_guard", doctor_wipe_guard),
                ("doctor_tls", etcd_tls_doctor),
            ],
        ),
        Group {
            label: "k8s-fake",
            setup: Box::new(k8s_fake_env),
            extra: vec![
                ("doctor", k8s_fake_doctor as StoreTest),
                ("doctor_wipe_guard", doctor_wipe_guard),
                ("doctor_rbac_forbidden", k8s_fake_doctor_rbac_forbidden),
            ],
            server: false,
            common: true,
        },
    ]
}

fn selected(args: &Arguments, name: &str) -> bool {
    let matches = |f: &str| {
        if args.exact {
            name == f
        } else {
            name.contains(f)
        }
    };
    args.filter.as_deref().is_none_or(matches) && !args.skip.iter().any(|s| matches(s))
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

fn main() -> std::process::ExitCode {
    let args = Arguments::from_args();
    let mut trials = offline_trials();
    for group in groups() {
        let common = if group.common { COMMON } else { &[] };
        let names: Vec<String> = common
            .iter()
            .map(|(n, _, _)| *n)
            .chain(group.extra.iter().map(|(n, _)| *n))
            .map(|n| format!("{}::{n}", group.label))
            .collect();
        // Start a server only when one of its tests will run.
        if args.list || !names.iter().any(|n| selected(&args, n)) {
            trials.extend(names.into_iter().map(|n| Trial::test(n, || Ok(()))));
            continue;
        }
        let env = match (group.setup)() {
            Ok(env) => Arc::new(env),
            Err(why) => {
                let why = format!("{}: {why}", group.label);
                eprintln!("leasehold-cli tests: {why}");
                // Outside CI a missing server is ignored, never passed.
                let ignore = group.server && !in_ci();
                trials.extend(names.into_iter().map(|n| {
                    let why = why.clone();
                    Trial::test(n, move || Err(Failed::from(why))).with_ignored_flag(ignore)
                }));
                continue;
            }
        };
        if !env.inspect {
            eprintln!(
                "leasehold-cli tests: {}: the strategy cannot inspect yet; its status/watch \
                 tests are ignored and status_unsupported_exit_5 runs",
                env.label
            );
        }
        let tests = common
            .iter()
            .map(|(n, needs, f)| (*n, *needs, *f))
            .chain(group.extra.iter().map(|(n, f)| (*n, None, *f)));
        for (name, needs, f) in tests {
            let env = env.clone();
            let applies = needs.is_none_or(|needs| needs == env.inspect);
            let trial = Trial::test(format!("{}::{name}", group.label), move || {
                f(&env).map_err(Failed::from)
            });
            trials.push(trial.with_ignored_flag(!applies));
        }
    }
    let conclusion = libtest_mimic::run(&args, trials);
    conclusion.exit_code()
}
