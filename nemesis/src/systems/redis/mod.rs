//! `--system redis`: Redlock over N independent `redis-server` processes (Debian's
//! `redis-server` package), the lock people build on Redis; `--redis-instances 1` is the
//! single-instance `SET key value NX PX ttl` lock.
//!
//! - **Nodes** ([`RedisLauncher`]): one `redis-server` per node of the run's [`Layout`], each
//!   started by the harness in the foreground with a config file of its own in its
//!   temporary data dir ([`config_text`]: its loopback port, `bind 127.0.0.1`, no RDB
//!   snapshots, no AOF, logs to stdout, which the cluster writes to `node-logs/n<ID>.log`);
//!   never the package's service. Kill, pause and restart are the cluster's signals on the
//!   process group, as for every system. A killed instance restarts **empty** (nothing is
//!   persisted), the restart Redlock's page warns about.
//! - **Clock**: with the clock nemesis on, every instance runs under libfaketime
//!   ([`crate::systems::faketime`]) and the clock family moves its wall clock, which is
//!   what Redis's key expiry reads (`mstime()`, `gettimeofday`). [`System::set_clock`] jumps
//!   and rates it; [`System::reset_clock`] steps it back to real time.
//! - **Links**: the instances are independent and have no peer links, so there is nothing
//!   for the per-link proxy to cut between them ([`System::per_link_dial`] is false and the
//!   command refuses `--nemesis partition`); the links that matter are client to instance,
//!   which the harness does not route through a proxy.
//! - **Clients** ([`redlock::Redlock`]): every client process talks to every instance.
//!   Redlock issues no fencing token, so grants carry none: the run uses the unfenced
//!   workload, and the checks that read tokens (linearizability of the lock model, fencing)
//!   say "not checked" while lease safety judges the grants and writes by real time alone
//!   (`checker::lease::check_without_tokens_with`, owner-aware: a release frees only the
//!   releasing client's own value, so another client's release never ends a hold); the
//!   summary lists the two as not checked, with the reason.
//! - **Status**: `PING` per instance; the instances elect no leader.

pub mod explain;
pub mod redlock;
pub mod resp;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use history::ErrorWord;

use crate::cluster::{LaunchOptions, Launcher, Layout};
use crate::rng::Rng;
use crate::systems::faketime::{FakeClock, Libfaketime, NodeClocks};
use crate::systems::{LockClient, NodeView, Outcome, System};
use crate::{Error, NodeId};

pub use redlock::{Acquired, Redlock, RedlockOptions, Released};

/// What `locksmith test --system redis` says under its checks: which ones cannot apply.
pub const SUMMARY_NOTE: &str = "note: Redlock issues no fencing token, so the fenced workload \
     and the checks that read tokens (linearizability of the lock model, fencing) do not apply; \
     the clients ran the unfenced workload, and lease safety judged grants and writes by real \
     time alone";

/// How long a status `PING` may take per instance.
const STATUS_TIMEOUT: Duration = Duration::from_millis(500);
/// The random stream of the clients' values and back-offs ([`Rng::derive`]).
const CLIENT_STREAM: u64 = 9 << 32;
/// The default number of instances: the page's example (5 masters), which survives two
/// instances down or paused.
pub const INSTANCES_DEFAULT: u64 = 5;
/// The name of each instance's config file in its data dir (its clock file is
/// [`crate::systems::faketime::CLOCK_FILE`]).
pub const CONFIG_FILE: &str = "redis.conf";

/// Finds `redis-server` (`LOCKSMITH_REDIS_SERVER` overrides) or says how to install it.
pub fn find_redis_server() -> Result<PathBuf, Error> {
    let from_env = std::env::var_os("LOCKSMITH_REDIS_SERVER").map(PathBuf::from);
    from_env
        .into_iter()
        .chain(["/usr/bin/redis-server", "/usr/local/bin/redis-server"].map(PathBuf::from))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            Error::Cluster(
                "no redis-server in /usr/bin or LOCKSMITH_REDIS_SERVER; run ci/install.sh".into(),
            )
        })
}

/// The config file of one instance: its port and data dir, loopback only, nothing persisted.
pub fn config_text(port: u16, dir: &Path) -> String {
    format!(
        "# written by locksmith for one test instance\n\
         port {port}\n\
         bind 127.0.0.1\n\
         protected-mode yes\n\
         daemonize no\n\
         supervised no\n\
         save \"\"\n\
         appendonly no\n\
         dir \"{}\"\n\
         logfile \"\"\n\
         databases 1\n",
        dir.display()
    )
}

/// Redis as a system under test (see the module docs).
pub struct Redis {
    binary: PathBuf,
    /// The instances' clocks, when they run under libfaketime.
    clocks: Option<Arc<NodeClocks>>,
    seed: u64,
    options: RedlockOptions,
}

impl Redis {
    /// Redis from `binary`; with `faketime`, every instance runs under libfaketime so the
    /// clock nemesis can move its clock. The clients' random values and back-offs come from
    /// `seed`.
    pub fn new(binary: PathBuf, faketime: Option<Libfaketime>, seed: u64) -> Self {
        Redis {
            binary,
            clocks: faketime.map(NodeClocks::new),
            seed,
            options: RedlockOptions::default(),
        }
    }

    fn clock(&self, id: NodeId) -> Result<Arc<FakeClock>, Error> {
        self.clocks.as_ref().map_or_else(
            || {
                Err(Error::Unsupported(format!(
                    "n{id}: this redis instance runs without libfaketime (the clock nemesis was off when it started)"
                )))
            },
            |clocks| clocks.clock(id),
        )
    }

