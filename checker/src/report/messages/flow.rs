//! The traces read into steps, each received message matched to its send, each answer to
//! its request, and the steps merged into one order (see the module doc of
//! [`super`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use lockd::raft::{ClientRequest, Input, Message, NodeId, RequestId, Response};
use lockd::trace::{OutputDigest, TraceLine};

use super::SEND_SEARCH_MAX;

/// One record of a node's trace, in the node's order.
pub(super) struct Step<'a> {
    pub(super) node: NodeId,
    pub(super) seq: Option<u64>,
    /// The node's clock at this step (its last Tick, or the restart's reading).
    pub(super) local_ms: u64,
    pub(super) input: Option<&'a Input>,
    pub(super) output: Option<&'a OutputDigest>,
    /// A start or restart: (term, last log index) loaded, and whether the node ran before.
    pub(super) restart: Option<(u64, u64, bool)>,
}

/// The traces read into steps, with their sends matched to receives.
pub(super) struct Flow<'a> {
    pub(super) steps: Vec<Step<'a>>,
    /// For a receive step: its send (step, index in `sent`).
    pub(super) send_of: HashMap<usize, (usize, usize)>,
    /// For a send (step, index): its receive step.
    pub(super) receive_of: HashMap<(usize, usize), usize>,
    /// Each request's step -> (its client, the request).
    pub(super) requests: HashMap<usize, (Option<u64>, &'a ClientRequest)>,
    /// For a step: the requests it answered, (request step, response).
    pub(super) answers: HashMap<usize, Vec<(usize, &'a Response)>>,
    /// The label (the client's history process) of each session, from its registration.
    pub(super) labels: HashMap<u64, u64>,
    /// Heartbeats: empty AppendEntries, and the answers sent by steps that received one.
    pub(super) heartbeat_sends: BTreeSet<(usize, usize)>,
    /// Steps in which a node sent its first AppendEntries of a term: it leads that term.
    pub(super) leads: HashMap<usize, u64>,
}

pub(super) fn is_heartbeat(msg: &Message) -> bool {
    matches!(msg, Message::AppendEntries { entries, .. } if entries.is_empty())
}

impl<'a> Flow<'a> {
    pub(super) fn read(lines: &'a [TraceLine]) -> Flow<'a> {
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
            labels: HashMap::new(),
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
                    | ClientRequest::Release { origin, .. }
                    | ClientRequest::Abandon { origin, .. } => origin.map(|o| o.session),
                    ClientRequest::RegisterSession { .. } => None,
                };
                self.requests.insert(i, (client, request));
                open.insert((step.node, *id), i);
            }
            for (id, response) in step.output.map_or(&[][..], |o| &o.respond) {
                if let Some(request) = open.get(&(step.node, *id)) {
                    // A session's label is its client's (the history's process): requests
                    // name their session, which the cluster assigned.
                    if let (
                        Some((_, ClientRequest::RegisterSession { label })),
                        Response::Registered { session },
                    ) = (self.requests.get(request), response)
                    {
                        self.labels.insert(*session, *label);
                    }
                    self.answers
                        .entry(i)
                        .or_default()
                        .push((*request, response));
                }
            }
        }
    }

    /// The client of the request taken at `step`, if it is one and names its client.
    pub(super) fn client_of(&self, step: usize) -> Option<u64> {
        let session = self.requests.get(&step).and_then(|(c, _)| *c)?;
        Some(self.labels.get(&session).copied().unwrap_or(session))
    }

    /// The steps in one order: each node's own, every matched receive after its send, the
    /// earliest corrected clock first. Returns the order and each step's corrected clock.
    pub(super) fn merge(&self) -> (Vec<usize>, Vec<u64>) {
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
            wide(self.steps[step].local_ms).saturating_add(offset[lane])
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
                offset[lane] = offset[lane].saturating_add(wide(last_local[lane] - s.local_ms));
            }
            last_local[lane] = s.local_ms;
            if let Some((send, _)) = self.send_of.get(&step)
                && placed[*send]
            {
                let sent = wide(est[*send]);
                if est_of(lane, step, &offset) < sent {
                    offset[lane] = sent.saturating_sub(wide(s.local_ms));
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
    pub(super) fn visible(&self, i: usize) -> bool {
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
    pub(super) fn heartbeat_only(&self, i: usize) -> bool {
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

/// A clock reading as a signed number, saturating (a trace is input: its clocks may read
/// anything).
fn wide(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}
