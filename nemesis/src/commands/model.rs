//! `locksmith model check|explore|replay`: the stateright model of the real core
//! (`checker::model`), as stateright's examples do it: `check` runs a BFS (or DFS) within the
//! bounds, then a swarm of random walks that go deeper (`--simulate` runs only the walks), and
//! prints every property's result with a counterexample path in words (the three-server
//! walks split a step with a persist at its save, so that a crash can fall between a send and
//! the save it waits for; `--atomic-steps` keeps every step whole); `explore` serves the
//! stateright Explorer; `replay` checks a recorded trace against the model's properties
//! (`commands/replay.rs`).
//!
//! Exit codes: 0 every safety property holds (within the bounds), 1 a safety property is
//! violated, 2 the check could not run or did not finish (bad arguments, a port in use, the
//! time limit reached).

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use checker::model::explain::describe_path;
use checker::model::properties::violations;
use checker::model::simulate::{Run, WalkOptions, WalkReport, walk_models as walk_models_run};
use checker::model::{LockdModel, ModelConfig};
use clap::{Args, Subcommand};
use lockd::bugs::{Bug, BugSet};
use stateright::{Checker, Expectation, HasDiscoveries, Model};

/// `locksmith model ...`
#[derive(Args, Debug)]
pub struct ModelArgs {
    #[command(subcommand)]
    command: ModelCommand,
}

#[derive(Subcommand, Debug)]
enum ModelCommand {
    /// Explore every state within the bounds and check every property.
    Check(CheckArgs),
    /// Serve the stateright Explorer (a web UI to walk the state space).
    Explore(ExploreArgs),
    /// Replay a recorded run (trace.jsonl) through the real core under the model's checks.
    Replay(super::replay::ReplayArgs),
}

/// What to model; the defaults are `ModelConfig::default()`.
#[derive(Args, Debug, Clone)]
struct ModelOptions {
    /// Raft servers.
    #[arg(long, default_value_t = ModelConfig::default().servers)]
    servers: usize,
    /// Client actors.
    #[arg(long, default_value_t = ModelConfig::default().clients)]
    clients: usize,
    /// Search depth: every state within this many steps of the initial state is checked;
    /// with --simulate, the walks' depth [default: 9 for the search, 60 for walks].
    #[arg(long)]
    depth: Option<usize>,
    /// Inject a bug of the core (repeatable), e.g. release-by-key.
    #[arg(long = "bug", value_name = "NAME")]
    bugs: Vec<Bug>,
    /// Acquire(-release) rounds per client.
    #[arg(long, default_value_t = ModelConfig::default().rounds_per_client)]
    rounds: usize,
    /// How many clients (the last ones) may give up mid-acquire and cancel.
    #[arg(long, default_value_t = ModelConfig::default().give_up_clients)]
    give_up: usize,
    /// Servers down at the same time, at most.
    #[arg(long, default_value_t = ModelConfig::default().max_crashes)]
    crashes: usize,
    /// Let the network drop messages.
    #[arg(long)]
    lossy: bool,
    /// Highest term explored.
    #[arg(long, default_value_t = ModelConfig::default().term_max)]
    term_max: u64,
    /// Longest log explored (last log index).
    #[arg(long, default_value_t = ModelConfig::default().log_max)]
    log_max: u64,
    /// Most messages in flight explored.
    #[arg(long, default_value_t = ModelConfig::default().messages_in_flight_max)]
    messages_max: usize,
    /// How long an acquire waits at the leader (0 = try-acquire).
    #[arg(long, default_value_t = ModelConfig::default().wait_ms)]
    wait_ms: u64,
    /// Run the core without pre-vote (fewer steps per election).
    #[arg(long)]
    no_pre_vote: bool,
    /// Run the core without check-quorum (one timer less).
    #[arg(long)]
    no_check_quorum: bool,
    /// Switch off the symmetry reduction of servers (to measure what it saves).
    #[arg(long)]
    no_symmetry: bool,
    /// Keep absolute clock readings in the state (to measure what relative time saves).
    #[arg(long)]
    absolute_time: bool,
    /// Keep the clients' grants in arrival order (to measure what canonical order saves).
    #[arg(long)]
    no_canonical_order: bool,
    /// Split a server step with a persist at its save (`ModelConfig::save_later`) in the
    /// search and the Explorer too: the step sends `send_now` at once, and a later Save step
    /// makes the persist durable and sends the rest, so that a crash can fall in between.
    /// Each such step then costs two steps of depth. (The three-server walks split their
    /// steps by default.)
    #[arg(long)]
    save_later: bool,
}

