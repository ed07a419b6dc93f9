//! Store URLs: the schemes this backend accepts and what their parts mean.

use leasehold_core::ConfigError;
use leasehold_core::url::StoreUrl;

use crate::config::EtcdConfig;
use crate::error::EtcdError;

/// The accepted shape, quoted by every URL error.
const FORM: &str = "etcd://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]…] (etcds:// for TLS, with \
                    ?ca=CA.crt and for mutual TLS &cert=CLIENT.crt&key=CLIENT.key), with options \
                    ?prefix=NAME&op_timeout=3s";

/// The options a URL takes, for the error that names an unknown one.
const OPTIONS: &str =
    "prefix, op_timeout, password_file, durability, and with etcds:// ca, cert, key";

/// etcd's client port, when a host names none.
const DEFAULT_PORT: u16 = 2379;

impl EtcdConfig {
    /// The URL schemes [`EtcdConfig::from_url`] accepts.
    pub const SCHEMES: &[&str] = &["etcd", "etcds"];

    /// Settings from a store URL (see the crate README, "URL"):
    /// `etcd://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]…]`, one endpoint per
    /// member (port 2379 by default), the user and password percent-decoded
    /// ([`EtcdConfig::user`]). Options: `prefix=NAME`
    /// ([`EtcdConfig::prefix`]) and `op_timeout=500ms` or `=2s`
    /// ([`EtcdConfig::op_timeout`]).
    ///
    /// `etcds://` is TLS (needs the `tls` feature): the server is verified
    /// against the CA certificate in `ca=/path/ca.crt` (PEM), or without it
    /// against the system's roots (feature `tls-roots`); `cert=` and `key=`
    /// name the client certificate and its private key (PEM) for a server
    /// that asks for one (`--client-cert-auth`). The files are read and
    /// checked here and again at each connect. Nothing falls back to plain
    /// text.
    ///
    /// Errors ([`EtcdError::Config`]) name what is accepted: an unknown
    /// scheme, a missing host, a bad port, a path, an unknown option, a TLS
    /// option on `etcd://`, `cert=` without `key=` (or the reverse), a file
    /// that cannot be read or holds no certificate or key (naming the
    /// option and the path).
    ///
    /// ```
    /// use leasehold_etcd::EtcdConfig;
    /// let config = EtcdConfig::from_url("etcd://ids:s3cret@10.0.0.1:2379,10.0.0.2?prefix=svc/ids")?;
    /// assert!(!format!("{config:?}").contains("s3cret"));
    /// # Ok::<(), leasehold_etcd::EtcdError>(())
    /// ```
    pub fn from_url(url: &str) -> Result<Self, EtcdError> {
        let mut parts = StoreUrl::parse(url, Self::SCHEMES, FORM)?;
        let tls = parts.scheme() == "etcds";
        if tls {
            tls_compiled_in(cfg!(feature = "tls"))?;
        }
        if parts.hosts().is_empty() {
            return Err(ConfigError::described(
                "url",
                format!("{}:// needs a host; expected {FORM}", parts.scheme()),
            )
            .into());
        }
        if !parts.path().trim_matches('/').is_empty() {
            return Err(ConfigError::described(
                "url",
                format!(
                    "etcd URLs take no path ({:?}); give the key prefix as ?prefix=NAME",
                    parts.path()
                ),
            )
            .into());
        }
        let proto = if tls { "https" } else { "http" };
        let endpoints: Vec<String> = parts
            .hosts()
            .iter()
            .map(|host| {
                let has_port = match host.rsplit_once(']') {
                    Some((_, tail)) => tail.starts_with(':'),
                    None => host.contains(':'),
                };
                if has_port {
                    format!("{proto}://{host}")
                } else {
                    format!("{proto}://{host}:{DEFAULT_PORT}")
                }
            })
            .collect();
        let user = match (parts.user(), parts.password()) {
            (None, _) => None,
            (Some(""), _) => {
                return Err(ConfigError::described(
                    "url",
                    "the URL has a password but no user name; give both: etcd://USER:PASSWORD@HOST",
                )
                .into());
            }
            (Some(name), password) => Some((name.to_owned(), password.unwrap_or("").to_owned())),
        };
        let prefix = parts.take("prefix");
        let op_timeout = parts.take_duration("op_timeout")?;
        let password_file = parts.take("password_file");
        // etcd keeps what it acknowledged (Raft, fsync): every policy is
        // accepted, and none changes anything.
        parts.take_durability()?;
        let [ca, cert, key] = ["ca", "cert", "key"].map(|option| parts.take(option));
        parts.refuse_unknown_options(OPTIONS)?;
        if !tls {
            let given: Vec<&str> = [("ca", &ca), ("cert", &cert), ("key", &key)]
                .iter()
                .filter(|(_, v)| v.is_some())
                .map(|(k, _)| *k)
                .collect();
            if !given.is_empty() {
                return Err(ConfigError::described(
                    "url",
                    format!(
                        "{} {}, and etcd:// is plain text: write etcds:// to connect over TLS",
                        given.join(", "),
                        if given.len() == 1 {
                            "is a TLS option"
                        } else {
                            "are TLS options"
                        }
                    ),
                )
                .into());
            }
        }
        let mut config = Self::new(endpoints);
        #[cfg(feature = "tls")]
        if tls {
            let files = crate::tls::TlsFiles {
                ca: ca.map(Into::into),
                cert: cert.map(Into::into),
                key: key.map(Into::into),
            };
            crate::tls::load(&files)?;
            config = config.tls_files(files);
        }
        if let Some((name, password)) = user {
            config = config.user(name, password);
        }
        if let Some(path) = password_file {
            config = config.password_file(path);
        }
        if let Some(prefix) = prefix {
            config = config.prefix(prefix);
        }
        if let Some(timeout) = op_timeout {
            config = config.op_timeout(timeout);
        }
        config.validate()?;
        Ok(config)
    }
}

