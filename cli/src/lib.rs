//! `leasehold`, the command-line tool, as a library: [`main`] is the
//! whole tool. The `leasehold` program of this crate is that call alone; a
//! program that adds drivers to `leasehold`'s registry first (a backend
//! crate of its own, with `leasehold::register`) and then calls [`main`]
//! is the same tool with its store in it (see README.md).
//!
//! ```no_run
//! fn main() -> std::process::ExitCode {
//!     // leasehold::register(&MY_DRIVER).unwrap();
//!     leasehold_cli::main()
//! }
//! ```

#![forbid(unsafe_code)]

mod decode;
mod doctor;
mod error;
mod prepare;
mod redact;
mod revoke;
mod status;
mod store;
mod table;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::error::{CliError, Exit};

const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  doctor: at least one check FAILed
  2  usage: a bad option or argument (also: status without --pool on a store that cannot list pools)
  3  bad store URL or unknown scheme
  4  the store cannot be reached (refused, timed out, no such file)
  5  this store cannot list its slots yet (inspect unsupported)
  6  revoke or prepare --new-pool not confirmed (answered no, or stdin is not a terminal and --yes is missing)
  7  the store answered with an error (missing lease table, query failed)
  8  decode: an ID or key file that cannot be read
  9  authentication failed: the store refused the user, password or certificate";

