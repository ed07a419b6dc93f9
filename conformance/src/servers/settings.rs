//! The settings a server this process starts runs with.

use std::fmt;

/// How a server this process starts treats the writes it acknowledged, chosen
/// at provisioning ([`provide_with`](super::provide_with)). What matters for the tests is a crash of
/// the server *process* ([`Server::kill`](super::Server::kill)): the kernel keeps what the server
/// handed it, so a write survives a kill once the server has written it out,
/// fsynced or not; it is lost if it was still in the server's own buffers.
/// (A power cut of the machine also loses what was written but not fsynced;
/// these settings are not tested against that.)
///
/// Only servers started from a local binary get these settings. A URL from
/// the environment runs as its operator configured it, a container with its
/// image's defaults: [`Server::settings`](super::Server::settings) is `None` for both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Settings {
    /// Tuned for speed; for tests that never restart a store (the behaviour
    /// suite, benchmarks). What a kill loses, per family:
    /// - PostgreSQL: `fsync=off`. Commits are written to the kernel before
    ///   they are acknowledged, so a process crash loses none (an OS crash
    ///   could).
    /// - MariaDB: `--innodb-flush-log-at-trx-commit=0`: the redo log is
    ///   written out about once a second, so a crash loses up to the last
    ///   second of acknowledged transactions.
    /// - Redis and Valkey: no persistence (`--save '' --appendonly no`): a
    ///   restart starts empty.
    /// - etcd: etcd's own defaults (every commit fsynced), as [`Durable`](Self::Durable).
    #[default]
    Fast,
    /// Every acknowledged write survives a crash of the server process (and
    /// is fsynced, so it would survive a power cut too). For tests that
    /// restart a store and rely on what it acknowledged.
    /// - PostgreSQL: `fsync=on`, `synchronous_commit=on`, `full_page_writes=on`.
    /// - MariaDB: `--innodb-flush-log-at-trx-commit=1` (`--sync-binlog=1`
    ///   would be needed too if the binary log were on; it is skipped,
    ///   `--skip-log-bin`).
    /// - Redis and Valkey: the append-only file, fsynced before every reply:
    ///   `--appendonly yes --appendfsync always`, no RDB snapshots
    ///   (`--save ''`).
    /// - etcd: etcd's own defaults (every commit fsynced before it is
    ///   acknowledged).
    Durable,
    /// Loses acknowledged writes when the process crashes: for tests of what
    /// guards against a store that restarts with amnesia (a fence or floor
    /// going back, a lease forgotten). Measured with `pg_ctl stop -m
    /// immediate` and SIGKILL (see the crate's CHANGELOG):
    /// - PostgreSQL: `synchronous_commit=off` with `wal_writer_delay=10000ms`
    ///   (the largest allowed) and `fsync=on`: commits are acknowledged
    ///   before their WAL leaves the server's shared buffers, which the WAL
    ///   writer writes out only every 10 s (up to three times that in the
    ///   worst case), so an immediate shutdown loses the commits of the last
    ///   seconds (rows inserted 0.5, 1, 3 and 6 s before the kill were all
    ///   gone after the restart).
    /// - MariaDB: `--innodb-flush-log-at-trx-commit=0` with
    ///   `--innodb-flush-log-at-timeout=2700` (the largest allowed): the redo
    ///   log is written out when its buffer fills, a DDL statement or a page
    ///   flush forces it, or after 45 minutes; rows inserted 0, 1, 3, 6 and
    ///   12 s before a SIGKILL were all gone after the restart.
    /// - Redis and Valkey: no persistence (`--save '' --appendonly no`): a
    ///   restart starts empty.
    /// - etcd: refused — no setting makes etcd lose acknowledged writes on a
    ///   process crash (`--unsafe-no-fsync` loses them only on an OS crash).
    ///
    /// Something else may write the log out first (a checkpoint, a DDL
    /// statement, a page flush): a test may count on the last writes before a
    /// kill being *at risk*, not on exactly which of them are lost.
    Lossy,
}

impl Settings {
    /// Every setting, in declaration order.
    pub const ALL: [Self; 3] = [Self::Fast, Self::Durable, Self::Lossy];

    /// `fast`, `durable` or `lossy`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Fast => "fast",
            Self::Durable => "durable",
            Self::Lossy => "lossy",
        }
    }
}

impl fmt::Display for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
