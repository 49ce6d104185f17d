//! JUnit XML reports, so that a CI system shows which check failed on which run or seed.
//!
//! The format is the one Jenkins' JUnit plugin, Maven Surefire and GitHub/GitLab test
//! reporters read: `<testsuites>` of `<testsuite name tests failures errors skipped time>`,
//! each of `<testcase name classname time>` with at most one `<failure message type>`,
//! `<error message type>` or `<skipped message>`, and `<system-out>`.
//!
//! Verdicts map as: valid -> a passed testcase, invalid -> `<failure>` whose message is the
//! first line of the explanation and whose text is the whole explanation in words,
//! unknown -> `<error type="unknown">` (a check that could not decide is not a pass).
//!
//! ```
//! use checker::report::junit::{Case, Suite, to_xml};
//! let mut suite = Suite::new("locksmith test lockd seed 7");
//! suite.push(Case::passed("linearizability", "lockd"));
//! suite.push(Case::failed("fencing", "lockd", "key k0: token 5 accepted after token 9"));
//! let xml = to_xml(&[suite]);
//! assert!(xml.contains("tests=\"2\" failures=\"1\" errors=\"0\""));
//! ```

use std::fmt::Write as _;
use std::path::Path;

use history::CheckName;

use crate::{Check, CheckResult, Verdict};

/// One testcase's result.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// It passed.
    Passed,
    /// It found an anomaly.
    Failed {
        /// One line.
        message: String,
        /// The explanation in words.
        text: String,
    },
    /// It could not decide or could not run.
    Error {
        /// One line.
        message: String,
        /// The details.
        text: String,
    },
    /// It did not run.
    Skipped {
        /// Why.
        message: String,
    },
}

/// One `<testcase>`.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// The check's name: `linearizability`, `fencing`, `seed 42`, ...
    pub name: String,
    /// What it ran on: the system, the history, the model.
    pub classname: String,
    /// Seconds.
    pub time_s: f64,
    /// Its result.
    pub outcome: Outcome,
    /// `<system-out>`: e.g. how to rerun it, the store's path.
    pub system_out: Option<String>,
}

impl Case {
    /// A passed case.
    pub fn passed(name: &str, classname: &str) -> Case {
        Case {
            name: name.to_string(),
            classname: classname.to_string(),
            time_s: 0.0,
            outcome: Outcome::Passed,
            system_out: None,
        }
    }

    /// A failed case: the message is the explanation's first line, the text all of it.
    pub fn failed(name: &str, classname: &str, explanation: &str) -> Case {
        Case {
            outcome: Outcome::Failed {
                message: first_line(explanation),
                text: explanation.to_string(),
            },
            ..Case::passed(name, classname)
        }
    }

    /// An error case (unknown, could not run).
    pub fn error(name: &str, classname: &str, reason: &str) -> Case {
        Case {
            outcome: Outcome::Error {
                message: first_line(reason),
                text: reason.to_string(),
            },
            ..Case::passed(name, classname)
        }
    }

    /// A case for a check's result.
    pub fn from_result(result: &CheckResult, classname: &str) -> Case {
        let explanation = result.explanation.clone().unwrap_or_default();
        let name = result.name.as_str();
        if !result.checked {
            // "not checked": nothing to judge, which is neither a pass nor a failure.
            return Case {
                outcome: Outcome::Skipped {
                    message: format!("not checked: {}", result.verdict),
                },
                ..Case::passed(name, classname)
            };
        }
        match &result.verdict {
            Verdict::Valid => Case::passed(name, classname),
            Verdict::Invalid => Case::failed(name, classname, &explanation),
            Verdict::Unknown { reason } => {
                let text = if explanation.is_empty() {
                    reason.clone()
                } else {
                    format!("{reason}\n{explanation}")
                };
                Case::error(name, classname, &text)
            }
        }
    }

    /// This case with `<system-out>` text.
    pub fn with_output(self, text: impl Into<String>) -> Case {
        Case {
            system_out: Some(text.into()),
            ..self
        }
    }
}

fn first_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("(no explanation)")
        .to_string()
}

/// One `<testsuite>`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Suite {
    /// Its name: the command and run, e.g. `locksmith test lockd-kill seed 7`.
    pub name: String,
    /// Its cases, in order.
    pub cases: Vec<Case>,
    /// Seconds (the whole run).
    pub time_s: f64,
    /// `<properties>`: seed, store, verdict, ...
    pub properties: Vec<(String, String)>,
}

