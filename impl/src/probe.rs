//! Coverage probes (issue 24; Antithesis's `sometimes` assertions, FoundationDB's
//! `CODE_PROBE`): `probe!("name")` marks a rare state the simulator should reach. A probe
//! only sets a flag, in this process, that `locksmith sim` reads after each seed (every seed
//! runs in a child process of its own) and sums into its coverage table: each probe, the
//! seeds that reached it and the first. A probe marked required that no seed of a run reached
//! fails `locksmith sim --require-probes` (ci/test.sh).
//!
//! Every name is declared once in [`PROBES`]; a `probe!` with an undeclared name panics in a
//! debug build and is counted nowhere in a release one (a unit test reads the sources and
//! checks every `probe!` name is declared, and every declared name is used).

use std::sync::atomic::{AtomicBool, Ordering};

/// One probe: its name, whether a run of default seeds must reach it, and what it marks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The name `probe!` takes.
    pub name: &'static str,
    /// Whether `locksmith sim --require-probes` fails when no seed reached it.
    pub required: bool,
    /// The state it marks.
    pub what: &'static str,
}

const fn probe(name: &'static str, required: bool, what: &'static str) -> Probe {
    Probe {
        name,
        required,
        what,
    }
}

/// Every probe, in the order of the coverage table.
pub const PROBES: &[Probe] = &[
    // Required since the fault points (`lockd::buggify`): 60 default swarm seeds never
    // reached it before them (2026-12-05); with them, 39 of 200 seeds do.
    probe(
        "grant-to-gone-client",
        true,
        "a grant answered as its client's connection closed (the core releases it)",
    ),
    probe(
        "retry-answered-from-dedupe",
        true,
        "a retried request answered from the dedupe table",
    ),
    probe(
        "snapshot-installed-with-locks",
        true,
        "a follower installed a snapshot holding locks",
    ),
    probe(
        "leader-stepped-down-with-pending",
        true,
        "a leader stepped down with requests pending",
    ),
    probe(
        "check-quorum-step-down",
        false,
        "a leader stepped down for want of a quorum",
    ),
    probe(
        "lease-expired-by-leader",
        true,
        "an Expire removed a lock whose lease ran out",
    ),
    probe(
        "phantom-release-applied",
        true,
        "a system Release freed the lock of a client that left",
    ),
    // Required from the start: 46 of seeds 1..200 reach it (2026-12-06, first seed 3).
    probe(
        "grant-cancelled-after-answer",
        true,
        "a client cancelled a call whose grant was already answered (released as an orphan)",
    ),
    // Required from the start: 68 of seeds 1..200 reach it (2026-12-06).
    probe(
        "abandoned-grant-released",
        true,
        "an Abandon freed a grant its client stopped waiting for",
    ),
    probe(
        "waiter-granted",
        true,
        "a queued acquire was granted when the key came free",
    ),
    // Required from the start: 117 of seeds 1..200, 552 of 1..1000 reach it (2026-12-07).
    probe(
        "waiter-granted-with-others-waiting",
        true,
        "a queued acquire was granted while later ones still waited for the key (FIFO order)",
    ),
    // Required from the start: 64 of seeds 1..200, 279 of 1..1000 reach it (2026-12-07).
    probe(
        "snapshot-sent-in-chunks",
        true,
        "a leader sent a snapshot chunk past the first (a transfer of several chunks)",
    ),
    probe(
        "snapshot-transfer-rewound",
        false,
        "a follower's answer named fewer snapshot bytes than the leader had taken (it restarted, or an answer came late)",
    ),
    // Required from the start: 17 of seeds 1..200, 93 of 1..1000 reach it (2026-12-07).
    probe(
        "waiter-lost-race",
        true,
        "a queued acquire's Grant was refused on apply and the waiter went back to the queue",
    ),
    probe(
        "restart-from-snapshot",
        true,
        "a node restarted from a snapshot on its disk",
    ),
    probe(
        "append-rejected",
        true,
        "a follower refused AppendEntries (logs diverged or lagged)",
    ),
    probe(
        "fault-point-fired",
        true,
        "a fault point (`lockd::buggify!`) fired",
    ),
    probe(
        "crash-point-crashed",
        true,
        "a crash point crashed a node between its sends and its persist",
    ),
    // The path of the `grant-to-closed-connection` mutant: reached by none of 1,000 default
    // seeds until `client-cut-connection` could cut hard, now by 8 of 200 (first seed 23;
    // 2026-12-05). Optional: too rare to demand of every 200-seed range.
    probe(
        "grant-ready-as-connection-closed",
        false,
        "a request handler found its grant and the end of its connection ready at once",
    ),
    // Required since the crash point `crash-inside-write` and the simulated disk's
    // sector-by-sector writes (2026-12-05): 5 of default seeds 1..100 reach it.
    probe(
        "torn-tail-cut",
        true,
        "storage cut a torn record at the end of a segment on restart",
    ),
    // Seeds draw a short session timeout one in three (2026-12-05), so that liveness rule S
    // has expiries to judge.
    probe(
        "session-expired-by-timeout",
        true,
        "a session idle past the session timeout was dropped from the table",
    ),
    // The path of a review defect of sessions (2026-12-06): a holder's release answered
    // `SessionExpired` changed nothing and left its key held for the rest of the lease.
    probe(
        "release-under-new-session",
        false,
        "a release answered SessionExpired freed its lock when sent again under a new session",
    ),
    // The window of the crash point `crash-after-snapshot-file` that lost a term (review,
    // 2026-12-06): an installed snapshot persisted with a term the segment did not hold yet.
    probe(
        "snapshot-persisted-with-new-term",
        false,
        "storage wrote an installed snapshot whose persist also raised the term",
    ),
    // The window of the orphan's Release lost with its term (review, 2026-12-06), where the
    // core's contract check `Core::check_orphans_proposed` can catch the defect.
    probe(
        "orphan-release-lost-with-its-term",
        false,
        "a node led again while its table held an orphan whose Release it proposed in an \
         earlier term and lost with it",
    ),
    // The clean exit's hand-over (review of leases and hand-over, 2026-12-06), reached by
    // the crash point `crash-after-clean-exit` only.
    probe(
        "leader-exited-cleanly",
        false,
        "a leader exited cleanly (TimeoutNow to its followers) and its process was gone",
    ),
    // Where a fault point stalls a leader's core (`orphan-release-stall`), which the
    // simulator records as a pause of that node: unrecorded, it made a clean seed invalid.
    probe(
        "core-stalled",
        false,
        "a fault point stalled a node's core, recorded in the history as a pause",
    ),
    // The interleaving of a review defect (2026-12-06) that no tool reached until the point
    // `serve-boundary-yield` opened it on the simulator's one thread. Required from the
    // start: 22 of seeds 1..300 reach it (first seed 65; 26, first seed 6, once the
    // phantom-lock probe gained its round with a crashing leaver).
    probe(
        "cancel-read-before-grant-recorded",
        true,
        "a client's Cancel was read after its handler answered a grant and before the \
         connection recorded it (released as an orphan)",
    ),
    // The connection's account of its grants (2026-12-07): the two paths that release a
    // grant recorded with its connection open and never read by its client. Required: 12 and
    // 16 of seeds 1..200 reach them, 60 and 70 of seeds 1..1000.
    probe(
        "grant-written-after-connection-end",
        true,
        "a grant recorded with its connection open was written after the connection's end \
         (released as an orphan)",
    ),
    probe(
        "grant-unwritten-at-connection-end",
        true,
        "a connection ended with a recorded grant whose answer was never written (released \
         as an orphan)",
    ),
];

