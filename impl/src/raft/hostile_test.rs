//! Hostile peers and clients, generated: seeded sequences of messages with absurd terms,
//! indexes, leases, tokens and snapshot bytes (0, 1, values next to the node's own, values
//! next to `u64::MAX`, random ones), mixed with honest traffic, fed to nodes in each role.
//!
//! Issue 27 asks that a peer's message with absurd indexes or terms, or an unknown sender,
//! be refused and logged, never a panic; the hand-written cases in `replication.rs` cover the
//! values someone thought of. Here every input the core does not refuse (`Node::refusal`, as
//! the server's core asks before stepping) is stepped, and then:
//! - the step must not panic, and the node's own invariants (`Node::check_invariants`) must
//!   hold after it;
//! - every persist the step asks for must pass the checks storage makes before it writes
//!   (`storage::checks::check_persist`): a persist storage refuses stops the node, so a
//!   hostile peer that can make one can stop any node;
//! - the step keeps Raft's receiver rules and the leader's (`invariants::step_rules`): they
//!   hold whatever a peer sends; and the node renamed steps as the original renamed
//!   (`rename_commutes`, the model's symmetry).
//!
//! A failure prints the seed, the step and the input, and the test replays from the seed.

use std::panic::{AssertUnwindSafe, catch_unwind};

use super::test_support::{append, durable_of, leader_with};
use super::{
    ClientRequest, Config, Durable, Entry, Index, Input, Message, Node, NodeId, RequestId, Term,
};
use crate::lock::{Command, Origin, Proposal};
use crate::rng::splitmix64;

thread_local! {
    /// Where the last caught panic happened (the quiet panic hook records it).
    static PANIC_AT: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Sequences per test run, and inputs per sequence.
const SEQUENCES: u64 = 40_000;
const STEPS: usize = 60;

struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        splitmix64(&mut self.0)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }

    /// A value a hostile peer might send where `near` is what an honest one would.
    fn value(&mut self, near: u64) -> u64 {
        match self.below(12) {
            0 => 0,
            1 => 1,
            2 => near,
            3 => near.saturating_add(1),
            4 => near.saturating_sub(1),
            5 => near.saturating_add(2 + self.below(5)),
            6 => u64::MAX,
            7 => u64::MAX - 1 - self.below(3),
            8 => u64::MAX / 2,
            9 => self.next(),
            _ => self.below(8),
        }
    }

    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize].clone()
    }
}

fn command(g: &mut Gen, near_token: u64) -> Command {
    let key = g.pick(&["a", "b", ""]).to_owned();
    match g.below(5) {
        0 => Command::Grant {
            key,
            lease_ms: g.value(5000),
        },
        1 => Command::Release {
            key,
            token: g.value(near_token),
        },
        2 => Command::Expire {
            key,
            token: g.value(near_token),
        },
        3 => Command::Noop,
        _ => Command::RegisterSession,
    }
}

fn proposal(g: &mut Gen, near_index: u64) -> Proposal {
    let origin = g.chance(2).then(|| Origin {
        session: g.value(near_index),
        request: g.value(1),
    });
    Proposal {
        origin,
        command: command(g, near_index),
        time_ms: g.value(1000),
    }
}

/// Entries after `prev` (index, term) up to `term`: contiguous and of non-decreasing terms
/// (what `well_formed` lets through) most of the time, anything otherwise.
fn entries(g: &mut Gen, prev: (Index, Term), term: Term) -> Vec<Entry> {
    let count = g.below(4) as usize;
    let shaped = !g.chance(5);
    let mut out = Vec::with_capacity(count);
    let (mut index, mut last_term) = prev;
    for _ in 0..count {
        let (entry_index, entry_term) = if shaped {
            let t = if g.chance(2) { last_term } else { term };
            (index.saturating_add(1), t.max(last_term).min(term))
        } else {
            (g.value(index.saturating_add(1)), g.value(term))
        };
        out.push(Entry {
            term: entry_term,
            index: entry_index,
            proposal: proposal(g, entry_index),
        });
        index = entry_index;
        last_term = entry_term;
    }
    out
}

