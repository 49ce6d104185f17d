//! The fast path must agree with the dumb oracle (STYLE practice 9).
//!
//! - `lock_fast` (the token-ordered sweep) against the generic WGL search with the same
//!   lock spec, on seeded random small lock histories;
//! - WGL against a brute-force check of every order of every subset, on histories of at
//!   most 8 operations (internal events included), for the lock and the register models.
//!
//! Histories come from a small simulation of a correct lock (with `info` ops, hidden
//! grants, expiries, busy and not-holder answers), and half of them are then mutated, so
//! that both verdicts occur; each test asserts that they do. Every case prints its seed on
//! failure; `LOCKSMITH_SEED=N` changes the base seed.

use checker::Verdict;
use checker::linear::lock_model::{LockModel, LockOptions, lock_operations};
use checker::linear::register_model::register_operations;
use checker::linear::{self, Budget, brute_force, lock_fast};
use history::{Op, OpType, Process};

/// splitmix64: a tiny seeded generator, so that every case is reproducible from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        lockd::rng::splitmix64(&mut self.0)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn base_seed() -> u64 {
    std::env::var("LOCKSMITH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_261_202)
}

/// One simulated client operation, before it becomes rows.
struct SimOp {
    f: &'static str,
    key: &'static str,
    start: u64,
    end: u64,
    lease_ms: u64,
    /// Invoke token (release).
    token: Option<u64>,
    outcome: OpType,
    /// Completion token (acquire ok).
    granted: Option<u64>,
    error: &'static str,
    /// An indeterminate op with no completion row at all.
    never_completes: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum SimHolder {
    Free,
    Token(u64, u64),
    Hidden,
}

/// Simulates a correct lock service: ops take effect at a point inside their interval, in
/// point order, against a true lock table with tokens, leases and hidden grants.
fn simulate(rng: &mut Rng, ops_max: u64) -> Vec<SimOp> {
    let keys = ["a", "b"];
    let key_count = 1 + rng.below(2) as usize;
    let n = 1 + rng.below(ops_max);
    let mut ops: Vec<(u64, SimOp)> = (0..n)
        .map(|_| {
            let start = rng.below(100);
            let end = start + rng.below(30);
            let point = start + rng.below(end - start + 1);
            let f = if rng.chance(55) { "acquire" } else { "release" };
            let op = SimOp {
                f,
                key: keys[rng.below(key_count as u64) as usize],
                start,
                end,
                lease_ms: 10 + rng.below(60),
                token: None,
                outcome: OpType::Ok,
                granted: None,
                error: "",
                never_completes: false,
            };
            (point, op)
        })
        .collect();
    ops.sort_by_key(|(point, _)| *point);
    let mut holder = [SimHolder::Free; 2];
    let mut next_token = 1 + rng.below(3);
    let mut granted: Vec<u64> = Vec::new();
    for (point, op) in ops.iter_mut() {
        let k = if op.key == "a" { 0 } else { 1 };
        // Expiries and phantom releases happen on their own, before this op's point.
        match holder[k] {
            SimHolder::Token(_, expires) if *point >= expires && rng.chance(60) => {
                holder[k] = SimHolder::Free
            }
            SimHolder::Hidden if rng.chance(50) => holder[k] = SimHolder::Free,
            _ => {}
        }
        let info = rng.chance(15);
        if op.f == "acquire" {
            if holder[k] == SimHolder::Free {
                if info {
                    if rng.chance(50) {
                        holder[k] = SimHolder::Hidden;
                        next_token += 1;
                    }
                } else {
                    let token = next_token;
                    next_token += 1 + rng.below(2);
                    holder[k] = SimHolder::Token(token, *point + op.lease_ms);
                    op.granted = Some(token);
                    granted.push(token);
                }
            } else if !info {
                op.outcome = OpType::Fail;
                op.error = "busy";
            }
        } else {
            let current = match holder[k] {
                SimHolder::Token(t, _) => Some(t),
                _ => None,
            };
            let token = match current {
                Some(t) if rng.chance(70) => t,
                _ if !granted.is_empty() => granted[rng.below(granted.len() as u64) as usize],
                _ => 1 + rng.below(4),
            };
            op.token = Some(token);
            let matches = current == Some(token);
            if info {
                if matches && rng.chance(50) {
                    holder[k] = SimHolder::Free;
                }
            } else if matches {
                holder[k] = SimHolder::Free;
            } else {
                op.outcome = OpType::Fail;
                op.error = "not-holder";
            }
        }
        if info {
            op.outcome = OpType::Info;
            op.error = "timeout";
            op.never_completes = rng.chance(30);
        }
    }
    ops.into_iter().map(|(_, op)| op).collect()
}

/// Breaks one op of a simulated history (most mutations make it non-linearizable).
fn mutate(rng: &mut Rng, ops: &mut [SimOp]) {
    if ops.is_empty() {
        return;
    }
    let i = rng.below(ops.len() as u64) as usize;
    let op = &mut ops[i];
    match (op.f, op.outcome) {
        ("acquire", OpType::Ok) if rng.chance(50) => {
            op.outcome = OpType::Fail;
            op.error = "busy";
            op.granted = None;
        }
        ("acquire", OpType::Ok) => op.granted = op.granted.map(|t| t.saturating_sub(1).max(1)),
        ("acquire", OpType::Fail) => {
            op.outcome = OpType::Ok;
            op.error = "";
            op.granted = Some(1 + rng.below(8));
        }
        ("release", OpType::Ok) => {
            op.outcome = OpType::Fail;
            op.error = "not-holder";
        }
        ("release", OpType::Fail) => {
            op.outcome = OpType::Ok;
            op.error = "";
        }
        _ => {
            op.end = op.start;
            op.start = op.start.saturating_sub(rng.below(20));
        }
    }
}

/// Rows of schema v1: every op its own process (so the process rules always hold), times
/// in milliseconds.
fn to_rows(ops: &[SimOp]) -> Vec<Op> {
    // (time, 0 invoke / 1 completion, op)
    let mut events: Vec<(u64, u8, usize)> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        events.push((op.start, 0, i));
        if !op.never_completes {
            events.push((op.end, 1, i));
        }
    }
    events.sort();
    events
        .iter()
        .enumerate()
        .map(|(index, &(time, kind, i))| {
            let op = &ops[i];
            let invoke = kind == 0;
            Op {
                index: index as u64,
                time_ns: time * 1_000_000,
                process: Process::Client(i as u64),
                op_type: if invoke { OpType::Invoke } else { op.outcome },
                f: op.f.to_string(),
                key: op.key.to_string(),
                value: if invoke && op.f == "acquire" {
                    op.lease_ms.to_string()
                } else {
                    String::new()
                },
                token: if invoke { op.token } else { op.granted },
                node: String::new(),
                error: if invoke {
                    String::new()
                } else {
                    op.error.to_string()
                },
            }
        })
        .collect()
}

