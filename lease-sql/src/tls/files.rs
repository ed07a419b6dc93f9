//! What a URL asks of TLS, and the files it names, checked before
//! connecting.

use std::path::Path;

use leasehold_core::ConfigError;
use leasehold_core::url::percent_decode;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::{Mode, mode, names, verified_form};
use crate::engine::Engine;
use crate::error::SqlError;

/// A file (or, as sqlx allows, inline PEM) an option names.
pub(super) struct Named {
    /// The option as the URL or the environment spells it.
    pub(super) option: &'static str,
    pub(super) value: String,
}

impl Named {
    fn inline(&self) -> bool {
        let text = self.value.trim();
        text.starts_with("-----BEGIN") && text.ends_with("-----")
    }

    /// `sslrootcert=/etc/ca.crt`; inline PEM is never quoted (a key
    /// is a secret).
    pub(super) fn shown(&self) -> String {
        if self.inline() {
            format!("{} (inline PEM)", self.option)
        } else {
            format!("{}={}", self.option, self.value)
        }
    }
}

/// What a URL asks of TLS, checked (how to explain a connection it
/// could not make is in `explain.rs`).
pub(crate) struct Tls {
    pub(super) engine: Engine,
    pub(super) mode: Mode,
    /// How the mode was chosen: `sslmode=verify-full`,
    /// `PGSSLMODE=prefer`, or sqlx's default.
    pub(super) mode_shown: String,
    pub(super) host: String,
    pub(super) user: String,
    pub(super) ca: Option<Named>,
    pub(super) cert: Option<Named>,
    pub(super) key: Option<Named>,
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
    /// What the URL asked of TLS, kept for `doctor`.
    pub(crate) fn asked(&self) -> super::Asked {
        super::Asked {
            mode: self.mode,
            shown: self.mode_shown.clone(),
            local: super::is_local(&self.host),
        }
    }

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
                        "{} {} given, so the URL asks for TLS, but {but}: use {}",
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
