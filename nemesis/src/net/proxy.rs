//! The fault proxy: a tokio TCP forwarder per directed link `(source, target)`, listening on
//! a loopback port that `source` dials to reach `target`.
//!
//! Each link has a [`LinkMode`] held in a `watch` channel that every connection task of the
//! link observes:
//! - `Open`: bytes flow both ways;
//! - `Drop`: every connection of the link is closed at once and new ones are accepted and
//!   closed (refused), so `source` cannot reach `target` at all;
//! - `Hold`: bytes from `source` stay in the proxy (and then in the kernel's socket buffers,
//!   which bound them) until the link opens again, then flow in order;
//! - `Delay(ms)`: each chunk from `source` is forwarded `ms` after it was read, in order,
//!   through a bounded queue ([`DELAY_QUEUE_CHUNKS_MAX`]).
//!
//! Only the `source -> target` byte stream is faulted; replies on the same connection flow
//! while the link is open or held. `target -> source` messages are the link `(target,
//! source)`, a different connection.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{Grudge, Net};
use crate::{Error, NodeId};

/// Chunks a delayed link may queue before its reader waits (backpressure).
pub const DELAY_QUEUE_CHUNKS_MAX: usize = 256;
/// How long the proxy waits to connect to a target before giving up on that connection.
pub const CONNECT_TIMEOUT_MS: u64 = 1_000;
/// Read buffer per connection direction.
const CHUNK_BYTES: usize = 16 * 1024;

/// What a link does with the bytes its source sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkMode {
    /// Forward at once.
    Open,
    /// Close every connection and refuse new ones.
    Drop,
    /// Keep the bytes until the link opens again.
    Hold,
    /// Forward each chunk this many milliseconds after it arrived.
    Delay(u64),
}

struct Link {
    listen: SocketAddr,
    mode: watch::Sender<LinkMode>,
    accept_task: JoinHandle<()>,
}

/// A forwarder per ordered pair of nodes.
pub struct Proxy {
    links: BTreeMap<(NodeId, NodeId), Link>,
    nodes: Vec<NodeId>,
    grudge: Mutex<Grudge>,
}

impl Proxy {
    /// Starts one forwarder per ordered pair of `targets` (node id -> the address it listens
    /// on for peers), each on a fresh loopback port. Must run inside a tokio runtime.
    pub async fn start(targets: &BTreeMap<NodeId, SocketAddr>) -> Result<Proxy, Error> {
        let mut links = BTreeMap::new();
        for source in targets.keys() {
            for (target, target_addr) in targets {
                if source == target {
                    continue;
                }
                let listener = TcpListener::bind("127.0.0.1:0")
                    .await
                    .map_err(|e| Error::Io(format!("proxy {source}->{target}: bind: {e}")))?;
                let listen = listener
                    .local_addr()
                    .map_err(|e| Error::Io(e.to_string()))?;
                let (mode, _) = watch::channel(LinkMode::Open);
                let accept_task = tokio::spawn(accept_loop(listener, *target_addr, mode.clone()));
                links.insert(
                    (*source, *target),
                    Link {
                        listen,
                        mode,
                        accept_task,
                    },
                );
            }
        }
        Ok(Proxy {
            links,
            nodes: targets.keys().copied().collect(),
            grudge: Mutex::new(Grudge::none()),
        })
    }

    /// Sets the mode of one directed link.
    ///
    /// # Panics
    ///
    /// If the link is not one of this proxy's (a programmer error).
    pub fn set_mode(&self, source: NodeId, target: NodeId, mode: LinkMode) {
        let link = self
            .links
            .get(&(source, target))
            .unwrap_or_else(|| panic!("no proxy link {source}->{target}"));
        link.mode.send_replace(mode);
    }

    /// The current mode of a link.
    pub fn mode(&self, source: NodeId, target: NodeId) -> Option<LinkMode> {
        self.links.get(&(source, target)).map(|l| *l.mode.borrow())
    }

