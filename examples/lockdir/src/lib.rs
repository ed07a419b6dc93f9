#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

mod driver;
mod harness;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold::{
    AcquireError, BoxFuture, Capabilities, Check, Durability, Fence, Floor, Grant, InspectError,
    Operate, OperateError, PoolSpec, Reason, Release, Renewal, SlotInfo, Strategy, Token, Verdict,
};

pub use driver::{DRIVER, LockDirConfig, LockDirDriver};

use leasehold::drivers::Driver as _;

/// Adds [`DRIVER`] to this process's registry (`lockdir://` URLs), once:
/// a second call finds it there and does nothing.
///
/// ```
/// # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
/// let dir = std::env::temp_dir().join(format!("lockdir-doc-{}", std::process::id()));
/// leasehold_lockdir::register()?;
/// leasehold_lockdir::register()?;
/// let store = leasehold::connect(&format!("lockdir://{}", dir.display())).await?;
/// assert_eq!(store.store(), "lock directory");
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), Box<dyn std::error::Error>>(()) }).unwrap();
/// ```
pub fn register() -> Result<(), leasehold::ConnectError> {
    let added = leasehold::registry()
        .iter()
        .any(|row| row.driver.is_some_and(|d| d.schemes() == DRIVER.schemes()));
    if added {
        return Ok(());
    }
    leasehold::register(&DRIVER)
}

/// The token a revoke leaves: no holder's token is all zeros, so no
/// renewal or release matches it, and the slot stays taken until the
/// revoked lease would have expired.
const TOMBSTONE: Token = Token::from_bytes([0; 16]);

/// The lock file every call takes, in the directory.
const LOCK: &str = ".lock";

/// A pool file's name ends so.
const POOL_SUFFIX: &str = ".pool";

/// A lease store in a directory: one file per pool, read and rewritten
/// whole under the directory's lock.
#[derive(Clone, Debug)]
pub struct LockDir {
    dir: PathBuf,
    op_timeout: Duration,
    /// The wipe guard (off only for `durability=throwaway`).
    guard: bool,
}

/// A slot as its pool file keeps it. Times are Unix milliseconds on the
/// machine's wall clock.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct SlotRecord {
    fence: u64,
    floor: u64,
    acquired: u64,
    renewed: u64,
    expires: u64,
    token: Option<Token>,
    holder: String,
}

/// A pool file: the ID format its holders declared, when its claims grant
/// again (its wipe guard), and its slots.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct PoolFile {
    format: Option<String>,
    held_back_until: u64,
    slots: Vec<SlotRecord>,
}

impl PoolFile {
    fn parse(text: &str) -> Result<Self, String> {
        let mut file = PoolFile::default();
        for line in text.lines() {
            let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
            match key {
                "format" => file.format = Some(rest.to_owned()),
                "held-back-until" => file.held_back_until = number(rest)?,
                "slot" => {
                    // fence floor acquired renewed expires token holder…
                    let mut f = rest.splitn(7, ' ');
                    let mut next = || f.next().ok_or_else(|| format!("short slot line {line:?}"));
                    let fence = number(next()?)?;
                    let floor = number(next()?)?;
                    let acquired = number(next()?)?;
                    let renewed = number(next()?)?;
                    let expires = number(next()?)?;
                    let token = match next()? {
                        "-" => None,
                        hex => Some(Token::from_hex(hex).ok_or("a token that is not hex")?),
                    };
                    let holder = f.next().unwrap_or_default().to_owned();
                    file.slots.push(SlotRecord {
                        fence,
                        floor,
                        acquired,
                        renewed,
                        expires,
                        token,
                        holder,
                    });
                }
                "" => {}
                other => return Err(format!("unknown line {other:?}")),
            }
        }
        Ok(file)
    }

    fn text(&self) -> String {
        let mut out = String::new();
        if let Some(format) = &self.format {
            out.push_str(&format!("format {format}\n"));
        }
        out.push_str(&format!("held-back-until {}\n", self.held_back_until));
        for s in &self.slots {
            let token = s.token.map_or_else(|| "-".to_owned(), |t| t.to_hex());
            out.push_str(&format!(
                "slot {} {} {} {} {} {token} {}\n",
                s.fence, s.floor, s.acquired, s.renewed, s.expires, s.holder
            ));
        }
        out
    }
}

fn number(text: &str) -> Result<u64, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))
}

/// The machine's wall clock, in Unix milliseconds: the store's clock.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The machine's wall clock, in Unix microseconds: where fences start.
fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What one call does under the lock, with the pool file's state on disk
/// (`None`: no file).
enum Change<T> {
    /// Nothing to write.
    Keep(T),
    /// Write the pool file so, then answer.
    Write(PoolFile, T),
}

