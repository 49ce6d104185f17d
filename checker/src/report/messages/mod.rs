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
//!
//! # Files
//!
//! `mod.rs` the anchor (the failing op or refused step) and the window; `flow.rs` the traces
//! read into steps, sends matched to receives, and the one order; `draw.rs` the SVG.

mod draw;
mod flow;

use history::pair::Paired;
use history::{OpType, Operation};
use lockd::raft::{ClientRequest, NodeId, Response};
use lockd::trace::TraceLine;

use crate::Check;

use self::draw::Diagram;
use self::flow::Flow;

/// Rows drawn before the anchor's row.
pub const WINDOW_ROWS_BEFORE: usize = 36;
/// Rows drawn after the anchor's row.
pub const WINDOW_ROWS_AFTER: usize = 24;
/// Client lanes drawn; the clients beyond share one lane.
pub const CLIENT_LANES_MAX: usize = 10;
/// How far ahead in a link's sends a receive looks for its send.
pub const SEND_SEARCH_MAX: usize = 512;

pub(crate) const ROW_H: f64 = 24.0;
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
                    .filter(|(step, (_, request))| {
                        flow.client_of(**step) == Some(op.process) && request_matches(request, op)
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
        // The client's cleanup of an acquire it reported unknown belongs to that acquire.
        ClientRequest::Abandon { key, .. } => op.f == "acquire" && *key == op.key,
        ClientRequest::RegisterSession { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockd::lock::Origin;
    use lockd::raft::{Envelope, Input, Message, RequestId};
    use lockd::trace::OutputDigest;

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
                session: 4,
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
