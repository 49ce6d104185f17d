//! The compact per-key op store: `locksmith check`'s streaming fast path for lock
//! histories.
//!
//! A long lock history is checked without building its paired [`history::Operation`]s
//! (about 200 bytes each, with shared text cells) at all. The reading pass
//! ([`history::csv::visit_rows_fast`], which validates every row as the strict reader
//! does) pairs each invoke with its completion straight into a fixed-size `Record`
//! (72 bytes, numbers and small enums only), stored with the other records of its key. The
//! per-key checks then stream over each key's records, which lie next to each other in
//! memory, on every core, instead of gathering operations from a history-sized array (a
//! cache miss per op).
//!
//! The decisions are the whole-history checks' own code: the sweep's input
//! ([`crate::linear::lock_model::lock_operations_of`]), lease safety and fencing are
//! written once against [`OpView`], which both representations implement. This path only
//! ever says "every lock check passed"; it gives up (`None`) on anything else, and the
//! caller then reads the file again and runs the ordinary checks, which write the report.
//! It gives up on:
//!
//! - any nemesis row, an acquire that waits (`LEASE_MS WAIT_MS`), an abandoned acquire
//!   (`info` `gave-up`/`disconnected`) or an expired session (`info` `session-expired`):
//!   the liveness rules would have something to judge or count;
//! - an op outside `acquire`, `release`, `read`, `write`, an acquire value that is no
//!   lease, a model other than `lock` (or `auto` inferring it), the generic search;
//! - under `auto`, an acquire or release whose error is no word of ours (Jepsen's
//!   `already-held`): [`crate::infer_model`] then refuses to choose a model;
//! - a history whose checks would say "not checked" (no tokens, no leased grant, no lock
//!   op), and a check that does not pass on some key (a violation, an unreadable op, the
//!   budget reached, a panic);
//! - anything the fast reader is not sure of.
//!
//! On the histories it accepts, its [`Check`] equals the ordinary path's (tested below
//! on generated histories, the case files and the peer histories).

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use history::csv::RowView;
use history::hash::FastBuildHasher;
use history::pair::ProcessTable;
use history::{AcquireValue, CheckName, ErrorWord, OpName, OpType, Process, Text};

use crate::linear::lock_fast;
use crate::linear::lock_model::{LockOptions, lock_operations_of};
use crate::view::OpView;
use crate::{Check, CheckResult, LockSearch, ModelKind, Options, Verdict, fencing, lease};

/// The op name of a lock history's op, if it is one this path reads (`acquire`,
/// `release`, `read`, `write`).
fn lock_op_name(f: &str) -> Option<OpName> {
    OpName::parse(f).filter(|name| {
        matches!(
            name,
            OpName::Acquire | OpName::Release | OpName::Read | OpName::Write
        )
    })
}

/// Which of a [`Record`]'s optional numbers are present.
const INVOKE_TOKEN: u8 = 1;
const COMPLETION_TOKEN: u8 = 2;
const LEASE: u8 = 4;

/// One paired client operation of a lock history, in 72 bytes: what the lock checks read
/// ([`OpView`]), and nothing else (no key: the store keeps records by key).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Record {
    call_ns: u64,
    /// Meaningful when `op_type` is `Some`.
    completion_ns: u64,
    invoke_index: u64,
    /// Meaningful when `op_type` is `Some`.
    completion_index: u64,
    process: u64,
    invoke_token: u64,
    completion_token: u64,
    lease_ms: u64,
    /// [`INVOKE_TOKEN`], [`COMPLETION_TOKEN`], [`LEASE`].
    present: u8,
    name: OpName,
    op_type: Option<OpType>,
    /// The completion's error cell, when it is a word of the vocabulary.
    error: Option<ErrorWord>,
}

impl Record {
    fn number(&self, flag: u8, value: u64) -> Option<u64> {
        (self.present & flag != 0).then_some(value)
    }
}

impl OpView for Record {
    fn f(&self) -> &str {
        self.name.as_str()
    }

    fn process(&self) -> u64 {
        self.process
    }

    fn invoke_index(&self) -> u64 {
        self.invoke_index
    }

    fn call_ns(&self) -> u64 {
        self.call_ns
    }

    fn invoke_token(&self) -> Option<u64> {
        self.number(INVOKE_TOKEN, self.invoke_token)
    }

