//! The data-driven interaction tests of the core (STYLE practice 4): every script in
//! `testdata/*.txt` drives a [`Cluster`] through the commands below and compares the trace
//! with the golden output. `LOCKD_REWRITE=1 cargo test -p lockd` rewrites the goldens.
//!
//! Trace lines: `1->2 <message>` for a delivered message (`DROPPED (...)` when lost),
//! `1: Leader term=2` for a role or term change, `1: apply 2/5 Grant{a} -> Granted{token=5}`
//! for an applied entry (term/index), `1: respond req=3 Granted { token: 5 }` for an answer.

use std::path::PathBuf;

use crate::bugs::Bug;
use crate::lock::{Command, Origin, Proposal};
use crate::raft::{ClientRequest, Config, NodeId, RequestId, Timer};
use crate::testkit::Cluster;
use crate::testkit::datadriven::{TestCase, run_file};

/// The state of one script run.
#[derive(Default)]
struct Harness {
    cluster: Option<Cluster>,
}

impl Harness {
    fn cluster(&mut self) -> Result<&mut Cluster, String> {
        self.cluster
            .as_mut()
            .ok_or_else(|| "no cluster: run add-nodes first".to_owned())
    }

    fn handle(&mut self, case: &TestCase) -> String {
        let result = match case.command.as_str() {
            "add-nodes" => self.add_nodes(case),
            "campaign" => self.campaign(case),
            "exit" => self.exit(case),
            "tick" => self.tick(case),
            "propose" => self.propose(case),
            "request" => self.request(case),
            "client-gone" => self.client_gone(case),
            "deliver-msgs" => self.deliver_msgs(case),
            "drop-msgs" => self.drop_msgs(case),
            "partition" => self.partition(case),
            "cut" => self.cut(case),
            "heal" => self.heal(),
            "crash" => self.crash(case),
            "restart" => self.restart(case),
            "stabilize" => self.stabilize(),
            "raft-state" => self.raft_state(),
            "lock-table" => self.lock_table(case),
            "raft-log" => self.raft_log(case),
            "timers" => self.timers(case),
            other => Err(format!("unknown command {other:?}")),
        };
        match result {
            Ok(out) => out,
            Err(e) => format!("error: {e}"),
        }
    }

    /// Drains the cluster's trace into the command's output.
    fn trace(&mut self) -> Result<String, String> {
        Ok(self.cluster()?.take_trace().join("\n"))
    }

    /// `add-nodes 3 pre_vote=false check_quorum=false snapshot=5 trailing=0 chunk=64
    /// append_max=1 waiters_max=2 bug=early-expire seed=1`: a new cluster of nodes 1..=3 (seed
    /// default 1; `trailing` and `chunk` are the snapshot's trailing window in entries and
    /// chunk size in bytes, defaults from `Config::new`).
    fn add_nodes(&mut self, case: &TestCase) -> Result<String, String> {
        let size: u64 = parse_arg(case.args.first().map(String::as_str), "node count")?;
        let seed: u64 = case
            .arg("seed")
            .map_or(Ok(1), |s| parse_arg(Some(s), "seed"))?;
        let pre_vote = case.arg("pre_vote") != Some("false");
        let check_quorum = case.arg("check_quorum") != Some("false");
        let snapshot = match case.arg("snapshot") {
            Some(s) => parse_arg(Some(s), "snapshot")?,
            None => 1000,
        };
        let defaults = Config::new(1, vec![1]);
        let trailing = match case.arg("trailing") {
            Some(s) => parse_arg(Some(s), "trailing")?,
            None => defaults.snapshot_trailing_entries,
        };
        let chunk = match case.arg("chunk") {
            Some(s) => parse_arg(Some(s), "chunk")?,
            None => defaults.snapshot_chunk_bytes,
        };
        let bugs: Vec<Bug> = match case.arg("bug") {
            Some(name) => vec![name.parse().map_err(|e| format!("{e}"))?],
            None => Vec::new(),
        };
        let append_max = match case.arg("append_max") {
            Some(s) => parse_arg(Some(s), "append_max")?,
            None => 256,
        };
        let waiters_max = match case.arg("waiters_max") {
            Some(s) => parse_arg(Some(s), "waiters_max")?,
            None => 64,
        };
        let sessions: Vec<u64> = match case.arg("sessions") {
            Some(list) => list
                .split(',')
                .map(|s| parse_arg(Some(s), "sessions"))
                .collect::<Result<_, _>>()?,
            None => Vec::new(),
        };
        let adjust = |config: &mut crate::raft::Config| {
            config.append_entries_max = append_max;
            config.waiters_per_key_max = waiters_max;
            config.pre_vote = pre_vote;
            config.check_quorum = check_quorum;
            config.snapshot_threshold_entries = snapshot;
            config.snapshot_trailing_entries = trailing;
            config.snapshot_chunk_bytes = chunk;
            config.bugs = crate::bugs::BugSet::of(&bugs);
        };
        let mut cluster = Cluster::with_sessions(size, seed, adjust, &sessions);
        cluster.set_trace(true);
        self.cluster = Some(cluster);
        Ok(format!("{size} nodes"))
    }

