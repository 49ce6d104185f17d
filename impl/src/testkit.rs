//! An in-memory, seeded network of [`Node`]s for tests here and in other crates.
//!
//! The [`Cluster`] is a driver like `server.rs`, following the IO contract of
//! [`crate::raft::Output`]: for each output it applies `persist` to the node's [`Durable`]
//! (with [`Durable::apply`], the reference semantics of storage), queues the messages, records
//! the applied entries in a [`Ledger`] and the answers, then feeds `Input::Persisted` back.
//! Messages wait in one in-flight list until a test delivers, drops, duplicates or reorders
//! them; partitions drop them at delivery. A crash keeps only the `Durable`; a restart calls
//! [`Node::new`] from it. Every node has its own clock, advanced by the test.
//!
//! After every step the step rules and the cross-node checks of [`crate::raft::invariants`]
//! run; a violation panics with the cluster's seed (or is collected, see [`Cluster::set_panic_on_violation`]).
//!
//! ```
//! use lockd::raft::{ClientRequest, Response};
//! use lockd::testkit::Cluster;
//!
//! let mut cluster = Cluster::new(3, 7);
//! cluster.campaign(1);
//! cluster.stabilize();
//! assert_eq!(cluster.leader(), Some(1));
//! let id = cluster.request(1, ClientRequest::Acquire {
//!     key: "a".into(), lease_ms: 1000, wait_ms: 0, origin: None,
//! });
//! cluster.stabilize();
//! assert!(matches!(cluster.response(id), Some(Response::Granted { .. })));
//! ```

pub mod datadriven;

use std::collections::{BTreeMap, BTreeSet};

use crate::lock::{Command, Outcome, Proposal};
use crate::raft::invariants::{self, Ledger};
use crate::raft::{
    ClientRequest, Config, Durable, Entry, Envelope, Input, Message, Node, NodeId, Output,
    RequestId, Response, Role,
};

/// The most rounds [`Cluster::stabilize`] runs before it reports that messages keep flowing.
pub const STABILIZE_ROUNDS_MAX: usize = 1000;

/// One member: its node (none while crashed), its durable state and its clock.
#[derive(Clone, Debug)]
struct Member {
    config: Config,
    node: Option<Node>,
    durable: Durable,
    clock_ms: u64,
}

/// A seeded in-memory cluster of nodes. See the module docs.
#[derive(Clone, Debug)]
pub struct Cluster {
    seed: u64,
    rng: u64,
    members: BTreeMap<NodeId, Member>,
    in_flight: Vec<Envelope>,
    /// Directed links (source, target) whose messages are dropped.
    blocked: BTreeSet<(NodeId, NodeId)>,
    ledger: Ledger,
    responses: Vec<(NodeId, RequestId, Response)>,
    next_request: u64,
    trace: Option<Vec<String>>,
    panic_on_violation: bool,
    violations: Vec<String>,
    /// When set, `Input::Persisted` reports wait in `persisted_due` until a test feeds them.
    defer_persisted: bool,
    persisted_due: Vec<(NodeId, Input)>,
}

impl Cluster {
    /// A cluster of nodes `1..=size` with the default configuration, node RNGs seeded from
    /// `seed`.
    pub fn new(size: u64, seed: u64) -> Self {
        Cluster::with_config(size, seed, |_| {})
    }

    /// A cluster whose configurations `adjust` changes (timing, bugs, thresholds).
    pub fn with_config(size: u64, seed: u64, adjust: impl Fn(&mut Config)) -> Self {
        Cluster::with_sessions(size, seed, adjust, &[])
    }

    /// [`Cluster::with_config`] whose nodes start with client sessions `sessions` registered
    /// (a snapshot at index 0 of a table holding them, active at time 0), as if a
    /// `RegisterSession` of each had committed before: for scripts that name their clients'
    /// sessions instead of registering them through the log.
    pub fn with_sessions(
        size: u64,
        seed: u64,
        adjust: impl Fn(&mut Config),
        sessions: &[crate::lock::SessionId],
    ) -> Self {
        let ids: Vec<NodeId> = (1..=size).collect();
        let mut cluster = Cluster {
            seed,
            rng: seed,
            members: BTreeMap::new(),
            in_flight: Vec::new(),
            blocked: BTreeSet::new(),
            ledger: Ledger::new(),
            responses: Vec::new(),
            next_request: 1,
            trace: None,
            panic_on_violation: true,
            violations: Vec::new(),
            defer_persisted: false,
            persisted_due: Vec::new(),
        };
        for id in &ids {
            let mut config = Config::new(*id, ids.clone());
            config.seed = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(*id);
            adjust(&mut config);
            let durable = if sessions.is_empty() {
                Durable::default()
            } else {
                let table = sessions.iter().fold(
                    crate::lock::LockTable::with_bugs(config.bugs)
                        .with_session_limits(config.session_limits),
                    |table, session| table.with_session(*session, 0),
                );
                Durable {
                    snapshot: Some(crate::raft::Snapshot {
                        last_index: 0,
                        last_term: 0,
                        table,
                    }),
                    ..Durable::default()
                }
            };
            let member = Member {
                config,
                node: None,
                durable,
                clock_ms: 0,
            };
            cluster.members.insert(*id, member);
        }
        for id in ids {
            cluster.start(id);
        }
        cluster
    }

