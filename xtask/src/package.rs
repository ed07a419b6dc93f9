//! `cargo xtask package`: the crates as crates.io and docs.rs will see them.
//!
//! One step after another, each announced with a `==> step` line and timed,
//! stopping at the first that fails:
//!
//! 1. **rust-version**: the rustc running this equals the workspace's declared
//!    `rust-version` (major.minor). The declared version is the one CI builds
//!    with; a toolchain of another version means the declaration is untested.
//! 2. **licenses**: every published crate holds the root's `LICENSE-MIT` and
//!    `LICENSE-APACHE`, byte for byte (its package must carry the texts its
//!    `license` names).
//! 3. **cargo package**: every published crate packaged in dependency order and
//!    each `.crate` built on its own against the others through a local
//!    registry, as crates.io users will build it. The build shares the
//!    workspace's target directory, so dependencies built before are reused.
//! 4. **cargo publish --dry-run**: crates.io's own checks of each package
//!    (`publish = false` crates are left out). It passes `--no-verify`: the
//!    build it would repeat is exactly the previous step's, on the same files.
//! 5. **minimal versions**: in a copy of the workspace (the real `Cargo.lock` is
//!    never touched), `cargo +nightly update -Zdirect-minimal-versions` picks
//!    the lowest version every `Cargo.toml` allows, and `cargo check
//!    --workspace --all-features` must pass with it (target dir
//!    `target/minimal-versions`). A failure means a declared minimum is too
//!    low: raise it in the `Cargo.toml`.
//! 6. **docs**: `cargo +nightly doc --workspace --all-features --no-deps` with
//!    `RUSTDOCFLAGS="--cfg docsrs -D warnings"`, as docs.rs builds (target dir
//!    `target/docsrs`).
//!
//! The nightly toolchain comes from rustup, which installed the toolchain
//! running this; a machine without one gets it installed
//! (`rustup toolchain install nightly --profile minimal`).
//!
//! `--only crates` runs steps 1 to 4, `--only nightly` steps 5 and 6. The
//! test command runs the two halves apart: the nightly steps build in
//! target directories of their own, so they run beside the test binaries;
//! `cargo package` builds in the workspace's, whose lock the doc tests
//! need, so it runs beside the campaigns, which build nothing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{Result, cargo, root};

/// The files every published crate carries, copies of the root's.
const LICENSES: &[&str] = &["LICENSE-MIT", "LICENSE-APACHE"];

/// A workspace member, as its manifest declares it.
struct Member {
    dir: PathBuf,
    name: String,
    published: bool,
}

/// Which steps a run takes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    /// All six.
    All,
    /// rust-version, licenses, `cargo package`, `cargo publish --dry-run`.
    Crates,
    /// Minimal versions and docs, on nightly.
    Nightly,
}

/// `cargo xtask package [--only crates|nightly]`.
pub(crate) fn run(args: &[String]) -> Result {
    let part = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [] => Part::All,
        ["--only", "crates"] => Part::Crates,
        ["--only", "nightly"] => Part::Nightly,
        _ => {
            return Err(format!(
                "`cargo xtask package` takes no arguments, or `--only crates` (rust-version, \
                 licenses, cargo package, publish --dry-run) or `--only nightly` (minimal \
                 versions, docs); got {args:?}"
            ));
        }
    };
    let mut times: Vec<(&str, Duration, bool)> = Vec::new();
    let result = steps(&mut times, part);
    eprintln!("\n==> package summary");
    for (name, took, ok) in &times {
        eprintln!(
            "    {:<24} {:>6}  {:.1?}",
            name,
            if *ok { "ok" } else { "FAILED" },
            took
        );
    }
    result
}

