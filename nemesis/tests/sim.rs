//! `locksmith sim`: the same seed replays byte for byte (each assertion names the seed).

use nemesis::faults::FaultKind;
use nemesis::sim::{SimCase, run_case};

/// A short case, so that debug builds stay quick. Kill is left out here: two runs of a seed
/// with crashes and restarts (turmoil's crash/bounce) in one process can differ, which is why
/// the command runs each seed in a child process of its own; the last test replays crashes
/// through the command.
fn short(seed: u64, time_s: u64) -> SimCase {
    let mut case = SimCase::new(seed);
    case.options.time_s = time_s;
    case.options.nemesis = vec![
        FaultKind::Pause,
        FaultKind::Partition,
        FaultKind::Clock,
        FaultKind::Netem,
    ];
    case
}

// One test function: simulations running at once in one process can disturb each other
// (see `locksmith sim --jobs`), and cargo runs test functions on parallel threads.
#[test]
fn the_simulator_replays_each_seed_and_tells_seeds_apart() {
    the_same_seed_gives_a_byte_identical_history_with_faults_on();
    different_seeds_give_different_runs();
    slow_and_flaky_links_are_applied_undone_and_survived();
    a_simulated_run_replays_through_the_model();
    a_refused_snapshot_departs_in_the_replay();
}

fn the_same_seed_gives_a_byte_identical_history_with_faults_on() {
    for seed in [1, 2, 3] {
        let case = short(seed, 8);
        let first = run_case(&case);
        let second = run_case(&case);
        let faults = |ops: &[history::Op]| -> Vec<history::Op> {
            (ops.iter())
                .filter(|op| op.process == history::Process::Nemesis)
                .cloned()
                .collect()
        };
        assert!(
            faults(&first.ops).len() >= 4,
            "seed {seed}: the plan applied faults: {:?}",
            faults(&first.ops)
        );
        assert!(first.ops.len() > 50, "seed {seed}: {} ops", first.ops.len());
        assert_eq!(
            history::csv::to_bytes(&first.ops),
            history::csv::to_bytes(&second.ops),
            "seed {seed}: two runs of one seed differ (rerun: {})",
            case.rerun_command()
        );
        assert_eq!(faults(&first.ops), faults(&second.ops), "seed {seed}");
    }
}

fn different_seeds_give_different_runs() {
    let a = run_case(&short(11, 5));
    let b = run_case(&short(12, 5));
    assert_ne!(
        history::csv::to_bytes(&a.ops),
        history::csv::to_bytes(&b.ops)
    );
}

/// netem's faults in the simulator: `flaky` peer links drop, reorder and duplicate Raft
/// messages (lockd::server::LinkFaults), `slow` links take up to 150 ms a message. A clean
/// lockd stays valid under them, and the final heal undoes them.
fn slow_and_flaky_links_are_applied_undone_and_survived() {
    let mut seen = std::collections::BTreeSet::new();
    for seed in 1..=3 {
        let mut case = SimCase::new(seed);
        case.options.time_s = 6;
        case.options.nemesis = vec![FaultKind::Netem];
        let result = run_case(&case);
        assert!(
            result.verdict().is_valid(),
            "seed {seed}: {:?} (rerun: {})",
            result.verdict(),
            case.rerun_command()
        );
        assert_eq!(
            result.results.faults.failed, 0,
            "seed {seed}: every netem op acted: {:?}",
            result.results.faults.notes
        );
        for f in ["slow", "flaky", "unslow", "unflaky"] {
            if result.ops.iter().any(|op| op.f == f) {
                seen.insert(f);
            }
        }
        assert!(
            result.ops.len() > 50,
            "seed {seed}: {} ops",
            result.ops.len()
        );
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["flaky", "slow", "unflaky", "unslow"],
        "seeds 1..=3 apply both netem faults and their undos"
    );
}

