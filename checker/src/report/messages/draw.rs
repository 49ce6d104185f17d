//! The SVG of a window of rows: lanes, arrows, marks and notes (see the module doc of
//! [`super`]).

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use lockd::lock::{Command, Outcome};
use lockd::raft::{ClientRequest, Input, Message, NodeId};
use lockd::trace::OutputDigest;

use super::flow::Flow;
use super::{
    Anchor, CLIENT_GAP, CLIENT_LANES_MAX, FAILING, LEFT, NODE_GAP, NOTES_X, ROW_H, Row, TOP,
};
use crate::report::plot::svg::escape;

/// The drawing of a window.
pub(super) struct Diagram<'f, 'a> {
    pub(super) flow: &'f Flow<'a>,
    pub(super) rows: &'f [Row],
    pub(super) nodes: Vec<NodeId>,
    /// Client lanes: the client, or `None` for the shared lane of the others.
    pub(super) clients: Vec<Option<u64>>,
    /// Step -> row.
    pub(super) row_of: HashMap<usize, usize>,
    pub(super) anchor: Option<usize>,
    pub(super) answer: Option<usize>,
    /// What the anchor's step is, in the notes.
    pub(super) anchor_label: &'static str,
}

impl<'f, 'a> Diagram<'f, 'a> {
    pub(super) fn new(
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

    pub(super) fn draw(
        &self,
        title: &str,
        anchor: &Anchor,
        note: &str,
        hidden: (usize, usize),
    ) -> String {
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
                &crate::model::explain::describe_response(response),
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
        Message::InstallSnapshot {
            term,
            last_index,
            offset,
            ..
        } => format!("Snapshot t{term} to {last_index} @{offset}"),
        Message::TimeoutNow { term, campaign } => {
            format!("TimeoutNow t{term} {}", yes(*campaign))
        }
        Message::InstallSnapshotResponse {
            term,
            last_index,
            received,
            done,
        } => format!(
            "Snapshot ok? t{term} {last_index} {} {received}",
            yes(*done)
        ),
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
        ClientRequest::Abandon { key, request, .. } => format!("Abandon {key} r{request}"),
        ClientRequest::RegisterSession { .. } => "RegisterSession".to_owned(),
    }
}

fn command_text(command: &Command) -> String {
    match command {
        Command::Grant { key, lease_ms } => format!("Grant {key} {lease_ms}ms"),
        Command::Release { key, token } => format!("Release {key} t{token}"),
        Command::Expire { key, token } => format!("Expire {key} t{token}"),
        Command::Abandon { key, request } => format!("Abandon {key} r{request}"),
        Command::Noop => "Noop".to_owned(),
        Command::RegisterSession => "RegisterSession".to_owned(),
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
        Outcome::SessionRegistered { session } => format!("Session {session}"),
        Outcome::SessionExpired => "SessionExpired".to_owned(),
    }
}
