//! Every program and library from outside this workspace that the build, the
//! tests, the examples, the benches, the fault campaign and `cargo xtask`
//! start or load: one table, [`PROGRAMS`], and the only way to locate one
//! ([`require`], [`find`], [`command`]).
//!
//! `cargo xtask test` reads the same table before it builds anything: as root
//! it installs every Debian package a row names whose file is missing, and it
//! fails if a row is still missing afterwards. So a program that a test needs
//! is installed on a fresh machine exactly when it has a row here. Reaching
//! for a program by name or path anywhere else (`Command::new("x")`, a literal
//! `/usr/...` path) would hide it from the install step: `cargo xtask test`
//! refuses such code (its "external programs" check), and so does review.
//!
//! ```
//! use leasehold_conformance::programs::{self, PROGRAMS};
//!
//! // Every row names the Debian package that ships it.
//! assert!(PROGRAMS.iter().all(|p| !p.package.is_empty()));
//! // An unknown name is a programming error, reported as such.
//! let e = programs::require("no-such-program").unwrap_err();
//! assert!(e.contains("not in leasehold_conformance::programs::PROGRAMS"));
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;

/// How a row's file is found on this machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Locate {
    /// A program found on `PATH` (and in `/usr/sbin`, `/usr/bin`, `/sbin`,
    /// which a non-root `PATH` often lacks).
    OnPath(&'static str),
    /// A file at the first of these paths that exists (libraries, and
    /// programs outside `PATH` such as a versioned PostgreSQL's).
    At(&'static [&'static str]),
    /// The Python interpreter's `venv` and `ensurepip` modules, which
    /// `cargo xtask servers install` needs for the PyPI-shipped servers. A
    /// Python built from source has them; Debian's needs `python3-venv`.
    PythonVenv,
}

/// One program or library from outside the workspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Program {
    /// The name code asks for with [`require`].
    pub name: &'static str,
    /// Where it is.
    pub locate: Locate,
    /// The Debian package that ships it.
    pub package: &'static str,
    /// What needs it (shown when it is missing).
    pub used_by: &'static str,
}

/// Every program and library from outside the workspace, one row each.
pub const PROGRAMS: &[Program] = &[
    Program {
        name: "protoc",
        locate: Locate::OnPath("protoc"),
        package: "protobuf-compiler",
        used_by: "building leasehold-etcd (etcd-client compiles etcd's protobuf API)",
    },
    Program {
        name: "protobuf-includes",
        locate: Locate::At(&["/usr/include/google/protobuf/descriptor.proto"]),
        package: "libprotobuf-dev",
        used_by: "building leasehold-etcd (the well-known protobuf types)",
    },
    Program {
        name: "etcd",
        locate: Locate::At(&["/usr/bin/etcd"]),
        package: "etcd-server",
        used_by: "the etcd 3.4 server of the tests and the campaign",
    },
    Program {
        name: "mariadbd",
        locate: Locate::OnPath("mariadbd"),
        package: "mariadb-server",
        used_by: "the MariaDB server of the tests and the campaign",
    },
    Program {
        name: "mariadb-install-db",
        locate: Locate::OnPath("mariadb-install-db"),
        package: "mariadb-server",
        used_by: "initialising a private MariaDB data directory",
    },
    Program {
        name: "mariadb",
        locate: Locate::OnPath("mariadb"),
        package: "mariadb-client",
        used_by: "creating the test database on a private MariaDB server",
    },
    Program {
        name: "redis-server",
        locate: Locate::At(&["/usr/bin/redis-server"]),
        package: "redis-server",
        used_by: "the Redis 7 server of the tests and the campaign",
    },
    Program {
        name: "postgres-15",
        locate: Locate::At(&["/usr/lib/postgresql/15/bin/postgres"]),
        package: "postgresql-15",
        used_by: "the PostgreSQL 15 server of the tests and the campaign (initdb and pg_ctl beside it)",
    },
    Program {
        name: "python3",
        locate: Locate::OnPath("python3"),
        package: "python3",
        used_by: "the virtual environment that holds the PyPI-shipped servers",
    },
    Program {
        name: "python3-venv",
        locate: Locate::PythonVenv,
        package: "python3-venv",
        used_by: "creating the virtual environment for the PyPI-shipped servers",
    },
    Program {
        name: "git",
        locate: Locate::OnPath("git"),
        package: "git",
        used_by: "`cargo deny check advisories` (cargo-deny fetches the RustSec advisory database \
                  with git)",
    },
    Program {
        name: "libfaketime",
        locate: Locate::At(&[
            "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
            "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        ]),
        package: "faketime",
        used_by: "the Valkey/Redis tests whose server's clock jumps (preloaded into the server), \
                  and the fault campaign's workers whose clocks drift (`--clock-rate-ppm`)",
    },
    Program {
        name: "rsvg-convert",
        locate: Locate::OnPath("rsvg-convert"),
        package: "librsvg2-bin",
        used_by: "the fault campaign's pictures (SVG to PNG)",
    },
    Program {
        name: "chromium",
        locate: Locate::OnPath("chromium"),
        package: "chromium",
        used_by: "`cargo xtask guide`: screenshots of the rendered guide's pages, headless",
    },
    Program {
        name: "script",
        locate: Locate::OnPath("script"),
        package: "bsdutils",
        used_by: "the CLI tests that answer a prompt on a pseudo-terminal",
    },
    Program {
        name: "runuser",
        locate: Locate::OnPath("runuser"),
        package: "util-linux",
        used_by: "running a private PostgreSQL as `postgres` when the tests run as root",
    },
    Program {
        name: "kill",
        locate: Locate::OnPath("kill"),
        package: "procps",
        used_by: "signalling servers and worker processes (pause, resume, interrupt, kill)",
    },
    Program {
        name: "chown",
        locate: Locate::OnPath("chown"),
        package: "coreutils",
        used_by: "handing a private PostgreSQL's directory to `postgres`",
    },
    Program {
        name: "sleep",
        locate: Locate::OnPath("sleep"),
        package: "coreutils",
        used_by: "a stand-in process in the server supervision tests",
    },
    Program {
        name: "localedef",
        locate: Locate::OnPath("localedef"),
        package: "libc-bin",
        used_by: "`cargo xtask test` making the German locale (de_DE.UTF-8) the PostgreSQL \
                  test of a server whose messages are not in English needs",
    },
    Program {
        name: "locale",
        locate: Locate::OnPath("locale"),
        package: "libc-bin",
        used_by: "`cargo xtask test` listing the locales this machine has",
    },
    Program {
        name: "locale-sources",
        locate: Locate::At(&["/usr/share/i18n/locales/de_DE"]),
        package: "locales",
        used_by: "`localedef` making the German locale (de_DE.UTF-8)",
    },
    Program {
        name: "apt-get",
        locate: Locate::OnPath("apt-get"),
        package: "apt",
        used_by: "`cargo xtask test` installing what this table names",
    },
];

/// The row named `name`, if the table has one.
pub fn row(name: &str) -> Option<&'static Program> {
    PROGRAMS.iter().find(|p| p.name == name)
}

/// Where `name` is on this machine, if it is there (`None` too for a name
/// the table lacks).
pub fn find(name: &str) -> Option<PathBuf> {
    row(name).and_then(Program::find)
}

/// Where `name` is on this machine, or an error that says which package to
/// install (and that `cargo xtask test` installs it as root).
pub fn require(name: &str) -> Result<PathBuf, String> {
    let program = row(name).ok_or_else(|| {
        format!(
            "`{name}` is not in leasehold_conformance::programs::PROGRAMS: add a row for it, \
             so that `cargo xtask test` installs it on a fresh machine"
        )
    })?;
    program.find().ok_or_else(|| program.missing())
}

/// A [`Command`] for the program `name`, found through the table.
pub fn command(name: &str) -> Result<Command, String> {
    require(name).map(Command::new)
}

/// The rows missing on this machine.
pub fn missing() -> Vec<&'static Program> {
    PROGRAMS.iter().filter(|p| p.find().is_none()).collect()
}

