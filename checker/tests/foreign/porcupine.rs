//! Porcupine-style logs (`--from porcupine-etcd`, `--from porcupine-kv`) at their edges.

use checker::Verdict;

use crate::{convert_and_check, unknown_reason};

#[test]
fn an_empty_log_is_unknown_not_valid() {
    // Nothing to check is never valid.
    for from in ["porcupine-etcd", "porcupine-kv"] {
        for text in ["", "\n\n", "\r\n"] {
            let check = convert_and_check(from, text).unwrap();
            let reason = unknown_reason(&check);
            assert!(
                reason.contains("nothing was checked"),
                "{from} {text:?}: {reason}"
            );
        }
    }
}

#[test]
fn a_log_of_invokes_only_is_unknown_since_nothing_completed() {
    // Every op is open, so each may or may not have happened: any order works (Porcupine
    // and knossos both say linearizable). Nothing was checked, and a checker with nothing
    // to check says `unknown`, never `valid`.
    let etcd =
        "INFO  jepsen.util - 0\t:invoke\t:read\tnil\nINFO  jepsen.util - 1\t:invoke\t:write\t3\n";
    let kv = "{:process 0, :type :invoke, :f :get, :key \"0\", :value nil}\n\
              {:process 1, :type :invoke, :f :put, :key \"0\", :value \"x\"}\n";
    for (from, log) in [("porcupine-etcd", etcd), ("porcupine-kv", kv)] {
        let check = convert_and_check(from, log).unwrap();
        let Verdict::Unknown { reason } = &check.verdict else {
            panic!("{from}: {check:?}");
        };
        assert!(
            reason.contains("no operation completed"),
            "{from}: {reason}"
        );
    }
}

#[test]
fn missing_returns_still_constrain_the_completed_ops() {
    // The write of 1 never returned; a later read of 2 nobody wrote is still invalid, and
    // a read of 1 is valid (the open write may have happened).
    let log = |read: &str| {
        format!(
            "INFO  jepsen.util - 0\t:invoke\t:write\t1\n\
             INFO  jepsen.util - 1\t:invoke\t:read\tnil\n\
             INFO  jepsen.util - 1\t:ok\t:read\t{read}\n"
        )
    };
    let check = convert_and_check("porcupine-etcd", &log("1")).unwrap();
    assert_eq!(check.verdict, Verdict::Valid, "{check:?}");
    let check = convert_and_check("porcupine-etcd", &log("2")).unwrap();
    assert_eq!(check.verdict, Verdict::Invalid, "{check:?}");
}

#[test]
fn a_return_without_its_call_is_an_error_naming_the_line() {
    let log = "INFO  jepsen.util - 0\t:invoke\t:write\t1\nINFO  jepsen.util - 3\t:ok\t:write\t1\n";
    let error = convert_and_check("porcupine-etcd", log).unwrap_err();
    assert!(
        error.contains("line 2: `ok` by process 3 with no open invoke"),
        "{error}"
    );
    let kv = "{:process 0, :type :ok, :f :get, :key \"0\", :value \"\"}\n";
    let error = convert_and_check("porcupine-kv", kv).unwrap_err();
    assert!(
        error.contains("line 1: `ok` by process 0 with no open invoke"),
        "{error}"
    );
}

#[test]
fn a_cut_off_line_is_an_error_naming_the_line() {
    let log = "INFO  jepsen.util - 0\t:invoke\t:write\t1\nINFO  jepsen.util - 0\t:ok";
    let error = convert_and_check("porcupine-etcd", log).unwrap_err();
    assert!(
        error.contains("line 2: expected PROCESS TYPE F VALUE"),
        "{error}"
    );
    let kv = "{:process 0, :type :invoke, :f :get, :key \"0\", :value nil}\n{:process 0, :type :ok, :f :g";
    let error = convert_and_check("porcupine-kv", kv).unwrap_err();
    assert!(error.contains("line 2: unexpected end of input"), "{error}");
}

#[test]
fn an_ok_that_timed_out_is_an_error_naming_the_line() {
    // `:timed-out` says there is no result; on an `:ok` read it became a read of nil, which
    // after a completed write is a false alarm (and before one, a silent pass).
    let log = "INFO  jepsen.util - 0\t:invoke\t:write\t1\n\
               INFO  jepsen.util - 0\t:ok\t:write\t1\n\
               INFO  jepsen.util - 1\t:invoke\t:read\tnil\n\
               INFO  jepsen.util - 1\t:ok\t:read\t:timed-out\n";
    let error = convert_and_check("porcupine-etcd", log).unwrap_err();
    assert!(error.contains("line 4:"), "{error}");
    assert!(error.contains(":timed-out"), "{error}");
}

#[test]
fn a_value_too_long_for_the_csv_is_a_convert_error_naming_the_line() {
    // kv appends build a value longer than the CSV reader's field bound (1 MiB): `convert`
    // wrote a CSV that `check` then refused (at a CSV line, not the log's), although a
    // converter's output always reads back. The log's line must be named at convert time.
    let chunk = "x".repeat(300_000);
    let mut text = String::new();
    for _ in 0..4 {
        text.push_str(&format!(
            "{{:process 0, :type :invoke, :f :append, :key \"0\", :value \"{chunk}\"}}\n\
             {{:process 0, :type :ok, :f :append, :key \"0\", :value \"{chunk}\"}}\n"
        ));
    }
    let all = chunk.repeat(4);
    text.push_str(&format!(
        "{{:process 1, :type :invoke, :f :get, :key \"0\", :value nil}}\n\
         {{:process 1, :type :ok, :f :get, :key \"0\", :value \"{all}\"}}\n"
    ));
    let error = match checker::cli::convert_text("porcupine-kv", &text) {
        Ok(ops) => panic!(
            "converted {} ops, one with a value too long to read back",
            ops.len()
        ),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("line 10:"), "{error}");
    assert!(error.contains("longer than 1048576 bytes"), "{error}");
}
