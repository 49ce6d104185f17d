//! `locksmith check` and `locksmith convert` through `nemesis::check` and `checker::cli`:
//! DESIGN "The command line" exit codes (0 valid, 1 invalid, 2 unknown or could not run) and
//! messages.

use std::path::{Path, PathBuf};

use checker::cli::run_convert;
use nemesis::check::{CheckArgs, run_check};

fn case(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../histories/cases")
        .join(path)
}

fn check(args: &CheckArgs) -> (i32, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run_check(args, &mut out, &mut err);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

#[test]
fn a_valid_history_exits_0_and_an_invalid_one_exits_1_with_the_explanation() {
    // DESIGN "The command line": exit 0 valid, 1 invalid.
    let (code, out, _) = check(&CheckArgs::new(case("lock/valid/sequential_holders.csv")));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(": valid ("), "{out}");
    let (code, out, _) = check(&CheckArgs::new(case("lock/invalid/two_holders.csv")));
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("token 1 was granted to process 0 (rows 0-1)"),
        "{out}"
    );
}

#[test]
fn a_bad_csv_exits_2_with_file_line_column_reason() {
    // DESIGN "Histories": the reader rejects bad input with line:column: reason.
    let path = case("malformed/unknown_type.csv");
    let (code, out, err) = check(&CheckArgs::new(path.clone()));
    assert_eq!(code, 2);
    assert!(out.is_empty());
    let want = std::fs::read_to_string(path.with_extension("expect")).unwrap();
    assert_eq!(
        err.trim_end(),
        format!("{}:{}", path.display(), want.trim_end())
    );
}

#[test]
fn json_output_and_the_timeline_file_are_written() {
    // DESIGN "The checks": a failing check writes an HTML timeline that marks it.
    let dir = tempfile::tempdir().unwrap();
    let mut args = CheckArgs::new(case("lock/invalid/two_holders.csv"));
    args.json = true;
    args.timeline = Some(dir.path().join("timeline.html"));
    args.plot = Some(dir.path().join("latency.svg"));
    let (code, out, _) = check(&args);
    assert_eq!(code, 1);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["verdict"], "invalid");
    assert_eq!(json["results"][0]["name"], "linearizability");
    assert_eq!(json["results"][0]["verdict"], "invalid");
    let html = std::fs::read_to_string(dir.path().join("timeline.html")).unwrap();
    assert!(html.contains("\"marked\":true"));
    let svg = std::fs::read_to_string(dir.path().join("latency.svg")).unwrap();
    assert!(svg.starts_with("<svg"));
}

#[test]
fn convert_writes_a_csv_that_checks_and_a_bad_input_exits_2() {
    // DESIGN "Histories": other tools' histories are converted by `locksmith convert`.
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("etcd.log");
    std::fs::write(
        &input,
        "INFO  jepsen.util - 0\t:invoke\t:write\t1\n\
         INFO  jepsen.util - 0\t:ok\t:write\t1\n\
         INFO  jepsen.util - 1\t:invoke\t:read\tnil\n\
         INFO  jepsen.util - 1\t:ok\t:read\tnil\n",
    )
    .unwrap();
    let output = dir.path().join("out.csv");
    let mut err = Vec::new();
    assert_eq!(run_convert("porcupine-etcd", &input, &output, &mut err), 0);
    let mut args = CheckArgs::new(output.clone());
    args.model = checker::ModelKind::Register;
    let (code, out, _) = check(&args);
    assert_eq!(
        code, 1,
        "a nil read after a completed write is stale: {out}"
    );
    let mut err = Vec::new();
    assert_eq!(run_convert("no-such-format", &input, &output, &mut err), 2);
    assert!(String::from_utf8(err).unwrap().contains("unknown format"));
}

#[test]
fn a_register_history_never_passes_under_the_lock_model() {
    // Issue 12 "never silently wrong": an op the model does not know is unknown (exit 2),
    // naming the row and the op; --model auto reads the register ops as a register.
    let path = case("register/invalid/cas_succeeded_on_a_wrong_old_value.csv");
    let mut args = CheckArgs::new(path.clone());
    args.model = checker::ModelKind::Lock;
    let (code, out, _) = check(&args);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("row 2: op `cas` is not a lock op"), "{out}");
    let (code, out, _) = check(&CheckArgs::new(path));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("register model, inferred"), "{out}");
}

