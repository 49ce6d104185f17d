//! The pause family: a node stopped (SIGSTOP: it neither reads nor writes, and its timers
//! fire late when it resumes) and resumed, or a third of the client slots stalled right
//! before their next write, as a lock holder in a GC pause. Verbs: `pause` / `resume`,
//! `pause-clients` / `resume-clients`.

use futures::FutureExt as _;
use futures::future::BoxFuture;

use super::kill::NODE_SPECS;
use super::{
    Family, FaultKind, FaultOp, FaultOutcome, FaultValue, NodeSpec, ResolveContext, Verb, each,
    pick_nodes,
};
use crate::harness::World;
use crate::rng::Rng;

/// The pause family.
pub struct Pause;

impl Family for Pause {
    fn kind(&self) -> FaultKind {
        FaultKind::Pause
    }

    fn verbs(&self) -> &'static [Verb] {
        &[
            Verb::Pause,
            Verb::Resume,
            Verb::PauseClients,
            Verb::ResumeClients,
        ]
    }

    fn episode(&self, rng: &mut Rng) -> (FaultOp, FaultOp) {
        if rng.chance(1, 3) {
            return (
                FaultOp::new(Verb::PauseClients, FaultValue::None),
                FaultOp::new(Verb::ResumeClients, FaultValue::None),
            );
        }
        let spec = *rng.pick(&NODE_SPECS).unwrap_or(&NodeSpec::One);
        (
            FaultOp::new(Verb::Pause, FaultValue::Nodes(spec)),
            self.final_schedule().remove(0),
        )
    }

    fn final_schedule(&self) -> Vec<FaultOp> {
        vec![
            FaultOp::new(Verb::Resume, FaultValue::Nodes(NodeSpec::Faulty)),
            FaultOp::new(Verb::ResumeClients, FaultValue::None),
        ]
    }

    fn resolve(&self, op: &FaultOp, ctx: &ResolveContext, rng: &mut Rng) -> FaultValue {
        match (op.f, &op.value) {
            (Verb::Pause, FaultValue::Nodes(s)) => {
                FaultValue::Targets(pick_nodes(*s, &ctx.running(), &ctx.paused, ctx, rng))
            }
            (Verb::Resume, FaultValue::Nodes(s)) => FaultValue::Targets(
                pick_nodes(*s, &ctx.nodes, &ctx.paused, ctx, rng)
                    .into_iter()
                    .filter(|n| ctx.paused.contains(n))
                    .collect(),
            ),
            (Verb::PauseClients, FaultValue::None) => {
                let mut slots: Vec<u64> = (0..ctx.client_slots)
                    .filter(|c| !ctx.paused_clients.contains(c))
                    .collect();
                rng.shuffle(&mut slots);
                slots.truncate(ctx.client_slots.div_ceil(3) as usize);
                slots.sort_unstable();
                FaultValue::Clients(slots)
            }
            (Verb::ResumeClients, FaultValue::None) => {
                FaultValue::Clients(ctx.paused_clients.iter().copied().collect())
            }
            (_, other) => other.clone(),
        }
    }

    fn act<'a>(&'a self, op: &'a FaultOp, world: &'a World) -> BoxFuture<'a, FaultOutcome> {
        async move {
            let nodes = world.nodes.clone();
            match (op.f, &op.value) {
                (Verb::Pause | Verb::Resume, _) => {
                    let pause = op.f == Verb::Pause;
                    each(op.targets(), |id| {
                        let nodes = nodes.clone();
                        world.blocking(move || {
                            if pause {
                                nodes.pause(id)
                            } else {
                                nodes.resume(id)
                            }
                        })
                    })
                    .await
                }
                (Verb::PauseClients, FaultValue::Clients(slots)) => {
                    world.clients.pause(slots);
                    FaultOutcome::done(format!("{} client(s)", slots.len()))
                }
                (Verb::ResumeClients, FaultValue::Clients(slots)) => {
                    world.clients.resume(slots);
                    FaultOutcome::done(format!("{} client(s)", slots.len()))
                }
                (other, value) => {
                    FaultOutcome::failed(format!("the pause family cannot {other} {value:?}"))
                }
            }
        }
        .boxed()
    }
}