    fn lease_ms(&self) -> Result<Option<u64>, String> {
        // A value that is no lease was turned away when the record was built.
        Ok(self.number(LEASE, self.lease_ms))
    }

    fn op_type(&self) -> Option<OpType> {
        self.op_type
    }

    fn completion_index(&self) -> Option<u64> {
        self.op_type.map(|_| self.completion_index)
    }

    fn completion_ns(&self) -> Option<u64> {
        self.op_type.map(|_| self.completion_ns)
    }

    fn completion_token(&self) -> Option<u64> {
        self.number(COMPLETION_TOKEN, self.completion_token)
    }

    fn error_is(&self, word: ErrorWord) -> bool {
        self.error == Some(word)
    }

    fn f_is(&self, name: OpName) -> bool {
        self.name == name
    }

    fn op_name(&self) -> Option<OpName> {
        Some(self.name)
    }
}

/// One key's records, in invoke order.
struct KeyRecords {
    key: String,
    records: Vec<Record>,
}

/// A lock history read into records by key (see the module doc).
#[derive(Default)]
struct Store {
    keys: Vec<KeyRecords>,
    key_ids: HashMap<String, u32, FastBuildHasher>,
    /// Client process -> (key id, position) of its open operation.
    open: ProcessTable<(u32, u32)>,
    operations: usize,
    /// Some row carried a token (else `auto` infers `mutex`, and fencing is not checked).
    tokens: bool,
    /// Some acquire or release ended with an error that is no word of the vocabulary: a
    /// sign of Jepsen's mutex, which `auto` will not mix with our tokens.
    foreign_error: bool,
}

impl Store {
    /// Adds one validated row; `false` when the fast path gives up on the history.
    fn push(&mut self, row: &RowView<'_>) -> bool {
        let Process::Client(process) = row.process else {
            // Faults: the liveness rules have something to judge.
            return false;
        };
        self.tokens |= row.token.is_some();
        if row.op_type == OpType::Invoke {
            return self.invoke(process, row);
        }
        // The validator accepted the completion: its process has an open invoke.
        let Some((key, position)) = self.open.remove(process) else {
            return false;
        };
        let record = &mut self.keys[key as usize].records[position as usize];
        let error = ErrorWord::parse(row.error);
        self.foreign_error |= error.is_none()
            && !row.error.is_empty()
            && matches!(record.name, OpName::Acquire | OpName::Release);
        if row.op_type == OpType::Info
            && error.is_some_and(|e| e.is_abandon() || e == ErrorWord::SessionExpired)
        {
            // An abandoned acquire (liveness rule P judges it) or an expired session (rule
            // S counts it).
            return false;
        }
        record.op_type = Some(row.op_type);
        record.completion_ns = row.time_ns;
        record.completion_index = row.index;
        record.error = error;
        if let Some(token) = row.token {
            record.completion_token = token;
            record.present |= COMPLETION_TOKEN;
        }
        true
    }

    fn invoke(&mut self, process: u64, row: &RowView<'_>) -> bool {
        let Some(name) = lock_op_name(row.f) else {
            return false;
        };
        let mut record = Record {
            call_ns: row.time_ns,
            completion_ns: 0,
            invoke_index: row.index,
            completion_index: 0,
            process,
            invoke_token: row.token.unwrap_or_default(),
            completion_token: 0,
            lease_ms: 0,
            present: if row.token.is_some() { INVOKE_TOKEN } else { 0 },
            name,
            op_type: None,
            error: None,
        };
        if name == OpName::Acquire {
            // What `acquire_lease_ms` reads (empty: no lease), parsed once.
            let value = row.value.trim();
            if !value.is_empty() {
                match AcquireValue::parse(value) {
                    Some(AcquireValue {
                        lease_ms,
                        wait_ms: None,
                    }) => {
                        record.lease_ms = lease_ms;
                        record.present |= LEASE;
                    }
                    // A waiter (liveness rule W judges it), or no lease at all.
                    Some(_) | None => return false,
                }
            }
        }
        let key = match self.key_ids.get(row.key) {
            Some(&key) => key,
            None => {
                let key = self.keys.len() as u32;
                self.key_ids.insert(row.key.to_owned(), key);
                self.keys.push(KeyRecords {
                    key: row.key.to_owned(),
                    records: Vec::new(),
                });
                key
            }
        };
        let records = &mut self.keys[key as usize].records;
        let Ok(position) = u32::try_from(records.len()) else {
            return false;
        };
        records.push(record);
        self.open.insert(process, (key, position));
        self.operations += 1;
        true
    }
}

