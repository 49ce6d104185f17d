//! Randomized runs of the in-memory cluster (`lockd::testkit`): seeded drops, delays,
//! duplicates, reordering, partitions, crashes and restarts with client requests. Every step
//! checks the node-local invariants (debug builds) and the cross-node ones (Election Safety,
//! Log Matching, Leader Completeness, State Machine Safety, fencing tokens strictly
//! increase); after a heal the cluster must elect a leader and grant a lock.
//!
//! Each test runs a fixed list of seeds; a failure names the seed, and `LOCKD_SEED=N` runs
//! only that seed. `LOCKD_CHAOS_STEPS=N` changes the number of steps per seed.

#[path = "cluster/election.rs"]
mod election;
#[path = "cluster/leases.rs"]
mod leases;
#[path = "cluster/replication.rs"]
mod replication;

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use lockd::lock::{Command, Key, Origin, Outcome, Token};
use lockd::raft::{ClientRequest, Config, NodeId, RequestId, Response, Role};
use lockd::testkit::Cluster;

/// The seeds each randomized test runs unless `LOCKD_SEED` names one.
pub const SEEDS: std::ops::RangeInclusive<u64> = 1..=8;

/// The default number of random steps per seed.
pub const STEPS: usize = 3000;

/// The longest the liveness phase may take on the simulated clocks.
pub const LIVENESS_MS_MAX: u64 = 30_000;

/// What a chaos run injects, in weights per step (0 switches a fault off).
#[derive(Clone, Debug)]
pub struct Faults {
    pub deliver: u64,
    pub drop: u64,
    pub duplicate: u64,
    pub tick: u64,
    pub request: u64,
    pub client_gone: u64,
    pub crash: u64,
    pub restart: u64,
    pub partition: u64,
    pub heal: u64,
    /// Feeding a deferred `Input::Persisted` (0: reports come at once).
    pub persisted: u64,
    /// The longest lease the clients ask for.
    pub lease_ms_max: u64,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            deliver: 50,
            drop: 5,
            duplicate: 3,
            tick: 25,
            request: 10,
            client_gone: 1,
            crash: 1,
            restart: 3,
            partition: 1,
            heal: 2,
            persisted: 20,
            lease_ms_max: 2000,
        }
    }
}

/// The seeds to run: `LOCKD_SEED` alone when set, else [`SEEDS`].
pub fn seeds() -> Vec<u64> {
    match std::env::var("LOCKD_SEED") {
        Ok(seed) => vec![
            seed.parse()
                .unwrap_or_else(|_| panic!("LOCKD_SEED={seed:?} is not a u64")),
        ],
        Err(_) => SEEDS.collect(),
    }
}

/// The steps per seed: `LOCKD_CHAOS_STEPS` when set, else `default`.
pub fn steps(default: usize) -> usize {
    std::env::var("LOCKD_CHAOS_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Runs `body` for every seed; a failing seed is named with the command that replays it.
pub fn for_each_seed(test: &str, body: impl Fn(u64)) {
    for_each_seed_of(test, seeds(), body);
}

/// [`for_each_seed`] over `range` unless `LOCKD_SEED` names one.
pub fn for_each_seed_in(test: &str, range: std::ops::RangeInclusive<u64>, body: impl Fn(u64)) {
    let seeds = match std::env::var("LOCKD_SEED") {
        Ok(_) => seeds(),
        Err(_) => range.collect(),
    };
    for_each_seed_of(test, seeds, body);
}

fn for_each_seed_of(test: &str, seeds: Vec<u64>, body: impl Fn(u64)) {
    for seed in seeds {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| body(seed))) {
            eprintln!(
                "{test}: seed {seed} failed; rerun: LOCKD_SEED={seed} cargo test -p lockd --test cluster {test}"
            );
            resume_unwind(panic);
        }
    }
}

/// A chaos run: the cluster and what its clients saw.
pub struct Chaos {
    pub cluster: Cluster,
    pub faults: Faults,
    /// Grants the clients were answered: key, token, request.
    pub granted: Vec<(Key, Token, RequestId)>,
    /// Requests sent, with the node they went to.
    pub sent: Vec<(NodeId, RequestId)>,
    /// The origin of every request (unique per request: one client id each).
    pub origins: BTreeMap<RequestId, Origin>,
    next_client: u64,
}

