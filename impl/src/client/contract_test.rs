//! The client library's promise to its caller, under a flaky node (turmoil, seeded): once
//! the node is healthy again and the client has completed one more op, the node holds no
//! lock of the client's session that the client did not report as its own.
//!
//! A grant the client reported `Unknown`, an acquire its caller dropped, or one whose
//! attempts went astray, is freed by the client itself (an abandon owed and paid before the
//! next op, or a give-back; `client.rs`'s module doc). When the client forgets one, the key
//! stays held, known to nobody, for the whole lease; no safety check of a history sees that
//! (a lease running out is a legal end of a grant), and the liveness rules judge only
//! acquires whose client left. Two such defects were found by a review (2026-12-06): a
//! give-back that got no answer, and an abandon refused `Invalid` by an overloaded leader.
//! This test drives the real client through the same kinds of episode, drawn from a seed:
//! a node with no leader, one overloaded (every request refused `Invalid`), one that loses
//! its answers after applying, and one slow enough that acquires are dropped or time out
//! with their request still on the wire.
//!
//! Then the node evicts the client's session (its table holds one session, and another
//! client registers), and the client releases every lock it reported as its own: each must
//! be freed. A holder's session can go while its lock lives (evicted at the cap, or idle as
//! long as the longest lease); a review (2026-12-06) found its release answered
//! `SessionExpired`, changing nothing, so the key stayed held for the rest of its lease.
//!
//! A second promise is judged on the same runs: a release the client reports certainly not
//! applied (`NotHolder`, `Invalid`, `Unavailable`) freed nothing, by any of its attempts
//! (the node records every Release that freed a lock, with its origin). Sessions are
//! evicted during the episodes too (another client registers), so a release can be applied
//! with its answer lost, then find its session gone and the key free under a new session.
//! Taking that `NotHolder` as final was a hand-made mistake of issue 24 that no tool saw.

use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use tarpc::context;
use tarpc::server::{BaseChannel, Channel};

use crate::client::{Client, ClientOptions};
use crate::client::{ClientError, Session};
use crate::lock::{Command, Key, LockTable, Origin, Outcome, Proposal, SessionLimits, Token};
use crate::raft::Response;
use crate::rng::splitmix64;
use crate::rpc::{LockService, NodeStatus};

/// What the node does with the requests that reach it, for a while.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Episode {
    /// Applies and answers at once.
    Healthy,
    /// No leader: `NotLeader`, nothing applied.
    NoLeader,
    /// A leader that cannot commit: every request refused `Invalid` (the bound on
    /// uncommitted entries), nothing applied.
    Overloaded,
    /// Applies, and the answer is lost.
    LosesAnswers,
    /// Applies 100-400 ms after the request arrived, then answers.
    Slow,
    /// Another client registered as the episode began, and evicted the client's session (the
    /// table holds one): the client's next request is answered `SessionExpired`. Then as
    /// `Healthy`.
    Evicted,
}

/// A node over a real [`LockTable`], in the episode the seed's schedule says.
#[derive(Clone)]
struct FlakyNode {
    table: Arc<Mutex<LockTable>>,
    index: Arc<AtomicU64>,
    episode: Arc<Mutex<Episode>>,
    rng: Arc<Mutex<u64>>,
    /// Every applied Release that freed a lock, with its origin: what
    /// [`judge_failed_releases`] holds the client's failed releases to.
    freed: Arc<Mutex<Vec<(Origin, Key, Token)>>>,
}

impl FlakyNode {
    fn apply_now(&self, origin: Option<Origin>, command: Command) -> Response {
        let index = self.index.fetch_add(1, Ordering::SeqCst) + 1;
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let outcome = table.apply_proposal(index, &Proposal::client(origin, command.clone()));
        if let (Outcome::Released, Some(origin), Command::Release { key, token }) =
            (&outcome, origin, command)
        {
            lock(&self.freed).push((origin, key, token));
        }
        Response::of_outcome(&outcome)
    }

    async fn handle(&self, origin: Option<Origin>, command: Command) -> Response {
        let episode = *self.episode.lock().unwrap_or_else(|e| e.into_inner());
        match episode {
            Episode::Healthy | Episode::Evicted => self.apply_now(origin, command),
            Episode::NoLeader => Response::NotLeader { leader: None },
            Episode::Overloaded => Response::Invalid {
                reason: "too many uncommitted entries (4096, uncommitted_entries_max 4096)".into(),
            },
            Episode::LosesAnswers => {
                self.apply_now(origin, command);
                futures::future::pending().await
            }
            Episode::Slow => {
                let delay = {
                    let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
                    100 + splitmix64(&mut rng) % 301
                };
                tokio::time::sleep(Duration::from_millis(delay)).await;
                self.apply_now(origin, command)
            }
        }
    }
}