/// The fast path's result: the check, and how many client operations it read.
pub struct FastCheck {
    /// What the ordinary path would report.
    pub check: Check,
    /// The history's client operations.
    pub operations: usize,
}

/// Checks a lock history file on the compact store; `None` when the fast path gives up
/// (see the module doc), and the caller must read and check the file the ordinary way.
pub fn check_file(path: &Path, options: &Options) -> Option<FastCheck> {
    let lock = matches!(options.model, ModelKind::Lock | ModelKind::Auto);
    if !lock || options.lock_search != LockSearch::Fast {
        return None;
    }
    let mut store = Store::default();
    history::csv::visit_rows_fast(path, |row| store.push(row))?;
    // No tokens: `auto` infers `mutex`, and fencing says "not checked". Tokens beside an
    // error word of Jepsen's: `auto` says unknown.
    if !store.tokens || (store.foreign_error && options.model == ModelKind::Auto) {
        return None;
    }
    let keys: Vec<KeyRecords> = store.keys;
    let clean = all_keys_clean(&keys, options)?;
    let leased_grant = keys.iter().flat_map(|k| &k.records).any(|r| {
        r.name == OpName::Acquire
            && r.is_ok()
            && r.present & LEASE != 0
            && r.present & COMPLETION_TOKEN != 0
    });
    if !clean || !leased_grant {
        return None;
    }
    // The liveness rules had nothing to judge (no fault, recover marker, waiter or
    // abandoned acquire reached the store): their result on no operations is theirs.
    let liveness =
        crate::liveness::check_result(&Default::default(), &options.liveness, options.drift);
    let mut check = crate::compose(vec![
        CheckResult::new(CheckName::Linearizability, Verdict::Valid),
        CheckResult::new(CheckName::Fencing, Verdict::Valid),
        CheckResult::new(CheckName::LeaseSafety, Verdict::Valid),
        liveness,
    ]);
    check.model = Some(ModelKind::Lock);
    Some(FastCheck {
        check,
        operations: store.operations,
    })
}

/// Whether every key passes the sweep, fencing and lease safety, some key had a lock op
/// that returned, and the tokens are unique and increasing across keys. Keys are taken
/// from a shared counter by one thread per core; the token properties run meanwhile.
/// `None` when a thread panicked.
fn all_keys_clean(keys: &[KeyRecords], options: &Options) -> Option<bool> {
    let lock_options =
        LockOptions::new(options.drift).with_phantom_release(options.phantom_release);
    let deadline = options.budget.deadline();
    let next = AtomicUsize::new(0);
    // Each thread: (every key it took passed, some key had a lock op that returned).
    let work = || -> (bool, bool) {
        let mut lock_ops = false;
        while let Some(part) = keys.get(next.fetch_add(1, Ordering::Relaxed)) {
            let key = Text::from(part.key.as_str());
            let Ok(ops) = lock_operations_of(&part.records, lock_options, |_| key.clone()) else {
                return (false, lock_ops);
            };
            let report = lock_fast::check_one_key(&ops, options.budget, deadline);
            lock_ops |= ops.iter().any(|op| !op.is_optional());
            let passed = report.verdict == Verdict::Valid
                && fencing::key_holds(&part.records)
                && lease::key_is_safe(&part.records, options.drift);
            if !passed {
                // Stop the other threads early too: the history takes the ordinary path.
                next.store(keys.len(), Ordering::Relaxed);
                return (false, lock_ops);
            }
        }
        (true, lock_ops)
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(keys.len())
        .max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads).map(|_| scope.spawn(work)).collect();
        let tokens = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let grants: Vec<&Record> =
                fencing::grants(keys.iter().flat_map(|k| &k.records)).collect();
            fencing::tokens_hold(&grants)
        }))
        .unwrap_or(false);
        // Every thread joined before any is judged: a panicked thread left unjoined would
        // make the scope panic.
        let joined: Vec<Option<(bool, bool)>> =
            handles.into_iter().map(|h| h.join().ok()).collect();
        let mut clean = tokens;
        let mut lock_ops = false;
        for (passed, saw) in joined.into_iter().collect::<Option<Vec<_>>>()? {
            clean &= passed;
            lock_ops |= saw;
        }
        Some(clean && lock_ops)
    })
}

