//! CSV in locksmith's own schema (v1), written by hand, with the variants other writers
//! produce.

use checker::Verdict;
use history::CheckName;

use crate::{check_csv, csv_text};

/// Two sequential holders of key `KEY`, the second acquiring after the first released.
fn two_holders_one_after_the_other(key: &str) -> String {
    csv_text(&[
        &format!("0,10,0,invoke,acquire,{key},5000,,,"),
        &format!("1,20,0,ok,acquire,{key},,1,n1,"),
        &format!("2,30,0,invoke,release,{key},,1,,"),
        &format!("3,40,0,ok,release,{key},,,,"),
        &format!("4,50,1,invoke,acquire,{key},5000,,,"),
        &format!("5,60,1,ok,acquire,{key},,2,n1,"),
    ])
}

/// Two holders of key `KEY` at once: no release, well within the lease.
fn two_holders_at_once(key: &str) -> String {
    csv_text(&[
        &format!("0,10,0,invoke,acquire,{key},5000,,,"),
        &format!("1,20,0,ok,acquire,{key},,1,n1,"),
        &format!("2,30,1,invoke,acquire,{key},5000,,,"),
        &format!("3,40,1,ok,acquire,{key},,2,n1,"),
    ])
}

#[test]
fn crlf_line_ends_and_quoted_fields_read_like_plain_ones() {
    let plain = two_holders_one_after_the_other("k1");
    let crlf = plain.replace('\n', "\r\n");
    let quoted = plain
        .replace(",k1,", ",\"k1\",")
        .replace("5000", "\"5000\"");
    for text in [plain, crlf, quoted] {
        let check = check_csv(&text).unwrap();
        assert_eq!(check.verdict, Verdict::Valid, "{text}: {check:?}");
    }
}

#[test]
fn empty_and_unicode_keys_are_keys_like_any_other() {
    for key in ["", "ключ🔒", "\"a,b\"", "\"two\nlines\""] {
        let check = check_csv(two_holders_one_after_the_other(key)).unwrap();
        assert_eq!(check.verdict, Verdict::Valid, "key {key:?}: {check:?}");
        let check = check_csv(two_holders_at_once(key)).unwrap();
        assert_eq!(check.verdict, Verdict::Invalid, "key {key:?}: {check:?}");
    }
}

#[test]
fn header_variants_are_errors_naming_line_1() {
    // Schema v1's header is exact: another header may mean other columns.
    let body = two_holders_one_after_the_other("k1");
    let body = body.split_once('\n').unwrap().1;
    for (header, reason) in [
        (
            "INDEX,TIME_NS,PROCESS,TYPE,F,KEY,VALUE,TOKEN,NODE,ERROR",
            "1:1: unknown column `INDEX`",
        ),
        (
            "index, time_ns,process,type,f,key,value,token,node,error",
            "1:7: unknown column ` time_ns`",
        ),
        (
            "index,time_ns,process,type,f,key,value,token,node",
            "missing column",
        ),
        (
            "index,process,time_ns,type,f,key,value,token,node,error",
            "1:7: unknown column `process`",
        ),
        (
            "0,10,0,invoke,acquire,k1,5000,,,",
            "1:1: unknown column `0`",
        ),
    ] {
        let error = check_csv(format!("{header}\n{body}")).unwrap_err();
        assert!(error.contains(reason), "{header}: {error}");
    }
}

#[test]
fn an_extra_column_is_an_error_naming_it() {
    let text = two_holders_one_after_the_other("k1")
        .replace("node,error", "node,error,note")
        .replace(",,\n", ",,,x\n");
    let error = check_csv(text).unwrap_err();
    assert!(
        error.contains("1:57: extra column `note` after `error`"),
        "{error}"
    );
}

