//! Every case under `histories/cases/` gets the verdict of its folder (STYLE practice 6),
//! and every invalid case's explanation equals its golden `NAME.expect`.
//!
//! Which checks apply, by area: `lock/` runs linearizability (the lock model), fencing
//! and lease safety; `fencing/` fencing; `lease/` lease safety and linearizability (the
//! lock spec holds DESIGN's expiry bound); `register/` linearizability
//! against the register model; `liveness/` the liveness rules. `malformed/` cases must fail to parse, with the message in
//! their `.expect`.
//!
//! `LOCKSMITH_REWRITE=1 cargo test -p checker --test cases` rewrites the `.expect` files of
//! the invalid cases. As with etcd's data-driven tests: only commit a rewrite you
//! understand.

use std::path::{Path, PathBuf};

use checker::{Check, ModelKind, Options, Verdict};

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../histories/cases")
}

fn csv_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "csv"))
        .collect();
    files.sort();
    files
}

fn run(area: &str, path: &Path) -> Check {
    let ops = history::csv::read_path(path).unwrap_or_else(|e| panic!("{}:{e}", path.display()));
    let paired = history::pair(&ops).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let options = Options::default();
    match area {
        "lock" => checker::check_operations(&paired, &options),
        "fencing" => checker::compose(vec![checker::check_fencing(&paired)]),
        // Lease cases are lock histories: DESIGN's expiry bound (no expiry before
        // invoke + lease·(1−drift)) is the lock spec's, so linearizability runs with the
        // lease check (whose own, sound bound is lease·(1−2·drift)).
        "lease" => checker::compose(vec![
            checker::check_linearizability(&paired, &options),
            checker::check_lease(&paired, options.drift),
        ]),
        "register" => {
            let options = Options::for_model(ModelKind::Register);
            checker::check_operations(&paired, &options)
        }
        // Liveness cases: only the liveness result of the one entry point, which must have
        // judged something (a "not checked" result would not be valid).
        "liveness" => {
            // Rule S needs the service's session timeout: these cases give 10 s.
            let liveness =
                checker::liveness::LivenessOptions::default().with_session_timeout_ms(Some(10_000));
            let check = checker::check(&ops, &options.with_liveness(liveness)).unwrap();
            let liveness = check
                .result(history::CheckName::Liveness)
                .expect("a liveness result")
                .clone();
            assert!(liveness.checked, "{}: {}", path.display(), liveness.verdict);
            checker::compose(vec![liveness])
        }
        // Jepsen's reading: registers start at 0 (knossos's `(cas-register 0)`), a nil read
        // is a read of unknown value.
        "register-init" => {
            let options = Options::for_model(ModelKind::Register).with_init(Some("0".into()));
            checker::check_operations(&paired, &options)
        }
        "mutex" => checker::check_operations(&paired, &Options::for_model(ModelKind::Mutex)),
        "owner-mutex" => {
            checker::check_operations(&paired, &Options::for_model(ModelKind::OwnerMutex))
        }
        "multi-register" => {
            let options = Options::for_model(ModelKind::MultiRegister).with_init(Some("0".into()));
            checker::check_operations(&paired, &options)
        }
        other => panic!("no checks for area {other}"),
    }
}