    /// `campaign 1`: node 1 starts an election now.
    fn campaign(&mut self, case: &TestCase) -> Result<String, String> {
        let id = node_arg(case, 0)?;
        self.cluster()?.campaign(id);
        self.trace()
    }

    /// `exit 1`: node 1 exits cleanly (a leader sends TimeoutNow and steps down).
    fn exit(&mut self, case: &TestCase) -> Result<String, String> {
        let id = node_arg(case, 0)?;
        self.cluster()?.exit(id);
        self.trace()
    }

    /// `tick 1 300` advances node 1's clock by 300 ms; `tick all 300` every node's.
    fn tick(&mut self, case: &TestCase) -> Result<String, String> {
        let ms: u64 = parse_arg(case.args.get(1).map(String::as_str), "milliseconds")?;
        let cluster = self.cluster()?;
        if case.args.first().map(String::as_str) == Some("all") {
            cluster.tick_all(ms);
        } else {
            let id = node_arg(case, 0)?;
            self.cluster()?.tick(id, ms);
        }
        self.trace()
    }

    /// `propose 1 grant key=a lease_ms=100` (also `release key=a token=3`,
    /// `expire key=a token=3`, `noop`): a raw proposal at node 1.
    fn propose(&mut self, case: &TestCase) -> Result<String, String> {
        let id = node_arg(case, 0)?;
        let key = || case.arg("key").unwrap_or("a").to_owned();
        let token = || parse_arg::<u64>(case.arg("token"), "token");
        let command = match case.args.get(1).map(String::as_str) {
            Some("grant") => Command::Grant {
                key: key(),
                lease_ms: parse_arg(case.arg("lease_ms"), "lease_ms")?,
            },
            Some("release") => Command::Release {
                key: key(),
                token: token()?,
            },
            Some("expire") => Command::Expire {
                key: key(),
                token: token()?,
            },
            Some("noop") => Command::Noop,
            other => return Err(format!("unknown proposal {other:?}")),
        };
        self.cluster()?.propose(id, Proposal::system(command));
        self.trace()
    }

    /// `request 1 acquire key=a lease_ms=100 wait_ms=0 session=7 seq=1`, `request 1 register` or
    /// `request 1 release key=a token=3`: a client request at node 1; prints its id.
    fn request(&mut self, case: &TestCase) -> Result<String, String> {
        let id = node_arg(case, 0)?;
        let key = case.arg("key").unwrap_or("a").to_owned();
        let origin = match (case.arg("session"), case.arg("seq")) {
            (Some(c), Some(s)) => Some(Origin {
                session: parse_arg(Some(c), "session")?,
                request: parse_arg(Some(s), "seq")?,
            }),
            _ => None,
        };
        let request = match case.args.get(1).map(String::as_str) {
            Some("acquire") => ClientRequest::Acquire {
                key,
                lease_ms: parse_arg(case.arg("lease_ms"), "lease_ms")?,
                wait_ms: case
                    .arg("wait_ms")
                    .map_or(Ok(0), |w| parse_arg(Some(w), "wait_ms"))?,
                origin,
            },
            Some("release") => ClientRequest::Release {
                key,
                token: parse_arg(case.arg("token"), "token")?,
                origin,
            },
            Some("register") => ClientRequest::RegisterSession { label: 0 },
            other => return Err(format!("unknown request {other:?}")),
        };
        let request_id = self.cluster()?.request(id, request);
        let trace = self.trace()?;
        Ok(format!("req={}\n{trace}", request_id.0))
    }

    /// `client-gone 1 req=3`: the client of request 3 at node 1 left.
    fn client_gone(&mut self, case: &TestCase) -> Result<String, String> {
        let id = node_arg(case, 0)?;
        let request = RequestId(parse_arg(case.arg("req"), "req")?);
        self.cluster()?.client_gone(id, request);
        self.trace()
    }