#[test]
fn rows_that_break_the_schema_are_errors_naming_line_and_column() {
    for (rows, reason) in [
        (
            &[
                "0,10,0,invoke,acquire,k,5000,,,",
                "0,20,0,ok,acquire,k,,1,,",
            ][..],
            "3:1: index 0 where 1 was expected",
        ),
        (
            &[
                "0,10,0,ok,acquire,k,,1,,",
                "1,20,0,invoke,acquire,k,5000,,,",
            ],
            "2:8: `ok` by process 0 with no open invoke",
        ),
        (
            &["0,10,0,invoke,acquire,k,5000,,,", "1,5,0,ok,acquire,k,,1,,"],
            "3:3: time_ns 5 is before the previous op's 10",
        ),
        (
            &["0,18446744073709551616,0,invoke,acquire,k,5000,,,"],
            "2:3: time_ns `18446744073709551616` is not a non-negative integer",
        ),
        (
            &[
                "0,10,0,invoke,acquire,k,5000,,,",
                "1,20,0,ok,acquire,k,,-1,,",
            ],
            "3:22: token `-1` is not a non-negative integer",
        ),
        (&["0,-10,0,invoke,acquire,k,5000,,,"], "2:3: time_ns `-10`"),
        (&["0,10,-1,invoke,acquire,k,5000,,,"], "2:6: process `-1`"),
    ] {
        let error = check_csv(csv_text(rows)).unwrap_err();
        assert!(error.contains(reason), "{rows:?}: {error}");
    }
}

#[test]
fn the_largest_numbers_check_without_overflow() {
    // Times, tokens and leases at u64::MAX: no panic, and the verdicts of small numbers.
    let max = u64::MAX;
    let text = csv_text(&[
        &format!("0,1,0,invoke,acquire,k,{max},,,"),
        &format!("1,{max},0,ok,acquire,k,,{},n1,", max - 1),
        &format!("2,{max},1,invoke,acquire,k,{max},,,"),
        &format!("3,{max},1,fail,acquire,k,,,,busy"),
        &format!("4,{max},0,invoke,write,k,v,{},,", max - 1),
        &format!("5,{max},0,ok,write,k,,,,"),
    ]);
    let check = check_csv(text).unwrap();
    assert_eq!(check.verdict, Verdict::Valid, "{check:?}");
}

#[test]
fn an_acquire_value_that_is_no_lease_is_unknown_never_a_false_alarm() {
    // Two grants 10 000 s apart: with any lease a user may have meant (`5000.5` ms,
    // `1000ms`), the first has long expired. Read as "no lease" (held until released),
    // lease safety called it two holders: the history must be unknown, naming the row.
    // Without tokens the same history was read as Jepsen's mutex, which has no leases.
    let values = [
        "5000.5",
        "1000ms",
        "-5",
        "5000 800 3",
        "99999999999999999999",
        "1000 nil",
    ];
    for (value, tokens) in values.iter().flat_map(|v| [(v, ["1", "2"]), (v, ["", ""])]) {
        let text = csv_text(&[
            &format!("0,1,0,invoke,acquire,k,{value},,,"),
            &format!("1,2,0,ok,acquire,k,,{},n1,", tokens[0]),
            &format!("2,10000000000000,1,invoke,acquire,k,{value},,,"),
            &format!("3,10000000000001,1,ok,acquire,k,,{},n1,", tokens[1]),
        ]);
        let check = check_csv(&text).unwrap();
        let reason = crate::unknown_reason(&check);
        assert!(
            reason.contains(&format!("row 0: acquire value `{value}`")),
            "{value}: {reason}"
        );
        assert_ne!(
            crate::result_of(&check, CheckName::LeaseSafety),
            Some(&Verdict::Invalid),
            "{value}: {check:?}"
        );
    }
}

#[test]
fn a_huge_wait_never_overflows_into_a_false_alarm() {
    // `wait_ms * 1e6` past u64::MAX: it panicked in debug builds (liveness unknown, a panic
    // on stderr) and wrapped to a deadline of 0.45 ms in release builds, where a waiter
    // answered after 1 s broke "every waiter is answered by its deadline".
    let wait_ms = u64::MAX / 1_000_000 + 1;
    let text = csv_text(&[
        &format!("0,1000,0,invoke,acquire,k,5000 {wait_ms},,,"),
        "1,1000001000,0,ok,acquire,k,,1,n1,",
        "2,1000002000,0,invoke,release,k,,1,,",
        "3,1000003000,0,ok,release,k,,,,",
    ]);
    let check = check_csv(&text).unwrap();
    assert_eq!(check.verdict, Verdict::Valid, "{check:?}");
}