impl Suite {
    /// An empty suite.
    pub fn new(name: &str) -> Suite {
        Suite {
            name: name.to_string(),
            ..Suite::default()
        }
    }

    /// Adds a case.
    pub fn push(&mut self, case: Case) {
        self.cases.push(case);
    }

    /// Adds a property.
    pub fn property(&mut self, name: &str, value: impl ToString) {
        self.properties.push((name.to_string(), value.to_string()));
    }

    /// One case per check of `check`, named after the check (linearizability, fencing,
    /// lease safety, ...).
    pub fn from_check(name: &str, classname: &str, check: &Check, time_s: f64) -> Suite {
        let mut suite = Suite::new(name);
        suite.time_s = time_s;
        suite.property("verdict", check.verdict.as_str());
        for result in &check.results {
            suite.push(Case::from_result(result, classname));
        }
        if check.results.is_empty() {
            // Never a green report for a run that checked nothing.
            suite.push(Case::error(
                CheckName::Checks.as_str(),
                classname,
                "no check ran",
            ));
        }
        suite
    }

    fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.cases.iter().filter(|c| f(&c.outcome)).count()
    }
}

/// The result of one seed of `locksmith sim`, for [`sim_suite`].
#[derive(Clone, Debug, PartialEq)]
pub struct SeedOutcome {
    /// The seed.
    pub seed: u64,
    /// `valid`, `invalid` or `unknown`.
    pub verdict: String,
    /// The explanation in words (empty when valid).
    pub explanation: String,
    /// The command that reruns it, and where its store is.
    pub rerun: String,
}

/// `locksmith sim`'s report: one case per seed that did not pass, plus a `summary` case
/// counting every seed (it fails when any seed did).
pub fn sim_suite(name: &str, seeds_run: u64, bad: &[SeedOutcome], time_s: f64) -> Suite {
    let mut suite = Suite::new(name);
    suite.time_s = time_s;
    suite.property("seeds", seeds_run);
    for seed in bad {
        let case_name = format!("seed {}", seed.seed);
        let case = match seed.verdict.as_str() {
            "invalid" => Case::failed(&case_name, "sim", &seed.explanation),
            _ => Case::error(&case_name, "sim", &seed.explanation),
        };
        suite.push(case.with_output(seed.rerun.clone()));
    }
    let invalid = bad.iter().filter(|s| s.verdict == "invalid").count();
    let summary = format!(
        "{seeds_run} seeds: {} passed, {invalid} invalid, {} unknown",
        seeds_run.saturating_sub(bad.len() as u64),
        bad.len() - invalid
    );
    let list: Vec<String> = bad
        .iter()
        .map(|s| format!("{} {}", s.seed, s.verdict))
        .collect();
    suite.push(if bad.is_empty() {
        Case::passed("summary", "sim").with_output(summary)
    } else {
        Case::failed("summary", "sim", &format!("{summary}: {}", list.join(", ")))
    });
    suite
}

/// The XML text of `suites`.
pub fn to_xml(suites: &[Suite]) -> String {
    let all = |f: &dyn Fn(&Suite) -> usize| suites.iter().map(f).sum::<usize>();
    let failures = all(&|s| s.count(|o| matches!(o, Outcome::Failed { .. })));
    let errors = all(&|s| s.count(|o| matches!(o, Outcome::Error { .. })));
    let skipped = all(&|s| s.count(|o| matches!(o, Outcome::Skipped { .. })));
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"locksmith\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"{skipped}\" time=\"{:.3}\">",
        all(&|s| s.cases.len()),
        suites.iter().map(|s| s.time_s).sum::<f64>()
    );
    for (id, suite) in suites.iter().enumerate() {
        write_suite(&mut out, id, suite);
    }
    out.push_str("</testsuites>\n");
    out
}

