//! Connection settings: endpoints, key prefix, credentials, TLS, timeouts.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use leasehold_core::ConfigError;

#[cfg(feature = "tls")]
use crate::tls::TlsFiles;
use crate::tls::Transport;

/// The default key prefix: slot keys are `leasehold/<pool>/<slot>`.
pub const DEFAULT_PREFIX: &str = "leasehold";

/// The default bound on any single etcd operation (`EtcdStrategy::DEFAULT_OP_TIMEOUT`).
pub(crate) const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(3);

/// How many candidate slots one acquisition transaction tries, by default.
pub const DEFAULT_CANDIDATES: u32 = 16;

/// The most candidates one transaction may try. Each candidate is one level of
/// nested transaction, and etcd's `--max-txn-ops` (default 128) bounds the
/// nesting; 32 levels stay well inside it.
pub const MAX_CANDIDATES: u32 = 32;

/// A password that never shows in `Debug` output or logs.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secret(String);

impl Secret {
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Where the TLS settings come from.
#[cfg(feature = "tls")]
#[derive(Clone)]
pub(crate) enum Tls {
    /// Built by the caller ([`EtcdConfig::tls`]).
    Options(etcd_client::TlsOptions),
    /// The files of an `etcds://` URL, read again at each connect.
    Files(TlsFiles),
}

/// How to reach etcd and where to keep the slot keys.
///
/// Credentials and TLS material are passed through to `etcd-client` and never
/// appear in `Debug` output, in error messages or in [`Strategy::identity`].
///
/// ```
/// use leasehold_etcd::EtcdConfig;
/// use std::time::Duration;
/// let config = EtcdConfig::new(["http://127.0.0.1:2379"])
///     .prefix("services/ids")
///     .user("ids", "s3cret")
///     .op_timeout(Duration::from_secs(2));
/// assert!(!format!("{config:?}").contains("s3cret"));
/// ```
///
/// [`Strategy::identity`]: leasehold_core::Strategy::identity
#[derive(Clone)]
#[must_use]
pub struct EtcdConfig {
    pub(crate) endpoints: Vec<String>,
    pub(crate) prefix: String,
    pub(crate) user: Option<(String, Secret)>,
    pub(crate) password_file: Option<PathBuf>,
    #[cfg(feature = "tls")]
    pub(crate) tls: Option<Tls>,
    pub(crate) op_timeout: Duration,
    pub(crate) connect_timeout: Option<Duration>,
    pub(crate) candidates: u32,
}

impl EtcdConfig {
    /// Endpoints such as `http://10.0.0.1:2379` (or `https://…` with the `tls`
    /// feature). Requests are balanced over all of them.
    pub fn new<I, S>(endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            prefix: DEFAULT_PREFIX.to_owned(),
            user: None,
            password_file: None,
            #[cfg(feature = "tls")]
            tls: None,
            op_timeout: DEFAULT_OP_TIMEOUT,
            connect_timeout: None,
            candidates: DEFAULT_CANDIDATES,
        }
    }

