//! One SSH connection per host through the system OpenSSH client: a ControlMaster process
//! that this harness owns (a child, killed on drop), and every command multiplexed over it
//! (`ssh -S SOCKET`), so a command costs one round trip instead of a TCP and key exchange.
//!
//! Why the system `ssh` and not a Rust SSH library: it is what every machine already has,
//! it reads the user's own `~/.ssh/config`, agent and known_hosts as an operator expects,
//! its ControlMaster multiplexing is exactly the connection reuse the harness needs, and it
//! adds no crate (the `openssh` crate is itself a wrapper around this binary; `russh` would
//! be a whole SSH implementation with its own crypto to trust and keep up to date).
//!
//! Every command has a deadline ([`COMMAND_TIMEOUT_MS`] unless said otherwise) and runs
//! through [`crate::subprocess`], which kills it at the deadline and reports the timeout.

use std::io::{Read as _, Seek as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::Error;
use crate::subprocess::{Input, run_bounded, run_bounded_with};

/// The longest one remote command may take, unless the caller says otherwise.
pub const COMMAND_TIMEOUT_MS: u64 = 15_000;
/// How long connecting to a host may take.
pub const CONNECT_TIMEOUT_S: u64 = 5;
/// How long `ssh -O check` (is the ControlMaster up?) may take.
pub const CHECK_TIMEOUT_MS: u64 = 5_000;

/// How to reach the hosts.
#[derive(Clone, Debug, Default)]
pub struct SshConfig {
    /// The private key (`-i`), or none for the user's own keys and agent.
    pub key: Option<PathBuf>,
    /// A known_hosts file of its own (the one `locksmith hosts up` writes beside its key);
    /// none for the user's own, with unknown hosts accepted on first use.
    pub known_hosts: Option<PathBuf>,
}

impl SshConfig {
    /// The config for `key`: its known_hosts is `KEY.known_hosts` when that file exists.
    pub fn with_key(key: Option<PathBuf>) -> SshConfig {
        let known_hosts = key.as_ref().and_then(|k| {
            let kh = PathBuf::from(format!("{}.known_hosts", k.display()));
            kh.is_file().then_some(kh)
        });
        SshConfig { key, known_hosts }
    }

    fn options(&self, command: &mut Command) {
        command.args([
            "-o",
            "BatchMode=yes",
            "-o",
            &format!("ConnectTimeout={CONNECT_TIMEOUT_S}"),
            "-o",
            "ServerAliveInterval=5",
            "-o",
            "ServerAliveCountMax=4",
            "-o",
            "LogLevel=ERROR",
        ]);
        if let Some(key) = &self.key {
            command
                .arg("-i")
                .arg(key)
                .args(["-o", "IdentitiesOnly=yes"]);
        }
        match &self.known_hosts {
            Some(kh) => {
                command
                    .arg("-o")
                    .arg(format!("UserKnownHostsFile={}", kh.display()));
                command.args(["-o", "StrictHostKeyChecking=yes"]);
            }
            None => {
                command.args(["-o", "StrictHostKeyChecking=accept-new"]);
            }
        }
    }
}

/// A multiplexed SSH connection to one host (`user@host`).
pub struct Session {
    target: String,
    config: SshConfig,
    socket: PathBuf,
    master: Mutex<Option<Child>>,
}

impl Session {
    /// Connects to `target`, with the control socket at `socket` (keep the path short:
    /// Unix sockets allow about 100 bytes). The error names the host and ssh's own words.
    pub fn connect(target: &str, config: &SshConfig, socket: &Path) -> Result<Session, Error> {
        let mut command = Command::new("ssh");
        command.args(["-M", "-N", "-o", "ControlPersist=no"]);
        command.arg("-S").arg(socket);
        config.options(&mut command);
        command.arg(target);
        let mut err = tempfile::tempfile().map_err(|e| Error::Io(format!("tempfile: {e}")))?;
        let err_clone = err.try_clone().map_err(|e| Error::Io(e.to_string()))?;
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(err_clone))
            .process_group(0);
        let master = command
            .spawn()
            .map_err(|e| Error::Cluster(format!("host {target}: cannot run ssh: {e}")))?;
        let session = Session {
            target: target.to_owned(),
            config: config.clone(),
            socket: socket.to_path_buf(),
            master: Mutex::new(Some(master)),
        };
        let deadline = Instant::now() + Duration::from_secs(CONNECT_TIMEOUT_S + 5);
        loop {
            if let Some(status) = session.master_exited() {
                let mut words = String::new();
                let _ = err.rewind();
                let _ = err.read_to_string(&mut words);
                return Err(Error::Cluster(format!(
                    "host {target} is unreachable: ssh {status}: {}",
                    words.trim()
                )));
            }
            if session.socket.exists() && session.check() {
                return Ok(session);
            }
            if Instant::now() > deadline {
                session.close();
                return Err(Error::Cluster(format!(
                    "host {target} is unreachable: ssh did not connect within {} s",
                    CONNECT_TIMEOUT_S + 5
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn master_exited(&self) -> Option<std::process::ExitStatus> {
        let mut master = self.master.lock().unwrap_or_else(|p| p.into_inner());
        master.as_mut().and_then(|m| m.try_wait().ok().flatten())
    }

    fn check(&self) -> bool {
        let mut command = self.base();
        command.args(["-O", "check"]).arg(&self.target);
        let timeout = Duration::from_millis(CHECK_TIMEOUT_MS);
        run_bounded(&mut command, timeout, "ssh -O check").is_ok_and(|out| out.status.success())
    }

    /// `user@host`.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The host part of the target (after the last `@`).
    pub fn host(&self) -> &str {
        self.target.rsplit('@').next().unwrap_or(&self.target)
    }

    fn base(&self) -> Command {
        let mut command = Command::new("ssh");
        command.arg("-S").arg(&self.socket);
        self.config.options(&mut command);
        command
    }

    /// The command that runs `script` on the host (through `sh -c` of the login shell);
    /// the caller spawns it (a node's long-lived session).
    pub fn command(&self, script: &str) -> Command {
        let mut command = self.base();
        command.arg(&self.target).arg("--").arg(script);
        command
    }

    /// Runs `script` on the host; `Err` unless it exits 0, with its stderr.
    pub fn run(&self, script: &str) -> Result<String, Error> {
        self.run_with(script, None, Duration::from_millis(COMMAND_TIMEOUT_MS))
    }

    /// Runs `script` as root: as it is when the login user is root, else through
    /// `sudo -n` (passwordless sudo; a password prompt would hang a batch run).
    pub fn run_root(&self, script: &str) -> Result<String, Error> {
        if self.target.starts_with("root@") {
            self.run(script)
        } else {
            self.run(&format!("sudo -n sh -c {}", quote(script)))
        }
    }

    /// Runs `script` with `stdin` fed from a file, within `timeout`.
    pub fn run_with(
        &self,
        script: &str,
        stdin: Option<std::fs::File>,
        timeout: Duration,
    ) -> Result<String, Error> {
        let input = stdin.map_or(Input::Null, Input::File);
        let out = run_bounded_with(&mut self.command(script), input, timeout, "ssh")
            .map_err(|e| Error::Cluster(format!("host {}: {e}", self.target)))?;
        match out.status.code() {
            Some(0) => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
            code => Err(Error::Cluster(format!(
                "host {}: `{}` exited {}: {}",
                self.target,
                short(script),
                code.map_or("on a signal".into(), |c| c.to_string()),
                String::from_utf8_lossy(&out.stderr).trim()
            ))),
        }
    }

    /// Closes the connection (kills the master). Idempotent; runs on drop.
    pub fn close(&self) {
        let mut master = self.master.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mut m) = master.take() {
            let _ = m.kill();
            let _ = m.wait();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.close();
    }
}

/// The first line of a script, cut to 80 characters, for error messages.
fn short(script: &str) -> String {
    let line = script.lines().next().unwrap_or("");
    if line.chars().count() > 80 {
        format!("{}...", line.chars().take(80).collect::<String>())
    } else {
        line.to_owned()
    }
}

/// `text` quoted for a POSIX shell.
pub fn quote(text: &str) -> String {
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%".contains(c))
    {
        return text.to_owned();
    }
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_leaves_plain_words_and_quotes_the_rest() {
        // A node's command line crosses a remote shell: every argument must arrive intact.
        assert_eq!(quote("--peers"), "--peers");
        assert_eq!(
            quote("1=10.0.0.1:7101,2=10.0.0.2:7101"),
            "1=10.0.0.1:7101,2=10.0.0.2:7101"
        );
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
    }
}