    /// `deliver-msgs` delivers every message in flight now; `deliver-msgs to=2` only those
    /// to node 2.
    fn deliver_msgs(&mut self, case: &TestCase) -> Result<String, String> {
        let target = match case.arg("to") {
            Some(t) => Some(parse_arg::<NodeId>(Some(t), "to")?),
            None => None,
        };
        self.cluster()?.deliver_all(target);
        self.trace()
    }

    /// `drop-msgs` drops every message in flight; `drop-msgs to=2` only those to node 2.
    fn drop_msgs(&mut self, case: &TestCase) -> Result<String, String> {
        let target = match case.arg("to") {
            Some(t) => Some(parse_arg::<NodeId>(Some(t), "to")?),
            None => None,
        };
        let cluster = self.cluster()?;
        let mut at = 0;
        while at < cluster.in_flight().len() {
            if target.is_none_or(|t| cluster.in_flight()[at].target == t) {
                cluster.drop_message(at);
            } else {
                at += 1;
            }
        }
        self.trace()
    }

    /// `partition (1) (2 3)`: cut every link between the groups.
    fn partition(&mut self, case: &TestCase) -> Result<String, String> {
        let rest = case.input.trim_start_matches("partition");
        let mut groups = Vec::new();
        for group in rest.split('(').skip(1) {
            let inside = group.split(')').next().unwrap_or_default();
            let ids: Result<Vec<NodeId>, String> = inside
                .split_whitespace()
                .map(|w| parse_arg(Some(w), "node id"))
                .collect();
            groups.push(ids?);
        }
        self.cluster()?.partition(&groups);
        Ok(format!("groups {groups:?}"))
    }

    /// `cut 1 2 3`: cut the links from node 1 to nodes 2 and 3, one way only (messages to
    /// node 1 still arrive).
    fn cut(&mut self, case: &TestCase) -> Result<String, String> {
        let source = node_arg(case, 0)?;
        let targets: Result<Vec<NodeId>, String> = case.args[1..]
            .iter()
            .map(|w| parse_arg(Some(w.as_str()), "node id"))
            .collect();
        let targets = targets?;
        self.cluster()?.cut_one_way(source, &targets);
        Ok(format!("{source} -> {targets:?} cut"))
    }

    /// `heal`: restore every link.
    fn heal(&mut self) -> Result<String, String> {
        self.cluster()?.heal();
        Ok(String::new())
    }

    /// `crash 1`: node 1 loses its memory; its durable state stays.
    fn crash(&mut self, case: &TestCase) -> Result<String, String> {
        let id = node_arg(case, 0)?;
        self.cluster()?.crash(id);
        self.trace()
    }

    /// `restart 1`: node 1 starts from its durable state.
    fn restart(&mut self, case: &TestCase) -> Result<String, String> {
        let id = node_arg(case, 0)?;
        self.cluster()?.restart(id);
        self.trace()
    }

    /// `stabilize`: deliver messages until none is in flight (time stands still).
    fn stabilize(&mut self) -> Result<String, String> {
        self.cluster()?.stabilize();
        self.trace()
    }

    /// `raft-state`: role, term, leader, commit and log of every node.
    fn raft_state(&mut self) -> Result<String, String> {
        let cluster = self.cluster()?;
        let lines: Vec<String> = cluster
            .ids()
            .into_iter()
            .map(|id| match cluster.node(id) {
                None => format!("{id}: down"),
                Some(node) => {
                    let s = node.status();
                    format!(
                        "{id}: {:?} term={} leader={} commit={} applied={} last={}",
                        s.role,
                        s.term,
                        s.leader.map_or("none".to_owned(), |l| l.to_string()),
                        s.commit_index,
                        s.last_applied,
                        s.last_log_index
                    )
                }
            })
            .collect();
        Ok(lines.join("\n"))
    }

    /// `lock-table` prints every running node's applied table; `lock-table 1` node 1's.
    fn lock_table(&mut self, case: &TestCase) -> Result<String, String> {
        let cluster = self.cluster()?;
        let ids = match case.args.first() {
            Some(_) => vec![node_arg(case, 0)?],
            None => cluster.ids(),
        };
        let mut lines = Vec::new();
        for id in ids {
            let Some(node) = cluster.node(id) else {
                lines.push(format!("{id}: down"));
                continue;
            };
            let table = node.table();
            let locks: Vec<String> = table
                .locks()
                .iter()
                .map(|(k, h)| format!("{k}:token={},lease_ms={}", h.token, h.lease_ms))
                .collect();
            lines.push(format!(
                "{id}: applied={} last_token={} locks=[{}]",
                table.last_applied(),
                table.last_token(),
                locks.join(" ")
            ));
        }
        Ok(lines.join("\n"))
    }

