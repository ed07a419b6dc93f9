//! Runs the suite as individually named tests (libtest-mimic) and writes a
//! per-backend report for `cargo xtask test`.

use std::any::Any;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};

use leasehold_core::{BoxFuture, Capabilities};
use libtest_mimic::{Arguments, Failed, Trial};

use crate::glue::Glue;
use crate::servers::Missing;

/// One backend to run the suite against.
pub struct Target {
    /// The test-name prefix and report name: `postgres15`, `memory`, ...
    pub label: String,
    /// What server it runs on, for the report: `redis8 8.2.3 (local binary …)`.
    pub server: String,
    /// The backend, or why no server could be had. What it can do (which
    /// behaviours run) is read from the strategy it connects.
    pub backend: Result<Arc<dyn Glue>, Missing>,
    /// Whether it can delete a lease behind its holder's back.
    pub can_revoke: bool,
    /// Extra backend-specific tests: `(name, test)`.
    pub extra: Vec<(String, ExtraTest)>,
    /// No machine of this project's kind can provide the server (a real
    /// Kubernetes cluster): reported as skipped, never passed, under CI too.
    pub optional: bool,
}

/// A backend-specific test run with the target's backend, inside its own
/// runtime. Register one with [`Target::with_test`] or [`trials!`](crate::trials).
pub type ExtraTest =
    Arc<dyn Fn(Arc<dyn Glue>) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

impl Target {
    /// A target for `backend`. Its capabilities are read from a strategy it
    /// connects when the run starts.
    pub fn new<B: Glue>(
        label: impl Into<String>,
        server: impl Into<String>,
        backend: Arc<B>,
    ) -> Self {
        Self {
            label: label.into(),
            server: server.into(),
            backend: Ok(backend),
            can_revoke: false,
            extra: Vec::new(),
            optional: false,
        }
    }

    /// A target whose server could not be provided. Under `CI=true` it fails;
    /// elsewhere it is reported as ignored (never as passed).
    pub fn missing(label: impl Into<String>, missing: Missing) -> Self {
        Self {
            label: label.into(),
            server: format!("{} (missing)", missing.kind),
            backend: Err(missing),
            can_revoke: false,
            extra: Vec::new(),
            optional: false,
        }
    }

    /// A target whose server no machine of this project's kind can provide
    /// (a real Kubernetes cluster): it is reported as skipped, never as
    /// passed, under `CI=true` too. The report's origin reads `skipped`.
    pub fn skipped(label: impl Into<String>, missing: Missing) -> Self {
        let mut target = Self::missing(label, missing);
        target.server = target.server.replace("(missing)", "(skipped)");
        target.optional = true;
        target
    }

    /// Marks the backend as able to revoke leases.
    pub fn with_revoke(mut self) -> Self {
        self.can_revoke = true;
        self
    }

    /// Adds a backend-specific test: `test` gets the backend this target was
    /// built with, as its concrete type `B`. A `B` that is not the target's
    /// backend type fails the test, naming both.
    pub fn with_test<B, F, Fut>(mut self, name: &str, test: F) -> Self
    where
        B: Glue,
        F: Fn(Arc<B>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        let owner = name.to_owned();
        self.extra.push((
            name.to_owned(),
            Arc::new(move |backend: Arc<dyn Glue>| -> BoxFuture<'static, _> {
                let any: Arc<dyn Any + Send + Sync> = backend;
                match any.downcast::<B>() {
                    Ok(backend) => Box::pin(test(backend)),
                    Err(_) => {
                        let msg = format!(
                            "{owner} is written for backend {} but this target's backend \
                             is another type",
                            std::any::type_name::<B>()
                        );
                        Box::pin(async move { Err(msg) })
                    }
                }
            }),
        ));
        self
    }
}

