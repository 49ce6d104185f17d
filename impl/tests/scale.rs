//! The core at the table sizes of issue 27's soak (`locksmith bench --soak`: 100,000 held
//! keys beside a full session table): what the driver asks of a node on every turn of its
//! loop must not cost a pass over every held lock.

use std::time::{Duration, Instant};

use lockd::lock::{Command, LockTable};
use lockd::raft::{Config, Durable, HardState, Node, Snapshot};

/// A follower restarted from a snapshot whose table holds `keys` locks with long leases:
/// every lock has its lease timer armed.
fn node_holding(keys: u64) -> Node {
    let mut table = LockTable::new();
    for n in 1..=keys {
        let grant = Command::Grant {
            key: format!("soak-{n:011}"),
            lease_ms: 600_000,
        };
        table.apply(n, &grant);
    }
    let durable = Durable {
        hard_state: HardState {
            term: 1,
            voted_for: None,
            commit: keys,
        },
        snapshot: Some(Snapshot {
            last_index: keys,
            last_term: 1,
            table,
        }),
        entries: Vec::new(),
    };
    Node::new(Config::new(1, vec![1, 2, 3]), durable, 0).0
}

#[test]
fn the_next_deadline_of_a_node_holding_100_000_leases_is_not_a_scan() {
    // Regression (`locksmith bench --soak`, 2026-12-05): the driver asks for the next
    // deadline on every turn of its loop, and with the timers in one map by timer that was
    // the minimum over all of them: 100,000 lease timers, 22 % of a node's core thread.
    // 50,000 asks were 5 billion steps (22 s on the shared machine, 2026-12-05); now each is
    // a lookup.
    let node = node_holding(100_000);
    assert_eq!(
        node.timers().count(),
        100_001,
        "a lease each, and the election"
    );
    let started = Instant::now();
    let mut earliest = u64::MAX;
    for _ in 0..50_000 {
        earliest = earliest.min(node.next_deadline().unwrap_or(u64::MAX));
    }
    let took = started.elapsed();
    assert!(
        earliest < 600_000,
        "the election timer comes first: {earliest}"
    );
    assert!(
        took < Duration::from_secs(1),
        "50,000 next_deadline calls over 100,001 timers took {took:?}"
    );
}
