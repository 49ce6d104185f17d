//! What a run leaves for people and CI besides its store: a JUnit report
//! ([`test_suite`], [`write_junit`]; [`model_suite`] for `locksmith model check`) and how
//! to open the run ([`open_hint`]).
//!
//! The report is made from `results.json` read back as [`Results`]
//! ([`RunDir::read_results`]), the struct the run wrote it from. A results.json that does
//! not read as it (missing, cut short, an older schema, damaged) still gets a report: one
//! `checks` case in error naming the file and why it does not read, never a pass.

use std::path::Path;
use std::time::Duration;

use checker::model::LockdModel;
use checker::model::explain::describe_path;
use checker::model::properties::violations;
use checker::report::junit::{self, Case, Suite};
use checker::{CheckResult, Verdict};
use history::CheckName;
use stateright::{Checker, Expectation, Model};

use crate::store::results::RecoverySummary;
use crate::store::{Results, RunDir};

/// The JUnit suite of one `locksmith test` run: one case per check the history went
/// through (linearizability, fencing, lease safety, ...), plus `liveness` (every client
/// recovered after the heal; `recovery` when the checks judged liveness themselves) and
/// `node health` (no node exited on its own, teardown clean).
pub fn test_suite(dir: &Path, results: &Results) -> Suite {
    let system = results.system.as_str();
    let mut suite = Suite::new(&format!(
        "locksmith test {} seed {}",
        results.test, results.seed
    ));
    suite.time_s = results.duration_ms as f64 / 1e3;
    suite.property("seed", results.seed);
    suite.property("store", dir.display());
    suite.property("verdict", results.verdict.as_str());
    let store = format!("store: {}", dir.display());
    match &results.checks {
        Some(check) if !check.results.is_empty() => {
            for result in &check.results {
                let case = check_case(result, system);
                // Where to look, on the cases that need looking at.
                suite.push(match case.outcome {
                    junit::Outcome::Passed => case,
                    _ => case.with_output(store.clone()),
                });
            }
        }
        _ => {
            // No check result: the history could not be read, and the explanation says why.
            let why = match results.explanation.trim() {
                "" => "results.json has no check results".to_owned(),
                explanation => format!("results.json has no check results: {explanation}"),
            };
            suite.push(
                Case::error(CheckName::Checks.as_str(), system, &why).with_output(store.clone()),
            );
        }
    }
    // The run's own recovery phase; named `liveness` unless the checks judged liveness
    // from the history themselves.
    let judged = results
        .checks
        .as_ref()
        .is_some_and(|c| c.result(CheckName::Liveness).is_some());
    let name = if judged {
        CheckName::Recovery
    } else {
        CheckName::Liveness
    };
    suite.push(liveness_case(name, &results.recovery, system));
    // Node health is one of the checks (one verdict on every path); a results.json from a
    // run that did not record it as a check still gets the case, from its exits.
    let has_health =
        (results.checks.as_ref()).is_some_and(|c| c.result(CheckName::NodeHealth).is_some());
    if !has_health {
        suite.push(node_health_case(results, system));
    }
    if let Some(teardown) = &results.teardown_error {
        let name = CheckName::Teardown.as_str();
        suite.push(Case::failed(
            name,
            system,
            &format!("teardown: {teardown}\n"),
        ));
    }
    suite
}

/// The report of a run whose results.json does not read as [`Results`]: one `checks` case
/// in error with `reason` (the file and why), so that CI shows it rather than a pass.
pub fn unreadable_suite(run: &RunDir, reason: &str) -> Suite {
    let name = match run.seed() {
        Some(seed) => format!("locksmith test {} seed {seed}", run.test_name()),
        None => format!("locksmith test {}", run.test_name()),
    };
    let mut suite = Suite::new(&name);
    if let Some(seed) = run.seed() {
        suite.property("seed", seed);
    }
    suite.property("store", run.path().display());
    suite.property("verdict", Verdict::unknown(reason).as_str());
    suite.push(
        Case::error(CheckName::Checks.as_str(), "lock service", reason)
            .with_output(format!("store: {}", run.path().display())),
    );
    suite
}

