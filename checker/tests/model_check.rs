//! The stateright model of the real core: pinned state counts, every property on small
//! configurations, and for each mutant the discovery of the property meant to catch it.

use checker::model::explain::{describe_action, describe_path};
use checker::model::properties::{self, violations};
use checker::model::simulate::Run;
use checker::model::{LockdModel, LockdState, ModelConfig};
use lockd::bugs::{Bug, BugSet};
use stateright::{Checker, HasDiscoveries, Model};

/// A one-server configuration: the lock table's rules, restarts and the client protocol,
/// with a state space small enough for debug builds.
fn one_server() -> ModelConfig {
    let mut cfg = ModelConfig::default();
    cfg.servers = 1;
    cfg.clients = 2;
    cfg.log_max = 6;
    cfg.depth_max = 9;
    cfg.max_crashes = 0;
    cfg.symmetry = false;
    cfg
}

/// Two servers with the fewest steps per election (no pre-vote, no check-quorum, one term):
/// enough for entries that wait to commit.
fn two_servers() -> ModelConfig {
    let mut cfg = ModelConfig::default();
    cfg.servers = 2;
    cfg.clients = 2;
    cfg.term_max = 1;
    cfg.log_max = 6;
    cfg.messages_in_flight_max = 8;
    cfg.pre_vote = false;
    cfg.check_quorum = false;
    cfg.depth_max = 18;
    cfg.max_crashes = 0;
    cfg.symmetry = false;
    cfg
}

fn with_bug(mut cfg: ModelConfig, bug: Bug) -> ModelConfig {
    cfg.bugs = BugSet::of(&[bug]);
    cfg
}

/// Prints a discovery in words, so that a failing assertion shows the path.
fn print_discovery(model: &LockdModel, name: &'static str, checker: &impl Checker<LockdModel>) {
    if let Some(path) = checker.discovery(name) {
        println!("discovery of {name:?}:");
        for line in describe_path(model, &path.clone().into_vec()) {
            println!("  {line}");
        }
        for (violated, why) in violations(path.last_state()) {
            println!("  => {violated}: {why}");
        }
    }
}

/// BFS on one thread to the configured depth until `property` is discovered; prints the
/// discovery, if any, and returns the model and the path to it.
fn bfs_discovery(cfg: ModelConfig, property: &'static str) -> (LockdModel, Option<Run>) {
    let model = cfg.into_model();
    let checker = model
        .clone()
        .checker()
        .threads(1)
        .target_max_depth(cfg.depth_max)
        .finish_when(HasDiscoveries::AnyOf([property].into()))
        .spawn_bfs()
        .join();
    print_discovery(&model, property, &checker);
    if checker.discovery(property).is_none() {
        println!(
            "{cfg}: {property:?} not discovered in {} unique states",
            checker.unique_state_count()
        );
    }
    let path = checker.discovery(property).map(|p| p.into_vec());
    (model, path)
}

/// The walks `locksmith model check` runs on `cfg` by default (`ModelConfig::walk_configs`),
/// on one thread, with `seed`, up to `walks_max` walks: the models and their reports.
fn default_walks(
    cfg: ModelConfig,
    seed: u64,
    walks_max: u64,
) -> (Vec<LockdModel>, Vec<checker::model::simulate::WalkReport>) {
    changed_default_walks(cfg, seed, walks_max, |_| {})
}

/// As [`default_walks`], each walk configuration changed by `change` first.
fn changed_default_walks(
    cfg: ModelConfig,
    seed: u64,
    walks_max: u64,
    change: impl Fn(&mut ModelConfig),
) -> (Vec<LockdModel>, Vec<checker::model::simulate::WalkReport>) {
    let models: Vec<LockdModel> = cfg
        .walk_configs()
        .into_iter()
        .map(|mut cfg| {
            change(&mut cfg);
            cfg.into_model()
        })
        .collect();
    let mut options = checker::model::simulate::WalkOptions::default();
    options.threads = 1;
    options.seed = seed;
    options.walks_max = walks_max;
    let reports = checker::model::simulate::walk_models(&models, &options);
    (models, reports)
}

/// BFS to the configured depth until `property` is discovered; asserts it is.
fn assert_bfs_discovers(cfg: ModelConfig, property: &'static str) {
    let (_, path) = bfs_discovery(cfg, property);
    assert!(path.is_some(), "{cfg}: {property:?} not discovered");
}

/// DFS (deep paths first) until `property` is discovered; asserts it is.
fn assert_dfs_discovers(cfg: ModelConfig, property: &'static str) {
    let model = cfg.into_model();
    let checker = model
        .clone()
        .checker()
        .threads(1)
        .target_max_depth(cfg.depth_max)
        .finish_when(HasDiscoveries::AnyOf([property].into()))
        .spawn_dfs()
        .join();
    print_discovery(&model, property, &checker);
    assert!(
        checker.discovery(property).is_some(),
        "{cfg}: {property:?} not discovered in {} unique states",
        checker.unique_state_count()
    );
}