impl ModelOptions {
    fn config(&self) -> anyhow::Result<ModelConfig> {
        if !(1..=5).contains(&self.servers) {
            bail!("--servers {}: the model runs 1 to 5 servers", self.servers);
        }
        if !(1..=4).contains(&self.clients) {
            bail!("--clients {}: the model runs 1 to 4 clients", self.clients);
        }
        if self.depth == Some(0) {
            bail!("--depth 0: the search needs at least one step");
        }
        let mut cfg = ModelConfig::default();
        cfg.servers = self.servers;
        cfg.clients = self.clients;
        cfg.depth_max = self.depth.unwrap_or(cfg.depth_max);
        cfg.bugs = BugSet::of(&self.bugs);
        cfg.rounds_per_client = self.rounds;
        cfg.give_up_clients = self.give_up.min(self.clients);
        cfg.max_crashes = self.crashes;
        cfg.lossy = self.lossy;
        cfg.term_max = self.term_max;
        cfg.log_max = self.log_max;
        cfg.messages_in_flight_max = self.messages_max;
        cfg.wait_ms = self.wait_ms;
        cfg.pre_vote = !self.no_pre_vote;
        cfg.check_quorum = !self.no_check_quorum;
        cfg.symmetry = !self.no_symmetry;
        cfg.relative_time = !self.absolute_time;
        cfg.canonical_order = !self.no_canonical_order;
        cfg.save_later = self.save_later;
        Ok(cfg)
    }
}

#[derive(Args, Debug)]
struct CheckArgs {
    #[command(flatten)]
    model: ModelOptions,
    /// Depth-first instead of breadth-first (less memory; paths are not the shortest).
    #[arg(long)]
    dfs: bool,
    /// Only random walks (swarm search), no exhaustive search; --depth is the walks' depth.
    #[arg(long)]
    simulate: bool,
    /// Random walks after the search (at most; see --walk-time-s).
    #[arg(long, default_value_t = 1_000_000)]
    walks: u64,
    /// The walks' depth when they follow the search.
    #[arg(long, default_value_t = 60)]
    walk_depth: usize,
    /// Seconds of random walks (they stop at --walks or after this long, whichever first).
    #[arg(long, default_value_t = 30)]
    walk_time_s: u64,
    /// No random walks after the search.
    #[arg(long, conflicts_with = "simulate")]
    no_walks: bool,
    /// Walk only the configuration asked for (with split steps, as `ModelConfig::walk_configs`
    /// walks it), not also the two-server variant without pre-vote, check-quorum and crashes.
    #[arg(long)]
    one_walk_config: bool,
    /// Carry out every server step atomically in the walks too, its sends and its save in
    /// one step (what the walks did before split steps): no crash falls between a send and
    /// the save it waits for, so mutants that send too early (vote-before-persist) are not
    /// seen.
    #[arg(long, conflicts_with = "save_later")]
    atomic_steps: bool,
    /// No small-scope search (one server, one crash, every state within 9 steps) before the
    /// main search.
    #[arg(long)]
    no_small_scope: bool,
    /// Uniform random choices instead of swarm search (random bounds and weights per walk).
    #[arg(long)]
    no_swarm: bool,
    /// The walks' seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Stop the exhaustive search after this many seconds (the result is then incomplete:
    /// exit 2).
    #[arg(long, default_value_t = 600)]
    timeout_s: u64,
    /// Checker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Keep searching after the first violation, to find one for every safety property.
    #[arg(long)]
    keep_going: bool,
    /// Also print the path to each `sometimes` example.
    #[arg(long)]
    examples: bool,
    /// Seconds between progress lines on stderr.
    #[arg(long, default_value_t = 2)]
    progress_s: u64,
    /// Also write a JUnit XML report: one testcase per property.
    #[arg(long, value_name = "FILE.xml")]
    junit: Option<std::path::PathBuf>,
}

