//! The message-flow diagram, `messages.svg` (issue 28): what the nodes and the clients said
//! to each other around the first failing op, or around the first step the model refuses,
//! drawn from the nodes' traces ([`lockd::trace`]) as a space-time diagram (Lamport's; as
//! ShiViz and Maelstrom's `messages.svg` draw them).
//!
//! # From traces to one order
//!
//! A node's trace lists the inputs its core stepped, in order, each with a digest of what
//! the step sent, applied and answered. A received message is matched to the send it came
//! from: on its directed link, the first unmatched send of an equal message, searched in
//! the sender's order ([`SEND_SEARCH_MAX`] sends ahead, since links drop, reorder and
//! duplicate). The steps of all nodes are then merged into one order that keeps each node's
//! own order and puts every matched receive after its send. Among the steps that may come
//! next, the earliest by the node's clock goes first; a node's clock is corrected, as a
//! Lamport clock is, so that a receive never reads earlier than its send (node clocks are
//! skewed by the clock nemesis and restart from 0 with a restarted process). Rows read top
//! down in that order: sent before received, and each node's steps as it took them.
//!
//! # What is drawn
//!
//! - One lane per node (`n1`, ...), and one per client process that sent a request in the
//!   window (the harness's client id is the history's process), at most
//!   [`CLIENT_LANES_MAX`]; the others share one lane.
//! - An arrow per Raft message and per client request and answer, labelled (`AE t3 +2 c5`:
//!   AppendEntries of term 3 with two entries, leader commit 5). A message whose receive is
//!   outside the window runs to the window's edge, dashed; one never received ends in a
//!   cross.
//! - Marks on the lanes, with their words in the notes column: an election (a pre-vote or
//!   vote request sent), a leader's first AppendEntries of a term, applies (commits, with
//!   the lock table's outcome), restarts (crash and restart from what storage loaded), a
//!   client that left.
//! - The failing op (its request and answer) in red, `class="failing"`, or the refused step
//!   ringed in red, with the reason.
//!
//! To stay readable at 5 nodes and 10 clients, steps that only pass heartbeats (empty
//! AppendEntries and the answers to them) collapse into one row that counts them, steps that
//! do nothing are left out, and the window holds [`WINDOW_ROWS_BEFORE`] rows before the
//! anchor and [`WINDOW_ROWS_AFTER`] after it; the title counts what is not shown.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

use history::pair::Paired;
use history::{OpType, Operation};
use lockd::lock::{Command, Outcome};
use lockd::raft::{ClientRequest, Input, Message, NodeId, RequestId, Response};
use lockd::trace::{OutputDigest, TraceLine};

use crate::Check;
use crate::report::plot::svg::escape;

/// Rows drawn before the anchor's row.
pub const WINDOW_ROWS_BEFORE: usize = 36;
/// Rows drawn after the anchor's row.
pub const WINDOW_ROWS_AFTER: usize = 24;
/// Client lanes drawn; the clients beyond share one lane.
pub const CLIENT_LANES_MAX: usize = 10;
/// How far ahead in a link's sends a receive looks for its send.
pub const SEND_SEARCH_MAX: usize = 512;

const ROW_H: f64 = 24.0;
const TOP: f64 = 92.0;
const NODE_GAP: f64 = 110.0;
const CLIENT_GAP: f64 = 72.0;
/// The notes column, left of the lanes (so it stays on screen beside the failing op).
const NOTES_X: f64 = 10.0;
const NOTES_W: f64 = 400.0;
const LEFT: f64 = NOTES_X + NOTES_W + 40.0;
const FAILING: &str = "#d62728";

/// What the diagram is drawn around.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Anchor {
    /// A client op of the history (the first op a failing check names).
    Op(OpAnchor),
    /// A node's step (the first step the model refuses, `locksmith model replay`).
    Step {
        /// The node.
        node: NodeId,
        /// Its step number in the trace.
        seq: u64,
        /// Why the model refuses it.
        reason: String,
    },
}

/// A client op to find in the traces: its request and answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpAnchor {
    /// The history's process (the harness's client id).
    pub process: u64,
    /// `acquire` or `release`.
    pub f: String,
    /// The key.
    pub key: String,
    /// The answer the history recorded, when it says one.
    pub answer: Answer,
    /// The node that answered, when the history names it.
    pub node: Option<NodeId>,
    /// The op's time in the history, ms since the start (nodes' clocks are close to it).
    pub time_ms: u64,
    /// The op in words, for the diagram's notes.
    pub text: String,
}

/// The answer a history row records, as the node's [`Response`] would say it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// `Granted { token }`.
    Granted(u64),
    /// `Busy`.
    Busy,
    /// `Released`.
    Released,
    /// `NotHolder`.
    NotHolder,
    /// Any answer (an `info` op, or a word with no one response).
    Any,
}

impl Answer {
    fn matches(self, response: &Response) -> bool {
        match (self, response) {
            (Answer::Granted(t), Response::Granted { token }) => t == *token,
            (Answer::Busy, Response::Busy)
            | (Answer::Released, Response::Released)
            | (Answer::NotHolder, Response::NotHolder)
            | (Answer::Any, _) => true,
            _ => false,
        }
    }
}

