//! A fault-injecting TCP proxy on loopback.
//!
//! Put it between a client and a store to prove that a dropped or silent
//! connection gives `Retry` within the configured timeout — never a hang and
//! never `Lost`.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does with traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything.
    Pass,
    /// Forward everything, each chunk after this delay.
    Delay(Duration),
    /// Close every open connection, and close new ones as soon as they arrive
    /// (the store is down, connections are reset).
    Drop,
    /// Keep connections open but forward nothing, and never answer new ones
    /// (a partition or a frozen store: silence, no error).
    Blackhole,
}

/// A running proxy; stops when dropped.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    upstream: Arc<Mutex<SocketAddr>>,
    mode: watch::Sender<(Fault, u64)>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (mode, rx) = watch::channel((Fault::Pass, 0));
        let upstream = Arc::new(Mutex::new(upstream));
        let task = tokio::spawn(accept_loop(listener, Arc::clone(&upstream), rx));
        Ok(Self {
            addr,
            upstream,
            mode,
            task,
        })
    }

    /// Forwards new connections to `upstream` from now on and cuts every open
    /// one, as a virtual IP or an HAProxy does when an HA manager moves it to
    /// a promoted server: clients reconnect and reach the new primary.
    pub fn point_at(&self, upstream: SocketAddr) {
        *self.upstream.lock().unwrap_or_else(PoisonError::into_inner) = upstream;
        self.mode.send_modify(|(_, generation)| *generation += 1);
    }

    /// Where new connections are forwarded.
    pub fn upstream(&self) -> SocketAddr {
        *self.upstream.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Switches the fault. `Drop` also cuts every open connection.
    pub fn set(&self, fault: Fault) {
        self.mode.send_modify(|(f, generation)| {
            *f = fault;
            if fault == Fault::Drop {
                *generation += 1;
            }
        });
    }

    /// The current fault.
    pub fn fault(&self) -> Fault {
        self.mode.borrow().0
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: Arc<Mutex<SocketAddr>>,
    mode: watch::Receiver<(Fault, u64)>,
) {
    let mut conns = tokio::task::JoinSet::new();
    while let Ok((client, _)) = listener.accept().await {
        let mode = mode.clone();
        let upstream = *upstream.lock().unwrap_or_else(PoisonError::into_inner);
        conns.spawn(async move {
            let _ = handle(client, upstream, mode).await;
        });
        while conns.try_join_next().is_some() {}
    }
}

async fn handle(
    client: TcpStream,
    upstream: SocketAddr,
    mut mode: watch::Receiver<(Fault, u64)>,
) -> io::Result<()> {
    let (fault, generation) = *mode.borrow_and_update();
    match fault {
        Fault::Drop => return Ok(()),
        Fault::Blackhole => {
            // Hold the client open, say nothing, until the fault changes to Drop.
            let _hold = client;
            wait_for_cut(&mut mode, generation).await;
            return Ok(());
        }
        Fault::Pass | Fault::Delay(_) => {}
    }
    let server = TcpStream::connect(upstream).await?;
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = pump(cr, sw, mode.clone(), generation);
    let down = pump(sr, cw, mode.clone(), generation);
    tokio::select! {
        _ = up => {},
        _ = down => {},
        _ = wait_for_cut(&mut mode, generation) => {},
    }
    Ok(())
}

/// Returns once a `Drop` fault cuts connections of `generation`.
async fn wait_for_cut(mode: &mut watch::Receiver<(Fault, u64)>, generation: u64) {
    loop {
        if mode.borrow_and_update().1 != generation {
            return;
        }
        if mode.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<(Fault, u64)>,
    generation: u64,
) -> io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        loop {
            let (fault, current) = *mode.borrow_and_update();
            if current != generation {
                return Ok(());
            }
            match fault {
                Fault::Pass => break,
                Fault::Delay(d) => {
                    tokio::time::sleep(d).await;
                    break;
                }
                Fault::Drop => return Ok(()),
                // Swallow: wait until the fault changes, then deliver (if it
                // turns to Pass) or cut (if it turns to Drop).
                Fault::Blackhole => {
                    if mode.changed().await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
        to.write_all(&buf[..n]).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn ping(s: &mut TcpStream) -> io::Result<()> {
        s.write_all(b"ping").await?;
        let mut b = [0u8; 4];
        s.read_exact(&mut b).await?;
        assert_eq!(&b, b"ping");
        Ok(())
    }

    #[tokio::test]
    async fn passes_delays_blackholes_and_drops() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        ping(&mut s).await.unwrap();

        proxy.set(Fault::Delay(Duration::from_millis(100)));
        let t = std::time::Instant::now();
        ping(&mut s).await.unwrap();
        assert!(t.elapsed() >= Duration::from_millis(100));

        proxy.set(Fault::Blackhole);
        let silent = tokio::time::timeout(Duration::from_millis(300), ping(&mut s)).await;
        assert!(silent.is_err(), "a blackholed connection must stay silent");

        proxy.set(Fault::Drop);
        let mut buf = [0u8; 4];
        let r = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await;
        assert!(
            matches!(r, Ok(Ok(0)) | Ok(Err(_))),
            "dropped connection must close: {r:?}"
        );

        let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
        let r = tokio::time::timeout(Duration::from_secs(2), fresh.read(&mut buf)).await;
        assert!(
            matches!(r, Ok(Ok(0)) | Ok(Err(_))),
            "new connections must close: {r:?}"
        );

        proxy.set(Fault::Pass);
        let mut again = TcpStream::connect(proxy.addr()).await.unwrap();
        ping(&mut again).await.unwrap();
    }
}
