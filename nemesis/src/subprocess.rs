//! Bounded subprocesses: every local command the harness runs (`iptables`, `nft`, `ip`,
//! `ssh`, `sha256sum`) and every reap of a killed node goes through this module, so each
//! has a deadline (practice 13) and a timeout is reported the same way everywhere (issue 23
//! replaced five hand-written `try_wait` loops with it).
//!
//! The shape:
//! - [`wait_bounded`] waits for a child the caller spawned, polling `try_wait` with a short
//!   backoff (at most [`POLL_INTERVAL_MAX_MS`] between checks). At the deadline it SIGKILLs
//!   the child's process group when the child leads one (every child started here does),
//!   else the child alone, reaps it within [`KILL_REAP_TIMEOUT_MS`], and returns
//!   [`Error::Timeout`] naming the command and the bound. Processes are signalled by pid or
//!   process group only, never by name.
//! - [`run_bounded`] and [`run_bounded_with`] spawn a command in its own process group (so
//!   a Ctrl-C at the terminal does not kill the commands that clean up after it, and a
//!   timeout also ends what the command started), capture its stdout and stderr, and wait
//!   with [`wait_bounded`].
//!
//! Output goes to unnamed temporary files, not pipes. A child cannot block on a full pipe,
//! so waiting needs no reader threads, and a process the command leaves behind holding its
//! output open (a daemon, an SSH ControlMaster that was passed the descriptors) cannot hold
//! up the caller once the command itself has exited. Stdin bytes go through a temporary
//! file for the same reason: writing them can never block. Each stream keeps at most
//! [`OUTPUT_MAX_BYTES`]; a command that prints more is an error that says so.

use std::fs::File;
use std::io::{Read as _, Seek as _, Write as _};
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::{Pid, getpgid};

use crate::Error;

/// The longest sleep between two checks of a running child, ms. The first checks come
/// after 1, 2, 4 and 8 ms, so a quick command (most of them) costs little latency, and a
/// slow one costs at most this many wake-ups of 10 ms.
pub const POLL_INTERVAL_MAX_MS: u64 = 10;
/// How long a child SIGKILLed at its deadline may take to be reaped, ms. A child that is
/// not reaped by then is stuck in the kernel; the timeout error says so.
pub const KILL_REAP_TIMEOUT_MS: u64 = 1_000;
/// The most output kept from one stream (stdout or stderr) of one command, bytes. The
/// commands run here print a line or a few; more than this is a fault worth reporting.
pub const OUTPUT_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// What a bounded command reads on its stdin.
#[derive(Debug)]
pub enum Input<'a> {
    /// Nothing (`/dev/null`).
    Null,
    /// This file, from its current offset.
    File(File),
    /// These bytes.
    Bytes(&'a [u8]),
}