    /// The seed the cluster was built with.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The next number of the cluster's own splitmix64 generator (for tests' random choices).
    pub fn random(&mut self) -> u64 {
        crate::rng::splitmix64(&mut self.rng)
    }

    /// Records trace lines (messages, applies, answers, role changes) for
    /// [`Cluster::take_trace`].
    pub fn set_trace(&mut self, on: bool) {
        self.trace = on.then(Vec::new);
    }

    /// The trace lines since the last call.
    pub fn take_trace(&mut self) -> Vec<String> {
        self.trace.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Whether an invariant violation panics (the default) or is only collected.
    pub fn set_panic_on_violation(&mut self, on: bool) {
        self.panic_on_violation = on;
    }

    /// Whether `Input::Persisted` is fed back at once (the default) or waits until
    /// [`Cluster::report_persisted`]: the write is durable at once either way, but the leader
    /// learns it late, so it must commit without counting itself.
    pub fn set_defer_persisted(&mut self, on: bool) {
        self.defer_persisted = on;
    }

    /// How many deferred `Input::Persisted` reports wait.
    pub fn persisted_due(&self) -> usize {
        self.persisted_due.len()
    }

    /// Feeds deferred report `at` (oldest first) to its node.
    ///
    /// # Panics
    ///
    /// Panics if `at` is out of range.
    pub fn report_persisted(&mut self, at: usize) {
        let (id, input) = self.persisted_due.remove(at);
        self.step(id, input);
    }

    /// The invariant violations seen so far (when they do not panic).
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// Every member's id.
    pub fn ids(&self) -> Vec<NodeId> {
        self.members.keys().copied().collect()
    }

    /// The running node `id`, if it is up.
    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.members.get(&id).and_then(|m| m.node.as_ref())
    }

    /// The running nodes.
    pub fn nodes(&self) -> Vec<&Node> {
        self.members
            .values()
            .filter_map(|m| m.node.as_ref())
            .collect()
    }

    /// What node `id` has on stable storage.
    ///
    /// # Panics
    ///
    /// Panics if `id` is not a member.
    pub fn durable(&self, id: NodeId) -> &Durable {
        &self.member(id).durable
    }

    /// Node `id`'s local clock.
    ///
    /// # Panics
    ///
    /// Panics if `id` is not a member.
    pub fn clock_ms(&self, id: NodeId) -> u64 {
        self.member(id).clock_ms
    }

    /// The ledger of every applied entry.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// The messages in flight, oldest first.
    pub fn in_flight(&self) -> &[Envelope] {
        &self.in_flight
    }

    /// Every answer so far: the node that answered, the request, the response.
    pub fn responses(&self) -> &[(NodeId, RequestId, Response)] {
        &self.responses
    }

    /// The answer to request `id`, if it came.
    pub fn response(&self, id: RequestId) -> Option<&Response> {
        self.responses
            .iter()
            .find(|(_, r, _)| *r == id)
            .map(|(_, _, response)| response)
    }

    /// The running leader of the highest term, if any.
    pub fn leader(&self) -> Option<NodeId> {
        self.nodes()
            .into_iter()
            .filter(|n| n.status().role == Role::Leader)
            .max_by_key(|n| n.status().term)
            .map(|n| n.config().id)
    }

    fn member(&self, id: NodeId) -> &Member {
        self.members
            .get(&id)
            .unwrap_or_else(|| panic!("node {id} is not a member of {:?}", self.ids()))
    }

    fn member_mut(&mut self, id: NodeId) -> &mut Member {
        let ids = self.ids();
        self.members
            .get_mut(&id)
            .unwrap_or_else(|| panic!("node {id} is not a member of {ids:?}"))
    }

