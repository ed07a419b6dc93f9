//! TLS to PostgreSQL and MySQL/MariaDB (the crate README, "TLS"): what a
//! URL asks for, the files it names, and what a refused connection means.
//!
//! A URL asks for no TLS, or lets sqlx take TLS when the server offers it
//! (unverified, plain text otherwise: sqlx's default), or asks for verified
//! TLS (`sslmode=verify-full`, `ssl-mode=VERIFY_IDENTITY`): the server's
//! certificate must chain to a trusted CA and name the URL's host, and the
//! connection never falls back to plain text. A URL that names a CA, a
//! client certificate or a key asks for TLS too, and must then say
//! `verify-full`. Refused, naming the verified mode: the modes that encrypt
//! without checking who answers (`require`, `REQUIRED`), and those that
//! check who signed the certificate but not the name it is for
//! (`verify-ca`, `VERIFY_CA`): sqlx trusts the public web CAs besides the
//! file given, so any server holding a public certificate would pass.

use leasehold_core::ConfigError;

use crate::engine::Engine;

/// What a connection's TLS mode asks for (the accepted modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// No TLS: PostgreSQL `disable` and `allow` (sqlx connects without TLS
    /// for both), MySQL `DISABLED`.
    Off,
    /// TLS when the server offers it, unverified, and plain text otherwise:
    /// PostgreSQL `prefer`, MySQL `PREFERRED` (each engine's default).
    IfOffered,
    /// Verified TLS or no connection: PostgreSQL `verify-full`, MySQL
    /// `VERIFY_IDENTITY`.
    Verified,
}

/// The options of one engine, as its users spell them.
struct Names {
    /// The mode option, and the verified form every refusal names.
    mode: &'static str,
    verified: &'static str,
    ca: &'static str,
    cert: &'static str,
    key: &'static str,
}

const POSTGRES: Names = Names {
    mode: "sslmode",
    verified: "verify-full",
    ca: "sslrootcert",
    cert: "sslcert",
    key: "sslkey",
};

const MYSQL: Names = Names {
    mode: "ssl-mode",
    verified: "VERIFY_IDENTITY",
    ca: "ssl-ca",
    cert: "ssl-cert",
    key: "ssl-key",
};

fn names(engine: Engine) -> &'static Names {
    match engine {
        Engine::MySql => &MYSQL,
        _ => &POSTGRES,
    }
}

/// The verified URL options of `engine`, as every refusal names them.
fn verified_form(engine: Engine) -> String {
    let n = names(engine);
    format!(
        "{}={}&{}=CA.crt ({} names the CA that signed the server's certificate; leave it out \
         only when a public web CA did)",
        n.mode, n.verified, n.ca, n.ca
    )
}

/// The mode `value` of the option `source` (`sslmode`, `ssl-mode`,
/// `PGSSLMODE`) for `engine`, or why it is refused.
pub(crate) fn mode(engine: Engine, source: &str, value: &str) -> Result<Mode, ConfigError> {
    let n = names(engine);
    let lower = value.to_ascii_lowercase();
    let (accepted, unverified, unnamed) = match engine {
        Engine::MySql => (
            [
                ("disabled", Mode::Off),
                ("preferred", Mode::IfOffered),
                ("verify_identity", Mode::Verified),
            ]
            .as_slice(),
            "required",
            "verify_ca",
        ),
        _ => (
            [
                ("disable", Mode::Off),
                ("allow", Mode::Off),
                ("prefer", Mode::IfOffered),
                ("verify-full", Mode::Verified),
            ]
            .as_slice(),
            "require",
            "verify-ca",
        ),
    };
    if let Some((_, mode)) = accepted.iter().find(|(name, _)| *name == lower) {
        return Ok(*mode);
    }
    let why = if lower == unverified {
        "encrypts without checking the server's certificate, so whoever can reach the traffic \
         can pose as the database; leasehold verifies every TLS connection it is asked for"
            .to_owned()
    } else if lower == unnamed {
        "checks who signed the server's certificate but not the host name it is for, and sqlx \
         trusts the public web CAs besides the file given: a server holding any public \
         certificate would pass"
            .to_owned()
    } else {
        let names: Vec<&str> = accepted.iter().map(|(name, _)| *name).collect();
        format!("is no TLS mode leasehold takes ({})", names.join(", "))
    };
    Err(ConfigError::described(
        n.mode,
        format!("{source}={value} {why}: use {}", verified_form(engine)),
    ))
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) use connect::Tls;

