//! Counterexamples in words: each step of a stateright path as one line that names the
//! actors by role (`n1` for Raft node 1, `client 3` for actor 3), the message or timer, and
//! what the receiving actor looks like afterwards.

use lockd::raft::{ClientRequest, Message, Response, Role, Timer};
use stateright::actor::{ActorModelAction, Id};

use super::actor::{ModelMsg, ModelState, ModelTimer, node_id};
use super::{LockdModel, LockdState};

/// The model's action type.
pub type LockdAction = ActorModelAction<ModelMsg, ModelTimer, ()>;

/// One line per step of `path`: what happened and the state of the actor it happened to.
pub fn describe_path(
    model: &LockdModel,
    path: &[(LockdState, Option<LockdAction>)],
) -> Vec<String> {
    let mut lines = Vec::new();
    for (n, window) in path.windows(2).enumerate() {
        let (before, action) = &window[0];
        let (after, _) = &window[1];
        let Some(action) = action else { continue };
        let (what, actor) = action_and_actor(model, before, action);
        let state = actor
            .map(|id| describe_actor(after, id))
            .unwrap_or_default();
        lines.push(format!("{:>3}. {what}{state}", n + 1));
    }
    lines
}

/// The name of actor `id`: `n<node id>` for a server, `client <index>` for a client.
pub fn actor_name(state: &LockdState, id: Id) -> String {
    let i = usize::from(id);
    match state.actor_states.get(i).map(|s| &**s) {
        Some(ModelState::Server(_)) => format!("n{}", node_id(i)),
        _ => format!("client {i}"),
    }
}

/// One action in words, as a path step shows it (without the state after it).
pub fn describe_action(model: &LockdModel, state: &LockdState, action: &LockdAction) -> String {
    action_and_actor(model, state, action).0
}

fn action_and_actor(
    _model: &LockdModel,
    state: &LockdState,
    action: &LockdAction,
) -> (String, Option<Id>) {
    match action {
        ActorModelAction::Deliver { src, dst, msg } => (
            format!(
                "{} -> {}: {}",
                actor_name(state, *src),
                actor_name(state, *dst),
                describe_msg(msg)
            ),
            Some(*dst),
        ),
        ActorModelAction::Drop(envelope) => (
            format!(
                "the network drops {} -> {}: {}",
                actor_name(state, envelope.src),
                actor_name(state, envelope.dst),
                describe_msg(&envelope.msg)
            ),
            None,
        ),
        ActorModelAction::Timeout(id, timer) => {
            let clock = match (&*state.actor_states[usize::from(*id)], timer) {
                (ModelState::Server(s), ModelTimer::Core(t)) => s
                    .node
                    .deadline(t)
                    .map(|at| {
                        let after = at.saturating_sub(s.node.now_ms());
                        format!(" ({after} ms after the node's previous step)")
                    })
                    .unwrap_or_default(),
                _ => String::new(),
            };
            (
                format!(
                    "{}: {} fires{clock}",
                    actor_name(state, *id),
                    describe_timer(timer)
                ),
                Some(*id),
            )
        }
        ActorModelAction::Crash(id) => (format!("{} crashes", actor_name(state, *id)), None),
        ActorModelAction::Recover(id) => (
            format!("{} restarts from its saved state", actor_name(state, *id)),
            Some(*id),
        ),
        ActorModelAction::SelectRandom { actor, .. } => (
            format!("{} makes a random choice", actor_name(state, *actor)),
            Some(*actor),
        ),
    }
}

fn describe_timer(timer: &ModelTimer) -> String {
    match timer {
        ModelTimer::Core(Timer::Election) => "the election timer".to_owned(),
        ModelTimer::Core(Timer::Heartbeat) => "the heartbeat timer".to_owned(),
        ModelTimer::Core(Timer::CheckQuorum) => "the check-quorum timer".to_owned(),
        ModelTimer::Core(Timer::Lease { key, token }) => {
            format!("the lease timer of {key:?} token {token}")
        }
        ModelTimer::Core(Timer::Wait { id }) => format!("the wait deadline of request {}", id.0),
        ModelTimer::ClientRetry => "the retry timer".to_owned(),
        ModelTimer::ClientGiveUp => "the give-up timer (it cancels its acquire)".to_owned(),
        ModelTimer::ClientRelease => "the release timer (it is done with the lock)".to_owned(),
        ModelTimer::Save => {
            "the save (its persist is durable; it sends what waited for it)".to_owned()
        }
    }
}

