//! Fault switches: what the fake does to the next requests of one verb.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// The verbs the fake serves, as RBAC names them (plus the access review).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verb {
    /// `GET .../leases` (collection).
    List,
    /// `GET .../leases/{name}`.
    Get,
    /// `POST .../leases`.
    Create,
    /// `PATCH .../leases/{name}`.
    Patch,
    /// `PUT .../leases/{name}`.
    Update,
    /// `DELETE .../leases/{name}`.
    Delete,
    /// `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`.
    AccessReview,
}

impl Verb {
    /// The RBAC verb (`list`, `get`, ...).
    pub fn rbac(self) -> &'static str {
        match self {
            Self::List => "list",
            Self::Get => "get",
            Self::Create => "create",
            Self::Patch => "patch",
            Self::Update => "update",
            Self::Delete => "delete",
            Self::AccessReview => "create-selfsubjectaccessreview",
        }
    }

    /// The verb an RBAC verb name stands for.
    pub fn from_rbac(name: &str) -> Option<Self> {
        [
            Self::List,
            Self::Get,
            Self::Create,
            Self::Patch,
            Self::Update,
            Self::Delete,
        ]
        .into_iter()
        .find(|v| v.rbac() == name)
    }

    /// True for verbs that change stored objects.
    pub fn writes(self) -> bool {
        matches!(
            self,
            Self::Create | Self::Patch | Self::Update | Self::Delete
        )
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.rbac())
    }
}

/// What the fake does with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this status and a `Status` body; nothing is applied.
    Status(u16),
    /// Apply the request as usual, then answer with this status instead of
    /// the result (a 504 after the write reached storage).
    ApplyThenStatus(u16),
    /// Close the connection without answering; nothing is applied.
    Drop,
    /// Apply the request, then close the connection without answering.
    ApplyThenDrop,
    /// Answer normally after this delay.
    Delay(Duration),
    /// Never answer (the connection stays open).
    Hang,
    /// 403 Forbidden; access reviews for the verb answer `allowed: false`.
    Forbidden,
    /// 429 Too Many Requests with `Retry-After: secs` (API Priority and
    /// Fairness rejecting the request before it is handled).
    TooManyRequests {
        /// The `Retry-After` header, in seconds.
        retry_after_secs: u32,
    },
}

struct Rule {
    fault: Fault,
    /// How many more requests it applies to; `None` for all until cleared.
    remaining: Option<u32>,
}

/// The fault switches of one fake server, per verb.
#[derive(Default)]
pub struct Faults {
    rules: Mutex<HashMap<Verb, Rule>>,
}

impl Faults {
    /// Applies `fault` to every request of `verb` until cleared.
    pub fn set(&self, verb: Verb, fault: Fault) {
        self.lock().insert(
            verb,
            Rule {
                fault,
                remaining: None,
            },
        );
    }

    /// Applies `fault` to the next `times` requests of `verb`.
    pub fn set_times(&self, verb: Verb, fault: Fault, times: u32) {
        self.lock().insert(
            verb,
            Rule {
                fault,
                remaining: Some(times),
            },
        );
    }

    /// Clears the switch of `verb`.
    pub fn clear_verb(&self, verb: Verb) {
        self.lock().remove(&verb);
    }

    /// Clears every switch.
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// True when `verb` is switched to [`Fault::Forbidden`] (for access
    /// reviews; does not consume a counted rule).
    pub fn forbidden(&self, verb: Verb) -> bool {
        self.lock()
            .get(&verb)
            .is_some_and(|r| r.fault == Fault::Forbidden)
    }

    /// The fault for one request of `verb`, consuming a counted rule.
    pub(crate) fn take(&self, verb: Verb) -> Option<Fault> {
        let mut rules = self.lock();
        let rule = rules.get_mut(&verb)?;
        let fault = rule.fault;
        if let Some(n) = &mut rule.remaining {
            *n = n.saturating_sub(1);
            if *n == 0 {
                rules.remove(&verb);
            }
        }
        Some(fault)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Verb, Rule>> {
        self.rules.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
