//! `locksmith model check|explore`: the stateright model of the real core
//! (`checker::model`), as stateright's examples do it: `check` runs a BFS (or DFS) and prints
//! every property's result with a counterexample path in words; `explore` serves the
//! stateright Explorer.
//!
//! Exit codes: 0 every safety property holds (within the bounds), 1 a safety property is
//! violated, 2 the check could not run or did not finish (bad arguments, a port in use, the
//! time limit reached).

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use checker::model::explain::describe_path;
use checker::model::properties::violations;
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
    /// Search depth (steps from the initial state).
    #[arg(long, default_value_t = ModelConfig::default().depth_max)]
    depth: usize,
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
}

impl ModelOptions {
    fn config(&self) -> anyhow::Result<ModelConfig> {
        if !(1..=5).contains(&self.servers) {
            bail!("--servers {}: the model runs 1 to 5 servers", self.servers);
        }
        if !(1..=4).contains(&self.clients) {
            bail!("--clients {}: the model runs 1 to 4 clients", self.clients);
        }
        if self.depth == 0 {
            bail!("--depth 0: the search needs at least one step");
        }
        let mut cfg = ModelConfig::default();
        cfg.servers = self.servers;
        cfg.clients = self.clients;
        cfg.depth_max = self.depth;
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
    /// Stop after this many seconds (the result is then incomplete: exit 2).
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
    }
}

fn run_check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let cfg = args.model.config()?;
    let model = cfg.into_model();
    println!("model: {cfg}");
    println!(
        "search: {} with {} thread(s), {}, time limit {} s",
        if args.dfs { "DFS" } else { "BFS" },
        args.threads,
        if args.keep_going {
            "every state within the bounds"
        } else {
            "stop at the first safety violation"
        },
        args.timeout_s
    );
    let builder = model
        .checker()
        .threads(args.threads)
        .target_max_depth(cfg.depth_max)
        .timeout(Duration::from_secs(args.timeout_s))
        .finish_when(if args.keep_going {
            HasDiscoveries::AllFailures
        } else {
            HasDiscoveries::AnyFailures
        });
    let start = Instant::now();
    if args.dfs {
        Ok(wait_and_report(builder.spawn_dfs(), &args, start))
    } else {
        Ok(wait_and_report(builder.spawn_bfs(), &args, start))
    }
}

/// Shows progress on stderr until the search ends, then reports.
fn wait_and_report(
    checker: impl Checker<LockdModel>,
    args: &CheckArgs,
    start: Instant,
) -> ExitCode {
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
    if let Some(path) = &args.junit {
        let timeout = Duration::from_secs(args.timeout_s);
        let config = args
            .model
            .config()
            .map(|c| c.to_string())
            .unwrap_or_default();
        let suite =
            nemesis::reports::model_suite(&checker, checker.model(), &config, elapsed, timeout);
        if let Err(e) = checker::report::junit::write(path, &[suite]) {
            eprintln!("locksmith model check: {}: {e}", path.display());
        }
    }
    report(&checker, checker.model(), elapsed, args)
}

/// Prints the figures and every property's result; returns the exit code.
fn report(
    checker: &impl Checker<LockdModel>,
    model: &LockdModel,
    elapsed: Duration,
    args: &CheckArgs,
) -> ExitCode {
    let timeout_s = args.timeout_s;
    let unique = checker.unique_state_count();
    let secs = elapsed.as_secs_f64().max(1e-3);
    println!(
        "done: {} states, {unique} unique, max depth {}, {:.1} s, {:.0} states/s ({:.0} unique/s)",
        checker.state_count(),
        checker.max_depth(),
        secs,
        checker.state_count() as f64 / secs,
        unique as f64 / secs,
    );
    let mut violated = false;
    let mut out = std::io::stdout().lock();
    for property in model.properties() {
        let discovery = checker.discovery(property.name);
        match (property.expectation, discovery) {
            (Expectation::Sometimes, Some(path)) => {
                let _ = writeln!(
                    out,
                    "example   sometimes \"{}\": reached in {} steps",
                    property.name,
                    path.last_state_depth()
                );
                if args.examples {
                    for line in describe_path(model, &path.into_vec()) {
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
            (_, Some(path)) => {
                violated = true;
                let steps = path.clone().into_vec();
                let _ = writeln!(
                    out,
                    "VIOLATED  always \"{}\": counterexample in {} steps:",
                    property.name,
                    steps.len().saturating_sub(1)
                );
                for line in describe_path(model, &steps) {
                    let _ = writeln!(out, "    {line}");
                }
                for (name, why) in violations(path.last_state()) {
                    if name == property.name {
                        let _ = writeln!(out, "    => {why}");
                    }
                }
                let _ = writeln!(out, "    (Explorer path: {})", path.encode(model));
            }
        }
    }
    if violated {
        println!("result: a safety property is violated");
        return ExitCode::from(1);
    }
    if elapsed >= Duration::from_secs(timeout_s) {
        println!("result: unknown: the time limit of {timeout_s} s was reached first");
        return ExitCode::from(2);
    }
    println!("result: every safety property holds within the bounds ({unique} unique states)");
    ExitCode::SUCCESS
}

/// The depth of a path's last state.
trait PathDepth {
    fn last_state_depth(&self) -> usize;
}

impl<S: Clone, A: Clone> PathDepth for stateright::Path<S, A> {
    fn last_state_depth(&self) -> usize {
        self.clone().into_actions().len()
    }
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
        .target_max_depth(cfg.depth_max)
        .serve(args.addr);
    Ok(ExitCode::SUCCESS)
}
