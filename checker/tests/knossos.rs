//! knossos's published histories get knossos's verdicts.
//!
//! Data source: jepsen-io/knossos (EPL), folder `data/`: `cas-register/{good,bad}/*.edn`,
//! `multi-register/good/*.edn` and `mutex/bad/etcd.edn`. knossos's own test
//! (`test/knossos/core_test.clj`, `test-examples`) reads the expected verdict from the
//! folder name (`good`: `:valid? true`, `bad`: `:valid? false`) and checks cas-register
//! files against `(model/cas-register 0)` and multi-register files against
//! `(model/multi-register {:x 0 :y 0})`; its report test draws `data/mutex/bad/etcd.edn`
//! with `(model/mutex)`. The files are never copied into this repository: the test reads
//! the folder named by `LOCKSMITH_KNOSSOS_DATA` (holding `cas-register/`, ...) and says
//! that it skipped when it is not set.

use std::path::{Path, PathBuf};

use checker::{ModelKind, Options, Verdict};

fn edn_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    files.retain(|f| f.extension().is_some_and(|e| e == "edn"));
    files.sort();
    files
}

fn check_file(path: &Path, options: &Options) -> Result<checker::Check, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let ops = checker::cli::convert_text("jepsen-edn", &text).map_err(|e| e.to_string())?;
    checker::check(&ops, options).map_err(|e| e.to_string())
}

#[test]
fn every_knossos_history_gets_knossos_verdict() {
    let Some(root) = std::env::var_os("LOCKSMITH_KNOSSOS_DATA").map(PathBuf::from) else {
        eprintln!("skipped: LOCKSMITH_KNOSSOS_DATA is not set (a copy of knossos's data/ folder)");
        return;
    };
    let sets = [
        ("cas-register", ModelKind::Register),
        ("multi-register", ModelKind::MultiRegister),
    ];
    let mut checked = 0;
    let mut mismatches = Vec::new();
    let mut vacuous = Vec::new();
    for (model_dir, model) in sets {
        for (folder, want) in [("good", Verdict::Valid), ("bad", Verdict::Invalid)] {
            for file in edn_files(&root.join(model_dir).join(folder)) {
                let options = Options::for_model(model).with_init(Some("0".into()));
                checked += 1;
                match check_file(&file, &options) {
                    Ok(check) if check.verdict == want => {}
                    // One deliberate difference: a history with nothing to check is
                    // valid to knossos, vacuously; we say unknown, because nothing was
                    // checked (issue 12: a check with nothing to check never counts as
                    // valid). `mongodb-v0-ack-rollback-.edn` holds only nemesis rows;
                    // in `mongodb-v0-ack-rollback-{9,10,11}.edn` every op failed, and
                    // knossos drops failed ops.
                    Ok(check)
                        if want == Verdict::Valid
                            && matches!(&check.verdict, Verdict::Unknown { reason }
                                if reason.contains("no client operations")
                                    || reason.contains("no operation constrains")) =>
                    {
                        vacuous.push(file.display().to_string());
                    }
                    Ok(check) => mismatches.push(format!(
                        "{}: {} but knossos says {folder}\n{}",
                        file.display(),
                        check.verdict,
                        check.explanation()
                    )),
                    Err(error) => mismatches.push(format!("{}: {error}", file.display())),
                }
            }
        }
    }
    eprintln!(
        "{checked} knossos histories checked, {} mismatches, {} with nothing to check (unknown here, valid to knossos): {vacuous:?}",
        mismatches.len(),
        vacuous.len()
    );
    assert!(vacuous.len() <= 4, "{vacuous:?}");
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    assert!(
        checked >= 121,
        "expected 113 good + 7 bad cas-register and 1 multi-register .edn files, found {checked}"
    );
}

#[test]
fn knossos_etcd_mutex_history_is_invalid_with_an_explanation() {
    let Some(root) = std::env::var_os("LOCKSMITH_KNOSSOS_DATA").map(PathBuf::from) else {
        eprintln!("skipped: LOCKSMITH_KNOSSOS_DATA is not set (a copy of knossos's data/ folder)");
        return;
    };
    let path = root.join("mutex/bad/etcd.edn");
    for model in [ModelKind::Auto, ModelKind::Mutex, ModelKind::OwnerMutex] {
        let check = check_file(&path, &Options::for_model(model)).unwrap();
        assert_eq!(
            check.verdict,
            Verdict::Invalid,
            "{model}: {}",
            check.explanation()
        );
        assert!(
            check.explanation().contains("acquire() -> ok"),
            "{}",
            check.explanation()
        );
        eprintln!("{model}:\n{}", check.explanation());
    }
}