impl Chaos {
    /// A 3- or 5-node cluster, snapshots every 25 entries, nodes seeded from `seed`.
    pub fn new(seed: u64, size: u64, faults: Faults, adjust: impl Fn(&mut Config)) -> Self {
        let cluster = Cluster::with_config(size, seed, |config| {
            config.snapshot_threshold_entries = 25;
            config.append_entries_max = 8;
            adjust(config);
        });
        let mut cluster = cluster;
        cluster.set_defer_persisted(faults.persisted > 0);
        Chaos {
            cluster,
            faults,
            granted: Vec::new(),
            sent: Vec::new(),
            origins: BTreeMap::new(),
            next_client: 1,
        }
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.cluster.random() % bound.max(1)
    }

    fn pick_node(&mut self) -> NodeId {
        let ids = self.cluster.ids();
        ids[self.below(ids.len() as u64) as usize]
    }

    /// One random step.
    pub fn step(&mut self) {
        let f = self.faults.clone();
        let weights = [
            f.deliver,
            f.drop,
            f.duplicate,
            f.tick,
            f.request,
            f.client_gone,
            f.crash,
            f.restart,
            f.partition,
            f.heal,
        ];
        let mut roll = self.below(weights.iter().sum());
        let mut action = 0;
        while roll >= weights[action] {
            roll -= weights[action];
            action += 1;
        }
        match action {
            0 => self.deliver_one(),
            1 => self.with_message(|c, at| c.cluster.drop_message(at)),
            2 => self.with_message(|c, at| c.cluster.duplicate(at)),
            3 => {
                let id = self.pick_node();
                let ms = 1 + self.below(60);
                self.cluster.tick(id, ms);
            }
            4 => self.request(),
            5 => self.client_gone(),
            6 => self.crash(),
            7 => {
                let id = self.pick_node();
                self.cluster.restart(id);
            }
            8 => self.partition(),
            9 => self.cluster.heal(),
            _ => {
                let due = self.cluster.persisted_due() as u64;
                if due > 0 {
                    let at = self.below(due) as usize;
                    self.cluster.report_persisted(at);
                }
            }
        }
        self.collect_grants();
    }

    fn with_message(&mut self, act: impl FnOnce(&mut Chaos, usize)) {
        let count = self.cluster.in_flight().len() as u64;
        if count > 0 {
            let at = self.below(count) as usize;
            act(self, at);
        }
    }

    /// Delivers a random message (reordering), or the oldest when too many wait (bounded).
    fn deliver_one(&mut self) {
        if self.cluster.in_flight().len() > 400 {
            self.cluster.deliver(0);
        } else {
            self.with_message(|c, at| c.cluster.deliver(at));
        }
    }

    fn request(&mut self) {
        let target = match (self.below(4), self.cluster.leader()) {
            (0, _) | (_, None) => self.pick_node(),
            (_, Some(leader)) => leader,
        };
        let key = format!("k{}", self.below(3));
        // Sessions come from the cluster: a request registers one now and then, and the
        // others run under a session some registration got (each with a new request number).
        let sessions: Vec<u64> = self
            .cluster
            .responses()
            .iter()
            .filter_map(|(_, _, r)| match r {
                Response::Registered { session } => Some(*session),
                _ => None,
            })
            .collect();
        if sessions.is_empty() || self.below(8) == 0 {
            let id = self
                .cluster
                .request(target, ClientRequest::RegisterSession { label: 0 });
            self.sent.push((target, id));
            return;
        }
        let session = sessions[self.below(sessions.len() as u64) as usize];
        let origin = Some(Origin {
            session,
            request: self.next_client,
        });
        let origin_copy = origin;
        self.next_client += 1;
        let request = if self.below(3) == 0 && !self.granted.is_empty() {
            let at = self.below(self.granted.len() as u64) as usize;
            let (key, token, _) = self.granted[at].clone();
            ClientRequest::Release { key, token, origin }
        } else {
            let lease_ms = 1 + self.below(self.faults.lease_ms_max);
            let wait_ms = if self.below(2) == 0 {
                0
            } else {
                self.below(500)
            };
            ClientRequest::Acquire {
                key,
                lease_ms,
                wait_ms,
                origin,
            }
        };
        let id = self.cluster.request(target, request);
        self.sent.push((target, id));
        if let Some(origin) = origin_copy {
            self.origins.insert(id, origin);
        }
    }