/// Follows `steps` from the initial state: each step is the first enabled action whose
/// description contains the text. Returns the state reached.
fn follow(model: &LockdModel, steps: &[&str]) -> LockdState {
    // The model's own states are real states (symmetry changes only how they are
    // fingerprinted), so actor names stay put along the path.
    let mut state = model.init_states().remove(0);
    for (n, step) in steps.iter().enumerate() {
        let mut actions = Vec::new();
        model.actions(&state, &mut actions);
        let described: Vec<String> = actions
            .iter()
            .map(|a| describe_action(model, &state, a))
            .collect();
        let found = actions
            .into_iter()
            .zip(&described)
            .find(|(a, d)| d.contains(step) && model.next_state(&state, a.clone()).is_some());
        let Some((action, _)) = found else {
            panic!(
                "step {} {step:?} is not enabled; enabled: {described:#?}",
                n + 1
            );
        };
        state = model.next_state(&state, action).expect("enabled above");
        assert!(
            model.within_boundary(&state),
            "step {} {step:?} leaves the model's bounds ({} messages in flight)",
            n + 1,
            state.network.len()
        );
    }
    state
}

mod correct {
    use super::*;

    #[test]
    fn one_server_with_restarts_has_a_pinned_state_count_and_every_property() {
        // STYLE.md practice 15: model tests pin unique_state_count and assert every property
        // (every `always` holds, every `sometimes` has an example). The counts grew (34565,
        // 8233, 340253 before) when a client's request came to carry committed time once it
        // moved 1 s past the table's clock (lock.rs ACTIVITY_STAMP_MS, 2026-12-05).
        let mut cfg = one_server();
        cfg.max_crashes = 1;
        cfg.depth_max = 11;
        let checker = cfg
            .into_model()
            .checker()
            .threads(1)
            .target_max_depth(cfg.depth_max)
            .finish_when(HasDiscoveries::AllFailures)
            .spawn_bfs()
            .join();
        checker.assert_properties();
        assert_eq!(checker.unique_state_count(), 39149, "{cfg}");
    }

    #[test]
    fn one_server_on_a_lossy_network_keeps_every_safety_property() {
        // Issue 6: the network may lose messages; losing an answer leaves the op in flight.
        let mut cfg = one_server();
        cfg.lossy = true;
        let model = cfg.into_model();
        let checker = model
            .clone()
            .checker()
            .threads(1)
            .target_max_depth(cfg.depth_max)
            .finish_when(HasDiscoveries::AllFailures)
            .spawn_bfs()
            .join();
        for p in model.properties() {
            if p.expectation == stateright::Expectation::Always {
                checker.assert_no_discovery(p.name);
            }
        }
        checker.assert_any_discovery(properties::SOMETIMES_GRANTED);
        assert_eq!(checker.unique_state_count(), 8463, "{cfg}");
    }

    #[test]
    fn two_servers_with_a_client_that_gives_up_keep_every_safety_property() {
        // DESIGN.md, "Phantom locks", and Raft paper Figure 3: no safety property is violated
        // while entries wait for a quorum and a client leaves mid-acquire.
        let mut cfg = two_servers();
        cfg.give_up_clients = 1;
        cfg.depth_max = 15;
        let model = cfg.into_model();
        let checker = model
            .clone()
            .checker()
            .threads(1)
            .target_max_depth(cfg.depth_max)
            .finish_when(HasDiscoveries::AllFailures)
            .spawn_bfs()
            .join();
        for p in model.properties() {
            if p.expectation == stateright::Expectation::Always {
                print_discovery(&model, p.name, &checker);
                checker.assert_no_discovery(p.name);
            }
        }
        for name in [properties::SOMETIMES_GRANTED, properties::SOMETIMES_PHANTOM] {
            checker.assert_any_discovery(name);
        }
        assert_eq!(checker.unique_state_count(), 340385, "{cfg}");
    }
}

mod scenarios {
    use super::*;

    #[test]
    fn a_client_that_gives_up_mid_acquire_gets_its_lock_released() {
        // DESIGN.md, "Phantom locks": the leader releases the grant of a client that left.
        let mut cfg = two_servers();
        cfg.give_up_clients = 1;
        let model = cfg.into_model();
        let state = follow(
            &model,
            &[
                "n1: the election timer",
                "n1 -> n2: RequestVote",
                "n2 -> n1: RequestVoteResponse",
                "n1 -> n2: AppendEntries",
                "n2 -> n1: AppendEntriesResponse",
                "client 3 -> n2: Acquire",
                "n2 -> client 3: NotLeader",
                "client 3 -> n1: Acquire",
                "client 3: the give-up timer",
                "client 3 -> n1: Cancel",
                "n1 -> n2: AppendEntries term 1, after 1/1, [2:Grant",
                "n2 -> n1: AppendEntriesResponse",
                "n1 -> n2: AppendEntries term 1, after 2/1, [3:Release",
                "n2 -> n1: AppendEntriesResponse",
            ],
        );
        assert!(violations(&state).is_empty(), "{:?}", violations(&state));
        let phantom = properties::SOMETIMES_PHANTOM;
        let reached = model
            .properties()
            .into_iter()
            .find(|p| p.name == phantom)
            .map(|p| (p.condition)(&model, &state));
        assert_eq!(reached, Some(true), "{phantom:?} should hold at the end");
    }

