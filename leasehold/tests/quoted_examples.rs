//! Every example a document quotes exists and is run by a test. The guide
//! includes example files (`{{#include ../../CRATE/examples/NAME.rs:ANCHOR}}`),
//! and the READMEs and guide pages name them (`CRATE/examples/NAME.rs`) and
//! run them (`cargo run -p PACKAGE --example NAME`). A quoted file that is
//! gone, an anchor it no longer has, a `cargo run` line naming an example its
//! package does not have, or an example no test of its crate builds and runs
//! (by `#[path = "../examples/NAME.rs"]` or by starting its binary) fails
//! here, so the code a reader copies cannot rot unseen.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Examples quoted by a document that no test runs, each with the reason.
/// They are still compiled by `cargo build --examples` (part of `cargo xtask
/// test`'s clippy run over every target).
const COMPILED_ONLY: &[(&str, &str)] = &[
    (
        "leasehold/examples/first_k8s.rs",
        "needs a Kubernetes API server; the fake one is not a dependency of this crate",
    ),
    (
        "leasehold/examples/credentials.rs",
        "connects to a PostgreSQL with a password file and a token callback; the rotation \
         test (`leasehold/tests/rotation.rs`) runs the same calls",
    ),
    (
        "lease-k8s/examples/k8s_leader.rs",
        "needs a Kubernetes API server; not yet run against the fake one of lease-k8s's tests",
    ),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The documents: every README of the workspace and every guide page.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut docs = vec![root.join("README.md")];
    for dir in std::fs::read_dir(root).expect("workspace root").flatten() {
        let readme = dir.path().join("README.md");
        if readme.is_file() {
            docs.push(readme);
        }
    }
    for page in std::fs::read_dir(root.join("guide/src"))
        .expect("guide/src")
        .flatten()
    {
        if page.path().extension().is_some_and(|e| e == "md") {
            docs.push(page.path());
        }
    }
    docs.sort();
    docs
}

/// A package name to its directory, from each member's Cargo.toml.
fn package_dir(root: &Path, package: &str) -> Option<String> {
    for dir in std::fs::read_dir(root).ok()?.flatten() {
        let Ok(manifest) = std::fs::read_to_string(dir.path().join("Cargo.toml")) else {
            continue;
        };
        if manifest
            .lines()
            .any(|l| l.trim() == format!("name = \"{package}\""))
        {
            return Some(dir.file_name().to_string_lossy().into_owned());
        }
    }
    None
}

/// What one document quotes: `(example path relative to the root, anchor)`.
fn quoted(root: &Path, doc: &Path, text: &str) -> Vec<(String, Option<String>)> {
    let mut found = Vec::new();
    // {{#include PATH[:ANCHOR]}}, relative to the page.
    for part in text.split("{{#include ").skip(1) {
        let Some(end) = part.find("}}") else { continue };
        let spec = part[..end].trim();
        let (path, anchor) = match spec.split_once(".rs:") {
            Some((p, a)) => (format!("{p}.rs"), Some(a.to_owned())),
            None => (spec.to_owned(), None),
        };
        let full = doc.parent().expect("doc dir").join(&path);
        let rel = normalize(&full)
            .strip_prefix(root)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or(path);
        found.push((rel, anchor));
    }
    // CRATE/examples/NAME.rs named in the text.
    for (i, _) in text.match_indices("/examples/") {
        let start = text[..i]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .map_or(0, |s| s + 1);
        let rest = &text[i + "/examples/".len()..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(rest.len());
        let name = &rest[..end];
        let krate = &text[start..i];
        if name.ends_with(".rs") && !krate.is_empty() && !text[..start].ends_with("../") {
            found.push((format!("{krate}/examples/{name}"), None));
        }
    }
    // cargo run [-p PACKAGE] [--features F] --example NAME
    for line in text.lines().filter(|l| l.contains("--example ")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let after = |flag: &str| {
            words
                .iter()
                .position(|w| *w == flag)
                .and_then(|i| words.get(i + 1))
                .copied()
        };
        let Some(name) = after("--example") else {
            continue;
        };
        let name = name.trim_end_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
        let package = after("-p").or(after("--package")).unwrap_or("leasehold");
        let dir = package_dir(root, package)
            .unwrap_or_else(|| panic!("{}: no package {package}: {line}", doc.display()));
        found.push((format!("{dir}/examples/{name}.rs"), None));
    }
    found
}

fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Whether a test of the example's crate builds and runs it.
fn run_by_a_test(root: &Path, example: &str) -> bool {
    let (krate, file) = example.split_once("/examples/").expect("an example path");
    let name = file.trim_end_matches(".rs");
    let Ok(tests) = std::fs::read_dir(root.join(krate).join("tests")) else {
        return false;
    };
    let mut sources: Vec<PathBuf> = Vec::new();
    for entry in tests.flatten() {
        let p = entry.path();
        if p.is_dir() {
            sources.extend(
                std::fs::read_dir(&p)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path()),
            );
        } else {
            sources.push(p);
        }
    }
    sources.iter().any(|p| {
        std::fs::read_to_string(p).is_ok_and(|src| {
            src.contains(&format!("#[path = \"../examples/{file}\"]"))
                || src.contains(&format!("example(\"{name}\")"))
                || src.contains(&format!("(\"{name}\","))
        })
    })
}

#[test]
fn every_quoted_example_exists_and_is_run_by_a_test() {
    let root = root();
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for doc in documents(&root) {
        let text = std::fs::read_to_string(&doc).expect("read a document");
        let shown = doc
            .strip_prefix(&root)
            .unwrap_or(&doc)
            .display()
            .to_string();
        for (example, anchor) in quoted(&root, &doc, &text) {
            let path = root.join(&example);
            let Ok(src) = std::fs::read_to_string(&path) else {
                problems.push(format!("{shown} quotes {example}, which does not exist"));
                continue;
            };
            if let Some(anchor) = anchor.filter(|a| {
                !src.contains(&format!("ANCHOR: {a}")) || !src.contains(&format!("ANCHOR_END: {a}"))
            }) {
                problems.push(format!(
                    "{shown} includes anchor {anchor} of {example}, which has no such anchor"
                ));
            }
            seen.insert(example);
        }
    }
    for example in &seen {
        let exempt = COMPILED_ONLY.iter().any(|(e, _)| e == example);
        if !exempt && !run_by_a_test(&root, example) {
            problems.push(format!(
                "{example} is quoted by a document but no test of its crate runs it: add one (a \
                 `#[path = \"../examples/…\"]` module or a test that starts its binary)"
            ));
        }
    }
    assert!(
        seen.iter().any(|e| e.ends_with("first_sqlite.rs")),
        "the scan found none of the guide's first programs: {seen:?}"
    );
    assert!(
        problems.is_empty(),
        "quoted examples:\n{}",
        problems.join("\n")
    );
}
