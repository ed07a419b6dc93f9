//! The workspace's test binaries, built once by `cargo test --no-run` and
//! then run by xtask itself, in lanes ([`crate::lanes`]), the longest first:
//! most of a test binary's time is spent waiting on its servers (TTLs,
//! guards, restarts), not on the CPU, so three of them side by side take
//! little more than the longest.
//!
//! Each binary runs as `cargo test` would run it: in its package's
//! directory, with its package's `CARGO_MANIFEST_DIR`, `CARGO_MANIFEST_PATH`,
//! `CARGO_PKG_NAME` and `CARGO_PKG_VERSION` (xtask's own, set by the
//! `cargo run` that started it, are taken away), and the arguments given
//! after `--`. The servers they start are private to each binary (a
//! directory of its own, free ports drawn anew when another process took
//! one: `leasehold_conformance::servers`), so binaries side by side share
//! none.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::json::Json;
use crate::lanes::Job;
use crate::{Result, cargo, without_xtask_package_env};

/// How many test binaries run at once.
pub(crate) const LANES: usize = 3;

/// The binaries that take longest, longest first (package and target name,
/// with the seconds each took in one run of the lanes on a 2-core machine):
/// they start first, so that no long one starts last beside idle lanes. The
/// rest follow in cargo's order. The doc tests are `doctests`.
const LONGEST_FIRST: &[&str] = &[
    "leasehold-sql/restarts",                  // 406
    "leasehold-valkey/restarts",               // 290
    "leasehold-sql/conformance",               // 158
    "leasehold-valkey/conformance",            // 154
    "leasehold-etcd/conformance",              // 110
    "leasehold-valkey/failover",               // 105
    "leasehold-sql/failover",                  // 90
    "leasehold-conformance/sentinel_failover", // 63
    "leasehold-k8s/conformance",               // 51
    "leasehold/start_before_store",            // 43
    "leasehold-valkey/wipes",                  // 43
    "leasehold/first_programs",                // 37
    "leasehold/secrets",                       // 33
    "leasehold-sql/wipe",                      // 25
    "leasehold-cli/cli",                       // 25
    "leasehold/examples_postgres",             // 25
    "leasehold-nonce/uniqueness",              // 18
    "leasehold-sql/replication",               // 18
    "doctests",                                // 17
];

/// One executable cargo built, as its `compiler-artifact` line says.
pub(crate) struct Artifact {
    /// The package's name.
    pub(crate) package: String,
    /// The package's version.
    version: String,
    /// The target's name (`conformance`, `leasehold_sql`, `campaign`).
    pub(crate) target: String,
    /// The target's kinds (`lib`, `bin`, `test`).
    kinds: Vec<String>,
    /// Built as a test (`profile.test`): what `cargo test` runs.
    test: bool,
    pub(crate) executable: PathBuf,
    manifest_path: PathBuf,
}

impl Artifact {
    /// `package/target`.
    pub(crate) fn name(&self) -> String {
        format!("{}/{}", self.package, self.target)
    }

    /// The package's directory.
    fn manifest_dir(&self) -> &Path {
        self.manifest_path.parent().unwrap_or(&self.manifest_path)
    }

    /// An executable of `cargo run`, not a test: `bin` `target` of `package`.
    pub(crate) fn is_bin(&self, package: &str, target: &str) -> bool {
        !self.test
            && self.package == package
            && self.target == target
            && self.kinds.iter().any(|k| k == "bin")
    }
}

/// The executable of one `compiler-artifact` line of cargo's JSON messages.
fn artifact(line: &str) -> Option<Artifact> {
    let v = Json::parse(line)?;
    if v.get("reason")?.as_str()? != "compiler-artifact" {
        return None;
    }
    let (package, version) = package_of(v.get("package_id")?.as_str()?)?;
    let target = v.get("target")?;
    Some(Artifact {
        package,
        version,
        target: target.get("name")?.as_str()?.to_owned(),
        kinds: target
            .get("kind")?
            .as_array()
            .iter()
            .filter_map(Json::as_str)
            .map(str::to_owned)
            .collect(),
        test: v.get("profile")?.get("test")?.as_bool()?,
        executable: v.get("executable")?.as_str()?.into(),
        manifest_path: v.get("manifest_path")?.as_str()?.into(),
    })
}

/// The name and version in a package ID: `path+file:///w/campaign#leasehold-campaign@0.3.0`,
/// or `path+file:///w/xtask#0.3.0` when the name is the directory's.
fn package_of(id: &str) -> Option<(String, String)> {
    let (source, rest) = id.rsplit_once('#')?;
    Some(match rest.split_once('@') {
        Some((name, version)) => (name.to_owned(), version.to_owned()),
        None => (source.rsplit('/').next()?.to_owned(), rest.to_owned()),
    })
}

