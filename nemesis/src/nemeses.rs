//! The nemeses that perform resolved [`FaultOp`]s on a real cluster, one per fault family,
//! and the packages that bundle each with its final schedule (STYLE practice 10).

use std::sync::Arc;
use std::time::Duration;

use crate::cluster::{Cluster, Layout};
use crate::faults::{
    self, FaultKind, FaultOp, FaultOutcome, FaultValue, Nemesis, Package, PackagePlan, Verb,
};
use crate::net::{Grudge, Net};
use crate::system::System;
use crate::workload::ClientPauses;
use crate::{Error, NodeId};

fn each(targets: &[NodeId], mut act: impl FnMut(NodeId) -> Result<(), Error>) -> FaultOutcome {
    let mut failures = Vec::new();
    for id in targets {
        if let Err(e) = act(*id) {
            failures.push(format!("n{id}: {e}"));
        }
    }
    if failures.is_empty() {
        FaultOutcome::done(format!("{} node(s)", targets.len()))
    } else {
        FaultOutcome::failed(failures.join("; "))
    }
}

/// Kills (SIGCONT, SIGKILL) and restarts nodes.
pub struct KillNemesis {
    cluster: Arc<Cluster>,
}

impl Nemesis for KillNemesis {
    fn setup(&mut self) -> Result<(), Error> {
        Ok(())
    }

    fn invoke(&mut self, op: &FaultOp) -> FaultOutcome {
        match op.f {
            Verb::Kill => each(op.targets(), |id| self.cluster.kill(id)),
            Verb::Restart => each(op.targets(), |id| self.cluster.restart(id)),
            other => FaultOutcome::failed(format!("kill nemesis cannot {other}")),
        }
    }

    fn teardown(&mut self) -> Result<(), Error> {
        // Restarting is the final schedule's job; teardown must not start processes.
        Ok(())
    }

    fn fs(&self) -> &[FaultKind] {
        &[FaultKind::Kill]
    }
}

/// Pauses (SIGSTOP) and resumes (SIGCONT) nodes, and stalls and resumes client slots.
pub struct PauseNemesis {
    cluster: Arc<Cluster>,
    clients: Arc<ClientPauses>,
}

impl Nemesis for PauseNemesis {
    fn setup(&mut self) -> Result<(), Error> {
        Ok(())
    }

    fn invoke(&mut self, op: &FaultOp) -> FaultOutcome {
        match op.f {
            Verb::Pause => each(op.targets(), |id| self.cluster.pause(id)),
            Verb::Resume => each(op.targets(), |id| self.cluster.resume(id)),
            Verb::PauseClients | Verb::ResumeClients => {
                let FaultValue::Clients(slots) = &op.value else {
                    return FaultOutcome::failed(format!("{}: no client slots", op.f));
                };
                if op.f == Verb::PauseClients {
                    self.clients.pause(slots);
                } else {
                    self.clients.resume(slots);
                }
                FaultOutcome::done(format!("{} client(s)", slots.len()))
            }
            other => FaultOutcome::failed(format!("pause nemesis cannot {other}")),
        }
    }

    fn teardown(&mut self) -> Result<(), Error> {
        // SIGCONT everything that is up, so no node stays stopped; no client stays stalled.
        self.clients
            .resume(&self.clients.paused().into_iter().collect::<Vec<_>>());
        for id in self.cluster.paused() {
            self.cluster.resume(id)?;
        }
        Ok(())
    }

    fn fs(&self) -> &[FaultKind] {
        &[FaultKind::Pause]
    }
}

/// Applies grudges through the net and heals.
pub struct PartitionNemesis {
    net: Arc<dyn Net>,
}

impl Nemesis for PartitionNemesis {
    fn setup(&mut self) -> Result<(), Error> {
        self.net.heal()
    }