/// The same seeds through the command, crashes and restarts included (each seed in a child
/// process of its own, as `locksmith sim` runs them), give the same history digests twice.
#[test]
fn the_command_replays_seeds_with_crashes_byte_for_byte() {
    use nemesis::faults::Verb;
    let seeds = 1..=3u64;
    let time_s = 5;
    let kills = seeds
        .clone()
        .filter(|&seed| {
            // The command runs swarm seeds: each seed's own draw, 5 s long.
            let mut options = SimCase::swarm(seed).options;
            options.time_s = time_s;
            options.plan().iter().any(|p| p.op.f == Verb::Kill)
        })
        .count();
    assert!(kills >= 1, "seeds 1..=3: some plan crashes a node");
    // A failing seed writes its store: into a folder the test removes.
    let store = tempfile::tempdir().expect("a temporary folder");
    let run = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_locksmith"))
            .args(["sim", "--seeds", "1..=3", "--time-s", "5", "--jobs", "1"])
            .args(["--no-shrink", "--keep-going", "--store"])
            .arg(store.path())
            .env("LOCKSMITH_SIM_DIGESTS", "1")
            .output()
            .expect("locksmith runs");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let mut digests: Vec<String> = stderr
            .lines()
            .filter(|l| l.contains("history digest"))
            .map(str::to_owned)
            .collect();
        digests.sort();
        (digests, stderr)
    };
    let (first, stderr) = run();
    assert_eq!(first.len(), 3, "one digest per seed; stderr:\n{stderr}");
    let (second, _) = run();
    assert_eq!(first, second, "seeds 1..=3 replay with crashes on");
}

/// Trace validation of simulated runs (issue 14): a seed run with `--trace` writes each
/// node's trace, and `locksmith model replay` accepts the clean run and rejects one recorded
/// with `--bug follower-grants` or `--bug no-fsync`, naming the step that departs.
fn a_simulated_run_replays_through_the_model() {
    let root = tempfile::tempdir().expect("a temporary folder");
    let replay = |case: &SimCase| {
        let dir = case.trace_dir().expect("traces are on");
        std::process::Command::new(env!("CARGO_BIN_EXE_locksmith"))
            .args(["model", "replay"])
            .arg(&dir)
            .output()
            .expect("locksmith runs")
    };
    let mut clean = SimCase::new(1);
    clean.options.time_s = 4;
    clean.trace_root = Some(root.path().join("clean"));
    clean.trace_files = true;
    let result = run_case(&clean);
    assert!(
        result.verdict().is_valid(),
        "seed 1: {:?}",
        result.verdict()
    );
    // With traces on, the seed's verdict includes their replay.
    let replayed = |result: &nemesis::sim::CaseResult| {
        result
            .results
            .checks
            .iter()
            .flat_map(|c| c.results.iter())
            .find(|r| r.name == history::CheckName::TraceReplay)
            .map(|r| r.verdict.clone())
    };
    assert_eq!(replayed(&result), Some(checker::Verdict::Valid), "seed 1");
    // The verdict replayed the nodes' traces in memory; the files written from them hold
    // the same steps (the store and `locksmith model replay` read the files).
    let explanation = (result.results.checks.iter())
        .flat_map(|c| c.results.iter())
        .find(|r| r.name == history::CheckName::TraceReplay)
        .and_then(|r| r.explanation.clone())
        .unwrap_or_default();
    let from_files = nemesis::replay::replay_run(&clean.trace_dir().expect("traces are on"))
        .expect("the trace files read back");
    assert!(from_files.report.steps > 100, "{}", from_files.report.steps);
    assert!(
        explanation.starts_with(&format!("{} steps of ", from_files.report.steps)),
        "in memory: {explanation}; from the files: {} steps",
        from_files.report.steps
    );
    let out = replay(&clean);
    assert_eq!(
        out.status.code(),
        Some(0),
        "seed 1, clean: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Seed 2, not 1: with client sessions a client registers at the leader before its
    // first request, so a follower meets a request only around a leader change, and fixed
    // seed 1 has none in its first 4 s (seeds 2, 4 and 5 do).
    let mut buggy = SimCase::new(2);
    buggy.options.time_s = 4;
    buggy.options.bug = Some("follower-grants".to_owned());
    buggy.trace_root = Some(root.path().join("buggy"));
    buggy.trace_files = true;
    run_case(&buggy);
    let out = replay(&buggy);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "seed 2, follower-grants: {stdout}"
    );
    assert!(
        stdout.contains("DEPARTS"),
        "seed 2, follower-grants: {stdout}"
    );
    // `no-fsync` acknowledges writes it never made durable: the history checks of a short
    // run rarely see it (one seed of twenty in 20 simulated s), but the replay catches the
    // restart that loaded less than the node had reported durable.
    let mut no_fsync = SimCase::new(4);
    no_fsync.options.time_s = 4;
    no_fsync.options.bug = Some("no-fsync".to_owned());
    no_fsync.trace_root = Some(root.path().join("no-fsync"));
    no_fsync.trace_files = true;
    let result = run_case(&no_fsync);
    assert_eq!(
        replayed(&result),
        Some(checker::Verdict::Invalid),
        "seed 4, no-fsync: the seed's own verdict has the replay's"
    );
    assert!(!result.verdict().is_valid(), "seed 4, no-fsync");
    let out = replay(&no_fsync);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "seed 4, no-fsync: {stdout}");
    assert!(
        stdout.contains("lost what it had reported durable"),
        "seed 4, no-fsync: {stdout}"
    );
}