#[test]
fn every_case_has_the_verdict_of_its_folder_and_its_golden_explanation() {
    // STYLE practice 6: the verdict is in the path; invalid cases carry a golden .expect.
    let rewrite = std::env::var("LOCKSMITH_REWRITE").is_ok_and(|v| v == "1");
    let mut checked = 0;
    let mut failures = Vec::new();
    for area in [
        "lock",
        "fencing",
        "lease",
        "register",
        "register-init",
        "mutex",
        "owner-mutex",
        "multi-register",
        "liveness",
    ] {
        for folder in ["valid", "invalid"] {
            let dir = cases_dir().join(area).join(folder);
            for path in csv_files(&dir) {
                checked += 1;
                let check = run(area, &path);
                if area == "lock" || area == "lease" {
                    // STYLE practice 9: the generic search agrees with the fast path.
                    let ops = history::csv::read_path(&path).unwrap();
                    let paired = history::pair(&ops).unwrap();
                    let generic = Options::default().with_lock_search(checker::LockSearch::Generic);
                    let generic = checker::check_linearizability(&paired, &generic).verdict;
                    let fast = &check
                        .result(history::CheckName::Linearizability)
                        .unwrap()
                        .verdict;
                    if &generic != fast {
                        failures.push(format!(
                            "{}: lock_fast {fast}, wgl {generic}",
                            path.display()
                        ));
                    }
                }
                let expected = if folder == "valid" {
                    Verdict::Valid
                } else {
                    Verdict::Invalid
                };
                if check.verdict != expected {
                    failures.push(format!(
                        "{}: verdict {} but the folder says {folder}\n{}",
                        path.display(),
                        check.verdict,
                        check.explanation()
                    ));
                    continue;
                }
                if folder == "invalid" {
                    let golden = path.with_extension("expect");
                    let text = check.explanation();
                    if rewrite {
                        std::fs::write(&golden, &text).unwrap();
                        continue;
                    }
                    let want = std::fs::read_to_string(&golden).unwrap_or_else(|e| {
                        panic!("{}: {e} (run with LOCKSMITH_REWRITE=1)", golden.display())
                    });
                    if want != text {
                        failures.push(format!(
                            "{}: explanation differs from the golden file\n--- want\n{want}--- got\n{text}",
                            path.display()
                        ));
                    }
                }
            }
        }
    }
    assert!(
        checked >= 40,
        "only {checked} cases found under {}",
        cases_dir().display()
    );
    assert!(
        failures.is_empty(),
        "{} failing cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn inference_reads_our_lock_schema_as_lock_and_jepsen_mutexes_as_mutex() {
    // Issue 28 item 4: every lock/ case carries our schema's signs (lease values, tokens,
    // lockd's error words) and infers `lock`, including the busy-only one that a tokenless
    // reading would pass; every mutex/ case (Jepsen's shape) infers `mutex`.
    for (area, want) in [("lock", ModelKind::Lock), ("mutex", ModelKind::Mutex)] {
        for folder in ["valid", "invalid"] {
            for path in csv_files(&cases_dir().join(area).join(folder)) {
                let ops = history::csv::read_path(&path).unwrap();
                let paired = history::pair(&ops).unwrap();
                let got = checker::infer_model(&paired)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert_eq!(got, want, "{}", path.display());
            }
        }
    }
    let busy_only = cases_dir().join("lock/invalid/busy_only_on_a_free_key.csv");
    let ops = history::csv::read_path(&busy_only).unwrap();
    let check = checker::check(&ops, &Options::for_model(ModelKind::Auto)).unwrap();
    assert_eq!(check.verdict, Verdict::Invalid, "{}", check.explanation());
}

#[test]
fn every_malformed_case_fails_to_parse_with_its_message() {
    // STYLE practice 12: the reader rejects bad input with line:column: reason.
    let files = csv_files(&cases_dir().join("malformed"));
    assert!(files.len() >= 10, "only {} malformed cases", files.len());
    for path in files {
        let error = checker::cli::read_history(&path)
            .err()
            .unwrap_or_else(|| panic!("{} parsed", path.display()));
        let want = std::fs::read_to_string(path.with_extension("expect")).unwrap();
        assert_eq!(
            error.to_string(),
            format!("{}:{}", path.display(), want.trim_end()),
            "{}",
            path.display()
        );
    }
}

#[test]
fn without_phantom_releases_an_unseen_grant_holds_its_lease() {
    // DESIGN "Phantom locks" and checker::linear::lock_model: the same history is valid
    // when lockd may release a gone client's grant, invalid when grants end only by lease.
    let path = cases_dir().join("lock/valid/info_acquire_ended_by_a_phantom_release.csv");
    let ops = history::csv::read_path(&path).unwrap();
    let paired = history::pair(&ops).unwrap();
    let permissive = Options::default();
    let strict = Options::default().with_phantom_release(false);
    for search in [checker::LockSearch::Fast, checker::LockSearch::Generic] {
        let verdict = |o: Options| {
            checker::check_linearizability(&paired, &o.with_lock_search(search)).verdict
        };
        assert_eq!(verdict(permissive.clone()), Verdict::Valid);
        assert_eq!(verdict(strict.clone()), Verdict::Invalid);
    }
}
