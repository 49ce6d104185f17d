//! `locksmith check` and `locksmith convert` through `checker::cli`: DESIGN "The command
//! line" exit codes (0 valid, 1 invalid, 2 unknown or could not run) and messages.

use std::path::{Path, PathBuf};

use checker::cli::{CheckArgs, run_check, run_convert};

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