#[test]
fn a_byte_order_mark_is_read_like_no_mark() {
    // Excel and PowerShell write UTF-8 with a BOM. It was read as part of the first
    // column's name (`unknown column `\u{feff}index``, which looks like `index`).
    let plain = two_holders_one_after_the_other("k1");
    let mut marked = "\u{feff}".as_bytes().to_vec();
    marked.extend_from_slice(plain.replace('\n', "\r\n").as_bytes());
    let check = check_csv(&marked).unwrap();
    assert_eq!(check.verdict, Verdict::Valid, "{check:?}");
    // A bad row is still named by its line and column.
    let bad = format!("\u{feff}{}", csv_text(&["0,10,0,begin,acquire,k,5000,,,"]));
    let error = check_csv(bad).unwrap_err();
    assert!(error.contains(":2:8: unknown type `begin`"), "{error}");
}

#[test]
fn an_empty_value_written_and_read_back_is_no_false_alarm() {
    // A register write with an empty value cell, then a read whose value cell is empty:
    // the read returns exactly what was written. The empty cell is how the CSV says nil
    // (histories/README.md "register"), and it is also what a Jepsen `:write ""` converts
    // to; either way the history is linearizable.
    let text = csv_text(&[
        "0,10,0,invoke,write,x,,,,",
        "1,20,0,ok,write,x,,,,",
        "2,30,1,invoke,read,x,,,,",
        "3,40,1,ok,read,x,,,,",
    ]);
    let check = check_csv(&text).unwrap();
    assert_eq!(check.verdict, Verdict::Valid, "{check:?}");
    // From Jepsen: `""` written, `""` read.
    let edn = "\
{:type :invoke, :f :write, :process 0, :value \"\"}
{:type :ok, :f :write, :process 0, :value \"\"}
{:type :invoke, :f :read, :process 1, :value nil}
{:type :ok, :f :read, :process 1, :value \"\"}
";
    let check = crate::convert_and_check("jepsen-edn", edn).unwrap();
    assert_eq!(check.verdict, Verdict::Valid, "{check:?}");
    // The twin: after the empty write, a read of 1 is still invalid.
    let text = text.replace("3,40,1,ok,read,x,,,,", "3,40,1,ok,read,x,1,,,");
    let check = check_csv(&text).unwrap();
    assert_eq!(check.verdict, Verdict::Invalid, "{check:?}");
}

#[test]
fn a_release_without_its_token_is_unknown_never_a_false_alarm() {
    // A user's own history whose lock API releases without a token: the grants carry
    // tokens, the releases do not. Process 0 releases (ok) before process 1 is granted, so
    // there were never two holders. The lock model cannot read a tokenless release
    // (unknown, naming the row); lease safety skipped it and reported two holders, "no
    // release of token 1 ... was ever invoked": a false alarm, exit 1.
    let text = csv_text(&[
        "0,1000000,0,invoke,acquire,k,5000,,,",
        "1,2000000,0,ok,acquire,k,,1,n1,",
        "2,3000000,0,invoke,release,k,,,,",
        "3,4000000,0,ok,release,k,,,,",
        "4,5000000,1,invoke,acquire,k,5000,,,",
        "5,6000000,1,ok,acquire,k,,2,n1,",
    ]);
    let check = check_csv(&text).unwrap();
    let reason = crate::unknown_reason(&check);
    assert!(reason.contains("row 2: release has no token"), "{reason}");
    for name in [CheckName::Linearizability, CheckName::LeaseSafety] {
        let verdict = crate::result_of(&check, name).unwrap();
        assert!(
            matches!(verdict, Verdict::Unknown { reason } if reason.contains("row 2")),
            "{name}: {verdict:?}"
        );
    }
}
