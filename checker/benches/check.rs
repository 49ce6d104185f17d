//! Benchmarks of the checks (a `harness = false` bench: `cargo bench -p checker`).
//!
//! Each case runs in a child process of this binary, so that its peak memory (`VmHWM` in
//! /proc/self/status) is its own:
//!
//! - `csv-100k`, `csv-1m`, `csv-1m-crash50`, `csv-200mb`: end to end from a CSV file, as
//!   `locksmith check FILE.csv` runs it (read and pair in one pass, then
//!   `checker::check_paired`: the three lock checks and liveness): valid lock histories from `checker::generate` (the same as `locksmith gen
//!   lock --ops N --keys 100 --clients 20 --crash-rate P --seed 1`), 100 keys, 20 clients,
//!   0.5 % crashed acquires (50 % for `crash50`); `csv-200mb` has as many ops as make a
//!   200 MB file. The parent writes the files to a temporary folder (or to
//!   `LOCKSMITH_BENCH_CSV_DIR`, where they are kept and reused); each child only reads and
//!   checks, so its peak RSS is the checker's. Issue 12 targets: 1M ops in 1 s and
//!   300 MB, 100k in 100 ms, 200 MB CSV in 600 MB.
//! - `lock-1m`: the same 1M-op history generated in memory, checks only (no CSV), with a
//!   stage-by-stage breakdown.
//! - `etcd-largest`: the Porcupine etcd history with the most ops (by `verdicts.csv`),
//!   register model; `etcd-all`: all 102 etcd files; `kv-c50-ok`, `kv-c50-bad`. Skipped,
//!   saying so, when the shared folder is absent (see `tests/porcupine.rs` for the source).
//!
//! Times exclude generating or converting the history, and include pairing it.

use std::process::Command;
use std::time::Instant;

use checker::{ModelKind, Options, Verdict};
use history::Op;

const CASE_ENV: &str = "LOCKSMITH_BENCH_CASE";
const CASES: [&str; 10] = [
    "csv-100k",
    "csv-1m",
    "csv-1m-crash50",
    "csv-200mb",
    "lock-1m",
    "etcd-largest",
    "etcd-002",
    "etcd-all",
    "kv-c50-ok",
    "kv-c50-bad",
];
/// Porcupine cases repeat until this much time has passed, and report the mean.
const REPEAT_SECONDS: f64 = 1.0;

