//! The store: one directory per run, `store/<test>/<timestamp>/` for a chaos run and
//! `store/sim/<time>-seed<S>/` for a failing simulated seed, with the same files in both.
//! [`RunDir`] owns the file names and writes every artifact; [`results::Results`] is
//! results.json, written and read back as the struct.
//!
//! | file | what |
//! |---|---|
//! | `history.csv` | the history, CSV schema v1 (a chaos run writes it as it goes) |
//! | `seed.txt` | the seed |
//! | `plan.txt` | the options and the fault plan (`at_ms verb value`) |
//! | `results.json` | [`results::Results`] |
//! | `timeline.html`, `latency.svg`, `latency-quantiles.svg`, `rate.svg` | the reports |
//! | `clock.svg` | a run with clock faults: each node's clock offset |
//! | `messages.svg` | a failing run with traces: the nodes' and clients' messages around the failure (`checker::report::messages`) |
//! | `node-logs/n<ID>.log` | each node's log (and `n<ID>.trace.jsonl` with traces on) |

pub mod junit;
pub mod pipeline;
pub mod results;
pub mod seed;
pub mod serve;

use std::path::{Path, PathBuf};

use checker::Check;
use history::Op;
use history::pair::Paired;

use crate::Error;
use crate::harness::TestOptions;
use crate::harness::recorder::write_file;
use crate::harness::schedule::{self, Planned};

pub use results::Results;
pub use seed::{Coverage, SeedReport};

