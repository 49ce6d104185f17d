//! `locksmith test`: the harness ([`crate::harness`]) in the world of real processes. Sets
//! up the cluster and its net, waits for a leader, runs the harness (workload, faults, final
//! heal, recovery, phantom probe), tears down, checks the history through the one pipeline
//! ([`crate::store::pipeline`]) and writes `store/<test>/<timestamp>/` ([`crate::store::RunDir`]).
//!
//! Every step is bounded: the cluster must show a leader within [`START_TIMEOUT_MS`]; the
//! harness bounds the rest. Teardown runs on every path: the cluster and the net are guards
//! that undo themselves on drop.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use checker::Verdict;

use crate::Error;
use crate::cluster::{Cluster, Layout};
use crate::harness::recorder::Recorder;
use crate::harness::workload::ClientPauses;
use crate::harness::{self, World};
use crate::net::kernel::Kernel;
use crate::net::owner::{self, Owner};
use crate::net::proxy::Proxy;
use crate::net::{Net, NetKind};
use crate::store::pipeline;
use crate::store::{Results, RunDir};
use crate::systems::System;

pub use crate::harness::TestOptions;

pub use crate::harness::START_TIMEOUT_MS;

/// What a run produced.
#[derive(Clone, Debug)]
pub struct RunOutcome {
    /// `store/<test>/<timestamp>/`.
    pub dir: PathBuf,
    /// 0 valid, 1 invalid, 2 unknown.
    pub exit_code: i32,
    /// The merged verdict: the checks' and the run's own (node health, recovery).
    pub verdict: Verdict,
    /// The results, as written to results.json.
    pub results: Results,
    /// Faults that failed or did nothing, and nodes the nemesis never acted on, in words.
    pub fault_notes: Vec<String>,
    /// The checks' explanation in words.
    pub explanation: String,
}

/// A UTC timestamp `YYYYMMDDTHHMMSS.mmmZ` (civil-from-days; no time zone database needed).
pub fn timestamp(now: SystemTime) -> String {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's days_from_civil inverse.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}.{:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        since.subsec_millis()
    )
}

/// Starts the net of `kind`. For a system that cannot dial per link, `kernel` is the owner
/// net: it creates one user per node, gives each data dir to its user and records the users
/// in `layout.users` for the launcher.
async fn start_net(
    kind: NetKind,
    system: &dyn System,
    layout: &mut Layout,
) -> Result<Arc<dyn Net>, Error> {
    if kind == NetKind::Kernel && !system.per_link_dial() {
        Owner::available().map_err(Error::Unsupported)?;
        let users = owner::ensure_users(&layout.nodes)?;
        for (id, user) in &users {
            owner::give_dir(&layout.data_dir[id], *user)?;
        }
        layout.users = users.clone();
        return Ok(Arc::new(Owner::start(&layout.peer, &users)?));
    }
    Ok(match kind {
        NetKind::Proxy => Arc::new(Proxy::start(&layout.peer).await?),
        NetKind::Kernel => Arc::new(Kernel::start(&layout.peer).await?),
        NetKind::Netns => Arc::new(crate::net::netns::Netns::start(layout)?),
    })
}

/// A short id for a remote run's directory and iptables chain, unique enough across the
/// runs of one host: the seed, this process and the clock.
fn remote_run_id(seed: u64) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    format!(
        "{:08x}",
        (seed as u32) ^ std::process::id().rotate_left(16) ^ nanos
    )
}

