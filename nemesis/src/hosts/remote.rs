//! A test run's nodes on remote hosts (`locksmith test --hosts ...`), one node per host.
//!
//! [`RemoteRun::connect`] opens one SSH connection per host and makes the run's directory
//! `/tmp/locksmith-RUN/` on each. [`RemoteRun::launcher`] uploads the binary the local
//! cluster would run (lockd, or locksmith itself as `locksmith node`) to
//! `/tmp/locksmith-RUN/bin/`, skipping a host that already has it (namespace hosts share one
//! file system), and compares `sha256sum` on the host with the local one. It wraps the
//! system's launcher, so the node's command line is exactly the local one with the remote
//! binary and data dir:
//!
//! ```text
//! ssh HOST -- 'mkdir -p D/nI && echo $$ > D/nI/pid && exec D/bin/lockd ARGS >> D/nI/node.log 2>&1 </dev/null'
//! ```
//!
//! sshd starts each session's shell in a new session, and `exec` keeps its pid, so the pid
//! in `D/nI/pid` is the node's and its process group's: SIGKILL, SIGSTOP and SIGCONT go to
//! that group on the host ([`crate::cluster::Launcher::remote_signal`]). The local `ssh`
//! process lives as long as the node does and exits with its status, so the cluster sees a
//! node that dies on its own as it sees a local one.
//!
//! [`RemoteNet`] cuts link `(i, j)` with an iptables rule on node `j` in a chain of the
//! run's own, dropping TCP from `i`'s address to `j`'s peer port: the connection `i` opened
//! to `j`, as the proxy cuts it locally. It shapes a node's interface with `tc netem`.
//!
//! [`RemoteRun::finish`] (also on drop, and for Ctrl-C through [`teardown_registered`])
//! kills whatever node is left, removes the chain and the qdiscs, copies each node's log into
//! the store's `node-logs/nI.log`, and removes `/tmp/locksmith-RUN/`: nothing is left on the
//! hosts.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs as _};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use nix::sys::signal::Signal;

use super::HostsOptions;
use super::ssh::{Session, SshConfig, quote};
use crate::cluster::{LaunchOptions, Launcher, Layout};
use crate::net::{Grudge, Net};
use crate::netem::NetemSpec;
use crate::subprocess::{run_bounded, wait_bounded};
use crate::{Error, NodeId};

/// The port every node listens on for peers.
pub const PEER_PORT: u16 = 7101;
/// The port every node listens on for clients.
pub const CLIENT_PORT: u16 = 7201;
/// How long a node's start may take, from its `ssh` to its pid file.
pub const START_TIMEOUT_MS: u64 = 10_000;
/// How long an upload (plus its checksum) may take.
pub const UPLOAD_TIMEOUT_MS: u64 = 120_000;

/// Every live remote run of this process, for the Ctrl-C and panic paths.
static RUNS: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

/// Finishes every remote run of this process (see [`RemoteRun::finish`]). Idempotent.
pub fn teardown_registered() {
    let runs: Vec<Weak<Shared>> =
        std::mem::take(&mut *RUNS.lock().unwrap_or_else(|p| p.into_inner()));
    for run in runs.iter().filter_map(Weak::upgrade) {
        let _ = run.finish();
    }
}

/// What the launcher, the net and the teardown share.
struct Shared {
    /// Node `i`'s connection is `sessions[i - 1]`.
    sessions: Vec<Session>,
    /// Node `i`'s address.
    addrs: BTreeMap<NodeId, IpAddr>,
    /// The run's directory on every host.
    dir: String,
    /// The run's iptables chain.
    chain: String,
    /// Where node logs go in the store.
    log_dir: PathBuf,
    /// Hosts whose chain is installed.
    chains: Mutex<Vec<NodeId>>,
    /// Each host's interface towards its peers, for netem.
    devices: Mutex<BTreeMap<NodeId, String>>,
    /// Whether finish ran.
    finished: Mutex<bool>,
    /// Whether the netem stand-ins were announced.
    warned: std::sync::atomic::AtomicBool,
    /// Holds the control sockets.
    _sockets: tempfile::TempDir,
}