fn check_case(result: &CheckResult, system: &str) -> Case {
    let name = result.name.as_str();
    let explanation = result.explanation.as_deref().unwrap_or("");
    match &result.verdict {
        // "not checked": nothing to judge, which is neither a pass nor a failure.
        Verdict::Unknown { reason } if !result.checked => Case {
            outcome: junit::Outcome::Skipped {
                message: format!("not checked: {reason}"),
            },
            ..Case::passed(name, system)
        },
        Verdict::Valid => Case::passed(name, system),
        Verdict::Invalid => Case::failed(name, system, explanation),
        Verdict::Unknown { reason } => {
            Case::error(name, system, &format!("{reason}\n{explanation}"))
        }
    }
}

fn liveness_case(name: CheckName, recovery: &RecoverySummary, system: &str) -> Case {
    if recovery.recovered {
        return Case::passed(name.as_str(), system);
    }
    let slots: Vec<String> = recovery
        .slots_recovered
        .iter()
        .map(u64::to_string)
        .collect();
    Case::failed(
        name.as_str(),
        system,
        &format!(
            "after the final heal only client slots [{}] of {} succeeded again within {} ms",
            slots.join(","),
            recovery.slots,
            recovery.duration_ms
        ),
    )
}

fn node_health_case(results: &Results, system: &str) -> Case {
    let name = CheckName::NodeHealth.as_str();
    let exited = &results.nodes_exited_on_their_own;
    if exited.is_empty() {
        return Case::passed(name, system);
    }
    let mut text = String::new();
    if !exited.is_empty() {
        // Each quoted as a JSON string, so that a log tail stays on the message's one line.
        let list: Vec<String> = exited
            .iter()
            .map(|e| serde_json::Value::from(e.as_str()).to_string())
            .collect();
        text.push_str(&format!(
            "nodes exited on their own: {} (see node-logs/)\n",
            list.join(", ")
        ));
    }
    Case::failed(name, system, &text)
}

/// The summary's lines of a run: one per testcase of its JUnit report ([`test_suite`]),
/// in the same order, each with its verdict and one line of what the check evaluated
/// ([`CheckName::evaluates`]); a valid check that counted something (liveness, the trace
/// replay) adds its count. Made from the suite so that the summary and CI's report cannot
/// list different checks (issue 28: a valid run's summary showed only liveness).
pub fn summary_lines(suite: &Suite, results: &Results) -> Vec<String> {
    suite
        .cases
        .iter()
        .map(|case| {
            let name = CheckName::parse(&case.name);
            let verdict = match &case.outcome {
                junit::Outcome::Passed => "valid".to_owned(),
                junit::Outcome::Failed { .. } => "invalid".to_owned(),
                junit::Outcome::Error { message, .. } => format!("unknown: {message}"),
                // `check_case` words a skipped check "not checked: " + its status, which
                // says "not checked (why)" already.
                junit::Outcome::Skipped { message } => {
                    message.trim_start_matches("not checked: ").to_owned()
                }
            };
            let what = name.map_or("", CheckName::evaluates);
            let counted = name
                .and_then(|n| results.checks.as_ref()?.result(n))
                .filter(|r| r.verdict.is_valid())
                .and_then(|r| r.explanation.as_deref()?.lines().last())
                .map_or(String::new(), |line| format!("; {line}"));
            format!("{}: {verdict} -- evaluates: {what}{counted}", case.name)
        })
        .collect()
}

/// Writes the JUnit report of the run in `dir` (its `results.json`) to `path`. When
/// results.json does not read as [`Results`], the report written is [`unreadable_suite`]
/// and the reason is returned as the error too.
pub fn write_junit(path: &Path, dir: &Path) -> Result<(), String> {
    let run = RunDir::at(dir);
    let (suite, read) = match run.read_results() {
        Ok(results) => (test_suite(dir, &results), Ok(())),
        Err(e) => {
            let reason = e.to_string();
            (unreadable_suite(&run, &reason), Err(reason))
        }
    };
    junit::write(path, &[suite]).map_err(|e| format!("{}: {e}", path.display()))?;
    read
}