    /// The clock files of the instances (for tests: they must be gone after a run).
    pub fn clock_files(&self) -> Vec<PathBuf> {
        self.clocks.as_ref().map_or_else(Vec::new, |c| c.files())
    }

    /// Drops the clocks (stops their tickers, removes their files).
    pub fn drop_clocks(&self) {
        if let Some(clocks) = &self.clocks {
            clocks.clear();
        }
    }
}

/// Starts one `redis-server` per node with its own config file (see the module docs).
pub struct RedisLauncher {
    binary: PathBuf,
    configs: BTreeMap<NodeId, PathBuf>,
    clocks: Option<Arc<NodeClocks>>,
}

impl Launcher for RedisLauncher {
    fn command(&self, id: NodeId, _options: &LaunchOptions) -> std::process::Command {
        let mut command = std::process::Command::new(&self.binary);
        if let Some(config) = self.configs.get(&id) {
            command.arg(config);
        }
        if let Some(clocks) = &self.clocks {
            clocks.wrap(id, &mut command);
        }
        command
    }

    fn stopped(&self, _id: NodeId, pid: u32) {
        if self.clocks.is_some() {
            crate::systems::faketime::remove_shared_memory(pid);
        }
    }
}

struct RedisClient {
    redlock: Redlock,
}

impl LockClient for RedisClient {
    fn acquire<'a>(
        &'a self,
        key: &'a str,
        lease_ms: u64,
        wait_ms: u64,
        deadline: tokio::time::Instant,
    ) -> BoxFuture<'a, Outcome> {
        async move {
            match self.redlock.acquire(key, lease_ms, wait_ms, deadline).await {
                Acquired::Granted { .. } => Outcome::Ok {
                    token: None,
                    node: None,
                },
                Acquired::Busy => Outcome::Fail {
                    error: ErrorWord::Busy,
                    node: None,
                },
                Acquired::Unknown => Outcome::Info(ErrorWord::Timeout),
            }
        }
        .boxed()
    }

    fn release<'a>(
        &'a self,
        key: &'a str,
        _token: u64,
        _deadline: tokio::time::Instant,
    ) -> BoxFuture<'a, Outcome> {
        async move {
            match self.redlock.release(key, 1000).await {
                Released::Released => Outcome::Ok {
                    token: None,
                    node: None,
                },
                Released::NotHolder => Outcome::Fail {
                    error: ErrorWord::NotHolder,
                    node: None,
                },
                Released::Unknown => Outcome::Info(ErrorWord::Timeout),
            }
        }
        .boxed()
    }
}

impl System for Redis {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn launcher(
        &self,
        layout: &Layout,
        _dial: BTreeMap<(NodeId, NodeId), SocketAddr>,
    ) -> Result<Box<dyn Launcher>, Error> {
        if !self.binary.is_file() {
            return Err(Error::Cluster(format!(
                "redis-server {} not found; run ci/install.sh",
                self.binary.display()
            )));
        }
        let mut configs = BTreeMap::new();
        for id in &layout.nodes {
            let dir = &layout.data_dir[id];
            let path = dir.join(CONFIG_FILE);
            std::fs::write(&path, config_text(layout.client[id].port(), dir))
                .map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
            configs.insert(*id, path);
        }
        if let Some(clocks) = &self.clocks {
            clocks.create(layout)?;
        }
        Ok(Box::new(RedisLauncher {
            binary: self.binary.clone(),
            configs,
            clocks: self.clocks.clone(),
        }))
    }

    fn per_link_dial(&self) -> bool {
        false
    }

    fn elects_leader(&self) -> bool {
        false
    }

    fn client(&self, layout: &Layout, client_id: u64) -> Box<dyn LockClient> {
        let instances = layout
            .nodes
            .iter()
            .map(|id| (*id, layout.client[id]))
            .collect();
        let rng = Rng::derive(self.seed, CLIENT_STREAM, client_id);
        Box::new(RedisClient {
            redlock: Redlock::new(instances, rng, self.options.clone()),
        })
    }

    fn status<'a>(&'a self, layout: &'a Layout) -> BoxFuture<'a, Vec<NodeView>> {
        async move {
            let instances = layout
                .nodes
                .iter()
                .map(|id| (*id, layout.client[id]))
                .collect();
            let probe = Redlock::new(instances, Rng::new(self.seed), self.options.clone());
            probe
                .ping(STATUS_TIMEOUT)
                .await
                .into_iter()
                .map(|node| NodeView {
                    node,
                    role: "up".to_owned(),
                    term: 0,
                    leader: None,
                    commit_index: 0,
                })
                .collect()
        }
        .boxed()
    }

    fn owner_aware_release(&self) -> bool {
        true
    }

    fn explain(&self, history: &[history::Op], check: &checker::Check) -> Option<String> {
        explain::two_holders(history, check)
    }

    fn set_clock<'a>(
        &'a self,
        _layout: &'a Layout,
        id: NodeId,
        rate_permille: u32,
        jump_ms: i64,
    ) -> BoxFuture<'a, Result<(), Error>> {
        async move { self.clock(id)?.set(rate_permille, jump_ms) }.boxed()
    }

    fn reset_clock<'a>(
        &'a self,
        _layout: &'a Layout,
        id: NodeId,
    ) -> BoxFuture<'a, Result<(), Error>> {
        async move { self.clock(id)?.reset() }.boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_binds_loopback_on_its_port_and_persists_nothing() {
        let text = config_text(16379, Path::new("/tmp/x"));
        for line in [
            "port 16379",
            "bind 127.0.0.1",
            "daemonize no",
            "save \"\"",
            "appendonly no",
            "dir \"/tmp/x\"",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
    }
}
