//! A small data-driven test runner in the style of etcd's and raft-rs's `datadriven`.
//!
//! A script is a text file of blocks separated by blank lines. Lines starting with `#` are
//! comments. A block is one command line, a `----` line, and the expected output (no blank
//! lines; an empty output is written `ok`):
//!
//! ```text
//! # Node 1 campaigns.
//! campaign 1
//! ----
//! 1: PreCandidate term=0
//! ```
//!
//! [`run_file`] runs every command through a handler and compares its output with the
//! expected one. With `LOCKD_REWRITE=1` in the environment it rewrites the file with the
//! actual outputs instead ("only commit the rewrite if you understand what caused it").

use std::fmt::Write as _;
use std::path::Path;

/// The environment variable that makes [`run_file`] rewrite the golden outputs.
pub const REWRITE_ENV: &str = "LOCKD_REWRITE";

/// One command of a script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestCase {
    /// The 1-based line of the command in the file.
    pub line: usize,
    /// The whole command line.
    pub input: String,
    /// The first word of the command line.
    pub command: String,
    /// The other words.
    pub args: Vec<String>,
    /// The expected output.
    pub expected: String,
}

impl TestCase {
    /// The value of argument `name=value`, if given.
    pub fn arg(&self, name: &str) -> Option<&str> {
        self.args
            .iter()
            .find_map(|a| a.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
    }
}

/// One piece of a script: a comment line or a test case.
#[derive(Clone, Debug)]
enum Piece {
    Comment(String),
    Case(TestCase),
}

fn parse(text: &str) -> Result<Vec<Piece>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut pieces = Vec::new();
    let mut at = 0;
    while at < lines.len() {
        let line = lines[at].trim_end();
        if line.is_empty() {
            at += 1;
            continue;
        }
        if line.starts_with('#') {
            pieces.push(Piece::Comment(line.to_owned()));
            at += 1;
            continue;
        }
        let command_line = at + 1;
        if lines.get(at + 1).map(|l| l.trim_end()) != Some("----") {
            return Err(format!(
                "line {command_line}: command {line:?} is not followed by ----"
            ));
        }
        at += 2;
        let mut expected = Vec::new();
        while at < lines.len() && !lines[at].trim_end().is_empty() {
            expected.push(lines[at].trim_end());
            at += 1;
        }
        let mut words = line.split_whitespace().map(str::to_owned);
        let command = words.next().unwrap_or_default();
        pieces.push(Piece::Case(TestCase {
            line: command_line,
            input: line.to_owned(),
            command,
            args: words.collect(),
            expected: expected.join("\n"),
        }));
    }
    Ok(pieces)
}

/// Runs the script at `path` through `handle`, which returns a command's output. Errs with
/// every mismatch (line, command, expected and actual output), or rewrites the file when
/// `LOCKD_REWRITE` is set.
pub fn run_file(path: &Path, mut handle: impl FnMut(&TestCase) -> String) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let pieces = parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let rewrite = std::env::var_os(REWRITE_ENV).is_some();
    let mut rewritten = String::new();
    let mut mismatches = String::new();
    let mut last_was_case = false;
    for piece in &pieces {
        match piece {
            Piece::Comment(line) => {
                if last_was_case {
                    rewritten.push('\n');
                }
                let _ = writeln!(rewritten, "{line}");
                last_was_case = false;
            }
            Piece::Case(case) => {
                let mut actual = handle(case).trim_end().to_owned();
                if actual.is_empty() {
                    actual = "ok".to_owned();
                }
                if !rewritten.is_empty() {
                    rewritten.push('\n');
                }
                let _ = writeln!(rewritten, "{}\n----\n{actual}", case.input);
                last_was_case = true;
                if actual != case.expected {
                    let _ = writeln!(
                        mismatches,
                        "{}:{}: {}\nexpected:\n{}\nactual:\n{actual}\n",
                        path.display(),
                        case.line,
                        case.input,
                        case.expected
                    );
                }
            }
        }
    }
    if rewrite {
        // Write a sibling and rename it over, so that a concurrent reader never sees half.
        let temporary = path.with_extension("txt.rewrite");
        std::fs::write(&temporary, rewritten)
            .and_then(|()| std::fs::rename(&temporary, path))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        return Ok(());
    }
    if mismatches.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{mismatches}(rerun with {REWRITE_ENV}=1 to rewrite, then read the diff)"
        ))
    }
}

/// The text of the script at `path`.
pub fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The names of the `.txt` scripts in directory `dir`, sorted.
pub fn list(dir: &Path) -> Result<Vec<String>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".txt"))
        .collect();
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_reads_comments_commands_and_outputs() {
        // STYLE practice 4: scripts are blocks of command, ----, output.
        let text = "# about\n\ncampaign 1\n----\n1: PreCandidate\nline two\n\nheal\n----\nok\n";
        let pieces = parse(text).unwrap_or_default();
        assert_eq!(pieces.len(), 3);
        let Piece::Case(case) = &pieces[1] else {
            panic!("second piece is not a case: {pieces:?}");
        };
        assert_eq!(case.command, "campaign");
        assert_eq!(case.args, vec!["1"]);
        assert_eq!(case.expected, "1: PreCandidate\nline two");
        assert_eq!(case.line, 3);
    }

    #[test]
    fn a_command_without_separator_is_an_error_naming_the_line() {
        // STYLE practice 12: errors say the line and the reason.
        let err = parse("# x\ncampaign 1\nheal\n").unwrap_err();
        assert!(err.starts_with("line 2:"), "{err}");
    }
}
