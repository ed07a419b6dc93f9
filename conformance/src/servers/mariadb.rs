//! What every MariaDB server this crate starts has in common, a single
//! server ([`provide`](super::provide)) or a replicated pair
//! ([`MariaPair`](crate::topology::mariadb::MariaPair)): how its data
//! directory is installed and how `mariadbd` is started.
//!
//! Each server has a temporary directory of its own (`--tmpdir`), for the
//! install and for the server. Without one, every MariaDB started with
//! `--no-defaults` puts its temporary tables in `$TMPDIR` or `/tmp`, one
//! directory for the whole machine, and a MariaDB that starts (an install's
//! bootstrap too) removes every `#sql*` file it finds there as its own
//! leftovers: the temporary tables of the servers already running. An
//! install then fails with `Could not remove temporary table:
//! '/tmp/#sql-temptable-…', error: 2` and `ERROR: 1051 Unknown table
//! 'mysql.tmp_user_sys'` ("Installation of system tables failed!").
//! Measured with `cargo xtask measure mariadb-installs --rounds 5`, six
//! installs at once beside two CPU-bound processes: with one temporary
//! directory for all, 10 of 30 failed; with one each, none of 30. (The
//! measurement shares a directory of its own among the installs of a round,
//! not `/tmp`, where it would remove the temporary tables of any MariaDB
//! running on the machine.)

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::programs;

/// The `mariadb-install-db` command that installs a data directory at
/// `data` for root without a password and without the test database, its
/// temporary files in `tmp` (which must exist). Every server gets a `tmp` of
/// its own ([`install`]); one shared by installs run at once is what the
/// measurement of `cargo xtask measure mariadb-installs` compares with.
///
/// # Errors
/// `mariadb-install-db` is missing.
pub fn install_command(data: &Path, tmp: &Path) -> Result<Command, String> {
    let mut cmd = programs::command("mariadb-install-db")?;
    cmd.arg("--no-defaults")
        .arg(arg("--datadir=", data))
        .arg(arg("--tmpdir=", tmp))
        .args([
            "--user=root",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ]);
    Ok(cmd)
}

/// Installs a data directory at `data` ([`install_command`]), its
/// temporary files in `tmp` (created if missing).
///
/// # Errors
/// A step failed; the message has what the install printed.
pub fn install(data: &Path, tmp: &Path) -> Result<(), String> {
    std::fs::create_dir_all(tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let mut cmd = install_command(data, tmp)?;
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The files of one MariaDB server.
#[derive(Clone, Debug)]
pub(crate) struct Files {
    /// The data directory.
    pub(crate) data: PathBuf,
    /// Its own temporary directory.
    pub(crate) tmp: PathBuf,
    /// The Unix socket.
    pub(crate) socket: PathBuf,
    /// The PID file.
    pub(crate) pid: PathBuf,
    /// The error log (MariaDB adds `.err` to a name without an extension).
    pub(crate) log: PathBuf,
}

/// `mariadbd` (the program `bin`) serving `files` on `127.0.0.1:port` as
/// root, with room for a thousand connections; the caller adds its own
/// settings.
pub(crate) fn server_command(bin: &Path, files: &Files, port: u16) -> Command {
    let mut cmd = Command::new(bin);
    cmd.arg("--no-defaults")
        .arg(arg("--datadir=", &files.data))
        .arg(arg("--tmpdir=", &files.tmp))
        .arg(format!("--port={port}"))
        .arg("--bind-address=127.0.0.1")
        .arg(arg("--socket=", &files.socket))
        .arg(arg("--pid-file=", &files.pid))
        .arg(arg("--log-error=", &files.log))
        .args(["--user=root", "--max-connections=1000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

fn arg(name: &str, path: &Path) -> OsString {
    let mut a = OsString::from(name);
    a.push(path);
    a
}