#[test]
fn a_check_with_nothing_to_check_is_not_valid() {
    // Issue 12: `fencing: not checked (no tokens)`; nothing checked at all is unknown.
    let (code, out, _) = check(&CheckArgs::new(case(
        "mutex/valid/release_by_another_process.csv",
    )));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("mutex model, inferred"), "{out}");
    let mut args = CheckArgs::new(case("mutex/valid/release_by_another_process.csv"));
    args.model = checker::ModelKind::Lock;
    let (code, out, _) = check(&args);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("fencing: not checked (no tokens)"), "{out}");
}

#[test]
fn a_batch_prints_one_line_per_history_and_the_worst_exit_code() {
    // Issue 12 "Batch": files and folders, one verdict line each, worst exit code.
    let args = CheckArgs::batch(vec![
        case("register/valid"),
        case("register/invalid/stale_read.csv"),
    ]);
    let (code, out, _) = check(&args);
    assert_eq!(code, 1, "{out}");
    let files = std::fs::read_dir(case("register/valid")).unwrap().count();
    assert_eq!(out.lines().count(), files + 2, "{out}");
    assert!(out.contains("stale_read.csv: invalid"), "{out}");
    assert!(out.contains("1 invalid"), "{out}");
    let (code, out, _) = check(&CheckArgs::batch(vec![case("register/valid")]));
    assert_eq!(code, 0, "{out}");
}

#[test]
fn a_register_timeline_labels_values_and_links_the_first_error() {
    // Issue 12 "explanations": labels like `cas(3, 0) -> fail`, the order found, and a
    // "jump to the first error" link.
    let dir = tempfile::tempdir().unwrap();
    let mut args = CheckArgs::new(case(
        "register/invalid/cas_succeeded_on_a_wrong_old_value.csv",
    ));
    args.timeline = Some(dir.path().join("timeline.html"));
    let (code, out, _) = check(&args);
    assert_eq!(code, 1, "{out}");
    let html = std::fs::read_to_string(dir.path().join("timeline.html")).unwrap();
    assert!(html.contains("cas(2, 3) -> ok"), "no cas label");
    assert!(html.contains("write(1) -> ok"), "no write label");
    assert!(html.contains("jump to the first error"));
    assert!(html.contains("\"order\":1"), "the order found is not drawn");
    assert!(out.contains("had finished at"), "{out}");
}

#[test]
fn a_lock_history_whose_acquires_all_failed_busy_is_checked_as_a_lock_and_invalid() {
    // Issue 28 item 4: lease values and lockd's error words are our schema's signs, so the
    // inferred model is `lock`, under which a `busy` on a free key cannot take effect.
    // (Read as Jepsen's tokenless mutex, `fail` is a no-op and the history would pass.)
    let path = case("lock/invalid/busy_only_on_a_free_key.csv");
    let (code, out, _) = check(&CheckArgs::new(path));
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("lock model, inferred"), "{out}");
    assert!(out.contains("fail busy"), "{out}");
}

#[test]
fn lock_ops_whose_signs_disagree_exit_2_naming_the_rows() {
    // Issue 28 item 4: a lease value (ours) and `already-held` (Jepsen's) in one history.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixed.csv");
    std::fs::write(
        &path,
        "index,time_ns,process,type,f,key,value,token,node,error\n\
         0,1000000,0,invoke,acquire,a,5000,,,\n\
         1,2000000,0,ok,acquire,a,,,,\n\
         2,3000000,1,invoke,acquire,a,,,,\n\
         3,4000000,1,fail,acquire,a,,,,already-held\n",
    )
    .unwrap();
    let (code, out, _) = check(&CheckArgs::new(path));
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("row 0 has a lease value"), "{out}");
    assert!(
        out.contains("row 3 an error word of Jepsen's mutex"),
        "{out}"
    );
}