#[derive(Args, Debug)]
struct ExploreArgs {
    #[command(flatten)]
    model: ModelOptions,
    /// Where to serve the Explorer (loopback only).
    #[arg(long, default_value = "127.0.0.1:3000")]
    addr: SocketAddr,
}

/// Runs `locksmith model ...`.
pub fn run(args: ModelArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        ModelCommand::Check(check) => run_check(check),
        ModelCommand::Explore(explore) => run_explore(explore),
        ModelCommand::Replay(replay) => super::replay::run(replay),
    }
}

/// A property's discovery, by the search or by a walk, as a run of the unreduced model
/// `model` (a walk's may be a variant configuration).
struct Discovery {
    by: String,
    run: Run,
    model: Option<LockdModel>,
}

/// What the exhaustive search did.
struct SearchSummary {
    /// States whose properties were checked: every state within the depth.
    checked: usize,
    /// States stateright generated, the unchecked ones one step past the depth included.
    states: usize,
    unique: usize,
    depth: usize,
    elapsed: Duration,
    complete: bool,
}

fn run_check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let mut cfg = args.model.config()?;
    if args.simulate {
        cfg.depth_max = args.model.depth.unwrap_or(60);
    }
    let model = cfg.into_model();
    println!("model: {cfg}");
    let mut found: BTreeMap<&'static str, Discovery> = BTreeMap::new();
    let mut search = None;
    if !args.simulate && !args.no_small_scope && cfg.servers > 1 {
        let small = small_scope(&cfg);
        println!(
            "small scope: {small}: {}, {}",
            if args.dfs { "DFS" } else { "BFS" },
            scope(small.depth_max, args.threads, args.dfs)
        );
        let summary = run_search(&small.into_model(), &args, &mut found);
        for d in found.values_mut() {
            d.by = "the small-scope search (1 server)".to_owned();
        }
        println!(
            "small scope done: {} states checked, {:.1} s",
            summary.checked,
            summary.elapsed.as_secs_f64()
        );
    }
    let violated = |found: &BTreeMap<&'static str, Discovery>| {
        model
            .properties()
            .iter()
            .any(|p| p.expectation == Expectation::Always && found.contains_key(p.name))
    };
    if !args.simulate && (!violated(&found) || args.keep_going) {
        println!(
            "search: {}, {}, {}, time limit {} s",
            if args.dfs { "DFS" } else { "BFS" },
            scope(cfg.depth_max, args.threads, args.dfs),
            if args.keep_going {
                "every state within the bounds"
            } else {
                "stop at the first safety violation"
            },
            args.timeout_s
        );
        search = Some(run_search(&model, &args, &mut found));
    }
    let mut walks = None;
    let mut reported = model.clone();
    if (args.simulate || !args.no_walks) && (!violated(&found) || args.keep_going) {
        let options = walk_options(&args, &cfg);
        let mut walk_cfgs = cfg.walk_configs();
        if args.one_walk_config {
            walk_cfgs.truncate(1);
        }
        if args.atomic_steps {
            for walk_cfg in &mut walk_cfgs {
                walk_cfg.save_later = false;
            }
        }
        let walk_models: Vec<LockdModel> = walk_cfgs.iter().map(|c| c.into_model()).collect();
        for walk_cfg in &walk_cfgs {
            println!("walk model: {walk_cfg}");
        }
        println!(
            "walks: up to {} {} walks of depth {} on {} thread(s), seed {}, time limit {} s{}",
            options.walks_max,
            if options.swarm { "swarm" } else { "uniform" },
            options.depth_max,
            options.threads,
            options.seed,
            options.time_limit.as_secs(),
            if walk_models.len() > 1 {
                ", shared in turn by the walk models"
            } else {
                ""
            }
        );
        let reports = walk_models_run(&walk_models, &options);
        // The walk model may have more properties (phantom locks): report over its list.
        reported = walk_models[0].clone();
        for ((walk_cfg, walk_model), report) in walk_cfgs.iter().zip(&walk_models).zip(&reports) {
            let on = if walk_models.len() > 1 {
                format!(" on {} servers", walk_cfg.servers)
            } else {
                String::new()
            };
            let variant = walk_cfg != &walk_cfgs[0];
            for (name, f) in &report.found {
                found.entry(name).or_insert_with(|| Discovery {
                    by: if f.steps_before_shortening > f.run.len().saturating_sub(1) {
                        format!(
                            "walk {}{on} (shortened from {} steps)",
                            f.walk, f.steps_before_shortening
                        )
                    } else {
                        format!("walk {}{on}", f.walk)
                    },
                    run: f.run.clone(),
                    model: variant.then(|| walk_model.clone()),
                });
            }
        }
        walks = Some(WalkReport {
            walks: reports.iter().map(|r| r.walks).sum(),
            steps: reports.iter().map(|r| r.steps).sum(),
            elapsed: reports.first().map(|r| r.elapsed).unwrap_or_default(),
            timed_out: reports.iter().any(|r| r.timed_out),
            found: Default::default(),
        });
    }
    if let Some(path) = &args.junit {
        write_junit(path, &reported, &cfg.to_string(), &found);
    }
    Ok(report(
        &reported,
        &args,
        search.as_ref(),
        walks.as_ref(),
        &found,
    ))
}