/// `--bug snapshot-refused` (issue 24): a follower refuses an honest snapshot and its core
/// stops on the broken contract (`Core::snapshot_refused`, node health). The core used to
/// stop before writing the trace lines of that last turn, so the replay never saw the
/// refusing step and called the run valid (fixed seed 32 for 5 s: "15927 steps of 5
/// node(s) replayed, every one allowed"); the core now writes them as it stops, and the
/// replay departs at the refusal. The same holds for `locksmith sim --bug snapshot-refused
/// --seeds 17` (swarm, 30 s), `ci/sim-mutants.sh`'s seed.
fn a_refused_snapshot_departs_in_the_replay() {
    let root = tempfile::tempdir().expect("a temporary folder");
    let mut case = SimCase::new(32);
    case.options.time_s = 5;
    case.options.bug = Some("snapshot-refused".to_owned());
    case.trace_root = Some(root.path().to_path_buf());
    let result = run_case(&case);
    let replay = (result.results.checks.iter())
        .flat_map(|c| c.results.iter())
        .find(|r| r.name == history::CheckName::TraceReplay)
        .expect("traces are on, so the verdict replays them");
    let explanation = replay.explanation.clone().unwrap_or_default();
    assert_eq!(
        replay.verdict,
        checker::Verdict::Invalid,
        "seed 32, snapshot-refused: {explanation} (rerun: {})",
        case.rerun_command()
    );
    assert!(
        explanation.contains("refused a whole snapshot"),
        "seed 32, snapshot-refused: {explanation}"
    );
}

/// A `no-fsync` node keeps writes in a user-space buffer that its data dir writes out when it
/// is dropped. The nodes still running when a seed ends are dropped after the simulation, where
/// turmoil's disk is gone: each such drop panicked inside turmoil ("cannot access a scoped
/// thread local variable"), five panic lines per seed on stderr, noise that hides real panics.
#[test]
fn nodes_dropped_after_a_no_fsync_seed_do_not_panic() {
    let store = tempfile::tempdir().expect("a temporary folder");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_locksmith"))
        .args([
            "sim", "--seeds", "1..=2", "--time-s", "3", "--bug", "no-fsync",
        ])
        .args(["--no-shrink", "--keep-going", "--store"])
        .arg(store.path())
        .output()
        .expect("locksmith runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("2 seeds in"),
        "seeds 1..=2, no-fsync: the command ran both seeds:\n{stderr}"
    );
    assert!(
        !stderr.contains("panic"),
        "seeds 1..=2, no-fsync: no panic:\n{stderr}"
    );
}

#[test]
fn keeps_only_changes_after_which_the_case_still_fails() {
    // A made-up failure that needs at least 10 simulated seconds and 3 clients, and
    // planned fault 0: the shrinker must stop there and drop every other fault.
    let failing = SimCase::new(7);
    let shrunk = nemesis::sim::shrink::shrink(&failing, |case| {
        case.options.time_s >= 10
            && case.options.concurrency >= 3
            && !case.options.drop_faults.contains(&0)
    });
    assert_eq!(shrunk.case.options.time_s, 15, "30 -> 15 fails, 7 does not");
    assert_eq!(
        shrunk.case.options.concurrency, 5,
        "10 -> 5 fails, 2 does not"
    );
    assert!(!shrunk.case.options.drop_faults.contains(&0));
    assert_eq!(
        shrunk.faults_left, 1,
        "every fault but the needed one is dropped"
    );
    assert!(shrunk.runs <= nemesis::sim::shrink::SHRINK_RUNS_MAX);
}