fn lock_case(seed: u64, ops_max: u64) -> Vec<Op> {
    let mut rng = Rng(seed);
    let mut ops = simulate(&mut rng, ops_max);
    if rng.chance(50) {
        mutate(&mut rng, &mut ops);
    }
    to_rows(&ops)
}

/// Half the cases allow phantom releases, half do not: both readings of hidden grants
/// are compared.
fn lock_options(seed: u64) -> LockOptions {
    LockOptions::new(0.0).with_phantom_release(seed % 2 == 0)
}

fn verdict_of(valid: bool) -> Verdict {
    if valid {
        Verdict::Valid
    } else {
        Verdict::Invalid
    }
}

fn show(rows: &[Op]) -> String {
    let mut out = Vec::new();
    let mut writer = history::csv::Writer::new(&mut out).unwrap();
    for row in rows {
        writer.write(row).unwrap();
    }
    writer.flush().unwrap();
    drop(writer);
    String::from_utf8(out).unwrap()
}

#[test]
fn lock_fast_agrees_with_wgl_on_random_lock_histories() {
    // STYLE practice 9: the token-ordered checker agrees with the generic search.
    let base = base_seed();
    let (mut valid, mut invalid) = (0, 0);
    for case in 0..4000u64 {
        let seed = base.wrapping_add(case);
        // Mostly small histories, and every fourth one longer (up to 24 ops).
        let rows = lock_case(seed, if case % 4 == 0 { 24 } else { 12 });
        let paired = history::pair(&rows).unwrap();
        let ops = lock_operations(&paired, lock_options(seed)).unwrap();
        let fast = lock_fast::check(&ops, Budget::default()).verdict;
        let wgl = linear::check(&LockModel, &ops, Budget::default()).verdict;
        assert_eq!(
            fast,
            wgl,
            "seed {seed}: lock_fast vs wgl on\n{}",
            show(&rows)
        );
        match wgl {
            Verdict::Valid => valid += 1,
            Verdict::Invalid => invalid += 1,
            other => panic!("seed {seed}: {other}"),
        }
    }
    assert!(
        valid > 400 && invalid > 400,
        "valid {valid}, invalid {invalid}"
    );
}

#[test]
fn wgl_agrees_with_brute_force_on_small_lock_histories() {
    // STYLE practice 9: WGL agrees with all permutations on histories of <= 8 ops.
    let base = base_seed() ^ 0xB0B;
    let (mut valid, mut invalid, mut compared) = (0, 0, 0);
    for case in 0..3000u64 {
        let seed = base.wrapping_add(case);
        let rows = lock_case(seed, 6);
        let paired = history::pair(&rows).unwrap();
        let ops = lock_operations(&paired, lock_options(seed)).unwrap();
        let Some(oracle) = brute_force(&LockModel, &ops) else {
            continue;
        };
        compared += 1;
        let wgl = linear::check(&LockModel, &ops, Budget::default()).verdict;
        assert_eq!(
            wgl,
            verdict_of(oracle),
            "seed {seed}: wgl vs brute force on\n{}",
            show(&rows)
        );
        let fast = lock_fast::check(&ops, Budget::default()).verdict;
        assert_eq!(
            fast,
            wgl,
            "seed {seed}: lock_fast vs wgl on\n{}",
            show(&rows)
        );
        if oracle { valid += 1 } else { invalid += 1 }
    }
    assert!(compared > 1000, "only {compared} cases had <= 8 ops");
    assert!(
        valid > 200 && invalid > 200,
        "valid {valid}, invalid {invalid}"
    );
}

