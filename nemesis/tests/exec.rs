//! `locksmith test --system exec` (issue 26) through the binary, as a user runs it: nodes
//! from `--node-cmd`, client adapters from `--client-cmd` speaking JSON lines
//! (nemesis/PROTOCOL.md).
//!
//! - adapters that print garbage, never answer, or answer twice make the run unknown (exit
//!   2), and the output names the line or the op; one that dies after an answer is replaced
//!   by a new process id, with no protocol error;
//! - the toy lock service of `examples/` (one process, wall-clock leases, no fencing) is
//!   invalid under `--nemesis pause` within 30 s, with an explanation in words. Whether a
//!   run catches it depends on real timing, not only on the seed: with 15 s runs, seeds
//!   2-5 were caught and seed 1 was not (its plan has no `pause-clients`); seed 4 was caught
//!   in 5 runs of 5 (2026-12-04, debug build, 2 busy cores);
//! - lockd through the Python adapter `examples/lockd_client.py` is valid on a clean run;
//! - an adapter whose init line says `"resource":true` gets the writes.
//!
//! Each run's locksmith process leads a process group of its own, killed by a guard on drop
//! (its nodes and adapters are its children, in groups it kills itself). Seeds are fixed and
//! printed with every failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::os::unix::process::CommandExt as _;

/// The longest a test run may take before the guard kills it.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn example(name: &str) -> String {
    root().join("examples").join(name).display().to_string()
}

