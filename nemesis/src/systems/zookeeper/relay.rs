//! [`Relay`]: the one address a ZooKeeper session dials, a loopback forwarder owned by the
//! lock client, so that the harness can do to one session what a process pause or a crash
//! does to a real client's:
//!
//! - **stall** ([`Relay::stall`]): no byte moves either way, no new connection reaches a
//!   server, as when the holder's whole process sits in a GC pause, its heartbeat thread
//!   too. The server stops hearing from the session and expires it after its timeout; the
//!   holder learns of that only once it runs again (`pause-clients`).
//! - **cut** ([`Relay::cut`]): every connection closes and none is accepted any more, without
//!   a goodbye. The session is abandoned: the server expires it a session timeout after it
//!   last heard from it, so a lock node the client may have created stays exactly as long
//!   as a crashed client's would (never shorter: that would break the lease).
//!
//! Each new connection goes to the next server in turn, starting at the client's own node
//! (Jepsen style: a client talks to its node until that fails), so the session fails over
//! when its server dies, pauses or loses its quorum. Dropping the relay closes its listener
//! and every connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// How long the relay waits for one server's TCP connect before it tries the next.
const DIAL_TIMEOUT: Duration = Duration::from_millis(300);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    Open,
    Stalled,
    Cut,
}

/// A stallable forwarder from one loopback port to the servers (see the module docs).
#[derive(Debug)]
pub struct Relay {
    addr: SocketAddr,
    flow: watch::Sender<Flow>,
    /// The index (into the server list) of the server the latest connection went to.
    server: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Relay {
    /// Listens on a free loopback port; connections go to `servers`, first to
    /// `servers[first]`.
    pub async fn start(servers: Vec<SocketAddr>, first: usize) -> std::io::Result<Relay> {
        assert!(!servers.is_empty(), "a relay needs a server");
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (flow, state) = watch::channel(Flow::Open);
        let server = Arc::new(AtomicUsize::new(first % servers.len()));
        let task = tokio::spawn(accept_loop(listener, servers, server.clone(), state));
        Ok(Relay {
            addr,
            flow,
            server,
            task,
        })
    }

    /// The address the session dials.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The index of the server the latest connection went to.
    pub fn server(&self) -> usize {
        self.server.load(Ordering::Relaxed)
    }

    /// Stalls (`true`) or frees (`false`) every byte of the session. A cut relay stays cut.
    pub fn stall(&self, stalled: bool) {
        self.flow.send_if_modified(|flow| {
            let next = match (*flow, stalled) {
                (Flow::Cut, _) => Flow::Cut,
                (_, true) => Flow::Stalled,
                (_, false) => Flow::Open,
            };
            std::mem::replace(flow, next) != next
        });
    }

    /// Closes every connection and the listener, without a goodbye (see the module docs).
    pub fn cut(&self) {
        self.flow.send_replace(Flow::Cut);
        self.task.abort();
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.cut();
    }
}

async fn accept_loop(
    listener: TcpListener,
    servers: Vec<SocketAddr>,
    server: Arc<AtomicUsize>,
    state: watch::Receiver<Flow>,
) {
    // Dropping the set (when this task is aborted) aborts every connection's task.
    let mut connections = JoinSet::new();
    let mut next = server.load(Ordering::Relaxed);
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            return;
        };
        let mut state = state.clone();
        if !flowing(&mut state).await {
            return;
        }
        // Try every server once, from the next in turn.
        let mut outbound = None;
        for attempt in 0..servers.len() {
            let index = (next + attempt) % servers.len();
            let dial = tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(servers[index]));
            if let Ok(Ok(stream)) = dial.await {
                server.store(index, Ordering::Relaxed);
                outbound = Some(stream);
                next = index + 1;
                break;
            }
        }
        let Some(outbound) = outbound else {
            // No server took it: the session sees a closed connection and dials again.
            next += 1;
            continue;
        };
        let _ = inbound.set_nodelay(true);
        let _ = outbound.set_nodelay(true);
        // Reap the connections that ended, so the set does not grow.
        while connections.try_join_next().is_some() {}
        connections.spawn(forward(inbound, outbound, state));
    }
}

/// Moves bytes both ways until either side closes or the relay is cut.
async fn forward(inbound: TcpStream, outbound: TcpStream, state: watch::Receiver<Flow>) {
    let (client_read, client_write) = inbound.into_split();
    let (server_read, server_write) = outbound.into_split();
    tokio::select! {
        _ = pipe(client_read, server_write, state.clone()) => {}
        _ = pipe(server_read, client_write, state) => {}
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut state: watch::Receiver<Flow>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        if !flowing(&mut state).await {
            return;
        }
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            // A stall or cut while waiting for bytes: look at the flow again.
            _ = state.changed() => continue,
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Bytes read just before a stall wait for its end, as in a paused process.
        if !flowing(&mut state).await {
            return;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

/// Waits while the relay is stalled; false once it is cut.
async fn flowing(state: &mut watch::Receiver<Flow>) -> bool {
    loop {
        match *state.borrow_and_update() {
            Flow::Open => return true,
            Flow::Cut => return false,
            Flow::Stalled => {}
        }
        if state.changed().await.is_err() {
            return false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> (SocketAddr, JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buffer = [0u8; 64];
                    while let Ok(n) = stream.read(&mut buffer).await {
                        if n == 0 || stream.write_all(&buffer[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (addr, task)
    }

    #[tokio::test]
    async fn a_stalled_relay_holds_bytes_until_freed_and_a_cut_one_closes() {
        // Module docs: a stall moves no byte either way; a cut closes without a goodbye.
        let (echo, server) = echo_server().await;
        let relay = Relay::start(vec![echo], 0).await.unwrap();
        let mut stream = TcpStream::connect(relay.addr()).await.unwrap();
        let mut buffer = [0u8; 4];
        stream.write_all(b"ping").await.unwrap();
        stream.read_exact(&mut buffer).await.unwrap();
        assert_eq!(&buffer, b"ping");

        relay.stall(true);
        stream.write_all(b"late").await.unwrap();
        let held = tokio::time::timeout(Duration::from_millis(200), stream.read(&mut buffer)).await;
        assert!(held.is_err(), "a stalled relay let bytes through");
        relay.stall(false);
        stream.read_exact(&mut buffer).await.unwrap();
        assert_eq!(&buffer, b"late");

        relay.cut();
        let closed = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buffer)).await;
        assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "{closed:?}");
        assert!(
            TcpStream::connect(relay.addr()).await.is_err(),
            "the listener outlived the cut"
        );
        server.abort();
    }

    #[tokio::test]
    async fn a_connection_goes_to_the_next_server_when_one_is_down() {
        // Module docs: each connection tries the servers in turn from the client's own node.
        let dead = crate::cluster::free_ports(1).unwrap()[0];
        let (echo, server) = echo_server().await;
        let relay = Relay::start(vec![dead, echo], 0).await.unwrap();
        let mut stream = TcpStream::connect(relay.addr()).await.unwrap();
        stream.write_all(b"fail").await.unwrap();
        let mut buffer = [0u8; 4];
        stream.read_exact(&mut buffer).await.unwrap();
        assert_eq!((&buffer, relay.server()), (b"fail", 1));
        server.abort();
    }
}