/// Look at and operate the leases of a leasehold store.
#[derive(Parser, Debug)]
#[command(name = "leasehold", version, about, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// A table of a pool's slots (or the pools, when --pool is left out).
    #[command(after_help = EXIT_CODES)]
    Status {
        #[command(flatten)]
        store: StoreArgs,
        /// The pool; without it, the pools the store has (SQL stores only).
        #[arg(long)]
        pool: Option<String>,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The status table, refreshed in place; changed cells are highlighted.
    #[command(after_help = EXIT_CODES)]
    Watch {
        #[command(flatten)]
        store: StoreArgs,
        /// The pool.
        #[arg(long)]
        pool: String,
        /// Milliseconds between refreshes.
        #[arg(long, default_value_t = 1000)]
        interval: u64,
        /// Stop after this many reads of the store (default: never).
        #[arg(long)]
        count: Option<u64>,
    },
    /// Ends a slot's lease behind its holder's back; the slot stays taken
    /// until the revoked lease would have expired.
    #[command(after_help = EXIT_CODES)]
    Revoke {
        #[command(flatten)]
        store: StoreArgs,
        /// The pool.
        #[arg(long)]
        pool: String,
        /// The slot.
        #[arg(long)]
        slot: u32,
        /// Do not ask (needed when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
    /// Takes IDs apart: time, slot, counter. Reads IDs from stdin, one per
    /// line, when none is given.
    #[command(after_help = EXIT_CODES)]
    Decode {
        /// A nonce as its Display prints it (16, 24 or 32 hex digits), a
        /// u64, 0x-hex, Crockford base32, or a UUIDv7. An ID of digits only
        /// that is valid both as hex and as a decimal u64 is refused, with
        /// both readings, unless --hex or --decimal says which.
        ids: Vec<String>,
        /// Read IDs of decimal digits only as hex (what a nonce's Display prints).
        #[arg(long, conflicts_with = "decimal")]
        hex: bool,
        /// Read IDs of decimal digits only as decimal numbers.
        #[arg(long)]
        decimal: bool,
        /// The layout: default64, default96, default128 or snowflake
        /// (default: from the ID's form).
        #[arg(long)]
        layout: Option<decode::LayoutName>,
        /// A file holding the base key (its raw bytes, at least 32) of
        /// encrypted nonces.
        #[arg(long)]
        key_file: Option<PathBuf>,
    },
    /// Checks a store's setup, one line per check with a fix, and what its
    /// guards hold back (restart, promotion, and each pool's wipe guard).
    #[command(after_help = EXIT_CODES)]
    Doctor {
        #[command(flatten)]
        store: StoreArgs,
        /// The pool whose guards to read; without it, every pool the store
        /// can list (SQL), or none.
        #[arg(long)]
        pool: Option<String>,
    },
    /// Creates or migrates what the store needs (SQL: the lease table) and,
    /// with --pool, the pool's slots (--size, default 512; SQL) and its
    /// record (SQL and Valkey/Redis).
    #[command(after_help = EXIT_CODES)]
    Prepare {
        #[command(flatten)]
        store: StoreArgs,
        /// The pool.
        #[arg(long)]
        pool: Option<String>,
        /// Declare the pool new: its claims wait for nothing, also after
        /// its records were found gone (SQL: a truncated or emptied table,
        /// a pool's rows deleted, a pool never prepared on a table that was
        /// there; Valkey/Redis: FLUSHALL, FLUSHDB, a deletion of its keys,
        /// or a pool never prepared: each waits out a span otherwise). Only
        /// with every holder of the pool stopped: one still running could
        /// see its IDs issued again. Refused on Valkey/Redis while a slot of
        /// the pool has a lease.
        #[arg(long, requires = "pool")]
        new_pool: bool,
        /// Do not ask before --new-pool (needed when stdin is not a
        /// terminal).
        #[arg(long)]
        yes: bool,
    },
}

/// An error as the tool prints it: a refusal's list (lines starting `- `
/// after its first line: the settings found, the fixes, the opt-ins) one
/// item per indented line; any other multi-line message joined into one.
fn error_text(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.len() > 1 && lines[1..].iter().all(|l| l.starts_with("- ")) {
        lines.join("\n  ")
    } else {
        lines.join(" ")
    }
}

/// The environment variable that gives the store's URL.
pub(crate) const URL_VAR: &str = "LEASEHOLD_URL";

/// Where the store is.
#[derive(Args, Clone)]
pub(crate) struct StoreArgs {
    /// The store's URL: postgres://, mysql:// (MariaDB too), sqlite://FILE,
    /// redis:// or valkey://, etcd://HOST:PORT[,HOST:PORT],
    /// k8s://HOST:PORT[/NAMESPACE] (plain HTTP, e.g. kubectl proxy),
    /// k8s+https://…, or k8s:// alone for $KUBECONFIG / ~/.kube/config /
    /// in-cluster. Give the URL exactly one way: --url, --url-file, or the
    /// environment variable LEASEHOLD_URL. A password in --url shows in `ps`
    /// and the shell's history: use --url-file or LEASEHOLD_URL, or keep
    /// the password out of the URL with its option password_file=PATH
    /// (PostgreSQL, MySQL/MariaDB, Valkey/Redis, etcd).
    #[arg(long = "url", value_name = "URL")]
    pub(crate) url_arg: Option<String>,
    /// A file holding the store's URL (a trailing newline is allowed), so
    /// that a password in it stays out of `ps` and the shell's history.
    #[arg(long, value_name = "PATH")]
    pub(crate) url_file: Option<PathBuf>,
    /// The store's URL, from whichever of --url, --url-file and
    /// LEASEHOLD_URL gave it (see [`StoreArgs::resolve`]).
    #[arg(skip)]
    pub(crate) url: String,
    /// Seconds to wait for the store (connect and each request).
    #[arg(long, default_value_t = 5.0)]
    pub(crate) timeout: f64,
    /// SQL: the lease table.
    #[arg(long)]
    pub(crate) table: Option<String>,
    /// Valkey/Redis and etcd: the key prefix.
    #[arg(long)]
    pub(crate) prefix: Option<String>,
    /// Kubernetes: the namespace of the Leases.
    #[arg(long)]
    pub(crate) namespace: Option<String>,
    /// Kubernetes: a kubeconfig file (with --url k8s://).
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// The pool's size: `status` and `watch` count its never-used slots as
    /// free, and stores that look slots up one by one look up this many
    /// [default: on SQL the rows `prepare` made for the pool, elsewhere 512]
    #[arg(long)]
    pub(crate) size: Option<u32>,
}

impl std::fmt::Debug for StoreArgs {
    /// The URL redacted, as everywhere else.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreArgs")
            .field("url", &leasehold::url::redacted(&self.url))
            .field(
                "url_arg",
                &self.url_arg.as_deref().map(leasehold::url::redacted),
            )
            .field("url_file", &self.url_file)
            .field("timeout", &self.timeout)
            .field("table", &self.table)
            .field("prefix", &self.prefix)
            .field("namespace", &self.namespace)
            .field("kubeconfig", &self.kubeconfig)
            .field("size", &self.size)
            .finish()
    }
}

impl StoreArgs {
    /// The size assumed when `--size` is not given: the default pool's.
    pub(crate) const DEFAULT_SIZE: u32 = 512;

    /// Sets [`StoreArgs::url`] from the one source that gives it: `--url`,
    /// `--url-file`, or `LEASEHOLD_URL` (`env`, its value when set and not
    /// empty). None, or more than one, is a usage error naming them.
    pub(crate) fn resolve(&mut self, env: Option<String>) -> Result<(), CliError> {
        let env = env.filter(|v| !v.trim().is_empty());
        let given: Vec<&str> = [
            self.url_arg.as_ref().map(|_| "--url"),
            self.url_file.as_ref().map(|_| "--url-file"),
            env.as_ref().map(|_| URL_VAR),
        ]
        .into_iter()
        .flatten()
        .collect();
        self.url = match (given.as_slice(), &self.url_arg, &self.url_file, env) {
            ([_], Some(url), _, _) => url.clone(),
            ([_], _, Some(path), _) => read_url_file(path)?,
            ([_], _, _, Some(url)) => url,
            ([], ..) => {
                return Err(CliError::new(
                    Exit::Usage,
                    format!(
                        "no store URL: give it with --url URL, --url-file PATH or the environment \
                         variable {URL_VAR}"
                    ),
                ));
            }
            (several, ..) => {
                return Err(CliError::new(
                    Exit::Usage,
                    format!(
                        "the store URL is given {} ways ({}); give it one way: --url, --url-file \
                         or {URL_VAR}",
                        several.len(),
                        several.join(", ")
                    ),
                ));
            }
        };
        Ok(())
    }