fn main() {
    if let Ok(case) = std::env::var(CASE_ENV) {
        run_case(&case);
        return;
    }
    // `cargo bench` passes `--bench`; a name argument runs only the cases containing it.
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let exe = std::env::current_exe().expect("the bench binary's own path");
    // LOCKSMITH_BENCH_CSV_DIR set: keep the CSV files there and reuse them on later runs
    // (and a child can be run by hand under `perf`); unset: a temporary folder.
    let temporary = tempfile::tempdir().expect("a temporary folder for the CSV files");
    let kept = std::env::var_os(CSV_DIR_ENV).map(std::path::PathBuf::from);
    let dir = kept.as_deref().unwrap_or(temporary.path());
    println!(
        "{:<14} {:>9} {:>12} {:>12} {:>10}  result",
        "case", "ops", "wall", "cpu", "peak RSS"
    );
    for case in CASES {
        if filter.as_ref().is_some_and(|f| !case.contains(f.as_str())) {
            continue;
        }
        if let Some((ops, crash_rate)) = csv_case(case) {
            if kept.is_none() || !dir.join(format!("{case}.csv")).exists() {
                write_csv_case(dir, case, ops, crash_rate);
            }
        }
        let output = Command::new(&exe)
            .env(CASE_ENV, case)
            .env(CSV_DIR_ENV, dir)
            .output()
            .expect("run a bench case in a child process");
        print!("{}", String::from_utf8_lossy(&output.stdout));
        if !output.status.success() {
            println!(
                "{case}: failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}

fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// User plus system CPU seconds of this process so far (/proc/self/stat, clock ticks).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which is in parentheses: utime is the 12th, stime
    // the 13th of those.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn report(case: &str, ops: usize, wall: f64, cpu: f64, result: &str) {
    println!(
        "{case:<14} {ops:>9} {:>10.2}ms {:>10.2}ms {:>8.1}MB  {result}",
        wall * 1e3,
        cpu * 1e3,
        peak_rss_mb()
    );
}

const CSV_DIR_ENV: &str = "LOCKSMITH_BENCH_CSV_DIR";
/// Bytes per op of a generated history, measured: `csv-200mb` asks for this many ops.
const CSV_BYTES_PER_OP: usize = 100;

/// The ops and crash rate of a `csv-*` case.
fn csv_case(case: &str) -> Option<(usize, f64)> {
    match case {
        "csv-100k" => Some((100_000, 0.005)),
        "csv-1m" => Some((1_000_000, 0.005)),
        "csv-1m-crash50" => Some((1_000_000, 0.5)),
        "csv-200mb" => Some((200_000_000 / CSV_BYTES_PER_OP, 0.005)),
        _ => None,
    }
}

fn write_csv_case(dir: &std::path::Path, case: &str, ops: usize, crash_rate: f64) {
    let mut options = checker::generate::GenOptions::new(ops, 1);
    options.crash_rate = crash_rate;
    let history = checker::generate::lock_history(&options);
    let path = dir.join(format!("{case}.csv"));
    let file = std::fs::File::create(&path).expect("create the CSV file");
    checker::generate::write_csv(&history, std::io::BufWriter::new(file)).expect("write the CSV");
}

/// Reads and checks a CSV file as `locksmith check` does ([`checker::cli::check_path`]:
/// the compact store's one pass when it can decide, else read, pair and check).
fn csv_end_to_end(case: &str) {
    let dir = std::env::var(CSV_DIR_ENV).expect("the parent names the CSV folder");
    let path = std::path::Path::new(&dir).join(format!("{case}.csv"));
    let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    let options = Options::default();
    let cpu = cpu_seconds();
    let started = Instant::now();
    let fast = checker::compact::check_file(&path, &options);
    let took_fast = fast.is_some();
    let (check, operations) = match fast {
        Some(fast) => (fast.check, fast.operations),
        None => checker::cli::check_path(&path, &options).expect("the generated CSV reads back"),
    };
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu;
    assert_eq!(check.verdict, Verdict::Valid, "{}", check.explanation());
    let path_taken = if took_fast {
        "compact store, one pass"
    } else {
        "paired operations"
    };
    let result = format!(
        "{} ({:.0} MB CSV; {path_taken})",
        check.verdict,
        bytes as f64 / 1e6,
    );
    report(case, operations, seconds, cpu, &result);
}

fn run_case(case: &str) {
    match case {
        "csv-100k" | "csv-1m" | "csv-1m-crash50" | "csv-200mb" => csv_end_to_end(case),
        "lock-1m" => lock_1m(),
        "etcd-largest" | "etcd-002" | "etcd-all" | "kv-c50-ok" | "kv-c50-bad" => porcupine(case),
        other => panic!("unknown case {other}"),
    }
}

fn lock_1m() {
    let ops =
        checker::generate::lock_history(&checker::generate::GenOptions::new(1_000_000, 0x10C_5317));
    println!(
        "  peak RSS after generating the history (before checking): {:.1}MB",
        peak_rss_mb()
    );
    let cpu = cpu_seconds();
    let started = Instant::now();
    let paired = history::pair(&ops).expect("the generated history follows schema v1");
    let check = checker::check_operations(&paired, &Options::default());
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu;
    assert_eq!(check.verdict, Verdict::Valid, "{}", check.explanation());
    breakdown(&ops, &paired);
    let info = paired.iter().filter(|op| op.is_indeterminate()).count();
    let result = format!("{} ({info} indeterminate ops)", check.verdict);
    report("lock-1m", paired.len(), seconds, cpu, &result);
}

/// Where the time of `lock-1m` goes, stage by stage (printed before the summary line).
fn breakdown(ops: &[Op], paired: &[history::Operation]) {
    let time = |what: &str, f: &mut dyn FnMut()| {
        let (started, cpu) = (Instant::now(), cpu_seconds());
        f();
        let wall = started.elapsed().as_secs_f64() * 1e3;
        let cpu = (cpu_seconds() - cpu) * 1e3;
        println!("  {what:<28} {wall:>8.1}ms wall {cpu:>8.1}ms cpu");
    };
    time("pair", &mut || drop(history::pair(ops).unwrap()));
    let options = checker::linear::lock_model::LockOptions::new(0.01).with_phantom_release(true);
    let mut lock_ops = Vec::new();
    time("lock_operations", &mut || {
        lock_ops = checker::linear::lock_model::lock_operations(paired, options).unwrap()
    });
    time("lock_fast", &mut || {
        let report = checker::linear::lock_fast::check(&lock_ops, checker::Budget::default());
        assert_eq!(report.verdict, Verdict::Valid);
        println!(
            "  lock_fast configurations explored: {}",
            report.states_explored
        );
    });
    time("fencing", &mut || {
        assert!(checker::fencing::check(paired).is_empty())
    });
    time("lease", &mut || {
        assert!(checker::lease::check(paired, 0.01).is_empty())
    });
}

fn porcupine(case: &str) {
    let Some(dir) = checker::peer_data::porcupine_dir() else {
        println!("{case:<14} skipped: no peer-histories/porcupine (set LOCKSMITH_SHARED)");
        return;
    };
    let verdicts = std::fs::read_to_string(dir.join("verdicts.csv")).unwrap();
    // (file, model, expected, ops)
    let rows: Vec<(String, String, String, u64)> = verdicts
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (
                f[0].to_string(),
                f[1].to_string(),
                f[2].to_string(),
                f[3].parse().unwrap(),
            )
        })
        .collect();
    let files: Vec<&(String, String, String, u64)> = match case {
        "etcd-largest" => {
            let largest = rows
                .iter()
                .filter(|r| r.1 == "cas-register")
                .max_by_key(|r| (r.3, std::cmp::Reverse(r.0.clone())))
                .unwrap();
            vec![largest]
        }
        "etcd-all" => rows.iter().filter(|r| r.1 == "cas-register").collect(),
        "etcd-002" => rows
            .iter()
            .filter(|r| r.0 == "jepsen/etcd_002.log")
            .collect(),
        "kv-c50-ok" => rows.iter().filter(|r| r.0 == "kv/c50-ok.txt").collect(),
        _ => rows.iter().filter(|r| r.0 == "kv/c50-bad.txt").collect(),
    };
    let converted: Vec<(String, ModelKind, Verdict, Vec<Op>)> = files
        .iter()
        .map(|(file, model, expected, _)| {
            let text = std::fs::read_to_string(dir.join(file)).unwrap();
            let (from, kind) = if model == "cas-register" {
                ("porcupine-etcd", ModelKind::Register)
            } else {
                ("porcupine-kv", ModelKind::Kv)
            };
            let ops = checker::cli::convert_text(from, &text).unwrap();
            let want = if expected == "linearizable" {
                Verdict::Valid
            } else {
                Verdict::Invalid
            };
            (file.clone(), kind, want, ops)
        })
        .collect();
    let ops_total: usize = converted
        .iter()
        .map(|c| history::pair(&c.3).unwrap().len())
        .sum();
    let matched = converted.len();
    let cpu = cpu_seconds();
    let started = Instant::now();
    let mut repeats = 0u32;
    while repeats == 0 || (started.elapsed().as_secs_f64() < REPEAT_SECONDS && repeats < 1000) {
        for (file, kind, want, ops) in &converted {
            let check = checker::check(ops, &Options::for_model(*kind)).unwrap();
            assert_eq!(&check.verdict, want, "{file}");
        }
        repeats += 1;
    }
    let seconds = started.elapsed().as_secs_f64() / f64::from(repeats);
    let cpu = (cpu_seconds() - cpu) / f64::from(repeats);
    let label = if converted.len() == 1 {
        converted[0].0.clone()
    } else {
        format!("{matched} files")
    };
    let result = format!("{label}: verdicts as Porcupine's (mean of {repeats})");
    report(case, ops_total, seconds, cpu, &result);
}