    fn start(&mut self, id: NodeId) {
        let member = self.member_mut(id);
        let (node, out) = Node::new(
            member.config.clone(),
            member.durable.clone(),
            member.clock_ms,
        );
        member.node = Some(node);
        self.trace_line(format!(
            "{id}: start term={}",
            self.member(id).durable.hard_state.term
        ));
        self.handle_output(id, out);
        self.check();
    }

    /// Steps node `id` with `input` and carries out the output; nothing when it is down.
    /// Returns whether the node was up.
    pub fn step(&mut self, id: NodeId, input: Input) -> bool {
        // The model's symmetry, for the renaming check below: the members in reverse order.
        let first = self.members.keys().next().copied().unwrap_or(id);
        let last = self.members.keys().next_back().copied().unwrap_or(id);
        let Some(node) = self.members.get_mut(&id).and_then(|m| m.node.as_mut()) else {
            return false;
        };
        let before = node.status();
        let rules_before = invariants::StepBefore::of(node);
        let original = node.clone();
        let out = node.step(input.clone());
        let rules = invariants::step_rules(&rules_before, node, &input, &out)
            .and_then(|()| crate::raft::rebase_commutes(&original, &input, &out, node))
            .and_then(|()| {
                let reverse = |n: NodeId| first + last - n;
                crate::raft::rename_commutes(reverse, &original, &input, &out, node)
            });
        let after = node.status();
        if (before.role, before.term) != (after.role, after.term) {
            self.trace_line(format!("{id}: {:?} term={}", after.role, after.term));
        }
        if let Err(violation) = rules {
            self.violation(violation);
        }
        self.handle_output(id, out);
        self.check();
        true
    }

    /// Carries out `out` in the order of the IO contract, then reports the persist back.
    fn handle_output(&mut self, id: NodeId, out: Output) {
        self.in_flight.extend(out.send_now);
        let persisted = out.persist.is_some();
        if let Some(persist) = &out.persist {
            self.member_mut(id).durable.apply(persist);
        }
        self.in_flight.extend(out.send_after_persist);
        let term = self.node(id).map_or(0, |n| n.status().term);
        for committed in &out.apply {
            self.trace_line(format!(
                "{id}: apply {}/{} {} -> {}",
                committed.term,
                committed.index,
                describe_command(&committed.proposal),
                describe_outcome(&committed.outcome)
            ));
            if let Err(violation) = self.ledger.record(id, term, committed) {
                self.violation(violation);
            }
        }
        for (request, response) in out.respond {
            self.trace_line(format!("{id}: respond req={} {response:?}", request.0));
            self.responses.push((id, request, response));
        }
        if persisted {
            let durable = &self.member(id).durable;
            let (term, index) = (durable.last_term(), durable.last_index());
            let input = Input::Persisted { term, index };
            if self.defer_persisted {
                self.persisted_due.push((id, input));
            } else {
                self.step(id, input);
            }
        }
    }

    fn check(&mut self) {
        let nodes = self.nodes();
        if let Err(violation) = invariants::check_all(&nodes, &self.ledger) {
            self.violation(violation);
        }
    }

    fn violation(&mut self, violation: String) {
        if self.panic_on_violation {
            panic!("invariant violated (seed {}): {violation}", self.seed);
        }
        self.violations.push(violation);
    }

    fn trace_line(&mut self, line: String) {
        if let Some(trace) = &mut self.trace {
            trace.push(line);
        }
    }

    /// Advances node `id`'s clock by `ms` and ticks it (a crashed node's clock runs too).
    pub fn tick(&mut self, id: NodeId, ms: u64) {
        let member = self.member_mut(id);
        member.clock_ms += ms;
        let now_ms = member.clock_ms;
        self.step(id, Input::Tick { now_ms });
    }

    /// Advances every clock by `ms` and ticks every running node.
    pub fn tick_all(&mut self, ms: u64) {
        for id in self.ids() {
            self.tick(id, ms);
        }
    }

    /// Makes node `id` start an election now.
    pub fn campaign(&mut self, id: NodeId) {
        self.step(id, Input::Campaign);
    }

    /// Node `id` exits cleanly (`Input::Exit`: a leader hands over with TimeoutNow and
    /// steps down); the node stays up, as the process does until its messages are out.
    pub fn exit(&mut self, id: NodeId) {
        self.step(id, Input::Exit);
    }

    /// Proposes a raw entry at node `id` (dropped unless it leads).
    pub fn propose(&mut self, id: NodeId, proposal: Proposal) {
        self.step(id, Input::Propose(proposal));
    }

    /// Sends a client request to node `id`; returns its id.
    pub fn request(&mut self, id: NodeId, request: ClientRequest) -> RequestId {
        let request_id = RequestId(self.next_request);
        self.next_request += 1;
        self.step(
            id,
            Input::Request {
                id: request_id,
                request,
            },
        );
        request_id
    }