/// `--junit`: one testcase per property: a violated `always` fails (naming what found it),
/// an unreached `sometimes` is skipped.
fn write_junit(
    path: &std::path::Path,
    model: &LockdModel,
    config: &str,
    found: &BTreeMap<&'static str, Discovery>,
) {
    use checker::report::junit::{Case, Outcome, Suite};
    let mut suite = Suite::new(&format!("locksmith model check {config}"));
    for property in model.properties() {
        let name = format!("{:?} {}", property.expectation, property.name).to_lowercase();
        let discovery = found.get(property.name);
        let case = match (property.expectation, discovery) {
            (Expectation::Sometimes, Some(_)) => Case::passed(&name, "model"),
            (Expectation::Sometimes, None) => Case {
                outcome: Outcome::Skipped {
                    message: "not reached within the bounds".into(),
                },
                ..Case::passed(&name, "model")
            },
            (_, Some(d)) => {
                // The message is the last state's violation; the text adds the whole path.
                let why: Vec<String> = d
                    .run
                    .last()
                    .map(|(last, _)| violations(last))
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|(n, _)| *n == property.name)
                    .map(|(_, why)| why)
                    .collect();
                let message = why.first().cloned().unwrap_or_else(|| {
                    format!("\"{}\" violated (found by {})", property.name, d.by)
                });
                let mut text = format!(
                    "\"{}\" violated: counterexample in {} steps, found by {}\n",
                    property.name,
                    d.run.len().saturating_sub(1),
                    d.by
                );
                for line in describe_path(d.model.as_ref().unwrap_or(model), &d.run) {
                    text.push_str(&format!("  {line}\n"));
                }
                Case {
                    outcome: Outcome::Failed { message, text },
                    ..Case::passed(&name, "model")
                }
            }
            (_, None) => Case::passed(&name, "model"),
        };
        suite.push(case);
    }
    if let Err(e) = checker::report::junit::write(path, &[suite]) {
        eprintln!("locksmith model check: {}: {e}", path.display());
    }
}

/// The small scope searched first: one server with one crash, every state within 9 steps (a
/// second or two). Most mutants of the lock table and the storage contract show there, with
/// the shortest counterexamples.
fn small_scope(cfg: &ModelConfig) -> ModelConfig {
    let mut small = *cfg;
    small.servers = 1;
    small.max_crashes = 1;
    small.depth_max = 9;
    small.symmetry = false;
    small
}

