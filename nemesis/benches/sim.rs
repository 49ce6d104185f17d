//! The simulator's speed (issue 11): simulated seconds per wall second on one core, for the
//! default case (5 nodes, 10 clients, 4 keys, 30 simulated seconds of faults, then recovery
//! and the phantom-lock probe). `cargo bench -p nemesis --bench sim`; the seeds are 1..=N
//! with N from `LOCKSMITH_SIM_BENCH_SEEDS` (default 8). Seeds run one after another on
//! this thread, so the figure is per core; `locksmith sim --jobs N` runs N at once.

use std::time::Instant;

use nemesis::sim::{SimCase, run_case};

fn main() {
    let seeds: u64 = std::env::var("LOCKSMITH_SIM_BENCH_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let mut simulated_ms = 0u64;
    let mut invalid = Vec::new();
    let started = Instant::now();
    for seed in 1..=seeds {
        let one = Instant::now();
        let result = run_case(&SimCase::new(seed));
        simulated_ms += result.results.simulated_ms.unwrap_or(0);
        if !result.verdict().is_valid() {
            invalid.push(seed);
        }
        eprintln!(
            "seed {seed}: {:.1} simulated s in {:.2} wall s, {}",
            result.results.simulated_ms.unwrap_or(0) as f64 / 1e3,
            one.elapsed().as_secs_f64(),
            result.verdict().as_str()
        );
    }
    let wall = started.elapsed().as_secs_f64();
    let simulated = simulated_ms as f64 / 1e3;
    println!(
        "sim speed: {:.1} simulated s per wall s on one core ({seeds} seeds, {simulated:.0} \
         simulated s in {wall:.1} wall s; 5 nodes, 10 clients; target 100)",
        simulated / wall
    );
    if !invalid.is_empty() {
        println!("(not valid: seeds {invalid:?}; a speed figure only, see locksmith sim)");
    }
}