    #[test]
    fn without_phantom_release_the_lock_of_a_client_that_left_stays_held() {
        // bugs.rs, `skip-phantom-release`: the same steps leave the lock held, unreleased.
        let mut cfg = with_bug(two_servers(), Bug::SkipPhantomRelease);
        cfg.give_up_clients = 1;
        let model = cfg.into_model();
        let state = follow(
            &model,
            &[
                "n1: the election timer",
                "n1 -> n2: RequestVote",
                "n2 -> n1: RequestVoteResponse",
                "n1 -> n2: AppendEntries",
                "n2 -> n1: AppendEntriesResponse",
                "client 3 -> n2: Acquire",
                "n2 -> client 3: NotLeader",
                "client 3 -> n1: Acquire",
                "client 3: the give-up timer",
                "client 3 -> n1: Cancel",
                "n1 -> n2: AppendEntries term 1, after 1/1, [2:Grant",
                "n2 -> n1: AppendEntriesResponse",
            ],
        );
        let found: Vec<&str> = violations(&state).into_iter().map(|(n, _)| n).collect();
        assert_eq!(found, vec![properties::PHANTOM_RELEASED]);
    }
}

mod mutants {
    //! bugs.rs: every mutant the model can express is caught by the property meant for it.
    //! `stale-leader` needs three servers and two elections (about 17 steps), deeper than a
    //! search affords here (a 90 s release-build DFS did not reach it), so its test follows
    //! the path step by step and checks that the property flags its last state.
    use super::*;

    #[test]
    fn stale_leader_is_caught_by_at_most_one_holder() {
        // bugs.rs, `stale-leader`: a deposed leader answers Granted before its entry commits.
        let mut cfg = ModelConfig::default();
        cfg.pre_vote = false;
        cfg.symmetry = false;
        cfg.max_crashes = 0;
        cfg.bugs = BugSet::of(&[Bug::StaleLeader]);
        cfg.messages_in_flight_max = 16;
        let model = cfg.into_model();
        let state = follow(
            &model,
            &[
                "n1: the election timer",
                "n1 -> n2: RequestVote term 1",
                "n2 -> n1: RequestVoteResponse term 1 granted",
                "n1 -> n2: AppendEntries term 1",
                "n2 -> n1: AppendEntriesResponse term 1 ok",
                "client 3 -> n1: Acquire",
                "n1 -> client 3: Granted token 2",
                "n2: the election timer",
                "n2 -> n3: RequestVote term 2",
                "n3 -> n2: RequestVoteResponse term 2 granted",
                "n2 -> n3: AppendEntries term 2",
                "n3 -> n2: AppendEntriesResponse term 2 rejected",
                "n2 -> n3: AppendEntries term 2",
                "n3 -> n2: AppendEntriesResponse term 2 ok",
                "client 4 -> n2: Acquire",
                "n2 -> client 4: Granted token 3",
            ],
        );
        let found: Vec<&str> = violations(&state).into_iter().map(|(n, _)| n).collect();
        assert!(found.contains(&properties::ONE_HOLDER), "{found:?}");
        let holds = model
            .properties()
            .into_iter()
            .find(|p| p.name == properties::ONE_HOLDER)
            .map(|p| (p.condition)(&model, &state));
        assert_eq!(holds, Some(false));
    }

    #[test]
    fn release_by_key_is_caught_by_release_frees_only_its_own_token() {
        // bugs.rs, `release-by-key`: a stale release frees a newer holder's lock.
        assert_bfs_discovers(
            with_bug(one_server(), Bug::ReleaseByKey),
            properties::RELEASE_OWN_TOKEN,
        );
    }

    #[test]
    fn depth_n_checks_every_state_within_n_steps_and_counts_them() {
        // `--depth N` promises every state within N steps checked. stateright counts the
        // initial state as depth 1 and checks a state only when it expands it, so passing N
        // as its target checked two steps less (found while measuring issue 14). The
        // release-by-key counterexample takes 7 steps: depth 7 finds it, depth 6 cannot.
        let search = |depth: usize| {
            let mut cfg = with_bug(one_server(), Bug::ReleaseByKey);
            cfg.depth_max = depth;
            let model = cfg.into_model();
            let checker = model
                .clone()
                .checker()
                .threads(1)
                .target_max_depth(cfg.stateright_depth())
                .spawn_bfs()
                .join();
            let found = checker.discovery(properties::RELEASE_OWN_TOKEN);
            let steps = found.map(|p| p.into_vec().len() - 1);
            (steps, model.checked_states(), checker.unique_state_count())
        };
        let (found_at_7, _, _) = search(7);
        assert_eq!(
            found_at_7,
            Some(7),
            "the shortest counterexample has 7 steps"
        );
        let (found_at_6, checked_6, generated_6) = search(6);
        assert_eq!(found_at_6, None);
        // Every state within 6 steps is checked: as many as a search one step shorter
        // generates (it generates the states within 6 steps and checks those within 5).
        let (_, checked_5, generated_5) = search(5);
        assert_eq!(checked_6, generated_5);
        assert!(checked_5 < checked_6 && checked_6 < generated_6);
    }

    #[test]
    fn token_from_local_counter_is_caught_by_fencing_tokens_strictly_increase() {
        // bugs.rs, `token-from-local-counter`: a restart resets the counter.
        let mut cfg = with_bug(one_server(), Bug::TokenFromLocalCounter);
        cfg.max_crashes = 1;
        assert_bfs_discovers(cfg, properties::TOKENS_INCREASE);
    }