fn steps(times: &mut Vec<(&'static str, Duration, bool)>, part: Part) -> Result {
    if part != Part::Nightly {
        let members = members()?;
        let unpublished: Vec<&str> = members
            .iter()
            .filter(|m| !m.published)
            .map(|m| m.name.as_str())
            .collect();
        timed(times, "rust-version", rust_version)?;
        timed(times, "licenses", || licenses(&members))?;
        let published: Vec<&str> = members
            .iter()
            .filter(|m| m.published)
            .map(|m| m.name.as_str())
            .collect();
        timed(times, "cargo package", || package(&published, &unpublished))?;
        timed(times, "cargo publish --dry-run", || {
            publish_dry_run(&unpublished)
        })?;
    }
    if part == Part::Crates {
        return Ok(());
    }
    let nightly = nightly()?;
    timed(times, "minimal versions", || minimal_versions(&nightly))?;
    timed(times, "docs (docs.rs)", || docs(&nightly))
}

/// Runs `f` as the step `name`: a `==> name` line, then its outcome and time.
fn timed(
    times: &mut Vec<(&'static str, Duration, bool)>,
    name: &'static str,
    f: impl FnOnce() -> Result,
) -> Result {
    eprintln!("\n==> {name}");
    let start = Instant::now();
    let result = f();
    let took = start.elapsed();
    eprintln!(
        "<== {name}: {} in {took:.1?}",
        if result.is_ok() { "ok" } else { "FAILED" }
    );
    times.push((name, took, result.is_ok()));
    result.map_err(|e| format!("{name}: {e}"))
}

/// Runs `cmd` and fails unless it exits with success.
fn status(what: &str, mut cmd: Command) -> Result {
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({status})"))
    }
}

/// The workspace's build directory (`CARGO_TARGET_DIR`, or `target/`).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// Under CI a `Cargo.lock` that does not match the manifests fails the run
/// instead of being rewritten.
fn locked(cmd: &mut Command) {
    if std::env::var_os("CI").is_some_and(|v| v == "true") {
        cmd.arg("--locked");
    }
}

/// The value of `key = "…"` on a line of `text` (the first such line).
fn string_value(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let rest = line.trim().strip_prefix(key)?.trim_start();
        let value = rest.strip_prefix('=')?.trim();
        Some(value.strip_prefix('"')?.split('"').next()?.to_owned())
    })
}

/// The members listed in the root `Cargo.toml`, with their names and whether
/// they are published (no `publish = false`).
fn members() -> Result<Vec<Member>> {
    let manifest = read(&root().join("Cargo.toml"))?;
    let list = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("members"))
        .and_then(|l| l.trim_start().strip_prefix('='))
        .ok_or("the root Cargo.toml has no one-line `members = [...]`")?;
    list.split('"')
        .skip(1)
        .step_by(2)
        .map(|dir| {
            let dir = root().join(dir);
            let text = read(&dir.join("Cargo.toml"))?;
            let name = string_value(&text, "name")
                .ok_or_else(|| format!("{}/Cargo.toml has no name", dir.display()))?;
            let published = !text.lines().any(|l| l.trim() == "publish = false");
            Ok(Member {
                dir,
                name,
                published,
            })
        })
        .collect()
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The major.minor of `version` ("1.95.0" → "1.95").
fn major_minor(version: &str) -> &str {
    match version.match_indices('.').nth(1) {
        Some((i, _)) => &version[..i],
        None => version,
    }
}

/// The declared `rust-version` equals the running toolchain's rustc.
fn rust_version() -> Result {
    let declared = string_value(&read(&root().join("Cargo.toml"))?, "rust-version")
        .ok_or("the root Cargo.toml declares no rust-version")?;
    // The rustc of the toolchain whose cargo runs this.
    let cargo = PathBuf::from(
        std::env::var_os("CARGO").ok_or("CARGO is not set: run `cargo xtask package`")?,
    );
    let rustc = cargo.with_file_name("rustc");
    let out = Command::new(&rustc)
        .arg("-vV")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", rustc.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let release = text
        .lines()
        .find_map(|l| l.strip_prefix("release: "))
        .ok_or_else(|| format!("no release line in `rustc -vV`: {text}"))?;
    let running = major_minor(release);
    if running == major_minor(&declared) {
        eprintln!("rust-version {declared}, rustc {release}");
        return Ok(());
    }
    Err(format!(
        "rustc {release} runs this, but the workspace declares rust-version = \"{declared}\" \
         (root Cargo.toml, [workspace.package]), which is the version CI builds with. Run with \
         that toolchain (`rustup toolchain install {declared}`, then `cargo +{declared} xtask \
         package`), or, when CI moves to {running}, set rust-version = \"{running}\""
    ))
}

/// Every published crate holds the root's license files, byte for byte.
fn licenses(members: &[Member]) -> Result {
    let mut wrong = Vec::new();
    for file in LICENSES {
        let text = std::fs::read(root().join(file)).map_err(|e| format!("{file}: {e}"))?;
        for m in members.iter().filter(|m| m.published) {
            if std::fs::read(m.dir.join(file)).ok().as_ref() != Some(&text) {
                wrong.push(format!("{} ({})", file, m.name));
            }
        }
    }
    if wrong.is_empty() {
        eprintln!(
            "{} published crates carry {}",
            members.iter().filter(|m| m.published).count(),
            LICENSES.join(" and ")
        );
        return Ok(());
    }
    Err(format!(
        "missing or different from the root's: {}; copy the root's files into each crate's \
         directory",
        wrong.join(", ")
    ))
}