/// A child locksmith process, killed with its process group when dropped.
struct Guard(std::process::Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = killpg(Pid::from_raw(self.0.id() as i32), Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// One run at a time: runs are timed (the toy must be caught within 30 s), and on 2 cores
/// five parallel runs would time each other.
static ONE_RUN_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `locksmith test --system exec` with these arguments and a store of its own.
fn locksmith_test(store: &Path, args: &[&str]) -> Ran {
    let _one = ONE_RUN_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let started = Instant::now();
    let mut command = Command::new(env!("CARGO_BIN_EXE_locksmith"));
    command
        .arg("test")
        .arg("--system")
        .arg("exec")
        .arg("--store")
        .arg(store)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let child = command.spawn().expect("locksmith starts");
    let mut guard = Guard(child);
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let out = guard.0.stdout.take();
    let err = guard.0.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut err) = err {
            let _ = std::io::Read::read_to_string(&mut err, &mut text);
        }
        text
    });
    if let Some(mut out) = out {
        let _ = std::io::Read::read_to_string(&mut out, &mut stdout);
    }
    let deadline = started + RUN_TIMEOUT;
    let code = loop {
        if let Some(status) = guard.0.try_wait().expect("wait") {
            break status.code().unwrap_or(-1);
        }
        assert!(
            Instant::now() < deadline,
            "locksmith ran past {RUN_TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    stderr.push_str(&reader.join().unwrap_or_default());
    Ran {
        code,
        stdout,
        stderr,
        took: started.elapsed(),
    }
}

/// The toy service as the node: one process on `{addr}`.
fn toy_node() -> String {
    format!(
        "python3 {} --listen {{addr}}",
        example("toy_lock_service.py")
    )
}

/// A short run of one toy node with `client_cmd` as the adapter.
fn short_run(store: &Path, client_cmd: &str, seed: &str) -> Ran {
    locksmith_test(
        store,
        &[
            "--nodes",
            "1",
            "--nemesis",
            "none",
            "--time-s",
            "2",
            "--recovery-s",
            "5",
            "--concurrency",
            "2",
            "--seed",
            seed,
            "--node-cmd",
            &toy_node(),
            "--client-cmd",
            client_cmd,
        ],
    )
}

/// Asserts the exit code and that stdout holds each of `needles`, showing the seed and the
/// whole output on failure.
fn expect(ran: &Ran, seed: &str, code: i32, needles: &[&str]) {
    let shown = format!(
        "seed {seed}: exit {}:\n{}\n{}",
        ran.code, ran.stdout, ran.stderr
    );
    assert_eq!(ran.code, code, "{shown}");
    for needle in needles {
        assert!(ran.stdout.contains(needle), "missing {needle:?}: {shown}");
    }
}

#[test]
fn an_adapter_that_prints_garbage_makes_the_run_unknown_naming_the_line() {
    let store = tempfile::tempdir().expect("tempdir");
    let garbage = "printf 'hello from a confused adapter\\n'; cat >/dev/null";
    let ran = short_run(store.path(), garbage, "11");
    // The line is quoted, and the run is unknown, never valid.
    let quoted = "\"hello from a confused adapter\": not a JSON object";
    expect(
        &ran,
        "11",
        2,
        &[quoted, "client protocol", "verdict: unknown"],
    );
}

#[test]
fn an_adapter_that_never_answers_makes_the_run_unknown_naming_the_op() {
    let store = tempfile::tempdir().expect("tempdir");
    let ran = short_run(store.path(), "cat >/dev/null", "12");
    let named = "answered none of its requests: `acquire k";
    expect(
        &ran,
        "12",
        2,
        &[named, "no answer within", "verdict: unknown"],
    );
}

#[test]
fn unknown_ids_and_second_answers_make_the_run_unknown() {
    let store = tempfile::tempdir().expect("tempdir");
    let adapter = root().join("nemesis/tests/adapters/duplicate.py");
    let ran = short_run(
        store.path(),
        &format!("python3 {}", adapter.display()),
        "13",
    );
    let unknown = "an answer to an id no request had (id 1001)";
    let second = "a second answer to a request";
    expect(&ran, "13", 2, &[unknown, second, "verdict: unknown"]);
}

#[test]
fn the_toy_lock_service_is_invalid_under_pause_within_30_s_in_words() {
    let store = tempfile::tempdir().expect("tempdir");
    let ran = locksmith_test(
        store.path(),
        &[
            "--nodes",
            "1",
            "--nemesis",
            "pause",
            "--time-s",
            "15",
            "--recovery-s",
            "5",
            "--seed",
            "4",
            "--node-cmd",
            &toy_node(),
            "--client-cmd",
            &format!("python3 {} {{addr}} {{process}}", example("toy_client.py")),
        ],
    );
    expect(
        &ran,
        "4",
        1,
        &[
            "no overlapping leases: violated: key k",
            "without fencing tokens the resource cannot tell",
            // The summary says which checks could not apply, and why.
            "linearizability: not checked (no tokens",
            "fencing: not checked (no tokens)",
        ],
    );
    assert!(ran.took < Duration::from_secs(30), "took {:?}", ran.took);
}

#[test]
fn lockd_through_the_python_adapter_is_valid_on_a_clean_run() {
    let store = tempfile::tempdir().expect("tempdir");
    let ran = locksmith_test(
        store.path(),
        &[
            "--nodes",
            "3",
            "--nemesis",
            "kill,partition",
            "--time-s",
            "10",
            "--recovery-s",
            "10",
            "--seed",
            "2",
            "--node-cmd",
            "\"$LOCKSMITH_BIN\" node --id {id} --peers {peers} --dial {peer_addrs} --client-listen {addr} --data-dir {dir}",
            "--client-cmd",
            &format!(
                "python3 {} {{client_addrs}} {{process}}",
                example("lockd_client.py")
            ),
        ],
    );
    expect(&ran, "2", 0, &["\"partition\":", "verdict: valid"]);
    assert!(!ran.stdout.contains(": not checked ("), "{}", ran.stdout);
}

/// A short toy run that must break no protocol rule: judged (the toy may be valid or
/// invalid), or unknown only because a slot did not get its key back in the short recovery
/// phase. Returns the run's directory and the output for messages.
fn judged_run(store: &Path, client_cmd: &str, seed: &str) -> (PathBuf, String) {
    let ran = short_run(store, client_cmd, seed);
    let shown = format!(
        "seed {seed}: exit {}:\n{}\n{}",
        ran.code, ran.stdout, ran.stderr
    );
    let judged = ran.code == 0 || ran.code == 1;
    assert!(
        judged || ran.stdout.contains("client slots recovered"),
        "{shown}"
    );
    // The summary lists every check; the protocol's must not be the reason for the verdict.
    assert!(ran.stdout.contains("client protocol: valid"), "{shown}");
    let run = std::fs::read_dir(store.join("exec-none"))
        .expect("the test's dir")
        .flatten()
        .next()
        .expect("one run")
        .path();
    (run, shown)
}

#[test]
fn an_adapter_that_dies_is_replaced_by_a_new_process_id() {
    // Issue 26: "one that dies is restarted as a new process id". This adapter exits after
    // its init line and one answer (`head -n 2` closes the pipe); the op it was given next is
    // `info`, and the slot goes on as a new process with a new adapter. Dying after answering
    // is no protocol error: the run is judged (here the toy, valid or invalid), not unknown.
    let store = tempfile::tempdir().expect("tempdir");
    let client = format!(
        "python3 {} {{addr}} {{process}} | head -n 2",
        example("toy_client.py")
    );
    let (run, _) = judged_run(store.path(), &client, "14");
    let history = std::fs::read_to_string(run.join("history.csv")).expect("history");
    assert!(history.contains(",info,"), "no info op:\n{history}");
    // Slots 0 and 1 of 2: process ids 2 and up are restarted adapters.
    let restarted = history
        .lines()
        .filter_map(|l| l.split(',').nth(2)?.parse::<u64>().ok())
        .any(|process| process >= 2);
    assert!(restarted, "no process id past the 2 slots:\n{history}");
    let log = std::fs::read_to_string(run.join("node-logs/client0.log")).expect("stderr log");
    assert!(
        log.matches("--- process ").count() >= 2,
        "one adapter per process of slot 0:\n{log}"
    );
}

#[test]
fn an_adapter_with_a_resource_of_its_own_takes_the_writes() {
    // PROTOCOL.md, the init line's "resource": the harness sends writes to the adapter, and
    // the service's resource takes them (the toy prints each to its log).
    let store = tempfile::tempdir().expect("tempdir");
    let client = format!(
        "python3 {} {{addr}} {{process}} --resource",
        example("toy_client.py")
    );
    let (run, shown) = judged_run(store.path(), &client, "15");
    let history = std::fs::read_to_string(run.join("history.csv")).expect("history");
    let writes = history.lines().filter(|l| l.contains(",ok,write,")).count();
    let log = std::fs::read_to_string(run.join("node-logs/n1.log")).expect("node log");
    let landed = log.lines().filter(|l| l.starts_with("write ")).count();
    assert!(writes > 0, "no write ok: {shown}");
    // Every ok write reached the toy (one whose answer was lost may have landed too).
    assert!(
        landed >= writes,
        "{landed} writes landed, {writes} ok:\n{log}"
    );
}