    /// The pool's size as `--size` gives it, or the default.
    pub(crate) fn pool_size(&self) -> table::Size {
        table::Size {
            slots: self.size.unwrap_or(Self::DEFAULT_SIZE),
            from: if self.size.is_some() {
                table::SizeFrom::Flag
            } else {
                table::SizeFrom::Assumed
            },
        }
    }

    pub(crate) fn timeout(&self) -> Result<Duration, CliError> {
        if self.timeout.is_finite() && self.timeout > 0.0 && self.timeout <= 3600.0 {
            Ok(Duration::from_secs_f64(self.timeout))
        } else {
            Err(CliError::new(
                Exit::Usage,
                format!(
                    "--timeout {}: give seconds between 0 and 3600",
                    self.timeout
                ),
            ))
        }
    }
}

/// The tool, on this process's arguments, with every store of
/// `leasehold`'s registry (those added with `leasehold::register` before
/// the call included): what the `leasehold` program runs. Returns its exit
/// status (the README's exit codes).
pub fn main() -> ExitCode {
    // A bug must still end in one line, never a backtrace.
    std::panic::set_hook(Box::new(|info| {
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".into());
        eprintln!("leasehold: internal error: {what} (please report it)");
    }));
    let mut cli = Cli::parse();
    let secrets = match &mut cli.command {
        Command::Status { store, .. }
        | Command::Watch { store, .. }
        | Command::Revoke { store, .. }
        | Command::Prepare { store, .. }
        | Command::Doctor { store, .. } => {
            if let Err(e) = store.resolve(std::env::var(URL_VAR).ok()) {
                eprintln!("leasehold: {}", e.message);
                return ExitCode::from(e.code as u8);
            }
            redact::secrets(&store.url)
        }
        Command::Decode { .. } => Vec::new(),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("leasehold: cannot start: {e}");
            return ExitCode::from(Exit::Store as u8);
        }
    };
    let result = runtime.block_on(run(cli.command));
    match result {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            let text = redact::scrub(&e.message, &secrets);
            eprintln!("leasehold: {}", error_text(&text));
            ExitCode::from(e.code as u8)
        }
    }
}

/// The URL in the file at `path`, without its trailing line break (and
/// surrounding blanks).
fn read_url_file(path: &std::path::Path) -> Result<String, CliError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        CliError::new(
            Exit::Usage,
            format!(
                "--url-file {}: cannot read it ({e}); give a readable file holding the store's URL",
                path.display()
            ),
        )
    })?;
    let url = text.trim();
    if url.is_empty() {
        return Err(CliError::new(
            Exit::Usage,
            format!(
                "--url-file {}: the file is empty; write the store's URL into it",
                path.display()
            ),
        ));
    }
    if url.lines().count() > 1 {
        return Err(CliError::new(
            Exit::Usage,
            format!(
                "--url-file {}: the file holds more than one line; write the store's URL alone",
                path.display()
            ),
        ));
    }
    Ok(url.to_owned())
}

async fn run(command: Command) -> Result<Exit, CliError> {
    match command {
        Command::Status { store, pool, json } => {
            status::status(&store, pool.as_deref(), json).await
        }
        Command::Watch {
            store,
            pool,
            interval,
            count,
        } => {
            status::watch(
                &store,
                &pool,
                Duration::from_millis(interval.max(50)),
                count,
            )
            .await
        }
        Command::Revoke {
            store,
            pool,
            slot,
            yes,
        } => revoke::revoke(&store, &pool, slot, yes).await,
        Command::Decode {
            ids,
            layout,
            key_file,
            hex,
            decimal,
        } => {
            let digits = match (hex, decimal) {
                (true, _) => Some(decode::Digits::Hex),
                (_, true) => Some(decode::Digits::Decimal),
                _ => None,
            };
            decode::decode(ids, layout, key_file.as_deref(), digits)
        }
        Command::Doctor { store, pool } => doctor::doctor(&store, pool.as_deref()).await,
        Command::Prepare {
            store,
            pool,
            new_pool,
            yes,
        } => prepare::prepare(&store, pool.as_deref(), new_pool, yes).await,
    }
}
