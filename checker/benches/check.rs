//! Benchmarks of the checks (a `harness = false` bench: `cargo bench -p checker`).
//!
//! Each case runs in a child process of this binary, so that its peak memory (`VmHWM` in
//! /proc/self/status) is its own:
//!
//! - `lock-1m`: a valid lock history of 1,000,000 operations over 100 keys with 20
//!   clients, generated from a seed by simulating a correct lock service (try-acquire,
//!   fenced writes while holding, release; 0.5% of acquires time out and may have taken
//!   effect, and their grants are released later by the service), checked with all three
//!   lock checks (token-ordered sweep, fencing, lease safety). Target: under 2 s.
//! - `etcd-largest`: the Porcupine etcd history with the most ops (by `verdicts.csv`),
//!   register model; `etcd-all`: all 102 etcd files; `kv-c50-ok`, `kv-c50-bad`. Skipped,
//!   saying so, when the shared folder is absent (see `tests/porcupine.rs` for the source).
//!
//! Times exclude generating or converting the history, and include pairing it.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::process::Command;
use std::time::Instant;

use checker::{ModelKind, Options, Verdict};
use history::{Op, OpType, Process};

const CASE_ENV: &str = "LOCKSMITH_BENCH_CASE";
const CASES: [&str; 6] = [
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
    println!(
        "{:<14} {:>9} {:>12} {:>12} {:>10}  result",
        "case", "ops", "wall", "cpu", "peak RSS"
    );
    for case in CASES {
        if filter.as_ref().is_some_and(|f| !case.contains(f.as_str())) {
            continue;
        }
        let output = Command::new(&exe)
            .env(CASE_ENV, case)
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

fn run_case(case: &str) {
    match case {
        "lock-1m" => lock_1m(),
        "etcd-largest" | "etcd-002" | "etcd-all" | "kv-c50-ok" | "kv-c50-bad" => porcupine(case),
        other => panic!("unknown case {other}"),
    }
}

fn lock_1m() {
    let ops = generate_lock_history(0x10C_5317, 1_000_000, 100, 20);
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

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        lockd::rng::splitmix64(&mut self.0)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Held {
    Free,
    Token(u64),
    Phantom,
}

/// A simulated correct lock service: each client's op takes effect at a point inside its
/// interval, points are applied in time order to a true lock table, tokens come from one
/// counter. Returns the rows, sorted by time.
fn generate_lock_history(seed: u64, ops_total: usize, keys: usize, clients: u64) -> Vec<Op> {
    const LEASE_MS: u64 = 10_000;
    let mut rng = Rng(seed);
    let mut table = vec![Held::Free; keys];
    let mut next_token = 1u64;
    // Per client: its process id and the (key, token) it holds.
    let mut process: Vec<u64> = (0..clients).collect();
    let mut holding: Vec<Option<(usize, u64)>> = vec![None; clients as usize];
    // Min-heap of (time, event): a client's next op at its effect point, or the service's
    // release of a phantom grant.
    let mut heap: BinaryHeap<Reverse<(u64, u64, u64)>> = BinaryHeap::new();
    let mut invoke_at: Vec<u64> = vec![0; clients as usize];
    for c in 0..clients {
        invoke_at[c as usize] = rng.below(1_000_000);
        heap.push(Reverse((
            invoke_at[c as usize] + rng.below(2_000_000),
            0,
            c,
        )));
    }
    let mut rows: Vec<(u64, u64, Op)> = Vec::with_capacity(ops_total * 2);
    let mut seq = 0u64;
    let mut push = |rows: &mut Vec<(u64, u64, Op)>, time: u64, op: Op| {
        seq += 1;
        rows.push((time, seq, op));
    };
    let mut done = 0usize;
    while done < ops_total {
        let Reverse((point, kind, who)) = heap.pop().expect("clients always have a next op");
        if kind == 1 {
            table[who as usize] = Held::Free;
            continue;
        }
        let c = who as usize;
        let invoke = invoke_at[c];
        let complete = point + rng.below(2_000_000);
        let p = process[c];
        let row = |op_type, f: &str, key: usize, value: String, token, error: &str, time| Op {
            index: 0,
            time_ns: time,
            process: Process::Client(p),
            op_type,
            f: f.to_string(),
            key: format!("k{key}"),
            value,
            token,
            node: String::new(),
            error: error.to_string(),
        };
        if let Some((key, token)) = holding[c].filter(|_| rng.below(2) == 0) {
            // A fenced write with the held token: the resource accepts it, since tokens
            // of one key only grow.
            let value = done.to_string();
            push(
                &mut rows,
                invoke,
                row(OpType::Invoke, "write", key, value, Some(token), "", invoke),
            );
            push(
                &mut rows,
                complete,
                row(OpType::Ok, "write", key, String::new(), None, "", complete),
            );
        } else if let Some((key, token)) = holding[c] {
            table[key] = Held::Free;
            holding[c] = None;
            push(
                &mut rows,
                invoke,
                row(
                    OpType::Invoke,
                    "release",
                    key,
                    String::new(),
                    Some(token),
                    "",
                    invoke,
                ),
            );
            push(
                &mut rows,
                complete,
                row(
                    OpType::Ok,
                    "release",
                    key,
                    String::new(),
                    None,
                    "",
                    complete,
                ),
            );
        } else {
            let key = rng.below(keys as u64) as usize;
            let lease = LEASE_MS.to_string();
            push(
                &mut rows,
                invoke,
                row(OpType::Invoke, "acquire", key, lease, None, "", invoke),
            );
            let timed_out = rng.below(1000) < 5;
            if table[key] == Held::Free {
                let token = next_token;
                next_token += 1 + rng.below(3);
                if timed_out {
                    // The answer is lost; the service releases the phantom grant later.
                    table[key] = Held::Phantom;
                    heap.push(Reverse((point + rng.below(50_000_000), 1, key as u64)));
                } else {
                    table[key] = Held::Token(token);
                    holding[c] = Some((key, token));
                }
                if !timed_out {
                    push(
                        &mut rows,
                        complete,
                        row(
                            OpType::Ok,
                            "acquire",
                            key,
                            String::new(),
                            Some(token),
                            "",
                            complete,
                        ),
                    );
                }
            } else if !timed_out {
                push(
                    &mut rows,
                    complete,
                    row(
                        OpType::Fail,
                        "acquire",
                        key,
                        String::new(),
                        None,
                        "busy",
                        complete,
                    ),
                );
            }
            if timed_out {
                push(
                    &mut rows,
                    complete,
                    row(
                        OpType::Info,
                        "acquire",
                        key,
                        String::new(),
                        None,
                        "timeout",
                        complete,
                    ),
                );
                process[c] += clients;
            }
        }
        done += 1;
        // Think, then the next op: its effect point is inside its own interval.
        let next_invoke = complete + rng.below(3_000_000);
        invoke_at[c] = next_invoke;
        heap.push(Reverse((next_invoke + rng.below(2_000_000), 0, who)));
    }
    // Ops still open at the end have no completion row: they are indeterminate, as allowed.
    rows.sort_by_key(|(time, seq, _)| (*time, *seq));
    rows.into_iter()
        .enumerate()
        .map(|(i, (_, _, mut op))| {
            op.index = i as u64;
            op
        })
        .collect()
}
