//! What a `locksmith sim` child process said about its seed: the first line of its stdout is
//! the seed's results.json, read back as the struct; the second names the coverage probes
//! the run reached; the lines after them name its store. [`Coverage`] sums the probes of a
//! run's seeds into the table `locksmith sim` ends with.

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
    /// The coverage probes the run reached (`lockd::probe`).
    pub probes: Vec<String>,
}

impl SeedReport {
    /// How the probes line of a child's stdout starts.
    pub const PROBES: &'static str = "probes: ";

    /// A seed that could not be judged: never valid.
    pub fn unknown(seed: u64, text: String) -> SeedReport {
        let verdict = Verdict::unknown(text.clone());
        SeedReport {
            seed,
            verdict,
            sim_ms: 0,
            text,
            probes: Vec::new(),
        }
    }

    /// The report in a child's `stdout`; `unknown` when the child ended without one.
    pub fn of_child(seed: u64, stdout: &str, status: &std::process::ExitStatus) -> SeedReport {
        let mut lines = stdout.lines();
        let first = lines.next().unwrap_or_default();
        let (probes, rest): (Vec<&str>, Vec<&str>) =
            lines.partition(|l| l.starts_with(Self::PROBES));
        let probes = (probes.iter())
            .flat_map(|l| l[Self::PROBES.len()..].split(','))
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect();
        match serde_json::from_str::<Results>(first) {
            Ok(results) => SeedReport {
                seed: results.seed,
                verdict: results.verdict,
                sim_ms: results.simulated_ms.unwrap_or(0),
                text: std::iter::once(results.explanation.trim_end())
                    .chain(rest)
                    .collect::<Vec<_>>()
                    .join("\n"),
                probes,
            },
            Err(e) => {
                let why = format!("the child ended without results ({status}: {e}): {stdout}");
                SeedReport::unknown(seed, why)
            }
        }
    }
}

/// The coverage of a run's seeds: per probe of `lockd::probe::PROBES`, how many seeds reached
/// it and the first (lowest) seed that did.
#[derive(Clone, Debug, Default)]
pub struct Coverage {
    seeds: u64,
    reached: std::collections::BTreeMap<String, (u64, u64)>,
}

impl Coverage {
    /// Sums the reports' probes.
    pub fn of<'a>(reports: impl IntoIterator<Item = &'a SeedReport>) -> Coverage {
        let mut coverage = Coverage::default();
        for report in reports {
            coverage.seeds += 1;
            for probe in &report.probes {
                let entry = coverage.reached.entry(probe.clone());
                let (count, first) = entry.or_insert((0, report.seed));
                *count += 1;
                *first = (*first).min(report.seed);
            }
        }
        coverage
    }

    /// The table: one row per probe, reached or not, and the required probes no seed
    /// reached, named.
    pub fn table(&self) -> String {
        let mut out = format!(
            "coverage ({} seeds): probe, seeds that reached it, first seed\n",
            self.seeds
        );
        for probe in lockd::probe::PROBES {
            let mark = if probe.required { "" } else { " (optional)" };
            let row = match self.reached.get(probe.name) {
                Some((count, first)) => format!("{count:>6}  first seed {first}"),
                None => "     0  NEVER REACHED".to_owned(),
            };
            out.push_str(&format!("  {:<34} {row}{mark}\n", probe.name));
        }
        let missed = self.unreached_required();
        if !missed.is_empty() {
            out.push_str(&format!(
                "required probes no seed reached: {}\n",
                missed.join(", ")
            ));
        }
        out
    }

    /// The required probes no seed reached.
    pub fn unreached_required(&self) -> Vec<&'static str> {
        (lockd::probe::PROBES.iter())
            .filter(|p| p.required && !self.reached.contains_key(p.name))
            .map(|p| p.name)
            .collect()
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

    #[test]
    fn coverage_counts_seeds_per_probe_and_names_what_none_reached() {
        let status = std::process::ExitStatus::from_raw(0);
        let results = |seed: u64| {
            let options = crate::harness::TestOptions {
                seed,
                ..Default::default()
            };
            let execution = crate::harness::Execution::unfinished(&options);
            let r = Results::of(&options, "lockd", "simulation", &execution, 0);
            serde_json::to_string(&r).unwrap()
        };
        let a = SeedReport::of_child(
            4,
            &format!(
                "{}\nprobes: waiter-granted,append-rejected\nstore: x",
                results(4)
            ),
            &status,
        );
        let b = SeedReport::of_child(
            2,
            &format!("{}\nprobes: waiter-granted", results(2)),
            &status,
        );
        assert_eq!(a.probes, ["waiter-granted", "append-rejected"]);
        assert!(
            a.text.contains("store: x") && !a.text.contains("probes"),
            "{}",
            a.text
        );
        let coverage = Coverage::of([&a, &b]);
        let table = coverage.table();
        let row = |name: &str| table.lines().find(|l| l.contains(name)).unwrap().to_owned();
        assert!(row("waiter-granted").contains("2  first seed 2"), "{table}");
        assert!(
            row("append-rejected").contains("1  first seed 4"),
            "{table}"
        );
        // An optional probe (torn-tail-cut was one until it became required, 2026-12-05).
        let optional = row("check-quorum-step-down");
        assert!(optional.contains("NEVER REACHED (optional)"), "{table}");
        assert!(
            row("phantom-release-applied").contains("NEVER REACHED"),
            "{table}"
        );
        let missed = coverage.unreached_required();
        assert!(missed.contains(&"phantom-release-applied"), "{missed:?}");
        assert!(!missed.contains(&"check-quorum-step-down"), "{missed:?}");
        assert!(!coverage.unreached_required().contains(&"waiter-granted"));
    }
}