/// One run's directory in the store.
#[derive(Clone, Debug)]
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    /// The history.
    pub const HISTORY: &'static str = "history.csv";
    /// The seed.
    pub const SEED: &'static str = "seed.txt";
    /// The options and the fault plan.
    pub const PLAN: &'static str = "plan.txt";
    /// [`Results`].
    pub const RESULTS: &'static str = "results.json";
    /// The HTML timeline.
    pub const TIMELINE: &'static str = "timeline.html";
    /// The message-flow diagram of a failing run with traces.
    pub const MESSAGES: &'static str = crate::replay::MESSAGES_FILE;
    /// The nodes' logs.
    pub const NODE_LOGS: &'static str = "node-logs";

    /// Creates `path` and its `node-logs/`.
    pub fn create(path: PathBuf) -> Result<RunDir, Error> {
        let logs = path.join(Self::NODE_LOGS);
        std::fs::create_dir_all(&logs)
            .map_err(|e| Error::Io(format!("{}: {e}", logs.display())))?;
        Ok(RunDir { path })
    }

    /// The run dir at `path` (to read).
    pub fn at(path: &Path) -> RunDir {
        RunDir {
            path: path.to_path_buf(),
        }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of one of its files.
    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Where the nodes' logs go.
    pub fn node_logs(&self) -> PathBuf {
        self.path.join(Self::NODE_LOGS)
    }

    /// Writes `seed.txt` and `plan.txt` (the options, then the whole plan).
    pub fn write_plan(&self, options: &TestOptions, plan: &[Planned]) -> Result<(), Error> {
        write_file(&self.file(Self::SEED), &format!("{}\n", options.seed))?;
        let options_json = serde_json::to_string_pretty(options).unwrap_or_default();
        write_file(
            &self.file(Self::PLAN),
            &format!(
                "# options\n{options_json}\n# fault plan: at_ms verb value\n{}",
                schedule::describe_plan(plan)
            ),
        )
    }

    /// Writes `history.csv` in one go (a simulated run, recorded in memory).
    pub fn write_history(&self, ops: &[Op]) -> Result<(), Error> {
        let path = self.file(Self::HISTORY);
        let mut writer = history::csv::Writer::create(&path, Default::default())
            .map_err(|e| Error::History(format!("{}: {e}", path.display())))?;
        for op in ops {
            writer
                .write(op)
                .map_err(|e| Error::History(format!("{}: {e}", path.display())))?;
        }
        writer
            .flush()
            .map_err(|e| Error::History(format!("{}: {e}", path.display())))
    }

    /// Writes `results.json`.
    pub fn write_results(&self, results: &Results) -> Result<(), Error> {
        let json = serde_json::to_string_pretty(results)
            .map_err(|e| Error::Io(format!("results.json: {e}")))?;
        write_file(&self.file(Self::RESULTS), &json)
    }

    /// Reads `results.json` back as the struct. The error names the file, and for a file
    /// that is there but is not [`Results`] (an older schema, damaged), serde's reason.
    pub fn read_results(&self) -> Result<Results, Error> {
        let path = self.file(Self::RESULTS);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
        serde_json::from_str(&text).map_err(|e| {
            Error::Io(format!(
                "{}: does not read as this version's results (an older schema, or damaged): {e}",
                path.display()
            ))
        })
    }

    /// Writes the reports of a checked history: `timeline.html` and the plots. Returns what
    /// could not be written.
    pub fn write_reports(
        &self,
        title: &str,
        seed: Option<u64>,
        paired: &Paired,
        check: &Check,
    ) -> Vec<String> {
        let mut errors = Vec::new();
        let timeline = checker::report::timeline::render(title, paired, check);
        if let Err(e) = write_file(&self.file(Self::TIMELINE), &timeline) {
            errors.push(e.to_string());
        }
        let plot_title = checker::report::plot::PlotTitle {
            test: self.test_name(),
            seed,
            verdict: check.verdict.as_str().to_owned(),
        };
        let (operations, faults) = (&paired.operations, &paired.faults);
        if let Err(e) =
            checker::report::plot::write_all(&self.path, &plot_title, operations, faults)
        {
            errors.push(format!("{}: {e}", self.path.display()));
        }
        // A failing run with traces: what the nodes said around the failure.
        if check.verdict == checker::Verdict::Invalid
            && crate::replay::has_traces(&self.path)
            && let Some(anchor) = crate::replay::failing_anchor(&self.path, paired, check)
            && let Err(e) = crate::replay::write_messages(&self.path, title, &anchor)
        {
            errors.push(format!("{e:#}"));
        }
        errors
    }

    /// Writes a whole run recorded in memory (a simulated seed): seed.txt, plan.txt,
    /// history.csv, the reports, results.json, and `node-logs/n<ID>.log` from `node_log`.
    pub fn write_recorded(
        &self,
        options: &TestOptions,
        ops: &[Op],
        results: &Results,
        node_log: impl Fn(u64) -> String,
    ) -> Result<(), Error> {
        self.write_plan(options, &options.plan())?;
        self.write_history(ops)?;
        let mut results = results.clone();
        let paired = history::pair::pair_with_faults(ops);
        if let (Ok(paired), Some(check)) = (paired, &results.checks) {
            let title = format!("{} seed {}", results.world, options.seed);
            results.report_errors = self.write_reports(&title, Some(options.seed), &paired, check);
        }
        self.write_results(&results)?;
        for node in 1..=options.nodes {
            let path = self.node_logs().join(format!("n{node}.log"));
            std::fs::write(&path, node_log(node))
                .map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
        }
        Ok(())
    }

    /// The store of a simulated seed, `STORE/sim/<time>-seed<S>/`, with the files of a chaos
    /// run's: the nodes' traces from `traces` (before the reports that draw them), then what
    /// [`RunDir::write_recorded`] writes, and `plan_tail` at the end of plan.txt (what the
    /// simulator drew beyond the options).
    pub fn write_seed(
        store: &Path,
        recorded: (&TestOptions, &[Op], &Results),
        traces: Option<&Path>,
        plan_tail: &str,
        node_log: impl Fn(u64) -> String,
    ) -> Result<RunDir, Error> {
        let (options, ops, results) = recorded;
        let stamp = crate::run::timestamp(std::time::SystemTime::now());
        let seed = options.seed;
        let run = RunDir::create(store.join("sim").join(format!("{stamp}-seed{seed}")))?;
        if let Some(traces) = traces {
            crate::replay::copy_traces(traces, run.path())
                .map_err(|e| Error::Io(format!("{}: {e}", traces.display())))?;
        }
        run.write_recorded(options, ops, results, node_log)?;
        let plan = run.file(Self::PLAN);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&plan)
            .and_then(|mut f| std::io::Write::write_all(&mut f, plan_tail.as_bytes()))
            .map_err(|e| Error::Io(format!("{}: {e}", plan.display())))?;
        Ok(run)
    }

    /// The seed of `seed.txt`, if it reads.
    pub fn seed(&self) -> Option<u64> {
        std::fs::read_to_string(self.file(Self::SEED))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// The test's name: the parent folder's, `store/<test>/<timestamp>/`.
    pub fn test_name(&self) -> String {
        self.path.parent().and_then(|p| p.file_name()).map_or_else(
            || self.path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
    }
}

/// The failure text for the terminal: the first explanation lines and every summary and
/// store line; the store's results.json keeps the whole explanation.
pub fn abridged(text: &str) -> String {
    const SHOWN: usize = 8;
    let is_summary = |l: &str| {
        ["(", "store:", "timeline:", "messages:"]
            .iter()
            .any(|p| l.starts_with(p))
    };
    let explanation: Vec<&str> = text.lines().filter(|l| !is_summary(l)).collect();
    let mut out: Vec<String> = explanation
        .iter()
        .take(SHOWN)
        .map(|l| (*l).to_owned())
        .collect();
    if explanation.len() > SHOWN {
        out.push(format!(
            "... and {} more lines (results.json in the store has them all)",
            explanation.len() - SHOWN
        ));
    }
    out.extend(text.lines().filter(|l| is_summary(l)).map(str::to_owned));
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_failure_is_abridged_but_keeps_its_summary_and_store() {
        let lines: Vec<String> = (0..20).map(|i| format!("violation {i}")).collect();
        let text = format!(
            "{}\n(recovery: 3 evaluated)\nstore: /s\ntimeline: /s/t.html",
            lines.join("\n")
        );
        let short = abridged(&text);
        assert!(short.contains("violation 7") && !short.contains("violation 8"));
        assert!(short.contains("12 more lines"));
        assert!(short.ends_with("(recovery: 3 evaluated)\nstore: /s\ntimeline: /s/t.html"));
        assert_eq!(abridged("one\nstore: x"), "one\nstore: x");
    }
}