/// A seeded fuzz of `locksmith check` and `locksmith convert`: valid histories of each
/// format, mutated (truncated, a byte flipped, a line deleted, duplicated or two swapped),
/// never panic, and every run ends in one of the documented outcomes: 0 with `: valid (`,
/// 1 with `: invalid (`, or 2 with `: unknown (` or an error naming the file and line.
/// `LOCKSMITH_FUZZ_SEED=N` replays one seed; a failure prints its seed.
mod fuzz {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    use std::path::Path;

    use super::{case, check};
    use checker::cli::run_convert;
    use nemesis::check::CheckArgs;

    /// Mutated inputs per base history.
    const ROUNDS: u64 = 200;

    /// splitmix64: a small seeded generator, so that a seed replays exactly.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }
    }

    /// One random mutation of `bytes`, described for the failure message.
    fn mutate(rng: &mut Rng, bytes: &mut Vec<u8>) -> String {
        let mut lines: Vec<Vec<u8>> = bytes.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
        let line = rng.below(lines.len());
        let other = rng.below(lines.len());
        let description = match rng.below(5) {
            0 => {
                let at = rng.below(bytes.len() + 1);
                bytes.truncate(at);
                return format!("truncate at byte {at}");
            }
            1 => {
                let at = rng.below(bytes.len());
                if let Some(byte) = bytes.get_mut(at) {
                    *byte ^= 1 << rng.below(8);
                }
                return format!("flip a bit of byte {at}");
            }
            2 => {
                lines.remove(line);
                format!("delete line {}", line + 1)
            }
            3 => {
                lines.insert(other, lines[line].clone());
                format!("copy line {} before line {}", line + 1, other + 1)
            }
            _ => {
                lines.swap(line, other);
                format!("swap lines {} and {}", line + 1, other + 1)
            }
        };
        *bytes = lines.join(&b'\n');
        description
    }

    /// Checks `path` and asserts the documented outcome; `context` names the case.
    fn assert_check_outcome(path: &Path, context: &str) {
        let run = catch_unwind(AssertUnwindSafe(|| check(&CheckArgs::new(path.to_owned()))));
        let Ok((code, out, err)) = run else {
            panic!("{context}: check panicked");
        };
        let file = path.display().to_string();
        let outcome_ok = match code {
            0 => out.contains(": valid ("),
            1 => out.contains(": invalid ("),
            2 => out.contains(": unknown (") || err.starts_with(&format!("{file}:")),
            _ => false,
        };
        assert!(
            outcome_ok,
            "{context}: exit {code}\nstdout: {out}\nstderr: {err}"
        );
        assert!(
            !out.contains("panicked"),
            "{context}: a check panicked\n{out}"
        );
    }

    /// Converts `input` from `from` and checks the output; asserts the documented outcome.
    fn assert_convert_outcome(from: &str, input: &Path, context: &str) {
        let output = input.with_extension("out.csv");
        let _ = std::fs::remove_file(&output);
        let mut err = Vec::new();
        let run = catch_unwind(AssertUnwindSafe(|| {
            run_convert(from, input, &output, &mut err)
        }));
        let Ok(code) = run else {
            panic!("{context}: convert panicked");
        };
        let err = String::from_utf8_lossy(&err);
        match code {
            0 => assert_check_outcome(&output, context),
            2 => assert!(
                err.starts_with(&format!("{}:", input.display())),
                "{context}: convert failed without naming the file and line: {err}"
            ),
            _ => panic!("{context}: convert exit {code}: {err}"),
        }
    }

    fn base_seed() -> Option<u64> {
        std::env::var("LOCKSMITH_FUZZ_SEED")
            .ok()
            .map(|s| s.parse().expect("LOCKSMITH_FUZZ_SEED is a number"))
    }

    /// Runs `one(seed, bytes)` on ROUNDS mutations of `base` (or only the seed asked for).
    fn fuzz(name: &str, base: &[u8], mut one: impl FnMut(&str, &[u8])) {
        let seeds: Vec<u64> = match base_seed() {
            Some(seed) => vec![seed],
            None => (1..=ROUNDS).collect(),
        };
        for seed in seeds {
            let mut rng = Rng(seed);
            let mut bytes = base.to_vec();
            let mutations: Vec<String> = (0..1 + rng.below(3))
                .map(|_| mutate(&mut rng, &mut bytes))
                .collect();
            let context = format!(
                "{name} seed {seed} ({}; rerun: LOCKSMITH_FUZZ_SEED={seed} cargo test -p nemesis --test check_cli fuzz)",
                mutations.join(", ")
            );
            one(&context, &bytes);
        }
    }

    #[test]
    fn mutated_csv_histories_end_in_a_documented_outcome() {
        let dir = tempfile::tempdir().unwrap();
        for base in [
            "lock/valid/faults_between_holders.csv",
            "lock/valid/info_acquire_amid_later_grants.csv",
            "register/valid/cas_chain.csv",
            "mutex/valid/release_by_another_process.csv",
        ] {
            let text = std::fs::read(case(base)).unwrap();
            let path = dir.path().join("mutated.csv");
            fuzz(base, &text, |context, bytes| {
                std::fs::write(&path, bytes).unwrap();
                assert_check_outcome(&path, context);
            });
        }
    }

    #[test]
    fn mutated_foreign_histories_end_in_a_documented_outcome() {
        let jepsen = "\
{:index 0, :time 1000, :type :invoke, :process 0, :f :write, :value 1}
{:index 1, :time 1500, :type :ok, :process 0, :f :write, :value 1}
{:index 2, :time 1600, :type :info, :process :nemesis, :f :start-partition, :value [\"n1\" \"n2\"]}
{:index 3, :time 2000, :type :invoke, :process 1, :f :cas, :value [1 2]}
{:index 4, :time 2100, :type :invoke, :process 2, :f :write, :value 3}
{:index 5, :time 2300, :type :info, :process 2, :f :write, :value 3, :error :timeout}
{:index 6, :time 2500, :type :ok, :process 1, :f :cas, :value [1 2]}
{:index 7, :time 2700, :type :invoke, :process 7, :f :read, :value nil}
{:index 8, :time 2800, :type :ok, :process 7, :f :read, :value 3}
";
        let independent = "\
[{:type :invoke, :process 0, :f :write, :value [1 5]}
 {:type :ok, :process 0, :f :write, :value [1 5]}
 {:type :invoke, :process 1, :f :cas, :value [1 [5 6]]}
 {:type :invoke, :process 0, :f :read, :value [2 nil]}
 {:type :ok, :process 0, :f :read, :value [2 nil]}
 {:type :fail, :process 1, :f :cas, :value [1 [5 6]]}]
";
        let etcd = "\
INFO  jepsen.util - 0\t:invoke\t:write\t1
INFO  jepsen.util - 1\t:invoke\t:read\tnil
INFO  jepsen.util - 0\t:ok\t:write\t1
INFO  jepsen.util - 1\t:ok\t:read\t1
INFO  jepsen.util - 2\t:invoke\t:cas\t[1 4]
INFO  jepsen.util - 2\t:fail\t:cas\t[1 4]
INFO  jepsen.util - 3\t:invoke\t:write\t2
INFO  jepsen.util - 3\t:info\t:write\t:timed-out
";
        let kv = "\
{:process 0, :type :invoke, :f :put, :key \"0\", :value \"x\"}
{:process 1, :type :invoke, :f :get, :key \"0\", :value nil}
{:process 0, :type :ok, :f :put, :key \"0\", :value \"x\"}
{:process 1, :type :ok, :f :get, :key \"0\", :value \"x\"}
{:process 0, :type :invoke, :f :append, :key \"1\", :value \"y\"}
{:process 0, :type :ok, :f :append, :key \"1\", :value \"y\"}
";
        let dir = tempfile::tempdir().unwrap();
        for (from, base) in [
            ("jepsen-edn", jepsen),
            ("jepsen-edn", independent),
            ("porcupine-etcd", etcd),
            ("porcupine-kv", kv),
        ] {
            let path = dir.path().join("mutated.txt");
            fuzz(from, base.as_bytes(), |context, bytes| {
                std::fs::write(&path, bytes).unwrap();
                assert_convert_outcome(from, &path, context);
            });
        }
    }
}
