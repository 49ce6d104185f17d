//! Swarm options (TigerBeetle's VOPR `options_swarm`, FoundationDB's randomised knobs):
//! each seed draws its own run shape, so that seeds explore cluster sizes, client counts,
//! key contention, lease lengths, request rates, fault mixes and fault rates that no one
//! thought to write down. The draw is a pure function of the seed, so `locksmith sim --seeds
//! S` is the whole rerun line; the flags given on a command line are pinned over the draw
//! ([`Pins`]), which is how a shrunk case's rerun line stays short and exact.

use serde::{Deserialize, Serialize};

use crate::faults::FaultKind;
use crate::harness::TestOptions;
use crate::rng::Rng;

/// The stream of the swarm draw (apart from every stream of the run itself).
const SWARM_STREAM: u64 = 0x5a_4a12;

/// Cluster sizes drawn.
const NODES: [u64; 3] = [3, 5, 7];
/// Client counts drawn: one client alone, a few, and many on few keys.
const CLIENTS: [u64; 10] = [1, 2, 3, 4, 6, 10, 16, 24, 40, 64];
/// Key counts drawn: one key (every client contends), a few, and up to 64.
const KEYS: [u64; 8] = [1, 1, 2, 3, 4, 8, 16, 64];
/// Shortest think time, and the spread above it, ms.
const THINK_LOW_MS: [u64; 4] = [0, 5, 10, 50];
const THINK_SPREAD_MS: [u64; 3] = [20, 100, 400];
/// Shortest lease, and the spread above it, ms.
const LEASE_LOW_MS: [u64; 3] = [200, 400, 1_000];
const LEASE_SPREAD_MS: [u64; 3] = [300, 1_100, 4_000];
/// Percents of grants held past their lease.
const OVERHOLD_PERCENT: [u64; 4] = [0, 5, 12, 30];
/// Mean times between fault episodes, ms (0: the default, a twelfth of the fault phase).
const FAULT_INTERVAL_MS: [u64; 5] = [0, 300, 1_000, 3_000, 8_000];
/// The stream of the draw of fault points (apart from the swarm stream, so that adding the
/// draw changed no seed's other knobs).
const BUGGIFY_STREAM: u64 = 0xb0_6617;
/// One seed in this many runs with lockd's fault points on (`lockd::buggify`).
const BUGGIFY_ONE_IN: u64 = 2;
/// One seed in this many runs with no fault at all.
const NO_FAULTS_ONE_IN: u64 = 16;

/// The options of seed `seed`'s swarm run: `base` with every drawn knob replaced. What is
/// not drawn (the fault phase's length, the bug, the store, the world's own knobs) stays.
/// Fault families are drawn from `base.nemesis`, each on with probability 2/3, with none on
/// one seed in [`NO_FAULTS_ONE_IN`]. (Measured 2026-12-04, seeds from 1: every bug of
/// `lockd::bugs` is caught within 6 swarm seeds, as within 14 fixed-case seeds; a variant
/// that ran the fixed case on half the seeds was no faster.)
pub fn draw(seed: u64, base: &TestOptions) -> TestOptions {
    let mut rng = Rng::derive(seed, SWARM_STREAM, 0);
    let mut pick = |choices: &[u64]| *rng.pick(choices).unwrap_or(&choices[0]);
    let nodes = pick(&NODES);
    let concurrency = pick(&CLIENTS);
    let keys = pick(&KEYS);
    let think_low = pick(&THINK_LOW_MS);
    let think_ms = (think_low, think_low + pick(&THINK_SPREAD_MS));
    let lease_low = pick(&LEASE_LOW_MS);
    let lease_ms = (lease_low, lease_low + pick(&LEASE_SPREAD_MS));
    let overhold_percent = pick(&OVERHOLD_PERCENT);
    let fault_interval_ms = pick(&FAULT_INTERVAL_MS);
    let nemesis = if rng.chance(1, NO_FAULTS_ONE_IN) {
        Vec::new()
    } else {
        let on: Vec<FaultKind> = (base.nemesis.iter().copied())
            .filter(|_| rng.chance(2, 3))
            .collect();
        // At least one family on a faulty seed.
        match on.is_empty() {
            true => rng.pick(&base.nemesis).into_iter().copied().collect(),
            false => on,
        }
    };
    TestOptions {
        seed,
        nodes,
        concurrency,
        keys: u32::try_from(keys).unwrap_or(base.keys),
        think_ms,
        lease_ms,
        overhold_percent,
        fault_interval_ms,
        nemesis,
        buggify: Rng::derive(seed, BUGGIFY_STREAM, 0).chance(1, BUGGIFY_ONE_IN),
        ..base.clone()
    }
}

/// The drawn knobs that a command line set, applied over a seed's draw or the defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pins {
    /// `--nodes`.
    pub nodes: Option<u64>,
    /// `--clients` / `--concurrency`.
    pub concurrency: Option<u64>,
    /// `--keys`.
    pub keys: Option<u32>,
    /// `--nemesis`.
    pub nemesis: Option<Vec<FaultKind>>,
    /// `--think-ms LOW-HIGH`.
    pub think_ms: Option<(u64, u64)>,
    /// `--lease-ms LOW-HIGH`.
    pub lease_ms: Option<(u64, u64)>,
    /// `--overhold-percent`.
    pub overhold_percent: Option<u64>,
    /// `--fault-interval-ms`.
    pub fault_interval_ms: Option<u64>,
    /// `--buggify on|off`.
    #[serde(default)]
    pub buggify: Option<bool>,
}

