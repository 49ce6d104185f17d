//! What a run leaves for people and CI besides its store: a JUnit report
//! ([`test_suite`], [`write_junit`]; [`model_suite`] for `locksmith model check`) and how
//! to open the run ([`open_hint`]).
//!
//! Both read `results.json` as written by [`crate::run`], leniently: a run from an older
//! version or one cut short still gets a report, whose missing parts are errors, never
//! passes.

use std::path::Path;
use std::time::Duration;

use checker::model::LockdModel;
use checker::model::explain::describe_path;
use checker::model::properties::violations;
use checker::report::junit::{self, Case, Suite};
use serde_json::Value;
use stateright::{Checker, Expectation, Model};

/// The JUnit suite of one `locksmith test` run: one case per check the history went
/// through (linearizability, fencing, lease safety, ...), plus `liveness` (every client
/// recovered after the heal) and `node health` (no node exited on its own, teardown clean).
pub fn test_suite(dir: &Path, results: &Value) -> Suite {
    let test = results["test"].as_str().unwrap_or("locksmith test");
    let system = results["system"].as_str().unwrap_or("lock service");
    let seed = &results["seed"];
    let mut suite = Suite::new(&format!("locksmith test {test} seed {seed}"));
    suite.time_s = results["duration_ms"].as_f64().unwrap_or(0.0) / 1e3;
    suite.property("seed", seed);
    suite.property("store", dir.display());
    suite.property("verdict", results["verdict"].as_str().unwrap_or("unknown"));
    let store = format!("store: {}", dir.display());
    let checks = &results["checks"];
    match checks["results"].as_array() {
        Some(list) if !list.is_empty() => {
            for result in list {
                let case = check_case(result, system);
                // Where to look, on the cases that need looking at.
                suite.push(match case.outcome {
                    junit::Outcome::Passed => case,
                    _ => case.with_output(store.clone()),
                });
            }
        }
        _ => {
            let why = checks["error"]
                .as_str()
                .unwrap_or("results.json has no check results");
            suite.push(Case::error("checks", system, why).with_output(store.clone()));
        }
    }
    // The run's own recovery phase; named `liveness` unless the checks judged liveness
    // from the history themselves.
    let judged = checks["results"]
        .as_array()
        .is_some_and(|l| l.iter().any(|r| r["name"] == "liveness"));
    let name = if judged { "recovery" } else { "liveness" };
    suite.push(liveness_case(name, &results["recovery"], system));
    suite.push(node_health_case(results, system));
    suite
}

fn check_case(result: &Value, system: &str) -> Case {
    let name = result["name"].as_str().unwrap_or("check");
    let explanation = result["explanation"].as_str().unwrap_or("");
    if result["checked"] == false {
        // "not checked": nothing to judge, which is neither a pass nor a failure.
        let reason = result["reason"].as_str().unwrap_or("not checked");
        return Case {
            outcome: junit::Outcome::Skipped {
                message: format!("not checked: {reason}"),
            },
            ..Case::passed(name, system)
        };
    }
    match result["verdict"].as_str() {
        Some("valid") => Case::passed(name, system),
        Some("invalid") => Case::failed(name, system, explanation),
        _ => {
            let reason = result["reason"].as_str().unwrap_or("no verdict recorded");
            Case::error(name, system, &format!("{reason}\n{explanation}"))
        }
    }
}

fn liveness_case(name: &str, recovery: &Value, system: &str) -> Case {
    match recovery["recovered"].as_bool() {
        Some(true) => Case::passed(name, system),
        Some(false) => Case::failed(
            name,
            system,
            &format!(
                "after the final heal only client slots {} of {} succeeded again within {} ms",
                recovery["slots_recovered"], recovery["slots"], recovery["duration_ms"]
            ),
        ),
        None => Case::error(name, system, "results.json has no recovery phase"),
    }
}

fn node_health_case(results: &Value, system: &str) -> Case {
    let exited = results["nodes_exited_on_their_own"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let teardown = results["teardown_error"].as_str().unwrap_or("");
    if results.get("nodes_exited_on_their_own").is_none() {
        return Case::error("node health", system, "results.json does not say");
    }
    if exited.is_empty() && teardown.is_empty() {
        return Case::passed("node health", system);
    }
    let mut text = String::new();
    if !exited.is_empty() {
        let list: Vec<String> = exited.iter().map(|e| e.to_string()).collect();
        text.push_str(&format!(
            "nodes exited on their own: {} (see node-logs/)\n",
            list.join(", ")
        ));
    }
    if !teardown.is_empty() {
        text.push_str(&format!("teardown: {teardown}\n"));
    }
    Case::failed("node health", system, &text)
}

/// Writes the JUnit report of the run in `dir` (its `results.json`) to `path`.
pub fn write_junit(path: &Path, dir: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(dir.join("results.json"))
        .map_err(|e| format!("{}: {e}", dir.join("results.json").display()))?;
    let results: Value = serde_json::from_str(&text)
        .map_err(|e| format!("{}: {e}", dir.join("results.json").display()))?;
    junit::write(path, &[test_suite(dir, &results)]).map_err(|e| format!("{}: {e}", path.display()))
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
    let timeline = std::fs::canonicalize(dir.join("timeline.html"))
        .unwrap_or_else(|_| dir.join("timeline.html"));
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