/// `etcds://` in a build with TLS (`compiled`), or the error that names the
/// feature to turn on.
fn tls_compiled_in(compiled: bool) -> Result<(), ConfigError> {
    if compiled {
        return Ok(());
    }
    Err(ConfigError::described(
        "url",
        "etcds:// needs TLS, which this build leaves out: enable leasehold-etcd's `tls` feature \
         (the leasehold crate's `etcd` feature does), or use etcd:// on a trusted network",
    ))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::{DEFAULT_OP_TIMEOUT, DEFAULT_PREFIX};

    /// `password_file` names the user's password; it needs the user, and
    /// no password besides.
    #[test]
    fn a_password_file_needs_a_user_and_no_password() {
        let c = EtcdConfig::from_url("etcd://ids@h:2379?password_file=/run/s/pw").unwrap();
        assert_eq!(
            c.password_file.as_deref(),
            Some(std::path::Path::new("/run/s/pw"))
        );
        assert!(format!("{c:?}").contains("/run/s/pw"));
        for (url, needle) in [
            ("etcd://h:2379?password_file=/p", "it needs a user name"),
            (
                "etcd://ids:pw@h:2379?password_file=/p",
                "a password is given too",
            ),
        ] {
            let e = EtcdConfig::from_url(url).unwrap_err().to_string();
            assert!(e.contains(needle), "{url}: {e}");
        }
    }

    #[test]
    fn accepted_urls_set_the_fields() {
        for (url, endpoints, user, prefix, op_timeout) in [
            (
                "etcd://127.0.0.1:2379",
                &["http://127.0.0.1:2379"][..],
                None,
                DEFAULT_PREFIX,
                DEFAULT_OP_TIMEOUT,
            ),
            (
                "ETCD://a,b:2380,[::1]",
                &["http://a:2379", "http://b:2380", "http://[::1]:2379"][..],
                None,
                DEFAULT_PREFIX,
                DEFAULT_OP_TIMEOUT,
            ),
            (
                "etcd://ids:p%40ss@h:2379/?prefix=svc/ids/&op_timeout=2s",
                &["http://h:2379"][..],
                Some(("ids", "p@ss")),
                "svc/ids",
                Duration::from_secs(2),
            ),
            (
                "etcd://root@h:1",
                &["http://h:1"][..],
                Some(("root", "")),
                DEFAULT_PREFIX,
                DEFAULT_OP_TIMEOUT,
            ),
        ] {
            let c = EtcdConfig::from_url(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            let got_user = c.user.as_ref().map(|(n, p)| (n.as_str(), p.expose()));
            assert_eq!(
                (
                    c.endpoints.iter().map(String::as_str).collect::<Vec<_>>(),
                    got_user,
                    c.prefix.as_str(),
                    c.op_timeout
                ),
                (endpoints.to_vec(), user, prefix, op_timeout),
                "{url}"
            );
        }
    }

    #[test]
    fn refused_urls_say_what_is_accepted() {
        let mut cases = vec![
            (
                "etc://h:2379",
                "unknown scheme \"etc\"; expected one of etcd, etcds",
            ),
            (
                "http://h:2379",
                "unknown scheme \"http\"; expected one of etcd, etcds",
            ),
            ("h:2379", "it has no scheme; expected one of etcd, etcds"),
            ("etcd://", "etcd:// needs a host"),
            ("etcd://u:p@", "etcd:// needs a host"),
            ("etcd://h:2379,h:x", "bad port \"x\" of host \"h\""),
            ("etcd://h:2379/ids", "give the key prefix as ?prefix=NAME"),
            ("etcd://:pw@h:2379", "a password but no user name"),
            ("etcd://h?prefix=has%20space", "invalid `prefix`"),
            ("etcd://h?op_timeout=3", "op_timeout=500ms or op_timeout=2s"),
            (
                "etcd://h?timeout=3s",
                "unknown query option \"timeout\"; this URL takes prefix, op_timeout, \
                 password_file, durability, and with etcds:// ca, cert, key",
            ),
            (
                "etcd://h?ca=/ca.crt",
                "ca is a TLS option, and etcd:// is plain text: write etcds://",
            ),
            (
                "etcd://h?cert=/c.crt&key=/c.key",
                "cert, key are TLS options, and etcd:// is plain text: write etcds://",
            ),
        ];
        if !cfg!(feature = "tls") {
            cases.push(("etcds://h:2379", "enable leasehold-etcd's `tls` feature"));
        }
        for (url, needle) in cases {
            let e = EtcdConfig::from_url(url).unwrap_err().to_string();
            assert!(e.contains(needle), "{url}: {e}");
        }
        // What a build without TLS answers to etcds:// (the tests build it in).
        let e = tls_compiled_in(false).unwrap_err().to_string();
        assert!(e.contains("enable leasehold-etcd's `tls` feature"), "{e}");
        assert!(tls_compiled_in(true).is_ok());
    }

    /// `etcds://` with its certificate files: each read and checked, and
    /// every mistake named with its option and path.
    #[cfg(feature = "tls")]
    mod tls {
        use std::path::Path;

        use leasehold_conformance::tls::Pki;

        use super::*;
        use crate::tls::{ClientCert, Transport, Trust};

        fn pki() -> &'static Pki {
            Pki::shared().expect("test certificates")
        }

        fn url(query: &str) -> String {
            format!("etcds://127.0.0.1:2379,h2?{query}")
        }

        fn files(ca: &Path, cert: &Path, key: &Path) -> String {
            format!(
                "ca={}&cert={}&key={}",
                ca.display(),
                cert.display(),
                key.display()
            )
        }

        #[test]
        fn mutual_tls_reads_the_three_files() {
            let p = pki();
            let c = EtcdConfig::from_url(&url(&files(&p.ca, &p.client.cert, &p.client.key)))
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(c.endpoints, ["https://127.0.0.1:2379", "https://h2:2379"]);
            assert_eq!(
                c.transport(),
                Transport::Tls {
                    trust: Trust::CaFile(p.ca.clone()),
                    client: ClientCert::File(p.client.cert.clone()),
                }
            );
            assert!(c.connect_options().is_ok());
            let shown = format!("{c:?}");
            assert!(shown.contains("client.key"), "{shown}");
            let key = std::fs::read_to_string(&p.client.key).unwrap();
            let body = key.lines().nth(1).unwrap();
            assert!(!shown.contains(body), "{shown}");
        }

        #[test]
        fn tls_with_a_ca_only_shows_no_certificate() {
            let c = EtcdConfig::from_url(&format!("etcds://h?ca={}", pki().ca.display())).unwrap();
            assert_eq!(
                c.transport(),
                Transport::Tls {
                    trust: Trust::CaFile(pki().ca.clone()),
                    client: ClientCert::None,
                }
            );
        }

        #[test]
        fn tls_without_a_ca_trusts_the_system_roots_or_says_which_feature() {
            let got = EtcdConfig::from_url("etcds://h");
            if cfg!(feature = "tls-roots") {
                let c = got.unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(
                    c.transport(),
                    Transport::Tls {
                        trust: Trust::SystemRoots,
                        client: ClientCert::None,
                    }
                );
            } else {
                let e = got.map(drop).unwrap_err().to_string();
                assert!(e.contains("give ca=/path/to/ca.crt"), "{e}");
                assert!(e.contains("`tls-roots` feature"), "{e}");
            }
        }

        #[test]
        fn file_mistakes_name_the_option_and_the_path() {
            let p = pki();
            let missing = p.dir.join("missing.crt");
            for (query, needles) in [
                (
                    format!("ca={}&cert={}", p.ca.display(), p.client.cert.display()),
                    vec![
                        "invalid `key`".to_owned(),
                        format!("cert={} is given without key=", p.client.cert.display()),
                    ],
                ),
                (
                    format!("ca={}&key={}", p.ca.display(), p.client.key.display()),
                    vec![format!(
                        "key={} is given without cert=",
                        p.client.key.display()
                    )],
                ),
                (
                    format!("ca={}", missing.display()),
                    vec![
                        "invalid `ca`".to_owned(),
                        format!("cannot read ca={}", missing.display()),
                    ],
                ),
                (
                    files(&p.ca, &missing, &p.client.key),
                    vec![format!("cannot read cert={}", missing.display())],
                ),
                (
                    files(&p.ca, &p.client.cert, &missing),
                    vec![format!("cannot read key={}", missing.display())],
                ),
                (
                    format!("ca={}", p.client.key.display()),
                    vec![format!(
                        "ca={} holds no PEM certificate",
                        p.client.key.display()
                    )],
                ),
                (
                    files(&p.ca, &p.client.cert, &p.client.cert),
                    vec![format!(
                        "key={} holds no PEM private key",
                        p.client.cert.display()
                    )],
                ),
                (
                    files(&p.ca, &p.client.cert, &p.stranger.key),
                    vec![
                        "make no usable client identity".to_owned(),
                        "key= must be the private key of the certificate in cert=".to_owned(),
                    ],
                ),
            ] {
                let e = EtcdConfig::from_url(&url(&query)).unwrap_err().to_string();
                for needle in needles {
                    assert!(e.contains(&needle), "{query}: {e}");
                }
            }
        }
    }
}
