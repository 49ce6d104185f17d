//! The reader never panics, and every error it returns points at a real line and column.
//!
//! Rule: DESIGN.md "Histories (CSV)": the reader rejects bad input with `line:column:
//! reason` and never panics; STYLE.md 12. Two generators: arbitrary bytes, and the
//! well-formed cases of `cases/` mutated byte by byte and line by line. Both also check
//! that the reader and `pair` agree: whatever the reader accepts, `pair` accepts.

use std::path::{Path, PathBuf};

use history::csv::{Reader, Writer};
use history::{Op, pair};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

/// The bytes of every case file, read once.
fn case_texts() -> &'static [Vec<u8>] {
    static TEXTS: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    TEXTS.get_or_init(read_case_texts)
}

fn read_case_texts() -> Vec<Vec<u8>> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "csv") {
                out.push(path);
            }
        }
    }
    let mut paths = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("cases"),
        &mut paths,
    );
    paths.sort();
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

/// Reads `bytes` and checks the reader's contract; returns the error's line, if any.
fn check_reader(bytes: &[u8]) -> Result<(), TestCaseError> {
    let lines = bytes.iter().filter(|&&b| b == b'\n').count() as u64 + 1;
    let mut ops = Vec::new();
    for item in Reader::new(bytes) {
        match item {
            Ok(op) => ops.push(op),
            Err(error) => {
                prop_assert!(error.line >= 1, "{error}");
                prop_assert!(error.column >= 1, "{error}");
                prop_assert!(error.line <= lines, "{error}: the input has {lines} lines");
                let message = error.to_string();
                let position = format!("{}:{}: ", error.line, error.column);
                prop_assert!(message.starts_with(&position), "{message}");
                return Ok(());
            }
        }
    }
    // Accepted: pairing agrees, and the history round-trips.
    prop_assert!(pair(&ops).is_ok(), "reader accepted what pair rejects");
    let mut writer = Writer::new(Vec::new()).unwrap();
    for op in &ops {
        writer.write(op).unwrap();
    }
    let text = writer.into_inner().unwrap();
    let again: Vec<Op> = Reader::new(&text[..]).collect::<Result<_, _>>().unwrap();
    prop_assert_eq!(again, ops);
    Ok(())
}

/// One mutation: where (a fraction of the length), what, and a byte to use.
#[derive(Clone, Debug)]
enum Mutation {
    Replace(u16, u8),
    Insert(u16, u8),
    Delete(u16, u16),
    DuplicateLine(u16),
    SwapLines(u16, u16),
    Truncate(u16),
}

fn interesting_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        Just(b','),
        Just(b'"'),
        Just(b'\n'),
        Just(b'\r'),
        Just(b'0'),
        Just(b'9'),
        Just(b'-'),
        Just(0xC3),
        Just(0xFF),
        any::<u8>(),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<u16>(), interesting_byte()).prop_map(|(at, b)| Mutation::Replace(at, b)),
        (any::<u16>(), interesting_byte()).prop_map(|(at, b)| Mutation::Insert(at, b)),
        (any::<u16>(), 1u16..8).prop_map(|(at, n)| Mutation::Delete(at, n)),
        any::<u16>().prop_map(Mutation::DuplicateLine),
        (any::<u16>(), any::<u16>()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
        any::<u16>().prop_map(Mutation::Truncate),
    ]
}

fn apply(bytes: &mut Vec<u8>, mutation: &Mutation) {
    let at =
        |fraction: u16, len: usize| (usize::from(fraction) * len) / (usize::from(u16::MAX) + 1);
    match *mutation {
        Mutation::Replace(f, b) if !bytes.is_empty() => {
            let i = at(f, bytes.len());
            bytes[i] = b;
        }
        Mutation::Insert(f, b) => {
            let i = at(f, bytes.len() + 1);
            bytes.insert(i, b);
        }
        Mutation::Delete(f, n) if !bytes.is_empty() => {
            let i = at(f, bytes.len());
            let end = (i + usize::from(n)).min(bytes.len());
            bytes.drain(i..end);
        }
        Mutation::DuplicateLine(f) | Mutation::SwapLines(f, _) | Mutation::Truncate(f)
            if !bytes.is_empty() =>
        {
            let mut lines: Vec<Vec<u8>> =
                bytes.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
            let i = at(f, lines.len());
            match *mutation {
                Mutation::DuplicateLine(_) => {
                    let line = lines[i].clone();
                    lines.insert(i, line);
                }
                Mutation::SwapLines(_, g) => {
                    let j = at(g, lines.len());
                    lines.swap(i, j);
                }
                _ => lines.truncate(i),
            }
            *bytes = lines.join(&b'\n');
        }
        _ => {}
    }
}

fn config() -> Config {
    let seed = std::env::var("PROPTEST_RNG_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_261_202);
    println!("proptest seed {seed} (set PROPTEST_RNG_SEED to change it)");
    Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(256),
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        check_reader(&bytes)?;
    }

    #[test]
    fn arbitrary_bytes_after_a_header_never_panic(
        bytes in proptest::collection::vec(interesting_byte(), 0..256)
    ) {
        let mut input = history::csv::HEADER.as_bytes().to_vec();
        input.push(b'\n');
        input.extend(bytes);
        check_reader(&input)?;
    }

    #[test]
    fn mutated_cases_never_panic(
        case in any::<prop::sample::Index>(),
        mutations in proptest::collection::vec(mutation(), 1..6),
    ) {
        let texts = case_texts();
        let mut bytes = case.get(texts).clone();
        for m in &mutations {
            apply(&mut bytes, m);
        }
        check_reader(&bytes)?;
    }
}

fn edn_char() -> impl Strategy<Value = char> {
    prop_oneof![
        Just('{'),
        Just('}'),
        Just('['),
        Just(']'),
        Just('('),
        Just(')'),
        Just('#'),
        Just(':'),
        Just('"'),
        Just('\\'),
        Just(' '),
        Just('\n'),
        Just('\t'),
        Just('-'),
        Just(','),
        Just(';'),
        proptest::char::range('0', '9'),
        proptest::char::range('a', 'z'),
        any::<char>(),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn converters_never_panic_and_name_a_line(
        chars in proptest::collection::vec(edn_char(), 0..200)
    ) {
        // Rule: HELPERS.md "No panics on bad input; errors say the line and the reason".
        let text: String = chars.into_iter().collect();
        let lines = text.matches('\n').count() as u64 + 1;
        let prefixed = format!("INFO  jepsen.util - {text}");
        for result in [
            history::convert::jepsen_edn::convert(&text),
            history::convert::porcupine_kv::convert(&text),
            history::convert::porcupine_etcd::convert(&text),
            history::convert::porcupine_etcd::convert(&prefixed),
        ] {
            match result {
                Ok(ops) => prop_assert!(pair(&ops).is_ok()),
                Err(error) => prop_assert!(error.line >= 1 && error.line <= lines, "{error}"),
            }
        }
    }
}
