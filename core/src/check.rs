//! One check of a store, as `leasehold doctor` shows it: what was looked
//! at, the verdict, and the fix. The store's own checks (`Operate::checks`)
//! and its guards' readings (`guards`) are made of them.

use std::fmt;

/// A check's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Fit to hold leases in this respect.
    Ok,
    /// Works, with a risk the detail names.
    Warn,
    /// Unfit: leases are refused or unsafe until fixed.
    Fail,
    /// The check does not apply to this store (the detail says why).
    NotApplicable,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Self::Ok => "ok",
            Self::Warn => "warn",
            Self::Fail => "FAIL",
            Self::NotApplicable => "n/a",
        })
    }
}

/// One check of a store: what was looked at, the verdict, and the fix.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Check {
    /// The outcome.
    pub verdict: Verdict,
    /// What was checked, one word (`server`, `schema`, `clock`).
    pub name: &'static str,
    /// What was found.
    pub detail: String,
    /// What to do, when the verdict is not `Ok`: one fix, or several, one
    /// per line (shown each on a line of its own under the detail).
    pub fix: Option<String>,
}

impl Check {
    /// A check with no fix.
    pub fn new(verdict: Verdict, name: &'static str, detail: impl Into<String>) -> Self {
        Self {
            verdict,
            name,
            detail: detail.into(),
            fix: None,
        }
    }

    /// The same check with its fix.
    pub fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:<4}  {:<12}  {}", self.verdict, self.name, self.detail)?;
        match self.fix.as_deref() {
            // Several fixes (a refusal's): one per line, under the detail.
            Some(fix) if fix.contains('\n') => {
                for line in fix.lines() {
                    write!(f, "\n{:20}{line}", "")?;
                }
            }
            Some(fix) => write!(f, " — fix: {fix}")?,
            None => {}
        }
        Ok(())
    }
}
