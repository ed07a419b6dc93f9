//! What a failed first connection means, where TLS explains it.

use rustls::pki_types::InvalidDnsNameError;
use rustls::{AlertDescription, CertificateError};

use super::{Mode, Tls, names, verified_form};
use crate::engine::Engine;
use crate::error::SqlError;

impl Tls {
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
                        "{what}: {} is no host name a certificate can be checked against \
                         ({inner})",
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
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => (
                    "the server's certificate is not valid yet".to_owned(),
                    "check the clocks of this machine and the server".to_owned(),
                ),
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
        let otherwise = "otherwise check the user and its password (in the URL, its \
                         password_file or the credentials callback), and the database name";
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