static REACHED: [AtomicBool; PROBES.len()] = [const { AtomicBool::new(false) }; PROBES.len()];

/// Marks `name` reached in this process (what `probe!` calls).
pub fn hit(name: &str) {
    match PROBES.iter().position(|p| p.name == name) {
        Some(i) => REACHED[i].store(true, Ordering::Relaxed),
        None => debug_assert!(
            false,
            "probe {name:?} is not declared in lockd::probe::PROBES"
        ),
    }
}

/// The probes reached in this process so far, and forgets them (the simulator takes them
/// after the run, before its trace replay steps cores of its own).
pub fn take() -> Vec<&'static str> {
    (PROBES.iter().zip(&REACHED))
        .filter(|(_, reached)| reached.swap(false, Ordering::Relaxed))
        .map(|(p, _)| p.name)
        .collect()
}

/// Marks a declared probe reached: `lockd::probe!("name")` (see the module doc).
#[macro_export]
macro_rules! probe {
    ($name:literal) => {
        $crate::probe::hit($name)
    };
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn the_table_fits_and_names_are_unique() {
        assert!(PROBES.len() <= REACHED.len());
        let mut names: Vec<&str> = PROBES.iter().map(|p| p.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), PROBES.len());
    }

    /// Every `NAME` of `PREFIXNAME"` in the crate's sources but `skip` (the file that
    /// declares the names).
    pub(crate) fn names_in_sources(prefix: &str, skip: &str) -> Vec<String> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut used = Vec::new();
        let mut stack = vec![root];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("src is readable") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with(skip) {
                    let text = std::fs::read_to_string(&path).expect("source is text");
                    for part in text.split(prefix).skip(1) {
                        used.push(part.split('"').next().unwrap_or_default().to_owned());
                    }
                }
            }
        }
        used
    }

    #[test]
    fn every_probe_in_the_sources_is_declared_and_every_declared_one_used() {
        let used = names_in_sources("probe!(\"", "probe.rs");
        for name in &used {
            assert!(
                PROBES.iter().any(|p| p.name == name),
                "probe!({name:?}) is not declared"
            );
        }
        for p in PROBES {
            assert!(
                used.iter().any(|u| u == p.name),
                "{} is never marked",
                p.name
            );
        }
    }

    #[test]
    fn take_returns_what_was_hit() {
        hit("waiter-granted");
        let first = take();
        assert!(first.contains(&"waiter-granted"), "{first:?}");
    }
}
