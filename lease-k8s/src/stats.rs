//! Request counts for the benchmark (feature `stats`; not part of the
//! production API).

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default)]
pub(crate) struct Counters {
    acquisitions: AtomicU64,
    acquire_requests: AtomicU64,
    max_acquire_requests: AtomicU64,
    /// Acquisitions by round trips: index n counts those that took n.
    histogram: [AtomicU64; 16],
}

impl Counters {
    pub(crate) fn acquired(&self, sent: u32) {
        let sent = u64::from(sent);
        self.acquisitions.fetch_add(1, Ordering::Relaxed);
        self.acquire_requests.fetch_add(sent, Ordering::Relaxed);
        self.max_acquire_requests.fetch_max(sent, Ordering::Relaxed);
        let i = usize::try_from(sent).unwrap_or(15).min(15);
        self.histogram[i].fetch_add(1, Ordering::Relaxed);
    }
}

/// Request counts since connect.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Every request sent (each is one round trip).
    pub requests: u64,
    /// Successful acquisitions.
    pub acquisitions: u64,
    /// Requests sent by successful acquisitions.
    pub acquire_requests: u64,
    /// The most requests one successful acquisition needed.
    pub max_acquire_requests: u64,
    /// `histogram[n]`: successful acquisitions that took n round trips
    /// (the last bucket holds 15 and more).
    pub histogram: [u64; 16],
}

impl Counters {
    /// The counts so far; `requests` counts every request sent.
    pub(crate) fn read(&self, requests: &AtomicU64) -> Stats {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            requests: load(requests),
            acquisitions: load(&self.acquisitions),
            acquire_requests: load(&self.acquire_requests),
            max_acquire_requests: load(&self.max_acquire_requests),
            histogram: std::array::from_fn(|i| load(&self.histogram[i])),
        }
    }
}
