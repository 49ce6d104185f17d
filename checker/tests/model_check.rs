//! The stateright model of the real core: pinned state counts, every property on small
//! configurations, and for each mutant the discovery of the property meant to catch it.

use checker::model::explain::{describe_action, describe_path};
use checker::model::properties::{self, violations};
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

/// BFS to the configured depth until `property` is discovered; asserts it is.
fn assert_bfs_discovers(cfg: ModelConfig, property: &'static str) {
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
    assert!(
        checker.discovery(property).is_some(),
        "{cfg}: {property:?} not discovered in {} unique states",
        checker.unique_state_count()
    );
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
    }
    state
}

mod correct {
    use super::*;

    #[test]
    fn one_server_model_has_a_pinned_state_count_and_every_property() {
        // STYLE.md practice 15: model tests pin unique_state_count and assert every property.
        let cfg = one_server();
        let checker = cfg
            .into_model()
            .checker()
            .threads(1)
            .target_max_depth(cfg.depth_max)
            .finish_when(HasDiscoveries::AllFailures)
            .spawn_bfs()
            .join();
        checker.assert_properties();
        assert_eq!(checker.unique_state_count(), 0, "{cfg}");
    }
}
