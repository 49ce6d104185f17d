//! One client adapter process: started for one history process id, fed one request a
//! line on its stdin, its stdout read line by line ([`super::protocol`]), its stderr
//! appended to `node-logs/client<SLOT>.log`.
//!
//! The harness keeps each op's deadline itself: an answer not back by the request's
//! `timeout_ms` plus [`ANSWER_GRACE_MS`] ([`FIRST_ANSWER_GRACE_MS`] for an adapter's first
//! request, which also waits for it to start) is recorded `info timeout`. After any `info` the
//! workload moves the slot to a new process id and asks for a new client, so this adapter
//! is dropped, which kills its process group; the next process id gets a new adapter. An
//! adapter that exits is the same: its op is `info`, and the next op starts a new one.
//!
//! What makes the run `unknown` (recorded in [`ExecState`], judged by the check `client
//! protocol`): a line the protocol does not allow, an answer to an id that was never sent or
//! was already answered, and an adapter process that answered none of its requests (it
//! printed nothing, or exited first): a harness cannot tell a service that never answers
//! from an adapter that never reads, and a run of nothing but `info` must not pass.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use history::ErrorWord;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::ExecState;
use super::protocol::{self, Init, LINE_MAX_BYTES, Line, Request, RequestOp};
use crate::systems::{LockClient, Outcome};

/// How long past a request's `timeout_ms` the harness waits before it records `info`, ms:
/// room for the adapter's own timeout answer to arrive.
pub const ANSWER_GRACE_MS: u64 = 1_000;
/// The grace of an adapter's first request, ms: it also waits for the adapter to start (an
/// interpreter, a JVM, a shim of its own). Waiting longer is always sound (an answer that
/// comes is true, only later); too short a wait made a loaded machine's lockd adapters look
/// like adapters that never answer (two of ten in a 5-node run on 2 busy cores).
pub const FIRST_ANSWER_GRACE_MS: u64 = 5_000;

/// What starts one adapter.
pub struct AdapterSpec {
    /// The `sh -c` line, placeholders filled.
    pub values: BTreeMap<&'static str, String>,
    /// The history's process id.
    pub process: u64,
    /// The client slot.
    pub slot: u64,
    /// The file its stderr is appended to.
    pub log: PathBuf,
}

/// A request waiting for its answer.
struct Pending {
    op: RequestOp,
    answer: oneshot::Sender<Outcome>,
}

/// What the adapter's reader and its caller share.
#[derive(Default)]
struct Exchange {
    pending: Mutex<HashMap<u64, Pending>>,
    /// Ids answered, or given up on at their deadline.
    closed: Mutex<HashSet<u64>>,
    /// The highest id sent.
    last_sent: AtomicU64,
    /// Answers matched with a request.
    answers: AtomicU64,
    init: Mutex<Init>,
    /// How the process ended, once it did.
    exit: Mutex<Option<String>>,
}

struct Running {
    stdin: ChildStdin,
    exchange: Arc<Exchange>,
    next_id: u64,
}

/// A client of the exec system: one adapter process, started at its first op.
pub struct AdapterClient {
    spec: AdapterSpec,
    template: super::template::Template,
    state: Arc<ExecState>,
    running: tokio::sync::Mutex<Option<Running>>,
    /// The pid, for the kill on drop (the running state sits behind an async lock).
    pid: Arc<Mutex<Option<i32>>>,
}

impl AdapterClient {
    /// The client of `spec`; nothing starts until its first op.
    pub fn new(
        spec: AdapterSpec,
        template: super::template::Template,
        state: Arc<ExecState>,
    ) -> Self {
        AdapterClient {
            spec,
            template,
            state,
            running: tokio::sync::Mutex::new(None),
            pid: Arc::new(Mutex::new(None)),
        }
    }

    fn name(&self) -> String {
        format!(
            "adapter of process {} (slot {}, stderr in node-logs/client{}.log)",
            self.spec.process, self.spec.slot, self.spec.slot
        )
    }

