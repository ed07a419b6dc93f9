//! The behaviour suite against the in-process **fake** API server (the row
//! "k8s (fake API server)"), then Kubernetes-specific tests against the fake;
//! the suite again against the fake over HTTPS, reached through a
//! kubeconfig with a client certificate (the row "k8s (fake API server,
//! mTLS)"), with the token, kubeconfig and TLS cases;
//! and the same suite against a real cluster (the row "k8s (real cluster)")
//! when `LEASEHOLD_K8S_KUBECONFIG` names a kubeconfig, or k3s through
//! testcontainers when a Docker daemon answers. Without either the real tier
//! is reported as skipped, never as passed.

mod k8s;

use std::process::ExitCode;
use std::sync::Arc;

use leasehold_conformance::Target;
use leasehold_conformance::servers::{self, ServerKind};

use k8s::{FakeBackend, RealBackend};

fn main() -> ExitCode {
    let fake = Arc::new(FakeBackend::start());
    let target = Target::new(k8s::FAKE_LABEL, fake.describe(), fake).with_revoke();
    let mut targets = vec![k8s::wipe::register(k8s::damaged::register(
        k8s::tests::register(target),
    ))];
    // The fake again, over HTTPS only, every request authenticated: the
    // suite through a kubeconfig with a client certificate, and the TLS,
    // token and kubeconfig cases.
    match FakeBackend::start_https() {
        Ok(https) => {
            let https = Arc::new(https);
            let target = Target::new(k8s::tls::MTLS_LABEL, https.describe(), https).with_revoke();
            targets.push(k8s::tls::register(target));
        }
        Err(e) => panic!("the fake API server over HTTPS did not start: {e}"),
    }
    let mut keep = Vec::new();
    match servers::provide(ServerKind::K8s) {
        Ok(server) => {
            let backend = Arc::new(RealBackend::new(&server));
            targets.push(Target::new(k8s::REAL_LABEL, server.describe(), backend).with_revoke());
            keep.push(server);
        }
        Err(missing) => targets.push(Target::skipped(k8s::REAL_LABEL, missing)),
    }
    let code = leasehold_conformance::run(targets);
    drop(keep);
    code
}
