//! Credentials kept out of the store URL: a password file, read again for
//! every new connection (a Kubernetes secret mounted as a file rotates in
//! place), or a callback asked for every new connection (short-lived tokens
//! such as RDS and ElastiCache IAM authentication tokens).
//!
//! A backend that takes them (SQL, Valkey/Redis; etcd reads a password file
//! at connect) asks its [`CredentialSource`] each time it opens a
//! connection, and uses what it answers instead of a password in the URL.
//! Neither the password nor the source's answer shows in any `Debug`,
//! `Display`, log or metric.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use leasehold_core::credentials::{CredentialSource, Credentials};
//! let source = CredentialSource::callback(|| async {
//!     Ok::<_, std::io::Error>(Credentials::new("app", "a-short-lived-token"))
//! });
//! let fresh = source.fetch().await?;
//! assert_eq!(fresh.user(), Some("app"));
//! assert!(!format!("{fresh:?} {source:?}").contains("a-short-lived-token"));
//! # Ok::<(), leasehold_core::credentials::CredentialsError>(()) }).unwrap();
//! ```

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::BoxFuture;

/// A user name (optional: the URL's, or the store's default, is used
/// without one) and a password or token. `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    user: Option<String>,
    password: String,
}

impl Credentials {
    /// `user` with `password` (or an authentication token).
    pub fn new(user: impl Into<String>, password: impl Into<String>) -> Self {
        Self {
            user: Some(user.into()),
            password: password.into(),
        }
    }

    /// A password (or token) for the user the URL names, or the store's
    /// default user.
    pub fn password_only(password: impl Into<String>) -> Self {
        Self {
            user: None,
            password: password.into(),
        }
    }

    /// The user name, when these credentials name one.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The password: hand it to the driver, never to a log or a message.
    pub fn expose_password(&self) -> &str {
        &self.password
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// The error a credentials callback returns: any error type.
pub type CallbackError = Box<dyn Error + Send + Sync>;

type Callback = dyn Fn() -> BoxFuture<'static, Result<Credentials, CallbackError>> + Send + Sync;

/// Where a store's credentials come from when not from its URL: asked again
/// for every new connection. Cheap to clone (the callback is shared).
#[derive(Clone)]
pub struct CredentialSource {
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    File(PathBuf),
    Callback(Arc<Callback>),
}

impl CredentialSource {
    /// A file that holds the password (or token) and nothing else; one
    /// trailing line break is not part of it. Read again for every new
    /// connection, so a rotated secret (a Kubernetes Secret mounted as a
    /// volume, which the kubelet swaps in place) takes effect without a
    /// restart.
    pub fn password_file(path: impl Into<PathBuf>) -> Self {
        Self {
            kind: Kind::File(path.into()),
        }
    }

    /// `callback`, awaited for every new connection: it answers the
    /// credentials to use (an RDS or ElastiCache IAM token generated for
    /// the next 15 minutes, a secret read from a vault). It runs within the
    /// connection's own timeout; an error it returns fails that connection
    /// (a retry asks it again).
    pub fn callback<F, Fut, E>(callback: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Credentials, E>> + Send + 'static,
        E: Into<CallbackError>,
    {
        let callback: Arc<Callback> = Arc::new(move || {
            let fut = callback();
            Box::pin(async move { fut.await.map_err(Into::into) })
        });
        Self {
            kind: Kind::Callback(callback),
        }
    }

    /// The password file, when this source is one.
    pub fn file(&self) -> Option<&Path> {
        match &self.kind {
            Kind::File(path) => Some(path),
            Kind::Callback(_) => None,
        }
    }

    /// Asks the source: reads the file, or awaits the callback.
    pub async fn fetch(&self) -> Result<Credentials, CredentialsError> {
        match &self.kind {
            Kind::File(path) => read_password_file(path).map(Credentials::password_only),
            Kind::Callback(callback) => callback().await.map_err(|e| CredentialsError {
                source: self.describe(),
                cause: e.to_string(),
                fix: "see the callback's error above; the connection is tried again (and the \
                      callback asked again) at the next attempt",
            }),
        }
    }

    /// What the source is, for messages: `the password file /run/…` or
    /// `the credentials callback`.
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::File(path) => format!("the password file {}", path.display()),
            Kind::Callback(_) => "the credentials callback".to_owned(),
        }
    }
}

/// Two sources are equal when they read the same file, or share one
/// callback (clones of one source).
impl PartialEq for CredentialSource {
    fn eq(&self, other: &Self) -> bool {
        match (&self.kind, &other.kind) {
            (Kind::File(a), Kind::File(b)) => a == b,
            (Kind::Callback(a), Kind::Callback(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for CredentialSource {}

impl fmt::Debug for CredentialSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::File(path) => f.debug_tuple("PasswordFile").field(path).finish(),
            Kind::Callback(_) => f.write_str("Callback"),
        }
    }
}

/// The password in the file at `path`, without one trailing line break.
fn read_password_file(path: &Path) -> Result<String, CredentialsError> {
    let failed = |cause: String, fix: &'static str| CredentialsError {
        source: format!("the password file {}", path.display()),
        cause,
        fix,
    };
    let mut text = std::fs::read(path).map_err(|e| {
        failed(
            e.to_string(),
            "mount or write the secret at that path (readable by this process), or correct \
             password_file",
        )
    })?;
    if text.ends_with(b"\n") {
        text.pop();
        if text.ends_with(b"\r") {
            text.pop();
        }
    }
    let password = String::from_utf8(text).map_err(|_| {
        failed(
            "it is not UTF-8 text".to_owned(),
            "write the password as UTF-8 text",
        )
    })?;
    if password.is_empty() {
        return Err(failed(
            "it is empty".to_owned(),
            "write the password into it (a trailing newline is allowed)",
        ));
    }
    Ok(password)
}

/// A [`CredentialSource`] did not answer: the file could not be read, or
/// the callback failed. The message names the source, the cause and the
/// fix, never a password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialsError {
    source: String,
    cause: String,
    fix: &'static str,
}

impl CredentialsError {
    /// The source that failed: `the password file /run/…` or `the
    /// credentials callback`.
    pub fn source_name(&self) -> &str {
        &self.source
    }
}

impl fmt::Display for CredentialsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}; {}", self.source, self.cause, self.fix)
    }
}