    /// The key prefix (default `leasehold`): slot keys are
    /// `<prefix>/<pool>/<slot>`. A trailing `/` is ignored.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into().trim_end_matches('/').to_owned();
        self
    }

    /// Authenticates as `name` (etcd's user/password auth). The password is
    /// kept out of every `Debug` output and message.
    pub fn user(mut self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((name.into(), Secret(password.into())));
        self
    }

    /// Reads the password of the user ([`EtcdConfig::user`], or the URL's
    /// `etcd://USER@HOST`) from the file at `path` at
    /// [`connect`](crate::EtcdStrategy::connect), instead of taking it from
    /// the URL or the code: the file holds the password alone (one
    /// trailing line break is not part of it). The URL option
    /// `password_file=PATH` says the same.
    ///
    /// Read at connect only: `etcd-client` authenticates with it then and
    /// renews its token with the same password, so a rotated password takes
    /// effect at the next `connect` (keep the old one valid until every
    /// process has reconnected). A password given as well is refused.
    pub fn password_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.password_file = Some(path.into());
        self
    }

    /// TLS settings, passed through to `etcd-client` (use `https://` endpoints).
    /// An `etcds://` URL ([`EtcdConfig::from_url`]) names its certificate
    /// files instead, and is read and checked for you.
    #[cfg(feature = "tls")]
    pub fn tls(mut self, tls: etcd_client::TlsOptions) -> Self {
        self.tls = Some(Tls::Options(tls));
        self
    }

    /// The certificate files of an `etcds://` URL.
    #[cfg(feature = "tls")]
    pub(crate) fn tls_files(mut self, files: TlsFiles) -> Self {
        self.tls = Some(Tls::Files(files));
        self
    }

    /// How the client reaches etcd, for messages.
    pub(crate) fn transport(&self) -> Transport {
        #[cfg(feature = "tls")]
        match &self.tls {
            Some(Tls::Files(files)) => return files.transport(),
            Some(Tls::Options(_)) => {
                return Transport::Tls {
                    trust: crate::tls::Trust::Given,
                    client: crate::tls::ClientCert::Given,
                };
            }
            None => {}
        }
        Transport::Plain
    }

    /// Bounds every single etcd operation (default 3 s). A renewal that does
    /// not answer within it is `Retry`; an acquisition is `Unreachable`.
    pub fn op_timeout(mut self, timeout: Duration) -> Self {
        self.op_timeout = timeout;
        self
    }

    /// Bounds connecting to an endpoint (default: the operation timeout).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// How many candidate slots one acquisition transaction tries (default
    /// 16, at most [`MAX_CANDIDATES`]).
    pub fn candidates_per_txn(mut self, n: u32) -> Self {
        self.candidates = n;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.endpoints.is_empty() {
            return Err(ConfigError::new(
                "endpoints",
                "an empty list",
                "at least one endpoint, e.g. http://127.0.0.1:2379",
            ));
        }
        let ok_prefix = !self.prefix.is_empty()
            && self.prefix.len() <= 200
            && self.prefix.bytes().all(|b| b.is_ascii_graphic());
        if !ok_prefix {
            return Err(ConfigError::new(
                "prefix",
                format!("{:?}", self.prefix),
                "1 to 200 printable ASCII characters without spaces",
            ));
        }
        if !(1..=MAX_CANDIDATES).contains(&self.candidates) {
            return Err(ConfigError::new(
                "candidates_per_txn",
                self.candidates.to_string(),
                format!("1 to {MAX_CANDIDATES}"),
            ));
        }
        if self.op_timeout.is_zero() {
            return Err(ConfigError::new(
                "op_timeout",
                "0s",
                "a positive bound such as 3s",
            ));
        }
        if self.password_file.is_some() {
            match &self.user {
                None => {
                    return Err(ConfigError::described(
                        "password_file",
                        "it needs a user name: etcd://USER@HOST?password_file=PATH, or \
                         EtcdConfig::user(USER, \"\") with EtcdConfig::password_file(PATH)",
                    ));
                }
                Some((_, password)) if !password.expose().is_empty() => {
                    return Err(ConfigError::described(
                        "password_file",
                        "a password is given too (in the URL or EtcdConfig::user); give it one \
                         way: drop it and keep it in the file",
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// This configuration with the password read from its password file,
    /// if it has one.
    pub(crate) async fn with_password_from_file(
        mut self,
    ) -> Result<Self, leasehold_core::credentials::CredentialsError> {
        if let (Some(path), Some((_, password))) = (&self.password_file, &mut self.user) {
            let source = leasehold_core::credentials::CredentialSource::password_file(path);
            *password = Secret(source.fetch().await?.expose_password().to_owned());
        }
        Ok(self)
    }

    /// The endpoints without any user-info part, for identities and messages.
    pub(crate) fn public_endpoints(&self) -> Vec<String> {
        self.endpoints.iter().map(|e| strip_userinfo(e)).collect()
    }

    /// The hosts of the endpoints (without scheme, port or credentials),
    /// for messages.
    pub(crate) fn hosts(&self) -> String {
        self.public_endpoints()
            .iter()
            .map(|e| crate::tls::host_of(e).to_owned())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The options `etcd-client` connects with; TLS files are read now.
    pub(crate) fn connect_options(&self) -> Result<etcd_client::ConnectOptions, ConfigError> {
        let connect_timeout = self.connect_timeout.unwrap_or(self.op_timeout);
        let mut options = etcd_client::ConnectOptions::new()
            .with_timeout(self.op_timeout)
            .with_connect_timeout(connect_timeout)
            .with_keep_alive(self.op_timeout, self.op_timeout)
            .with_keep_alive_while_idle(false)
            // A member that lost its leader answers at once instead of hanging.
            .with_require_leader(true);
        if let Some((name, password)) = &self.user {
            options = options
                .with_user(name.clone(), password.expose().to_owned())
                .with_auto_token_refresh(true);
        }
        #[cfg(feature = "tls")]
        match &self.tls {
            Some(Tls::Options(tls)) => options = options.with_tls(tls.clone()),
            Some(Tls::Files(files)) => options = options.with_tls(crate::tls::load(files)?),
            None => {}
        }
        Ok(options)
    }
}

fn strip_userinfo(endpoint: &str) -> String {
    match endpoint.split_once("://") {
        Some((scheme, rest)) => {
            let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
            format!("{scheme}://{host}")
        }
        None => endpoint
            .rsplit_once('@')
            .map_or(endpoint, |(_, h)| h)
            .to_owned(),
    }
}

impl fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("EtcdConfig");
        d.field("endpoints", &self.public_endpoints())
            .field("prefix", &self.prefix)
            .field("user", &self.user.as_ref().map(|(name, _)| name))
            .field("password", &self.user.as_ref().map(|_| "<redacted>"))
            .field("password_file", &self.password_file);
        #[cfg(feature = "tls")]
        match &self.tls {
            Some(Tls::Files(files)) => d.field("tls", files),
            Some(Tls::Options(_)) => d.field("tls", &"TlsOptions"),
            None => d.field("tls", &false),
        };
        d.field("op_timeout", &self.op_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("candidates", &self.candidates)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_password() {
        let c = EtcdConfig::new(["http://user:pw1@127.0.0.1:2379"]).user("alice", "hunter2");
        let text = format!("{c:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!text.contains("pw1"), "{text}");
        assert!(text.contains("alice"), "{text}");
    }

    #[test]
    fn validation_names_the_fix() {
        let e = EtcdConfig::new(Vec::<String>::new())
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("at least one"), "{e}");
        let e = EtcdConfig::new(["http://x:1"])
            .prefix("has space")
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("printable"), "{e}");
        let e = EtcdConfig::new(["http://x:1"])
            .candidates_per_txn(0)
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("1 to"), "{e}");
        assert!(
            EtcdConfig::new(["http://x:1"])
                .prefix("a/b/")
                .validate()
                .is_ok()
        );
    }
}
