//! Faults of real networks (issue 15): latency with jitter (`slow`) and loss with reordering
//! and duplication (`flaky`), made with `tc netem` on the egress of a host's interface, and undone by
//! `unslow` and `unflaky` (the history vocabulary's pairs; Jepsen's `:slow` / `:flaky` /
//! `:fast`). Either undo puts the node's interface back to normal. The fault family is [`FaultKind::Netem`]; it
//! needs a net that can shape a node's interface ([`crate::net::Net::netem`]: remote hosts, namespace
//! hosts), so it joins the default mix only with `--hosts`.
//!
//! A qdisc on the egress of node `i`'s interface delays or drops everything `i` sends: to
//! its peers, to the clients, and the harness's own ssh commands (which only slows them).

use std::collections::BTreeSet;

use futures::FutureExt as _;
use futures::future::BoxFuture;

use super::{
    Family, FaultKind, FaultOp, FaultOutcome, FaultValue, NodeSpec, ResolveContext, Verb,
    pick_nodes,
};
use crate::harness::World;
use crate::rng::Rng;

/// One `tc netem` setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetemSpec {
    /// Added delay, ms.
    pub delay_ms: u32,
    /// Jitter around the delay, ms (normal distribution).
    pub jitter_ms: u32,
    /// Packets lost, percent.
    pub loss_percent: u32,
    /// Packets sent at once instead of delayed (so overtaking the others), percent.
    pub reorder_percent: u32,
    /// Packets sent twice, percent.
    pub duplicate_percent: u32,
}

impl NetemSpec {
    /// `slow`: 100 ms ± 50 ms on every packet, about a transcontinental link with a bad
    /// day. Election timeouts still fire less often than heartbeats arrive.
    pub const SLOW: NetemSpec = NetemSpec {
        delay_ms: 100,
        jitter_ms: 50,
        loss_percent: 0,
        reorder_percent: 0,
        duplicate_percent: 0,
    };

    /// `flaky`: 20 % loss, a quarter of the rest reordered (10 ms delay for the others), and
    /// 10 % sent twice.
    pub const FLAKY: NetemSpec = NetemSpec {
        delay_ms: 10,
        jitter_ms: 0,
        loss_percent: 20,
        reorder_percent: 25,
        duplicate_percent: 10,
    };

    /// The arguments after `tc qdisc replace dev DEV root netem`.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec!["delay".to_owned(), format!("{}ms", self.delay_ms)];
        if self.jitter_ms > 0 {
            args.extend([
                format!("{}ms", self.jitter_ms),
                "distribution".into(),
                "normal".into(),
            ]);
        }
        if self.loss_percent > 0 {
            args.extend(["loss".to_owned(), format!("{}%", self.loss_percent)]);
        }
        if self.reorder_percent > 0 {
            args.extend(["reorder".to_owned(), format!("{}%", self.reorder_percent)]);
        }
        if self.duplicate_percent > 0 {
            args.extend([
                "duplicate".to_owned(),
                format!("{}%", self.duplicate_percent),
            ]);
        }
        args
    }

    /// What stands in for this setting on a kernel without `sch_netem` (see
    /// [`fallback_script`]).
    pub fn fallback(&self) -> String {
        if self.loss_percent > 0 {
            format!(
                "{}% of sent packets dropped at random (iptables statistic)",
                self.loss_percent
            )
        } else {
            format!(
                "sending rate limited to {SLOW_FALLBACK_RATE} (tc tbf), queueing delay instead of latency"
            )
        }
    }

    /// The setting of a verb (`slow`, `flaky`); `None` for the undos and the others.
    pub fn of(verb: Verb) -> Option<NetemSpec> {
        match verb {
            Verb::Slow => Some(NetemSpec::SLOW),
            Verb::Flaky => Some(NetemSpec::FLAKY),
            _ => None,
        }
    }
}

/// The rate of the token bucket that stands in for `slow` without netem: a 1500-byte packet
/// takes about 50 ms to leave.
pub const SLOW_FALLBACK_RATE: &str = "256kbit";

/// The shell script that applies `spec` without netem on interface `device`, random drops
/// going into iptables chain `out_chain` (hooked to OUTPUT): a token bucket for latency,
/// `-m statistic` for loss. Reordering and duplication have no stand-in.
pub fn fallback_script(spec: &NetemSpec, device: &str, out_chain: &str) -> String {
    if spec.loss_percent > 0 {
        format!(
            "iptables -w -F {out_chain} && iptables -w -A {out_chain} -m statistic --mode random --probability {:.2} -j DROP",
            f64::from(spec.loss_percent) / 100.0
        )
    } else {
        format!(
            "tc qdisc replace dev {device} root tbf rate {SLOW_FALLBACK_RATE} burst 1600 latency {}ms",
            (spec.delay_ms + spec.jitter_ms) * 4
        )
    }
}

/// Whom a slow or flaky episode targets.
const NETEM_SPECS: [NodeSpec; 4] = [
    NodeSpec::One,
    NodeSpec::Minority,
    NodeSpec::Leader,
    NodeSpec::All,
];

