//! Partition shapes as pure functions (STYLE practice 10): each returns a [`Grudge`], the set
//! of directed links that are cut. `net::proxy` and `net::kernel` only apply a grudge; the
//! shapes are tested on 3, 5 and 7 nodes without any process (`nemesis/tests/grudge.rs`).
//!
//! A cut link `(source, target)` means that messages from `source` to `target` are lost,
//! while `target -> source` is untouched unless it is cut too. Shapes that split the cluster
//! into components cut both directions between components ("complete grudge" in Jepsen's
//! words); one-way shapes cut a single direction.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::NodeId;
use crate::rng::Rng;

/// A set of cut directed links `(source, target)`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Grudge {
    cuts: BTreeSet<(NodeId, NodeId)>,
}

impl Grudge {
    /// No cut links: the healed network.
    pub fn none() -> Self {
        Grudge::default()
    }

    /// A grudge from explicit directed links; links from a node to itself are ignored.
    pub fn from_links(links: impl IntoIterator<Item = (NodeId, NodeId)>) -> Self {
        Grudge {
            cuts: links.into_iter().filter(|(s, t)| s != t).collect(),
        }
    }

    /// The complete grudge of `components`: every link between two different components is
    /// cut in both directions; links inside a component stay.
    pub fn complete(components: &[Vec<NodeId>]) -> Self {
        let mut cuts = BTreeSet::new();
        for (i, a) in components.iter().enumerate() {
            for (j, b) in components.iter().enumerate() {
                if i == j {
                    continue;
                }
                for source in a {
                    for target in b {
                        cuts.insert((*source, *target));
                    }
                }
            }
        }
        Grudge { cuts }
    }

    /// True when messages from `source` to `target` are lost.
    pub fn is_cut(&self, source: NodeId, target: NodeId) -> bool {
        self.cuts.contains(&(source, target))
    }

    /// True when no link is cut.
    pub fn is_empty(&self) -> bool {
        self.cuts.is_empty()
    }

    /// The cut links, ordered.
    pub fn links(&self) -> impl Iterator<Item = (NodeId, NodeId)> + '_ {
        self.cuts.iter().copied()
    }

    /// The number of cut links.
    pub fn len(&self) -> usize {
        self.cuts.len()
    }

    /// The nodes `node` can hear from (messages reach `node`), itself included.
    pub fn heard_by(&self, node: NodeId, nodes: &[NodeId]) -> BTreeSet<NodeId> {
        nodes
            .iter()
            .copied()
            .filter(|s| !self.is_cut(*s, node))
            .collect()
    }

    /// A short human description for the history's `value` cell: the components when the
    /// grudge is a complete grudge of components (`n1 n2 | n3 n4 n5`), otherwise the cut
    /// links (`n1->n2 n3->n2`).
    pub fn describe(&self, nodes: &[NodeId]) -> String {
        if self.is_empty() {
            return "healed".to_owned();
        }
        if let Some(components) = self.components(nodes) {
            let parts: Vec<String> = components
                .iter()
                .map(|c| {
                    c.iter()
                        .map(|n| format!("n{n}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect();
            return parts.join(" | ");
        }
        let mut out = String::new();
        for (s, t) in self.links() {
            if !out.is_empty() {
                out.push(' ');
            }
            let _ = write!(out, "n{s}->n{t}");
        }
        out
    }

    /// The components, when this grudge is exactly the complete grudge of some partition of
    /// `nodes` into groups; `None` for non-transitive or one-way shapes.
    fn components(&self, nodes: &[NodeId]) -> Option<Vec<Vec<NodeId>>> {
        let mut components: Vec<Vec<NodeId>> = Vec::new();
        for n in nodes {
            match components.iter_mut().find(|c| !self.is_cut(c[0], *n)) {
                Some(c) => c.push(*n),
                None => components.push(vec![*n]),
            }
        }
        (Grudge::complete(&components) == *self).then_some(components)
    }
}

/// The first ⌊n/2⌋ nodes against the rest (Jepsen's `bisect`): a minority and a majority.
pub fn halves(nodes: &[NodeId]) -> Grudge {
    let (a, b) = nodes.split_at(nodes.len() / 2);
    Grudge::complete(&[a.to_vec(), b.to_vec()])
}

/// [`halves`] of a seeded shuffle of the nodes.
pub fn random_halves(nodes: &[NodeId], rng: &mut Rng) -> Grudge {
    let mut shuffled = nodes.to_vec();
    rng.shuffle(&mut shuffled);
    halves(&shuffled)
}

/// `node` alone against the rest, both directions cut (also "isolate the leader").
pub fn one(nodes: &[NodeId], node: NodeId) -> Grudge {
    let rest: Vec<NodeId> = nodes.iter().copied().filter(|n| *n != node).collect();
    Grudge::complete(&[vec![node], rest])
}

/// Two halves that cannot reach each other, plus one node in the middle that reaches both
/// (Jepsen's `bridge`): connectivity is not transitive. With n nodes the first ⌊(n-1)/2⌋ form
/// one side, the next node is the bridge and the rest the other side.
pub fn bridge(nodes: &[NodeId]) -> Grudge {
    if nodes.len() < 3 {
        return Grudge::none();
    }
    let left = (nodes.len() - 1) / 2;
    let (a, rest) = nodes.split_at(left);
    let b = &rest[1..];
    let mut cuts = BTreeSet::new();
    for x in a {
        for y in b {
            cuts.insert((*x, *y));
            cuts.insert((*y, *x));
        }
    }
    Grudge { cuts }
}

/// Every node hears from a majority (itself included), and no two nodes hear from the same
/// majority (Jepsen's `majorities-ring-perfect`). Take the ring of `nodes`; for each window
/// of m = ⌊n/2⌋+1 consecutive nodes, the window's middle node drops messages from every node
/// outside the window. Some links are cut in one direction only (for even m).
pub fn majorities_ring(nodes: &[NodeId]) -> Grudge {
    let n = nodes.len();
    if n < 3 {
        return Grudge::none();
    }
    let m = n / 2 + 1;
    let mut cuts = BTreeSet::new();
    for start in 0..n {
        let window: Vec<NodeId> = (0..m).map(|k| nodes[(start + k) % n]).collect();
        let me = window[m / 2];
        for other in nodes.iter().filter(|x| !window.contains(x)) {
            cuts.insert((*other, me));
        }
    }
    Grudge { cuts }
}

/// One-way cuts: messages from every node in `sources` to every node in `targets` are lost;
/// the reverse direction stays open.
pub fn one_way(sources: &[NodeId], targets: &[NodeId]) -> Grudge {
    Grudge::from_links(
        sources
            .iter()
            .flat_map(|s| targets.iter().map(move |t| (*s, *t))),
    )
}