/// Every executable `cargo` (`cargo build` or `cargo test --no-run`, given
/// as `cmd`) built, fresh or not; fails as the build does. Its output is the
/// build's usual one; the JSON lines are read, not shown.
pub(crate) fn built(mut cmd: Command) -> Result<Vec<Artifact>> {
    cmd.arg("--message-format=json-render-diagnostics")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    if !out.status.success() {
        return Err(format!("the build failed ({})", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(artifact)
        .collect())
}

/// `cargo test --no-run` of the workspace (of the behaviour suites only for
/// `matrix`): every executable it built.
pub(crate) fn build(matrix: bool) -> Result<Vec<Artifact>> {
    let mut c = cargo();
    c.args(["test", "--workspace", "--no-run"]);
    if matrix {
        c.args(["--test", "conformance", "--test", "memory"]);
    }
    built(c)
}

/// The jobs that run every test binary of `built` with `args`, reports
/// into `reports`, logs into `logs`; and the doc tests with `doctests`;
/// the longest first.
pub(crate) fn jobs(
    built: &[Artifact],
    args: &[String],
    reports: &Path,
    logs: &Path,
    doctests: bool,
) -> Vec<Job> {
    let mut jobs: Vec<Job> = built
        .iter()
        .filter(|a| a.test)
        .map(|a| {
            let dir = a.manifest_dir();
            let mut cmd = Command::new(&a.executable);
            cmd.args(args)
                .current_dir(dir)
                .env("LEASEHOLD_REPORT_DIR", reports);
            as_cargo_runs(&mut cmd, a);
            Job {
                name: a.name(),
                cmd,
                log: logs.join(format!("{}-{}.log", a.package, a.target)),
            }
        })
        .collect();
    if doctests {
        let mut cmd = cargo();
        cmd.env("LEASEHOLD_REPORT_DIR", reports).args([
            "test",
            "--workspace",
            "--doc",
            "--no-fail-fast",
        ]);
        if !args.is_empty() {
            cmd.arg("--").args(args);
        }
        jobs.push(Job {
            name: "doctests".into(),
            cmd,
            log: logs.join("doctests.log"),
        });
    }
    // A stable sort: the rest keep cargo's order.
    jobs.sort_by_key(|j| {
        LONGEST_FIRST
            .iter()
            .position(|n| *n == j.name)
            .unwrap_or(LONGEST_FIRST.len())
    });
    jobs
}

/// The environment `cargo test` gives a test binary it runs: its package's
/// variables, not xtask's. The variables cargo sets only at compile time
/// (`OUT_DIR`, `CARGO_BIN_EXE_*`) are in the binary already.
fn as_cargo_runs(cmd: &mut Command, a: &Artifact) {
    without_xtask_package_env(cmd);
    cmd.env("CARGO_MANIFEST_DIR", a.manifest_dir())
        .env("CARGO_MANIFEST_PATH", &a.manifest_path)
        .env("CARGO_PKG_NAME", &a.package)
        .env("CARGO_PKG_VERSION", &a.version);
}

#[cfg(test)]
mod tests {
    use super::{artifact, package_of};

    #[test]
    fn package_ids_give_name_and_version() {
        assert_eq!(
            package_of("path+file:///w/campaign#leasehold-campaign@0.3.0"),
            Some(("leasehold-campaign".into(), "0.3.0".into()))
        );
        assert_eq!(
            package_of("path+file:///w/xtask#0.3.0"),
            Some(("xtask".into(), "0.3.0".into()))
        );
    }

    #[test]
    fn test_builds_are_told_from_the_binaries_beside_them() {
        let test = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/lease-sql#leasehold-sql@0.3.0","manifest_path":"/w/lease-sql/Cargo.toml","target":{"kind":["test"],"crate_types":["bin"],"name":"conformance","test":true},"profile":{"test":true},"features":[],"filenames":[],"executable":"/w/target/debug/deps/conformance-1","fresh":true}"#;
        let a = artifact(test).expect("an artifact");
        assert!(a.test);
        assert_eq!(a.name(), "leasehold-sql/conformance");
        assert_eq!(a.manifest_dir(), std::path::Path::new("/w/lease-sql"));
        let bin = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/campaign#leasehold-campaign@0.3.0","manifest_path":"/w/campaign/Cargo.toml","target":{"kind":["bin"],"crate_types":["bin"],"name":"campaign","test":true},"profile":{"test":false},"features":[],"filenames":[],"executable":"/w/target/debug/campaign","fresh":true}"#;
        let b = artifact(bin).expect("an artifact");
        assert!(b.is_bin("leasehold-campaign", "campaign"));
        assert!(!a.is_bin("leasehold-sql", "conformance"));
        // A library has no executable: no artifact to run.
        let lib = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/core#leasehold-core@0.3.0","manifest_path":"/w/core/Cargo.toml","target":{"kind":["lib"],"name":"leasehold_core","test":true},"profile":{"test":false},"features":[],"filenames":["/w/target/debug/deps/libleasehold_core.rlib"],"executable":null,"fresh":true}"#;
        assert!(artifact(lib).is_none());
        assert!(artifact(r#"{"reason":"build-finished","success":true}"#).is_none());
    }
}