impl Shared {
    fn session(&self, id: NodeId) -> Result<&Session, Error> {
        self.sessions
            .get(id.wrapping_sub(1) as usize)
            .ok_or_else(|| Error::Cluster(format!("no host for node {id}")))
    }

    fn node_dir(&self, id: NodeId) -> String {
        format!("{}/n{id}", self.dir)
    }

    /// Sends `signal` to node `id`'s process group; SIGKILL also sends SIGCONT first and
    /// waits (up to 5 s) until the group is gone.
    fn signal(&self, id: NodeId, signal: Signal) -> Result<(), Error> {
        if *self.finished.lock().unwrap_or_else(|p| p.into_inner()) {
            // finish killed every node and closed the connections (a cluster dropped after
            // a Ctrl-C lands here).
            return Ok(());
        }
        self.signal_now(id, signal)
    }

    fn signal_now(&self, id: NodeId, signal: Signal) -> Result<(), Error> {
        let pid_file = format!("{}/pid", self.node_dir(id));
        let script = if signal == Signal::SIGKILL {
            format!(
                "p=$(cut -d' ' -f1 {pid_file} 2>/dev/null) || exit 0; kill -CONT -- -$p 2>/dev/null; \
                 kill -KILL -- -$p 2>/dev/null; i=0; while kill -0 -- -$p 2>/dev/null; do \
                 i=$((i+1)); [ $i -gt 250 ] && echo \"pid $p survived SIGKILL\" >&2 && exit 1; \
                 sleep 0.02; done; rm -f {pid_file}"
            )
        } else {
            let name = signal.as_str().trim_start_matches("SIG");
            format!("kill -{name} -- -$(cut -d' ' -f1 {pid_file})")
        };
        self.session(id)?.run(&script).map(|_| ())
    }