/// `Ok` when the command exited 0, else an error with `what`, its status and its stderr.
pub fn succeeded(output: Output, what: &str) -> Result<Output, Error> {
    if output.status.success() {
        return Ok(output);
    }
    Err(Error::Io(format!(
        "{what}: {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    )))
}

/// Runs `command` with no input within `timeout`, capturing its output; see
/// [`run_bounded_with`].
pub fn run_bounded(command: &mut Command, timeout: Duration, what: &str) -> Result<Output, Error> {
    run_bounded_with(command, Input::Null, timeout, what)
}

/// Runs `command` on `input` within `timeout` in its own process group, and returns its
/// exit status, stdout and stderr, whatever the status (the caller judges it). `what`
/// names the command in errors.
///
/// Errors: [`Error::Timeout`] when it does not finish within `timeout` (its process group
/// is then killed and reaped); [`Error::Io`] when it cannot be started or waited for, or
/// prints more than [`OUTPUT_MAX_BYTES`] on one stream.
pub fn run_bounded_with(
    command: &mut Command,
    input: Input<'_>,
    timeout: Duration,
    what: &str,
) -> Result<Output, Error> {
    let io = |step: &str, e: std::io::Error| Error::Io(format!("{what}: {step}: {e}"));
    let stdin = match input {
        Input::Null => Stdio::null(),
        Input::File(file) => Stdio::from(file),
        Input::Bytes(bytes) => {
            let mut file = tempfile::tempfile().map_err(|e| io("stdin tempfile", e))?;
            file.write_all(bytes).map_err(|e| io("write stdin", e))?;
            file.rewind().map_err(|e| io("write stdin", e))?;
            Stdio::from(file)
        }
    };
    let mut stdout = tempfile::tempfile().map_err(|e| io("stdout tempfile", e))?;
    let mut stderr = tempfile::tempfile().map_err(|e| io("stderr tempfile", e))?;
    command
        .stdin(stdin)
        .stdout(Stdio::from(
            stdout.try_clone().map_err(|e| io("stdout", e))?,
        ))
        .stderr(Stdio::from(
            stderr.try_clone().map_err(|e| io("stderr", e))?,
        ))
        .process_group(0);
    let mut child = command
        .spawn()
        .map_err(|e| Error::Io(format!("{what}: {e}")))?;
    let status = wait_bounded(&mut child, timeout, what)?;
    Ok(Output {
        status,
        stdout: read_capped(&mut stdout, OUTPUT_MAX_BYTES, what, "stdout")?,
        stderr: read_capped(&mut stderr, OUTPUT_MAX_BYTES, what, "stderr")?,
    })
}

/// Waits up to `timeout` for `child` to exit and returns its status. At the deadline it
/// SIGKILLs the child's process group (when the child leads one) or else the child, reaps
/// it (within [`KILL_REAP_TIMEOUT_MS`]), and returns [`Error::Timeout`] naming `what`, the
/// pid and the bound. A failed `wait` is [`Error::Io`].
pub fn wait_bounded(child: &mut Child, timeout: Duration, what: &str) -> Result<ExitStatus, Error> {
    let pid = child.id();
    let waited = |e: std::io::Error| Error::Io(format!("{what} (pid {pid}): wait: {e}"));
    if let Some(status) = poll_until(child, timeout).map_err(waited)? {
        return Ok(status);
    }
    let killed = kill(child);
    let reaped = poll_until(child, Duration::from_millis(KILL_REAP_TIMEOUT_MS));
    let after = match reaped {
        Ok(Some(_)) => String::new(),
        Ok(None) => format!(", and it was not reaped within {KILL_REAP_TIMEOUT_MS} ms"),
        Err(e) => format!(", and reaping it failed: {e}"),
    };
    Err(Error::Timeout(format!(
        "{what} (pid {pid}) did not finish within {timeout:?}; killed {killed}{after}"
    )))
}

/// `try_wait` until the child exits (its status) or `timeout` passes (`None`).
fn poll_until(child: &mut Child, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
    let started = Instant::now();
    let mut sleep = Duration::from_millis(1);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        let left = timeout.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Ok(None);
        }
        std::thread::sleep(sleep.min(left));
        sleep = (sleep * 2).min(Duration::from_millis(POLL_INTERVAL_MAX_MS));
    }
}

/// SIGKILLs the child's process group if it leads one, else the child; says which.
fn kill(child: &mut Child) -> &'static str {
    let pid = Pid::from_raw(child.id() as i32);
    // The child is not reaped yet, so neither its pid nor a group it leads can have been
    // reused by another process.
    if getpgid(Some(pid)) == Ok(pid) {
        // SIGKILL also ends stopped (SIGSTOPped) members; no SIGCONT is needed first.
        let _ = killpg(pid, Signal::SIGKILL);
        "its process group"
    } else {
        let _ = child.kill();
        "it"
    }
}

/// Reads `file` from the start, at most `max_bytes` of it; more is an error naming the
/// bound.
fn read_capped(
    file: &mut File,
    max_bytes: u64,
    what: &str,
    stream: &str,
) -> Result<Vec<u8>, Error> {
    let io = |e: std::io::Error| Error::Io(format!("{what}: read {stream}: {e}"));
    let len = file.metadata().map_err(io)?.len();
    if len > max_bytes {
        return Err(Error::Io(format!(
            "{what}: printed {len} bytes on {stream}, more than the {max_bytes} bytes kept \
             (OUTPUT_MAX_BYTES)"
        )));
    }
    file.rewind().map_err(io)?;
    let mut bytes = Vec::new();
    file.take(max_bytes).read_to_end(&mut bytes).map_err(io)?;
    Ok(bytes)
}

