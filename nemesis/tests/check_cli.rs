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
