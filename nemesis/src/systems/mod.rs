//! The system under test, behind a trait: how to start one of its nodes, how to talk to it
//! as a client, and how to ask and steer its nodes (status, lease clock). `lockd` is the
//! first implementation ([`crate::systems::lockd`]); etcd comes later (`--system etcd`).
//!
//! Killing, pausing and restarting are the cluster's (signals on process groups) and the
//! same for every system; a system only says how a node is started ([`Launcher`]).

pub mod etcd;
pub mod exec;
pub mod faketime;
pub mod lockd;
pub mod redis;
pub mod zookeeper;

use std::collections::BTreeMap;
use std::net::SocketAddr;

use checker::CheckResult;
use futures::FutureExt as _;
use futures::future::BoxFuture;
use history::ErrorWord;
use tokio::time::Instant;

use crate::cluster::{Launcher, Layout};
use crate::{Error, NodeId};

/// How one client op ended, as the history records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It took effect; the token for an acquire, and the node that answered when known.
    Ok {
        /// The fencing token granted (acquire only).
        token: Option<u64>,
        /// The node that answered.
        node: Option<NodeId>,
    },
    /// It certainly did not take effect: the history's error word (`busy`, `not-holder`,
    /// `unavailable`, ...) and the node that answered, when known.
    Fail {
        /// The error word.
        error: ErrorWord,
        /// The node that answered.
        node: Option<NodeId>,
    },
    /// Unknown; the error word (`timeout`, `gave-up`, `disconnected`, ...).
    Info(ErrorWord),
}

/// A lock client of the system, one per client process.
pub trait LockClient: Send + Sync {
    /// Acquire `key` for `lease_ms`, waiting up to `wait_ms`, giving up at `deadline`.
    fn acquire<'a>(
        &'a self,
        key: &'a str,
        lease_ms: u64,
        wait_ms: u64,
        deadline: Instant,
    ) -> BoxFuture<'a, Outcome>;

    /// Release `key` held under `token`, giving up at `deadline`.
    fn release<'a>(&'a self, key: &'a str, token: u64, deadline: Instant)
    -> BoxFuture<'a, Outcome>;

    /// Write `value` to the system's own fenced resource `key` under `token`. `None` (the
    /// default): the system has none, and the harness's resource
    /// ([`crate::harness::workload::FencedStore`]) takes the write.
    fn write<'a>(
        &'a self,
        _key: &'a str,
        _value: &'a str,
        _token: u64,
        _deadline: Instant,
    ) -> BoxFuture<'a, Option<Outcome>> {
        futures::future::ready(None).boxed()
    }

    /// After its caller left an acquire (dropped its future): a future that says whether the
    /// service surely learns that nobody read that acquire's grant, if it made one, so that
    /// it releases it ([`System::releases_cancelled_grants`]). `false`: the answer reached
    /// this client first, or an attempt was lost with nothing sent after it; the harness then
    /// records the op `indeterminate`, not as an abandon. It owns what it reads, so the
    /// client may be dropped first. `None` (the default): the client cannot tell.
    fn departure(&self) -> Option<BoxFuture<'static, bool>> {
        None
    }

    /// The client's process dies at once: its connections end with nothing more sent (no
    /// cancellation of a call just dropped). By default nothing beyond dropping the client,
    /// which closes what it holds.
    fn crash(&self) {}

    /// The client's process stalls (`true`, `pause-clients`) or runs again (`false`). The
    /// workload stops on its own; a client whose library talks to the service in the
    /// background (ZooKeeper's session heartbeats) stops that too, as a real process pause
    /// would. Nothing by default.
    fn stall(&self, _stalled: bool) {}
}

/// One node's answer to a status query.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NodeView {
    /// The node asked.
    pub node: NodeId,
    /// `leader`, `follower`, `candidate`, ...
    pub role: String,
    /// Its term.
    pub term: u64,
    /// The leader it knows of.
    pub leader: Option<NodeId>,
    /// Its commit index.
    pub commit_index: u64,
}

/// A system under test.
pub trait System: Send + Sync {
    /// `lockd`, `etcd`, ...
    fn name(&self) -> &'static str;

    /// How to start node `id` of `layout`, its peers dialed through `dial` (the net's
    /// per-link addresses: `dial[(id, peer)]`).
    fn launcher(
        &self,
        layout: &Layout,
        dial: BTreeMap<(NodeId, NodeId), SocketAddr>,
    ) -> Result<Box<dyn Launcher>, Error>;

    /// True when the nodes dial each peer through the `dial` address the net gives them, so
    /// the per-link nets (`proxy`, `kernel`) can cut links. False (etcd: one peer URL per
    /// member) makes `--net kernel` use [`crate::net::owner`] (one user per node, set in
    /// [`Layout::users`], which the launcher must honour) and refuses partitions on `proxy`.
    fn per_link_dial(&self) -> bool {
        true
    }