#[cfg(any(feature = "postgres", feature = "mysql"))]
mod connect {
    use std::path::Path;

    use leasehold_core::ConfigError;
    use leasehold_core::url::percent_decode;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, InvalidDnsNameError, PrivateKeyDer};
    use rustls::{AlertDescription, CertificateError};

    use super::{Mode, mode, names, verified_form};
    use crate::engine::Engine;
    use crate::error::SqlError;

    /// A file (or, as sqlx allows, inline PEM) an option names.
    struct Named {
        /// The option as the URL or the environment spells it.
        option: &'static str,
        value: String,
    }

    impl Named {
        fn inline(&self) -> bool {
            let text = self.value.trim();
            text.starts_with("-----BEGIN") && text.ends_with("-----")
        }

        /// `sslrootcert=/etc/ca.crt`; inline PEM is never quoted (a key
        /// is a secret).
        fn shown(&self) -> String {
            if self.inline() {
                format!("{} (inline PEM)", self.option)
            } else {
                format!("{}={}", self.option, self.value)
            }
        }
    }

    /// What a URL asks of TLS, checked, and how to explain a connection it
    /// could not make.
    pub(crate) struct Tls {
        engine: Engine,
        mode: Mode,
        /// How the mode was chosen: `sslmode=verify-full`,
        /// `PGSSLMODE=prefer`, or sqlx's default.
        mode_shown: String,
        host: String,
        user: String,
        ca: Option<Named>,
        cert: Option<Named>,
        key: Option<Named>,
    }

    /// The environment variables sqlx reads for PostgreSQL when the URL
    /// leaves the option out.
    const PG_ENV: [(&str, &str); 4] = [
        ("sslmode", "PGSSLMODE"),
        ("ca", "PGSSLROOTCERT"),
        ("cert", "PGSSLCERT"),
        ("key", "PGSSLKEY"),
    ];

    /// Which of the four options a query key is, and how it is spelt: sqlx
    /// 0.8's names (and aliases) per engine.
    fn option_of(engine: Engine, key: &str) -> Option<(&'static str, &'static str)> {
        const PG: &[(&str, &str)] = &[
            ("sslmode", "sslmode"),
            ("ssl-mode", "sslmode"),
            ("sslrootcert", "ca"),
            ("ssl-root-cert", "ca"),
            ("ssl-ca", "ca"),
            ("sslcert", "cert"),
            ("ssl-cert", "cert"),
            ("sslkey", "key"),
            ("ssl-key", "key"),
        ];
        const MY: &[(&str, &str)] = &[
            ("sslmode", "sslmode"),
            ("ssl-mode", "sslmode"),
            ("sslca", "ca"),
            ("ssl-ca", "ca"),
            ("sslcert", "cert"),
            ("ssl-cert", "cert"),
            ("sslkey", "key"),
            ("ssl-key", "key"),
        ];
        let table = if engine == Engine::MySql { MY } else { PG };
        table.iter().find(|(k, _)| *k == key).copied()
    }

    /// A query value as sqlx reads it (`application/x-www-form-urlencoded`:
    /// `+` is a space).
    fn query_decode(s: &str) -> String {
        percent_decode(&s.replace('+', " "))
    }

    impl Tls {
        /// What `url` asks of TLS for `engine`, where `effective` is the
        /// mode sqlx will use (in the engine's spelling: it may come from
        /// `PGSSLMODE`), `host` and `user` those it connects to and as.
        /// Checked: the mode, that a CA, certificate or key is named only
        /// with the verified mode, that a certificate comes with its key,
        /// and that each file named is a readable PEM file of its kind.
        pub(crate) fn read(
            engine: Engine,
            url: &str,
            effective: &str,
            host: &str,
            user: &str,
        ) -> Result<Self, SqlError> {
            let mut written: [Option<Named>; 4] = Default::default();
            let slot = |which: &str| {
                ["sslmode", "ca", "cert", "key"]
                    .iter()
                    .position(|w| *w == which)
            };
            let query = url.split_once('?').map_or("", |(_, q)| q);
            let query = query.split('#').next().unwrap_or("");
            for pair in query.split('&').filter(|p| !p.is_empty()) {
                let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                if let Some((option, which)) = option_of(engine, &query_decode(key))
                    && let Some(i) = slot(which)
                {
                    written[i] = Some(Named {
                        option,
                        value: query_decode(value),
                    });
                }
            }
            let from_url: [bool; 4] = std::array::from_fn(|i| written[i].is_some());
            if engine == Engine::Postgres {
                for (which, var) in PG_ENV {
                    if let (Some(i), Ok(value)) = (slot(which), std::env::var(var))
                        && written[i].is_none()
                    {
                        written[i] = Some(Named { option: var, value });
                    }
                }
            }
            let [mode_named, ca, cert, key] = written;
            let n = names(engine);
            let mode_shown = match &mode_named {
                Some(named) => format!("{}={}", named.option, named.value),
                None => format!(
                    "no {} (sqlx's default: {})",
                    n.mode,
                    if engine == Engine::MySql {
                        "PREFERRED"
                    } else {
                        "prefer"
                    }
                ),
            };
            let source = mode_named.as_ref().map_or(n.mode, |named| named.option);
            let mode = mode(engine, source, effective)?;
            let tls = Self {
                engine,
                mode,
                mode_shown,
                host: host.to_owned(),
                user: user.to_owned(),
                ca,
                cert,
                key,
            };
            tls.check(from_url[1..].iter().any(|b| *b))?;
            Ok(tls)
        }

        /// The checks of [`Tls::read`] after the mode's own;
        /// `files_in_url`: the URL itself names a CA, certificate or key.
        fn check(&self, files_in_url: bool) -> Result<(), SqlError> {
            let n = names(self.engine);
            let files = [&self.ca, &self.cert, &self.key];
            let named: Vec<String> = files
                .iter()
                .filter_map(|f| f.as_ref())
                .map(|f| f.option.to_owned())
                .collect();
            match self.mode {
                // TLS is off: files the environment names are not used, and
                // the URL naming some contradicts itself.
                Mode::Off if !files_in_url => return Ok(()),
                Mode::Off | Mode::IfOffered if !named.is_empty() => {
                    let but = if self.mode == Mode::Off {
                        format!("{} turns TLS off", self.mode_shown)
                    } else {
                        format!(
                            "with {} the server is not verified, and plain text is taken \
                             from a server without TLS",
                            self.mode_shown
                        )
                    };
                    return Err(ConfigError::described(
                        n.mode,
                        format!(
                            "{} {} given, which asks for TLS, but {but}: use {}",
                            named.join(", "),
                            if named.len() == 1 { "is" } else { "are" },
                            verified_form(self.engine)
                        ),
                    )
                    .into());
                }
                _ => {}
            }
            match (&self.cert, &self.key) {
                (Some(given), None) | (None, Some(given)) => {
                    let missing = if self.cert.is_some() { n.key } else { n.cert };
                    return Err(ConfigError::described(
                        given.option,
                        format!(
                            "{} is given without {missing}: a client certificate needs both \
                             ({}=client.crt&{}=client.key)",
                            given.option, n.cert, n.key
                        ),
                    )
                    .into());
                }
                _ => {}
            }
            for (file, kind) in [
                (
                    &self.ca,
                    Kind::Certificates("the CA that signed the server's certificate"),
                ),
                (&self.cert, Kind::Certificates("this client's certificate")),
                (&self.key, Kind::Key),
            ] {
                if let Some(file) = file {
                    check_file(file, kind)?;
                }
            }
            Ok(())
        }

        /// What `e`, the error of this URL's first connection (`what`),
        /// means where TLS explains it: a handshake one side refused, a
        /// server without TLS, or a login refused (`access_refused`, the
        /// dialect's judgement of the server's error code) where TLS or a
        /// client certificate may be what the server wants. `None`: TLS has
        /// nothing to say.
        pub(crate) fn explain(
            &self,
            what: &str,
            e: &sqlx::Error,
            access_refused: bool,
        ) -> Option<SqlError> {
            if let Some(tls) = rustls_error(e) {
                let (cause, fix) = self.handshake(tls);
                return Some(SqlError::Tls {
                    what: format!("{what}: {cause} ({tls})"),
                    fix,
                });
            }
            if let sqlx::Error::Tls(inner) = e {
                if inner.downcast_ref::<InvalidDnsNameError>().is_some() {
                    return Some(SqlError::Tls {
                        what: format!(
                            "{what}: {} is no host name a certificate can be checked against                              ({inner})",
                            self.host
                        ),
                        fix: "connect by the server's DNS name or IP address, as its \
                              certificate lists it"
                            .to_owned(),
                    });
                }
                // sqlx's other TLS errors are of files, checked before: the
                // server answered that it takes no TLS.
                return Some(SqlError::Tls {
                    what: format!(
                        "{what}: {inner}; this URL asks for verified TLS ({}) and never falls \
                         back to plain text",
                        self.mode_shown
                    ),
                    fix: format!(
                        "turn TLS on in the server ({}), or check that the URL's host and port \
                         are the database's",
                        self.server_tls_settings()
                    ),
                });
            }
            if access_refused {
                return Some(SqlError::Refused {
                    what: format!("{what}: {e}"),
                    fix: self.login_fix(),
                });
            }
            None
        }

        /// The cause and the fix of a TLS error `e` (rustls's).
        fn handshake(&self, e: &rustls::Error) -> (String, String) {
            let n = names(self.engine);
            let trusted = match &self.ca {
                Some(ca) => format!("the CA of {} or a public web CA", ca.shown()),
                None => format!("no {} is given, so only the public web CAs built in", n.ca),
            };
            let clocks = "and check the clocks of this machine and the server";
            match e {
                rustls::Error::InvalidCertificate(c) => match c {
                    CertificateError::UnknownIssuer | CertificateError::BadSignature => (
                        format!(
                            "the server's certificate is not signed by a CA this client trusts \
                             ({trusted})"
                        ),
                        format!(
                            "set {} to the file of the CA that signed the server's certificate",
                            n.ca
                        ),
                    ),
                    CertificateError::Expired | CertificateError::ExpiredContext { .. } => (
                        "the server's certificate has expired".to_owned(),
                        format!(
                            "renew the server's certificate ({}), {clocks}",
                            self.server_certificate()
                        ),
                    ),
                    CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                        (
                            "the server's certificate is not valid yet".to_owned(),
                            "check the clocks of this machine and the server".to_owned(),
                        )
                    }
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. } => (
                        format!(
                            "the server's certificate is not for {}, the host this URL connects to",
                            self.host
                        ),
                        format!(
                            "connect by a name the certificate lists (its subjectAltName), or \
                             give the server a certificate that lists {}",
                            self.host
                        ),
                    ),
                    _ => (
                        "the server's certificate was refused".to_owned(),
                        format!(
                            "give the server a valid certificate for {} signed by a CA this \
                             client trusts ({trusted})",
                            self.host
                        ),
                    ),
                },
                rustls::Error::AlertReceived(alert) => self.alert(*alert),
                _ => (
                    "TLS with the server failed".to_owned(),
                    format!(
                        "check that the URL's host and port are the database's, and its TLS \
                         settings ({})",
                        self.server_tls_settings()
                    ),
                ),
            }
        }

        /// The cause and the fix of a TLS alert the server sent.
        fn alert(&self, alert: AlertDescription) -> (String, String) {
            use AlertDescription as A;
            let n = names(self.engine);
            let give = format!(
                "give this client's certificate and key with {}=client.crt&{}=client.key",
                n.cert, n.key
            );
            let no_common_ground = "this client speaks TLS 1.2 and 1.3 with current cipher \
                                    suites (rustls): allow them in the server";
            let refuses_certificate = matches!(
                alert,
                A::UnknownCA
                    | A::BadCertificate
                    | A::UnsupportedCertificate
                    | A::CertificateUnknown
                    | A::CertificateRevoked
                    | A::CertificateExpired
                    | A::AccessDenied
                    | A::DecryptError
            );
            match (&self.cert, alert) {
                (_, A::CertificateRequired) => (
                    "the server requires a client certificate, and this URL gives none".to_owned(),
                    give,
                ),
                (Some(cert), _) if refuses_certificate => (
                    format!(
                        "the server refused this client's certificate ({})",
                        cert.shown()
                    ),
                    format!(
                        "use a client certificate the server trusts: signed by a CA of its {}, \
                         still valid, for client authentication, and {}",
                        self.server_ca(),
                        self.certificate_name()
                    ),
                ),
                (None, A::HandshakeFailure) => (
                    "the server ended the TLS handshake: it may require a client certificate, \
                     which this URL does not give, or share no TLS version or cipher suite with \
                     this client"
                        .to_owned(),
                    format!("{give}; {no_common_ground}"),
                ),
                (_, A::HandshakeFailure | A::ProtocolVersion | A::InsufficientSecurity) => (
                    "the server and this client share no TLS version or cipher suite".to_owned(),
                    no_common_ground.to_owned(),
                ),
                _ => (
                    "the server ended the TLS handshake".to_owned(),
                    format!(
                        "check the server's log and its TLS settings ({})",
                        self.server_tls_settings()
                    ),
                ),
            }
        }

        /// The fix of a refused login, with what TLS may have to do with it.
        fn login_fix(&self) -> String {
            let n = names(self.engine);
            let otherwise = "otherwise check the user, its password and the database name";
            let tls_only = match self.engine {
                Engine::MySql => "require_secure_transport = ON, or a user REQUIRE SSL or X509",
                _ => "pg_hba.conf with hostssl lines only, or rds.force_ssl = 1",
            };
            let wants_certificate = match self.engine {
                Engine::MySql => "a user REQUIRE X509, SUBJECT or ISSUER",
                _ => "pg_hba.conf `cert` authentication or clientcert=verify-full",
            };
            let with_certificate = format!("&{}=client.crt&{}=client.key", n.cert, n.key);
            match (self.mode, &self.cert) {
                (Mode::Off | Mode::IfOffered, _) => format!(
                    "this URL does not ask for TLS ({}): if the server takes only TLS \
                     connections ({tls_only}), connect with {}, and add {with_certificate} \
                     if it asks for a client certificate ({wants_certificate}); {otherwise}",
                    self.mode_shown,
                    verified_form(self.engine)
                ),
                (Mode::Verified, None) => format!(
                    "if the server asks for a client certificate ({wants_certificate}), add \
                     {with_certificate}; {otherwise}"
                ),
                (Mode::Verified, Some(cert)) => format!(
                    "check that the client certificate ({}) is {}; {otherwise}",
                    cert.shown(),
                    self.certificate_name()
                ),
            }
        }

        /// Where the server keeps its TLS settings.
        fn server_tls_settings(&self) -> &'static str {
            match self.engine {
                Engine::MySql => "ssl_cert, ssl_key and ssl_ca",
                _ => "ssl = on, ssl_cert_file, ssl_key_file and ssl_ca_file",
            }
        }

        /// Where the server names its certificate, and how it reloads it.
        fn server_certificate(&self) -> &'static str {
            match self.engine {
                Engine::MySql => {
                    "ssl_cert and ssl_key, then FLUSH SSL on MariaDB or ALTER INSTANCE RELOAD \
                     TLS on MySQL"
                }
                _ => "ssl_cert_file and ssl_key_file, then SELECT pg_reload_conf()",
            }
        }

        /// Where the server names the CAs it trusts for client certificates.
        fn server_ca(&self) -> &'static str {
            match self.engine {
                Engine::MySql => "ssl_ca",
                _ => "ssl_ca_file",
            }
        }

        /// What a client certificate must say of the user.
        fn certificate_name(&self) -> String {
            let user = &self.user;
            match self.engine {
                Engine::MySql => format!("of the subject and issuer that {user}'s REQUIRE names"),
                _ => format!("for {user} (its common name), or mapped to {user} in pg_ident.conf"),
            }
        }
    }

    /// What a file must hold.
    #[derive(Clone, Copy)]
    enum Kind {
        /// PEM certificates: of what, for the messages.
        Certificates(&'static str),
        /// A PEM private key.
        Key,
    }

    /// A configuration error naming `file`'s option and path unless it is
    /// a readable PEM file of `kind` (or, inline, PEM of `kind`).
    fn check_file(file: &Named, kind: Kind) -> Result<(), SqlError> {
        let described = |why: String| -> SqlError {
            ConfigError::described(file.option, format!("{}: {why}", file.shown())).into()
        };
        let what = match kind {
            Kind::Certificates(of) => of,
            Kind::Key => "this client's private key",
        };
        let read = if file.inline() {
            Ok(file.value.as_bytes().to_vec())
        } else {
            std::fs::read(Path::new(&file.value))
        };
        let bytes = read.map_err(|e| {
            described(match e.kind() {
                std::io::ErrorKind::NotFound => {
                    format!("no such file; name the PEM file of {what}")
                }
                _ => format!(
                    "cannot be read ({e}); it must be a PEM file of {what}, readable \
                              by this process"
                ),
            })
        })?;
        let ok = match kind {
            Kind::Certificates(_) => {
                let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(&bytes).collect();
                certs.is_ok_and(|c| !c.is_empty())
            }
            Kind::Key => PrivateKeyDer::from_pem_slice(&bytes).is_ok(),
        };
        if ok {
            Ok(())
        } else {
            Err(described(format!(
                "holds no PEM {}; it must be the PEM file of {what}",
                match kind {
                    Kind::Certificates(_) => "certificate (-----BEGIN CERTIFICATE-----)",
                    Kind::Key => "private key (-----BEGIN PRIVATE KEY-----, or its RSA or EC form)",
                }
            )))
        }
    }

    /// The rustls error inside `e`, if TLS failed: sqlx passes a failed
    /// handshake on as an I/O error, and a refused client certificate or
    /// key as its TLS error.
    fn rustls_error(e: &sqlx::Error) -> Option<&rustls::Error> {
        let inner: &(dyn std::error::Error + 'static) = match e {
            sqlx::Error::Io(io) => io.get_ref()?,
            sqlx::Error::Tls(inner) => inner.as_ref(),
            _ => return None,
        };
        inner.downcast_ref::<rustls::Error>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The verified mode and the modes that ask for no verification are
    /// taken; the unverified ones are refused, naming the verified one.
    #[test]
    fn modes_are_taken_or_refused_naming_the_verified_one() {
        for (engine, value, taken) in [
            (Engine::Postgres, "verify-full", Some(Mode::Verified)),
            (Engine::Postgres, "VERIFY-FULL", Some(Mode::Verified)),
            (Engine::Postgres, "prefer", Some(Mode::IfOffered)),
            (Engine::Postgres, "disable", Some(Mode::Off)),
            (Engine::Postgres, "allow", Some(Mode::Off)),
            (Engine::Postgres, "require", None),
            (Engine::Postgres, "verify-ca", None),
            (Engine::Postgres, "VERIFY_IDENTITY", None),
            (Engine::MySql, "VERIFY_IDENTITY", Some(Mode::Verified)),
            (Engine::MySql, "preferred", Some(Mode::IfOffered)),
            (Engine::MySql, "DISABLED", Some(Mode::Off)),
            (Engine::MySql, "REQUIRED", None),
            (Engine::MySql, "VERIFY_CA", None),
            (Engine::MySql, "verify-full", None),
        ] {
            let got = mode(engine, "x", value);
            match taken {
                Some(m) => assert_eq!(got, Ok(m), "{engine} {value}"),
                None => {
                    let e = got.expect_err(value).to_string();
                    let verified = match engine {
                        Engine::MySql => "use ssl-mode=VERIFY_IDENTITY&ssl-ca=",
                        _ => "use sslmode=verify-full&sslrootcert=",
                    };
                    assert!(
                        e.contains(verified) && e.contains(&format!("x={value}")),
                        "{e}"
                    );
                }
            }
        }
    }

    #[cfg(feature = "postgres")]
    mod files {
        use leasehold_conformance::tls::Pki;

        use super::super::connect::Tls;
        use crate::engine::Engine;
        use crate::error::SqlError;

        fn read(query: &str) -> Result<Tls, SqlError> {
            let url = format!("postgres://u@h/db?{query}");
            let mode = query
                .split('&')
                .find_map(|p| p.strip_prefix("sslmode="))
                .unwrap_or("prefer");
            Tls::read(Engine::Postgres, &url, mode, "h", "u")
        }

        fn refused(query: &str, needles: &[&str]) {
            let e = match read(query) {
                Ok(_) => panic!("{query} was taken"),
                Err(e) => e,
            };
            assert!(matches!(e, SqlError::Config(_)), "{query}: {e:?}");
            let text = e.to_string();
            for needle in needles {
                assert!(
                    text.contains(needle),
                    "{query}: {needle:?} missing from {text}"
                );
            }
        }

        /// Each file is read before connecting: missing, of the wrong kind,
        /// or named with a mode that would not use it to verify, it is a
        /// configuration error naming the option (and the path).
        #[test]
        fn files_are_checked_before_connecting() {
            let pki = Pki::shared().expect("certificates");
            let (ca, cert, key) = (
                pki.ca.display().to_string(),
                pki.client.cert.display().to_string(),
                pki.client.key.display().to_string(),
            );
            let full = format!("sslmode=verify-full&sslrootcert={ca}&sslcert={cert}&sslkey={key}");
            assert!(read(&full).is_ok());
            assert!(read("sslmode=verify-full").is_ok());
            assert!(read("sslmode=disable").is_ok());
            refused(
                "sslmode=verify-full&sslrootcert=/no/ca.crt",
                &["invalid `sslrootcert`: sslrootcert=/no/ca.crt: no such file"],
            );
            refused(
                &format!("sslmode=verify-full&ssl-root-cert={key}"),
                &["ssl-root-cert=", "holds no PEM certificate"],
            );
            refused(
                &format!("sslmode=verify-full&sslcert={cert}&sslkey={cert}"),
                &["sslkey=", "holds no PEM private key"],
            );
            refused(
                &format!("sslmode=verify-full&sslcert={cert}"),
                &["sslcert is given without sslkey"],
            );
            refused(
                &format!("sslrootcert={ca}"),
                &[
                    "sslrootcert is given, which asks for TLS",
                    "use sslmode=verify-full",
                ],
            );
            refused(
                &format!("sslmode=disable&sslrootcert={ca}"),
                &["sslmode=disable turns TLS off"],
            );
            // Inline PEM is checked too, and never quoted.
            let pem = std::fs::read_to_string(&pki.client.cert).expect("certificate");
            let inline: String = pem
                .bytes()
                .map(|b| match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' => char::from(b).to_string(),
                    _ => format!("%{b:02X}"),
                })
                .collect();
            assert!(read(&format!("sslmode=verify-full&sslrootcert={inline}")).is_ok());
            let text = match read(&format!(
                "sslmode=verify-full&sslkey={inline}&sslcert={cert}"
            )) {
                Ok(_) => panic!("a certificate was taken for a key"),
                Err(e) => e.to_string(),
            };
            assert!(
                text.contains("sslkey (inline PEM): holds no PEM private key"),
                "{text}"
            );
            assert!(!text.contains("BEGIN CERTIFICATE-----\n"), "{text}");
        }

        /// What the handshake's errors mean, in words naming the option
        /// to change.
        #[test]
        fn handshake_errors_name_the_cause_and_the_fix() {
            use rustls::{AlertDescription, CertificateError};

            let pki = Pki::shared().expect("certificates");
            let tls = read(&format!(
                "sslmode=verify-full&sslrootcert={}",
                pki.ca.display()
            ))
            .expect("taken");
            let io = |e: rustls::Error| {
                sqlx::Error::Io(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
            };
            for (e, needles) in [
                (
                    io(rustls::Error::InvalidCertificate(
                        CertificateError::UnknownIssuer,
                    )),
                    &["not signed by a CA this client trusts", "set sslrootcert"][..],
                ),
                (
                    io(rustls::Error::InvalidCertificate(CertificateError::Expired)),
                    &["has expired", "renew the server's certificate"],
                ),
                (
                    io(rustls::Error::InvalidCertificate(
                        CertificateError::NotValidForName,
                    )),
                    &["is not for h,", "lists h"],
                ),
                (
                    io(rustls::Error::AlertReceived(
                        AlertDescription::CertificateRequired,
                    )),
                    &[
                        "requires a client certificate",
                        "sslcert=client.crt&sslkey=client.key",
                    ],
                ),
                (
                    sqlx::Error::Tls("server does not support TLS".into()),
                    &[
                        "never falls back to plain text",
                        "turn TLS on in the server",
                    ],
                ),
            ] {
                let explained = tls.explain("connecting", &e, false);
                let Some(explained @ SqlError::Tls { .. }) = explained else {
                    panic!("{e}: {explained:?}");
                };
                let text = explained.to_string();
                for needle in needles {
                    assert!(text.contains(needle), "{needle:?} missing from {text}");
                }
            }
            let other = sqlx::Error::Io(std::io::Error::other("reset"));
            assert!(tls.explain("connecting", &other, false).is_none());
        }
    }
}
