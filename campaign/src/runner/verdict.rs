//! The fifth phase: every recorded ID, holding period and fenced write
//! checked, and the run judged by what its mode requires.

use super::collect::{Collected, refused_calls};
use super::start::Campaign;
use crate::check::{Report, check as check_logs};

/// What the checks found, and the run's verdict.
pub struct Checked {
    pub(crate) report: Report,
    /// Refused generation calls reported by the workers that stopped
    /// gracefully.
    pub(crate) refused: u64,
    pub(crate) verdict: Verdict,
}

/// How a run is judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Clean, or (unsafe, control, planted bug) it found what it must.
    Passed,
    /// UNSAFE by design: what it found is reported, not judged.
    NotJudged,
    /// Something found in a run that must be clean, or nothing found in a
    /// run that must find something.
    Failed,
}

/// Checks what the run `c` left, and judges it: a usual run must be clean;
/// unsafe and control runs must find duplicates, a planted bug must be
/// found, and a run unsafe by design shows what it risks, not judged.
pub fn check(c: &Campaign, got: &Collected) -> Checked {
    let report = check_logs(&got.logs, c.run.args.slots, &got.fence_logs);
    let refused = refused_calls(&c.run.dir);
    let passed = if c.run.args.planted() {
        !report.is_clean()
    } else if c.run.args.wipe_control() {
        // Without the guard a wipe lets a claimer in beside the holder:
        // duplicates where their clocks stamp the same IDs, an overlap of
        // their holding periods in any case.
        report.duplicates > 0 || !report.overlaps.is_empty()
    } else if c.run.args.must_fail() {
        report.duplicates > 0
    } else if c.outline.unsafe_by_design.is_some() {
        return Checked {
            report,
            refused,
            verdict: Verdict::NotJudged,
        };
    } else {
        report.is_clean()
    };
    Checked {
        report,
        refused,
        verdict: if passed {
            Verdict::Passed
        } else {
            Verdict::Failed
        },
    }
}