    fn start(&self) -> Result<Running, String> {
        use std::io::Write as _;
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.spec.log)
            .map_err(|e| format!("{}: {e}", self.spec.log.display()))?;
        let line = self.template.fill(&self.spec.values);
        let _ = writeln!(log, "--- process {}: {line}", self.spec.process);
        let mut command = tokio::process::Command::from(self.template.command(&self.spec.values));
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .process_group(0)
            .kill_on_drop(true);
        if let Ok(exe) = std::env::current_exe() {
            command.env("LOCKSMITH_BIN", exe);
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("start {line:?}: {e}"))?;
        let pid = child.id().map(|p| p as i32).unwrap_or_default();
        crate::cluster::register_group(pid);
        *self.pid.lock().unwrap_or_else(|p| p.into_inner()) = Some(pid);
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(format!("start {line:?}: no pipes"));
        };
        let exchange = Arc::new(Exchange::default());
        // The reader ends when the adapter's stdout closes (it exited, or was killed on
        // drop), and reaps the process.
        tokio::spawn(read_answers(
            stdout,
            child,
            exchange.clone(),
            self.state.clone(),
            self.name(),
        ));
        Ok(Running {
            stdin,
            exchange,
            next_id: 1,
        })
    }

    /// Sends `op` and waits for its answer until `deadline` plus the grace.
    async fn call(&self, op: RequestOp, deadline: Instant) -> Outcome {
        let mut running = self.running.lock().await;
        if running.is_none() {
            match self.start() {
                Ok(r) => *running = Some(r),
                Err(e) => {
                    self.state.error(format!("{}: {e}", self.name()));
                    return Outcome::Info(ErrorWord::Indeterminate);
                }
            }
        }
        let Some(run) = running.as_mut() else {
            return Outcome::Info(ErrorWord::Indeterminate);
        };
        let id = run.next_id;
        run.next_id += 1;
        let request = Request {
            id,
            op: op.clone(),
            timeout_ms: deadline
                .saturating_duration_since(Instant::now())
                .as_millis() as u64,
        };
        let (sender, receiver) = oneshot::channel();
        let described = describe(&request);
        run.exchange
            .lock_pending()
            .insert(id, Pending { op, answer: sender });
        run.exchange.last_sent.store(id, Ordering::SeqCst);
        let mut line = request.line();
        line.push('\n');
        let sent = run.stdin.write_all(line.as_bytes()).await;
        let sent = match sent {
            Ok(()) => run.stdin.flush().await,
            Err(e) => Err(e),
        };
        if let Err(e) = sent {
            run.exchange.lock_pending().remove(&id);
            self.never_answered(run, &described, &format!("its stdin is closed ({e})"));
            return Outcome::Info(ErrorWord::Indeterminate);
        }
        let grace_ms = if id == 1 {
            FIRST_ANSWER_GRACE_MS
        } else {
            ANSWER_GRACE_MS
        };
        let until = deadline + Duration::from_millis(grace_ms);
        match tokio::time::timeout_at(until, receiver).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => {
                // The reader dropped the request: the adapter exited.
                let how = run.exchange.exit_text();
                self.never_answered(run, &described, &format!("it exited ({how})"));
                Outcome::Info(ErrorWord::Indeterminate)
            }
            Err(_) => {
                run.exchange.lock_pending().remove(&id);
                run.exchange.lock_closed().insert(id);
                let waited = request.timeout_ms + grace_ms;
                self.never_answered(run, &described, &format!("no answer within {waited} ms"));
                Outcome::Info(ErrorWord::Timeout)
            }
        }
    }

    /// An op that got no answer: an error when this adapter has answered nothing at all.
    fn never_answered(&self, run: &Running, op: &str, why: &str) {
        if run.exchange.answers.load(Ordering::SeqCst) == 0 {
            self.state.error(format!(
                "{} answered none of its requests: {op}: {why}",
                self.name()
            ));
        }
    }
}

/// A request in words, for messages: `acquire k1 lease_ms=5000 wait_ms=0 (request id 1)`.
fn describe(request: &Request) -> String {
    let op = match &request.op {
        RequestOp::Acquire {
            key,
            lease_ms,
            wait_ms,
        } => format!("acquire {key} lease_ms={lease_ms} wait_ms={wait_ms}"),
        RequestOp::Release { key, token } => format!("release {key}{}", token_text(*token)),
        RequestOp::Write { key, value, token } => {
            format!("write {key} {value:?}{}", token_text(*token))
        }
    };
    format!("`{op}` (request id {})", request.id)
}

fn token_text(token: Option<u64>) -> String {
    token.map(|t| format!(" token={t}")).unwrap_or_default()
}

