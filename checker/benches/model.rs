//! States per second of the model checker (`cargo bench -p checker --bench model`): the
//! default search (3 servers, 2 clients, 1 crash, all reductions, every state within 9
//! steps) by BFS on 2 threads, three times, and their median; then the same configuration
//! with the reductions off within 8 steps; then swarm walks for 10 s. Prints the figures
//! and the load average, since the machine may be shared.

use std::time::{Duration, Instant};

use checker::model::ModelConfig;
use checker::model::simulate::{WalkOptions, walk};
use stateright::{Checker, Model};

/// CPU seconds this process has used (user + system, from /proc/self/stat; 0 elsewhere).
/// The machine may be shared: states per CPU-second, times the 2 threads, is what 2 cores of
/// our own would give, while states per wall-clock second depends on the neighbours.
fn cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of stat(5), 11 and 12 after the name; in clock
    // ticks of 1/100 s on Linux.
    (ticks(11) + ticks(12)) / 100.0
}

/// One search of `cfg` by BFS on 2 threads: every state within `cfg.depth_max` steps
/// checked. Returns stateright's states per wall-clock second.
fn bfs(cfg: ModelConfig) -> f64 {
    let start = Instant::now();
    let cpu_start = cpu_s();
    let model = cfg.into_model();
    let checker = model
        .clone()
        .checker()
        .threads(2)
        .target_max_depth(cfg.stateright_depth())
        .spawn_bfs()
        .join();
    let secs = start.elapsed().as_secs_f64();
    let cpu = (cpu_s() - cpu_start).max(1e-3);
    let rate = checker.state_count() as f64 / secs;
    println!(
        "bfs, breadth-first within {} steps: {} checked, {} generated ({} unique), {secs:.1} s, \
         {rate:.0} states/s, {:.0} unique/s; {cpu:.1} CPU-s, {:.0} states per CPU-s, {:.0} \
         states/s on 2 cores of its own ({cfg})",
        cfg.depth_max,
        model.checked_states(),
        checker.state_count(),
        checker.unique_state_count(),
        checker.unique_state_count() as f64 / secs,
        checker.state_count() as f64 / cpu,
        2.0 * checker.state_count() as f64 / cpu,
    );
    rate
}

fn main() {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average: {}", load.trim());
    // The default search of `locksmith model check` (every state within 9 steps), three
    // times: the machine may be shared, so the median is the figure.
    let cfg = ModelConfig::default();
    let mut rates: Vec<f64> = (0..3).map(|_| bfs(cfg)).collect();
    rates.sort_by(f64::total_cmp);
    println!(
        "default search, median of 3: {:.0} states/s (target 200,000)",
        rates[1]
    );
    let mut plain = cfg;
    plain.symmetry = false;
    plain.relative_time = false;
    plain.canonical_order = false;
    plain.depth_max = 8;
    bfs(plain);
    let mut options = WalkOptions::default();
    options.time_limit = Duration::from_secs(10);
    let model = cfg.for_walks().into_model();
    let report = walk(&model, &options);
    let secs = report.elapsed.as_secs_f64();
    println!(
        "walks: {} walks, {} steps, {secs:.1} s, {:.0} steps/s ({} properties found)",
        report.walks,
        report.steps,
        report.steps as f64 / secs,
        report.found.len()
    );
    let _ = model.properties();
}