    /// Runs `act` for every host at once (one thread each: a remote step costs a round
    /// trip, and hosts are independent); the results in node order.
    fn each_host<T: Send>(
        &self,
        act: impl Fn(NodeId, &Session) -> Result<T, Error> + Sync,
    ) -> Vec<Result<T, Error>> {
        let act = &act;
        std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .addrs
                .keys()
                .zip(&self.sessions)
                .map(|(id, session)| scope.spawn(move || act(*id, session)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(Error::Cluster("a host's thread panicked".into())))
                })
                .collect()
        })
    }

    /// Installs the run's empty chains (INPUT for partitions, OUTPUT for the flaky
    /// stand-in) on every host, and finds each host's interface towards the next node (the
    /// one its peer traffic leaves by, for netem).
    fn prepare_net(&self) -> Result<(), Error> {
        let ids: Vec<NodeId> = self.addrs.keys().copied().collect();
        let (chain, out) = (&self.chain, self.out_chain());
        let results = self.each_host(|id, session| {
            let k = ids.iter().position(|i| *i == id).unwrap_or(0);
            let peer = ids[(k + 1) % ids.len()];
            // Recorded before the attempt: teardown tolerates a chain that is not there.
            self.chains
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(id);
            let route = session
                .run_root(&format!(
                    "iptables -w -N {chain} && iptables -w -I INPUT -j {chain} && \
                     iptables -w -N {out} && iptables -w -I OUTPUT -j {out} && \
                     ip -o route get {}",
                    self.addrs[&peer]
                ))
                .map_err(|e| {
                    Error::Cluster(format!(
                        "{e} (each host needs iptables and iproute2, and root or passwordless sudo)"
                    ))
                })?;
            if peer == id {
                return Ok(());
            }
            let device = route
                .split_whitespace()
                .skip_while(|w| *w != "dev")
                .nth(1)
                .ok_or_else(|| {
                    Error::Cluster(format!("n{id}: no dev in `ip route get`: {route}"))
                })?;
            self.devices
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id, device.to_owned());
            Ok(())
        });
        results.into_iter().collect()
    }

    fn apply(&self, grudge: &Grudge) -> Result<(), Error> {
        let results = self.each_host(|target, session| {
            let script = crate::net::netns::grudge_script(
                &self.chain,
                grudge,
                target,
                &self.addrs,
                PEER_PORT,
            );
            session.run_root(&script).map(|_| ())
        });
        results.into_iter().collect()
    }

    fn netem(&self, id: NodeId, spec: Option<&NetemSpec>) -> Result<String, Error> {
        let device = self
            .devices
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
            .ok_or_else(|| Error::Unsupported(format!("n{id}: no interface known for netem")))?;
        let session = self.session(id)?;
        let out_chain = self.out_chain();
        let Some(spec) = spec else {
            // Deleting the root qdisc restores the default; none there is fine.
            let script = format!(
                "tc qdisc del dev {device} root 2>/dev/null; iptables -w -F {out_chain} 2>/dev/null; true"
            );
            return session.run_root(&script).map(|_| "normal".to_owned());
        };
        let args = spec.args().join(" ");
        let script = format!("tc qdisc replace dev {device} root netem {args}");
        match session.run_root(&script) {
            Ok(_) => Ok(format!("netem {args}")),
            Err(e) if e.to_string().contains("qdisc kind is unknown") => {
                // A kernel without sch_netem (this project's CI machine has none): the
                // nearest real faults it has, a token bucket for `slow` and random drops
                // for `flaky`; said in the fault's outcome.
                session.run_root(&crate::netem::fallback_script(spec, &device, &out_chain))?;
                if !self.warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    eprintln!(
                        "locksmith test: {} has no sch_netem in its kernel; slow and flaky use stand-ins: {}; {}",
                        session.target(),
                        NetemSpec::SLOW.fallback(),
                        NetemSpec::FLAKY.fallback()
                    );
                }
                Ok(format!("no sch_netem here; instead {}", spec.fallback()))
            }
            Err(e) => Err(e),
        }
    }

    /// The run's chain on OUTPUT (the fallback of flaky drops there).
    fn out_chain(&self) -> String {
        format!("{}-O", self.chain)
    }

    /// Removes the run's chains and qdisc from host `id` (if it has them).
    fn teardown_host_net(&self, id: NodeId) -> Result<(), Error> {
        let had_chains = {
            let mut chains = self.chains.lock().unwrap_or_else(|p| p.into_inner());
            let had = chains.contains(&id);
            chains.retain(|c| *c != id);
            had
        };
        if had_chains {
            let (c, o) = (&self.chain, self.out_chain());
            let script = format!(
                "iptables -w -D INPUT -j {c}; iptables -w -F {c}; iptables -w -X {c}; \
                 iptables -w -D OUTPUT -j {o}; iptables -w -F {o}; iptables -w -X {o}; true"
            );
            self.session(id)?.run_root(&script)?;
        }
        let has_device = self
            .devices
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&id);
        if has_device {
            self.netem(id, None)?;
        }
        Ok(())
    }

    /// Removes the chains and the qdiscs. Idempotent; every host is tried.
    fn teardown_net(&self) -> Result<(), Error> {
        let errors: Vec<String> = self
            .each_host(|id, _| self.teardown_host_net(id))
            .into_iter()
            .filter_map(|r| r.err().map(|e| e.to_string()))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(Error::Cluster(errors.join("; ")))
        }
    }

    /// Host `id`'s part of [`Shared::finish`]: kill, rules and qdisc, log.
    fn finish_host(&self, id: NodeId) -> Vec<String> {
        let mut errors = Vec::new();
        // The node, then every process group this run ever started on the host (`pids` is
        // appended to at each start), in case one escaped its pid file.
        let kill_all = format!(
            "for p in $(cat {}/pids 2>/dev/null); do kill -CONT -- -$p; kill -KILL -- -$p; done 2>/dev/null; true",
            self.node_dir(id)
        );
        let steps = [
            self.signal_now(id, Signal::SIGKILL),
            self.session(id).and_then(|s| s.run(&kill_all).map(|_| ())),
            self.teardown_host_net(id),
            self.fetch_log(id),
        ];
        errors.extend(
            steps
                .into_iter()
                .filter_map(|r| r.err().map(|e| e.to_string())),
        );
        errors
    }

    /// Kills leftover nodes, removes rules and qdiscs, fetches the logs, removes the run's
    /// directory on every host, closes the connections. Idempotent.
    fn finish(&self) -> Result<(), Error> {
        let mut finished = self.finished.lock().unwrap_or_else(|p| p.into_inner());
        if *finished {
            return Ok(());
        }
        *finished = true;
        let mut errors: Vec<String> = self
            .each_host(|id, _| Ok(self.finish_host(id)))
            .into_iter()
            .flat_map(|r| r.unwrap_or_default())
            .collect();
        // Every log first, then removal: namespace hosts share the directory.
        for result in self.each_host(|_, session| session.run(&format!("rm -rf {}", self.dir))) {
            if let Err(e) = result {
                errors.push(e.to_string());
            }
        }
        for session in &self.sessions {
            session.close();
        }
        let _ = std::fs::remove_dir_all(self._sockets.path());
        if errors.is_empty() {
            Ok(())
        } else {
            Err(Error::Cluster(format!(
                "remote teardown: {}",
                errors.join("; ")
            )))
        }
    }

    /// Appends node `id`'s remote log to `node-logs/n<id>.log` in the store.
    fn fetch_log(&self, id: NodeId) -> Result<(), Error> {
        let session = self.session(id)?;
        let remote = format!("{}/node.log", self.node_dir(id));
        let local = self.log_dir.join(format!("n{id}.log"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&local)
            .map_err(|e| Error::Io(format!("{}: {e}", local.display())))?;
        use std::io::Write as _;
        let mut header = &file;
        let _ = writeln!(header, "--- {}:{remote} ---", session.target());
        // Straight into the file: a log can be large.
        let mut command = session.command(&format!("cat {remote} 2>/dev/null; true"));
        command.stdout(file);
        let what = format!("ssh {}: cat {remote}", session.target());
        let status = spawn_bounded(command, Duration::from_millis(UPLOAD_TIMEOUT_MS), &what)?;
        if status {
            Ok(())
        } else {
            Err(Error::Cluster(format!(
                "{}: fetching {remote} failed",
                session.target()
            )))
        }
    }
}