    /// `raft-log 1`: node 1's snapshot base and in-memory entries.
    fn raft_log(&mut self, case: &TestCase) -> Result<String, String> {
        let id = node_arg(case, 0)?;
        let node = self
            .cluster()?
            .node(id)
            .ok_or(format!("node {id} is down"))?;
        let mut lines = vec![match node.snapshot() {
            Some(s) => format!("snapshot {}/{}", s.last_term, s.last_index),
            None => "no snapshot".to_owned(),
        }];
        lines.extend(node.log().iter().map(crate::testkit::describe_entry));
        Ok(lines.join("\n"))
    }

    /// `timers 1`: node 1's armed timers with deadlines, and its clock.
    fn timers(&mut self, case: &TestCase) -> Result<String, String> {
        let id = node_arg(case, 0)?;
        let cluster = self.cluster()?;
        let node = cluster.node(id).ok_or(format!("node {id} is down"))?;
        let mut lines = vec![format!("now={}", node.now_ms())];
        for (timer, at) in node.timers() {
            let name = match timer {
                Timer::Lease { key, token } => format!("Lease{{{key}, {token}}}"),
                Timer::Wait { id } => format!("Wait{{req={}}}", id.0),
                other => format!("{other:?}"),
            };
            lines.push(format!("{name} at={at}"));
        }
        Ok(lines.join("\n"))
    }
}

fn parse_arg<T: std::str::FromStr>(value: Option<&str>, what: &str) -> Result<T, String> {
    let value = value.ok_or_else(|| format!("missing {what}"))?;
    value
        .parse()
        .map_err(|_| format!("{what}: cannot parse {value:?}"))
}

fn node_arg(case: &TestCase, at: usize) -> Result<NodeId, String> {
    parse_arg(case.args.get(at).map(String::as_str), "node id")
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/raft/testdata")
        .join(format!("{name}.txt"))
}

fn run_script(name: &str) {
    let mut harness = Harness::default();
    if let Err(e) = run_file(&script(name), |case| harness.handle(case)) {
        panic!("{e}");
    }
}

/// The scripts, one test each.
const SCRIPTS: &[&str] = &[
    "election",
    "re_election",
    "split_vote",
    "log_conflict",
    "figure8",
    "partitioned_leader",
    "lease_takeover",
    "snapshot_install",
    "snapshot_chunks",
    "pre_vote_check_quorum",
    "check_quorum_one_way",
    "pre_vote_higher_term_shorter_log",
    "phantom_release",
    "phantom_release_of_a_retry",
    "leader_exit_hand_over",
    "waiters",
    "waiter_after_deduped_retry",
    "waiter_retry_after_busy",
    "waiter_retry_of_own_grant",
    "waiter_retry_while_queued",
    "waiter_retry_keeps_fifo",
    "requests",
    "mutants",
];

macro_rules! scripts {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                // STYLE practice 4: the script's golden output is the expected trace.
                run_script(stringify!($name));
            }
        )*
    };
}

scripts!(
    election,
    re_election,
    split_vote,
    log_conflict,
    figure8,
    partitioned_leader,
    lease_takeover,
    snapshot_install,
    snapshot_chunks,
    pre_vote_check_quorum,
    check_quorum_one_way,
    pre_vote_higher_term_shorter_log,
    phantom_release,
    phantom_release_of_a_retry,
    leader_exit_hand_over,
    waiters,
    waiter_after_deduped_retry,
    waiter_retry_after_busy,
    waiter_retry_of_own_grant,
    waiter_retry_while_queued,
    waiter_retry_keeps_fifo,
    requests,
    mutants,
);

#[test]
fn every_script_opens_with_a_comment_and_has_a_test() {
    // STYLE practice 4: each script opens with a `#` paragraph saying what it tests.
    for name in SCRIPTS {
        let text =
            crate::testkit::datadriven::read(&script(name)).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            text.starts_with('#'),
            "script {name} does not open with a # paragraph"
        );
    }
    let listed = crate::testkit::datadriven::list(&script("x").with_file_name(""))
        .unwrap_or_else(|e| panic!("{e}"));
    for file in listed {
        assert!(
            SCRIPTS.iter().any(|s| format!("{s}.txt") == file),
            "testdata/{file} has no test in SCRIPTS"
        );
    }
}
