//! Exit codes and the one-line error.

/// The process's exit code (documented in `--help` and README.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Exit {
    /// Success.
    Ok = 0,
    /// `doctor`: a check failed.
    CheckFailed = 1,
    /// A bad option or argument.
    Usage = 2,
    /// A bad store URL or an unknown scheme.
    BadUrl = 3,
    /// The store cannot be reached.
    Unreachable = 4,
    /// The store cannot list its slots.
    Unsupported = 5,
    /// A revoke was not confirmed.
    NotConfirmed = 6,
    /// The store answered with an error.
    Store = 7,
    /// `decode`: unreadable input.
    BadInput = 8,
    /// The store refused the credentials.
    Authentication = 9,
}

/// What went wrong, as one line, and the exit code it gives.
#[derive(Debug)]
pub(crate) struct CliError {
    pub(crate) code: Exit,
    pub(crate) message: String,
}

impl CliError {
    pub(crate) fn new(code: Exit, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}
