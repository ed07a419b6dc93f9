//! What the connected user may do: the check of the lease user's ACL rules
//! ([`LeaseUserAcl`]) that `doctor` runs, and that explains a refusal.

use fred::prelude::ClientLike;
use fred::types::{ClusterHash, Value};

use super::ValkeyStrategy;
use crate::acl::{Grants, LeaseUserAcl};
use crate::error::{Failure, ValkeyError};

impl ValkeyStrategy {
    /// The ACL a lease user of this strategy needs: its key prefix, the
    /// commands of the server it connected to, its topology.
    pub fn lease_user_acl(&self) -> LeaseUserAcl {
        let scheme = self
            .inner
            .config
            .url
            .split_once("://")
            .map_or("", |(s, _)| s)
            .to_ascii_lowercase();
        LeaseUserAcl::for_server(&self.inner.config.prefix, &self.inner.server)
            .cluster(self.inner.client.is_clustered())
            .sentinel(scheme.ends_with("-sentinel"))
            .select(self.inner.client.client_config().database.is_some())
    }

    /// The URL's user, or `default`.
    pub(crate) fn url_user(&self) -> String {
        self.inner
            .config
            .url_user()
            .unwrap_or_else(|| "default".into())
    }

    /// Checks every rule of [`ValkeyStrategy::lease_user_acl`] for the
    /// connected user, in one script (`EVAL`, which asks the server with
    /// `redis.acl_check_cmd` and runs nothing else): the rules it lacks. A
    /// user without `+eval` or the key pattern has that one named, the
    /// others unchecked.
    pub async fn grants(&self) -> Result<Grants, ValkeyError> {
        let acl = self.lease_user_acl();
        let args = vec![
            Value::from(acl.check_script()),
            Value::Integer(1),
            Value::from(acl.check_key()),
        ];
        let url = crate::config::redact(&self.inner.config.url);
        match self
            .call::<Value>("EVAL", ClusterHash::Offset(2), args)
            .await
        {
            Ok(Value::Array(items)) => Ok(Grants {
                missing: items.iter().filter_map(|v| v.as_string()).collect(),
                unchecked: None,
            }),
            Ok(_) => Ok(Grants {
                missing: Vec::new(),
                unchecked: Some(format!(
                    "{} has no redis.acl_check_cmd (Redis and Valkey 7+): compare the user's \
                     ACL with {acl}",
                    self.inner.server
                )),
            }),
            Err(Failure::Denied(refusal)) => {
                let rule = acl.rule_for(&refusal).unwrap_or_else(|| "+eval".to_owned());
                Ok(Grants {
                    missing: vec![rule.clone()],
                    unchecked: Some(format!(
                        "the other rules are checked by a script, which needs {rule}"
                    )),
                })
            }
            Err(f) => Err(self.failure_error("EVAL (the ACL check)", &url, f)),
        }
    }

    /// What to grant for a refusal (`NOPERM`, or a script's call refused):
    /// the rule the server named, else the rules the check finds missing.
    pub(crate) async fn rules_for_refusal(&self, refusal: &str) -> Vec<String> {
        let acl = self.lease_user_acl();
        if let Some(rule) = acl.rule_for(refusal) {
            return vec![rule];
        }
        match self.grants().await {
            Ok(g) if !g.missing.is_empty() => g.missing,
            _ => Vec::new(),
        }
    }

    /// The text of a refusal with the rules to grant: `NOPERM …; grant the
    /// user +evalsha (ACL SETUSER <user> +evalsha)`.
    pub(crate) async fn explain_refusal(&self, refusal: &str) -> String {
        let rules = self.rules_for_refusal(refusal).await;
        let user = self.url_user();
        crate::error::refusal_text(refusal, &rules, &user, &self.lease_user_acl())
    }
}