#[test]
fn lease_safety_never_flags_a_history_the_lock_model_accepts() {
    // STYLE practice 9, with the lock spec as the oracle: a linearizable lock history
    // ends each epoch (a release invoked before the next grant's point, or an expiry no
    // earlier than invoke + lease) before the next grant, which is all lease safety asks
    // (its bound, lease·(1−2ρ), is the spec's at drift 0). Times are whole milliseconds,
    // so a release and a grant often share an instant (closed intervals).
    let base = base_seed() ^ 0x1EA5E;
    let (mut accepted, mut judged) = (0, 0);
    for case in 0..4000u64 {
        let seed = base.wrapping_add(case);
        let rows = lock_case(seed, if case % 4 == 0 { 24 } else { 12 });
        let paired = history::pair(&rows).unwrap();
        let ops = lock_operations(&paired, LockOptions::new(0.0)).unwrap();
        if lock_fast::check(&ops, Budget::default()).verdict != Verdict::Valid {
            continue;
        }
        accepted += 1;
        let grants = paired
            .iter()
            .filter(|op| op.is_ok() && op.f == "acquire")
            .count();
        judged += usize::from(grants >= 2);
        let violations = checker::lease::check(&paired, 0.0);
        assert!(
            violations.is_empty(),
            "seed {seed}: the lock model accepts, lease safety says {:?} on\n{}",
            violations.first().map(|v| &v.message),
            show(&rows)
        );
    }
    assert!(
        accepted > 1000 && judged > 500,
        "accepted {accepted}, with two grants {judged}"
    );
}

/// A random register history: concurrent read/write/cas on values 0..3, outcomes random
/// (so both verdicts occur), one process per op.
fn register_case(seed: u64) -> Vec<Op> {
    let mut rng = Rng(seed);
    let n = 1 + rng.below(7);
    let mut events: Vec<(u64, u8, usize)> = Vec::new();
    let mut spec = Vec::new();
    for i in 0..n as usize {
        let start = rng.below(40);
        let end = start + rng.below(15);
        let (f, value) = match rng.below(3) {
            0 => ("read", String::new()),
            1 => ("write", rng.below(3).to_string()),
            _ => ("cas", format!("{} {}", rng.below(3), rng.below(3))),
        };
        let outcome = match rng.below(10) {
            0 => OpType::Info,
            1 | 2 if f == "cas" => OpType::Fail,
            _ => OpType::Ok,
        };
        let read = if rng.chance(25) {
            String::new()
        } else {
            rng.below(3).to_string()
        };
        events.push((start, 0, i));
        events.push((end, 1, i));
        spec.push((f, value, outcome, read));
    }
    events.sort();
    events
        .iter()
        .enumerate()
        .map(|(index, &(time, kind, i))| {
            let (f, value, outcome, read) = &spec[i];
            Op {
                index: index as u64,
                time_ns: time,
                process: Process::Client(i as u64),
                op_type: if kind == 0 { OpType::Invoke } else { *outcome },
                f: f.to_string(),
                key: "x".to_string(),
                value: match (kind, *f) {
                    (0, _) => value.clone(),
                    (_, "read") => read.clone(),
                    _ => String::new(),
                },
                token: None,
                node: String::new(),
                error: String::new(),
            }
        })
        .collect()
}

#[test]
fn wgl_agrees_with_brute_force_on_small_register_histories() {
    // STYLE practice 9: WGL agrees with all permutations on histories of <= 8 ops.
    let base = base_seed() ^ 0x5EED;
    let (mut valid, mut invalid) = (0, 0);
    for case in 0..3000u64 {
        let seed = base.wrapping_add(case);
        let rows = register_case(seed);
        let paired = history::pair(&rows).unwrap();
        let (model, ops) = register_operations(&paired).unwrap();
        let oracle = brute_force(&model, &ops).expect("at most 7 ops");
        let wgl = linear::check(&model, &ops, Budget::default()).verdict;
        assert_eq!(
            wgl,
            verdict_of(oracle),
            "seed {seed}: wgl vs brute force on\n{}",
            show(&rows)
        );
        if oracle { valid += 1 } else { invalid += 1 }
    }
    assert!(
        valid > 300 && invalid > 300,
        "valid {valid}, invalid {invalid}"
    );
}