/// Runs a command whose stdout and stderr the caller set (stdin is null), in its own
/// process group, within `timeout`; true when it exits 0. `what` names it in errors.
fn spawn_bounded(mut command: Command, timeout: Duration, what: &str) -> Result<bool, Error> {
    use std::os::unix::process::CommandExt as _;
    command.stdin(std::process::Stdio::null()).process_group(0);
    let mut child = command
        .spawn()
        .map_err(|e| Error::Io(format!("{what}: {e}")))?;
    Ok(wait_bounded(&mut child, timeout, what)?.success())
}

/// The nodes of one run on remote hosts.
pub struct RemoteRun {
    shared: Arc<Shared>,
}

/// The address of `target`'s host (the part after `@`), as this machine resolves it.
fn resolve(target: &str) -> Result<IpAddr, Error> {
    let host = target.rsplit('@').next().unwrap_or(target);
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(ip);
    }
    (host, 22)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .map(|a| a.ip())
        .ok_or_else(|| Error::Cluster(format!("host {target}: cannot resolve {host:?}")))
}

impl RemoteRun {
    /// Connects to every host and makes the run's directory there; `run_id` names it. The
    /// error of an unreachable host names it and quotes ssh.
    pub fn connect(hosts: &HostsOptions, run_id: &str, log_dir: &Path) -> Result<RemoteRun, Error> {
        let config = SshConfig::with_key(hosts.key());
        let sockets = tempfile::Builder::new()
            .prefix("lsm-ssh-")
            .tempdir_in("/tmp")
            .map_err(|e| Error::Io(format!("control socket dir: {e}")))?;
        let mut addrs = BTreeMap::new();
        for (i, target) in hosts.targets.iter().enumerate() {
            addrs.insert(i as NodeId + 1, resolve(target)?);
        }
        let dir = format!("/tmp/locksmith-{run_id}");
        // All hosts at once; the first failure (in host order) is the error.
        let connected: Vec<Result<Session, Error>> = std::thread::scope(|scope| {
            let handles: Vec<_> = hosts
                .targets
                .iter()
                .enumerate()
                .map(|(i, target)| {
                    let (config, dir) = (&config, &dir);
                    let socket = sockets.path().join(format!("n{}", i + 1));
                    scope.spawn(move || {
                        let session = Session::connect(target, config, &socket)?;
                        session.run(&format!("mkdir -p {dir}/n{}", i + 1))?;
                        Ok(session)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(Error::Cluster("a connect thread panicked".into())))
                })
                .collect()
        });
        let sessions: Vec<Session> = connected.into_iter().collect::<Result<_, _>>()?;
        let shared = Arc::new(Shared {
            sessions,
            addrs,
            chain: format!("LSM-{run_id}"),
            dir,
            log_dir: log_dir.to_path_buf(),
            chains: Mutex::new(Vec::new()),
            devices: Mutex::new(BTreeMap::new()),
            finished: Mutex::new(false),
            warned: std::sync::atomic::AtomicBool::new(false),
            _sockets: sockets,
        });
        RUNS.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::downgrade(&shared));
        Ok(RemoteRun { shared })
    }