/// Swarm seeds (issue 24): the command runs each seed with the options that seed draws, the
/// same that `SimCase::swarm` gives in process (a child once ran every seed with seed 0's
/// draw), and the draws differ between seeds.
#[test]
fn the_command_runs_each_swarm_seed_with_its_own_draw() {
    let seeds: Vec<u64> = (1..=8).collect();
    // A failing seed writes its store: into a folder the test removes.
    let store = tempfile::tempdir().expect("a temporary folder");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_locksmith"))
        .args([
            "sim",
            "--seeds",
            "1..=8",
            "--time-s",
            "2",
            "--no-shrink",
            "--keep-going",
        ])
        .arg("--store")
        .arg(store.path())
        .env("LOCKSMITH_SIM_DIGESTS", "1")
        .output()
        .expect("locksmith runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut shapes = std::collections::BTreeSet::new();
    for seed in seeds {
        let o = SimCase::swarm(seed).options;
        let shape = format!(
            "{} nodes, {} clients, {} keys",
            o.nodes, o.concurrency, o.keys
        );
        let line = format!("seed {seed}: {shape}: ");
        assert!(
            stderr.contains(&line),
            "seed {seed} ran as drawn ({line}); stderr:\n{stderr}"
        );
        shapes.insert(shape);
    }
    assert!(
        shapes.len() >= 3,
        "seeds 1..=8 draw different shapes: {shapes:?}"
    );
}

/// Issue 28: every failing seed's store has the message diagram, also without `--trace`: the
/// seed runs quietly first and, having failed, again with logs and traces for its store.
#[test]
fn a_failing_seed_without_trace_gets_its_message_diagram() {
    let store = tempfile::tempdir().expect("a temporary folder");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_locksmith"))
        // Swarm seed 5: a seed whose 5 s reach a follower with a request (with sessions,
        // swarm seeds 5, 11 and 12 of 1..12 do; seed 1 no longer does).
        .args(["sim", "--seeds", "5", "--time-s", "5", "--no-shrink"])
        .args(["--bug", "follower-grants", "--store"])
        .arg(store.path())
        .output()
        .expect("locksmith runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "seed 5, follower-grants:\n{stdout}"
    );
    let messages = (stdout.lines())
        .find_map(|l| l.strip_prefix("messages: "))
        .unwrap_or_else(|| panic!("seed 5: a messages line:\n{stdout}"));
    let svg = std::fs::read_to_string(messages).expect("messages.svg reads");
    assert!(
        svg.contains("<svg") && svg.contains("n1"),
        "seed 5: a diagram with lanes"
    );
}

/// Issue 24, a false alarm of the harness found by 10,000 swarm seeds: on swarm seed 7416
/// the fault point `orphan-release-stall` stalled leader n1's core for 1,199 ms and then the
/// next leader n3's for 745 ms. The stalls never reached the history, so liveness rule W
/// ("every waiter is answered by its deadline") judged three acquires of k0 whose window
/// they spanned, and the seed was invalid with a clean lockd. A stalled core is a paused
/// node, so the simulator now records each stall as the nemesis's pause and resume of that
/// node. The probe `core-stalled` shows that the seed still reaches a stall (a change to
/// what the simulation draws can move it: then pin a seed that does).
#[test]
fn a_stalled_core_is_a_fault_in_the_history_and_excuses_its_waiters() {
    let store = tempfile::tempdir().expect("a temporary folder");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_locksmith"))
        .args(["sim", "--seeds", "7416", "--no-shrink", "--store"])
        .arg(store.path())
        .output()
        .expect("locksmith runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stalled = (stdout.lines().chain(stderr.lines()))
        .find(|l| l.trim_start().starts_with("core-stalled "))
        .unwrap_or_default();
    assert!(
        stalled.contains("first seed 7416"),
        "seed 7416 reaches a core stall (probe line {stalled:?}):\n{stdout}\n{stderr}"
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "seed 7416 is valid with its stalls in the history:\n{stdout}\n{stderr}"
    );
}

/// A review defect of 2026-12-06 that no tool reached: on lockd's two workers a client's
/// `Cancel` can be read after its handler returned a grant and before the `Serve` boundary
/// recorded it; the fix remembers such a `Cancel` and releases the grant as an orphan. The
/// simulator runs a node on one thread, where that window never opened, until the
/// interleaving point `serve-boundary-yield` waited there. Seed 29 reaches the window (the
/// probe `cancel-read-before-grant-recorded`) and is valid; with the fix undone (the mutant
/// `cancel-crossing-answer-forgotten`) the connection's account of its grants finds the
/// grant kept after its `Cancel` was read, when the connection ends. If a change to what
/// the simulation draws moves the window off seed 29, pin a seed that reaches the probe (it
/// was seed 65, then 6 until the interleaving point `serve-write-yield` came in; until the
/// account, liveness rule P caught it, and the release at the connection's end now hides
/// it from rule P).
#[test]
fn a_cancel_read_as_a_grant_leaves_its_handler_is_reached_and_its_mutant_caught() {
    let (clean, text) = sim_seed(29, None);
    let reached = (text.lines())
        .find(|l| {
            l.trim_start()
                .starts_with("cancel-read-before-grant-recorded ")
        })
        .unwrap_or_default();
    assert!(
        reached.contains("first seed 29"),
        "seed 29 reaches the window (probe line {reached:?}):\n{text}"
    );
    assert_eq!(clean, Some(0), "seed 29 is valid with the fix:\n{text}");
    let (mutant, text) = sim_seed(29, Some("cancel-crossing-answer-forgotten"));
    assert_eq!(mutant, Some(1), "the mutant is caught on seed 29:\n{text}");
    assert!(
        text.contains("after it read the Cancel of its call"),
        "by the connection's account:\n{text}"
    );
}

/// A hand-made mistake of 2026-12-06 that every tool missed: a node that never notices a
/// client connection's end (`EofNotify` never flips) kept 200 seeds valid, since a
/// cancellation, or the client library's retry and abandon, always told it first. The
/// phantom-lock probe now has a witnessed round whose leaver crashes while it waits behind
/// the holder (`LeaveHow::Crash`: no cancellation, only the connection's end), and the
/// mistake, kept as the mutant `connection-end-unseen`, fails there by rule P.
#[test]
fn a_client_that_crashes_while_it_waits_is_let_go_and_its_mutant_caught() {
    let (clean, text) = sim_seed(1, None);
    assert_eq!(clean, Some(0), "seed 1 is valid:\n{text}");
    let (mutant, text) = sim_seed(1, Some("connection-end-unseen"));
    assert_eq!(mutant, Some(1), "the mutant is caught on seed 1:\n{text}");
    assert!(
        text.contains("a key whose client left is grantable again: violated")
            && text.contains("info disconnected"),
        "by rule P, on a leaver that disconnected:\n{text}"
    );
}

/// The connection's account of its grants (2026-12-07): under the interleaving point
/// `serve-write-yield`, seed 1 has a grant recorded with its connection open and written
/// after the connection's end, which the node releases; with that release undone, the
/// account names the grant and the node stops.
#[test]
fn a_grant_written_after_its_connection_ended_is_released_and_its_mutant_caught() {
    let (clean, text) = sim_seed(1, None);
    assert_eq!(clean, Some(0), "seed 1 is valid:\n{text}");
    assert!(
        (text.lines()).any(|l| l.contains("grant-written-after-connection-end")
            && l.split_whitespace().nth(1) == Some("1")),
        "seed 1 reaches the path:\n{text}"
    );
    let (mutant, text) = sim_seed(1, Some("grant-written-after-end-kept"));
    assert_eq!(mutant, Some(1), "the mutant is caught on seed 1:\n{text}");
    assert!(
        text.contains("neither written to it while it was open nor released as an orphan"),
        "by the connection's account:\n{text}"
    );
}

/// The FIFO rule (2026-12-07): DESIGN.md promises waiters served in the order they came, and
/// nothing looked at the order; a leader that serves the last waiter first answers every
/// request truthfully and keeps every lock safe, so no history shows it. The step rule of
/// the trace replay does: seed 1 grants a freed key while later waiters still wait, and the
/// mutant `waiters-served-lifo` breaks the order there.
#[test]
fn waiters_are_served_in_the_order_they_came_and_the_lifo_mutant_is_caught() {
    let (clean, text) = sim_seed(1, None);
    assert_eq!(clean, Some(0), "seed 1 is valid:\n{text}");
    assert!(
        (text.lines()).any(|l| l.contains("waiter-granted-with-others-waiting")
            && l.split_whitespace().nth(1) == Some("1")),
        "seed 1 reaches the order:\n{text}"
    );
    let (mutant, text) = sim_seed(1, Some("waiters-served-lifo"));
    assert_eq!(mutant, Some(1), "the mutant is caught on seed 1:\n{text}");
    assert!(
        text.contains("(DESIGN.md: waiters are served FIFO)"),
        "by the FIFO rule:\n{text}"
    );
    // The rule's first find, in lockd itself: a refused retry put back at the head of the
    // queue (kept as the mutant `refused-retry-to-head`). Seed 4 reaches it.
    let (clean, text) = sim_seed(4, None);
    assert_eq!(clean, Some(0), "seed 4 is valid:\n{text}");
    let (mutant, text) = sim_seed(4, Some("refused-retry-to-head"));
    assert_eq!(mutant, Some(1), "the mutant is caught on seed 4:\n{text}");
    assert!(
        text.contains("queued a waiter ahead of one already waiting"),
        "by the FIFO rule:\n{text}"
    );
}

/// The review's snapshot stall (2026-12-07): after a follower's restart, a late answer from
/// before it named more bytes than the follower held, and a leader that then ignored every
/// count below its own sent from past them for as long as it led. Seed 37 reaches such a
/// count with the review's fix undone (`late-snapshot-answer-stalls`), and the step rule on
/// chunked snapshots names the answer left without its chunk.
#[test]
fn the_snapshot_transfers_mutants_are_caught_by_the_step_rules() {
    let (mutant, text) = sim_seed(37, Some("late-snapshot-answer-stalls"));
    assert_eq!(mutant, Some(1), "the mutant is caught on seed 37:\n{text}");
    assert!(
        text.contains("sent it no chunk from there"),
        "by the step rule on chunked snapshots:\n{text}"
    );
    let (clean, text) = sim_seed(37, None);
    assert_eq!(clean, Some(0), "seed 37 is valid:\n{text}");
    // The third campaign's snapshot mistake, kept as `snapshot-ack-before-persist`: a
    // follower that acknowledges an installed snapshot before its persist, on seed 5.
    let (mutant, text) = sim_seed(5, Some("snapshot-ack-before-persist"));
    assert_eq!(mutant, Some(1), "the mutant is caught on seed 5:\n{text}");
    assert!(
        text.contains("before its step's persist"),
        "by the step rule on acknowledgements:\n{text}"
    );
}

/// `locksmith sim --seeds SEED --no-shrink` (with `--bug`): its exit code and its output.
fn sim_seed(seed: u64, bug: Option<&str>) -> (Option<i32>, String) {
    let store = tempfile::tempdir().expect("a temporary folder");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_locksmith"));
    command.args([
        "sim",
        "--seeds",
        &seed.to_string(),
        "--no-shrink",
        "--store",
    ]);
    command.arg(store.path());
    if let Some(bug) = bug {
        command.args(["--bug", bug]);
    }
    let out = command.output().expect("locksmith runs");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// A tick that leaves a due timer unfired (`tick-misses-timers-due-now`, an off-by-one) makes
/// the driver wake for the same deadline again at once: under the simulator, where time moves
/// only between steps, the core spins at one instant. A stale timer deadline of the third
/// campaign so spun one seed for 650 s of CPU in 12 GB, and the seed ended valid; the core's
/// spin check now stops such a node, and node health names the spin. Seed 1 reaches it at
/// once.
#[test]
fn a_core_that_spins_on_a_due_deadline_is_stopped_and_named() {
    let (mutant, text) = sim_seed(1, Some("tick-misses-timers-due-now"));
    assert_eq!(mutant, Some(1), "the mutant is caught on seed 1:\n{text}");
    assert!(
        text.contains("for a deadline at one instant without its clock moving"),
        "by the spin check:\n{text}"
    );
    let (clean, text) = sim_seed(1, None);
    assert_eq!(clean, Some(0), "seed 1 is valid:\n{text}");
}
