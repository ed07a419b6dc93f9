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

/// What a connection's URL asked of TLS, kept for `doctor`.
#[derive(Clone, Debug)]
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) struct Asked {
    pub(crate) mode: Mode,
    /// How the mode was chosen: `sslmode=verify-full`, `PGSSLMODE=prefer`,
    /// or sqlx's default.
    pub(crate) shown: String,
    /// Whether the host is this machine (a loopback address, `localhost`,
    /// or a Unix socket): no network to read plain text on.
    pub(crate) local: bool,
}

/// Whether `host` (as a URL names it) is this machine.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) fn is_local(host: &str) -> bool {
    // No host, or a Unix socket's directory: no network either.
    host.is_empty() || host.starts_with('/') || leasehold_core::url::is_loopback_host(host)
}

/// The options of one engine, as its users spell them.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
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
mod explain;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod files;

#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) use files::Tls;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_local() {
        for host in [
            "127.0.0.1",
            "127.3.4.5",
            "localhost",
            "[::1]",
            "::1",
            "/run/postgresql",
        ] {
            assert!(is_local(host), "{host}");
        }
        for host in ["10.0.0.1", "db.example.com", "192.168.1.2"] {
            assert!(!is_local(host), "{host}");
        }
    }

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

        use crate::engine::Engine;
        use crate::error::SqlError;
        use crate::tls::Tls;

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
                    "sslrootcert is given, so the URL asks for TLS",
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