impl LockService for FlakyNode {
    async fn acquire(
        self,
        _: context::Context,
        key: Key,
        lease_ms: u64,
        _wait_ms: u64,
        origin: Option<Origin>,
        _timeout_ms: u64,
    ) -> Response {
        self.handle(origin, Command::Grant { key, lease_ms }).await
    }

    async fn release(
        self,
        _: context::Context,
        key: Key,
        token: Token,
        origin: Option<Origin>,
        _timeout_ms: u64,
    ) -> Response {
        self.handle(origin, Command::Release { key, token }).await
    }

    async fn abandon(
        self,
        _: context::Context,
        key: Key,
        request: u64,
        origin: Option<Origin>,
        _timeout_ms: u64,
    ) -> Response {
        self.handle(origin, Command::Abandon { key, request }).await
    }

    async fn register_session(self, _: context::Context, _: u64, _: u64) -> Response {
        self.handle(None, Command::RegisterSession).await
    }

    async fn status(self, _: context::Context) -> NodeStatus {
        futures::future::pending().await
    }
}

/// Ops in the flaky phase of one run.
const OPS: usize = 24;
const KEYS: [&str; 3] = ["a", "b", "c"];

/// What one run found.
#[derive(Clone, Debug, Default)]
struct Findings {
    /// The locks of the client's session it did not report, or that it released and the
    /// node still holds (empty when the promise held).
    unreported: Vec<String>,
    /// The releases the client reported certainly not applied that took effect (empty when
    /// the promise held).
    undue_failures: Vec<String>,
    /// Whether any acquire of the run ended without a definite answer.
    uncertain: bool,
    /// Releases reported `SessionExpired` that a Release of their own did apply: the
    /// interleaving where a retry under a new session finds the key already free.
    applied_yet_expired: usize,
}

/// A release the client reported failed, with what tells the origins of its attempts from
/// every other op's.
struct FailedRelease {
    key: Key,
    token: Token,
    error: ClientError,
    /// The client's session before the op: the op's first origin under it is its next
    /// request.
    before: Option<Session>,
    /// The client's session after the op: the next op's first origin under it is its next
    /// request.
    after: Option<Session>,
    /// The log indexes applied while the op ran. A session's id is the index of its
    /// registration, so these include every session the op registered.
    indexes: RangeInclusive<u64>,
}

impl FailedRelease {
    /// Whether `origin` may be one of this op's attempts: a request from its first under the
    /// session it started with, or under a session registered while it ran, and not one of
    /// the next op's.
    fn owns(&self, origin: Origin) -> bool {
        let under = |session: Option<Session>| {
            session.is_some_and(|s| s.id == origin.session && origin.request >= s.next_request)
        };
        (under(self.before) || self.indexes.contains(&origin.session)) && !under(self.after)
    }

    /// The first Release of this op's that freed its lock, if any.
    fn applied(&self, freed: &[(Origin, Key, Token)]) -> Option<Origin> {
        (freed.iter())
            .find(|(origin, key, token)| {
                (key, *token) == (&self.key, self.token) && self.owns(*origin)
            })
            .map(|(origin, _, _)| *origin)
    }
}

