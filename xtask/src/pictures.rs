//! `cargo xtask pictures`: the guide's pictures of the safety argument,
//! drawn from the library's own rules.
//!
//! Each picture builds a real `LeaseConfig` (so its margin, renew interval,
//! clock skew and restart span are the library's defaults for the TTL) and
//! runs the sans-IO lease `Machine` against the in-process `Memory` store on
//! a virtual clock (`sim`): the renewal times, deadlines, the moment the gate
//! closes, fences, floors and the store's expiries are what that run
//! produced. Change a rule in `leasehold-core` and the pictures change with
//! it. The output is the same bytes on every run.

mod fence;
mod floor;
mod restart;
mod sim;
mod timeline;

use std::path::{Path, PathBuf};
use std::time::Duration;

use leasehold_core::LeaseConfig;

/// What the pictures vary: the lease's TTL (everything else follows from it
/// by the library's defaults).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Params {
    pub(crate) ttl: Duration,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(10),
        }
    }
}

impl Params {
    /// The configuration every holder in the pictures uses: one slot (so a
    /// second holder must wait for the first one's), the library's defaults
    /// for everything but the TTL.
    fn config(&self) -> Result<LeaseConfig, String> {
        LeaseConfig::builder("guide")
            .pool_size(1)
            .holder("picture")
            .ttl(self.ttl)
            // A second holder keeps asking for as long as the scenes last.
            .acquire_timeout(self.ttl * 10)
            .build()
            .map_err(|e| e.to_string())
    }
}

/// Every picture: its file name and its SVG text. A picture whose labels
/// overlap or leave it is an error: a scenario change that crowds a label
/// must move it, not print it over another.
pub(crate) fn render_all(p: &Params) -> Result<Vec<(&'static str, String)>, String> {
    let pictures = [
        ("lease-timeline.svg", timeline::draw(p)?),
        ("paused-holder-fence.svg", fence::draw(p)?),
        ("floor-handover.svg", floor::draw(p)?),
        ("restart-guard.svg", restart::draw(p)?),
    ];
    pictures
        .into_iter()
        .map(|(name, svg)| {
            let overlaps = svg.overlapping_labels();
            let clipped = svg.clipped_labels();
            if svg.width() > 900.0 || !overlaps.is_empty() || !clipped.is_empty() {
                return Err(format!(
                    "{name}: labels overlap {overlaps:?} or leave the {} px picture {clipped:?}",
                    svg.width()
                ));
            }
            Ok((name, svg.finish()))
        })
        .collect()
}

/// Writes every picture into `dir` (created if missing); returns the paths.
pub(crate) fn write_all(dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut written = Vec::new();
    for (name, svg) in render_all(&Params::default())? {
        let path = dir.join(name);
        std::fs::write(&path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// A duration as the pictures label it.
fn dur(d: Duration) -> String {
    crate::svg::seconds(d.as_secs_f64())
}

/// A duration in milliseconds.
fn millis(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn rendered(ttl: u64) -> Vec<(&'static str, String)> {
        render_all(&Params {
            ttl: Duration::from_secs(ttl),
        })
        .unwrap()
    }

    /// The scenes follow the TTL; their layout holds from 6 s to 25 s
    /// (beyond, labels crowd and `render_all` refuses the picture).
    #[test]
    fn the_scenes_lay_out_for_ttls_from_6_to_25_seconds() {
        for ttl in [6, 7, 8, 9, 10, 11, 12, 15, 20, 25] {
            let drawn = render_all(&Params {
                ttl: Duration::from_secs(ttl),
            });
            assert!(drawn.is_ok(), "TTL {ttl} s: {drawn:?}");
        }
    }

    #[test]
    fn the_pictures_are_the_same_bytes_on_every_run() {
        assert_eq!(rendered(10), rendered(10));
    }

    /// Every opened tag is closed, in order (self-closing ones aside).
    pub(crate) fn balanced(svg: &str) -> Result<(), String> {
        let mut stack: Vec<&str> = Vec::new();
        let mut rest = svg;
        while let Some(open) = rest.find('<') {
            let close = rest[open..].find('>').ok_or("a tag is not closed")? + open;
            let tag = &rest[open + 1..close];
            rest = &rest[close + 1..];
            if tag.ends_with('/') {
                continue;
            }
            if let Some(name) = tag.strip_prefix('/') {
                let top = stack.pop().ok_or(format!("</{name}> closes nothing"))?;
                if top != name {
                    return Err(format!("</{name}> closes <{top}>"));
                }
            } else {
                let name = tag.split_whitespace().next().unwrap_or_default();
                stack.push(name);
            }
        }
        if stack.is_empty() {
            Ok(())
        } else {
            Err(format!("not closed: {stack:?}"))
        }
    }

    #[test]
    fn every_picture_is_well_formed_and_names_its_key_ideas() {
        let keys: &[(&str, &[&str])] = &[
            (
                "lease-timeline.svg",
                &[
                    "sent_at",
                    "TTL",
                    "margin",
                    "deadline",
                    "renew",
                    "gate closes",
                    "store",
                ],
            ),
            (
                "paused-holder-fence.svg",
                &[
                    "paused",
                    "fence 1",
                    "fence 2",
                    "refused",
                    "gate closed",
                    "expires",
                ],
            ),
            (
                "floor-handover.svg",
                &[
                    "floor",
                    "behind",
                    "waits",
                    "A's clock",
                    "B's clock",
                    "ceiling",
                ],
            ),
            (
                "restart-guard.svg",
                &[
                    "restart guard",
                    "restart span",
                    "deadline",
                    "forgot",
                    "StoreRestarted",
                ],
            ),
        ];
        let all = rendered(10);
        assert_eq!(all.len(), keys.len());
        for ((name, svg), (key_name, words)) in all.iter().zip(keys) {
            assert_eq!(name, key_name);
            assert!(svg.starts_with("<svg "), "{name}");
            balanced(svg).unwrap_or_else(|e| panic!("{name}: {e}"));
            for word in *words {
                assert!(svg.contains(word), "{name} does not mention {word:?}");
            }
        }
    }

    #[test]
    fn no_label_overlaps_another_or_leaves_the_picture() {
        let p = Params::default();
        let pictures = [
            ("timeline", timeline::draw(&p).unwrap()),
            ("fence", fence::draw(&p).unwrap()),
            ("floor", floor::draw(&p).unwrap()),
            ("restart", restart::draw(&p).unwrap()),
        ];
        for (name, svg) in pictures {
            assert!(svg.width() <= 900.0, "{name} is wider than 900 px");
            assert_eq!(
                svg.overlapping_labels(),
                Vec::<(String, String)>::new(),
                "{name}"
            );
            assert_eq!(svg.clipped_labels(), Vec::<String>::new(), "{name}");
        }
    }

    /// The pictures are drawn from the rules: a longer TTL moves the
    /// deadline, and the label says where.
    #[test]
    fn a_longer_ttl_moves_the_deadline_in_the_picture() {
        let short = timeline::draw(&Params {
            ttl: Duration::from_secs(10),
        })
        .unwrap()
        .finish();
        let long = timeline::draw(&Params {
            ttl: Duration::from_secs(12),
        })
        .unwrap()
        .finish();
        // TTL 10 s: margin TTL/10 = 1 s, the first deadline 0 + 10 − 1 = 9 s;
        // TTL 12 s: margin 1.2 s, deadline 10.8 s.
        assert!(short.contains("deadline 9 s"), "{short}");
        assert!(long.contains("deadline 10.8 s"), "{long}");
        assert!(!long.contains("deadline 9 s"));
    }
}
