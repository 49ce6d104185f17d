//! The kill family: SIGKILL (a crash that loses what was not synced) and restart from the
//! same data dir. Verbs: `kill` / `restart`.

use futures::FutureExt as _;
use futures::future::BoxFuture;

use super::{
    Family, FaultKind, FaultOp, FaultOutcome, FaultValue, NodeSpec, ResolveContext, Verb, each,
    pick_nodes,
};
use crate::harness::World;
use crate::rng::Rng;

/// Which nodes a kill episode takes down (also the pause family's choices).
pub(crate) const NODE_SPECS: [NodeSpec; 5] = [
    NodeSpec::One,
    NodeSpec::Minority,
    NodeSpec::Majority,
    NodeSpec::All,
    NodeSpec::Leader,
];

/// The kill family.
pub struct Kill;

impl Family for Kill {
    fn kind(&self) -> FaultKind {
        FaultKind::Kill
    }

    fn verbs(&self) -> &'static [Verb] {
        &[Verb::Kill, Verb::Restart]
    }

    fn episode(&self, rng: &mut Rng) -> (FaultOp, FaultOp) {
        let spec = *rng.pick(&NODE_SPECS).unwrap_or(&NodeSpec::One);
        (
            FaultOp::new(Verb::Kill, FaultValue::Nodes(spec)),
            self.final_schedule().remove(0),
        )
    }

    fn final_schedule(&self) -> Vec<FaultOp> {
        vec![FaultOp::new(
            Verb::Restart,
            FaultValue::Nodes(NodeSpec::Faulty),
        )]
    }

    fn resolve(&self, op: &FaultOp, ctx: &ResolveContext, rng: &mut Rng) -> FaultValue {
        match (op.f, &op.value) {
            (Verb::Kill, FaultValue::Nodes(s)) => {
                FaultValue::Targets(pick_nodes(*s, &ctx.up(), &ctx.killed, ctx, rng))
            }
            (Verb::Restart, FaultValue::Nodes(s)) => FaultValue::Targets(
                pick_nodes(*s, &ctx.nodes, &ctx.killed, ctx, rng)
                    .into_iter()
                    .filter(|n| ctx.killed.contains(n))
                    .collect(),
            ),
            (_, other) => other.clone(),
        }
    }

    fn act<'a>(&'a self, op: &'a FaultOp, world: &'a World) -> BoxFuture<'a, FaultOutcome> {
        async move {
            let nodes = world.nodes.clone();
            match op.f {
                Verb::Kill => {
                    each(op.targets(), |id| {
                        let nodes = nodes.clone();
                        world.blocking(move || nodes.kill(id))
                    })
                    .await
                }
                Verb::Restart => {
                    each(op.targets(), |id| {
                        let nodes = nodes.clone();
                        world.blocking(move || nodes.restart(id))
                    })
                    .await
                }
                other => FaultOutcome::failed(format!("the kill family cannot {other}")),
            }
        }
        .boxed()
    }
}