fn message(g: &mut Gen, node: &Node) -> Message {
    let status = node.status();
    let (last_index, term) = (status.last_log_index, status.term);
    let msg_term = if g.chance(3) { term } else { g.value(term) };
    match g.below(9) {
        0 => Message::PreVote {
            term: msg_term,
            last_log_index: g.value(last_index),
            last_log_term: g.value(term),
        },
        1 => Message::PreVoteResponse {
            term: msg_term,
            granted: g.chance(2),
        },
        2 => Message::RequestVote {
            term: msg_term,
            last_log_index: g.value(last_index),
            last_log_term: g.value(term),
        },
        3 => Message::RequestVoteResponse {
            term: msg_term,
            granted: g.chance(2),
        },
        4 | 5 => {
            let prev_log_index = g.value(last_index);
            let prev_log_term = if g.chance(2) {
                node.term_at(prev_log_index).unwrap_or(0)
            } else {
                g.value(term)
            };
            Message::AppendEntries {
                term: msg_term,
                prev_log_index,
                prev_log_term,
                entries: entries(g, (prev_log_index, prev_log_term), msg_term),
                leader_commit: g.value(status.commit_index.max(last_index)),
            }
        }
        6 => Message::AppendEntriesResponse {
            term: msg_term,
            success: g.chance(2),
            match_index: g.value(last_index),
            reject_hint: g.value(last_index),
        },
        7 if g.chance(2) => {
            // A snapshot that decodes: a table built from absurd entries, at an index that
            // may be absurd too.
            // (Rarely absurd: a node past a snapshot at `u64::MAX - 1` refuses the rest of
            // the sequence as malformed, and the sequence stops testing anything.)
            let last_index = if g.chance(8) {
                g.value(last_index).max(1)
            } else {
                last_index.saturating_add(1 + g.below(4))
            };
            let mut table = crate::lock::LockTable::new();
            let first = last_index.saturating_sub(g.below(4)).max(1);
            for index in first..=last_index {
                table.apply_proposal(index, &proposal(g, index));
            }
            let snapshot = super::Snapshot {
                last_index,
                last_term: g.value(term),
                table,
            };
            let mut data = super::snapshot::encode(&snapshot);
            if g.chance(3) {
                data = forge_a_number(g, &data);
            }
            Message::InstallSnapshot {
                term: msg_term,
                last_index: snapshot.last_index,
                last_term: snapshot.last_term,
                offset: 0,
                data,
                done: true,
            }
        }
        7 => {
            let len = g.below(48) as usize;
            Message::InstallSnapshot {
                term: msg_term,
                last_index: g.value(last_index),
                last_term: g.value(term),
                offset: if g.chance(2) { 0 } else { g.value(len as u64) },
                data: (0..len).map(|_| g.next() as u8).collect(),
                done: g.chance(2),
            }
        }
        _ => {
            if g.chance(2) {
                Message::InstallSnapshotResponse {
                    term: msg_term,
                    last_index: g.value(last_index),
                    received: g.value(0),
                    done: g.chance(2),
                }
            } else {
                Message::TimeoutNow {
                    term: msg_term,
                    campaign: g.chance(2),
                }
            }
        }
    }
}

/// A snapshot's bytes with one of its numbers (a token, an index, a lease, a session's
/// field, ...) replaced by a hostile value near it: a table no run of entries builds, which
/// still decodes. (A table built only by applying entries is consistent with itself; a
/// forged `last_token` past the snapshot's last index was installed, and broke the token
/// rules, until `snapshot::decode` checked it.)
fn forge_a_number(g: &mut Gen, data: &[u8]) -> Vec<u8> {
    fn numbers(value: &serde_json::Value, at: &str, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Number(_) => out.push(at.to_owned()),
            serde_json::Value::Array(items) => (items.iter().enumerate())
                .for_each(|(i, item)| numbers(item, &format!("{at}/{i}"), out)),
            serde_json::Value::Object(fields) => fields.iter().for_each(|(name, field)| {
                let name = name.replace('~', "~0").replace('/', "~1");
                numbers(field, &format!("{at}/{name}"), out)
            }),
            _ => {}
        }
    }
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return data.to_vec();
    };
    let mut found = Vec::new();
    numbers(&value, "", &mut found);
    if found.is_empty() {
        return data.to_vec();
    }
    let at = g.pick(&found);
    if let Some(number) = value.pointer_mut(&at) {
        let near = number.as_u64().unwrap_or(0);
        *number = serde_json::json!(g.value(near));
    }
    serde_json::to_vec(&value).unwrap_or_else(|_| data.to_vec())
}

fn client_request(g: &mut Gen, node: &Node) -> ClientRequest {
    let near = node.status().last_log_index;
    let origin = g.chance(2).then(|| Origin {
        session: g.value(near),
        request: g.value(1),
    });
    let key = g.pick(&["a", "b", ""]).to_owned();
    match g.below(4) {
        0 => ClientRequest::Acquire {
            key,
            lease_ms: g.value(5000),
            wait_ms: g.value(100),
            origin,
        },
        1 => ClientRequest::Release {
            key,
            token: g.value(near),
            origin,
        },
        2 => ClientRequest::Abandon {
            key,
            request: g.value(1),
            origin,
        },
        _ => ClientRequest::RegisterSession { label: g.next() },
    }
}

/// The node a sequence starts from: each role, with and without a log.
/// Node `id`'s configuration: pre-vote and check-quorum each off one time in four (both are
/// settings a cluster may run with; the model and a chaos test run without pre-vote). With
/// pre-vote always on, a peer's term of `u64::MAX - 1` never made a node campaign past it,
/// and a node without pre-vote overflowed `term + 1` (fixed by `TERM_MAX`).
fn config(g: &mut Gen, id: NodeId) -> Config {
    let mut config = Config::new(id, vec![1, 2, 3]);
    config.pre_vote = !g.chance(4);
    config.check_quorum = !g.chance(4);
    config
}