/// The Debian packages that would supply every missing row, each once, in
/// the table's order.
pub fn missing_packages() -> Vec<&'static str> {
    let mut packages: Vec<&'static str> = Vec::new();
    for p in missing() {
        if !packages.contains(&p.package) {
            packages.push(p.package);
        }
    }
    packages
}

impl Program {
    /// Where it is on this machine, if it is there.
    pub fn find(&self) -> Option<PathBuf> {
        match self.locate {
            Locate::OnPath(name) => on_path(name),
            Locate::At(paths) => paths.iter().map(PathBuf::from).find(|p| p.is_file()),
            Locate::PythonVenv => {
                let python = on_path("python3")?;
                Command::new(&python)
                    .args(["-c", "import venv, ensurepip"])
                    .output()
                    .is_ok_and(|o| o.status.success())
                    .then_some(python)
            }
        }
    }

    /// What to say when it is missing: what it is, who needs it, and the
    /// line that installs it.
    pub fn missing(&self) -> String {
        let what = match self.locate {
            Locate::OnPath(name) => format!("`{name}` is not on PATH"),
            Locate::At(paths) => format!("{} is missing", paths.join(" or ")),
            Locate::PythonVenv => "python3 lacks the venv and ensurepip modules".into(),
        };
        format!(
            "{what} (needed for {}): apt-get install {} — `cargo xtask test` installs it when run as root",
            self.used_by, self.package
        )
    }
}

/// Whether this process runs as root (its effective user ID, from
/// `/proc/self/status`: no program to run).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

/// A program on `PATH`, or in the system directories a non-root `PATH`
/// often lacks.
pub(crate) fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique() {
        for (i, p) in PROGRAMS.iter().enumerate() {
            assert!(
                PROGRAMS[i + 1..].iter().all(|q| q.name != p.name),
                "two rows are named {}",
                p.name
            );
        }
    }

    #[test]
    fn a_missing_row_names_its_package_and_user() {
        let p = Program {
            name: "absent",
            locate: Locate::At(&["/nonexistent/leasehold/absent.so"]),
            package: "absent-pkg",
            used_by: "nothing real",
        };
        assert_eq!(p.find(), None);
        let m = p.missing();
        assert!(m.contains("apt-get install absent-pkg"), "{m}");
        assert!(m.contains("/nonexistent/leasehold/absent.so"), "{m}");
        assert!(m.contains("nothing real"), "{m}");
    }

    #[test]
    fn unknown_names_are_refused_not_searched() {
        assert_eq!(
            find("sh"),
            None,
            "a name outside the table was searched for"
        );
        assert!(require("sh").is_err());
    }
}