fn walk_options(args: &CheckArgs, cfg: &ModelConfig) -> WalkOptions {
    let mut options = WalkOptions::default();
    options.walks_max = args.walks;
    options.depth_max = if args.simulate {
        cfg.depth_max
    } else {
        args.walk_depth
    }
    .max(2);
    options.threads = args.threads.max(1);
    options.seed = args.seed;
    options.swarm = !args.no_swarm;
    options.time_limit = Duration::from_secs(args.walk_time_s);
    options
}

/// Runs the exhaustive search with progress on stderr; records its discoveries.
fn run_search(
    model: &LockdModel,
    args: &CheckArgs,
    found: &mut BTreeMap<&'static str, Discovery>,
) -> SearchSummary {
    let builder = model
        .clone()
        .checker()
        .threads(args.threads)
        .target_max_depth(model.cfg.stateright_depth())
        .timeout(Duration::from_secs(args.timeout_s))
        .finish_when(if args.keep_going {
            HasDiscoveries::AllFailures
        } else {
            HasDiscoveries::AnyFailures
        });
    let start = Instant::now();
    if args.dfs {
        wait_search(builder.spawn_dfs(), args, start, found)
    } else {
        wait_search(builder.spawn_bfs(), args, start, found)
    }
}

fn wait_search(
    checker: impl Checker<LockdModel>,
    args: &CheckArgs,
    start: Instant,
    found: &mut BTreeMap<&'static str, Discovery>,
) -> SearchSummary {
    let progress = Duration::from_secs(args.progress_s.max(1));
    let mode = match nemesis::progress::Mode::for_stderr() {
        nemesis::progress::Mode::Lines(_) => nemesis::progress::Mode::Lines(progress),
        other => other,
    };
    let bar = nemesis::progress::Progress::with_mode("model check", None, mode);
    while !checker.is_done() {
        std::thread::sleep(Duration::from_millis(100));
        bar.set(
            checker.unique_state_count() as u64,
            &format!(
                "{} unique states ({} states, depth {})",
                checker.unique_state_count(),
                checker.state_count(),
                checker.max_depth()
            ),
        );
        if start.elapsed() > Duration::from_secs(args.timeout_s + 5) {
            break;
        }
    }
    bar.finish("search done");
    let checker = checker.join();
    let elapsed = start.elapsed();
    for (name, path) in checker.discoveries() {
        found.insert(
            name,
            Discovery {
                by: "the search".to_owned(),
                run: path.into_vec(),
                model: None,
            },
        );
    }
    SearchSummary {
        checked: checker.model().checked_states(),
        states: checker.state_count(),
        unique: checker.unique_state_count(),
        depth: checker.max_depth(),
        elapsed,
        complete: elapsed < Duration::from_secs(args.timeout_s),
    }
}

/// What a search of `depth` steps checked, in words: every state within the depth for a BFS
/// on one thread; otherwise the order is not exact breadth-first (see the note `report`
/// prints).
fn scope(depth: usize, threads: usize, dfs: bool) -> String {
    match (dfs, threads <= 1) {
        (false, true) => format!("every state within {depth} steps"),
        (false, false) => format!("breadth-first within {depth} steps on {threads} threads"),
        (true, _) => format!("depth-first within {depth} steps on {threads} thread(s)"),
    }
}

