//! Elections under faults (Raft paper §5.2, thesis §9.6): Election Safety holds at every
//! step, and a leader emerges after the heal.

use super::{Chaos, Faults, for_each_seed, for_each_seed_in, steps};

#[test]
fn elections_under_drops_crashes_and_partitions_stay_safe_and_live() {
    // Raft paper Figure 3, Election Safety; §5.2 liveness with randomized timeouts.
    for_each_seed(
        "elections_under_drops_crashes_and_partitions_stay_safe_and_live",
        |seed| {
            let faults = Faults {
                request: 0,
                client_gone: 0,
                crash: 3,
                partition: 3,
                ..Faults::default()
            };
            let mut chaos = Chaos::new(seed, 5, faults, |_| {});
            chaos.run(steps(super::STEPS));
            let token = chaos.assert_live();
            assert!(
                chaos.has_leader(),
                "seed {seed}: no leader after the liveness phase"
            );
            assert!(token > 0, "seed {seed}: granted token {token}");
        },
    );
}

#[test]
fn elections_without_pre_vote_or_check_quorum_stay_safe() {
    // Raft paper §5.2: safety does not depend on pre-vote or check-quorum.
    for_each_seed(
        "elections_without_pre_vote_or_check_quorum_stay_safe",
        |seed| {
            let mut chaos = Chaos::new(seed, 3, Faults::default(), |config| {
                config.pre_vote = false;
                config.check_quorum = false;
            });
            chaos.run(steps(super::STEPS));
            chaos.assert_live();
            chaos.assert_answers_match_the_ledger();
        },
    );
}

#[test]
fn a_majority_left_up_after_chaos_elects_a_leader_whichever_node_stays_down() {
    // Raft paper §5.2: a majority up and connected elects a leader. `assert_live` restarts
    // every node, which hides a deadlock between the survivors: a review found one (a
    // refused pre-vote that did not carry the refuser's term; pre_vote_higher_term_shorter_log).
    // With that fix reverted this fails on seed 21 (no leader); 100 seeds take under a second.
    for_each_seed_in(
        "a_majority_left_up_after_chaos_elects_a_leader_whichever_node_stays_down",
        1..=100,
        |seed| {
            let faults = Faults {
                request: 2,
                client_gone: 0,
                crash: 3,
                partition: 3,
                drop: 15,
                ..Faults::default()
            };
            let mut chaos = Chaos::new(seed, 3, faults, |_| {});
            chaos.run(steps(super::STEPS));
            let down = 1 + seed % 3;
            let token = chaos.assert_live_without(down);
            assert!(token > 0, "seed {seed}: granted token {token}");
        },
    );
}