/// Writes a JUnit report for a run that could not happen (no cluster, bad arguments): one
/// `run` testcase in error with the reason, so CI shows it instead of a missing file.
pub fn write_could_not_run(path: &Path, name: &str, reason: &str) -> Result<(), String> {
    let mut suite = Suite::new(name);
    suite.push(Case::error(
        "run",
        "locksmith",
        &format!("could not run: {reason}"),
    ));
    junit::write(path, &[suite]).map_err(|e| format!("{}: {e}", path.display()))
}

/// How to open a run: the `locksmith serve` command and the run page's URL, and the
/// timeline's path for opening without a server.
pub fn open_hint(dir: &Path, store: &Path) -> String {
    let page = dir.strip_prefix(store).ok().map(|rel| {
        format!(
            "http://127.0.0.1:8080/run/{}/",
            crate::store::serve::url_path(rel)
        )
    });
    let timeline = std::fs::canonicalize(dir.join(RunDir::TIMELINE))
        .unwrap_or_else(|_| dir.join(RunDir::TIMELINE));
    match page {
        Some(url) => format!(
            "open: locksmith serve --store {} and browse {url}\n  or: file://{}",
            store.display(),
            timeline.display()
        ),
        None => format!("open: file://{}", timeline.display()),
    }
}

/// The JUnit suite of `locksmith model check`: one case per property. An `always` property
/// with a counterexample fails with the path in words; one that held passes, unless the time
/// limit cut the search short (then it is an error: not proven within the bounds). A
/// `sometimes` property never reached is skipped.
pub fn model_suite<C>(
    checker: &C,
    model: &LockdModel,
    config: &str,
    elapsed: Duration,
    timeout: Duration,
) -> Suite
where
    C: Checker<LockdModel>,
{
    let mut suite = Suite::new(&format!("locksmith model check {config}"));
    suite.time_s = elapsed.as_secs_f64();
    suite.property("unique_states", checker.unique_state_count());
    suite.property("max_depth", checker.max_depth());
    let cut_short = elapsed >= timeout;
    for property in model.properties() {
        let name = format!("{:?} {}", property.expectation, property.name).to_lowercase();
        let discovery = checker.discovery(property.name);
        let case = match (property.expectation, discovery) {
            (Expectation::Sometimes, Some(_)) => Case::passed(&name, "model"),
            (Expectation::Sometimes, None) => Case {
                outcome: junit::Outcome::Skipped {
                    message: "not reached within the bounds".into(),
                },
                ..Case::passed(&name, "model")
            },
            (_, Some(path)) => {
                let steps = path.clone().into_vec();
                let mut text = format!(
                    "\"{}\" violated: counterexample in {} steps\n",
                    property.name,
                    steps.len().saturating_sub(1)
                );
                for (n, why) in violations(path.last_state()) {
                    if n == property.name {
                        text.push_str(&format!("=> {why}\n"));
                    }
                }
                for line in describe_path(model, &steps) {
                    text.push_str(&format!("  {line}\n"));
                }
                text.push_str(&format!("(Explorer path: {})\n", path.encode(model)));
                // The message is the last state's violation, the text the whole path.
                let message = text
                    .lines()
                    .nth(1)
                    .unwrap_or(&text)
                    .trim_start_matches("=> ");
                Case::failed(&name, "model", &format!("{message}\n{text}"))
            }
            (_, None) if cut_short => Case::error(
                &name,
                "model",
                &format!(
                    "the time limit of {} s was reached first",
                    timeout.as_secs()
                ),
            ),
            (_, None) => Case::passed(&name, "model"),
        };
        suite.push(case);
    }
    suite
}
