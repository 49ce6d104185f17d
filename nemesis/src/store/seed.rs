//! What a `locksmith sim` child process said about its seed: the first line of its stdout is
//! the seed's results.json, read back as the struct; the lines after it name its store.

use checker::Verdict;

use super::Results;

/// One seed's report to the parent.
#[derive(Clone, Debug)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// Its verdict.
    pub verdict: Verdict,
    /// Simulated milliseconds it ran.
    pub sim_ms: u64,
    /// The explanation and the store lines.
    pub text: String,
}

impl SeedReport {
    /// A seed that could not be judged: never valid.
    pub fn unknown(seed: u64, text: String) -> SeedReport {
        let verdict = Verdict::unknown(text.clone());
        SeedReport {
            seed,
            verdict,
            sim_ms: 0,
            text,
        }
    }

    /// The report in a child's `stdout`; `unknown` when the child ended without one.
    pub fn of_child(seed: u64, stdout: &str, status: &std::process::ExitStatus) -> SeedReport {
        let mut lines = stdout.lines();
        let first = lines.next().unwrap_or_default();
        match serde_json::from_str::<Results>(first) {
            Ok(results) => SeedReport {
                seed: results.seed,
                verdict: results.verdict,
                sim_ms: results.simulated_ms.unwrap_or(0),
                text: std::iter::once(results.explanation.trim_end())
                    .chain(lines)
                    .collect::<Vec<_>>()
                    .join("\n"),
            },
            Err(e) => {
                let why = format!("the child ended without results ({status}: {e}): {stdout}");
                SeedReport::unknown(seed, why)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn a_child_without_results_makes_its_seed_unknown_never_valid() {
        let status = std::process::ExitStatus::from_raw(9);
        let report = SeedReport::of_child(7, "thread panicked\n", &status);
        assert_eq!(report.seed, 7);
        let unknown = !report.verdict.is_valid() && !report.verdict.is_invalid();
        assert!(unknown, "{:?}", report.verdict);
        assert!(report.text.contains("thread panicked"), "{}", report.text);
    }
}