/// `--workspace` with every unpublished member excluded.
fn published_workspace(cmd: &mut Command, unpublished: &[&str]) {
    cmd.arg("--workspace");
    for name in unpublished {
        cmd.args(["--exclude", name]);
    }
}

/// `cargo package` of every published crate, each verified by a build of its
/// `.crate` against the others' through a local registry. `--allow-dirty`:
/// what is checked is the files on disk, committed or not.
fn package(published: &[&str], unpublished: &[&str]) -> Result {
    // cargo takes a crate it extracted from its local registry before, of
    // the same version, as unchanged: a second run after a change to a
    // published crate's API would verify the others against the old copy.
    // Each run verifies what is on disk now.
    let verify = target_dir().join("package");
    let mut sources = extracted_copies(published)?;
    forget_verified_builds(&verify, &sources)?;
    for dir in sources.drain(..) {
        std::fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    if verify.exists() {
        std::fs::remove_dir_all(&verify).map_err(|e| format!("{}: {e}", verify.display()))?;
    }
    let mut cmd = cargo();
    cmd.args(["package", "--allow-dirty"]);
    published_workspace(&mut cmd, unpublished);
    locked(&mut cmd);
    status("cargo package", cmd)
}

/// The copies of the published crates that an earlier verification left
/// extracted in cargo's registry sources (`$CARGO_HOME/registry/src/*/NAME-VERSION`):
/// cargo extracts the `.crate` of the local registry there once per version
/// and never again, so a second run would build the others against the
/// first run's copy of a crate whose source has changed since.
fn extracted_copies(published: &[&str]) -> Result<Vec<PathBuf>> {
    let home = cargo_home()?;
    let Ok(registries) = std::fs::read_dir(home.join("registry").join("src")) else {
        return Ok(Vec::new());
    };
    let mut found = Vec::new();
    for registry in registries.flatten().map(|e| e.path()) {
        let Ok(crates) = std::fs::read_dir(&registry) else {
            continue;
        };
        for dir in crates.flatten().map(|e| e.path()) {
            let Some(file) = dir.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let ours = published.iter().any(|name| {
                file.strip_prefix(name)
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|version| version.starts_with(|c: char| c.is_ascii_digit()))
            });
            if ours {
                found.push(dir);
            }
        }
    }
    Ok(found)
}

/// cargo also takes what it compiled from that registry before as unchanged
/// (a registry crate of one version never changes), in the workspace's
/// `target/debug`: a second run would verify a crate against the first
/// run's build of a crate it depends on. The units built from `verify` or
/// from an extracted copy in `sources` by an earlier run (their dep-info
/// names files under either) lose their fingerprints, so they are compiled
/// again from what is on disk now.
fn forget_verified_builds(verify: &Path, sources: &[PathBuf]) -> Result {
    let debug = target_dir().join("debug");
    let Ok(entries) = std::fs::read_dir(debug.join("deps")) else {
        return Ok(());
    };
    let markers: Vec<String> = std::iter::once(verify)
        .chain(sources.iter().map(PathBuf::as_path))
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    for path in entries.flatten().map(|e| e.path()) {
        if path.extension().is_none_or(|e| e != "d") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        if !markers.iter().any(|m| text.contains(m.as_str())) {
            continue;
        }
        let Some((name, hash)) = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.rsplit_once('-'))
        else {
            continue;
        };
        let fingerprint = debug
            .join(".fingerprint")
            .join(format!("{}-{hash}", name.replace('_', "-")));
        match std::fs::remove_dir_all(&fingerprint) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("{}: {e}", fingerprint.display())),
        }
    }
    Ok(())
}

/// crates.io's checks of every package, without uploading and without the
/// build the previous step did.
fn publish_dry_run(unpublished: &[&str]) -> Result {
    let mut cmd = cargo();
    cmd.args(["publish", "--dry-run", "--no-verify", "--allow-dirty"]);
    published_workspace(&mut cmd, unpublished);
    locked(&mut cmd);
    status("cargo publish --dry-run", cmd)
}

/// cargo's home: `CARGO_HOME`, or `~/.cargo`.
fn cargo_home() -> Result<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .ok_or_else(|| "neither CARGO_HOME nor HOME is set".to_owned())
}