/// One run with seed `seed`: the client's ops under the seed's episodes, then a healthy
/// node, one more op, and the table and the applied releases compared with what the client
/// reported.
fn run(seed: u64) -> Findings {
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(10))
        .simulation_duration(Duration::from_secs(120))
        .build();
    // One session at most: a registration by anyone else evicts the client's.
    let limits = SessionLimits {
        sessions_max: 1,
        ..SessionLimits::DEFAULT
    };
    let node = FlakyNode {
        table: Arc::new(Mutex::new(LockTable::new().with_session_limits(limits))),
        index: Arc::default(),
        episode: Arc::new(Mutex::new(Episode::Healthy)),
        rng: Arc::new(Mutex::new(seed ^ 0x5EED)),
        freed: Arc::default(),
    };
    // 0: the client registers its session on a healthy node; 1: episodes; 2: healthy again.
    let phase = Arc::new(AtomicU8::new(0));
    let served = node.clone();
    let calm = phase.clone();
    sim.host("node", move || {
        let node = served.clone();
        let phase = calm.clone();
        async move {
            // The episodes: each lasts 20-300 ms, healthy two times in seven, until the client
            // ends them.
            let schedule = node.clone();
            tokio::spawn(async move {
                while phase.load(Ordering::SeqCst) == 0 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                let mut rng = splitmix64(&mut (seed ^ 0xE915)) | 1;
                while phase.load(Ordering::SeqCst) == 1 {
                    let episode = match splitmix64(&mut rng) % 7 {
                        0 => Episode::NoLeader,
                        1 => Episode::Overloaded,
                        2 => Episode::LosesAnswers,
                        3 => Episode::Slow,
                        4 => Episode::Evicted,
                        _ => Episode::Healthy,
                    };
                    if episode == Episode::Evicted {
                        schedule.apply_now(None, Command::RegisterSession);
                    }
                    *schedule.episode.lock().unwrap_or_else(|e| e.into_inner()) = episode;
                    let lasts = 20 + splitmix64(&mut rng) % 281;
                    tokio::time::sleep(Duration::from_millis(lasts)).await;
                }
                *schedule.episode.lock().unwrap_or_else(|e| e.into_inner()) = Episode::Healthy;
            });
            let any: SocketAddr = "0.0.0.0:7000".parse()?;
            let listener = crate::sys::net::TcpListener::bind(any).await?;
            loop {
                let stream = listener.accept().await?;
                tokio::spawn(
                    BaseChannel::with_defaults(crate::server::transport(stream))
                        .execute(node.clone().serve())
                        .for_each(|request| async move {
                            tokio::spawn(request);
                        }),
                );
            }
        }
    });
    let findings = Arc::new(Mutex::new(Findings::default()));
    let (found, table) = (findings.clone(), node.table.clone());
    let evictor = node.clone();
    let (indexes, freed) = (node.index.clone(), node.freed.clone());
    sim.client("client", async move {
        let addr = SocketAddr::new(turmoil::lookup("node"), 7000);
        let options = ClientOptions {
            attempt_timeout_ms: 150,
            backoff_min_ms: 1,
            backoff_max_ms: 5,
            ..ClientOptions::default()
        };
        let client = Client::with_options(vec![addr], 1, options);
        let far = || tokio::time::Instant::now() + Duration::from_secs(10);
        let warm = client.acquire("warm", 60_000, 0, far()).await?;
        client.release("warm", warm, far()).await?;
        phase.store(1, Ordering::SeqCst);
        let mut rng = splitmix64(&mut (seed ^ 0xC11E)) | 1;
        // What the client reported it holds (a release that failed keeps its entry: the
        // caller was not told the lock is gone).
        let mut held: Vec<(Key, Token)> = Vec::new();
        let mut failed: Vec<FailedRelease> = Vec::new();
        let now = tokio::time::Instant::now;
        for _ in 0..OPS {
            let roll = splitmix64(&mut rng) % 10;
            if roll < 6 || held.is_empty() {
                let key = KEYS[(splitmix64(&mut rng) % KEYS.len() as u64) as usize];
                let deadline = now() + Duration::from_millis(100 + splitmix64(&mut rng) % 900);
                let acquire = client.acquire(key, 60_000, 0, deadline);
                let result = if roll < 2 {
                    // The caller gives up and drops the call.
                    let within = Duration::from_millis(20 + splitmix64(&mut rng) % 300);
                    tokio::time::timeout(within, acquire).await.ok()
                } else {
                    Some(acquire.await)
                };
                match result {
                    Some(Ok(token)) => held.push((key.into(), token)),
                    Some(Err(_)) | None => lock(&found).uncertain = true,
                }
            } else {
                let (key, token) =
                    held[(splitmix64(&mut rng) % held.len() as u64) as usize].clone();
                let deadline = now() + Duration::from_millis(1_000);
                let before = *client.lock_session();
                let first_index = indexes.load(Ordering::SeqCst) + 1;
                match client.release(&key, token, deadline).await {
                    Ok(()) => held.retain(|h| *h != (key.clone(), token)),
                    Err(error) => failed.push(FailedRelease {
                        key,
                        token,
                        error,
                        before,
                        after: *client.lock_session(),
                        indexes: first_index..=indexes.load(Ordering::SeqCst),
                    }),
                }
            }
        }
        // The node is healthy again; what was on its way arrives; then one more op.
        phase.store(2, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        let token = client.acquire("quiet", 60_000, 0, far()).await?;
        client.release("quiet", token, far()).await?;
        // Everything on its way has arrived: every Release that will apply has.
        judge_failed_releases(&failed, &lock(&freed), &mut lock(&found));
        let session = client.session();
        {
            let table = lock(&table);
            for (key, held_lock) in table.locks() {
                let ours = held_lock.origin.is_some_and(|o| Some(o.session) == session);
                if ours && !held.contains(&(key.clone(), held_lock.token)) {
                    lock(&found).unreported.push(format!(
                        "{key} under token {} ({held_lock:?})",
                        held_lock.token
                    ));
                }
            }
        }
        // Another client registers and evicts the client's session; the client lets go of
        // everything it holds, on a healthy node.
        evictor.apply_now(None, Command::RegisterSession);
        for (key, token) in &held {
            let _ = client.release(key, *token, far()).await;
        }
        let table = lock(&table);
        for (key, token) in &held {
            if table.holder(key).is_some_and(|held| held.token == *token) {
                lock(&found).unreported.push(format!(
                    "{key} under token {token}, released by its holder on a healthy node \
                     after its session was evicted"
                ));
            }
        }
        Ok(())
    });
    sim.run().expect("the simulation runs");
    lock(&findings).clone()
}