    /// The layout of the run: each node on its host's address, data in the run's directory
    /// on the host, logs in the store's `node-logs/`.
    pub fn layout(&self) -> Layout {
        let s = &self.shared;
        let at = |port| {
            s.addrs
                .iter()
                .map(|(id, ip)| (*id, SocketAddr::new(*ip, port)))
                .collect()
        };
        Layout {
            nodes: s.addrs.keys().copied().collect(),
            peer: at(PEER_PORT),
            client: at(CLIENT_PORT),
            // The admin secret lives on the remote host: no clock control over SSH yet.
            admin: BTreeMap::new(),
            data_dir: s
                .addrs
                .keys()
                .map(|id| (*id, PathBuf::from(format!("{}/data", s.node_dir(*id)))))
                .collect(),
            log_dir: s.log_dir.clone(),
            users: BTreeMap::new(),
        }
    }

    /// The net: iptables chains installed on every host, and each host's interface found.
    pub fn net(&self) -> Result<Arc<dyn Net>, Error> {
        self.shared.prepare_net()?;
        Ok(Arc::new(RemoteNet {
            shared: self.shared.clone(),
        }))
    }

    /// Uploads the binary that `inner` runs and wraps `inner` to run it on the hosts.
    pub fn launcher(&self, inner: Box<dyn Launcher>) -> Result<Box<dyn Launcher>, Error> {
        let local = PathBuf::from(inner.command(1, &LaunchOptions::default()).get_program());
        let name = local
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "node".into());
        let remote = format!("{}/bin/{name}", self.shared.dir);
        let sum = local_sha256(&local)?;
        let size_mb = std::fs::metadata(&local).map_or(0, |m| m.len() >> 20);
        eprintln!(
            "locksmith test: copying {} ({size_mb} MB, sha256 {}) to {} host(s)",
            local.display(),
            &sum[..12],
            self.shared.sessions.len()
        );
        // The first host alone, then the others at once: namespace hosts share one file
        // system and find the file there already; real hosts copy in parallel.
        if let Some(first) = self.shared.sessions.first() {
            upload(first, &local, &remote, &sum)?;
        }
        let results = self.shared.each_host(|id, session| {
            if id == 1 {
                return Ok(());
            }
            upload(session, &local, &remote, &sum)
        });
        results.into_iter().collect::<Result<(), Error>>()?;
        Ok(Box::new(RemoteLauncher {
            inner,
            shared: self.shared.clone(),
            binary: remote,
            starts: Mutex::new(BTreeMap::new()),
        }))
    }

    /// See [`Shared::finish`].
    pub fn finish(&self) -> Result<(), Error> {
        self.shared.finish()
    }
}

impl Drop for RemoteRun {
    fn drop(&mut self) {
        let _ = self.shared.finish();
    }
}

/// `sha256sum` of a local file.
fn local_sha256(path: &Path) -> Result<String, Error> {
    let what = format!("sha256sum {}", path.display());
    let mut command = Command::new("sha256sum");
    command.arg(path);
    let out = run_bounded(
        &mut command,
        Duration::from_millis(UPLOAD_TIMEOUT_MS),
        &what,
    )?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    match (out.status.success(), stdout.split_whitespace().next()) {
        (true, Some(sum)) if sum.len() == 64 => Ok(sum.to_owned()),
        _ => Err(Error::Io(format!(
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))),
    }
}

