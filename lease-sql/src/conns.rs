//! The few connections the lease operations own.
//!
//! Not a sqlx `Pool`: sqlx 0.8 pings every connection when it goes back to a
//! pool, one more round trip after every statement. Here a connection is
//! taken out of its slot while in use and put back only after the operation
//! succeeded; an operation that failed or was cancelled (timed out) drops its
//! connection, so no half-read answer or open transaction is ever reused.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Mutex, MutexGuard};

pub(crate) struct Conns<C> {
    slots: Vec<Mutex<Option<C>>>,
    next: AtomicUsize,
}

/// A connection in use. Dropped without [`Checkout::done`], it closes.
pub(crate) struct Checkout<'a, C> {
    slot: MutexGuard<'a, Option<C>>,
    conn: C,
}

impl<C> Checkout<'_, C> {
    pub(crate) fn conn(&mut self) -> &mut C {
        &mut self.conn
    }

    /// The operation succeeded: the connection goes back for the next one.
    pub(crate) fn done(self) {
        let Self { mut slot, conn } = self;
        *slot = Some(conn);
    }
}

impl<C: Send> Conns<C> {
    pub(crate) fn new(size: u32, first: Option<C>) -> Self {
        let mut slots: Vec<Mutex<Option<C>>> = (0..size.max(1)).map(|_| Mutex::new(None)).collect();
        if let Some(c) = first {
            slots[0] = Mutex::new(Some(c));
        }
        Self {
            slots,
            next: AtomicUsize::new(0),
        }
    }

    /// A free slot's connection (made with `connect` if the slot is empty);
    /// waits for a slot when all are busy.
    pub(crate) async fn checkout<F, Fut>(&self, connect: F) -> Result<Checkout<'_, C>, sqlx::Error>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<C, sqlx::Error>>,
    {
        let n = self.slots.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut free = None;
        // Prefer a free slot that already has a connection, then any free slot.
        for want_conn in [true, false] {
            for i in 0..n {
                if let Ok(g) = self.slots[(start + i) % n].try_lock()
                    && (g.is_some() || !want_conn)
                {
                    free = Some(g);
                    break;
                }
            }
            if free.is_some() {
                break;
            }
        }
        let mut slot = match free {
            Some(g) => g,
            None => self.slots[start % n].lock().await,
        };
        let conn = match slot.take() {
            Some(c) => c,
            None => connect().await?,
        };
        Ok(Checkout { slot, conn })
    }

    /// Takes every idle connection out (for closing).
    pub(crate) async fn drain(&self) -> Vec<C> {
        let mut out = Vec::new();
        for s in &self.slots {
            if let Some(c) = s.lock().await.take() {
                out.push(c);
            }
        }
        out
    }
}