    fn client_gone(&mut self) {
        if self.sent.is_empty() {
            return;
        }
        let at = self.sent.len() - 1 - self.below(self.sent.len().min(5) as u64) as usize;
        let (node, id) = self.sent[at];
        self.cluster.client_gone(node, id);
    }

    /// Crashes a random node, keeping a majority up.
    fn crash(&mut self) {
        let up = self.cluster.nodes().len();
        let size = self.cluster.ids().len();
        if up > size / 2 + 1 {
            let id = self.pick_node();
            self.cluster.crash(id);
        }
    }

    fn partition(&mut self) {
        let ids = self.cluster.ids();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for id in ids {
            if self.below(2) == 0 {
                a.push(id)
            } else {
                b.push(id)
            }
        }
        self.cluster.partition(&[a, b]);
    }

    fn collect_grants(&mut self) {
        let seen = self.granted.len();
        let new: Vec<(Key, Token, RequestId)> = self
            .cluster
            .responses()
            .iter()
            .filter_map(|(_, id, r)| match r {
                Response::Granted { token } => Some((*id, *token)),
                _ => None,
            })
            .skip(seen)
            .map(|(id, token)| {
                let key = match self
                    .cluster
                    .ledger()
                    .get(token)
                    .map(|e| &e.proposal.command)
                {
                    Some(Command::Grant { key, .. }) => key.clone(),
                    // Not a Grant: `answer_mismatches` reports it.
                    _ => String::new(),
                };
                (key, token, id)
            })
            .collect();
        self.granted.extend(new);
    }

    /// Runs `steps` random steps.
    pub fn run(&mut self, steps: usize) {
        for _ in 0..steps {
            self.step();
        }
    }

    /// Heals, restarts every node, and waits (bounded) until a leader exists and a fresh
    /// try-acquire at it is granted. Returns the granted token.
    pub fn assert_live(&mut self) -> Token {
        self.cluster.heal();
        for id in self.cluster.ids() {
            self.cluster.restart(id);
        }
        self.live_phase()
    }

    /// Waits (bounded) until a leader exists and a fresh try-acquire at it is granted.
    fn live_phase(&mut self) -> Token {
        let seed = self.cluster.seed();
        let key = format!("liveness-{seed}");
        let mut elapsed = 0;
        while elapsed <= LIVENESS_MS_MAX {
            let found = self
                .cluster
                .run_until(LIVENESS_MS_MAX - elapsed, 10, |c| c.leader().is_some());
            assert!(
                found,
                "seed {seed}: no leader within {LIVENESS_MS_MAX} ms after the heal"
            );
            let Some(leader) = self.cluster.leader() else {
                continue;
            };
            let request = ClientRequest::Acquire {
                key: key.clone(),
                lease_ms: 1000,
                wait_ms: 0,
                origin: None,
            };
            let id = self.cluster.request(leader, request);
            let answered = self
                .cluster
                .run_until(2000, 10, |c| c.response(id).is_some());
            elapsed += 2000;
            match self.cluster.response(id) {
                Some(Response::Granted { token }) => return *token,
                // A leader that lost its term in between: try again at the next one.
                Some(Response::NotLeader { .. } | Response::Unknown { .. }) | None => {}
                Some(other) => {
                    panic!("seed {seed}: liveness acquire answered {other:?} (answered {answered})")
                }
            }
        }
        panic!("seed {seed}: no grant within {LIVENESS_MS_MAX} ms after the heal");
    }

    /// Heals, keeps node `down` down (crashed if it was up) and restarts every other, and
    /// waits (bounded) until a leader exists among them and a fresh try-acquire at it is
    /// granted: a majority that is up and connected must make progress however the chaos
    /// left terms, votes and logs (Raft paper §5.2; a refused pre-vote that never passed on
    /// the refuser's term once deadlocked two nodes of three for ever). Returns the token.
    pub fn assert_live_without(&mut self, down: NodeId) -> Token {
        self.cluster.crash(down);
        let up: Vec<NodeId> = self
            .cluster
            .ids()
            .into_iter()
            .filter(|id| *id != down)
            .collect();
        self.cluster.heal();
        for id in up {
            self.cluster.restart(id);
        }
        self.live_phase()
    }

