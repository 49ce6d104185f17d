//! The clock family: a node's lease clock skewed (slower, after a backward jump) or strobed
//! (backward jumps alternating with half speed), through the system's harness-only clock
//! control, and reset. Verbs: `skew` or `strobe` / `reset-clock`.
//!
//! Clock episodes stay inside what a correct lease service may assume: a node's lease
//! clock runs slow or stands still (backward jumps), and a strobe alternates backward jumps
//! and half speed, so the clock is never ahead of real time. A fast clock makes any
//! lease holder's lease end early at that node, which no lease protocol survives (the
//! fencing check still must pass); measured with an earlier plan that ran clocks at 2-4x.

use std::time::Duration;

use futures::FutureExt as _;
use futures::future::BoxFuture;

use super::{
    Family, FaultKind, FaultOp, FaultOutcome, FaultValue, NodeSpec, ResolveContext,
    STROBE_JUMPS_MAX, Verb, each, pick_nodes,
};
use crate::harness::World;
use crate::rng::Rng;

const CLOCK_SPECS: [NodeSpec; 3] = [NodeSpec::One, NodeSpec::Minority, NodeSpec::Leader];
/// Clock rates of skews: all slower than real time. A lease service may assume bounded
/// drift (DESIGN: the checker's `--drift`, default 1%); a clock running fast breaks that
/// assumption for any lease-based lock, so the default clock family does not run clocks fast.
const CLOCK_RATES_PERMILLE: [u32; 4] = [250, 500, 750, 900];
/// One-time jumps of skews: backwards only (lockd holds its clock still instead of going
/// back), for the same reason.
const CLOCK_JUMPS_MS: [i64; 4] = [0, -250, -1000, -3000];

/// Jumps of [`ahead`], ms: up to past the longest default lease (1.5 s), so that a jump
/// expires keys that still had most of their TTL.
const AHEAD_JUMPS_MS: [i64; 3] = [1000, 2000, 4000];
/// Rates of [`ahead`], per mille: normal, or fast.
const AHEAD_RATES_PERMILLE: [u32; 4] = [1000, 1000, 1500, 2000];

/// A skew that jumps a majority's clocks ahead (and may run them fast), for a system whose
/// clock is a process's wall clock moved through libfaketime (redis): NTP may step such a
/// clock forward, and Redlock's safety rests on the instances' clocks not doing so (a jump
/// on a majority expires a held key early there). Never drawn for lockd's lease clock.
pub fn ahead(rng: &mut Rng) -> FaultOp {
    FaultOp::new(
        Verb::Skew,
        FaultValue::Clock {
            spec: NodeSpec::Majority,
            targets: vec![],
            rate_permille: *rng.pick(&AHEAD_RATES_PERMILLE).unwrap_or(&1000),
            jump_ms: *rng.pick(&AHEAD_JUMPS_MS).unwrap_or(&1000),
        },
    )
}

/// The clock family.
pub struct Clock;

fn reset_clock() -> FaultOp {
    FaultOp::new(
        Verb::ResetClock,
        FaultValue::Clock {
            spec: NodeSpec::Faulty,
            targets: vec![],
            rate_permille: 1000,
            jump_ms: 0,
        },
    )
}

impl Family for Clock {
    fn kind(&self) -> FaultKind {
        FaultKind::Clock
    }

    fn verbs(&self) -> &'static [Verb] {
        &[Verb::Skew, Verb::Strobe, Verb::ResetClock]
    }

    fn episode(&self, rng: &mut Rng) -> (FaultOp, FaultOp) {
        let spec = *rng.pick(&CLOCK_SPECS).unwrap_or(&NodeSpec::One);
        let start = if rng.chance(1, 2) {
            let rate = *rng.pick(&CLOCK_RATES_PERMILLE).unwrap_or(&500);
            let jump_ms = *rng.pick(&CLOCK_JUMPS_MS).unwrap_or(&0);
            FaultOp::new(
                Verb::Skew,
                FaultValue::Clock {
                    spec,
                    targets: vec![],
                    rate_permille: rate,
                    jump_ms,
                },
            )
        } else {
            let delta_ms = 1i64 << rng.range(4, 10);
            let period_ms = 1u64 << rng.range(4, 7);
            let count = 2 * rng.range(2, u64::from(STROBE_JUMPS_MAX / 2)) as u32;
            FaultOp::new(
                Verb::Strobe,
                FaultValue::Strobe {
                    spec,
                    targets: vec![],
                    delta_ms,
                    period_ms,
                    count,
                },
            )
        };
        (start, reset_clock())
    }

    fn final_schedule(&self) -> Vec<FaultOp> {
        vec![reset_clock()]
    }

    fn resolve(&self, op: &FaultOp, ctx: &ResolveContext, rng: &mut Rng) -> FaultValue {
        match (op.f, &op.value) {
            (
                Verb::Skew | Verb::ResetClock,
                FaultValue::Clock {
                    spec,
                    rate_permille,
                    jump_ms,
                    ..
                },
            ) => FaultValue::Clock {
                spec: *spec,
                targets: pick_nodes(*spec, &ctx.up(), &ctx.skewed, ctx, rng),
                rate_permille: *rate_permille,
                jump_ms: *jump_ms,
            },
            (
                Verb::Strobe,
                FaultValue::Strobe {
                    spec,
                    delta_ms,
                    period_ms,
                    count,
                    ..
                },
            ) => FaultValue::Strobe {
                spec: *spec,
                targets: pick_nodes(*spec, &ctx.up(), &ctx.skewed, ctx, rng),
                delta_ms: *delta_ms,
                period_ms: *period_ms,
                count: (*count).min(STROBE_JUMPS_MAX),
            },
            (_, other) => other.clone(),
        }
    }

    fn act<'a>(&'a self, op: &'a FaultOp, world: &'a World) -> BoxFuture<'a, FaultOutcome> {
        async move {
            let set = |id, rate_permille, jump_ms| {
                world
                    .system
                    .set_clock(&world.layout, id, rate_permille, jump_ms)
            };
            match &op.value {
                FaultValue::Clock { targets, .. } if op.f == Verb::ResetClock => {
                    each(targets, |id| world.system.reset_clock(&world.layout, id)).await
                }
                FaultValue::Clock {
                    targets,
                    rate_permille,
                    jump_ms,
                    ..
                } => each(targets, |id| set(id, *rate_permille, *jump_ms)).await,
                FaultValue::Strobe {
                    targets,
                    delta_ms,
                    period_ms,
                    count,
                    ..
                } => {
                    let mut outcome = FaultOutcome::done("strobed");
                    for jump in 0..(*count).min(STROBE_JUMPS_MAX) {
                        // Alternately jump back by delta and run at half speed. lockd holds
                        // its clock still after a backward jump and re-anchors every set at
                        // its current reading, so a forward jump would put the clock ahead
                        // of real time; these two moves never do.
                        let (rate, jump_ms) = if jump % 2 == 0 {
                            (1000, -delta_ms)
                        } else {
                            (500, 0)
                        };
                        outcome = each(targets, |id| set(id, rate, jump_ms)).await;
                        if !outcome.ok {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(*period_ms)).await;
                    }
                    outcome
                }
                other => {
                    FaultOutcome::failed(format!("the clock family cannot {} {other:?}", op.f))
                }
            }
        }
        .boxed()
    }
}
