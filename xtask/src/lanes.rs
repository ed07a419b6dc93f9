//! Commands run with their output in a log file of their own, one after
//! another or in lanes (threads, each taking the next command of one queue),
//! with one line per command as it ends and, for a failure, what failed.

use std::collections::VecDeque;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A command and the file its output goes to.
pub(crate) struct Job {
    pub(crate) name: String,
    pub(crate) cmd: Command,
    pub(crate) log: PathBuf,
}

/// How a job ended.
pub(crate) struct Outcome {
    pub(crate) name: String,
    pub(crate) ok: bool,
    pub(crate) took: Duration,
}

/// Runs `job` to its end, its stdout and stderr into its log.
fn run(mut job: Job) -> (Outcome, String) {
    let start = Instant::now();
    let status = (|| {
        if let Some(dir) = job.log.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let file =
            std::fs::File::create(&job.log).map_err(|e| format!("{}: {e}", job.log.display()))?;
        let copy = file.try_clone().map_err(|e| e.to_string())?;
        job.cmd
            .stdout(file)
            .stderr(copy)
            .status()
            .map_err(|e| format!("cannot run {:?}: {e}", job.cmd.get_program()))
    })();
    let (ok, said) = match status {
        Ok(s) if s.success() => (true, String::new()),
        Ok(s) => (false, s.to_string()),
        Err(e) => (false, e),
    };
    let outcome = Outcome {
        name: job.name,
        ok,
        took: start.elapsed(),
    };
    (outcome, said)
}

/// Prints the line of a finished job (`progress` follows its time) and, if
/// it failed, what its log says failed.
fn report(outcome: &Outcome, said: &str, log: &Path, progress: &str) {
    // One lock for the whole report: lines of lanes ending at once never mix.
    let mut err = std::io::stderr().lock();
    let _ = writeln!(
        err,
        "    {:<6} {:<44} {:>7.1?}  {progress}",
        if outcome.ok { "ok" } else { "FAILED" },
        outcome.name,
        outcome.took,
    );
    if outcome.ok {
        return;
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let _ = writeln!(
        err,
        "    ---- {} failed ({said}); from {} ----",
        outcome.name,
        log.display()
    );
    for line in failure_tail(&text) {
        let _ = writeln!(err, "    {line}");
    }
    let _ = writeln!(err, "    ---- end of {} ----", outcome.name);
}

/// Runs `job` alone: its line, and what failed.
pub(crate) fn run_logged(job: Job) -> Outcome {
    let log = job.log.clone();
    let (outcome, said) = run(job);
    report(&outcome, &said, &log, &format!("(log {})", log.display()));
    outcome
}

/// Runs `jobs` in `lanes` threads, each taking the next job of the queue
/// (in the order given) when its last one ends; every job runs whatever the
/// others did. The outcomes in the order the jobs ended.
pub(crate) fn run_in_lanes(jobs: Vec<Job>, lanes: usize) -> Vec<Outcome> {
    let total = jobs.len();
    let queue = Mutex::new(VecDeque::from(jobs));
    let outcomes = Mutex::new(Vec::with_capacity(total));
    let busy = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..lanes {
            s.spawn(|| {
                loop {
                    let Some(job) = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front()
                    else {
                        break;
                    };
                    let log = job.log.clone();
                    busy.fetch_add(1, Ordering::SeqCst);
                    let (outcome, said) = run(job);
                    let others = busy.fetch_sub(1, Ordering::SeqCst) - 1;
                    let mut done = outcomes.lock().unwrap_or_else(|e| e.into_inner());
                    let progress = format!(
                        "[{}/{total} done, {others} of {lanes} lanes busy]",
                        done.len() + 1
                    );
                    report(&outcome, &said, &log, &progress);
                    done.push(outcome);
                }
            });
        }
    });
    outcomes.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// Lines of a failed job's log to act on without opening it: the tests
/// that failed (`test NAME ... FAILED`), then libtest's `failures:` section
/// (each failed test's output and panic, then their names); without such a
/// section (a crash, a build, a step that is no test binary) the log's last
/// lines. A long section keeps its head and its end.
pub(crate) fn failure_tail(text: &str) -> Vec<&str> {
    const HEAD: usize = 150;
    const END: usize = 30;
    let lines: Vec<&str> = text.lines().collect();
    let mut tail: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("test ") && l.ends_with(" ... FAILED"))
        .collect();
    let section = match lines.iter().position(|l| l.trim_end() == "failures:") {
        Some(i) => &lines[i..],
        None => &lines[lines.len().saturating_sub(END)..],
    };
    if section.len() > HEAD + END {
        tail.extend(&section[..HEAD]);
        tail.push("[… lines left out; the whole output is in the log …]");
        tail.extend(&section[section.len() - END..]);
    } else {
        tail.extend(section);
    }
    tail
}

#[cfg(test)]
mod tests {
    use super::failure_tail;

    #[test]
    fn a_failed_test_binary_shows_its_failed_tests_and_their_panics() {
        let log = "\nrunning 3 tests\ntest a ... ok\ntest b ... FAILED\ntest c ... ok\n\n\
                   failures:\n\n---- b stdout ----\nthread 'b' panicked at src/lib.rs:9:5:\n\
                   assertion failed: 1 == 2\n\n\nfailures:\n    b\n\n\
                   test result: FAILED. 2 passed; 1 failed; 0 ignored\n";
        let tail = failure_tail(log);
        assert_eq!(tail[0], "test b ... FAILED");
        assert_eq!(tail[1], "failures:");
        assert!(tail.contains(&"assertion failed: 1 == 2"));
        assert_eq!(
            tail.last(),
            Some(&"test result: FAILED. 2 passed; 1 failed; 0 ignored")
        );
        assert!(!tail.contains(&"test a ... ok"));
    }

    #[test]
    fn a_crash_shows_the_last_lines() {
        let log: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let tail = failure_tail(&log);
        assert_eq!(tail.len(), 30);
        assert_eq!(tail.last(), Some(&"line 99"));
    }
}