    /// Checks that every answer agrees with the ledger: a Granted token names a committed
    /// Grant that was granted that token.
    pub fn assert_answers_match_the_ledger(&self) {
        let mismatches = self.answer_mismatches();
        assert!(
            mismatches.is_empty(),
            "seed {}: {}",
            self.cluster.seed(),
            mismatches.join("; ")
        );
    }

    /// Every answer that no committed entry backs: a Granted token must name a committed
    /// Grant of that key granted that token; Busy, Released and NotHolder must come from a
    /// committed entry of the request's origin with outcome GrantRejected, Released and
    /// NotFound (DESIGN.md "Semantics of the lock ops": answers only from applied entries).
    pub fn answer_mismatches(&self) -> Vec<String> {
        let mut mismatches = self.unbacked_outcomes();
        mismatches.extend(self.unbacked_grants());
        mismatches
    }

    fn unbacked_outcomes(&self) -> Vec<String> {
        let mut by_origin: BTreeMap<Origin, Vec<&Outcome>> = BTreeMap::new();
        for (_, entry) in self.cluster.ledger().iter() {
            if let Some(origin) = entry.proposal.origin {
                by_origin.entry(origin).or_default().push(&entry.outcome);
            }
        }
        let mut mismatches = Vec::new();
        for (_, id, response) in self.cluster.responses() {
            let expected = match response {
                Response::Busy => Outcome::GrantRejected,
                Response::Released => Outcome::Released,
                Response::NotHolder => Outcome::NotFound,
                _ => continue,
            };
            let backed = self
                .origins
                .get(id)
                .and_then(|o| by_origin.get(o))
                .is_some_and(|outcomes| outcomes.contains(&&expected));
            if !backed {
                mismatches.push(format!(
                    "request {id:?} was answered {response:?} but no committed entry of its origin had {expected:?}"
                ));
            }
        }
        mismatches
    }

    fn unbacked_grants(&self) -> Vec<String> {
        self.granted
            .iter()
            .filter_map(|(key, token, id)| {
                let entry = self.cluster.ledger().get(*token);
                let backed = entry.is_some_and(|e| {
                    e.outcome == Outcome::Granted { token: *token }
                        && matches!(&e.proposal.command, Command::Grant { key: k, .. } if k == key)
                });
                (!backed).then(|| {
                    format!("request {id:?} was granted token {token}, the ledger has {entry:?} at index {token}")
                })
            })
            .collect()
    }

    /// How many requests were answered, by kind.
    pub fn answer_counts(&self) -> (usize, usize) {
        let responses = self.cluster.responses();
        let granted = responses
            .iter()
            .filter(|(_, _, r)| matches!(r, Response::Granted { .. }))
            .count();
        (granted, responses.len())
    }

    /// A one-line summary of what the run did, for `--nocapture` readers.
    pub fn summary(&self) -> String {
        let (granted, answered) = self.answer_counts();
        let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, _, response) in self.cluster.responses() {
            let kind = match response {
                Response::Granted { .. } => "granted",
                Response::Busy => "busy",
                Response::Released => "released",
                Response::NotHolder => "not-holder",
                Response::NotLeader { .. } => "not-leader",
                Response::Unknown { .. } => "unknown",
                Response::Invalid { .. } => "invalid",
                Response::Registered { .. } => "registered",
                Response::SessionExpired => "session-expired",
            };
            *kinds.entry(kind).or_default() += 1;
        }
        let nodes = self.cluster.nodes();
        let term = nodes.iter().map(|n| n.status().term).max().unwrap_or(0);
        let snapshots = nodes.iter().filter(|n| n.snapshot().is_some()).count();
        format!(
            "seed {}: {} entries committed, highest term {term}, {answered} answers ({granted} granted; {kinds:?}), {snapshots} nodes with a snapshot",
            self.cluster.seed(),
            self.cluster.ledger().len()
        )
    }

    /// Whether some running node leads.
    pub fn has_leader(&self) -> bool {
        self.cluster
            .nodes()
            .iter()
            .any(|n| n.status().role == Role::Leader)
    }
}