impl Error for CredentialsError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: Future>(f: F) -> F::Output {
        // A future that never waits (file reads, ready callbacks).
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut f = std::pin::pin!(f);
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("the future waited"),
        }
    }

    #[test]
    fn a_password_file_is_read_again_each_time_without_its_newline() {
        let dir = std::env::temp_dir().join(format!("leasehold-cred-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pw");
        let source = CredentialSource::password_file(&path);
        for (written, read) in [
            ("first\n", "first"),
            ("second", "second"),
            ("third\r\n", "third"),
            ("fourth\n\n", "fourth\n"),
        ] {
            std::fs::write(&path, written).unwrap();
            let c = block_on(source.fetch()).unwrap();
            assert_eq!((c.user(), c.expose_password()), (None, read));
        }
        std::fs::write(&path, "\n").unwrap();
        let e = block_on(source.fetch()).unwrap_err().to_string();
        assert!(e.contains("pw failed: it is empty"), "{e}");
        std::fs::remove_file(&path).unwrap();
        let e = block_on(source.fetch()).unwrap_err().to_string();
        assert!(
            e.contains("the password file") && e.contains("correct password_file"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failing_callback_is_named_and_nothing_shows_its_secret() {
        let ok = CredentialSource::callback(|| async {
            Ok::<_, std::io::Error>(Credentials::new("app", "tok3n-s3cret"))
        });
        let c = block_on(ok.fetch()).unwrap();
        assert_eq!(c.expose_password(), "tok3n-s3cret");
        assert!(!format!("{c:?}{ok:?}").contains("tok3n"));
        let failing = CredentialSource::callback(|| async {
            Err::<Credentials, _>(std::io::Error::other("the token service timed out"))
        });
        let e = block_on(failing.fetch()).unwrap_err();
        assert_eq!(e.source_name(), "the credentials callback");
        assert!(
            e.to_string()
                .starts_with("the credentials callback failed: the token service timed out"),
            "{e}"
        );
    }
}
