//! Cluster control on a real lockd cluster: start, kill, pause, restart and partition, each
//! confirmed by the nodes' own status answers (issue 5). Needs the `lockd` binary: `cargo
//! build` builds it (ci/test.sh does so before the tests); LOCKD_BIN overrides.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nemesis::NodeId;
use nemesis::cluster::{Cluster, Layout};
use nemesis::net::proxy::Proxy;
use nemesis::net::{Net, grudge};
use nemesis::systems::lockd::{Lockd, find_lockd};
use nemesis::systems::{NodeView, System, leader_of};

const WAIT_MS: u64 = 15_000;

struct Fixture {
    _dir: tempfile::TempDir,
    layout: Layout,
    proxy: Arc<Proxy>,
    system: Lockd,
    cluster: Cluster,
}

async fn start(n: u64) -> Fixture {
    let binary = find_lockd().expect("the lockd binary (run `cargo build` first)");
    let dir = tempfile::tempdir().expect("tempdir");
    let layout = Layout::new(n, dir.path()).expect("layout");
    let proxy = Arc::new(Proxy::start(&layout.peer).await.expect("proxy"));
    let mut dial = BTreeMap::new();
    for s in &layout.nodes {
        for t in &layout.nodes {
            if s != t {
                dial.insert((*s, *t), proxy.dial_addr(*s, *t));
            }
        }
    }
    let system = Lockd::new(binary, None, 11);
    let launcher = system.launcher(&layout, dial).expect("launcher");
    let cluster = Cluster::start(launcher, &layout.nodes, &layout.log_dir).expect("start lockd");
    Fixture {
        _dir: dir,
        layout,
        proxy,
        system,
        cluster,
    }
}

/// Polls status until `pred` holds, or panics with the last views after WAIT_MS.
async fn wait_for(f: &Fixture, what: &str, pred: impl Fn(&[NodeView]) -> bool) -> Vec<NodeView> {
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS);
    let mut views = Vec::new();
    while Instant::now() < deadline {
        views = f.system.status(&f.layout).await;
        if pred(&views) {
            return views;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}; last status: {views:?}");
}

fn answering(views: &[NodeView]) -> Vec<NodeId> {
    let mut v: Vec<NodeId> = views.iter().map(|v| v.node).collect();
    v.sort_unstable();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_pause_restart_and_partition_a_lockd_cluster() {
    // Issue 5: start/kill/pause/restart a lockd cluster and confirm by status.
    let f = start(3).await;
    let views = wait_for(&f, "a leader", |v| leader_of(v).is_some() && v.len() == 3).await;
    let leader = leader_of(&views).expect("leader");

    // Kill the leader: it stops answering, and the other two elect a new leader.
    f.cluster.kill(leader).expect("kill");
    let views = wait_for(&f, "a new leader", |v| {
        leader_of(v).is_some_and(|l| l != leader)
    })
    .await;
    assert!(
        !answering(&views).contains(&leader),
        "a killed node answers: {views:?}"
    );
    let second = leader_of(&views).expect("new leader");

    // Restart it from its data dir: it answers again, as a follower of the new term.
    f.cluster.restart(leader).expect("restart");
    wait_for(&f, "the restarted node", |v| {
        v.iter().any(|x| x.node == leader)
    })
    .await;

    // Pause a follower: it stops answering; resume: it answers again.
    let follower = f
        .layout
        .nodes
        .iter()
        .copied()
        .find(|n| *n != second)
        .expect("a follower");
    f.cluster.pause(follower).expect("pause");
    wait_for(&f, "the paused node to go quiet", |v| {
        !v.iter().any(|x| x.node == follower)
    })
    .await;
    f.cluster.resume(follower).expect("resume");
    wait_for(&f, "the resumed node", |v| {
        v.iter().any(|x| x.node == follower)
    })
    .await;

    // Isolate the current leader through the proxy: the other two elect another leader.
    let views = wait_for(&f, "a stable leader", |v| {
        leader_of(v).is_some() && v.len() == 3
    })
    .await;
    let current = leader_of(&views).expect("leader");
    f.proxy
        .apply(&grudge::one(&f.layout.nodes, current))
        .expect("partition");
    wait_for(&f, "a leader on the majority side", |v| {
        v.iter().any(|x| x.node != current && x.role == "leader")
    })
    .await;
    f.proxy.heal().expect("heal");
    wait_for(&f, "one leader after heal", |v| {
        v.iter().filter(|x| x.role == "leader").count() == 1 && v.len() == 3
    })
    .await;

    f.cluster.teardown().expect("teardown");
    let pids: Vec<u32> = f
        .layout
        .nodes
        .iter()
        .filter_map(|n| f.cluster.pid(*n))
        .collect();
    assert!(pids.is_empty(), "no node runs after teardown: {pids:?}");
}