#[derive(Default, Clone, Copy)]
struct Tally {
    passed: u32,
    failed: u32,
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// True when running under CI (`CI=true`): a missing server is then a failure.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// Runs every selected behaviour of every target, then writes
/// `$LEASEHOLD_REPORT_DIR/<label>.tsv` lines when that variable is set.
///
/// Arguments it rejects (or `--help`) are answered on the terminal and
/// returned as the exit code, never by exiting the process: the caller's
/// servers, started before, are then still stopped as it returns (an exit
/// runs no destructor and would leave them running).
pub fn run(targets: Vec<Target>) -> ExitCode {
    run_with(std::env::args_os(), targets)
}

/// [`run`] with the command line `args` (the program's name first).
fn run_with<I>(args: I, targets: Vec<Target>) -> ExitCode
where
    I: IntoIterator,
    I::Item: Into<OsString> + Clone,
{
    let args = match <Arguments as clap::Parser>::try_parse_from(args) {
        Ok(args) => args,
        Err(rejected) => {
            let _ = rejected.print();
            return ExitCode::from(u8::try_from(rejected.exit_code()).unwrap_or(2));
        }
    };
    let tallies: Arc<Mutex<BTreeMap<String, Tally>>> = Arc::default();
    let mut trials = Vec::new();
    let mut servers = BTreeMap::new();
    for target in &targets {
        servers.insert(target.label.clone(), target.server.clone());
        tallies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(target.label.clone(), Tally::default());
        let backend = match &target.backend {
            Ok(b) => b.clone(),
            Err(missing) => {
                let msg = missing.to_string();
                let label = target.label.clone();
                let t = tallies.clone();
                let ci = in_ci() && !target.optional;
                let trial = Trial::test(format!("{}::server_available", target.label), move || {
                    record(&t, &label, false);
                    Err(Failed::from(msg.clone()))
                });
                // Outside CI a missing server is reported as ignored, never passed.
                trials.push(if ci {
                    trial
                } else {
                    trial.with_ignored_flag(true)
                });
                continue;
            }
        };
        let caps = match capabilities(&backend) {
            Ok(caps) => caps,
            Err(e) => {
                // The server was provided but no strategy connects to it: one
                // failure that says so, instead of every behaviour failing.
                let label = target.label.clone();
                let t = tallies.clone();
                trials.push(Trial::test(format!("{label}::connect"), move || {
                    record(&t, &label, false);
                    Err(Failed::from(format!("cannot connect a strategy: {e}")))
                }));
                continue;
            }
        };
        let mut tests: Vec<(String, ExtraTest)> = crate::suite::select(&caps, target.can_revoke)
            .into_iter()
            .map(|b| {
                let run = b.run;
                let f: ExtraTest = Arc::new(move |backend| run(backend));
                (b.name.to_owned(), f)
            })
            .collect();
        tests.extend(target.extra.iter().cloned());
        for (name, test) in tests {
            let backend = backend.clone();
            let label = target.label.clone();
            let t = tallies.clone();
            trials.push(Trial::test(format!("{label}::{name}"), move || {
                let result =
                    run_judged(&label, &name, || runtime().block_on(test(backend.clone())));
                record(&t, &label, result.is_ok());
                result.map_err(Failed::from)
            }));
        }
    }
    let conclusion = libtest_mimic::run(&args, trials);
    if let Some(dir) = std::env::var_os("LEASEHOLD_REPORT_DIR").map(PathBuf::from) {
        let _ = std::fs::create_dir_all(&dir);
        let tallies = tallies.lock().unwrap_or_else(PoisonError::into_inner);
        for (label, tally) in tallies.iter() {
            let server = servers.get(label).cloned().unwrap_or_default();
            let line = format!("{label}\t{server}\t{}\t{}\n", tally.passed, tally.failed);
            let _ = std::fs::write(dir.join(format!("{label}.tsv")), line);
        }
    }
    drop(targets);
    conclusion.exit_code()
}

/// Runs a test, again (on a fresh pool) while it comes back starved: the
/// machine stalled past a lease's TTL, so the outcome proved nothing. A test
/// starved on every attempt fails.
fn run_judged(
    label: &str,
    name: &str,
    mut run: impl FnMut() -> Result<(), String>,
) -> Result<(), String> {
    use crate::suite::{STARVED, STARVED_ATTEMPTS};
    let mut last = String::new();
    for attempt in 1..=STARVED_ATTEMPTS {
        match run() {
            Err(e) if e.starts_with(STARVED) => {
                eprintln!("{label}::{name}: attempt {attempt}/{STARVED_ATTEMPTS} {e}; again");
                last = e;
            }
            other => return other,
        }
    }
    Err(format!(
        "{last} — starved on all {STARVED_ATTEMPTS} attempts: the machine never stayed responsive for one TTL, or the lease is really lost"
    ))
}

/// What the backend's store can do, read from a strategy connected to it.
fn capabilities(backend: &Arc<dyn Glue>) -> Result<Capabilities, String> {
    runtime().block_on(async {
        let store = backend.connect().await?;
        Ok(store.capabilities_dyn())
    })
}

fn record(tallies: &Mutex<BTreeMap<String, Tally>>, label: &str, ok: bool) {
    let mut map = tallies.lock().unwrap_or_else(PoisonError::into_inner);
    let tally = map.entry(label.to_owned()).or_default();
    if ok {
        tally.passed += 1;
    } else {
        tally.failed += 1;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use leasehold_core::BoxFuture;

    use super::*;
    use crate::Store;

    /// A backend that notes when it is dropped, as a server would be stopped.
    struct Noted(Arc<AtomicBool>);

    impl Glue for Noted {
        fn connect(&self) -> BoxFuture<'_, Result<Store, String>> {
            Box::pin(async { Err("never connected".to_owned()) })
        }
    }

    impl Drop for Noted {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// A bad argument is answered with an exit code, after the targets are
    /// dropped, and the call returns: a caller's servers are stopped too.
    #[test]
    fn rejected_arguments_return_and_drop_the_targets() {
        let dropped = Arc::new(AtomicBool::new(false));
        let target = Target::new("noted", "nothing", Arc::new(Noted(dropped.clone())));
        let code = run_with(["conformance", "--no-such-flag"], vec![target]);
        assert!(
            dropped.load(Ordering::SeqCst),
            "the target outlived the refusal"
        );
        assert_eq!(format!("{code:?}"), format!("{:?}", ExitCode::from(2)));
    }
}
