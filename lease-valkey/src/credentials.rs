//! A leasehold credential source as fred's credential provider: fred asks
//! it before every `AUTH`/`HELLO` of a new connection (the first, every
//! reconnect, every Cluster node and Sentinel), so a rotated password or a
//! short-lived token is used from the next connection on.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use fred::error::{Error, ErrorKind};
use fred::types::config::{CredentialProvider, Server};
use leasehold_core::credentials::{CredentialSource, CredentialsError};

/// fred's provider over a [`CredentialSource`].
pub(crate) struct Provider {
    source: CredentialSource,
    /// The URL's user, for credentials that name none.
    user: Option<String>,
    /// The server, its URL redacted, for messages.
    store: String,
    /// The source's last failure, until it answers again: what `connect`
    /// reports when the first connection could not be opened.
    failed: Arc<Mutex<Option<CredentialsError>>>,
}

impl Provider {
    pub(crate) fn new(source: CredentialSource, user: Option<String>, store: String) -> Self {
        Self {
            source,
            user,
            store,
            failed: Arc::default(),
        }
    }

    /// The source's last failure, if it has not answered since.
    pub(crate) fn failure(&self) -> Arc<Mutex<Option<CredentialsError>>> {
        Arc::clone(&self.failed)
    }
}

impl fmt::Debug for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Provider")
            .field("source", &self.source)
            .field("user", &self.user)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl CredentialProvider for Provider {
    async fn fetch(&self, _: Option<&Server>) -> Result<(Option<String>, Option<String>), Error> {
        let answer = self.source.fetch().await;
        let mut failed = self.failed.lock().unwrap_or_else(PoisonError::into_inner);
        match answer {
            Ok(creds) => {
                *failed = None;
                let user = creds
                    .user()
                    .map(str::to_owned)
                    .or_else(|| self.user.clone());
                Ok((user, Some(creds.expose_password().to_owned())))
            }
            Err(e) => {
                let error = Error::new(
                    ErrorKind::Auth,
                    format!("cannot connect to {}: {e}", self.store),
                );
                *failed = Some(e);
                Err(error)
            }
        }
    }
}