/// Prints the figures and every property's result; returns the exit code.
fn report(
    model: &LockdModel,
    args: &CheckArgs,
    search: Option<&SearchSummary>,
    walks: Option<&WalkReport>,
    found: &BTreeMap<&'static str, Discovery>,
) -> ExitCode {
    if let Some(s) = search {
        let secs = s.elapsed.as_secs_f64().max(1e-3);
        println!(
            "search done: {} states checked ({}); {} states generated, {} unique, up to {} \
             steps; {:.1} s, {:.0} states/s ({:.0} unique/s)",
            s.checked,
            scope(model.cfg.depth_max, args.threads, args.dfs),
            s.states,
            s.unique,
            s.depth.saturating_sub(1),
            secs,
            s.states as f64 / secs,
            s.unique as f64 / secs,
        );
        if args.dfs || args.threads > 1 {
            println!(
                "note: this search's order is not exact breadth-first (DFS, or BFS on more than \
                 one thread): a state first reached by a longer path is checked at that depth, \
                 and a successor of it within {} steps may then be generated and not checked; a \
                 BFS on one thread (--threads 1, no --dfs) checks every state within the depth",
                model.cfg.depth_max
            );
        }
    }
    if let Some(w) = walks {
        let secs = w.elapsed.as_secs_f64().max(1e-3);
        println!(
            "walks done: {} walks, {} steps, {:.1} s, {:.0} steps/s{}",
            w.walks,
            w.steps,
            secs,
            w.steps as f64 / secs,
            if w.timed_out { " (time limit)" } else { "" }
        );
    }
    let mut violated = false;
    let mut out = std::io::stdout().lock();
    for property in model.properties() {
        let discovery = found.get(property.name);
        match (property.expectation, discovery) {
            (Expectation::Sometimes, Some(d)) => {
                let _ = writeln!(
                    out,
                    "example   sometimes \"{}\": reached in {} steps by {}",
                    property.name,
                    d.run.len().saturating_sub(1),
                    d.by
                );
                if args.examples {
                    for line in describe_path(d.model.as_ref().unwrap_or(model), &d.run) {
                        let _ = writeln!(out, "    {line}");
                    }
                }
            }
            (Expectation::Sometimes, None) => {
                let _ = writeln!(
                    out,
                    "no example sometimes \"{}\": not reached within the bounds",
                    property.name
                );
            }
            (_, None) => {
                let _ = writeln!(out, "holds     always \"{}\"", property.name);
            }
            (_, Some(d)) => {
                violated = true;
                let _ = writeln!(
                    out,
                    "VIOLATED  always \"{}\": counterexample in {} steps, found by {}:",
                    property.name,
                    d.run.len().saturating_sub(1),
                    d.by
                );
                for line in describe_path(d.model.as_ref().unwrap_or(model), &d.run) {
                    let _ = writeln!(out, "    {line}");
                }
                if let Some((last, _)) = d.run.last() {
                    for (name, why) in violations(last) {
                        if name == property.name {
                            let _ = writeln!(out, "    => {why}");
                        }
                    }
                }
            }
        }
    }
    if violated {
        println!("result: a safety property is violated");
        return ExitCode::from(1);
    }
    if let Some(s) = search
        && !s.complete
    {
        println!(
            "result: unknown: the time limit of {} s was reached before the search finished",
            args.timeout_s
        );
        return ExitCode::from(2);
    }
    if let Some(s) = search
        && s.checked == 0
    {
        println!("result: unknown: the search checked no state");
        return ExitCode::from(2);
    }
    match (search, walks) {
        (Some(s), Some(w)) => println!(
            "result: every safety property holds within the bounds ({} states checked, {}), and \
             in {} random walks of up to {} steps",
            s.checked,
            scope(model.cfg.depth_max, args.threads, args.dfs),
            w.walks,
            args.walk_depth
        ),
        (Some(s), None) => println!(
            "result: every safety property holds within the bounds ({} states checked, {})",
            s.checked,
            scope(model.cfg.depth_max, args.threads, args.dfs)
        ),
        (None, Some(w)) => println!(
            "result: no safety property was violated in {} random walks (not a proof: walks \
             sample the state space)",
            w.walks
        ),
        (None, None) => println!("result: nothing was run"),
    }
    ExitCode::SUCCESS
}

fn run_explore(args: ExploreArgs) -> anyhow::Result<ExitCode> {
    if !args.addr.ip().is_loopback() {
        bail!("--addr {}: the Explorer serves on loopback only", args.addr);
    }
    // stateright's serve() unwraps its bind, so a port in use would panic: try it first.
    TcpListener::bind(args.addr)
        .with_context(|| format!("--addr {}: cannot listen there", args.addr))?;
    let cfg = args.model.config()?;
    println!("model: {cfg}");
    println!("Explorer: http://{}/", args.addr);
    cfg.into_model()
        .checker()
        .threads(1)
        .target_max_depth(cfg.stateright_depth())
        .serve(args.addr);
    Ok(ExitCode::SUCCESS)
}