#[cfg(test)]
mod tests {
    //! STYLE practice 9: a fast path must agree with the dumb oracle. The oracle is the
    //! ordinary path (read and pair the file, [`crate::check_paired`]); whenever the compact
    //! store gives a check, it must equal the oracle's, and it must never give one that is
    //! not `valid` (a failure falls back for its report).

    use std::path::{Path, PathBuf};

    use history::{Op, OpType};

    use super::check_file;
    use crate::generate::{GenOptions, Inject, lock_history, write_csv};
    use crate::{ModelKind, Options, Verdict};

    /// The ordinary path's check and operation count, `None` when the file does not read.
    fn oracle(path: &Path, options: &Options) -> Option<(crate::Check, usize)> {
        let paired = history::csv::read_paired_path(path).ok()?;
        Some((
            crate::check_paired(&paired, options),
            paired.operations.len(),
        ))
    }

    /// Checks `path` both ways under each option set; returns how many took the fast path.
    fn agree(path: &Path, what: &str) -> usize {
        let option_sets = [
            Options::default(),
            Options::for_model(ModelKind::Auto),
            Options::default().with_phantom_release(false),
            Options::default().with_drift(0.2),
        ];
        let mut fast_taken = 0;
        for options in &option_sets {
            let Some(fast) = check_file(path, options) else {
                continue;
            };
            fast_taken += 1;
            let (check, operations) = oracle(path, options)
                .unwrap_or_else(|| panic!("{what}: fast path read a bad file"));
            assert_eq!(fast.check, check, "{what}, {options:?}");
            assert_eq!(fast.operations, operations, "{what}");
            assert_eq!(fast.check.verdict, Verdict::Valid, "{what}");
        }
        fast_taken
    }

    fn write(dir: &Path, name: &str, ops: &[Op]) -> PathBuf {
        let path = dir.join(name);
        let file = std::fs::File::create(&path).unwrap();
        write_csv(ops, std::io::BufWriter::new(file)).unwrap();
        path
    }

    #[test]
    fn generated_histories_get_the_ordinary_paths_check_or_fall_back() {
        let dir = tempfile::tempdir().unwrap();
        for seed in 1..=3u64 {
            for crash_rate in [0.0, 0.005, 0.5] {
                for inject in [Inject::Nothing, Inject::DoubleGrant, Inject::StaleWrite] {
                    let mut generated = GenOptions::new(2000, seed);
                    generated.keys = 7;
                    generated.crash_rate = crash_rate;
                    generated.inject = inject;
                    let what = format!("seed {seed}, crash rate {crash_rate}, {inject:?}");
                    let path = write(dir.path(), "h.csv", &lock_history(&generated));
                    let fast = check_file(&path, &Options::default());
                    // A valid history takes the fast path; an invalid one falls back.
                    assert_eq!(fast.is_some(), inject == Inject::Nothing, "{what}");
                    let agreed = agree(&path, &what);
                    assert_eq!(agreed > 0, inject == Inject::Nothing, "{what}");
                }
            }
        }
    }

