//! Jepsen `history.edn` as Jepsen writes it (`locksmith convert --from jepsen-edn`).

use checker::{ModelKind, Options, Verdict};

use crate::{convert_and_check, unknown_reason};

/// A linearizable cas-register history with what a real `history.edn` has: `:index` and
/// `:time`, a nemesis (keyword process, string and map values, a set), a crashed write
/// (`:info`) whose process is replaced by a new id, a completion out of order, a comment,
/// a blank line, a `#jepsen.history.Op` record, trailing spaces and Windows line ends.
const REGISTER_VALID: &str = "\
; history.edn written by jepsen 0.3\r
{:index 0, :time 1000, :type :invoke, :process 0, :f :write, :value 1}\r
{:index 1, :time 1500, :type :ok, :process 0, :f :write, :value 1}   \r
{:index 2, :time 1600, :type :info, :process :nemesis, :f :start-partition, :value :majority}\r
{:index 3, :time 1700, :type :info, :process :nemesis, :f :start-partition, :value {\"n1\" #{\"n2\" \"n3\"}, \"n2\" #{\"n1\"}}}\r
\r
#jepsen.history.Op{:index 4, :time 2000, :type :invoke, :process 1, :f :cas, :value [1 2]}\r
{:index 5, :time 2100, :type :invoke, :process 2, :f :write, :value 3}\r
{:index 6, :time 2200, :type :invoke, :process 0, :f :read, :value nil}\r
{:index 7, :time 2300, :type :info, :process 2, :f :write, :value 3, :error [:timeout \"no answer, after 1s\"]}\r
{:index 8, :time 2400, :type :ok, :process 0, :f :read, :value 2}\r
{:index 9, :time 2500, :type :ok, :process 1, :f :cas, :value [1 2]}\r
{:index 10, :time 2600, :type :info, :process :nemesis, :f :stop-partition, :value \"fully connected\"}\r
{:index 11, :time 2700, :type :invoke, :process 7, :f :read, :value nil}\r
{:index 12, :time 2800, :type :ok, :process 7, :f :read, :value 3}\r
";

#[test]
fn a_realistic_jepsen_register_history_is_valid() {
    // init: the history above; act: convert and check; check: valid, register inferred.
    let check = convert_and_check("jepsen-edn", REGISTER_VALID).unwrap();
    assert_eq!(check.verdict, Verdict::Valid, "{check:?}");
    assert_eq!(check.model, Some(ModelKind::Register));
}

#[test]
fn the_same_history_as_one_vector_gets_the_same_verdict() {
    // Jepsen also writes the history as one EDN vector of ops.
    let text = format!(
        "[{}]",
        REGISTER_VALID.replace("; history.edn written by jepsen 0.3", "")
    );
    let check = convert_and_check("jepsen-edn", &text).unwrap();
    assert_eq!(check.verdict, Verdict::Valid, "{check:?}");
}

#[test]
fn a_stale_read_in_the_realistic_history_is_invalid() {
    // The read at index 12 comes after the cas to 2 completed and the crashed write of 3
    // was invoked: it may read 2 or 3, never 1.
    let text = REGISTER_VALID.replace(
        ":process 7, :f :read, :value 3",
        ":process 7, :f :read, :value 1",
    );
    let check = convert_and_check("jepsen-edn", &text).unwrap();
    assert_eq!(check.verdict, Verdict::Invalid, "{check:?}");
}

#[test]
fn a_truncated_last_op_is_an_error_naming_its_line() {
    // A crashed writer leaves half a map: the history is not all there, so no verdict.
    let text = "{:type :invoke, :f :write, :process 0, :value 1}\n{:type :ok, :f :write, :pro";
    let error = convert_and_check("jepsen-edn", text).unwrap_err();
    assert!(error.contains("line 2: unexpected end of input"), "{error}");
    let text = "[{:type :invoke, :f :write, :process 0, :value 1}\n{:type :ok, :f :write, :process 0, :value 1}\n";
    let error = convert_and_check("jepsen-edn", text).unwrap_err();
    assert!(
        error.contains("line 3: unexpected end of input, expected `]`"),
        "{error}"
    );
}

#[test]
fn a_process_that_invokes_again_after_info_is_an_error_naming_the_line() {
    // Jepsen gives a crashed process a new id; a history that reuses it is not Jepsen's
    // and the checker cannot tell which op the later completion belongs to.
    let text = "\
{:type :invoke, :f :write, :process 0, :value 1}
{:type :info, :f :write, :process 0, :value 1}
{:type :invoke, :f :read, :process 0, :value nil}
{:type :ok, :f :read, :process 0, :value 1}
";
    let error = convert_and_check("jepsen-edn", text).unwrap_err();
    assert!(
        error.contains("line 3: process 0 invokes after its op ended `info`"),
        "{error}"
    );
}

#[test]
fn an_open_op_at_the_end_may_or_may_not_have_happened() {
    // histories/README.md: an op still open at the end is indeterminate, like info.
    let text = "\
{:type :invoke, :f :write, :process 0, :value 1}
{:type :invoke, :f :read, :process 1, :value nil}
{:type :ok, :f :read, :process 1, :value 1}
{:type :invoke, :f :read, :process 2, :value nil}
{:type :ok, :f :read, :process 2, :value 1}
";
    let check = convert_and_check("jepsen-edn", text).unwrap();
    assert_eq!(check.verdict, Verdict::Valid, "{check:?}");
}

#[test]
fn strings_with_commas_quotes_and_escapes_survive_the_csv() {
    // A value `a,b"c\n` is one value: the read of it matches the write.
    let text = "\
{:type :invoke, :f :write, :process 0, :value \"a,b\\\"c\\n\"}
{:type :invoke, :f :read, :process 1, :value nil}
{:type :ok, :f :read, :process 1, :value \"a,b\\\"c\\n\"}
{:type :ok, :f :write, :process 0, :value \"a,b\\\"c\\n\"}
";
    let check = convert_and_check("jepsen-edn", text).unwrap();
    assert_eq!(check.verdict, Verdict::Valid, "{check:?}");
}

#[test]
fn a_namespaced_f_is_unknown_naming_the_row() {
    // An op no model knows is never checked as something else.
    let text = "\
{:type :invoke, :f :jepsen.lock/acquire, :process 0, :value nil}
{:type :ok, :f :jepsen.lock/acquire, :process 0, :value nil}
";
    let check = convert_and_check("jepsen-edn", text).unwrap();
    let reason = unknown_reason(&check);
    assert!(
        reason.contains("row 0: op `jepsen.lock/acquire` belongs to no model"),
        "{reason}"
    );
}

#[test]
fn a_jepsen_mutex_history_with_a_double_grant_is_invalid() {
    // knossos's mutex: two acquires ok with no release between is two holders.
    let text = "\
{:index 0, :time 1000, :type :invoke, :process 0, :f :acquire, :value nil}
{:index 1, :time 2000, :type :ok, :process 0, :f :acquire, :value nil}
{:index 2, :time 2500, :type :info, :process :nemesis, :f :start, :value nil}
{:index 3, :time 3000, :type :invoke, :process 1, :f :acquire, :value nil}
{:index 4, :time 4000, :type :ok, :process 1, :f :acquire, :value nil}
";
    let check = convert_and_check("jepsen-edn", text).unwrap();
    assert_eq!(check.verdict, Verdict::Invalid, "{check:?}");
    assert_eq!(check.model, Some(ModelKind::Mutex));
    let fixed = text.replace(
        "{:index 3,",
        "{:index 2, :time 2600, :type :invoke, :process 0, :f :release, :value nil}\n\
         {:index 2, :time 2700, :type :ok, :process 0, :f :release, :value nil}\n{:index 3,",
    );
    let check = convert_and_check("jepsen-edn", &fixed).unwrap();
    assert_eq!(check.verdict, Verdict::Valid, "{check:?}");
}

/// A `jepsen.independent` register history: every value is a `[key value]` tuple (Jepsen
/// prints `independent/tuple` as a two-element vector), keys 1 and 2 written apart, each
/// read back. Linearizable per key.
const INDEPENDENT_VALID: &str = "\
{:index 0, :time 10, :type :invoke, :process 0, :f :write, :value [1 5]}
{:index 1, :time 20, :type :ok, :process 0, :f :write, :value [1 5]}
{:index 2, :time 30, :type :invoke, :process 1, :f :write, :value [2 6]}
{:index 3, :time 40, :type :ok, :process 1, :f :write, :value [2 6]}
{:index 4, :time 50, :type :invoke, :process 0, :f :read, :value [1 nil]}
{:index 5, :time 60, :type :ok, :process 0, :f :read, :value [1 5]}
{:index 6, :time 70, :type :invoke, :process 1, :f :cas, :value [2 [6 7]]}
{:index 7, :time 80, :type :ok, :process 1, :f :cas, :value [2 [6 7]]}
{:index 8, :time 90, :type :invoke, :process 0, :f :read, :value [2 nil]}
{:index 9, :time 95, :type :fail, :process 0, :f :read, :value [2 nil], :error :timeout}
{:index 10, :time 100, :type :invoke, :process 0, :f :read, :value [2 nil]}
{:index 11, :time 110, :type :ok, :process 0, :f :read, :value [2 7]}
";

#[test]
fn independent_key_value_tuples_are_checked_per_key() {
    // jepsen.independent: `[k v]` is key k, value v; `[k [old new]]` is a cas on key k.
    // Read as one register, the read of key 1 would see key 2's write: a false alarm.
    let writes_and_a_read: String = INDEPENDENT_VALID
        .lines()
        .take(6)
        .map(|l| format!("{l}\n"))
        .collect();
    let check = convert_and_check("jepsen-edn", &writes_and_a_read).unwrap();
    assert_eq!(check.verdict, Verdict::Valid, "{check:?}");
    let check = convert_and_check("jepsen-edn", INDEPENDENT_VALID).unwrap();
    assert_eq!(check.verdict, Verdict::Valid, "{check:?}");
    assert_eq!(check.model, Some(ModelKind::Register));
    // A stale read on key 1 is still found.
    let stale = INDEPENDENT_VALID.replace(":value [1 5]}\n{:index 6", ":value [1 4]}\n{:index 6");
    let check = convert_and_check("jepsen-edn", &stale).unwrap();
    assert_eq!(check.verdict, Verdict::Invalid, "{check:?}");
}

#[test]
fn a_history_that_mixes_tuples_and_plain_values_is_an_error_naming_the_line() {
    // Half tuples, half plain values: no reading of the keys is safe.
    let text = "\
{:type :invoke, :f :write, :process 0, :value [1 5]}
{:type :ok, :f :write, :process 0, :value [1 5]}
{:type :invoke, :f :write, :process 1, :value 3}
{:type :ok, :f :write, :process 1, :value 3}
";
    let error = convert_and_check("jepsen-edn", text).unwrap_err();
    assert!(error.contains("line 3:"), "{error}");
    assert!(error.contains("tuple"), "{error}");
}

#[test]
fn string_escapes_that_clojure_writes_are_read() {
    // Clojure's reader takes `\uXXXX`, `\b` and `\f` (and `pr` writes the last two); a
    // history with one was rejected as "unsupported escape".
    let text = "\
{:type :invoke, :f :write, :process 0, :value \"caf\\u00e9\\b\\f\"}
{:type :ok, :f :write, :process 0, :value \"caf\\u00e9\\b\\f\"}
{:type :invoke, :f :read, :process 1, :value nil}
{:type :ok, :f :read, :process 1, :value \"café\\u0008\\u000c\"}
";
    let check = convert_and_check("jepsen-edn", text).unwrap();
    assert_eq!(check.verdict, Verdict::Valid, "{check:?}");
    let error = convert_and_check("jepsen-edn", "{:f :read, :value \"\\u00zz\"}").unwrap_err();
    assert!(error.contains("line 1:"), "{error}");
}

#[test]
fn a_map_with_a_key_twice_is_an_error_naming_the_line() {
    // `{:type :invoke ... :type :ok}`: Clojure's reader refuses it; taking either value
    // would check an op the writer may not have meant.
    let text = "{:type :invoke, :f :write, :process 0, :value 1}\n\
                {:type :invoke, :f :write, :process 0, :value 1, :type :ok}\n";
    let error = convert_and_check("jepsen-edn", text).unwrap_err();
    assert!(error.contains("line 2: duplicate key `:type`"), "{error}");
}

#[test]
fn a_history_whose_every_op_failed_is_not_checked() {
    // In Jepsen a `:fail` op did not happen, so the register and the mutex leave it out;
    // with every op failed nothing is left to check. The rule "never silently valid" (as
    // for a history of only open or `info` ops): unknown, not valid.
    let register = "\
{:type :invoke, :f :write, :process 0, :value 5}
{:type :fail, :f :write, :process 0, :value 5}
{:type :invoke, :f :cas, :process 1, :value [1 2]}
{:type :fail, :f :cas, :process 1, :value [1 2]}
{:type :invoke, :f :read, :process 2, :value nil}
{:type :fail, :f :read, :process 2, :value nil}
";
    let check = convert_and_check("jepsen-edn", register).unwrap();
    assert_eq!(check.model, Some(ModelKind::Register));
    let reason = unknown_reason(&check);
    assert!(reason.contains("not checked"), "{reason}");
    let mutex = "\
{:type :invoke, :f :acquire, :process 0, :value nil}
{:type :fail, :f :acquire, :process 0, :value nil}
{:type :invoke, :f :release, :process 1, :value nil}
{:type :fail, :f :release, :process 1, :value nil, :error :not-held}
";
    let check = convert_and_check("jepsen-edn", mutex).unwrap();
    assert_eq!(check.model, Some(ModelKind::Mutex));
    let reason = unknown_reason(&check);
    assert!(reason.contains("not checked"), "{reason}");
}

#[test]
fn info_writes_and_reads_of_unknown_value_are_not_checked() {
    // With `--init 0` (knossos's `(cas-register 0)`) an ok read of nil is a read of
    // unknown value and constrains nothing; the only other op is a crashed write. Nothing
    // is left that could fail, exactly as in a history of only `info` ops: unknown.
    let text = "\
{:type :invoke, :f :write, :process 0, :value 5}
{:type :info, :f :write, :process 0, :value 5, :error :timeout}
{:type :invoke, :f :read, :process 1, :value nil}
{:type :ok, :f :read, :process 1, :value nil}
";
    let ops = checker::cli::convert_text("jepsen-edn", text).unwrap();
    let options = Options::for_model(ModelKind::Register).with_init(Some("0".into()));
    let check = checker::check(&ops, &options).unwrap();
    let reason = unknown_reason(&check);
    assert!(reason.contains("not checked"), "{reason}");
}

#[test]
fn equal_maps_and_sets_printed_in_another_order_are_one_value() {
    // Clojure prints a small map in insertion order and a set in hash order, so one value
    // may be written `{:a 1, :b 2}` by one op and `{:b 2, :a 1}` by another; knossos
    // compares values with `=`. Compared as the text written, the read below was a false
    // alarm.
    let text = "\
{:type :invoke, :f :write, :process 0, :value {:a 1, :b #{3 4}}}
{:type :ok, :f :write, :process 0, :value {:a 1, :b #{3 4}}}
{:type :invoke, :f :read, :process 1, :value nil}
{:type :ok, :f :read, :process 1, :value {:b #{4 3}, :a 1}}
";
    let check = convert_and_check("jepsen-edn", text).unwrap();
    assert_eq!(check.verdict, Verdict::Valid, "{check:?}");
    // A map with another value is another value.
    let other = text.replace("{:b #{4 3}, :a 1}", "{:b #{4 5}, :a 1}");
    let check = convert_and_check("jepsen-edn", &other).unwrap();
    assert_eq!(check.verdict, Verdict::Invalid, "{check:?}");
}

#[test]
fn leases_without_real_times_are_an_error_never_a_false_alarm() {
    // No `:time`: the converter times the ops by their file position, 1 ns apart, so a
    // lease of 1000 ms never runs out within the history, and the second grant (which in
    // real time may come long after the first lease ran out) was called two holders:
    // invalid, exit 1. A lease can only be judged on real times.
    let text = "\
{:type :invoke, :f :acquire, :process 0, :lease-ms 1000}
{:type :ok, :f :acquire, :process 0, :token 3}
{:type :invoke, :f :acquire, :process 1, :lease-ms 1000}
{:type :ok, :f :acquire, :process 1, :token 4}
";
    let error = convert_and_check("jepsen-edn", text).unwrap_err();
    assert!(error.contains("line 1:"), "{error}");
    assert!(error.contains(":time"), "{error}");
    // Real ns times, the second grant 10 s after the first: valid. With one tie (an
    // invoke and its completion in the same ns) the times were all replaced by positions
    // and the same history was invalid.
    let timed = "\
{:type :invoke, :f :acquire, :process 0, :lease-ms 1000, :time 0}
{:type :ok, :f :acquire, :process 0, :token 3, :time 1000000}
{:type :invoke, :f :acquire, :process 1, :lease-ms 1000, :time 10000000000}
{:type :ok, :f :acquire, :process 1, :token 4, :time 10000000001}
";
    let check = convert_and_check("jepsen-edn", timed).unwrap();
    assert_eq!(check.verdict, Verdict::Valid, "{check:?}");
    let tie = timed.replace(":time 10000000001", ":time 10000000000");
    match convert_and_check("jepsen-edn", &tie) {
        Ok(check) => assert_ne!(check.verdict, Verdict::Invalid, "{check:?}"),
        Err(error) => assert!(error.contains(":time"), "{error}"),
    }
}
