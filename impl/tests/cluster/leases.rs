//! Leases under faults (DESIGN.md "Leases"): locks are removed only by committed entries,
//! and once the cluster is healed every lease runs out through a committed Expire.

use lockd::lock::Command;

use super::{Chaos, Faults, for_each_seed, steps};

#[test]
fn every_lease_runs_out_through_a_committed_expire_after_the_heal() {
    // DESIGN.md "Leases": the leader proposes Expire when a lease runs out; a new leader
    // takes over the timers.
    for_each_seed(
        "every_lease_runs_out_through_a_committed_expire_after_the_heal",
        |seed| {
            let faults = Faults {
                lease_ms_max: 500,
                ..Faults::default()
            };
            let mut chaos = Chaos::new(seed, 3, faults, |_| {});
            chaos.run(steps(super::STEPS));
            chaos.assert_live();
            // The liveness grant holds a 1000 ms lease; give every lease time to run out.
            let empty = chaos.cluster.run_until(10_000, 10, |c| {
                c.nodes().iter().all(|n| n.table().locks().is_empty())
            });
            let tables: Vec<_> = chaos
                .cluster
                .nodes()
                .iter()
                .map(|n| n.table().locks().clone())
                .collect();
            assert!(
                empty,
                "seed {seed}: locks still held 10 s after the heal: {tables:?}"
            );
            let expires = chaos
                .cluster
                .ledger()
                .iter()
                .filter(|(_, e)| matches!(e.proposal.command, Command::Expire { .. }))
                .count();
            assert!(expires > 0, "seed {seed}: no Expire was ever committed");
            chaos.assert_answers_match_the_ledger();
        },
    );
}