    #[test]
    fn no_fsync_is_caught_by_state_machine_safety() {
        // bugs.rs, `no-fsync`: a restart forgets acknowledged entries.
        let mut cfg = with_bug(one_server(), Bug::NoFsync);
        cfg.max_crashes = 1;
        assert_bfs_discovers(cfg, properties::STATE_MACHINE_SAFETY);
    }

    #[test]
    fn early_expire_is_caught_by_no_early_lease() {
        // bugs.rs, `early-expire`: the leader's lease timer runs at half the lease.
        assert_bfs_discovers(
            with_bug(one_server(), Bug::EarlyExpire),
            properties::LEASE_NOT_EARLY,
        );
    }

    #[test]
    fn follower_grants_is_caught_by_at_most_one_holder_and_linearizability() {
        // bugs.rs, `follower-grants`: a follower answers Granted without the log.
        let cfg = with_bug(one_server(), Bug::FollowerGrants);
        assert_bfs_discovers(cfg, properties::ONE_HOLDER);
        assert_bfs_discovers(cfg, properties::LINEARIZABLE);
    }

    /// The walks `locksmith model check --bug BUG` runs by default (on one thread, `seed`):
    /// shared between `ModelConfig::walk_configs` of the default configuration.
    fn assert_default_walks_discover(bug: Bug, seed: u64, walks_max: u64, property: &str) {
        let (models, reports) =
            default_walks(with_bug(ModelConfig::default(), bug), seed, walks_max);
        assert_eq!(models.len(), 2, "three servers and the two-server variant");
        assert!(
            reports.iter().any(|r| r.found.contains_key(property)),
            "{bug}, seed {seed}: {property:?} not found in {} walks; found {:?}",
            reports.iter().map(|r| r.walks).sum::<u64>(),
            found_names(&reports)
        );
    }

    /// What each report's walks found, by property name.
    fn found_names(reports: &[checker::model::simulate::WalkReport]) -> Vec<Vec<&&str>> {
        reports.iter().map(|r| r.found.keys().collect()).collect()
    }

    #[test]
    fn expire_ignores_token_is_caught_by_expire_never_removes_a_newer_grant() {
        // bugs.rs, `expire-ignores-token`: a late Expire removes the next holder's lock. Found
        // by the default walks on the two-server variant (a phantom Release and a second
        // Grant wait for the follower when the lease timer fires): seed 7 within 2,000 walks
        // (seed 8 until the phantom Release went into the log with its Grant, 2026-12-05); the
        // CLI's seed 1 takes tens of thousands of walks (too slow here).
        assert_default_walks_discover(
            Bug::ExpireIgnoresToken,
            7,
            2_000,
            properties::EXPIRE_KEEPS_NEWER,
        );
    }

    #[test]
    fn the_default_walks_catch_the_fast_mutants() {
        // Issue 14: `locksmith model check --bug NAME` with defaults exits 1; these are found
        // by the default walks (seed 1, as the CLI) within a thousand walks (a hundred until
        // the leader's clock base entered the node's state, 2026-12-05: `locksmith model
        // check --bug stale-leader` then found it at walk 115). The others are found by the
        // default's small-scope search first (the one-server tests above).
        for (bug, property) in [
            (Bug::FollowerGrants, properties::ONE_HOLDER),
            (Bug::EarlyExpire, properties::LEASE_NOT_EARLY),
            (Bug::StaleLeader, properties::PHANTOM_RELEASED),
            (Bug::SkipPhantomRelease, properties::PHANTOM_RELEASED),
        ] {
            assert_default_walks_discover(bug, 1, 1_000, property);
        }
    }

    #[test]
    fn vote_before_persist_is_caught_by_the_split_walks_and_not_by_atomic_ones() {
        // bugs.rs, `vote-before-persist` (issue 24, item 4): a vote sent before it is saved,
        // then lost in a crash, lets the voter vote again in the same term. The default
        // walks split the three-server steps at their save (`ModelConfig::save_later`), so a
        // crash falls in between: seed 29 finds two leaders of one term within 1,000 walks
        // (walk 848; the CLI's seed 1 at walk 7,568). With every step atomic, as before,
        // the vote and its save are one step and the same walks find nothing.
        let seed = 29;
        println!("seed {seed}");
        assert_default_walks_discover(
            Bug::VoteBeforePersist,
            seed,
            1_000,
            properties::ELECTION_SAFETY,
        );
        assert_default_walks_find_nothing(
            Bug::VoteBeforePersist,
            seed,
            1_000,
            "atomic steps",
            |cfg| {
                cfg.save_later = false;
            },
        );
    }

    /// The default walks with `bug`, each configuration changed by `change` (`what` says
    /// how), find no violation within `walks_max` walks from `seed`.
    fn assert_default_walks_find_nothing(
        bug: Bug,
        seed: u64,
        walks_max: u64,
        what: &str,
        change: impl Fn(&mut ModelConfig),
    ) {
        let (models, reports) = changed_default_walks(
            with_bug(ModelConfig::default(), bug),
            seed,
            walks_max,
            change,
        );
        assert!(
            reports.iter().all(|r| r.violation(&models[0]).is_none()),
            "{bug}, seed {seed}, {what}: {:?}",
            found_names(&reports)
        );
    }

