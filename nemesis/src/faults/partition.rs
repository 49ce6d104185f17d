//! The partition family: directed links cut by a [`Grudge`] of some shape (halves, one node
//! alone, a bridge, a ring of majorities, the leader muted or deafened), applied by the
//! world's net, and healed. Verbs: `partition` / `heal`.

use futures::FutureExt as _;
use futures::future::BoxFuture;

use super::{Family, FaultKind, FaultOp, FaultOutcome, FaultValue, ResolveContext, Shape, Verb};
use crate::NodeId;
use crate::harness::World;
use crate::net::{Grudge, grudge};
use crate::rng::Rng;

/// The partition family.
pub struct Partition;

impl Family for Partition {
    fn kind(&self) -> FaultKind {
        FaultKind::Partition
    }

    fn verbs(&self) -> &'static [Verb] {
        // hold and release are the net's own (a paused remote node's links), as partitions are.
        &[Verb::Partition, Verb::Heal, Verb::Hold, Verb::Release]
    }

    fn episode(&self, rng: &mut Rng) -> (FaultOp, FaultOp) {
        let shape = *rng.pick(&Shape::ALL).unwrap_or(&Shape::Halves);
        (
            FaultOp::new(Verb::Partition, FaultValue::Shape(shape)),
            self.final_schedule().remove(0),
        )
    }

    fn final_schedule(&self) -> Vec<FaultOp> {
        vec![FaultOp::new(Verb::Heal, FaultValue::None)]
    }

    fn resolve(&self, op: &FaultOp, ctx: &ResolveContext, rng: &mut Rng) -> FaultValue {
        match (op.f, &op.value) {
            (Verb::Partition, FaultValue::Shape(shape)) => {
                FaultValue::Grudge(*shape, shape_grudge(*shape, ctx, rng))
            }
            (_, other) => other.clone(),
        }
    }

    fn act<'a>(&'a self, op: &'a FaultOp, world: &'a World) -> BoxFuture<'a, FaultOutcome> {
        async move {
            let grudge = match (op.f, &op.value) {
                (Verb::Partition, FaultValue::Grudge(_, g)) => g.clone(),
                (Verb::Heal, _) => Grudge::none(),
                (other, value) => {
                    return FaultOutcome::failed(format!(
                        "the partition family cannot {other} {value:?}"
                    ));
                }
            };
            let net = world.net.clone();
            match world.blocking(move || net.apply(&grudge)).await {
                Ok(()) => FaultOutcome::done("applied"),
                Err(e) => FaultOutcome::failed(e.to_string()),
            }
        }
        .boxed()
    }
}

fn shape_grudge(shape: Shape, ctx: &ResolveContext, rng: &mut Rng) -> Grudge {
    let nodes = &ctx.nodes;
    let leader = ctx.leader.unwrap_or_else(|| *rng.pick(nodes).unwrap_or(&1));
    let others: Vec<NodeId> = nodes.iter().copied().filter(|n| *n != leader).collect();
    match shape {
        Shape::Halves => grudge::halves(nodes),
        Shape::RandomHalves => grudge::random_halves(nodes, rng),
        Shape::One => grudge::one(nodes, *rng.pick(nodes).unwrap_or(&1)),
        Shape::IsolateLeader => grudge::one(nodes, leader),
        Shape::Bridge => {
            let mut shuffled = nodes.clone();
            rng.shuffle(&mut shuffled);
            grudge::bridge(&shuffled)
        }
        Shape::MajoritiesRing => {
            let mut shuffled = nodes.clone();
            rng.shuffle(&mut shuffled);
            grudge::majorities_ring(&shuffled)
        }
        Shape::LeaderMute => grudge::one_way(&[leader], &others),
        Shape::LeaderDeaf => grudge::one_way(&others, &[leader]),
    }
}