    /// Tells node `id` that the client of `request` left.
    pub fn client_gone(&mut self, id: NodeId, request: RequestId) {
        self.step(id, Input::ClientGone { id: request });
    }

    /// Delivers in-flight message `at` (dropped when its link is cut or its target is down).
    ///
    /// # Panics
    ///
    /// Panics if `at` is out of range.
    pub fn deliver(&mut self, at: usize) {
        let envelope = self.in_flight.remove(at);
        let line = describe_envelope(&envelope);
        if self.is_blocked(envelope.source, envelope.target) {
            self.trace_line(format!("{line} DROPPED (partition)"));
            return;
        }
        if self.node(envelope.target).is_none() {
            self.trace_line(format!("{line} DROPPED (target down)"));
            return;
        }
        self.trace_line(line);
        let input = Input::Message {
            from: envelope.source,
            msg: envelope.msg,
        };
        self.step(envelope.target, input);
    }

    /// Delivers the messages in flight now (not those they cause), oldest first, only those
    /// to `target` when given. Returns how many were delivered or dropped.
    pub fn deliver_all(&mut self, target: Option<NodeId>) -> usize {
        let count = self.in_flight.len();
        let mut done = 0;
        let mut at = 0;
        for _ in 0..count {
            if target.is_some_and(|t| self.in_flight[at].target != t) {
                at += 1;
                continue;
            }
            self.deliver(at);
            done += 1;
        }
        done
    }

    /// Drops in-flight message `at`.
    ///
    /// # Panics
    ///
    /// Panics if `at` is out of range.
    pub fn drop_message(&mut self, at: usize) {
        let envelope = self.in_flight.remove(at);
        let line = format!("{} DROPPED", describe_envelope(&envelope));
        self.trace_line(line);
    }

    /// Duplicates in-flight message `at` (the copy goes to the end).
    ///
    /// # Panics
    ///
    /// Panics if `at` is out of range.
    pub fn duplicate(&mut self, at: usize) {
        let envelope = self.in_flight[at].clone();
        self.in_flight.push(envelope);
    }

    /// Cuts every link between different groups; nodes in no group are cut from everyone.
    pub fn partition(&mut self, groups: &[Vec<NodeId>]) {
        self.blocked.clear();
        let group_of = |id: NodeId| groups.iter().position(|g| g.contains(&id));
        for a in self.ids() {
            for b in self.ids() {
                if a != b && (group_of(a).is_none() || group_of(a) != group_of(b)) {
                    self.blocked.insert((a, b));
                }
            }
        }
    }

    /// Cuts the links from `source` to each of `targets`, one way only: messages to
    /// `source` still arrive. Adds to the cuts already in place.
    pub fn cut_one_way(&mut self, source: NodeId, targets: &[NodeId]) {
        for target in targets {
            self.blocked.insert((source, *target));
        }
    }

    /// Restores every link.
    pub fn heal(&mut self) {
        self.blocked.clear();
    }

    fn is_blocked(&self, source: NodeId, target: NodeId) -> bool {
        self.blocked.contains(&(source, target))
    }

    /// Crashes node `id`: its in-memory state is lost, its durable state kept.
    pub fn crash(&mut self, id: NodeId) {
        self.member_mut(id).node = None;
        self.persisted_due.retain(|(node, _)| *node != id);
        self.trace_line(format!("{id}: crash"));
        self.check();
    }

    /// Restarts a crashed node `id` from its durable state.
    pub fn restart(&mut self, id: NodeId) {
        if self.node(id).is_none() {
            self.start(id);
        }
    }

    /// Delivers messages until none is in flight, without advancing time. Returns the
    /// number of rounds.
    ///
    /// # Panics
    ///
    /// Panics if messages still flow after [`STABILIZE_ROUNDS_MAX`] rounds.
    pub fn stabilize(&mut self) -> usize {
        for round in 0..STABILIZE_ROUNDS_MAX {
            if self.in_flight.is_empty() && self.persisted_due.is_empty() {
                return round;
            }
            while !self.persisted_due.is_empty() {
                self.report_persisted(0);
            }
            self.deliver_all(None);
        }
        panic!(
            "seed {}: messages still in flight after {STABILIZE_ROUNDS_MAX} rounds",
            self.seed
        );
    }