    #[test]
    fn waiters_served_lifo_is_caught_by_the_fifo_rule_with_three_waiting_clients() {
        // bugs.rs, `waiters-served-lifo` (2026-12-07): the leader hands a freed key to its
        // last waiter. Two waiters need a third client, and a wait at the leader
        // (`locksmith model check --clients 3 --wait-ms 1000 --bug waiters-served-lifo`
        // finds it at walk 1287); with one waiter behind the holder there is no order to
        // break, and the default's two clients find nothing.
        let seed = 1;
        println!("seed {seed}");
        let mut cfg = with_bug(ModelConfig::default(), Bug::WaitersServedLifo);
        cfg.clients = 3;
        cfg.wait_ms = 1_000;
        let (_, reports) = default_walks(cfg, seed, 2_000);
        assert!(
            reports
                .iter()
                .any(|r| r.found.contains_key(properties::STEP_RULES)),
            "seed {seed}: not found; found {:?}",
            found_names(&reports)
        );
        assert_default_walks_find_nothing(
            Bug::WaitersServedLifo,
            seed,
            2_000,
            "two clients",
            |_| {},
        );
    }

    #[test]
    fn commit_old_term_is_caught_by_the_commit_rules_with_one_entry_per_append() {
        // bugs.rs, `commit-old-term` (the Figure 8 mistake): a leader counts replicas of an
        // entry of an older term. A new leader's first AppendEntries carries its Noop with
        // the older entries, so a follower's match index lands on the Noop, of the leader's
        // own term, and the mistake changes nothing; the default three-server walks send one
        // entry per AppendEntries (`ModelConfig::append_entries_max`), so a catching-up
        // follower's match stops on older entries and the commit rules
        // (`invariants::commit_rules`) see the count. With the core's default the same walks
        // find nothing.
        let seed = 3;
        println!("seed {seed}");
        assert_default_walks_discover(Bug::CommitOldTerm, seed, 4_000, properties::COMMIT_RULES);
        assert_default_walks_find_nothing(
            Bug::CommitOldTerm,
            seed,
            4_000,
            "the core's default",
            |cfg| {
                cfg.append_entries_max = None;
            },
        );
    }

    #[test]
    fn skip_phantom_release_is_caught_by_lock_of_a_client_that_left_is_released() {
        // bugs.rs, `skip-phantom-release`: the leader ignores ClientGone.
        let mut cfg = with_bug(two_servers(), Bug::SkipPhantomRelease);
        cfg.give_up_clients = 1;
        assert_dfs_discovers(cfg, properties::PHANTOM_RELEASED);
    }
}

mod explorer {
    //! research/design.md §1.4: the stateright Explorer serves the model; its JSON endpoints
    //! show the states, and the UI (in headless Chromium) opens a counterexample.
    use super::*;
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    /// Kills the child by its pid when dropped (also when the test fails).
    struct KillOnDrop(Child);

    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// One HTTP/1.0 request; returns the body.
    fn http(addr: SocketAddr, method: &str, path: &str) -> std::io::Result<String> {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        write!(
            stream,
            "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: 0\r\n\r\n"
        )?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        Ok(response
            .split_once("\r\n\r\n")
            .map(|(_, body)| body.to_owned())
            .unwrap_or_default())
    }