impl LockDir {
    /// The store in `dir`, made if it is not there.
    pub fn open(dir: impl Into<PathBuf>, op_timeout: Duration) -> io::Result<Self> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(LOCK))?;
        Ok(Self {
            dir,
            op_timeout,
            guard: true,
        })
    }

    /// Turns the wipe guard off (`false`) or on: with it off, a claim that
    /// finds its pool's file gone grants at once, and a slot whose holder
    /// still generates can be granted again. Only for a directory nobody
    /// deletes a pool file of while leases are held (tests; the fault
    /// campaign's control run). `durability=throwaway` says the same.
    pub fn with_wipe_guard(mut self, on: bool) -> Self {
        self.guard = on;
        self
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn pool_path(&self, pool: &str) -> PathBuf {
        self.dir.join(format!("{pool}{POOL_SUFFIX}"))
    }

    /// Runs `f` on the directory under its exclusive lock, on a thread that
    /// may block, bounded by the operation timeout (a call still waiting
    /// then answers an error; what it wrote, if it got the lock, stands, as
    /// with a store whose answer was lost on the network).
    async fn locked<T: Send + 'static>(
        &self,
        f: impl FnOnce(&LockDir) -> Result<T, String> + Send + 'static,
    ) -> Result<T, String> {
        let this = self.clone();
        let work = tokio::task::spawn_blocking(move || {
            let lock = File::open(this.dir.join(LOCK))
                .map_err(|e| format!("{}: {e}", this.dir.display()))?;
            lock.lock()
                .map_err(|e| format!("lock {}: {e}", this.dir.display()))?;
            let answer = f(&this);
            drop(lock);
            answer
        });
        match tokio::time::timeout(self.op_timeout, work).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(join)) => Err(format!("the call on {} failed: {join}", self.dir.display())),
            Err(_) => Err(format!(
                "no answer from {} within {:?}",
                self.dir.display(),
                self.op_timeout
            )),
        }
    }

    /// Reads `pool`'s file (`None`: there is none). Under the lock.
    fn read(&self, pool: &str) -> Result<Option<PoolFile>, String> {
        let path = self.pool_path(pool);
        match fs::read_to_string(&path) {
            Ok(text) => PoolFile::parse(&text)
                .map(Some)
                .map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// Writes `pool`'s file durably: a new file, flushed, renamed over the
    /// old one, and the directory flushed. Under the lock.
    fn write(&self, pool: &str, file: &PoolFile) -> Result<(), String> {
        let path = self.pool_path(pool);
        let new = self.dir.join(format!(".{pool}{POOL_SUFFIX}.new"));
        let io = || -> io::Result<()> {
            let mut f = File::create(&new)?;
            f.write_all(file.text().as_bytes())?;
            f.sync_all()?;
            fs::rename(&new, &path)?;
            File::open(&self.dir)?.sync_all()
        };
        io().map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Reads `pool`'s file, applies `f` (with the store's clock reading),
    /// and writes what it changed: one call's whole work under the lock.
    async fn update<T: Send + 'static>(
        &self,
        pool: &PoolSpec,
        f: impl FnOnce(Option<PoolFile>, u64) -> Change<T> + Send + 'static,
    ) -> Result<T, String> {
        let name = pool.name().as_str().to_owned();
        self.locked(move |this| {
            let now = now_ms();
            match f(this.read(&name)?, now) {
                Change::Keep(answer) => Ok(answer),
                Change::Write(file, answer) => this.write(&name, &file).map(|()| answer),
            }
        })
        .await
    }

    /// The pool names the directory holds files of, sorted.
    fn pool_names(&self) -> Result<Vec<String>, String> {
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(|e| format!("{}: {e}", self.dir.display()))? {
            let name = entry.map_err(|e| e.to_string())?.file_name();
            let name = name.to_string_lossy();
            if let Some(pool) = name.strip_suffix(POOL_SUFFIX)
                && !name.starts_with('.')
            {
                names.push(pool.to_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    /// Revokes the lease on `slot` of `pool` without ever granting the slot
    /// twice (see [`Operate::revoke`]).
    pub async fn revoke_slot(&self, pool: &PoolSpec, slot: u32) -> Result<bool, String> {
        self.update(pool, move |file, now| {
            let Some(mut file) = file else {
                return Change::Keep(false);
            };
            match file.slots.get_mut(slot as usize) {
                Some(s) if s.token.is_some_and(|t| t != TOMBSTONE) && s.expires > now => {
                    s.token = Some(TOMBSTONE);
                    Change::Write(file, true)
                }
                _ => Change::Keep(false),
            }
        })
        .await
    }

    /// Records `pool`'s file where it is missing: held back for the pool's
    /// restart span (a pool whose file is gone may have holders still
    /// generating), or not at all for a pool declared `new`. Answers how
    /// long claims are still held back.
    async fn ensure(&self, pool: &PoolSpec, new: bool) -> Result<Option<Duration>, String> {
        let span = ms(pool.restart_span());
        self.update(pool, move |file, now| match file {
            Some(file) => Change::Keep(
                (file.held_back_until > now)
                    .then(|| Duration::from_millis(file.held_back_until - now)),
            ),
            None => {
                let held_back_until = if new { 0 } else { now.saturating_add(span) };
                let file = PoolFile {
                    held_back_until,
                    ..PoolFile::default()
                };
                Change::Write(file, (!new).then(|| Duration::from_millis(span)))
            }
        })
        .await
    }
}

impl Strategy for LockDir {
    async fn acquire(&self, pool: &PoolSpec, ceiling: Floor) -> Result<Grant, AcquireError> {
        let spec = pool.clone();
        let span = if self.guard {
            ms(pool.restart_span())
        } else {
            0
        };
        let answer = self
            .update(pool, move |file, now| {
                let file = match file {
                    Some(file) => Some(file),
                    // With the guard off, a missing file is a new pool.
                    None if span == 0 => Some(PoolFile::default()),
                    None => None,
                };
                let Some(mut file) = file else {
                    // No file: a new pool, or one deleted while its holders
                    // may still run. The store cannot tell them apart.
                    let file = PoolFile {
                        held_back_until: now.saturating_add(span),
                        ..PoolFile::default()
                    };
                    let resume_in = Duration::from_millis(span);
                    return Change::Write(file, Err(AcquireError::StoreRestarted { resume_in }));
                };
                if file.held_back_until > now {
                    let resume_in = Duration::from_millis(file.held_back_until - now);
                    return Change::Keep(Err(AcquireError::StoreRestarted { resume_in }));
                }
                if let Some(ours) = spec.id_format() {
                    match &file.format {
                        Some(recorded) if recorded != ours.text() => {
                            return Change::Keep(Err(AcquireError::OtherIdFormat {
                                pool: spec.name().to_string(),
                                recorded: recorded.clone(),
                                ours: ours.text().to_owned(),
                            }));
                        }
                        Some(_) => {}
                        None => file.format = Some(ours.text().to_owned()),
                    }
                }
                let size = spec.size() as usize;
                if file.slots.len() < size {
                    file.slots.resize(size, SlotRecord::default());
                }
                let Some((slot, s)) = file
                    .slots
                    .iter_mut()
                    .take(size)
                    .enumerate()
                    .find(|(_, s)| s.token.is_none() || s.expires <= now)
                else {
                    return Change::Keep(Err(AcquireError::PoolExhausted {
                        pool: spec.name().to_string(),
                        size: spec.size(),
                    }));
                };
                let token = Token::random();
                let before = Floor(s.floor);
                *s = SlotRecord {
                    // Above every fence before, also those a deleted pool
                    // file took with it (DESIGN.md rule 7): the clock has
                    // passed them all by the time the wipe guard lets a
                    // claim in.
                    fence: (s.fence + 1).max(now_us()),
                    floor: s.floor.max(ceiling.0),
                    acquired: now,
                    renewed: now,
                    expires: now.saturating_add(ms(spec.ttl())),
                    token: Some(token),
                    holder: spec.holder().to_owned(),
                };
                let grant = Grant::new(
                    u32::try_from(slot).unwrap_or(u32::MAX),
                    token,
                    Fence(s.fence),
                    spec.ttl(),
                )
                .with_floor(before)
                .with_store_time(Duration::from_millis(now));
                Change::Write(file, Ok(grant))
            })
            .await;
        answer.unwrap_or_else(|e| Err(AcquireError::Unreachable(Reason::new(e))))
    }

    async fn renew(&self, pool: &PoolSpec, grant: &Grant, ceiling: Floor) -> Renewal {
        let (ttl, slot, token) = (pool.ttl(), grant.slot, grant.token);
        let name = pool.name().to_string();
        let answer = self
            .update(pool, move |file, now| {
                let mut file = file.unwrap_or_default();
                match file.slots.get_mut(slot as usize) {
                    Some(s) if s.token == Some(token) && s.expires > now => {
                        s.expires = now.saturating_add(ms(ttl));
                        s.renewed = now;
                        s.floor = s.floor.max(ceiling.0);
                        let renewed =
                            Renewal::renewed(ttl).with_store_time(Duration::from_millis(now));
                        Change::Write(file, renewed)
                    }
                    _ => Change::Keep(Renewal::Lost(Reason::new(format!(
                        "slot {slot} of pool {name} is no longer held by this token (expired, \
                         taken, revoked or its file deleted)"
                    )))),
                }
            })
            .await;
        answer.unwrap_or_else(|e| Renewal::Retry(Reason::new(e)))
    }

    async fn release(&self, pool: &PoolSpec, grant: &Grant, issued: Floor) -> Release {
        let (slot, token) = (grant.slot, grant.token);
        let answer = self
            .update(pool, move |file, now| {
                let mut file = file.unwrap_or_default();
                match file.slots.get_mut(slot as usize) {
                    Some(s) if s.token == Some(token) && s.expires > now => {
                        s.token = None;
                        s.floor = issued.0;
                        Change::Write(file, Release::Released)
                    }
                    _ => Change::Keep(Release::NotHeld),
                }
            })
            .await;
        answer.unwrap_or_else(|e| Release::Retry(Reason::new(e)))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::coordinated(false, Duration::from_millis(100))
            .with_persisted_floor()
            .with_inspect()
    }

    fn identity(&self) -> String {
        format!("lockdir:{}", self.dir.display())
    }

    async fn inspect(&self, pool: &PoolSpec) -> Result<Vec<SlotInfo>, InspectError> {
        let name = pool.name().as_str().to_owned();
        let size = pool.size() as usize;
        self.locked(move |this| Ok((this.read(&name)?, now_ms())))
            .await
            .map(|(file, now)| {
                let left = |until: u64| Duration::from_millis(until.saturating_sub(now));
                let slots = file.map(|f| f.slots).unwrap_or_default();
                slots
                    .iter()
                    .take(size)
                    .enumerate()
                    .filter(|(_, s)| s.fence > 0)
                    .map(|(i, s)| {
                        let info = SlotInfo::free(
                            u32::try_from(i).unwrap_or(u32::MAX),
                            Fence(s.fence),
                            Floor(s.floor),
                        );
                        match s.token {
                            Some(TOMBSTONE) if s.expires > now => {
                                info.revoked_until(left(s.expires))
                            }
                            Some(t) if s.expires > now => {
                                info.held(s.holder.clone(), &t, left(s.expires)).with_ages(
                                    Some(Duration::from_millis(now.saturating_sub(s.renewed))),
                                    Some(Duration::from_millis(now.saturating_sub(s.acquired))),
                                )
                            }
                            _ => info,
                        }
                    })
                    .collect()
            })
            .map_err(|e| InspectError::Store(Reason::new(e)))
    }
}

fn operate_error(e: String) -> OperateError {
    OperateError::Unreachable(Reason::new(e))
}

impl Operate for LockDir {
    fn describe(&self) -> String {
        format!("lock directory {}", self.dir.display())
    }

    fn round_trip(&self) -> &'static str {
        "lock of the directory"
    }

    fn durability(&self) -> Durability {
        // Every change is flushed to the disk before it is answered.
        Durability::default()
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), OperateError>> {
        Box::pin(async move { self.locked(|_| Ok(())).await.map_err(operate_error) })
    }

    fn revoke<'a>(
        &'a self,
        pool: &'a PoolSpec,
        slot: u32,
    ) -> BoxFuture<'a, Result<bool, OperateError>> {
        Box::pin(async move { self.revoke_slot(pool, slot).await.map_err(operate_error) })
    }

    fn pools(&self) -> BoxFuture<'_, Result<Vec<String>, OperateError>> {
        Box::pin(async move {
            self.locked(|this| this.pool_names())
                .await
                .map_err(operate_error)
        })
    }

    fn prepare<'a>(
        &'a self,
        pool: Option<&'a PoolSpec>,
    ) -> BoxFuture<'a, Result<Option<Duration>, OperateError>> {
        Box::pin(async move {
            match pool {
                Some(pool) => self.ensure(pool, false).await.map_err(operate_error),
                None => Ok(None),
            }
        })
    }

    fn prepare_new_pool<'a>(
        &'a self,
        pool: &'a PoolSpec,
    ) -> BoxFuture<'a, Result<(), OperateError>> {
        Box::pin(async move {
            self.ensure(pool, true)
                .await
                .map(drop)
                .map_err(operate_error)
        })
    }

    fn checks(&self) -> BoxFuture<'_, Vec<Check>> {
        Box::pin(async move {
            let reached = self.locked(|_| Ok(())).await;
            vec![
                match reached {
                    Ok(()) => Check::new(Verdict::Ok, "server", self.describe()),
                    Err(e) => Check::new(Verdict::Fail, "server", e),
                },
                Check::new(
                    Verdict::Ok,
                    "path",
                    "one exclusive lock of the directory per call; expiry on this machine's \
                     wall clock, which every holder shares",
                ),
                Check::new(
                    Verdict::Ok,
                    "durability",
                    "every change is flushed to the disk (file and directory) before it is \
                     answered",
                ),
            ]
        })
    }
}
