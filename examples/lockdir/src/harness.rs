//! The fault campaign's [`Harness`] on a lock directory: fenced writes to
//! one file per resource, checked and logged under the directory's lock,
//! and the wipe of pools' files.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::PathBuf;

use leasehold::BoxFuture;
use leasehold::drivers::{Harness, resource};

use crate::{LOCK, POOL_SUFFIX};

/// The harness on the directory `dir`.
pub(crate) fn open(dir: PathBuf) -> Result<Box<dyn Harness>, String> {
    // The directory and its lock file, as a connect makes them.
    crate::LockDir::open(&dir, std::time::Duration::from_secs(2))
        .and_then(|_| fs::create_dir_all(dir.join("fences")))
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(Box::new(LockDirHarness { dir }))
}

struct LockDirHarness {
    dir: PathBuf,
}

impl LockDirHarness {
    /// Runs `f` under the directory's lock, on a thread that may block.
    fn locked<T: Send + 'static>(
        &self,
        f: impl FnOnce(&PathBuf) -> io::Result<T> + Send + 'static,
    ) -> BoxFuture<'static, Result<T, String>> {
        let dir = self.dir.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let lock = File::open(dir.join(LOCK))?;
                lock.lock()?;
                f(&dir)
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())
        })
    }
}

/// A resource's last accepted fence, and its log of accepted fences.
fn files(dir: &std::path::Path, resource: &str) -> (PathBuf, PathBuf) {
    let fences = dir.join("fences");
    (
        fences.join(format!("{resource}.last")),
        fences.join(format!("{resource}.log")),
    )
}

impl Harness for LockDirHarness {
    fn prepare_fences<'a>(
        &'a self,
        pools: &'a [String],
        slots: u32,
    ) -> BoxFuture<'a, Result<(), String>> {
        let pools = pools.to_vec();
        self.locked(move |dir| {
            for pool in &pools {
                for slot in 0..slots {
                    let (last, log) = files(dir, &resource(pool, slot));
                    for file in [last, log] {
                        match fs::remove_file(file) {
                            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                            _ => {}
                        }
                    }
                }
            }
            Ok(())
        })
    }

    fn fenced_write<'a>(
        &'a self,
        pool: &'a str,
        slot: u32,
        fence: u64,
    ) -> BoxFuture<'a, Result<bool, String>> {
        let resource = resource(pool, slot);
        self.locked(move |dir| {
            let (last, log) = files(dir, &resource);
            let before = match fs::read_to_string(&last) {
                Ok(text) => text.trim().parse::<u64>().unwrap_or(0),
                Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
                Err(e) => return Err(e),
            };
            if fence < before {
                return Ok(false);
            }
            let mut f = OpenOptions::new().create(true).append(true).open(log)?;
            writeln!(f, "{fence}")?;
            f.sync_all()?;
            fs::write(&last, fence.to_string())?;
            Ok(true)
        })
    }

    fn accepted_fences<'a>(
        &'a self,
        pools: &'a [String],
        slots: u32,
    ) -> BoxFuture<'a, Result<BTreeMap<String, Vec<u64>>, String>> {
        let pools = pools.to_vec();
        self.locked(move |dir| {
            let mut out = BTreeMap::new();
            for pool in &pools {
                for slot in 0..slots {
                    let resource = resource(pool, slot);
                    let (_, log) = files(dir, &resource);
                    let fences = match fs::read_to_string(&log) {
                        Ok(text) => text.lines().filter_map(|l| l.trim().parse().ok()).collect(),
                        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
                        Err(e) => return Err(e),
                    };
                    out.insert(resource, fences);
                }
            }
            Ok(out)
        })
    }

    fn wipe<'a>(&'a self, pools: &'a [String]) -> BoxFuture<'a, Result<(), String>> {
        let pools = pools.to_vec();
        self.locked(move |dir| {
            for pool in &pools {
                match fs::remove_file(dir.join(format!("{pool}{POOL_SUFFIX}"))) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
            Ok(())
        })
    }
}