    fn free_port() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        listener.local_addr().expect("its address")
    }

    /// Waits (bounded) until `/.status` lists a counterexample for `property`; returns its
    /// encoded path.
    fn counterexample_path(addr: SocketAddr, property: &str) -> String {
        let start = Instant::now();
        loop {
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "no counterexample for {property:?} on the Explorer within 120 s"
            );
            if let Ok(body) = http(addr, "GET", "/.status")
                && let Ok(status) = serde_json::from_str::<serde_json::Value>(&body)
                && let Some(found) = status["properties"].as_array().and_then(|ps| {
                    ps.iter()
                        .find(|p| p[1] == property && p[2].is_string())
                        .and_then(|p| p[2].as_str().map(str::to_owned))
                })
            {
                return found;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn chromium() -> Option<&'static str> {
        ["chromium", "chromium-browser"].into_iter().find(|name| {
            Command::new(name)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
    }

    /// The DOM of `url` after its scripts ran, from headless Chromium (bounded: 90 s).
    fn dump_dom(browser: &str, url: &str) -> String {
        let profile = std::env::temp_dir().join(format!("model-explorer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&profile);
        std::fs::create_dir_all(&profile).expect("create an empty profile dir");
        let child = Command::new(browser)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--virtual-time-budget=10000",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("--dump-dom")
            .arg(url)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromium");
        let mut guard = KillOnDrop(child);
        let start = Instant::now();
        while guard.0.try_wait().expect("poll chromium").is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "chromium did not finish within 90 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut dom = String::new();
        if let Some(mut out) = guard.0.stdout.take() {
            out.read_to_string(&mut dom)
                .expect("read chromium's output");
        }
        let _ = std::fs::remove_dir_all(&profile);
        dom
    }

    #[test]
    fn the_explorer_shows_the_states_and_opens_a_counterexample() {
        // Issue 6 and research/design.md §1.4: `locksmith model explore` serves the model.
        let cfg = with_bug(one_server(), Bug::ReleaseByKey);
        let addr = free_port();
        // serve() blocks forever: it runs on a thread that ends with the test process.
        std::thread::spawn(move || {
            cfg.into_model()
                .checker()
                .threads(1)
                .target_max_depth(cfg.depth_max)
                .serve(addr);
        });
        let start = Instant::now();
        while TcpStream::connect(addr).is_err() {
            assert!(start.elapsed() < Duration::from_secs(30), "Explorer not up");
            std::thread::sleep(Duration::from_millis(50));
        }
        let states = http(addr, "GET", "/.states").expect("GET /.states");
        let states: serde_json::Value = serde_json::from_str(&states).expect("JSON states");
        let first = states[0]["state"].as_str().expect("an initial state");
        assert!(
            first.contains("ServerState") && first.contains("ClientState"),
            "{first}"
        );
        http(addr, "POST", "/.runtocompletion").expect("POST /.runtocompletion");
        let path = counterexample_path(addr, properties::RELEASE_OWN_TOKEN);
        let Some(browser) = chromium() else {
            println!(
                "skipping the browser half: chromium is not installed (ci/install.sh installs it)"
            );
            return;
        };
        let dom = dump_dom(browser, &format!("http://{addr}/#/steps/{path}"));
        assert!(dom.contains("Counterexample found"), "{dom}");
        assert!(dom.contains(properties::RELEASE_OWN_TOKEN), "{dom}");
        assert!(
            dom.contains("Release {"),
            "the path's steps are listed: {dom}"
        );
    }
}

mod trace_validation {
    //! Issue 14, trace validation: runs recorded from the model replay through fresh cores;
    //! a clean run is accepted, a run with `follower-grants` is rejected at its first bad step.
    use super::*;
    use checker::model::replay::{record, replay};
    use checker::model::simulate::{WalkOptions, walk};
    use lockd::raft::{Durable, Input, Message, NodeId};
    use lockd::trace::TraceLine;

    fn walk_options(seed: u64) -> WalkOptions {
        let mut options = WalkOptions::default();
        options.threads = 1;
        options.seed = seed;
        options.walks_max = 2_000;
        options
    }

    #[test]
    fn a_clean_run_replays_and_a_follower_grants_run_is_rejected() {
        // Clean: the walk that first reaches a grant, recorded and replayed.
        let cfg = ModelConfig::default().for_walks();
        let model = cfg.into_model();
        let report = walk(&model, &walk_options(7));
        let found = &report.found[properties::SOMETIMES_GRANTED];
        let trace = record(&model, &found.run);
        assert!(
            trace.len() > cfg.servers,
            "a trace of steps: {}",
            trace.len()
        );
        let clean = replay(&trace);
        assert_eq!(clean.departure, None, "seed 7");
        assert!(clean.steps > 0);
        // Mutant: the walk's shortened counterexample, recorded and replayed.
        let mut bad = cfg;
        bad.bugs = BugSet::of(&[Bug::FollowerGrants]);
        let model = bad.into_model();
        let report = walk(&model, &walk_options(7));
        let found = &report.found[properties::ONE_HOLDER];
        let departure = replay(&record(&model, &found.run))
            .departure
            .expect("seed 7: the follower-grants run must be rejected");
        assert!(
            departure.reason.contains("without an applied Grant"),
            "{departure:?}"
        );
    }

    /// A clean recorded run of the default walk model (seed 7: the walk that first reaches a
    /// grant), with at least one step of every server.
    fn clean_trace() -> Vec<TraceLine> {
        let cfg = ModelConfig::default().for_walks();
        let model = cfg.into_model();
        let report = walk(&model, &walk_options(7));
        let trace = record(&model, &report.found[properties::SOMETIMES_GRANTED].run);
        let clean = replay(&trace);
        assert_eq!(clean.departure, None, "seed 7");
        assert_eq!(clean.unknown(), None, "seed 7");
        trace
    }

    fn line_node(line: &TraceLine) -> NodeId {
        match line {
            TraceLine::Config { node, .. }
            | TraceLine::Step { node, .. }
            | TraceLine::Restart { node, .. } => *node,
        }
    }

    #[test]
    fn a_step_repeated_or_lost_inside_a_trace_is_malformed_and_a_restart_may_count_from_zero() {
        // A tracer that writes a turn twice (its buffer appended and not emptied) or loses
        // one would replay a run that never happened: the replay names the first such line
        // instead of judging it (before, a repeated turn was stepped again, and a simulated
        // seed whose tracer repeated every turn ran until its wall-clock bound).
        let trace = clean_trace();
        let steps: Vec<usize> = (trace.iter().enumerate())
            .filter(|(_, l)| matches!(l, TraceLine::Step { .. }))
            .map(|(i, _)| i)
            .collect();
        assert!(steps.len() >= 4, "seed 7: {} steps", steps.len());
        // The third step of its node, written again right after itself.
        let at = steps[2];
        let (node, seq) = match &trace[at] {
            TraceLine::Step { node, seq, .. } => (*node, *seq),
            _ => unreachable!("a step"),
        };
        let mut repeated = trace.clone();
        repeated.insert(at + 1, trace[at].clone());
        let departure = replay(&repeated).departure.expect("a repeated step");
        assert!(departure.malformed, "{departure:?}");
        assert_eq!((departure.node, departure.seq), (node, seq));
        assert!(
            departure.reason.contains("an earlier step repeats"),
            "{departure:?}"
        );
        // A step that sent nothing lost (one that sent is caught sooner, at the receipt no
        // recorded step sent): its node's next step comes early.
        let sends_nothing = |l: &TraceLine| {
            matches!(l, TraceLine::Step { output, .. }
                if output.as_ref().is_none_or(|o| o.sent.is_empty()))
        };
        let step_of =
            |l: &TraceLine, of: NodeId| matches!(l, TraceLine::Step { node, .. } if *node == of);
        let gone = (steps.iter().copied())
            .find(|&i| {
                let of = line_node(&trace[i]);
                sends_nothing(&trace[i]) && trace[i + 1..].iter().any(|l| step_of(l, of))
            })
            .expect("seed 7: a step that sends nothing, with a later step of its node");
        let mut lost = trace.clone();
        lost.remove(gone);
        let departure = replay(&lost).departure.expect("a lost step");
        assert!(departure.malformed, "{departure:?}");
        assert_eq!(departure.node, line_node(&trace[gone]), "{departure:?}");
        assert!(
            departure.reason.contains("steps are missing"),
            "{departure:?}"
        );
        // A process's writer counts from 0 after its start (the lockd server's; the model's
        // one writer goes on counting): renumbered from 0 after every restart line, the
        // trace replays as before.
        let mut next: std::collections::BTreeMap<NodeId, u64> = Default::default();
        let renumbered: Vec<TraceLine> = (trace.iter().cloned())
            .map(|mut line| {
                match &mut line {
                    TraceLine::Restart { node, .. } => {
                        next.insert(*node, 0);
                    }
                    TraceLine::Step { node, seq, .. } => {
                        let n = next.entry(*node).or_insert(*seq);
                        *seq = *n;
                        *n += 1;
                    }
                    TraceLine::Config { .. } => {}
                }
                line
            })
            .collect();
        assert_eq!(replay(&renumbered).departure, None);
    }

    #[test]
    fn a_trace_with_no_step_or_without_a_member_is_unknown_not_allowed() {
        // Nothing to check is no verdict.
        let empty = replay(&[]);
        assert_eq!(empty.departure, None);
        assert!(empty.unknown().expect("unknown").contains("no step"));
        let trace = clean_trace();
        let configs_only: Vec<TraceLine> = trace
            .iter()
            .filter(|l| matches!(l, TraceLine::Config { .. }))
            .cloned()
            .collect();
        assert!(replay(&configs_only).unknown().is_some());
        // A member's file lost: the others' receipts from it are not held against the run,
        // and the checks across nodes saw too few nodes to say it is allowed.
        let first = line_node(&trace[0]);
        let without: Vec<TraceLine> = trace
            .iter()
            .filter(|l| line_node(l) != first)
            .cloned()
            .collect();
        let report = replay(&without);
        assert_eq!(report.departure, None, "a missing file is no departure");
        assert_eq!(report.missing, vec![first]);
        assert!(report.unknown().expect("unknown").contains("member"));
    }

    #[test]
    fn a_message_no_node_sent_departs_where_it_is_received() {
        let mut trace = clean_trace();
        let at = trace
            .iter()
            .position(|l| {
                matches!(
                    l,
                    TraceLine::Step {
                        input: Input::Message { .. },
                        ..
                    }
                )
            })
            .expect("the run delivers a message");
        let TraceLine::Step {
            input: Input::Message { from, msg },
            ..
        } = &mut trace[at]
        else {
            unreachable!()
        };
        // The same message from the same sender, 100 terms later: no run this short reaches that term, so it was never sent.
        let forged = match msg.clone() {
            Message::RequestVote {
                term,
                last_log_index,
                last_log_term,
            } => Message::RequestVote {
                term: term + 100,
                last_log_index,
                last_log_term,
            },
            Message::PreVote {
                term,
                last_log_index,
                last_log_term,
            } => Message::PreVote {
                term: term + 100,
                last_log_index,
                last_log_term,
            },
            other => Message::RequestVoteResponse {
                term: other.term() + 100,
                granted: true,
            },
        };
        let sender = *from;
        *msg = forged;
        let d = replay(&trace)
            .departure
            .expect("the forged receipt departs");
        assert_eq!(d.record, at + 1, "{d:?}");
        assert!(!d.malformed);
        assert!(
            d.reason
                .contains(&format!("which no recorded step of node {sender} sent")),
            "{d:?}"
        );
    }

    #[test]
    fn a_restart_that_lost_reported_writes_departs() {
        // A node restarted from empty storage after its driver reported writes durable: what
        // `no-fsync` does to a killed node. Restarting from what it wrote is allowed.
        let trace = clean_trace();
        let mut writes = std::collections::BTreeMap::new();
        for line in &trace {
            if let TraceLine::Step {
                node,
                input: Input::Persisted { term, .. },
                ..
            } = line
                && *term > 0
            {
                writes.insert(*node, *term);
            }
        }
        let (&node, _) = writes
            .iter()
            .next()
            .expect("a node reported a write of term > 0");
        let mut lost = trace.clone();
        lost.push(TraceLine::Restart {
            node,
            restart: Durable::default(),
            now_ms: 1_000_000,
        });
        let d = replay(&lost).departure.expect("the lossy restart departs");
        assert_eq!(d.record, lost.len(), "{d:?}");
        assert!(
            d.reason.contains("lost what it had reported durable"),
            "{d:?}"
        );
    }

    #[test]
    fn two_leaders_of_one_term_at_different_times_depart() {
        // Node 3 (whose outputs are not recorded, so its messages are not matched to sends)
        // votes for node 1 and then for node 2 in term 1; node 1 steps down to term 2 before
        // node 2 wins. No two nodes lead one term at the same point of the replay: only the
        // whole run's leaders show it.
        let mut trace = Vec::new();
        for id in 1..=3 {
            let mut config = lockd::raft::Config::new(id, vec![1, 2, 3]);
            config.pre_vote = false;
            config.check_quorum = false;
            trace.push(TraceLine::Config { node: id, config });
        }
        let step = |node, seq, input| TraceLine::Step {
            node,
            seq,
            input,
            output: None,
        };
        let vote = |term| Input::Message {
            from: 3,
            msg: Message::RequestVoteResponse {
                term,
                granted: true,
            },
        };
        trace.push(step(3, 0, Input::Tick { now_ms: 1 }));
        trace.push(step(1, 0, Input::Campaign));
        trace.push(step(1, 1, vote(1)));
        let heartbeat = Message::AppendEntries {
            term: 2,
            prev_log_index: 0,
            prev_log_term: 0,
            entries: vec![],
            leader_commit: 0,
        };
        trace.push(step(
            1,
            2,
            Input::Message {
                from: 3,
                msg: heartbeat,
            },
        ));
        let before_node_2 = replay(&trace);
        assert_eq!(before_node_2.departure, None, "{before_node_2:?}");
        trace.push(step(2, 0, Input::Campaign));
        trace.push(step(2, 1, vote(1)));
        let d = replay(&trace)
            .departure
            .expect("two leaders of term 1 depart");
        assert_eq!(d.record, trace.len(), "{d:?}");
        // Node 3 voted for both: the replay's vote check sees it as node 2 receives the second
        // vote, before Election Safety sees two leaders of term 1.
        assert!(
            d.reason.contains("both led term 1")
                || d.reason
                    .contains("node 3's vote of term 1 reached both node 1 and node 2"),
            "{d:?}"
        );
    }

    /// Replays the model's own counterexample to `property` under `bug` (found by a
    /// one-thread BFS of `cfg`, or by the default walks with `walk_seed`) and returns the
    /// departure. The replay steps the recorded configuration, bug included: a mutant's run
    /// replays output for output, so only the properties can reject it.
    fn replay_counterexample(
        cfg: ModelConfig,
        walk_seed: Option<u64>,
        property: &'static str,
    ) -> checker::model::replay::Departure {
        let (model, run) = match walk_seed {
            None => {
                let (model, path) = bfs_discovery(cfg, property);
                let run = path.unwrap_or_else(|| panic!("{cfg}: {property:?} not discovered"));
                (model, run)
            }
            Some(seed) => {
                let (models, reports) = default_walks(cfg, seed, 2_000);
                let (model, report) = models
                    .into_iter()
                    .zip(reports)
                    .find(|(_, r)| r.found.contains_key(property))
                    .unwrap_or_else(|| panic!("seed {seed}: {property:?} not found by walks"));
                let run = report.found[property].run.clone();
                (model, run)
            }
        };
        let trace = record(&model, &run);
        let report = replay(&trace);
        report.departure.unwrap_or_else(|| {
            panic!(
                "{property:?}: the model's counterexample replayed as allowed ({} steps)",
                report.steps
            )
        })
    }

    #[test]
    fn the_lock_properties_reject_a_mutant_run_that_replays_output_for_output() {
        // Found by the replay of `locksmith sim --bug early-expire` (and release-by-key,
        // expire-ignores-token) traces: every history was invalid, every replay "allowed",
        // since the replay checked Raft's properties and the grants, not the lock table's.
        let early = replay_counterexample(
            with_bug(one_server(), Bug::EarlyExpire),
            None,
            properties::LEASE_NOT_EARLY,
        );
        assert!(early.reason.contains("armed the lease"), "{early:?}");
        let by_key = replay_counterexample(
            with_bug(one_server(), Bug::ReleaseByKey),
            None,
            properties::RELEASE_OWN_TOKEN,
        );
        assert!(
            by_key.reason.contains("removed the lock of token"),
            "{by_key:?}"
        );
        let expire = replay_counterexample(
            with_bug(ModelConfig::default(), Bug::ExpireIgnoresToken),
            Some(7),
            properties::EXPIRE_KEEPS_NEWER,
        );
        assert!(expire.reason.contains("Expire{token"), "{expire:?}");
    }

    #[test]
    fn a_leader_that_keeps_the_lock_of_a_client_that_left_departs() {
        // `skip-phantom-release`: the sim's histories show it as a liveness failure in 13 of
        // 20 seeds; the replay said "allowed" in all 20 before it checked the property.
        let departure = replay_counterexample(
            with_bug(ModelConfig::default(), Bug::SkipPhantomRelease),
            Some(1),
            properties::PHANTOM_RELEASED,
        );
        assert!(
            departure.reason.contains("left, with no Release"),
            "{departure:?}"
        );
    }
}
