//! Every `cases/malformed/NAME.csv` is rejected with exactly the message in `NAME.expect`.
//!
//! Rule: DESIGN.md "Histories (CSV)": the reader rejects bad input with `line:column:
//! reason` and never panics; STYLE.md 12: the CSV reader is tested with malformed input.
//! `LOCKSMITH_REWRITE=1 cargo test -p history --test malformed` rewrites the `.expect`
//! files: only commit a rewrite you understand.

use std::path::{Path, PathBuf};

fn malformed_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("cases/malformed")
}

fn cases() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(malformed_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "csv"))
        .collect();
    paths.sort();
    paths
}

#[test]
fn every_malformed_case_fails_with_its_expected_message() {
    let rewrite = std::env::var_os("LOCKSMITH_REWRITE").is_some();
    let paths = cases();
    assert!(paths.len() >= 20, "only {} malformed cases", paths.len());
    let mut failures = Vec::new();
    for path in &paths {
        let error = match history::csv::read_path(path) {
            Ok(ops) => {
                failures.push(format!("{}: accepted ({} ops)", path.display(), ops.len()));
                continue;
            }
            Err(error) => error,
        };
        assert!(
            error.line >= 1 && error.column >= 1,
            "{}: {error}",
            path.display()
        );
        let message = error.to_string();
        let expect_path = path.with_extension("expect");
        if rewrite {
            std::fs::write(&expect_path, format!("{message}\n")).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expect_path)
            .unwrap_or_else(|e| panic!("{}: {e}", expect_path.display()));
        if expected.trim_end_matches('\n') != message {
            failures.push(format!(
                "{}:\n  expected {}\n  found    {message}",
                path.display(),
                expected.trim_end()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_expect_file_has_its_case() {
    // Rule: STYLE.md 6: a case is its files; a stray `.expect` is a case that was lost.
    for entry in std::fs::read_dir(malformed_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "expect") {
            assert!(
                path.with_extension("csv").is_file(),
                "{} has no .csv",
                path.display()
            );
        }
    }
}

#[test]
fn the_fast_reader_accepts_and_rejects_exactly_what_the_strict_one_does() {
    // Issue 12 "streaming CSV reader": the csv-crate fast path gives up on anything the
    // strict reader might read otherwise, so both give the same ops and the same errors.
    let cases = Path::new(env!("CARGO_MANIFEST_DIR")).join("cases");
    let mut files = Vec::new();
    let mut stack = vec![cases];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "csv") {
                files.push(path);
            }
        }
    }
    assert!(files.len() > 60, "only {} case files", files.len());
    for path in files {
        let strict = history::csv::read_path(&path)
            .map(|ops| history::pair::pair_with_faults(&ops).unwrap());
        let fast = history::csv::read_paired_path(&path);
        match (strict, fast) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{}", path.display()),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{}", path.display()),
            (a, b) => panic!("{}: strict {a:?}, fast {b:?}", path.display()),
        }
    }
}

#[test]
fn the_fast_reader_agrees_with_the_strict_one_on_line_ends_and_odd_bytes() {
    // Issue 12 "streaming CSV reader": inputs the fast path must either read exactly as the
    // strict reader does or hand back to it: CRLF, a last line without a line end, a lone
    // `\r` at the end of the file and inside a cell, non-ASCII cells, a blank last line.
    let header = history::csv::HEADER;
    let rows = [
        "0,5,0,invoke,acquire,ké,5000,,,",
        "1,9,0,fail,acquire,ké,,,n1,busy",
    ];
    let inputs = [
        format!("{header}\r\n{}\r\n{}\r\n", rows[0], rows[1]),
        format!("{header}\n{}\n{}", rows[0], rows[1]),
        format!("{header}\n{}\n{}\r", rows[0], rows[1]),
        format!("{header}\n{}\n{}\r\n\r\n", rows[0], rows[1]),
        format!("{header}\n{}\n1,9,0,fail,acquire,ké,,,n\r1,busy\n", rows[0]),
        format!("{header}\n{}\n{}\n\n", rows[0], rows[1]),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (i, text) in inputs.iter().enumerate() {
        let path = dir.path().join(format!("{i}.csv"));
        std::fs::write(&path, text).unwrap();
        let strict = history::csv::read_path(&path)
            .map(|ops| history::pair::pair_with_faults(&ops).unwrap());
        let fast = history::csv::read_paired_path(&path);
        match (strict, fast) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "input {i}: {text:?}"),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "input {i}: {text:?}"),
            (a, b) => panic!("input {i} {text:?}: strict {a:?}, fast {b:?}"),
        }
    }
}

#[test]
fn the_fast_reader_reads_lines_across_its_blocks_as_the_strict_one() {
    // Issue 12 "streaming CSV reader": the fast reader reads in blocks; a line split by a
    // block's end, and a line longer than a block (its buffer grows), read as the strict
    // reader reads them, and the file is not handed back to the strict reader.
    let mut text = format!("{}\n", history::csv::HEADER);
    let mut index = 0u64;
    let mut row = |text: &mut String, op_type: &str, value: &str, node: &str| {
        text.push_str(&format!(
            "{index},{index},7,{op_type},write,k,{value},,{node},\n"
        ));
        index += 1;
    };
    // About 3 blocks of rows of odd lengths, then one line of 1.2 blocks, then more rows.
    let mut n = 0usize;
    while text.len() < 3 * history::csv::FAST_BLOCK_BYTES {
        let value = "v".repeat(n % 97);
        row(&mut text, "invoke", &value, "");
        row(&mut text, "ok", &value, "n1");
        n += 1;
    }
    let long = "x".repeat(history::csv::FAST_BLOCK_BYTES * 3 / 5);
    row(&mut text, "invoke", &long, &long);
    row(&mut text, "ok", "", "n2");
    row(&mut text, "invoke", "last", "");
    text.push_str(&format!("{index},{index},7,ok,write,k,,,n3,"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("blocks.csv");
    std::fs::write(&path, &text).unwrap();
    let mut visited = Vec::new();
    let read = history::csv::visit_rows_fast(&path, |row| {
        visited.push(row.to_op());
        true
    });
    assert_eq!(read, Some(()), "the fast reader gave up");
    assert_eq!(visited, history::csv::read_path(&path).unwrap());
    assert_eq!(visited.len() as u64, index + 1);
}