    fn invoke(&mut self, op: &FaultOp) -> FaultOutcome {
        let result = match (&op.f, &op.value) {
            (Verb::Partition, FaultValue::Grudge(_, g)) => self.net.apply(g),
            (Verb::Heal, _) => self.net.apply(&Grudge::none()),
            (other, value) => {
                return FaultOutcome::failed(format!("partition nemesis cannot {other} {value:?}"));
            }
        };
        match result {
            Ok(()) => FaultOutcome::done("applied"),
            Err(e) => FaultOutcome::failed(e.to_string()),
        }
    }

    fn teardown(&mut self) -> Result<(), Error> {
        self.net.heal()
    }

    fn fs(&self) -> &[FaultKind] {
        &[FaultKind::Partition]
    }
}

/// Skews and strobes nodes' lease clocks through the system's control call.
pub struct ClockNemesis {
    system: Arc<dyn System>,
    layout: Layout,
    runtime: tokio::runtime::Handle,
}

impl ClockNemesis {
    fn set(&self, id: NodeId, rate_permille: u32, jump_ms: i64) -> Result<(), Error> {
        self.runtime.block_on(
            self.system
                .set_clock(&self.layout, id, rate_permille, jump_ms),
        )
    }
}

impl Nemesis for ClockNemesis {
    fn setup(&mut self) -> Result<(), Error> {
        Ok(())
    }

    fn invoke(&mut self, op: &FaultOp) -> FaultOutcome {
        match &op.value {
            FaultValue::Clock {
                targets,
                rate_permille,
                jump_ms,
                ..
            } => each(targets, |id| self.set(id, *rate_permille, *jump_ms)),
            FaultValue::Strobe {
                targets,
                delta_ms,
                period_ms,
                count,
                ..
            } => {
                let mut outcome = FaultOutcome::done("strobed");
                for jump in 0..(*count).min(faults::STROBE_JUMPS_MAX) {
                    // Alternately jump back by delta and run at half speed. lockd holds its
                    // clock still after a backward jump and re-anchors every set at its
                    // current reading, so a forward jump would put the clock ahead of real
                    // time; these two moves never do.
                    let (rate, jump_ms) = if jump % 2 == 0 {
                        (1000, -delta_ms)
                    } else {
                        (500, 0)
                    };
                    outcome = each(targets, |id| self.set(id, rate, jump_ms));
                    if !outcome.ok {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(*period_ms));
                }
                outcome
            }
            other => FaultOutcome::failed(format!("clock nemesis cannot {} {other:?}", op.f)),
        }
    }

    fn teardown(&mut self) -> Result<(), Error> {
        Ok(())
    }

    fn fs(&self) -> &[FaultKind] {
        &[FaultKind::Clock]
    }
}

/// What the packages act on.
#[derive(Clone)]
pub struct Targets {
    /// The node processes.
    pub cluster: Arc<Cluster>,
    /// The partitionable network.
    pub net: Arc<dyn Net>,
    /// The system (for clock control).
    pub system: Arc<dyn System>,
    /// Addresses of the nodes.
    pub layout: Layout,
    /// A runtime handle for the clock nemesis's calls.
    pub runtime: tokio::runtime::Handle,
    /// The client slots the pause nemesis may stall.
    pub clients: Arc<ClientPauses>,
}

/// The package of one fault family.
pub fn package(kind: FaultKind, targets: &Targets) -> Package {
    let nemesis: Box<dyn Nemesis> = match kind {
        FaultKind::Kill => Box::new(KillNemesis {
            cluster: targets.cluster.clone(),
        }),
        FaultKind::Pause => Box::new(PauseNemesis {
            cluster: targets.cluster.clone(),
            clients: targets.clients.clone(),
        }),
        FaultKind::Partition => Box::new(PartitionNemesis {
            net: targets.net.clone(),
        }),
        FaultKind::Clock => Box::new(ClockNemesis {
            system: targets.system.clone(),
            layout: targets.layout.clone(),
            runtime: targets.runtime.clone(),
        }),
        FaultKind::Netem => Box::new(crate::netem::NetemNemesis::new(targets.net.clone())),
    };
    Package {
        plan: PackagePlan {
            kind,
            final_schedule: faults::final_schedule(kind),
        },
        nemesis,
    }
}