/// The anchor a failing check gives: the first row the first invalid result names (its
/// explanation's subject: the op that cannot take effect, the second grant of a token), as
/// an op of `paired`. `None` when no check failed or its rows name no client op.
pub fn anchor_of_check(paired: &Paired, check: &Check) -> Option<Anchor> {
    let failing = check
        .results
        .iter()
        .find(|r| r.verdict == crate::Verdict::Invalid && !r.rows.is_empty())?;
    let row = *failing.rows.first()?;
    let op = paired.operations.iter().find(|op| {
        op.invoke.index == row || op.completion.as_ref().is_some_and(|c| c.index == row)
    })?;
    Some(Anchor::Op(op_anchor(op, failing.name.as_str())))
}

fn op_anchor(op: &Operation, check: &str) -> OpAnchor {
    let completion = op.completion.as_ref();
    let answer = match completion.map(|c| (c.op_type, c.error.as_str(), c.token)) {
        Some((OpType::Ok, _, Some(token))) if op.f.as_str() == "acquire" => Answer::Granted(token),
        Some((OpType::Ok, _, _)) if op.f.as_str() == "release" => Answer::Released,
        Some((OpType::Fail, "busy", _)) => Answer::Busy,
        Some((OpType::Fail, "not-holder", _)) => Answer::NotHolder,
        _ => Answer::Any,
    };
    let node = completion
        .and_then(|c| c.node.as_str().strip_prefix('n'))
        .and_then(|n| n.parse().ok());
    let end = op.return_ns().unwrap_or(op.call_ns());
    let outcome = match completion {
        Some(c) if c.op_type == OpType::Ok => match c.token {
            Some(t) => format!("ok token {t}"),
            None => "ok".to_owned(),
        },
        Some(c) => format!("{} {}", c.op_type, c.error),
        None => "never completed".to_owned(),
    };
    OpAnchor {
        process: op.process,
        f: op.f.as_str().to_owned(),
        key: op.key.as_str().to_owned(),
        answer,
        node,
        time_ms: (op.call_ns() / 2 + end / 2) / 1_000_000,
        text: format!(
            "{check}: process {}'s {} {} -> {outcome} ({}, {} .. {})",
            op.process,
            op.f,
            op.key,
            super::rows_of(op),
            super::fmt_ns(op.call_ns()),
            op.return_ns().map_or("never".to_owned(), super::fmt_ns),
        ),
    }
}

/// One record of a node's trace, in the node's order.
struct Step<'a> {
    node: NodeId,
    seq: Option<u64>,
    /// The node's clock at this step (its last Tick, or the restart's reading).
    local_ms: u64,
    input: Option<&'a Input>,
    output: Option<&'a OutputDigest>,
    /// A start or restart: (term, last log index) loaded, and whether the node ran before.
    restart: Option<(u64, u64, bool)>,
}