/// Locks `mutex`; poisoned only if a task panicked holding it, and the value is still valid.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Holds the client's failed releases to the Releases the node applied: one it reported
/// certainly not applied (`ClientError::is_definite`) must not have freed its lock by any
/// of its attempts. Counts the releases reported `SessionExpired` that did, the interleaving
/// that a definite `NotHolder` would misreport.
fn judge_failed_releases(
    failed: &[FailedRelease],
    freed: &[(Origin, Key, Token)],
    findings: &mut Findings,
) {
    for release in failed {
        let Some(origin) = release.applied(freed) else {
            continue;
        };
        if release.error.is_definite() {
            findings.undue_failures.push(format!(
                "the release of {} under token {} was reported \"{}\", certainly not applied, \
                 yet its attempt {origin:?} freed that lock",
                release.key, release.token, release.error
            ));
        }
        if matches!(release.error, ClientError::SessionExpired(_)) {
            findings.applied_yet_expired += 1;
        }
    }
}

/// Seeds of the runs both tests judge.
const SEEDS: std::ops::Range<u64> = 0..150;

/// The findings of every seed's run, run once for both tests (whichever asks first runs
/// them; the other waits).
fn findings() -> &'static [Findings] {
    static FINDINGS: OnceLock<Vec<Findings>> = OnceLock::new();
    FINDINGS.get_or_init(|| SEEDS.map(run).collect())
}

#[test]
fn after_one_op_on_a_healthy_node_the_client_holds_nothing_it_did_not_report() {
    for (seed, found) in SEEDS.zip(findings()) {
        assert!(
            found.unreported.is_empty(),
            "seed {seed}: on a healthy node, the node still holds locks of the client that \
             it never reported as its own, or that it released (held until their lease \
             ends): {:?}",
            found.unreported
        );
    }
    // The episodes must reach the paths under test: acquires that ended without a definite
    // answer, whose grants the client owes back.
    let uncertain = findings().iter().filter(|f| f.uncertain).count();
    assert!(
        uncertain >= 50,
        "only {uncertain} of 150 runs had an acquire end without a definite answer"
    );
}

#[test]
fn a_release_the_client_reports_certainly_not_applied_freed_nothing() {
    // client.rs "Outcomes" and "Sessions": a definite failure (history `fail`) promises the
    // op did not take effect. A release answered `SessionExpired` is retried once under a
    // new session, and only `Released` is taken from that retry: its `NotHolder` may mean
    // that an earlier attempt under the old session freed the lock with its answer lost
    // (issue 24: taking it as final passed every test until this one).
    for (seed, found) in SEEDS.zip(findings()) {
        assert!(
            found.undue_failures.is_empty(),
            "seed {seed}: {:?}",
            found.undue_failures
        );
    }
    // The episodes must reach the interleaving: an attempt applied with its answer lost,
    // the session evicted, and the retry under a new session finding the key free.
    // Seven releases of seeds 0..150 do (2026-12-06; the first in seed 53).
    let reached: usize = findings().iter().map(|f| f.applied_yet_expired).sum();
    assert!(
        reached >= 3,
        "only {reached} releases of 150 runs took effect and ended SessionExpired"
    );
}
