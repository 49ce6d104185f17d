//! Replication under faults (Raft paper §5.3, §5.4, §7): Log Matching, Leader Completeness
//! and State Machine Safety at every step, snapshots and InstallSnapshot included, and every
//! client answer backed by a committed entry.

use lockd::bugs::{Bug, BugSet};

use super::{Chaos, Faults, for_each_seed, steps};

#[test]
fn client_requests_under_faults_keep_every_invariant() {
    // Raft paper Figure 3; DESIGN.md "Semantics of the lock ops": answers come from
    // committed entries.
    for_each_seed(
        "client_requests_under_faults_keep_every_invariant",
        |seed| {
            let mut chaos = Chaos::new(seed, 3, Faults::default(), |_| {});
            chaos.run(steps(super::STEPS));
            chaos.assert_live();
            chaos.assert_answers_match_the_ledger();
            let (granted, answered) = chaos.answer_counts();
            assert!(
                granted > 0,
                "seed {seed}: no grant among {answered} answers"
            );
            let snapshots = chaos
                .cluster
                .nodes()
                .iter()
                .filter(|n| n.snapshot().is_some())
                .count();
            assert!(snapshots > 0, "seed {seed}: no node took a snapshot");
            eprintln!("{}", chaos.summary());
        },
    );
}

#[test]
fn five_nodes_with_heavy_loss_keep_every_invariant() {
    // Raft paper §5.3: the log survives loss, duplication and reordering.
    for_each_seed("five_nodes_with_heavy_loss_keep_every_invariant", |seed| {
        let faults = Faults {
            drop: 20,
            duplicate: 10,
            ..Faults::default()
        };
        let mut chaos = Chaos::new(seed, 5, faults, |_| {});
        chaos.run(steps(super::STEPS));
        chaos.assert_live();
        chaos.assert_answers_match_the_ledger();
    });
}

#[test]
fn the_checks_catch_tokens_from_a_local_counter() {
    // bugs.rs, `token-from-local-counter`: the core does not assert it away; the cross-node
    // checks (State Machine Safety on outcomes, fencing tokens) or the answer check (a token
    // is the index of its Grant) must catch it.
    let mut caught = 0;
    for seed in super::SEEDS {
        let mut chaos = Chaos::new(seed, 3, Faults::default(), |config| {
            config.bugs = BugSet::of(&[Bug::TokenFromLocalCounter]);
        });
        chaos.cluster.set_panic_on_violation(false);
        chaos.run(steps(super::STEPS));
        if !chaos.cluster.violations().is_empty() || !chaos.answer_mismatches().is_empty() {
            caught += 1;
        }
    }
    assert!(
        caught > 0,
        "no seed of {:?} caught token-from-local-counter",
        super::SEEDS
    );
}

#[test]
fn the_answer_check_catches_grants_from_local_state() {
    // bugs.rs, `follower-grants` and `stale-leader`: grants answered from local state, not
    // from a committed entry, are caught by the answer check against the ledger.
    for bug in [Bug::FollowerGrants, Bug::StaleLeader] {
        let caught = super::SEEDS
            .filter(|seed| {
                let mut chaos = Chaos::new(*seed, 3, Faults::default(), |config| {
                    config.bugs = BugSet::of(&[bug]);
                });
                chaos.cluster.set_panic_on_violation(false);
                chaos.run(steps(super::STEPS));
                !chaos.answer_mismatches().is_empty()
            })
            .count();
        assert!(caught > 0, "no seed of {:?} caught {bug}", super::SEEDS);
    }
}

#[test]
fn tiny_snapshots_and_single_entry_appends_keep_every_invariant() {
    // Raft paper §7: compaction and InstallSnapshot at every turn, one entry per message.
    for_each_seed(
        "tiny_snapshots_and_single_entry_appends_keep_every_invariant",
        |seed| {
            let mut chaos = Chaos::new(seed, 3, Faults::default(), |config| {
                config.snapshot_threshold_entries = 3;
                config.append_entries_max = 1;
            });
            chaos.run(steps(super::STEPS / 2));
            chaos.assert_live();
            chaos.assert_answers_match_the_ledger();
        },
    );
}