impl Pins {
    /// `options` with every pinned knob set.
    pub fn apply(&self, mut options: TestOptions) -> TestOptions {
        let o = &mut options;
        o.nodes = self.nodes.unwrap_or(o.nodes);
        o.concurrency = self.concurrency.unwrap_or(o.concurrency);
        o.keys = self.keys.unwrap_or(o.keys);
        o.nemesis = self.nemesis.clone().unwrap_or_else(|| o.nemesis.clone());
        o.think_ms = self.think_ms.unwrap_or(o.think_ms);
        o.lease_ms = self.lease_ms.unwrap_or(o.lease_ms);
        o.overhold_percent = self.overhold_percent.unwrap_or(o.overhold_percent);
        o.fault_interval_ms = self.fault_interval_ms.unwrap_or(o.fault_interval_ms);
        o.buggify = self.buggify.unwrap_or(o.buggify);
        options
    }
}

/// How a seed's options are made: `base` (the defaults and what is never drawn), the seed's
/// swarm draw over it when `swarm`, then the pins.
#[derive(Clone, Debug)]
pub struct OptionsDraw {
    /// Draw the knobs from the seed.
    pub swarm: bool,
    /// The defaults and the undrawn options (fault phase, bug, dropped faults, ...).
    pub base: TestOptions,
    /// The knobs the command line set.
    pub pins: Pins,
}

impl OptionsDraw {
    /// The simulator's draw (`locksmith sim`): a 30 s fault phase and every fault kind,
    /// netem's (which `test` uses only on hosts of its own) included; each seed's own draw
    /// with `swarm`, else the fixed case (5 nodes, 10 clients, 4 keys: the other defaults).
    pub fn simulated(swarm: bool) -> OptionsDraw {
        let base = TestOptions {
            time_s: 30,
            nemesis: crate::netem::default_kinds_with_hosts(),
            progress: false,
            ..TestOptions::default()
        };
        let pins = Pins::default();
        OptionsDraw { swarm, base, pins }
    }

    /// The options of `seed`.
    pub fn options(&self, seed: u64) -> TestOptions {
        let base = TestOptions {
            seed,
            ..self.base.clone()
        };
        let drawn = if self.swarm { draw(seed, &base) } else { base };
        self.pins.apply(drawn)
    }
}

/// `LOW-HIGH` for the flag `flag`, LOW at most HIGH.
pub fn parse_range(flag: &str, text: &str) -> Result<(u64, u64), String> {
    let bad = |what: &str| format!("--{flag} {text:?}: {what}; expected LOW-HIGH, e.g. 10-100");
    let (low, high) = text.split_once('-').ok_or_else(|| bad("no '-'"))?;
    let low: u64 = low.trim().parse().map_err(|_| bad("LOW is not a number"))?;
    let high: u64 = high
        .trim()
        .parse()
        .map_err(|_| bad("HIGH is not a number"))?;
    if low > high {
        return Err(bad("LOW is above HIGH"));
    }
    Ok((low, high))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_draw_is_the_seeds_and_spans_the_knobs() {
        let base = TestOptions::default();
        assert_eq!(
            format!("{:?}", draw(9, &base)),
            format!("{:?}", draw(9, &base)),
            "seed 9 draws the same options twice"
        );
        let draws: Vec<TestOptions> = (0..400).map(|s| draw(s, &base)).collect();
        for nodes in NODES {
            assert!(
                draws.iter().any(|o| o.nodes == nodes),
                "{nodes} nodes drawn"
            );
        }
        assert!(draws.iter().any(|o| o.concurrency == 1));
        assert!(draws.iter().any(|o| o.concurrency == 64));
        assert!(draws.iter().any(|o| o.keys == 1) && draws.iter().any(|o| o.keys == 64));
        assert!(
            draws.iter().any(|o| o.nemesis.is_empty()),
            "some seeds have no faults"
        );
        assert!(
            draws.iter().any(|o| o.nemesis == base.nemesis),
            "some have every family"
        );
        for o in &draws {
            assert!(o.nemesis.iter().all(|k| base.nemesis.contains(k)));
            assert!(o.think_ms.0 <= o.think_ms.1 && o.lease_ms.0 <= o.lease_ms.1);
            assert_eq!(o.time_s, base.time_s, "the fault phase is not drawn");
        }
    }

    #[test]
    fn pins_win_over_the_draw_and_ranges_parse_or_say_why() {
        let draw = OptionsDraw {
            swarm: true,
            base: TestOptions::default(),
            pins: Pins {
                nodes: Some(3),
                keys: Some(2),
                ..Pins::default()
            },
        };
        for seed in 0..50 {
            let o = draw.options(seed);
            assert_eq!((o.nodes, o.keys, o.seed), (3, 2, seed));
        }
        assert_eq!(parse_range("lease-ms", "200-900"), Ok((200, 900)));
        let err = parse_range("lease-ms", "900-200").unwrap_err();
        assert!(
            err.contains("--lease-ms") && err.contains("LOW is above HIGH"),
            "{err}"
        );
        assert!(parse_range("think-ms", "x").is_err());
    }
}