/// Runs `work` on the `items` with `jobs` threads, taking them in list order, until `work`
/// fails (its error is returned) or `stop` holds of a result (the items in flight finish).
/// `seen` hears each result as it comes. Returns the results, in list order, of the items
/// that ran (`locksmith sim` runs its seeds' children so).
pub fn run_parallel<T: Sync, R: Send>(
    items: &[T],
    jobs: usize,
    work: impl Fn(&T) -> Result<R, String> + Sync,
    stop: impl Fn(&R) -> bool + Sync,
    seen: impl Fn(&R) + Sync,
) -> Result<Vec<R>, String> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let (next, halt) = (AtomicUsize::new(0), AtomicBool::new(false));
    let results: std::sync::Mutex<Vec<(usize, Result<R, String>)>> = Default::default();
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, items.len().max(1)) {
            scope.spawn(|| {
                while !halt.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    let result = work(item);
                    if result.as_ref().map_or(true, &stop) {
                        halt.store(true, Ordering::Relaxed);
                    }
                    if let Ok(r) = &result {
                        seen(r);
                    }
                    results
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((i, result));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_parallel_keeps_list_order_stops_on_a_result_and_returns_the_first_error() {
        let items: Vec<u64> = (1..=20).collect();
        let all = run_parallel(&items, 3, |&i| Ok(i * 2), |_| false, |_| {});
        assert_eq!(all, Ok(items.iter().map(|i| i * 2).collect()));
        let stopped = run_parallel(&items, 1, |&i| Ok(i), |&r| r == 5, |_| {});
        assert_eq!(
            stopped,
            Ok(vec![1, 2, 3, 4, 5]),
            "one job stops after the result 5"
        );
        let seen = std::sync::Mutex::new(0);
        let failing = |&i: &u64| {
            if i == 3 {
                Err("three".to_owned())
            } else {
                Ok(i)
            }
        };
        let err = run_parallel(
            &items,
            2,
            failing,
            |_| false,
            |_| *seen.lock().unwrap() += 1,
        );
        assert_eq!(err, Err("three".to_owned()));
        assert!(*seen.lock().unwrap() < 20, "the work stopped at the error");
    }

    /// True when `pid` is gone or a zombie (dead, waiting for its parent to reap it).
    fn dead(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            // The state is the field after the parenthesised command name.
            Ok(stat) => stat
                .rsplit(')')
                .next()
                .and_then(|s| s.trim().chars().next())
                .is_some_and(|state| state == 'Z' || state == 'X'),
        }
    }

    #[test]
    fn a_finished_command_returns_its_status_and_output() {
        // Issue 23: the helper returns what the command printed, whatever its status.
        let mut command = Command::new("sh");
        command.args(["-c", "echo out; echo err >&2; exit 3"]);

        let out = run_bounded(&mut command, Duration::from_secs(5), "sh").expect("runs");

        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
    }

    #[test]
    fn input_bytes_and_files_reach_stdin() {
        // owner.rs feeds nft a script; remote.rs uploads a file through ssh's stdin.
        let mut file = tempfile::tempfile().expect("tempfile");
        file.write_all(b"from a file").expect("write");
        file.rewind().expect("rewind");

        let bytes = run_bounded_with(
            &mut Command::new("cat"),
            Input::Bytes(b"from bytes"),
            Duration::from_secs(5),
            "cat",
        )
        .expect("cat bytes");
        let from_file = run_bounded_with(
            &mut Command::new("cat"),
            Input::File(file),
            Duration::from_secs(5),
            "cat",
        )
        .expect("cat file");

        assert_eq!(bytes.stdout, b"from bytes");
        assert_eq!(from_file.stdout, b"from a file");
    }

    #[test]
    fn a_command_past_its_bound_is_killed_reaped_and_reported() {
        // Practice 13: reaching a bound is reported, and the child does not outlive it.
        let mut command = Command::new("sleep");
        command.arg("5").process_group(0);
        let mut child = command.spawn().expect("spawn sleep");
        let pid = child.id();
        let started = Instant::now();

        let result = wait_bounded(&mut child, Duration::from_millis(200), "sleep 5");

        let elapsed = started.elapsed();
        let Err(Error::Timeout(message)) = result else {
            panic!("expected a timeout, got {result:?}");
        };
        assert!(elapsed < Duration::from_millis(700), "took {elapsed:?}");
        assert!(
            message.contains("sleep 5") && message.contains("200ms"),
            "{message}"
        );
        assert!(message.contains("killed its process group"), "{message}");
        // Reaped: the pid is gone, not even a zombie.
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "pid {pid} still exists"
        );
    }

    #[test]
    fn a_timeout_also_kills_what_the_command_started() {
        // The command runs in its own process group, and the whole group is killed.
        let dir = tempfile::tempdir().expect("tempdir");
        let pid_file = dir.path().join("pid");
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!("sleep 5 & echo $! > {}; wait", pid_file.display()));
        let started = Instant::now();

        let result = run_bounded(&mut command, Duration::from_millis(200), "sh sleep");

        assert!(matches!(result, Err(Error::Timeout(_))), "{result:?}");
        assert!(started.elapsed() < Duration::from_millis(700));
        let grandchild: u32 = std::fs::read_to_string(&pid_file)
            .expect("pid file")
            .trim()
            .parse()
            .expect("a pid");
        // Its parent (sh) is dead, so init reaps it; allow a moment for that.
        let gone_by = Instant::now() + Duration::from_secs(1);
        while !dead(grandchild) && Instant::now() < gone_by {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(dead(grandchild), "sleep {grandchild} survived the timeout");
    }

    #[test]
    fn a_child_outside_its_own_group_is_killed_alone() {
        // wait_bounded kills whichever the caller set up: a group it leads, or the child.
        let mut child = Command::new("sleep").arg("5").spawn().expect("spawn sleep");

        let result = wait_bounded(&mut child, Duration::from_millis(50), "sleep 5");

        let Err(Error::Timeout(message)) = result else {
            panic!("expected a timeout, got {result:?}");
        };
        assert!(message.ends_with("killed it"), "{message}");
    }

    #[test]
    fn a_command_printing_a_lot_does_not_deadlock() {
        // A pipe would fill at 64 KiB and block the child; files do not.
        let mut command = Command::new("sh");
        command.args(["-c", "yes | head -c 2000000"]);
        let started = Instant::now();

        let out = run_bounded(&mut command, Duration::from_secs(10), "yes").expect("runs");

        assert!(out.status.success(), "{:?}", out.status);
        assert_eq!(out.stdout.len(), 2_000_000);
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn output_past_its_bound_is_an_error_naming_it() {
        // Practice 13: the output kept is bounded, and reaching the bound is reported.
        let mut file = tempfile::tempfile().expect("tempfile");
        file.write_all(b"0123456789").expect("write");

        let over = read_capped(&mut file, 4, "cmd", "stdout");
        let under = read_capped(&mut file, 10, "cmd", "stdout");

        let Err(Error::Io(message)) = over else {
            panic!("expected an error, got {over:?}");
        };
        assert!(
            message.contains("10 bytes on stdout") && message.contains('4'),
            "{message}"
        );
        assert_eq!(under.expect("fits"), b"0123456789");
    }

    #[test]
    fn a_missing_program_is_an_io_error_naming_it() {
        // Practice 12: an operating error is a typed error, not a panic.
        let mut command = Command::new("/nonexistent/locksmith-no-such-program");

        let result = run_bounded(&mut command, Duration::from_secs(1), "no-such-program");

        let Err(Error::Io(message)) = result else {
            panic!("expected an io error, got {result:?}");
        };
        assert!(message.starts_with("no-such-program:"), "{message}");
    }
}