    /// A small seeded RNG (splitmix64).
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) % n
        }
    }

    #[test]
    fn mutated_histories_never_get_a_check_the_ordinary_path_does_not_give() {
        // Valid histories with a few cells changed at random (tokens, errors, types,
        // values, times kept in order): whatever the verdict, the fast path gives the
        // ordinary path's check or falls back.
        let dir = tempfile::tempdir().unwrap();
        let (mut fast_taken, mut invalid, mut unreadable) = (0, 0, 0);
        for seed in 1..=80u64 {
            println!("seed {seed}");
            let mut rng = Rng(seed);
            let mut generated = GenOptions::new(300, seed);
            generated.keys = 3;
            generated.clients = 6;
            generated.crash_rate = [0.0, 0.05, 0.5][seed as usize % 3];
            generated.lease_ms = [10_000, 1, 50][seed as usize % 3];
            let mut ops = lock_history(&generated);
            for _ in 0..=rng.below(6) {
                let i = rng.below(ops.len() as u64) as usize;
                mutate(&mut ops[i], &mut rng);
            }
            let path = write(dir.path(), "m.csv", &ops);
            fast_taken += agree(&path, &format!("seed {seed}"));
            let paired = history::csv::read_paired_path(&path);
            match paired {
                Ok(paired) => {
                    let check = crate::check_paired(&paired, &Options::default());
                    invalid += usize::from(check.verdict == Verdict::Invalid);
                }
                Err(_) => unreadable += 1,
            }
        }
        println!("{fast_taken} fast checks, {invalid} invalid, {unreadable} unreadable");
        // The test means something only when both kinds occur.
        assert!(fast_taken > 20, "{fast_taken} fast checks");
        assert!(invalid > 10, "{invalid} invalid histories");
        assert!(unreadable < 40, "{unreadable} unreadable histories");
    }

    /// Changes one cell of `op`, keeping the history readable (mostly: an `info` may
    /// retire a process that invokes again).
    fn mutate(op: &mut Op, rng: &mut Rng) {
        match rng.below(6) {
            0 | 1 => op.token = Some(rng.below(40)),
            2 => op.token = None,
            3 => {
                op.error = ["busy", "not-holder", "timeout", "", "already-held"]
                    [rng.below(5) as usize]
                    .into()
            }
            4 if op.op_type != OpType::Invoke => {
                op.op_type = [OpType::Ok, OpType::Fail, OpType::Info][rng.below(3) as usize]
            }
            _ if op.f == "acquire" && op.op_type == OpType::Invoke => {
                op.value = ["", "1", "20", "10000", "x"][rng.below(5) as usize].into()
            }
            _ => op.token = op.token.map(|t| t + 1),
        }
    }

    #[test]
    fn a_lock_history_with_an_error_word_of_jepsens_gets_the_ordinary_paths_unknown() {
        // `infer_model` ("never silently valid"): under `auto`, a lock history with our
        // signs (tokens, leases) and an error word only Jepsen's mutex writes
        // (`already-held`) is unknown, naming both rows: read as ours, the word's failed
        // acquire would be left out, and a busy on a free key would pass unseen.
        let dir = tempfile::tempdir().unwrap();
        let csv = format!(
            "{}\n0,1000,0,invoke,acquire,a,10000,,,\n1,2000,0,ok,acquire,a,,5,n1,\n\
             2,3000,0,invoke,release,a,,5,,\n3,4000,0,ok,release,a,,,n1,\n\
             4,5000,1,invoke,acquire,a,10000,,,\n5,6000,1,fail,acquire,a,,,,already-held\n",
            history::csv::HEADER
        );
        let path = dir.path().join("j.csv");
        std::fs::write(&path, csv).unwrap();
        agree(&path, "already-held");
        let auto = Options::for_model(ModelKind::Auto);
        let (check, _) = crate::cli::check_path(&path, &auto).unwrap();
        assert!(
            matches!(&check.verdict, Verdict::Unknown { reason } if reason.contains("row 5 an error word of Jepsen's")),
            "{}",
            check.verdict
        );
    }

    #[test]
    fn a_record_is_72_bytes() {
        // The module doc's figure: what a 1M-op history costs in memory.
        assert_eq!(std::mem::size_of::<super::Record>(), 72);
    }

    #[test]
    fn large_process_ids_pair_as_small_ones() {
        // Process ids past the open-op table's bound go to its hash map.
        let dir = tempfile::tempdir().unwrap();
        let dense_max = history::pair::ProcessTable::<()>::DENSE_MAX;
        for process in [3u64, dense_max - 1, dense_max, u64::MAX] {
            let csv = format!(
                "{}\n0,1000,{process},invoke,acquire,a,10000,,,\n1,2000,{process},ok,acquire,a,,5,n1,\n\
                 2,2500,{process},invoke,release,a,,5,,\n3,2600,{process},ok,release,a,,,n1,\n",
                history::csv::HEADER
            );
            let path = dir.path().join("p.csv");
            std::fs::write(&path, csv).unwrap();
            assert_eq!(
                agree(&path, &format!("process {process}")),
                4,
                "process {process}"
            );
        }
    }

    #[test]
    fn case_files_get_the_ordinary_paths_check_or_fall_back() {
        // Every case of histories/cases (valid, invalid, malformed, every model).
        let cases = Path::new(env!("CARGO_MANIFEST_DIR")).join("../histories/cases");
        let mut files = Vec::new();
        crate::cli::expand_paths(&[cases])
            .map(|found| files = found)
            .unwrap();
        assert!(files.len() > 50, "{} case files", files.len());
        let fast_taken: usize = files
            .iter()
            .map(|file| agree(file, &file.display().to_string()))
            .sum();
        assert!(fast_taken > 0);
    }
}