    /// Advances all clocks by `step_ms` and delivers everything, until `done` holds or
    /// `max_ms` passed. Returns whether `done` held.
    pub fn run_until(
        &mut self,
        max_ms: u64,
        step_ms: u64,
        done: impl Fn(&Cluster) -> bool,
    ) -> bool {
        let step_ms = step_ms.max(1);
        let mut elapsed = 0;
        while elapsed <= max_ms {
            if done(self) {
                return true;
            }
            self.tick_all(step_ms);
            self.stabilize();
            elapsed += step_ms;
        }
        done(self)
    }
}

/// A message as one line: `1->2 AppendEntries term=2 prev=1/1 entries=[2/2 Noop] commit=1`.
pub fn describe_envelope(envelope: &Envelope) -> String {
    format!(
        "{}->{} {}",
        envelope.source,
        envelope.target,
        describe_message(&envelope.msg)
    )
}

/// A message in words, without its addresses.
pub fn describe_message(msg: &Message) -> String {
    match msg {
        Message::PreVote {
            term,
            last_log_index,
            last_log_term,
        } => format!("PreVote term={term} last={last_log_term}/{last_log_index}"),
        Message::PreVoteResponse { term, granted } => {
            format!("PreVoteResponse term={term} {}", granted_word(*granted))
        }
        Message::RequestVote {
            term,
            last_log_index,
            last_log_term,
        } => format!("RequestVote term={term} last={last_log_term}/{last_log_index}"),
        Message::RequestVoteResponse { term, granted } => {
            format!("RequestVoteResponse term={term} {}", granted_word(*granted))
        }
        Message::AppendEntries {
            term,
            prev_log_index,
            prev_log_term,
            entries,
            leader_commit,
        } => format!(
            "AppendEntries term={term} prev={prev_log_term}/{prev_log_index} entries=[{}] commit={leader_commit}",
            entries
                .iter()
                .map(describe_entry)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Message::AppendEntriesResponse {
            term,
            success,
            match_index,
            reject_hint,
        } => {
            if *success {
                format!("AppendEntriesResponse term={term} ok match={match_index}")
            } else {
                format!("AppendEntriesResponse term={term} reject hint={reject_hint}")
            }
        }
        Message::InstallSnapshot {
            term,
            last_index,
            last_term,
            offset,
            data,
            done,
        } => {
            let end = offset + data.len() as u64;
            let mut text = format!(
                "InstallSnapshot term={term} snapshot={last_term}/{last_index} bytes={offset}..{end}"
            );
            if *done {
                text.push_str(" done");
            }
            // A whole snapshot in one chunk: show its locks.
            if *offset == 0
                && *done
                && let Ok(snapshot) = serde_json::from_slice::<crate::raft::Snapshot>(data)
            {
                let locks: Vec<String> = snapshot
                    .table
                    .locks()
                    .iter()
                    .map(|(k, h)| format!("{k}:{}", h.token))
                    .collect();
                text.push_str(&format!(" locks=[{}]", locks.join(", ")));
            }
            text
        }
        Message::TimeoutNow { term, campaign } => {
            let campaign = if *campaign { " campaign" } else { "" };
            format!("TimeoutNow term={term}{campaign}")
        }
        Message::InstallSnapshotResponse {
            term,
            last_index,
            received,
            done,
        } => {
            let state = if *done { " done" } else { "" };
            format!(
                "InstallSnapshotResponse term={term} last={last_index} received={received}{state}"
            )
        }
    }
}

fn granted_word(granted: bool) -> &'static str {
    if granted { "granted" } else { "rejected" }
}

/// An entry as `term/index Command`.
pub fn describe_entry(entry: &Entry) -> String {
    format!(
        "{}/{} {}",
        entry.term,
        entry.index,
        describe_command(&entry.proposal)
    )
}

/// A proposal's command in short: `Grant{a}`, `Release{a, 5}`, `Expire{a, 5}`, `Noop`.
pub fn describe_command(proposal: &Proposal) -> String {
    match &proposal.command {
        Command::Grant { key, .. } => format!("Grant{{{key}}}"),
        Command::Release { key, token } => format!("Release{{{key}, {token}}}"),
        Command::Expire { key, token } => format!("Expire{{{key}, {token}}}"),
        Command::Abandon { key, request } => format!("Abandon{{{key}, request {request}}}"),
        Command::Noop => "Noop".to_owned(),
        Command::RegisterSession => "RegisterSession".to_owned(),
    }
}

/// An outcome in short: `Granted{token=5}`, `GrantRejected`, `Expired{existed=true}`.
pub fn describe_outcome(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Granted { token } => format!("Granted{{token={token}}}"),
        Outcome::Expired { existed } => format!("Expired{{existed={existed}}}"),
        other => format!("{other:?}"),
    }
}