    /// The nodes this proxy connects.
    pub fn nodes(&self) -> &[NodeId] {
        &self.nodes
    }
}

impl Net for Proxy {
    fn dial_addr(&self, source: NodeId, target: NodeId) -> SocketAddr {
        self.links
            .get(&(source, target))
            .map(|l| l.listen)
            .unwrap_or_else(|| panic!("no proxy link {source}->{target}"))
    }

    fn apply(&self, grudge: &Grudge) -> Result<(), Error> {
        for ((source, target), link) in &self.links {
            let mode = if grudge.is_cut(*source, *target) {
                LinkMode::Drop
            } else {
                LinkMode::Open
            };
            link.mode.send_replace(mode);
        }
        *self.grudge.lock().unwrap_or_else(|p| p.into_inner()) = grudge.clone();
        Ok(())
    }

    fn teardown(&self) -> Result<(), Error> {
        for link in self.links.values() {
            link.mode.send_replace(LinkMode::Drop);
            link.accept_task.abort();
        }
        Ok(())
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        for link in self.links.values() {
            link.accept_task.abort();
        }
    }
}

async fn accept_loop(listener: TcpListener, target: SocketAddr, mode: watch::Sender<LinkMode>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // Accept errors (e.g. too many open files) are transient; back off briefly.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if *mode.borrow() == LinkMode::Drop {
            // Refuse: close at once.
            drop(client);
            continue;
        }
        tokio::spawn(connection(client, target, mode.subscribe()));
    }
}

/// Resolves when the link's mode becomes `Drop` (or the proxy is gone).
async fn dropped(mut rx: watch::Receiver<LinkMode>) {
    loop {
        if *rx.borrow_and_update() == LinkMode::Drop {
            return;
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

async fn connection(client: TcpStream, target: SocketAddr, rx: watch::Receiver<LinkMode>) {
    let connect = tokio::time::timeout(
        Duration::from_millis(CONNECT_TIMEOUT_MS),
        TcpStream::connect(target),
    );
    let server = match connect.await {
        Ok(Ok(s)) => s,
        // The target is down or slow: close the client side, as a refused dial would.
        _ => return,
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let (queue_tx, queue_rx) = mpsc::channel(DELAY_QUEUE_CHUNKS_MAX);
    tokio::select! {
        _ = dropped(rx.clone()) => {}
        _ = read_source(client_read, queue_tx, rx.clone()) => {}
        _ = write_target(queue_rx, server_write) => {}
        _ = copy_back(server_read, client_write) => {}
    }
    // Dropping the halves closes both sockets.
}

/// Reads the source's bytes, waits while the link is held, and stamps each chunk with the
/// instant it may be written (now + delay).
async fn read_source(
    mut from: tokio::net::tcp::OwnedReadHalf,
    queue: mpsc::Sender<(Instant, Vec<u8>)>,
    mut rx: watch::Receiver<LinkMode>,
) {
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let delay_ms = loop {
            let mode = *rx.borrow_and_update();
            match mode {
                LinkMode::Hold => {
                    if rx.changed().await.is_err() {
                        return;
                    }
                }
                LinkMode::Drop => return,
                LinkMode::Open => break 0,
                LinkMode::Delay(ms) => break ms,
            }
        };
        let due = Instant::now() + Duration::from_millis(delay_ms);
        if queue.send((due, buf[..n].to_vec())).await.is_err() {
            return;
        }
    }
}

async fn write_target(
    mut queue: mpsc::Receiver<(Instant, Vec<u8>)>,
    mut to: tokio::net::tcp::OwnedWriteHalf,
) {
    while let Some((due, chunk)) = queue.recv().await {
        tokio::time::sleep_until(due).await;
        if to.write_all(&chunk).await.is_err() {
            return;
        }
    }
}

async fn copy_back(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
) {
    let _ = tokio::io::copy(&mut from, &mut to).await;
}
