//! [`PeerLinks`]: how a ZooKeeper server's two peer ports, quorum and election, both go
//! through the net's one per-link address, so that a partition cuts a server off
//! completely (issue 25 item 2).
//!
//! The net gives each directed link `(source, target)` one address, `dial[(source,
//! target)]`, which leads to `layout.peer[target]`. A ZooKeeper server listens for peers on
//! two ports that must differ (its config parser refuses `host:P:P`), so with a per-link net:
//!
//! - **front** (one per server, on `layout.peer[target]`): every connection that comes
//!   through the net reaches it, and it passes it on by its first byte. An election
//!   connection opens with its protocol version, a negative long (`0xff...`); a learner's
//!   connection to its leader opens with a packet type, a small positive int (`0x00...`).
//!   So `0xff` goes to the server's real election port, anything else to its real quorum
//!   port.
//! - **election relay** (one per directed link, a fresh loopback port): the election port
//!   that `source`'s `zoo.cfg` names for `target`. It forwards to `dial[(source, target)]`,
//!   the same per-link address as the quorum port, so one cut stops both.
//!
//! The relay also rewrites one field. ZooKeeper keeps one election connection per pair,
//! opened by the higher sid: when a lower sid dials a higher one, the higher closes that
//! connection and dials back, in 3.8 to the election address the lower one **advertised**
//! in its first message (`QuorumCnxManager.handleConnection`: `connectOne(sid,
//! electionAddr)`), which is its real port. That connection would bypass the net and
//! outlive any partition. So the relay of link `(source, target)` replaces the advertised
//! address with the relay of link `(target, source)`, where `target`'s own config would
//! send it: the dial-back goes through the net as well.
//!
//! The relays bind at launch (their ports go into the `zoo.cfg` files). The fronts bind the
//! layout's peer ports, which a run holds reserved until its nodes start, so they bind when
//! the first server has started ([`PeerLinks::bind_fronts`], from the launcher's
//! `started`). Dropping the links closes every listener and connection.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use super::server::PeerPorts;
use crate::{Error, NodeId};

/// How long a relay or front waits to connect to where it forwards before it closes the
/// connection, as a refused dial would (the proxy's own bound).
const CONNECT_TIMEOUT: Duration = Duration::from_millis(1_000);
/// How long a front or relay waits for a new connection's first bytes before it closes it:
/// both of ZooKeeper's peer protocols speak first from the dialing side, at once.
const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest advertised election address list a relay reads, bytes (one loopback
/// address is about 15).
const ADVERTISED_BYTES_MAX: usize = 4_096;
/// ZooKeeper 3.8's election protocol versions (`QuorumCnxManager.PROTOCOL_VERSION_V1`,
/// `_V2`): the first long of a connection that carries an advertised address.
const PROTOCOL_VERSIONS: [i64; 2] = [-65_536, -65_535];

/// The fronts and election relays of one ensemble (see the module docs).
pub struct PeerLinks {
    runtime: tokio::runtime::Handle,
    /// `relay[(source, target)]`: the election address `source`'s config names for `target`.
    relay: BTreeMap<(NodeId, NodeId), SocketAddr>,
    /// Each server's front address (`layout.peer`) and what lies behind it; taken when the
    /// fronts bind.
    fronts: Mutex<Option<BTreeMap<SocketAddr, PeerPorts>>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl PeerLinks {
    /// Binds an election relay per link of `dial` and starts it; `fronts` maps each server's
    /// `layout.peer` address to its real ports. Must be called within a tokio runtime.
    pub fn start(
        dial: &BTreeMap<(NodeId, NodeId), SocketAddr>,
        fronts: BTreeMap<SocketAddr, PeerPorts>,
    ) -> Result<PeerLinks, Error> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
            Error::Cluster(format!("ZooKeeper's peer links need a tokio runtime: {e}"))
        })?;
        let _entered = runtime.enter();
        let mut listeners = BTreeMap::new();
        for link in dial.keys() {
            listeners.insert(*link, bind(SocketAddr::from(([127, 0, 0, 1], 0)))?);
        }
        let relay: BTreeMap<(NodeId, NodeId), SocketAddr> = listeners
            .iter()
            .map(|(link, l)| Ok((*link, local_addr(l)?)))
            .collect::<Result<_, Error>>()?;
        let mut tasks = Vec::new();
        for ((source, target), listener) in listeners {
            let back = relay.get(&(target, source)).copied().ok_or_else(|| {
                Error::Cluster(format!("no link {target}->{source} for {source}->{target}"))
            })?;
            tasks.push(tokio::spawn(relay_loop(
                listener,
                dial[&(source, target)],
                back,
            )));
        }
        Ok(PeerLinks {
            runtime,
            relay,
            fronts: Mutex::new(Some(fronts)),
            tasks: Mutex::new(tasks),
        })
    }

    /// The election address `source`'s config names for `target`.
    pub fn relay(&self, source: NodeId, target: NodeId) -> Option<SocketAddr> {
        self.relay.get(&(source, target)).copied()
    }

    /// Binds every server's front, once (later calls do nothing).
    pub fn bind_fronts(&self) -> Result<(), Error> {
        let Some(fronts) = self.fronts.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return Ok(());
        };
        let _entered = self.runtime.enter();
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        for (addr, backends) in fronts {
            let listener = bind(addr)?;
            tasks.push(tokio::spawn(front_loop(listener, backends)));
        }
        Ok(())
    }
}

impl Drop for PeerLinks {
    fn drop(&mut self) {
        for task in self.tasks.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            task.abort();
        }
    }
}

fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    let listener = std::net::TcpListener::bind(addr)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| Error::Io(format!("ZooKeeper peer link {addr}: bind: {e}")))?;
    TcpListener::from_std(listener).map_err(|e| Error::Io(format!("{addr}: {e}")))
}

fn local_addr(listener: &TcpListener) -> Result<SocketAddr, Error> {
    listener.local_addr().map_err(|e| Error::Io(e.to_string()))
}

/// Where a front sends a connection whose first byte is `first`.
pub fn route(first: u8, backends: PeerPorts) -> SocketAddr {
    if first == 0xff {
        backends.election
    } else {
        backends.quorum
    }
}

/// The first message of an election connection with its advertised address(es) replaced
/// by `advertise`: `header` is its first 20 bytes (protocol version, sid, length), `None`
/// when the version is not one that carries an address (the message then passes as it is).
pub fn rewritten_header(header: &[u8; 20], advertise: SocketAddr) -> Option<Vec<u8>> {
    let version = i64::from_be_bytes(header[..8].try_into().ok()?);
    if !PROTOCOL_VERSIONS.contains(&version) {
        return None;
    }
    let address = advertise.to_string().into_bytes();
    let mut out = header[..16].to_vec();
    out.extend_from_slice(&(address.len() as i32).to_be_bytes());
    out.extend_from_slice(&address);
    Some(out)
}

/// The advertised bytes' length from a header (see [`rewritten_header`]).
fn advertised_len(header: &[u8; 20]) -> Option<usize> {
    let len = i32::from_be_bytes(header[16..20].try_into().ok()?);
    usize::try_from(len)
        .ok()
        .filter(|l| (1..=ADVERTISED_BYTES_MAX).contains(l))
}

async fn connect(target: SocketAddr) -> Option<TcpStream> {
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target))
        .await
        .ok()?
        .ok()?;
    let _ = stream.set_nodelay(true);
    Some(stream)
}

async fn front_loop(listener: TcpListener, backends: PeerPorts) {
    let mut connections = JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        while connections.try_join_next().is_some() {}
        connections.spawn(async move {
            let mut first = [0u8; 1];
            let peeked = tokio::time::timeout(FIRST_BYTES_TIMEOUT, stream.peek(&mut first));
            if !matches!(peeked.await, Ok(Ok(1))) {
                return;
            }
            let Some(server) = connect(route(first[0], backends)).await else {
                return;
            };
            pipe(stream, server).await;
        });
    }
}

async fn relay_loop(listener: TcpListener, via: SocketAddr, advertise: SocketAddr) {
    let mut connections = JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        while connections.try_join_next().is_some() {}
        connections.spawn(relay_connection(stream, via, advertise));
    }
}

/// One election connection: its first message with the advertised address rewritten, then
/// bytes both ways.
async fn relay_connection(mut client: TcpStream, via: SocketAddr, advertise: SocketAddr) {
    let _ = client.set_nodelay(true);
    let Some(mut server) = connect(via).await else {
        return;
    };
    let first = async {
        let mut header = [0u8; 20];
        client.read_exact(&mut header).await.ok()?;
        let Some(rewritten) = rewritten_header(&header, advertise) else {
            return Some(header.to_vec());
        };
        let mut advertised = vec![0u8; advertised_len(&header)?];
        client.read_exact(&mut advertised).await.ok()?;
        Some(rewritten)
    };
    let Ok(Some(first)) = tokio::time::timeout(FIRST_BYTES_TIMEOUT, first).await else {
        return;
    };
    if server.write_all(&first).await.is_err() {
        return;
    }
    pipe(client, server).await;
}

async fn pipe(mut a: TcpStream, mut b: TcpStream) {
    let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(version: i64, sid: i64, len: i32) -> [u8; 20] {
        let mut h = [0u8; 20];
        h[..8].copy_from_slice(&version.to_be_bytes());
        h[8..16].copy_from_slice(&sid.to_be_bytes());
        h[16..].copy_from_slice(&len.to_be_bytes());
        h
    }

    #[test]
    fn the_advertised_election_address_becomes_the_reverse_relay() {
        // Module docs: a dial-back to the advertised address must go through the net.
        let advertise = SocketAddr::from(([127, 0, 0, 1], 40021));
        let out = rewritten_header(&header(-65_536, 2, 15), advertise).expect("a V1 header");
        assert_eq!(
            &out[..16],
            &header(-65_536, 2, 0)[..16],
            "version and sid kept"
        );
        assert_eq!(&out[16..20], &15i32.to_be_bytes());
        assert_eq!(&out[20..], b"127.0.0.1:40021");
        // An old-protocol first message (a bare sid) carries no address: left alone.
        assert_eq!(rewritten_header(&header(3, 0, 0), advertise), None);
        assert_eq!(advertised_len(&header(-65_536, 2, 0)), None);
        assert_eq!(advertised_len(&header(-65_536, 2, 1 << 20)), None);
    }

    #[test]
    fn fronts_route_election_by_the_protocol_versions_first_byte() {
        // Module docs: an election connection opens with a negative long, a learner's with
        // a small packet type.
        let backends = PeerPorts {
            quorum: SocketAddr::from(([127, 0, 0, 1], 1)),
            election: SocketAddr::from(([127, 0, 0, 1], 2)),
        };
        assert_eq!(
            route(PROTOCOL_VERSIONS[0].to_be_bytes()[0], backends),
            backends.election
        );
        assert_eq!(route(11i32.to_be_bytes()[0], backends), backends.quorum);
    }
}