/// `rustup`, which installed the toolchain running this.
fn rustup() -> Result<PathBuf> {
    let home = cargo_home()?;
    let rustup = home.join("bin").join("rustup");
    if rustup.is_file() {
        Ok(rustup)
    } else {
        Err(format!(
            "{} is missing: the minimal-versions and docs steps need a nightly toolchain \
             through rustup (https://rustup.rs)",
            rustup.display()
        ))
    }
}

/// A `cargo +nightly` command: the rustup path, installing the nightly
/// toolchain first if this machine has none.
fn nightly() -> Result<PathBuf> {
    let rustup = rustup()?;
    let out = Command::new(&rustup)
        .args(["toolchain", "list"])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", rustup.display()))?;
    let listed = String::from_utf8_lossy(&out.stdout);
    if !listed.lines().any(|l| l.starts_with("nightly")) {
        eprintln!("==> no nightly toolchain: installing it (rustup, minimal profile)");
        let mut install = Command::new(&rustup);
        install.args(["toolchain", "install", "nightly", "--profile", "minimal"]);
        status("rustup toolchain install nightly", install)?;
    }
    Ok(rustup)
}

fn cargo_nightly(rustup: &Path, dir: &Path) -> Command {
    let mut cmd = Command::new(rustup);
    cmd.args(["run", "nightly", "cargo"]).current_dir(dir);
    crate::without_xtask_package_env(&mut cmd);
    cmd
}

/// `cargo check --workspace --all-features` with every direct dependency at
/// the lowest version its `Cargo.toml` allows, in a copy of the workspace.
fn minimal_versions(rustup: &Path) -> Result {
    let base = target_dir().join("minimal-versions");
    let copy = base.join("workspace");
    if copy.exists() {
        std::fs::remove_dir_all(&copy).map_err(|e| format!("{}: {e}", copy.display()))?;
    }
    copy_tree(&root(), &copy, true)?;
    let mut update = cargo_nightly(rustup, &copy);
    update.args(["update", "-Zdirect-minimal-versions"]);
    status("cargo +nightly update -Zdirect-minimal-versions", update)?;
    let mut check = cargo();
    check
        .current_dir(&copy)
        .env("CARGO_TARGET_DIR", &base)
        .args(["check", "--workspace", "--all-features"]);
    status("cargo check --workspace --all-features", check).map_err(|e| {
        format!(
            "{e}: a dependency's declared minimum version lacks what the code uses; raise \
             it in the Cargo.toml that names it (the copy is {})",
            copy.display()
        )
    })
}

/// Copies `from` into `to`, leaving out the build output and `.git` at the
/// top (`top`).
fn copy_tree(from: &Path, to: &Path, top: bool) -> Result {
    std::fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    let entries = std::fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", from.display()))?;
        let name = entry.file_name();
        if top && (name == "target" || name == ".git") {
            continue;
        }
        let (src, dst) = (entry.path(), to.join(&name));
        let kind = entry
            .file_type()
            .map_err(|e| format!("{}: {e}", src.display()))?;
        if kind.is_dir() {
            copy_tree(&src, &dst, false)?;
        } else {
            std::fs::copy(&src, &dst).map_err(|e| format!("{}: {e}", src.display()))?;
        }
    }
    Ok(())
}

/// The docs as docs.rs builds them, warnings denied.
fn docs(rustup: &Path) -> Result {
    let mut doc = cargo_nightly(rustup, &root());
    doc.env("RUSTDOCFLAGS", "--cfg docsrs -D warnings")
        .env("CARGO_TARGET_DIR", target_dir().join("docsrs"))
        .args([
            "doc",
            "--workspace",
            "--all-features",
            "--no-deps",
            "--keep-going",
        ]);
    locked(&mut doc);
    status("cargo +nightly doc", doc)
}

#[cfg(test)]
mod tests {
    use super::{major_minor, string_value};

    #[test]
    fn versions_compare_by_major_and_minor() {
        assert_eq!(major_minor("1.95.0"), "1.95");
        assert_eq!(major_minor("1.95"), "1.95");
        assert_eq!(major_minor("1.97.0-nightly"), "1.97");
    }

    #[test]
    fn manifest_values_are_read_from_their_line() {
        let toml = "[package]\nname = \"leasehold-core\"\nrust-version = \"1.95\" # CI\n";
        assert_eq!(
            string_value(toml, "name").as_deref(),
            Some("leasehold-core")
        );
        assert_eq!(string_value(toml, "rust-version").as_deref(), Some("1.95"));
        assert_eq!(string_value(toml, "version"), None);
    }
}