fn start(g: &mut Gen) -> Node {
    match g.below(4) {
        0 => Node::new(config(g, 2), Durable::default(), 0).0,
        1 => leader_with(config(g, 1)),
        2 => {
            let mut n = leader_with(config(g, 1));
            let last = n.status().last_log_index;
            n.step(Input::Persisted {
                term: 1,
                index: last,
            });
            n.step(super::test_support::ack(2, 1, last));
            n
        }
        _ => {
            let mut n = Node::new(config(g, 2), Durable::default(), 0).0;
            let noop = Entry {
                term: 1,
                index: 1,
                proposal: Proposal::system(Command::Noop),
            };
            n.step(append(1, 1, (0, 0), vec![noop], 1));
            n
        }
    }
}

fn run_sequence(seed: u64) -> Result<usize, String> {
    let mut g = Gen(seed);
    let mut node = start(&mut g);
    let mut durable = durable_of(&node);
    let mut now_ms = node.now_ms();
    let mut stepped = 0;
    let mut next_request = 1;
    for step in 0..STEPS {
        let input = match g.below(10) {
            0 => {
                // The clock is the driver's, not a peer's: it moves forward by realistic
                // amounts (a long pause at most), never near `u64::MAX`.
                now_ms += if g.chance(20) {
                    g.below(3_600_000)
                } else {
                    g.below(400)
                };
                Input::Tick { now_ms }
            }
            1 => {
                next_request += 1;
                Input::Request {
                    id: RequestId(next_request),
                    request: client_request(&mut g, &node),
                }
            }
            2 => Input::Persisted {
                term: durable.last_term(),
                index: durable.last_index(),
            },
            _ => {
                let from: NodeId = g.pick(&[1, 2, 3, 3, 1, 2, 0, 7]);
                Input::Message {
                    from,
                    msg: message(&mut g, &node),
                }
            }
        };
        if let Input::Message { from, msg } = &input
            && node.refusal(*from, msg).is_some()
        {
            continue;
        }
        let before = node.status();
        let rules_before = super::invariants::StepBefore::of(&node);
        let original = node.clone();
        let mut stepping = node.clone();
        let stepped_input = input.clone();
        let result = catch_unwind(AssertUnwindSafe(move || {
            let output = stepping.step(stepped_input);
            stepping.check_invariants();
            (stepping, output)
        }));
        let (after, output) = result.map_err(|panic| {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            let at = PANIC_AT.with(|p| p.borrow_mut().take()).unwrap_or_default();
            format!(
                "seed {seed}, step {step}: panicked at {at}: {what}\n  input: {input:?}\n  \
                 node before: {before:?}"
            )
        })?;
        if let Some(persist) = &output.persist {
            crate::storage::check_persist(&durable, persist).map_err(|why| {
                format!(
                    "seed {seed}, step {step}: storage would refuse the persist ({why}), \
                     stopping the node\n  input: {input:?}\n  node before: {before:?}\n  \
                     persist: {persist:?}"
                )
            })?;
            durable.apply(persist);
        }
        // Raft's receiver rules hold whatever a peer sends (`invariants::step_rules`).
        let reverse = |n: NodeId| 4 - n;
        super::invariants::step_rules(&rules_before, &after, &input, &output)
            .and_then(|()| super::rename_commutes(reverse, &original, &input, &output, &after))
            .map_err(|why| {
                format!(
                    "seed {seed}, step {step}: {why}\n  input: {input:?}\n  node before: {before:?}"
                )
            })?;
        node = after;
        stepped += 1;
    }
    Ok(stepped)
}

#[test]
fn hostile_peers_and_clients_never_panic_a_node_nor_make_storage_refuse_a_persist() {
    // Quiet the panic hook: a panic is caught and reported with its seed below.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()));
        PANIC_AT.with(|p| *p.borrow_mut() = at);
    }));
    let mut failures = Vec::new();
    let mut stepped = 0;
    for seed in 0..SEQUENCES {
        match catch_unwind(|| run_sequence(seed)) {
            Ok(Ok(n)) => stepped += n,
            Ok(Err(e)) => failures.push(e),
            Err(_) => {
                let at = PANIC_AT.with(|p| p.borrow_mut().take()).unwrap_or_default();
                failures.push(format!(
                    "seed {seed}: the generator itself panicked at {at}"
                ));
            }
        }
    }
    std::panic::set_hook(hook);
    let mut kinds = std::collections::HashSet::new();
    eprintln!("{stepped} inputs stepped in {SEQUENCES} sequences");
    // The generator must reach the core: most inputs pass `refusal` and are stepped.
    assert!(
        stepped > (SEQUENCES as usize * STEPS) / 3,
        "only {stepped} inputs were stepped"
    );
    assert!(
        failures.is_empty(),
        "{} of {SEQUENCES} sequences failed; the first of each kind:\n{}",
        failures.len(),
        failures
            .iter()
            .filter(|f| {
                let kind = f.lines().next().unwrap_or("").split(": ").nth(1);
                kinds.insert(kind.map(str::to_owned))
            })
            .take(8)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}
