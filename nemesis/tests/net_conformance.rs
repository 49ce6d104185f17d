//! One conformance body, two backends (the turmoil pattern): a partitioned node really cannot
//! reach the others, one-way cuts are one-way, and heal restores every link. The proxy arm
//! always runs; the kernel arm runs as root with iptables and otherwise skips, saying why.
//!
//! Each "node" is an echo server; node `i` talks to `j` by dialing `net.dial_addr(i, j)`, the
//! way `lockd --dial` is wired. A link works when a fresh connection echoes a probe within
//! PROBE_TIMEOUT_MS.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use nemesis::NodeId;
use nemesis::net::grudge;
use nemesis::net::kernel::Kernel;
use nemesis::net::proxy::{LinkMode, Proxy};
use nemesis::net::{Grudge, Net};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const PROBE_TIMEOUT_MS: u64 = 300;
const NODES: u64 = 3;

async fn echo_servers(n: u64) -> BTreeMap<NodeId, SocketAddr> {
    let mut out = BTreeMap::new();
    for id in 1..=n {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind echo");
        out.insert(id, listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
    }
    out
}

/// True when `source` reaches `target` through the net: a probe comes back echoed.
async fn reaches(net: &dyn Net, source: NodeId, target: NodeId) -> bool {
    let addr = net.dial_addr(source, target);
    let probe = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        s.write_all(b"ping").await.ok()?;
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).await.ok()?;
        (&buf == b"ping").then_some(())
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(PROBE_TIMEOUT_MS), probe).await,
        Ok(Some(()))
    )
}

async fn reachability(net: &dyn Net) -> BTreeMap<(NodeId, NodeId), bool> {
    let mut out = BTreeMap::new();
    for s in 1..=NODES {
        for t in 1..=NODES {
            if s != t {
                out.insert((s, t), reaches(net, s, t).await);
            }
        }
    }
    out
}

fn expected(g: &Grudge) -> BTreeMap<(NodeId, NodeId), bool> {
    let mut out = BTreeMap::new();
    for s in 1..=NODES {
        for t in 1..=NODES {
            if s != t {
                out.insert((s, t), !g.is_cut(s, t));
            }
        }
    }
    out
}

/// The shared body: every link works, then an isolated node reaches nobody and nobody
/// reaches it, then a one-way cut blocks one direction only, then heal restores all.
async fn conformance(net: &dyn Net) {
    let all: Vec<NodeId> = (1..=NODES).collect();
    assert_eq!(
        reachability(net).await,
        expected(&Grudge::none()),
        "before any fault"
    );

    let isolated = grudge::one(&all, 1);
    net.apply(&isolated).expect("apply one");
    assert_eq!(
        reachability(net).await,
        expected(&isolated),
        "node 1 isolated"
    );

    let one_way = grudge::one_way(&[1], &[2]);
    net.apply(&one_way).expect("apply one-way");
    let seen = reachability(net).await;
    assert!(!seen[&(1, 2)], "1->2 is cut");
    assert!(seen[&(2, 1)], "2->1 must stay open");
    assert_eq!(seen, expected(&one_way), "one-way cut");

    net.heal().expect("heal");
    assert_eq!(
        reachability(net).await,
        expected(&Grudge::none()),
        "after heal"
    );
    net.heal().expect("heal is idempotent");
    net.teardown().expect("teardown");
}

#[tokio::test]
async fn proxy_partitions_links() {
    // DESIGN "The harness" / issue 5: the fault proxy cuts directed links, no root needed.
    let targets = echo_servers(NODES).await;
    let proxy = Proxy::start(&targets).await.expect("proxy");
    conformance(&proxy).await;
}

#[tokio::test]
async fn proxy_cut_closes_an_established_connection() {
    // Issue 5: dropping a link closes its open connections, so a node already connected to a
    // peer loses it at once (it does not keep a pre-partition connection).
    let targets = echo_servers(2).await;
    let proxy = Proxy::start(&targets).await.expect("proxy");
    let mut s = TcpStream::connect(proxy.dial_addr(1, 2))
        .await
        .expect("connect");
    s.write_all(b"a").await.expect("write");
    let mut buf = [0u8; 1];
    s.read_exact(&mut buf).await.expect("echo before the cut");
    proxy.set_mode(1, 2, LinkMode::Drop);
    let read = tokio::time::timeout(Duration::from_millis(1000), s.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "the connection should be closed: {read:?}"
    );
}

#[tokio::test]
async fn proxy_hold_keeps_bytes_until_release_and_delay_delays_them() {
    // Issue 5: the proxy can hold (and release, in order) and delay a link's bytes.
    let targets = echo_servers(2).await;
    let proxy = Proxy::start(&targets).await.expect("proxy");
    let mut s = TcpStream::connect(proxy.dial_addr(1, 2))
        .await
        .expect("connect");
    s.write_all(b"x").await.expect("write");
    let mut buf = [0u8; 1];
    s.read_exact(&mut buf).await.expect("open link echoes");

    proxy.set_mode(1, 2, LinkMode::Hold);
    s.write_all(b"yz").await.expect("write held");
    let mut two = [0u8; 2];
    let held = tokio::time::timeout(Duration::from_millis(300), s.read_exact(&mut two)).await;
    assert!(held.is_err(), "held bytes must not arrive: {held:?}");
    proxy.set_mode(1, 2, LinkMode::Open);
    tokio::time::timeout(Duration::from_millis(1000), s.read_exact(&mut two))
        .await
        .expect("released in time")
        .expect("read");
    assert_eq!(&two, b"yz", "held bytes arrive in order after release");

    proxy.set_mode(1, 2, LinkMode::Delay(200));
    let start = tokio::time::Instant::now();
    s.write_all(b"d").await.expect("write delayed");
    s.read_exact(&mut buf).await.expect("delayed echo");
    assert!(
        start.elapsed() >= Duration::from_millis(200),
        "delay {:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn kernel_partitions_links() {
    // DESIGN "The harness" / issue 5: the kernel backend, same body; root only.
    if let Err(why) = Kernel::available() {
        eprintln!("SKIP kernel_partitions_links: {why}");
        return;
    }
    let targets = echo_servers(NODES).await;
    let kernel = Kernel::start(&targets).await.expect("kernel net");
    conformance(&kernel).await;
}