/// The traces read into steps, with their sends matched to receives.
struct Flow<'a> {
    steps: Vec<Step<'a>>,
    /// For a receive step: its send (step, index in `sent`).
    send_of: HashMap<usize, (usize, usize)>,
    /// For a send (step, index): its receive step.
    receive_of: HashMap<(usize, usize), usize>,
    /// Each request's step -> (its client, the request).
    requests: HashMap<usize, (Option<u64>, &'a ClientRequest)>,
    /// For a step: the requests it answered, (request step, response).
    answers: HashMap<usize, Vec<(usize, &'a Response)>>,
    /// Heartbeats: empty AppendEntries, and the answers sent by steps that received one.
    heartbeat_sends: BTreeSet<(usize, usize)>,
    /// Steps in which a node sent its first AppendEntries of a term: it leads that term.
    leads: HashMap<usize, u64>,
}

fn is_heartbeat(msg: &Message) -> bool {
    matches!(msg, Message::AppendEntries { entries, .. } if entries.is_empty())
}

impl<'a> Flow<'a> {
    fn read(lines: &'a [TraceLine]) -> Flow<'a> {
        let mut per_node: BTreeMap<NodeId, Vec<Step<'a>>> = BTreeMap::new();
        let mut clock: HashMap<NodeId, u64> = HashMap::new();
        for line in lines {
            match line {
                TraceLine::Config { .. } => {}
                TraceLine::Restart {
                    node,
                    restart,
                    now_ms,
                } => {
                    clock.insert(*node, *now_ms);
                    let last = restart
                        .entries
                        .last()
                        .map_or(restart.snapshot.as_ref().map_or(0, |s| s.last_index), |e| {
                            e.index
                        });
                    let steps = per_node.entry(*node).or_default();
                    let ran = !steps.is_empty();
                    steps.push(Step {
                        node: *node,
                        seq: None,
                        local_ms: *now_ms,
                        input: None,
                        output: None,
                        restart: Some((restart.hard_state.term, last, ran)),
                    });
                }
                TraceLine::Step {
                    node,
                    seq,
                    input,
                    output,
                } => {
                    let now = clock.entry(*node).or_insert(0);
                    if let Input::Tick { now_ms } = input {
                        *now = *now_ms;
                    }
                    let local_ms = *now;
                    per_node.entry(*node).or_default().push(Step {
                        node: *node,
                        seq: Some(*seq),
                        local_ms,
                        input: Some(input),
                        output: output.as_ref(),
                        restart: None,
                    });
                }
            }
        }
        let steps: Vec<Step<'a>> = per_node.into_values().flatten().collect();
        let mut flow = Flow {
            steps,
            send_of: HashMap::new(),
            receive_of: HashMap::new(),
            requests: HashMap::new(),
            answers: HashMap::new(),
            heartbeat_sends: BTreeSet::new(),
            leads: HashMap::new(),
        };
        flow.match_messages();
        flow.match_requests();
        flow
    }

    fn match_messages(&mut self) {
        // Per directed link, the sends in the sender's order.
        let mut links: HashMap<(NodeId, NodeId), Vec<(usize, usize)>> = HashMap::new();
        let mut led: BTreeSet<(NodeId, u64)> = BTreeSet::new();
        for (i, step) in self.steps.iter().enumerate() {
            let heartbeat_in =
                matches!(step.input, Some(Input::Message { msg, .. }) if is_heartbeat(msg));
            for (k, env) in step.output.map_or(&[][..], |o| &o.sent).iter().enumerate() {
                links
                    .entry((env.source, env.target))
                    .or_default()
                    .push((i, k));
                let answers_heartbeat =
                    heartbeat_in && matches!(env.msg, Message::AppendEntriesResponse { .. });
                if is_heartbeat(&env.msg) || answers_heartbeat {
                    self.heartbeat_sends.insert((i, k));
                }
                if let Message::AppendEntries { term, .. } = env.msg
                    && led.insert((env.source, term))
                {
                    self.leads.insert(i, term);
                }
            }
        }
        let mut first_open: HashMap<(NodeId, NodeId), usize> = HashMap::new();
        for (i, step) in self.steps.iter().enumerate() {
            let Some(Input::Message { from, msg }) = step.input else {
                continue;
            };
            let link = (*from, step.node);
            let Some(sends) = links.get(&link) else {
                continue;
            };
            let start = first_open.get(&link).copied().unwrap_or(0);
            let found = sends
                .iter()
                .enumerate()
                .skip(start)
                .take(SEND_SEARCH_MAX)
                .find(|(_, (s, k))| {
                    !self.receive_of.contains_key(&(*s, *k))
                        && self.steps[*s].output.map(|o| &o.sent[*k].msg) == Some(msg)
                });
            if let Some((at, &(s, k))) = found {
                self.receive_of.insert((s, k), i);
                self.send_of.insert(i, (s, k));
                let mut open = start;
                while open < sends.len() && open <= at && self.receive_of.contains_key(&sends[open])
                {
                    open += 1;
                }
                first_open.insert(link, open);
            }
        }
    }

    fn match_requests(&mut self) {
        // A node numbers its open requests, and a restarted node numbers them again: the
        // latest request under an id is the one an answer answers.
        let mut open: HashMap<(NodeId, RequestId), usize> = HashMap::new();
        for (i, step) in self.steps.iter().enumerate() {
            if step.restart.is_some() {
                open.retain(|(node, _), _| *node != step.node);
            }
            if let Some(Input::Request { id, request }) = step.input {
                let client = match request {
                    ClientRequest::Acquire { origin, .. }
                    | ClientRequest::Release { origin, .. } => origin.map(|o| o.client),
                };
                self.requests.insert(i, (client, request));
                open.insert((step.node, *id), i);
            }
            for (id, response) in step.output.map_or(&[][..], |o| &o.respond) {
                if let Some(request) = open.get(&(step.node, *id)) {
                    self.answers
                        .entry(i)
                        .or_default()
                        .push((*request, response));
                }
            }
        }
    }

    /// The client of the request taken at `step`, if it is one and names its client.
    fn client_of(&self, step: usize) -> Option<u64> {
        self.requests.get(&step).and_then(|(c, _)| *c)
    }

    /// The steps in one order: each node's own, every matched receive after its send, the
    /// earliest corrected clock first. Returns the order and each step's corrected clock.
    fn merge(&self) -> (Vec<usize>, Vec<u64>) {
        let mut lanes: BTreeMap<NodeId, Vec<usize>> = BTreeMap::new();
        for (i, s) in self.steps.iter().enumerate() {
            lanes.entry(s.node).or_default().push(i);
        }
        let lanes: Vec<Vec<usize>> = lanes.into_values().collect();
        let mut cursor = vec![0; lanes.len()];
        let mut offset = vec![0i64; lanes.len()];
        let mut last_local = vec![0u64; lanes.len()];
        let mut placed = vec![false; self.steps.len()];
        let mut est = vec![0u64; self.steps.len()];
        let mut order = Vec::with_capacity(self.steps.len());
        let est_of = |lane: usize, step: usize, offset: &[i64]| -> i64 {
            self.steps[step].local_ms as i64 + offset[lane]
        };
        while order.len() < self.steps.len() {
            let mut best: Option<(bool, i64, usize)> = None;
            for (lane, steps) in lanes.iter().enumerate() {
                let Some(&step) = steps.get(cursor[lane]) else {
                    continue;
                };
                let ready = self.send_of.get(&step).is_none_or(|(s, _)| placed[*s]);
                let key = (ready, est_of(lane, step, &offset), lane);
                let better = match best {
                    None => true,
                    Some((r, e, _)) => (ready && !r) || (ready == r && key.1 < e),
                };
                if better {
                    best = Some(key);
                }
            }
            let Some((_, _, lane)) = best else { break };
            let step = lanes[lane][cursor[lane]];
            let s = &self.steps[step];
            if s.local_ms < last_local[lane] {
                // A restarted process's clock starts over: keep the lane's time going.
                offset[lane] += (last_local[lane] - s.local_ms) as i64;
            }
            last_local[lane] = s.local_ms;
            if let Some((send, _)) = self.send_of.get(&step)
                && placed[*send]
            {
                let sent = est[*send] as i64;
                if est_of(lane, step, &offset) < sent {
                    offset[lane] = sent - s.local_ms as i64;
                }
            }
            est[step] = est_of(lane, step, &offset).max(0) as u64;
            placed[step] = true;
            order.push(step);
            cursor[lane] += 1;
        }
        (order, est)
    }

    /// Whether a step is worth a row: it sent, applied, answered, restarted, or took a
    /// request or a client's departure.
    fn visible(&self, i: usize) -> bool {
        let s = &self.steps[i];
        if s.restart.is_some() || self.leads.contains_key(&i) {
            return true;
        }
        if matches!(
            s.input,
            Some(Input::Request { .. } | Input::ClientGone { .. } | Input::Message { .. })
        ) {
            return true;
        }
        s.output
            .is_some_and(|o| !o.sent.is_empty() || !o.applied.is_empty() || !o.respond.is_empty())
    }

    /// Whether a step only passes heartbeats: received one or an answer to one, or sent
    /// nothing else, and applied and answered nothing.
    fn heartbeat_only(&self, i: usize) -> bool {
        let s = &self.steps[i];
        let input_ok = match s.input {
            Some(Input::Tick { .. }) => true,
            Some(Input::Message { msg, .. }) => {
                is_heartbeat(msg)
                    || self
                        .send_of
                        .get(&i)
                        .is_some_and(|send| self.heartbeat_sends.contains(send))
            }
            _ => false,
        };
        let Some(out) = s.output else {
            return input_ok;
        };
        input_ok
            && out.applied.is_empty()
            && out.respond.is_empty()
            && !self.leads.contains_key(&i)
            && (0..out.sent.len()).all(|k| self.heartbeat_sends.contains(&(i, k)))
    }
}

/// A row of the diagram: one step, or heartbeat-only steps collapsed.
enum Row {
    Step(usize),
    Heartbeats(Vec<usize>),
}

/// Renders the diagram of `lines` around `anchor`, titled `title`.
pub fn render(title: &str, lines: &[TraceLine], anchor: &Anchor) -> String {
    let flow = Flow::read(lines);
    let (order, est) = flow.merge();
    let visible: Vec<usize> = order.iter().copied().filter(|i| flow.visible(*i)).collect();
    let (anchor_step, answer_step, note) = find_anchor(&flow, &est, &visible, anchor);
    // Rows: heartbeat-only runs collapse.
    let mut rows: Vec<Row> = Vec::new();
    let mut anchor_row = 0;
    for &i in &visible {
        if Some(i) == anchor_step {
            anchor_row = rows.len();
        }
        if flow.heartbeat_only(i) && Some(i) != anchor_step {
            if let Some(Row::Heartbeats(run)) = rows.last_mut() {
                run.push(i);
                continue;
            }
            rows.push(Row::Heartbeats(vec![i]));
        } else {
            rows.push(Row::Step(i));
        }
    }
    let first = anchor_row.saturating_sub(WINDOW_ROWS_BEFORE);
    let last = (anchor_row + WINDOW_ROWS_AFTER + 1).min(rows.len());
    let hidden = (first, rows.len() - last);
    let window = &rows[first..last];
    let mut diagram = Diagram::new(&flow, window, anchor_step, answer_step);
    if let Anchor::Step { .. } = anchor {
        diagram.anchor_label = "the step the model refuses";
    }
    diagram.draw(title, anchor, &note, hidden)
}

/// The anchor's step (the request, or the refused step), the answer's step, and a note when
/// the anchor could not be found exactly.
fn find_anchor(
    flow: &Flow,
    est: &[u64],
    visible: &[usize],
    anchor: &Anchor,
) -> (Option<usize>, Option<usize>, String) {
    match anchor {
        Anchor::Step { node, seq, .. } => {
            let step = visible
                .iter()
                .copied()
                .find(|i| flow.steps[*i].node == *node && flow.steps[*i].seq == Some(*seq))
                .or_else(|| {
                    // A refused step that did nothing visible: the nearest visible step of
                    // that node.
                    visible
                        .iter()
                        .copied()
                        .rfind(|i| flow.steps[*i].node == *node && flow.steps[*i].seq <= Some(*seq))
                });
            let note = if step.is_none() {
                format!("node {node}'s step {seq} is not in the traces")
            } else {
                String::new()
            };
            (step, None, note)
        }
        Anchor::Op(op) => {
            let answer_of = |request: usize| {
                flow.answers.iter().find_map(|(step, list)| {
                    list.iter()
                        .find(|(r, _)| *r == request)
                        .map(|(_, resp)| (*step, *resp))
                })
            };
            let candidates = |strict: bool| -> Vec<(usize, Option<usize>)> {
                flow.requests
                    .iter()
                    .filter(|(_, (client, request))| {
                        *client == Some(op.process) && request_matches(request, op)
                    })
                    .filter(|(step, _)| {
                        op.node
                            .is_none_or(|n| !strict || flow.steps[**step].node == n)
                    })
                    .filter_map(|(step, _)| {
                        let answer = answer_of(*step);
                        let fits = answer.is_some_and(|(_, resp)| op.answer.matches(resp));
                        (fits || !strict).then_some((*step, answer.map(|(s, _)| s)))
                    })
                    .collect()
            };
            let mut found = candidates(true);
            let mut note = String::new();
            if found.is_empty() {
                found = candidates(false);
                note = "no request with the recorded answer was found in the traces; the \
                        client's nearest request on that key is highlighted"
                    .to_owned();
            }
            let best = found
                .into_iter()
                .min_by_key(|(step, _)| (est[*step].abs_diff(op.time_ms), *step));
            match best {
                Some((step, answer)) => (Some(step), answer, note),
                None => {
                    let near = visible
                        .iter()
                        .copied()
                        .min_by_key(|i| est[*i].abs_diff(op.time_ms));
                    (
                        near,
                        None,
                        "the failing op's request is not in the traces; the window is \
                         centred on its time"
                            .to_owned(),
                    )
                }
            }
        }
    }
}

fn request_matches(request: &ClientRequest, op: &OpAnchor) -> bool {
    match request {
        ClientRequest::Acquire { key, .. } => op.f == "acquire" && *key == op.key,
        ClientRequest::Release { key, .. } => op.f == "release" && *key == op.key,
    }
}

/// The drawing of a window.
struct Diagram<'f, 'a> {
    flow: &'f Flow<'a>,
    rows: &'f [Row],
    nodes: Vec<NodeId>,
    /// Client lanes: the client, or `None` for the shared lane of the others.
    clients: Vec<Option<u64>>,
    /// Step -> row.
    row_of: HashMap<usize, usize>,
    anchor: Option<usize>,
    answer: Option<usize>,
    /// What the anchor's step is, in the notes.
    anchor_label: &'static str,
}

impl<'f, 'a> Diagram<'f, 'a> {
    fn new(
        flow: &'f Flow<'a>,
        rows: &'f [Row],
        anchor: Option<usize>,
        answer: Option<usize>,
    ) -> Self {
        let nodes: BTreeSet<NodeId> = flow.steps.iter().map(|s| s.node).collect();
        let mut row_of = HashMap::new();
        let mut clients: BTreeSet<u64> = BTreeSet::new();
        let mut anonymous = false;
        for (r, row) in rows.iter().enumerate() {
            let steps = match row {
                Row::Step(i) => std::slice::from_ref(i),
                Row::Heartbeats(run) => &run[..],
            };
            for &i in steps {
                row_of.insert(i, r);
                let requested = flow.requests.get(&i).map(|(c, _)| *c);
                let answered = (flow.answers.get(&i).into_iter().flatten())
                    .map(|(request, _)| flow.client_of(*request));
                for client in requested.into_iter().chain(answered) {
                    match client {
                        Some(c) => {
                            clients.insert(c);
                        }
                        None => anonymous = true,
                    }
                }
            }
        }
        // The failing op's client always gets a lane of its own.
        let must = anchor.and_then(|a| flow.client_of(a));
        let mut lanes: Vec<Option<u64>> = must.into_iter().map(Some).collect();
        for c in &clients {
            if lanes.len() < CLIENT_LANES_MAX && Some(*c) != must {
                lanes.push(Some(*c));
            }
        }
        lanes.sort();
        if anonymous || clients.len() > lanes.len() {
            lanes.push(None);
        }
        Diagram {
            flow,
            rows,
            nodes: nodes.into_iter().collect(),
            clients: lanes,
            row_of,
            anchor,
            answer,
            anchor_label: "the failing op",
        }
    }

    fn node_x(&self, node: NodeId) -> f64 {
        let at = self.nodes.iter().position(|n| *n == node).unwrap_or(0);
        LEFT + NODE_GAP * at as f64
    }

    fn client_x(&self, client: Option<u64>) -> f64 {
        let base = LEFT + NODE_GAP * self.nodes.len() as f64;
        let at = self
            .clients
            .iter()
            .position(|c| *c == client)
            .unwrap_or(self.clients.len().saturating_sub(1));
        base + CLIENT_GAP * at as f64
    }

    fn right(&self) -> f64 {
        self.client_x(None)
            .max(LEFT + NODE_GAP * self.nodes.len().saturating_sub(1) as f64)
            + 40.0
    }

    fn y(&self, row: usize) -> f64 {
        TOP + ROW_H * row as f64 + ROW_H / 2.0
    }

    fn draw(&self, title: &str, anchor: &Anchor, note: &str, hidden: (usize, usize)) -> String {
        let width = self.right() + 10.0;
        let height = TOP + ROW_H * self.rows.len() as f64 + 40.0;
        let mut svg = String::new();
        let _ = write!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="11">
<defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="context-stroke"/></marker></defs>
<rect width="100%" height="100%" fill="white"/>
<text x="10" y="18" font-size="15" font-weight="bold">{}</text>
"#,
            escape(&format!("messages: {title}"))
        );
        let focus = match anchor {
            Anchor::Op(op) => format!("failing op: {}", op.text),
            Anchor::Step {
                node, seq, reason, ..
            } => format!("the model refuses node {node}'s step {seq}: {reason}"),
        };
        let _ = writeln!(
            svg,
            r#"<text x="10" y="36" fill="{FAILING}" class="focus">{}</text>"#,
            escape(&truncate(&focus, 220))
        );
        let counts = format!(
            "{} rows shown in sent/received order; {} rows before and {} after not shown; heartbeat-only steps collapsed with counts{}",
            self.rows.len(),
            hidden.0,
            hidden.1,
            if note.is_empty() {
                String::new()
            } else {
                format!("; {note}")
            }
        );
        let _ = writeln!(
            svg,
            r##"<text x="10" y="52" fill="#555">{}</text>"##,
            escape(&counts)
        );
        self.draw_lanes(&mut svg, height);
        for (r, row) in self.rows.iter().enumerate() {
            match row {
                Row::Step(i) => self.draw_step(&mut svg, r, *i),
                Row::Heartbeats(run) => self.draw_heartbeats(&mut svg, r, run),
            }
        }
        svg.push_str("</svg>\n");
        svg
    }

    fn draw_lanes(&self, svg: &mut String, height: f64) {
        let bottom = height - 20.0;
        let lane = |svg: &mut String, name: &str, x: f64, colour: &str| {
            let _ = writeln!(
                svg,
                r#"<g class="lane" data-lane="{name}"><line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{bottom:.1}" stroke="{colour}" stroke-width="1.5"/><text x="{x:.1}" y="{:.1}" text-anchor="middle" font-weight="bold">{name}</text></g>"#,
                TOP - 14.0,
                TOP - 18.0
            );
        };
        for n in &self.nodes {
            lane(svg, &format!("n{n}"), self.node_x(*n), "#333");
        }
        for c in &self.clients {
            let name = match c {
                Some(c) => format!("client {c}"),
                None => "other clients".to_owned(),
            };
            lane(svg, &name, self.client_x(*c), "#8ab");
        }
        let _ = writeln!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" font-weight="bold">notes</text>"##,
            NOTES_X,
            TOP - 18.0
        );
    }

    fn draw_heartbeats(&self, svg: &mut String, r: usize, run: &[usize]) {
        let y = self.y(r);
        let sent: usize = run
            .iter()
            .map(|i| self.flow.steps[*i].output.map_or(0, |o| o.sent.len()))
            .sum();
        let received = run
            .iter()
            .filter(|i| matches!(self.flow.steps[**i].input, Some(Input::Message { .. })))
            .count();
        let leaders: BTreeSet<NodeId> = run
            .iter()
            .filter(|i| matches!(self.flow.steps[**i].input, Some(Input::Tick { .. })))
            .map(|i| self.flow.steps[*i].node)
            .collect();
        let from: Vec<String> = leaders.iter().map(|n| format!("n{n}")).collect();
        let _ = writeln!(
            svg,
            r##"<g class="heartbeats" data-steps="{}" data-sent="{sent}" data-received="{received}"><rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#eee"/><text x="{:.1}" y="{:.1}" fill="#777">heartbeats collapsed: {} steps, {sent} sent, {received} received{}</text></g>"##,
            run.len(),
            NOTES_X,
            y - ROW_H / 2.0 + 3.0,
            self.right() - NOTES_X,
            ROW_H - 6.0,
            NOTES_X,
            y + 4.0,
            run.len(),
            if from.is_empty() {
                String::new()
            } else {
                format!(" (from {})", from.join(", "))
            }
        );
    }

    fn draw_step(&self, svg: &mut String, r: usize, i: usize) {
        let step = &self.flow.steps[i];
        let y = self.y(r);
        let x = self.node_x(step.node);
        let mut notes: Vec<String> = Vec::new();
        let failing = Some(i) == self.anchor || Some(i) == self.answer;
        let class = if failing { "step failing" } else { "step" };
        if Some(i) == self.anchor {
            notes.push(self.anchor_label.to_owned());
        } else if Some(i) == self.answer {
            notes.push("the failing op's answer".to_owned());
        }
        // The row's own step: what came in.
        match (step.restart, step.input) {
            (Some((term, last, ran)), _) => {
                notes.push(if ran {
                    format!("crashed; restarted (term {term}, log to {last})")
                } else {
                    format!("started (term {term}, log to {last})")
                });
                let _ = writeln!(
                    svg,
                    r##"<g class="restart"><line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#000" stroke-width="2"/><line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#000" stroke-width="2"/></g>"##,
                    x - 6.0,
                    y - 6.0,
                    x + 6.0,
                    y + 6.0,
                    x - 6.0,
                    y + 6.0,
                    x + 6.0,
                    y - 6.0
                );
            }
            (None, Some(Input::Request { request, .. })) => {
                let cx = self.client_x(self.flow.client_of(i));
                self.arrow(
                    svg,
                    (cx, y - ROW_H * 0.45),
                    (x, y),
                    &request_text(request),
                    failing && Some(i) == self.anchor,
                    false,
                );
            }
            (None, Some(Input::ClientGone { id })) => {
                notes.push(format!("client of request {} left", id.0))
            }
            (None, Some(Input::Message { from, msg })) if !self.flow.send_of.contains_key(&i) => {
                // Received, with its send outside the window's rows or unknown.
                notes.push(format!("received {} from n{from}", message_text(msg)));
            }
            (None, Some(Input::Message { .. })) => {
                if let Some((send, _)) = self.flow.send_of.get(&i)
                    && !self.row_of.contains_key(send)
                {
                    let (s, k) = self.flow.send_of[&i];
                    if let Some(env) = self.flow.steps[s].output.map(|o| &o.sent[k]) {
                        let sx = self.node_x(env.source);
                        self.arrow(
                            svg,
                            (sx, TOP - 6.0),
                            (x, y),
                            &message_text(&env.msg),
                            false,
                            true,
                        );
                    }
                }
            }
            _ => {}
        }
        let _ = writeln!(
            svg,
            r#"<circle class="{class}" data-node="n{}" data-seq="{}" cx="{x:.1}" cy="{y:.1}" r="{}" fill="{}"/>"#,
            step.node,
            step.seq.map_or("restart".to_owned(), |s| s.to_string()),
            if failing { 6 } else { 3 },
            if failing { FAILING } else { "#333" }
        );
        let Some(out) = step.output else {
            self.notes(svg, y, step.node, &notes, failing);
            return;
        };
        self.draw_sends(svg, i, r, out, &mut notes);
        for c in &out.applied {
            notes.push(format!(
                "apply {} {} -> {}",
                c.index,
                command_text(&c.proposal.command),
                outcome_text(&c.outcome)
            ));
        }
        if !out.applied.is_empty() {
            let _ = writeln!(
                svg,
                r##"<rect class="apply" x="{:.1}" y="{:.1}" width="8" height="8" fill="#2ca02c"/>"##,
                x + 5.0,
                y - 4.0
            );
        }
        for (request, response) in self.flow.answers.get(&i).into_iter().flatten() {
            let cx = self.client_x(self.flow.client_of(*request));
            let is_failing = Some(i) == self.answer && self.anchor == Some(*request);
            self.arrow(
                svg,
                (x, y),
                (cx, y + ROW_H * 0.45),
                &response_text(response),
                is_failing,
                false,
            );
        }
        self.notes(svg, y, step.node, &notes, failing);
    }

    fn draw_sends(
        &self,
        svg: &mut String,
        i: usize,
        r: usize,
        out: &OutputDigest,
        notes: &mut Vec<String>,
    ) {
        let x = self.node_x(self.flow.steps[i].node);
        let y = self.y(r);
        let mut heartbeats = 0;
        let mut marked_terms = BTreeSet::new();
        for (k, env) in out.sent.iter().enumerate() {
            match &env.msg {
                Message::PreVote { term, .. } if marked_terms.insert(("pre", *term)) => {
                    notes.push(format!("pre-vote for term {term}"));
                }
                Message::RequestVote { term, .. } if marked_terms.insert(("vote", *term)) => {
                    notes.push(format!("election: campaigns for term {term}"));
                    let _ = writeln!(
                        svg,
                        r##"<g class="election"><circle cx="{x:.1}" cy="{y:.1}" r="9" fill="none" stroke="#9467bd" stroke-width="2"/></g>"##
                    );
                }
                _ => {}
            }
            if self.flow.heartbeat_sends.contains(&(i, k)) {
                heartbeats += 1;
                continue;
            }
            let tx = self.node_x(env.target);
            let text = message_text(&env.msg);
            match self
                .flow
                .receive_of
                .get(&(i, k))
                .map(|rcv| self.row_of.get(rcv))
            {
                Some(Some(&rr)) => {
                    self.arrow(svg, (x, y), (tx, self.y(rr)), &text, false, false);
                }
                Some(None) => {
                    let bottom = TOP + ROW_H * self.rows.len() as f64;
                    self.arrow(svg, (x, y), (tx, bottom), &text, false, true);
                }
                None => {
                    // Never received: the arrow stops short, with a cross.
                    let (ex, ey) = (x + (tx - x) * 0.4, y + ROW_H * 0.4);
                    self.arrow(
                        svg,
                        (x, y),
                        (ex, ey),
                        &format!("{text} (lost)"),
                        false,
                        true,
                    );
                    let _ = writeln!(
                        svg,
                        r##"<text class="lost" x="{ex:.1}" y="{:.1}" text-anchor="middle" fill="#d62728">x</text>"##,
                        ey + 4.0
                    );
                }
            }
        }
        if let Some(term) = self.flow.leads.get(&i) {
            notes.push(format!("leader of term {term}"));
            let _ = writeln!(
                svg,
                r##"<g class="leader"><rect x="{:.1}" y="{:.1}" width="14" height="14" fill="none" stroke="#ff7f0e" stroke-width="2"/></g>"##,
                x - 7.0,
                y - 7.0
            );
        }
        if heartbeats > 0 {
            notes.push(format!("{heartbeats} heartbeat message(s)"));
        }
    }

    fn arrow(
        &self,
        svg: &mut String,
        from: (f64, f64),
        to: (f64, f64),
        text: &str,
        failing: bool,
        dashed: bool,
    ) {
        let (colour, width, class) = if failing {
            (FAILING, 3.0, "msg failing")
        } else {
            ("#1f77b4", 1.0, "msg")
        };
        let dash = if dashed {
            r#" stroke-dasharray="4 3""#
        } else {
            ""
        };
        let id = if failing { r#" id="failing-op""# } else { "" };
        let _ = writeln!(
            svg,
            r#"<g class="{class}"{id}><title>{}</title><line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{colour}" stroke-width="{width}"{dash} marker-end="url(#head)"/><text x="{:.1}" y="{:.1}" fill="{colour}" font-size="9">{}</text></g>"#,
            escape(text),
            from.0,
            from.1,
            to.0,
            to.1,
            from.0 + (to.0 - from.0) * 0.25 + 3.0,
            from.1 + (to.1 - from.1) * 0.25 - 2.0,
            escape(&truncate(text, 28))
        );
    }

    fn notes(&self, svg: &mut String, y: f64, node: NodeId, notes: &[String], failing: bool) {
        if notes.is_empty() {
            return;
        }
        let colour = if failing { FAILING } else { "#222" };
        let _ = writeln!(
            svg,
            r#"<text class="note" x="{:.1}" y="{:.1}" fill="{colour}">{}</text>"#,
            NOTES_X,
            y + 4.0,
            escape(&truncate(&format!("n{node}: {}", notes.join("; ")), 70))
        );
    }
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

fn message_text(msg: &Message) -> String {
    match msg {
        Message::PreVote { term, .. } => format!("PreVote t{term}"),
        Message::PreVoteResponse { term, granted } => format!("PreVote t{term} {}", yes(*granted)),
        Message::RequestVote { term, .. } => format!("RequestVote t{term}"),
        Message::RequestVoteResponse { term, granted } => format!("Vote t{term} {}", yes(*granted)),
        Message::AppendEntries {
            term,
            entries,
            leader_commit,
            ..
        } => format!("AE t{term} +{} c{leader_commit}", entries.len()),
        Message::AppendEntriesResponse {
            term,
            success,
            match_index,
            ..
        } => format!("AE ok? t{term} {} m{match_index}", yes(*success)),
        Message::InstallSnapshot { term, snapshot } => {
            format!("Snapshot t{term} to {}", snapshot.last_index)
        }
        Message::InstallSnapshotResponse { term, last_index } => {
            format!("Snapshot ok t{term} {last_index}")
        }
    }
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn request_text(request: &ClientRequest) -> String {
    match request {
        ClientRequest::Acquire {
            key,
            lease_ms,
            wait_ms,
            ..
        } => {
            if *wait_ms == 0 {
                format!("Acquire {key} {lease_ms}ms")
            } else {
                format!("Acquire {key} {lease_ms}ms wait {wait_ms}")
            }
        }
        ClientRequest::Release { key, token, .. } => format!("Release {key} t{token}"),
    }
}

fn response_text(response: &Response) -> String {
    match response {
        Response::Granted { token } => format!("Granted {token}"),
        Response::Busy => "Busy".to_owned(),
        Response::Released => "Released".to_owned(),
        Response::NotHolder => "NotHolder".to_owned(),
        Response::NotLeader { leader } => match leader {
            Some(l) => format!("NotLeader (n{l})"),
            None => "NotLeader".to_owned(),
        },
        Response::Unknown { reason } => format!("Unknown: {reason}"),
        Response::Invalid { reason } => format!("Invalid: {reason}"),
    }
}

fn command_text(command: &Command) -> String {
    match command {
        Command::Grant { key, lease_ms } => format!("Grant {key} {lease_ms}ms"),
        Command::Release { key, token } => format!("Release {key} t{token}"),
        Command::Expire { key, token } => format!("Expire {key} t{token}"),
        Command::Noop => "Noop".to_owned(),
    }
}

fn outcome_text(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Granted { token } => format!("Granted {token}"),
        Outcome::GrantRejected => "GrantRejected".to_owned(),
        Outcome::Released => "Released".to_owned(),
        Outcome::NotFound => "NotFound".to_owned(),
        Outcome::Expired { existed } => format!("Expired (existed: {existed})"),
        Outcome::Noop => "Noop".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockd::lock::Origin;
    use lockd::raft::Envelope;

    fn step(node: NodeId, seq: u64, input: Input, output: OutputDigest) -> TraceLine {
        TraceLine::Step {
            node,
            seq,
            input,
            output: Some(output),
        }
    }

    fn digest(sent: Vec<Envelope>, respond: Vec<(RequestId, Response)>) -> OutputDigest {
        OutputDigest {
            sent,
            applied: Vec::new(),
            respond,
            persisted: false,
        }
    }

    fn vote(term: u64) -> Message {
        Message::RequestVote {
            term,
            last_log_index: 0,
            last_log_term: 0,
        }
    }

    /// n1 asks n2 for a vote; n2 answers a client's acquire with Granted 7.
    fn trace() -> Vec<TraceLine> {
        let envelope = Envelope {
            source: 1,
            target: 2,
            msg: vote(1),
        };
        let acquire = ClientRequest::Acquire {
            key: "a".into(),
            lease_ms: 1000,
            wait_ms: 0,
            origin: Some(Origin {
                client: 4,
                request: 1,
            }),
        };
        vec![
            step(
                1,
                0,
                Input::Tick { now_ms: 10 },
                digest(vec![envelope], vec![]),
            ),
            step(
                2,
                0,
                Input::Message {
                    from: 1,
                    msg: vote(1),
                },
                digest(vec![], vec![]),
            ),
            step(
                2,
                1,
                Input::Request {
                    id: RequestId(1),
                    request: acquire,
                },
                digest(vec![], vec![(RequestId(1), Response::Granted { token: 7 })]),
            ),
        ]
    }

    #[test]
    fn the_failing_op_is_found_by_client_key_and_answer_and_drawn_in_red() {
        // Issue 28 item 1: lanes per node and client; the op a check names highlighted.
        let anchor = Anchor::Op(OpAnchor {
            process: 4,
            f: "acquire".into(),
            key: "a".into(),
            answer: Answer::Granted(7),
            node: Some(2),
            time_ms: 12,
            text: "process 4's acquire a".into(),
        });
        let svg = render("t", &trace(), &anchor);
        for lane in ["n1", "n2", "client 4"] {
            assert!(
                svg.contains(&format!("data-lane=\"{lane}\"")),
                "{lane}: {svg}"
            );
        }
        assert_eq!(svg.matches("class=\"msg failing\"").count(), 2, "{svg}");
        assert!(svg.contains("election: campaigns for term 1"), "{svg}");
        // The vote request is matched to its receive: an arrow, not a lost message.
        assert!(!svg.contains("(lost)"), "{svg}");
        assert!(!svg.contains("not in the traces"), "{svg}");
    }

    #[test]
    fn an_anchor_that_is_not_in_the_traces_is_said_and_nothing_panics() {
        // Never panic on bad input: an empty trace, an op no request matches, a step that
        // does not exist.
        let missing = Anchor::Op(OpAnchor {
            process: 9,
            f: "release".into(),
            key: "z".into(),
            answer: Answer::Released,
            node: None,
            time_ms: 0,
            text: "x".into(),
        });
        let svg = render("t", &trace(), &missing);
        assert!(svg.contains("not in the traces"), "{svg}");
        let step = Anchor::Step {
            node: 7,
            seq: 3,
            reason: "r".into(),
        };
        assert!(render("t", &trace(), &step).contains("node 7's step 3 is not in the traces"));
        assert!(render("t", &[], &step).contains("</svg>"));
        assert!(render("t", &[], &missing).contains("</svg>"));
    }
}