fn write_suite(out: &mut String, id: usize, suite: &Suite) {
    let _ = writeln!(
        out,
        "  <testsuite id=\"{id}\" name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.3}\">",
        attr(&suite.name),
        suite.cases.len(),
        suite.count(|o| matches!(o, Outcome::Failed { .. })),
        suite.count(|o| matches!(o, Outcome::Error { .. })),
        suite.count(|o| matches!(o, Outcome::Skipped { .. })),
        suite.time_s
    );
    if !suite.properties.is_empty() {
        out.push_str("    <properties>\n");
        for (name, value) in &suite.properties {
            let _ = writeln!(
                out,
                "      <property name=\"{}\" value=\"{}\"/>",
                attr(name),
                attr(value)
            );
        }
        out.push_str("    </properties>\n");
    }
    for case in &suite.cases {
        let _ = write!(
            out,
            "    <testcase name=\"{}\" classname=\"{}\" time=\"{:.3}\">",
            attr(&case.name),
            attr(&case.classname),
            case.time_s
        );
        match &case.outcome {
            Outcome::Passed => {}
            Outcome::Failed { message, text } => {
                let _ = write!(
                    out,
                    "\n      <failure message=\"{}\" type=\"invalid\">{}</failure>",
                    attr(message),
                    text_node(text)
                );
            }
            Outcome::Error { message, text } => {
                let _ = write!(
                    out,
                    "\n      <error message=\"{}\" type=\"unknown\">{}</error>",
                    attr(message),
                    text_node(text)
                );
            }
            Outcome::Skipped { message } => {
                let _ = write!(out, "\n      <skipped message=\"{}\"/>", attr(message));
            }
        }
        if let Some(text) = &case.system_out {
            let _ = write!(out, "\n      <system-out>{}</system-out>", text_node(text));
        }
        out.push_str(
            if matches!(case.outcome, Outcome::Passed) && case.system_out.is_none() {
                "</testcase>\n"
            } else {
                "\n    </testcase>\n"
            },
        );
    }
    out.push_str("  </testsuite>\n");
}

/// Writes `suites` to `path`.
pub fn write(path: &Path, suites: &[Suite]) -> std::io::Result<()> {
    std::fs::write(path, to_xml(suites))
}

/// Characters XML 1.0 allows; others (control characters from a history's values) become
/// U+FFFD so the file always parses.
fn xml_char(c: char) -> char {
    match c {
        '\t' | '\n' | '\r' => c,
        c if c < ' ' || c == '\u{FFFE}' || c == '\u{FFFF}' => '\u{FFFD}',
        c => c,
    }
}

fn text_node(text: &str) -> String {
    text.chars()
        .map(xml_char)
        .collect::<String>()
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn attr(text: &str) -> String {
    text_node(text)
        .replace('"', "&quot;")
        .replace('\n', "&#10;")
        .replace('\r', "&#13;")
        .replace('\t', "&#9;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_escapes() {
        let mut suite = Suite::new("a <b> & \"c\"");
        suite.push(Case::failed("fencing", "h", "line one <x>\nline & two"));
        suite.push(Case::error("liveness", "h", "budget\u{1} ran out"));
        suite.push(Case {
            outcome: Outcome::Skipped {
                message: "not checked".into(),
            },
            ..Case::passed("lease safety", "h")
        });
        let xml = to_xml(&[suite]);
        assert!(xml.contains("tests=\"3\" failures=\"1\" errors=\"1\" skipped=\"1\""));
        assert!(xml.contains("name=\"a &lt;b&gt; &amp; &quot;c&quot;\""));
        assert!(xml.contains("<failure message=\"line one &lt;x&gt;\" type=\"invalid\">line one &lt;x&gt;\nline &amp; two</failure>"));
        assert!(xml.contains("budget\u{FFFD} ran out"));
    }

    #[test]
    fn a_sim_report_has_one_case_per_bad_seed_and_a_summary() {
        let bad = [SeedOutcome {
            seed: 42,
            verdict: "invalid".into(),
            explanation: "fencing: invalid\ntoken 3 twice".into(),
            rerun: "locksmith sim --seeds 42".into(),
        }];
        let suite = sim_suite("sim", 100, &bad, 1.5);
        assert_eq!(suite.cases.len(), 2);
        assert_eq!(suite.cases[0].name, "seed 42");
        let Outcome::Failed { message, .. } = &suite.cases[1].outcome else {
            panic!("the summary fails when a seed did");
        };
        assert_eq!(
            message,
            "100 seeds: 99 passed, 1 invalid, 0 unknown: 42 invalid"
        );
        let ok = sim_suite("sim", 10, &[], 1.0);
        assert_eq!(ok.cases.len(), 1);
        assert_eq!(ok.cases[0].outcome, Outcome::Passed);
    }
}