/// Runs one complete test (see the module docs). `Err` means the run could not be done
/// (exit 2); an anomaly is `Ok` with exit code 1.
pub async fn run(options: &TestOptions, system: Arc<dyn System>) -> Result<RunOutcome, Error> {
    let started = std::time::Instant::now();
    let run = RunDir::create(
        options
            .store
            .join(options.test_name(system.name()))
            .join(timestamp(SystemTime::now())),
    )?;
    let dir = run.path().to_path_buf();
    eprintln!("locksmith test: seed {} -> {}", options.seed, dir.display());
    run.write_plan(options, &options.plan())?;

    // The data dirs are temporary directories inside the run's directory.
    let data = tempfile::Builder::new()
        .prefix("data-")
        .tempdir_in(&dir)
        .map_err(|e| Error::Io(format!("data dir: {e}")))?;
    let (mut layout, reservation) = Layout::reserve(options.nodes, data.path())?;
    layout.log_dir = run.node_logs();
    // With --hosts, the nodes, their net and their launcher are the remote hosts'.
    let remote = match &options.hosts {
        Some(hosts) => Some(crate::hosts::remote::RemoteRun::connect(
            hosts,
            &remote_run_id(options.seed),
            &layout.log_dir,
        )?),
        None => None,
    };
    let net = match &remote {
        Some(remote) => {
            layout = remote.layout();
            remote.net()?
        }
        None => start_net(options.net, system.as_ref(), &mut layout).await?,
    };
    let mut dial = BTreeMap::new();
    for s in &layout.nodes {
        for t in &layout.nodes {
            if s != t {
                dial.insert((*s, *t), net.dial_addr(*s, *t));
            }
        }
    }
    let mut launcher = net.wrap_launcher(system.launcher(&layout, dial)?);
    if let Some(remote) = &remote {
        launcher = remote.launcher(launcher)?;
    }
    // The net's listeners are bound: the nodes' ports can be let go now.
    reservation.release();
    let cluster = Arc::new(Cluster::start(launcher, &layout.nodes, &layout.log_dir)?);
    let world = World {
        system: system.clone(),
        layout: layout.clone(),
        nodes: cluster.clone(),
        net: net.clone(),
        clients: Arc::new(ClientPauses::default()),
        blocking_pool: true,
    };
    let first_leader = harness::await_cluster(&world).await?;
    eprintln!(
        "locksmith test: {} nodes up (each answered a status call), {} after {:?}",
        options.nodes,
        first_leader.map_or_else(
            || "no leader to ask for".to_owned(),
            |l| format!("leader n{l}")
        ),
        started.elapsed()
    );
    let recorder = Arc::new(Recorder::create(&run.file(RunDir::HISTORY))?);
    let execution = harness::execute(options, world, recorder.clone()).await;
    let mut teardown_error = teardown(&cluster, net.as_ref());
    if let Some(Err(e)) = remote.as_ref().map(|r| r.finish()) {
        teardown_error = Some(format!(
            "{}{e}",
            teardown_error.map(|t| t + "; ").unwrap_or_default()
        ));
    }
    recorder.finish()?;
    drop(data);

    let ticker = options
        .progress
        .then(|| crate::progress::Ticker::start("test", "checking the history"));
    // With traces, the nodes' traces through the model: catches what no client saw (a
    // restart that lost acknowledged writes, a grant without the log behind it).
    let mut extra = harness::run_checks(&execution, None, system.traces().then_some(&*dir));
    // The system's own checks vouch for the history (exec: the adapters kept the protocol).
    // When one of them is unknown, so is the run, whatever the checks of that history say.
    let vouching = system.checks();
    let distrust = vouching
        .iter()
        .find(|c| c.checked && matches!(c.verdict, Verdict::Unknown { .. }))
        .map(|c| {
            format!(
                "{}: the history is not trusted, so neither is any verdict on it",
                c.name
            )
        });
    extra.extend(vouching);
    use checker::liveness::CancelledGrants;
    let liveness = checker::liveness::LivenessOptions::default()
        .with_session_timeout_ms(system.session_timeout_ms())
        .with_cancelled_grants(if system.releases_cancelled_grants() {
            CancelledGrants::Released
        } else {
            CancelledGrants::MayBeKept
        });
    let check_options = checker::Options::default()
        .with_owner_aware_release(system.owner_aware_release())
        .with_liveness(liveness);
    let mut output = pipeline::check_history_with(&dir, &check_options, extra);
    if let Some(reason) = distrust {
        output.verdict = Verdict::unknown(reason);
    }
    // The system's own story of an anomaly (redis: two holders of a key, with a timeline).
    if output.verdict == Verdict::Invalid
        && let Some(check) = &output.check
        && let Ok(ops) = history::csv::read_path(&run.file(RunDir::HISTORY))
        && let Some(story) = system.explain(&ops, check)
    {
        output.explanation = format!("{}\n{story}", output.explanation.trim_end());
    }
    drop(ticker);
    let mut results = Results::of(
        options,
        system.name(),
        "processes",
        &execution,
        recorder.len() as u64,
    );
    results.teardown_error = teardown_error;
    results.duration_ms = started.elapsed().as_millis() as u64;
    results.judge(output);
    run.write_results(&results)?;
    Ok(RunOutcome {
        dir,
        exit_code: results.exit_code,
        verdict: results.verdict.clone(),
        explanation: results.explanation.clone(),
        fault_notes: results.faults.notes.clone(),
        results,
    })
}

/// Undoes what the run left: the cluster (SIGCONT, SIGKILL) and the net's rules.
fn teardown(cluster: &Cluster, net: &dyn Net) -> Option<String> {
    let mut errors = Vec::new();
    if let Err(e) = cluster.teardown() {
        errors.push(format!("cluster: {e}"));
    }
    if let Err(e) = net.teardown() {
        errors.push(format!("net: {e}"));
    }
    (!errors.is_empty()).then(|| errors.join("; "))
}

/// The directory of the newest run of a test under `store` (for tools and tests).
pub fn latest_run(store: &Path, test: &str) -> Option<PathBuf> {
    let mut runs: Vec<PathBuf> = std::fs::read_dir(store.join(test))
        .ok()?
        .flatten()
        .map(|e| e.path())
        .collect();
    runs.sort();
    runs.pop()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps_are_utc_civil_dates() {
        // Jepsen store layout: store/<test>/<timestamp>/; the timestamp sorts by time.
        let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(timestamp(t), "20231114T221320.123Z");
        assert_eq!(timestamp(UNIX_EPOCH), "19700101T000000.000Z");
    }

    #[test]
    fn test_names_say_system_faults_workload_and_bug() {
        // DESIGN "The harness": store/<test>/...
        let mut o = TestOptions::default();
        assert_eq!(o.test_name("lockd"), "lockd-kill+pause+partition+clock");
        o.workload = crate::harness::workload::WorkloadKind::Unfenced;
        o.nemesis = vec![crate::faults::FaultKind::Pause];
        o.bug = Some("no-fsync".into());
        assert_eq!(o.test_name("lockd"), "lockd-pause-unfenced-bug-no-fsync");
    }
}