impl Exchange {
    fn lock_pending(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_closed(&self) -> std::sync::MutexGuard<'_, HashSet<u64>> {
        self.closed.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn exit_text(&self) -> String {
        self.exit
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_else(|| "its stdout closed".to_owned())
    }

    fn init(&self) -> Init {
        *self.init.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes one line the adapter wrote; `Err` is a protocol error, in words.
    fn take(&self, line: &str, first: bool, state: &ExecState) -> Result<(), String> {
        let read = protocol::read_line(line, first).map_err(|e| e.to_string())?;
        let (id, answer) = match read {
            Line::Init(init) => {
                *self.init.lock().unwrap_or_else(|p| p.into_inner()) = init;
                state.saw_init(init);
                return Ok(());
            }
            Line::Answer { id, answer } => (id, answer),
        };
        let Some(pending) = self.lock_pending().remove(&id) else {
            let why = if self.lock_closed().contains(&id) {
                "a second answer to a request that was already answered (or given up on)"
            } else if id <= self.last_sent.load(Ordering::SeqCst) {
                "an answer to a request that is not waiting"
            } else {
                "an answer to an id no request had"
            };
            return Err(format!("{}: {why} (id {id})", protocol::quote(line)));
        };
        self.lock_closed().insert(id);
        let outcome = match protocol::outcome_of(&pending.op, &answer, self.init(), line) {
            Ok(outcome) => {
                self.answers.fetch_add(1, Ordering::SeqCst);
                if let crate::systems::Outcome::Ok {
                    node: Some(node), ..
                } = outcome
                {
                    state.saw_ok_from(node);
                }
                outcome
            }
            Err(e) => {
                let _ = pending.answer.send(Outcome::Info(ErrorWord::Indeterminate));
                return Err(e.to_string());
            }
        };
        let _ = pending.answer.send(outcome);
        Ok(())
    }
}

/// Reads the adapter's stdout until it closes, then waits for the process and records how
/// it ended. Dropping the pending requests tells their callers the adapter is gone.
async fn read_answers(
    stdout: ChildStdout,
    mut child: tokio::process::Child,
    exchange: Arc<Exchange>,
    state: Arc<ExecState>,
    name: String,
) {
    let mut reader = BufReader::new(stdout);
    let mut number = 0u64;
    loop {
        let line = match read_bounded(&mut reader).await {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(e) => {
                state.error(format!("{name}: line {}: {e}", number + 1));
                break;
            }
        };
        number += 1;
        state.count_line();
        if line.trim().is_empty() {
            continue;
        }
        if let Err(e) = exchange.take(line.trim_end(), number == 1, &state) {
            state.error(format!("{name}: line {number}: {e}"));
        }
    }
    // Bounded: the process closed its stdout, or printed a line past the bound (then it is
    // killed here, as it is on drop).
    let _ = child.start_kill();
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    let text = match status {
        Ok(Ok(status)) => status.to_string(),
        Ok(Err(e)) => format!("wait: {e}"),
        Err(_) => "not reaped within 5 s".to_owned(),
    };
    *exchange.exit.lock().unwrap_or_else(|p| p.into_inner()) = Some(text);
    exchange.lock_pending().clear();
}

/// One line of at most [`LINE_MAX_BYTES`] bytes (lossy UTF-8); `None` at the end.
async fn read_bounded(reader: &mut BufReader<ChildStdout>) -> Result<Option<String>, String> {
    let mut line = Vec::new();
    loop {
        let buffer = reader.fill_buf().await.map_err(|e| format!("read: {e}"))?;
        if buffer.is_empty() {
            return Ok((!line.is_empty()).then(|| String::from_utf8_lossy(&line).into_owned()));
        }
        let (chunk, done) = match buffer.iter().position(|b| *b == b'\n') {
            Some(at) => (&buffer[..at], at + 1),
            None => (buffer, buffer.len()),
        };
        let ended = chunk.len() < done;
        line.extend_from_slice(chunk);
        reader.consume(done);
        if line.len() > LINE_MAX_BYTES {
            return Err(format!(
                "a line longer than {LINE_MAX_BYTES} bytes, starting {}",
                protocol::quote(&String::from_utf8_lossy(&line[..200.min(line.len())]))
            ));
        }
        if ended {
            return Ok(Some(String::from_utf8_lossy(&line).into_owned()));
        }
    }
}

impl Drop for AdapterClient {
    fn drop(&mut self) {
        if let Some(pid) = self.pid.lock().unwrap_or_else(|p| p.into_inner()).take()
            && pid > 0
        {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            crate::cluster::forget_group(pid);
        }
    }
}

impl LockClient for AdapterClient {
    fn acquire<'a>(
        &'a self,
        key: &'a str,
        lease_ms: u64,
        wait_ms: u64,
        deadline: Instant,
    ) -> BoxFuture<'a, Outcome> {
        let op = RequestOp::Acquire {
            key: key.to_owned(),
            lease_ms,
            wait_ms,
        };
        self.call(op, deadline).boxed()
    }

    fn release<'a>(
        &'a self,
        key: &'a str,
        token: u64,
        deadline: Instant,
    ) -> BoxFuture<'a, Outcome> {
        let op = RequestOp::Release {
            key: key.to_owned(),
            token: crate::harness::workload::real_token(token),
        };
        self.call(op, deadline).boxed()
    }

    fn write<'a>(
        &'a self,
        key: &'a str,
        value: &'a str,
        token: u64,
        deadline: Instant,
    ) -> BoxFuture<'a, Option<Outcome>> {
        async move {
            if !self.state.resource() {
                return None;
            }
            let op = RequestOp::Write {
                key: key.to_owned(),
                value: value.to_owned(),
                token: crate::harness::workload::real_token(token),
            };
            Some(self.call(op, deadline).await)
        }
        .boxed()
    }
}