/// The undo of a netem fault on every node (removing a qdisc that is not there is
/// harmless, so no state is needed to know which nodes were shaped).
pub fn undo(verb: Verb) -> FaultOp {
    let undo = if verb == Verb::Flaky {
        Verb::Unflaky
    } else {
        Verb::Unslow
    };
    FaultOp::new(undo, FaultValue::Nodes(NodeSpec::All))
}

/// The final schedule of the netem family: both undos on every node.
pub fn heal() -> Vec<FaultOp> {
    vec![undo(Verb::Slow), undo(Verb::Flaky)]
}

/// One episode: `slow` or `flaky` on some nodes, then its undo on every node.
pub fn episode(rng: &mut Rng) -> (FaultOp, FaultOp) {
    let spec = *rng.pick(&NETEM_SPECS).unwrap_or(&NodeSpec::One);
    let verb = if rng.chance(1, 2) {
        Verb::Slow
    } else {
        Verb::Flaky
    };
    (FaultOp::new(verb, FaultValue::Nodes(spec)), undo(verb))
}

/// The netem family. On real hosts it shapes a node's interface through the net
/// ([`crate::net::Net::netem`]); in the simulator the same call sets the node's link latency and its
/// peer links' loss, reordering and duplication.
pub struct Netem;

impl Family for Netem {
    fn kind(&self) -> FaultKind {
        FaultKind::Netem
    }

    fn verbs(&self) -> &'static [Verb] {
        &[Verb::Slow, Verb::Unslow, Verb::Flaky, Verb::Unflaky]
    }

    fn episode(&self, rng: &mut Rng) -> (FaultOp, FaultOp) {
        episode(rng)
    }

    fn final_schedule(&self) -> Vec<FaultOp> {
        heal()
    }

    fn resolve(&self, op: &FaultOp, ctx: &ResolveContext, rng: &mut Rng) -> FaultValue {
        match &op.value {
            // A host's interface is there whether its node runs or not.
            FaultValue::Nodes(s) => {
                FaultValue::Targets(pick_nodes(*s, &ctx.nodes, &BTreeSet::new(), ctx, rng))
            }
            other => other.clone(),
        }
    }

    fn act<'a>(&'a self, op: &'a FaultOp, world: &'a World) -> BoxFuture<'a, FaultOutcome> {
        async move {
            let spec = match op.f {
                Verb::Slow | Verb::Flaky => NetemSpec::of(op.f),
                Verb::Unslow | Verb::Unflaky => None,
                other => return FaultOutcome::failed(format!("the netem family cannot {other}")),
            };
            let mut failures = Vec::new();
            let mut how = BTreeSet::new();
            for id in op.targets().iter().copied() {
                let net = world.net.clone();
                match world.blocking(move || net.netem(id, spec.as_ref())).await {
                    Ok(applied) => {
                        how.insert(applied);
                    }
                    Err(e) => failures.push(format!("n{id}: {e}")),
                }
            }
            if failures.is_empty() {
                let how: Vec<String> = how.into_iter().collect();
                FaultOutcome::done(format!(
                    "{} node(s): {}",
                    op.targets().len(),
                    how.join("; ")
                ))
            } else {
                FaultOutcome::failed(failures.join("; "))
            }
        }
        .boxed()
    }
}

/// The default `--nemesis` set with `--hosts`: every local kind and netem.
pub fn default_kinds_with_hosts() -> Vec<FaultKind> {
    let mut kinds = FaultKind::ALL.to_vec();
    kinds.push(FaultKind::Netem);
    kinds
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netem_arguments_say_delay_jitter_loss_and_reorder() {
        // Issue 15: latency, jitter, loss and reordering with tc netem.
        assert_eq!(
            NetemSpec::SLOW.args().join(" "),
            "delay 100ms 50ms distribution normal"
        );
        assert_eq!(
            NetemSpec::FLAKY.args().join(" "),
            "delay 10ms loss 20% reorder 25% duplicate 10%"
        );
        assert_eq!(NetemSpec::of(Verb::Unslow), None);
        assert_eq!(
            fallback_script(&NetemSpec::FLAKY, "eth0", "C"),
            "iptables -w -F C && iptables -w -A C -m statistic --mode random --probability 0.20 -j DROP"
        );
        assert!(
            fallback_script(&NetemSpec::SLOW, "eth0", "C")
                .starts_with("tc qdisc replace dev eth0 root tbf")
        );
    }

    #[test]
    fn an_episode_starts_slow_or_flaky_and_ends_with_its_undo_on_every_node() {
        // Every fault family ships its undo (faults.rs module docs).
        let mut verbs = std::collections::BTreeSet::new();
        for seed in 0..32 {
            let (start, stop) = episode(&mut Rng::derive(seed, 1, 0));
            assert!(matches!(start.f, Verb::Slow | Verb::Flaky), "{start:?}");
            assert_eq!(
                crate::faults::VerbExt::kind(start.f),
                Some(FaultKind::Netem)
            );
            assert!(start.f.starts_fault());
            assert_eq!(stop, undo(start.f));
            assert_eq!(stop.value, FaultValue::Nodes(NodeSpec::All));
            assert!(heal().contains(&stop), "the final schedule undoes it too");
            verbs.insert(start.f);
        }
        assert_eq!(verbs.len(), 2, "both slow and flaky are drawn");
    }
}