/// A message in words.
pub fn describe_msg(msg: &ModelMsg) -> String {
    match msg {
        ModelMsg::Raft(m) => describe_raft(m),
        ModelMsg::Request { id, request } => {
            let seq = id.0 & 0xFFFF_FFFF;
            match &**request {
                ClientRequest::Acquire { key, lease_ms, .. } => {
                    format!("Acquire {key:?} for {lease_ms} ms (request {seq})")
                }
                ClientRequest::Release { key, token, .. } => {
                    format!("Release {key:?} token {token} (request {seq})")
                }
                ClientRequest::Abandon { key, request, .. } => {
                    format!("Abandon {key:?} of request {request} (request {seq})")
                }
                ClientRequest::RegisterSession { .. } => format!("RegisterSession (request {seq})"),
            }
        }
        ModelMsg::Cancel { id } => format!("Cancel request {}", id.0 & 0xFFFF_FFFF),
        ModelMsg::Response { id, response } => {
            let seq = id.0 & 0xFFFF_FFFF;
            format!("{} (request {seq})", describe_response(response))
        }
    }
}

/// A node's answer to a client, in words (also the message-flow diagram's answer arrows).
pub(crate) fn describe_response(response: &Response) -> String {
    match response {
        Response::Granted { token } => format!("Granted token {token}"),
        Response::Busy => "Busy".to_owned(),
        Response::Released => "Released".to_owned(),
        Response::NotHolder => "NotHolder".to_owned(),
        Response::NotLeader { leader } => match leader {
            Some(l) => format!("NotLeader (try n{l})"),
            None => "NotLeader (no leader known)".to_owned(),
        },
        Response::Unknown { reason } => format!("Unknown ({reason})"),
        Response::Invalid { reason } => format!("Invalid ({reason})"),
        Response::Registered { session } => format!("Registered session {session}"),
        Response::SessionExpired => "SessionExpired".to_owned(),
    }
}

fn describe_raft(msg: &Message) -> String {
    match msg {
        Message::PreVote {
            term,
            last_log_index,
            last_log_term,
        } => format!("PreVote term {term}, last log {last_log_index}/{last_log_term}"),
        Message::PreVoteResponse { term, granted } => {
            format!("PreVoteResponse term {term} {}", yes_no(*granted))
        }
        Message::RequestVote {
            term,
            last_log_index,
            last_log_term,
        } => format!("RequestVote term {term}, last log {last_log_index}/{last_log_term}"),
        Message::RequestVoteResponse { term, granted } => {
            format!("RequestVoteResponse term {term} {}", yes_no(*granted))
        }
        Message::AppendEntries {
            term,
            prev_log_index,
            prev_log_term,
            entries,
            leader_commit,
        } => {
            let entries: Vec<String> = entries
                .iter()
                .map(|e| format!("{}:{:?}", e.index, e.proposal.command))
                .collect();
            format!(
                "AppendEntries term {term}, after {prev_log_index}/{prev_log_term}, [{}], commit {leader_commit}",
                entries.join(", ")
            )
        }
        Message::AppendEntriesResponse {
            term,
            success,
            match_index,
            reject_hint,
        } => {
            if *success {
                format!("AppendEntriesResponse term {term} ok, match {match_index}")
            } else {
                format!("AppendEntriesResponse term {term} rejected, hint {reject_hint}")
            }
        }
        Message::InstallSnapshot {
            term,
            last_index,
            last_term,
            offset,
            data,
            done,
        } => format!(
            "InstallSnapshot term {term}, up to {last_index}/{last_term}, bytes {offset}..{}{}",
            offset + data.len() as u64,
            if *done { ", last chunk" } else { "" }
        ),
        Message::TimeoutNow { term, campaign } => format!(
            "TimeoutNow term {term}{}",
            if *campaign { ", campaign now" } else { "" }
        ),
        Message::InstallSnapshotResponse {
            term,
            last_index,
            received,
            done,
        } => format!(
            "InstallSnapshotResponse term {term}, up to {last_index}, {received} bytes held{}",
            if *done { ", installed" } else { "" }
        ),
    }
}

fn yes_no(granted: bool) -> &'static str {
    if granted { "granted" } else { "refused" }
}

/// The actor after the step, in brackets: a server's role, term, log, commit and locks; a
/// client's phase.
fn describe_actor(state: &LockdState, id: Id) -> String {
    match state.actor_states.get(usize::from(id)).map(|s| &**s) {
        Some(ModelState::Server(server)) => {
            let s = server.node.status();
            let role = match s.role {
                Role::Follower => "follower",
                Role::PreCandidate => "pre-candidate",
                Role::Candidate => "candidate",
                Role::Leader => "leader",
            };
            let locks: Vec<String> = server
                .node
                .table()
                .locks()
                .iter()
                .map(|(k, h)| format!("{k:?}: token {}", h.token))
                .collect();
            // A pending save (split steps): what the server holds back until it is durable.
            let saving = match &server.unsaved {
                Some(held) if held.is_empty() => ", saving".to_owned(),
                Some(held) => format!(", saving, {} send(s) held back", held.len()),
                None => String::new(),
            };
            format!(
                "   [n{}: {role} of term {}, log {}, commit {}, locks {{{}}}{saving}]",
                s.id,
                s.term,
                s.last_log_index,
                s.commit_index,
                locks.join(", ")
            )
        }
        Some(ModelState::Client(client)) => {
            format!("   [client {}: {:?}]", usize::from(id), client.phase)
        }
        None => String::new(),
    }
}
