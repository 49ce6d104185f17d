//! Partition shapes on 3, 5 and 7 nodes, without processes (STYLE practice 10: shapes are
//! pure functions returning a Grudge).

use std::collections::BTreeSet;

use nemesis::NodeId;
use nemesis::net::grudge::{self, Grudge};
use nemesis::rng::Rng;

fn nodes(n: u64) -> Vec<NodeId> {
    (1..=n).collect()
}

/// The nodes `node` can exchange messages with in both directions, itself included.
fn both_ways(g: &Grudge, node: NodeId, all: &[NodeId]) -> BTreeSet<NodeId> {
    all.iter()
        .copied()
        .filter(|o| !g.is_cut(node, *o) && !g.is_cut(*o, node))
        .collect()
}

#[test]
fn halves_split_a_minority_from_a_majority() {
    // DESIGN "The harness" / Jepsen bisect: first floor(n/2) nodes against the rest.
    for n in [3u64, 5, 7] {
        let all = nodes(n);
        let g = grudge::halves(&all);
        let minority = n / 2;
        for a in 1..=minority {
            for b in (minority + 1)..=n {
                assert!(
                    g.is_cut(a, b) && g.is_cut(b, a),
                    "n={n}: {a}<->{b} should be cut"
                );
            }
        }
        assert_eq!(g.len() as u64, 2 * minority * (n - minority), "n={n}");
        assert_eq!(both_ways(&g, n, &all).len() as u64, n - minority, "n={n}");
        let expected = match n {
            3 => "n1 | n2 n3",
            5 => "n1 n2 | n3 n4 n5",
            _ => "n1 n2 n3 | n4 n5 n6 n7",
        };
        assert_eq!(g.describe(&all), expected);
    }
}

#[test]
fn random_halves_are_seeded_halves() {
    // STYLE practice 11: the shuffle comes from the seed; the same seed, the same shape.
    for n in [3u64, 5, 7] {
        let all = nodes(n);
        let a = grudge::random_halves(&all, &mut Rng::new(42));
        let b = grudge::random_halves(&all, &mut Rng::new(42));
        assert_eq!(a, b, "n={n}");
        // Still a clean split: every node sees exactly its own side.
        let sides: BTreeSet<usize> = all.iter().map(|x| both_ways(&a, *x, &all).len()).collect();
        let expected: BTreeSet<usize> = [(n / 2) as usize, (n - n / 2) as usize].into();
        assert_eq!(sides, expected, "n={n}");
    }
    let all = nodes(7);
    let shapes: BTreeSet<String> = (0..20)
        .map(|s| grudge::random_halves(&all, &mut Rng::new(s)).describe(&all))
        .collect();
    assert!(shapes.len() > 1, "20 seeds gave one shape: {shapes:?}");
}

#[test]
fn one_isolates_a_node_in_both_directions() {
    // DESIGN "The harness": partition one node (or the leader) from the rest.
    for n in [3u64, 5, 7] {
        let all = nodes(n);
        let g = grudge::one(&all, 2);
        assert_eq!(both_ways(&g, 2, &all), BTreeSet::from([2]), "n={n}");
        for other in all.iter().filter(|x| **x != 2) {
            assert_eq!(
                both_ways(&g, *other, &all).len() as u64,
                n - 1,
                "n={n} node {other}"
            );
        }
        assert_eq!(g.len() as u64, 2 * (n - 1));
    }
}

#[test]
fn bridge_connects_both_sides_but_not_transitively() {
    // Jepsen's bridge: two halves, one node in the middle that reaches both.
    for n in [3u64, 5, 7] {
        let all = nodes(n);
        let g = grudge::bridge(&all);
        let middle = (n - 1) / 2 + 1;
        assert_eq!(
            both_ways(&g, middle, &all).len() as u64,
            n,
            "n={n}: the bridge sees all"
        );
        let left = 1;
        let right = n;
        assert!(g.is_cut(left, right) && g.is_cut(right, left), "n={n}");
        assert!(!g.is_cut(left, middle) && !g.is_cut(middle, right), "n={n}");
        // Both sides plus the bridge form a majority on each side for n=5 and 7.
        if n >= 5 {
            assert!(
                both_ways(&g, left, &all).len() as u64 >= n / 2 + 1 - 1,
                "n={n}"
            );
        }
    }
}

#[test]
fn majorities_ring_gives_each_node_a_different_majority() {
    // Jepsen majorities-ring: every node hears from a majority, no two the same majority.
    for n in [3u64, 5, 7] {
        let all = nodes(n);
        let g = grudge::majorities_ring(&all);
        let majority = (n / 2 + 1) as usize;
        let mut views = BTreeSet::new();
        for x in &all {
            let heard = g.heard_by(*x, &all);
            assert_eq!(heard.len(), majority, "n={n}: node {x} hears {heard:?}");
            assert!(heard.contains(x), "n={n}: node {x} must hear itself");
            views.insert(heard);
        }
        assert_eq!(views.len() as u64, n, "n={n}: two nodes share a majority");
        assert!(!g.is_empty(), "n={n}");
    }
}

#[test]
fn one_way_cuts_only_the_named_direction() {
    // DESIGN "The harness": one-way cuts; i->j cut leaves j->i alone.
    for n in [3u64, 5, 7] {
        let all = nodes(n);
        let g = grudge::one_way(&[1], &all);
        for t in all.iter().filter(|t| **t != 1) {
            assert!(g.is_cut(1, *t), "n={n}: 1->{t}");
            assert!(!g.is_cut(*t, 1), "n={n}: {t}->1 must stay open");
        }
        assert_eq!(g.len() as u64, n - 1);
        assert!(g.describe(&all).contains("n1->n2"), "{}", g.describe(&all));
    }
}

#[test]
fn the_empty_grudge_is_healed() {
    // STYLE practice 10: heal is the empty grudge.
    let all = nodes(5);
    let g = Grudge::none();
    assert!(g.is_empty());
    assert_eq!(g.describe(&all), "healed");
    assert_eq!(g.heard_by(3, &all).len(), 5);
}