/// Copies `local` to `remote` on the host unless it is there with checksum `sum`, then
/// checks the checksum on the host.
fn upload(session: &Session, local: &Path, remote: &str, sum: &str) -> Result<(), Error> {
    let timeout = Duration::from_millis(UPLOAD_TIMEOUT_MS);
    let check = format!("sha256sum {remote} 2>/dev/null | cut -d' ' -f1");
    if session.run_with(&check, None, timeout)?.trim() == sum {
        return Ok(());
    }
    let file =
        std::fs::File::open(local).map_err(|e| Error::Io(format!("{}: {e}", local.display())))?;
    // Written beside its final name and renamed: a reader never sees half a binary.
    let script = format!(
        "mkdir -p $(dirname {remote}) && cat > {remote}.$$ && chmod 755 {remote}.$$ && mv {remote}.$$ {remote}"
    );
    session.run_with(&script, Some(file), timeout)?;
    let got = session.run_with(&check, None, timeout)?;
    if got.trim() != sum {
        return Err(Error::Cluster(format!(
            "host {}: checksum of {remote} is {:?}, expected {sum} (the upload was damaged)",
            session.target(),
            got.trim()
        )));
    }
    Ok(())
}

/// Runs the system's node command on the node's host.
struct RemoteLauncher {
    inner: Box<dyn Launcher>,
    shared: Arc<Shared>,
    binary: String,
    /// How many times each node was started: the token in its pid file.
    starts: Mutex<BTreeMap<NodeId, u64>>,
}

impl Launcher for RemoteLauncher {
    fn command(&self, id: NodeId, options: &LaunchOptions) -> Command {
        let local = self.inner.command(id, options);
        let args: Vec<String> = local
            .get_args()
            .map(|a| quote(&a.to_string_lossy()))
            .collect();
        let dir = self.shared.node_dir(id);
        let token = {
            let mut starts = self.starts.lock().unwrap_or_else(|p| p.into_inner());
            let n = starts.entry(id).or_insert(0);
            *n += 1;
            *n
        };
        let script = format!(
            "mkdir -p {dir} && echo $$ >> {dir}/pids && echo \"$$ {token}\" > {dir}/pid && exec {} {} >> {dir}/node.log 2>&1 < /dev/null",
            self.binary,
            args.join(" ")
        );
        match self.shared.session(id) {
            Ok(session) => session.command(&script),
            // Not reached: the layout has exactly one node per session. A command that
            // fails at once makes the cluster report it.
            Err(e) => {
                let mut c = Command::new("sh");
                c.args(["-c", &format!("echo {} >&2; exit 2", quote(&e.to_string()))]);
                c
            }
        }
    }

    fn remote_signal(&self, id: NodeId, signal: Signal) -> Option<Result<(), Error>> {
        Some(self.shared.signal(id, signal))
    }

    fn started(&self, id: NodeId) -> Result<(), Error> {
        // The pid file with this start's token: the node runs, and a kill or pause that
        // follows reaches it (not the previous start, nor nothing).
        let token = self
            .starts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .copied()
            .unwrap_or(0);
        let pid_file = format!("{}/pid", self.shared.node_dir(id));
        let polls = START_TIMEOUT_MS / 20;
        let script = format!(
            "i=0; until grep -q ' {token}$' {pid_file} 2>/dev/null; do i=$((i+1)); \
             [ $i -gt {polls} ] && echo 'node {id} did not start within {START_TIMEOUT_MS} ms' >&2 && exit 1; \
             sleep 0.02; done"
        );
        self.shared.session(id)?.run(&script).map(|_| ())
    }
}

/// Partitions and netem on the hosts.
pub struct RemoteNet {
    shared: Arc<Shared>,
}

impl Net for RemoteNet {
    fn dial_addr(&self, _source: NodeId, target: NodeId) -> SocketAddr {
        let ip = self
            .shared
            .addrs
            .get(&target)
            .copied()
            .unwrap_or(IpAddr::from([127, 0, 0, 1]));
        SocketAddr::new(ip, PEER_PORT)
    }

    fn apply(&self, grudge: &Grudge) -> Result<(), Error> {
        self.shared.apply(grudge)
    }

    fn teardown(&self) -> Result<(), Error> {
        self.shared.teardown_net()
    }

    fn netem(&self, node: NodeId, spec: Option<&NetemSpec>) -> Result<String, Error> {
        self.shared.netem(node, spec)
    }
}