    /// True when the system releases the lock of a client that left mid-acquire (lockd's
    /// phantom-lock release, DESIGN "Phantom locks"). Only then does the workload include
    /// clients that leave, and the phantom probe run: a system without it keeps such locks
    /// until their lease ends, which the liveness check would report.
    fn releases_phantom_locks(&self) -> bool {
        false
    }

    /// True when every node writes a trace of its core's inputs into the run's node-logs
    /// (`lockd --trace`, `locksmith test --trace`): the run's verdict then includes the
    /// replay of those traces through the model (`crate::replay`).
    fn traces(&self) -> bool {
        false
    }

    /// True when the system's nodes elect a leader that `status` names (lockd, etcd). False
    /// (`exec`): the harness waits only for every node to answer `status`, and a
    /// leader-targeted fault picks a random node.
    fn elects_leader(&self) -> bool {
        true
    }

    /// The system's own checks of the run, merged into the verdict after the run (exec: the
    /// client protocol). They vouch for the history: when one is unknown, the run is unknown
    /// whatever the history's checks say (an adapter that broke the protocol may have made
    /// up the anomaly too). None by default.
    fn checks(&self) -> Vec<CheckResult> {
        Vec::new()
    }

    /// A client for client process `client_id`.
    fn client(&self, layout: &Layout, client_id: u64) -> Box<dyn LockClient>;

    /// Every node's view (an unreachable node is missing), within the implementation's own
    /// short deadline.
    fn status<'a>(&'a self, layout: &'a Layout) -> BoxFuture<'a, Vec<NodeView>>;

    /// Sets node `id`'s lease clock: rate per mille of real time, after a jump of `jump_ms`.
    /// By default the system has no lease-clock control (etcd, exec): `Unsupported`, which
    /// the clock nemesis reports.
    fn set_clock<'a>(
        &'a self,
        _layout: &'a Layout,
        id: NodeId,
        _rate_permille: u32,
        _jump_ms: i64,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let name = self.name();
        async move {
            Err(Error::Unsupported(format!(
                "n{id}: {name} has no lease-clock control (the clock nemesis needs lockd)"
            )))
        }
        .boxed()
    }

    /// True when a release frees only the releasing client's own grant (Redlock's
    /// compare-and-delete; lockd and etcd name the token): lease safety of a history
    /// without tokens then does not let another process's release end a hold
    /// (`checker::Options::owner_aware_release`). False by default (an exec adapter may
    /// speak for an owner-blind service).
    fn owner_aware_release(&self) -> bool {
        false
    }

    /// The service's session timeout, ms, when it has one the checks can rely on: liveness
    /// rule S then judges every `session-expired` answer against it
    /// (`checker::liveness::LivenessOptions::session_timeout_ms`). None by default.
    fn session_timeout_ms(&self) -> Option<u64> {
        None
    }

    /// Whether the service releases a grant whose call the harness's client cancelled (or
    /// whose connection it closed) even when the grant was answered first, so that liveness
    /// rule P judges every departure without a witness
    /// (`checker::liveness::LivenessOptions::cancelled_grants_released`). False by default:
    /// a service that cannot tell such a grant from one its client read keeps it for its
    /// lease, legally.
    fn releases_cancelled_grants(&self) -> bool {
        false
    }

    /// Whether every node catches up with the cluster's commit index within the liveness
    /// check's recovery bound once every fault is undone (the catch-up rule,
    /// `harness::phases::caught_up`). False by default: ZooKeeper's leader election backs
    /// off its notifications up to 60 s, so a node partitioned away may stay `LOOKING` past
    /// the bound after a heal (its test's seed 3 did), which is its design, not a defect
    /// this harness judges; Redlock's instances and `exec` services report no commit index.
    fn catches_up_after_heal(&self) -> bool {
        false
    }

    /// More words on a failed run, after the checks' explanation: the system's own story
    /// of the anomaly (redis: the two holders of a key, with a timeline). None by default.
    fn explain(&self, _history: &[history::Op], _check: &checker::Check) -> Option<String> {
        None
    }

    /// Undoes every clock fault of node `id` (the clock family's `reset-clock`). By default
    /// [`System::set_clock`] at rate 1 without a jump (lockd's lease clock then runs at real
    /// speed from where it stands); a clock the harness moves through libfaketime (redis)
    /// steps back to real time instead.
    fn reset_clock<'a>(
        &'a self,
        layout: &'a Layout,
        id: NodeId,
    ) -> BoxFuture<'a, Result<(), Error>> {
        self.set_clock(layout, id, 1000, 0)
    }
}

/// The leader most nodes agree on among nodes that say they lead (highest term wins).
pub fn leader_of(views: &[NodeView]) -> Option<NodeId> {
    views
        .iter()
        .filter(|v| v.role == "leader")
        .max_by_key(|v| v.term)
        .map(|v| v.node)
}
