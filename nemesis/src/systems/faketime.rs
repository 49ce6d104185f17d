//! Clock faults for any process: the harness starts a third-party process under
//! libfaketime (Debian's `faketime` package, `LD_PRELOAD=libfaketime.so.1`) with
//! `FAKETIME_TIMESTAMP_FILE` pointing at a file of the harness's, and moves that process's
//! wall clock by rewriting the file ([`FakeClock`]). Jepsen does the same
//! (`jepsen/src/jepsen/faketime.clj`). Any system whose nodes read time through libc
//! (redis-server, the JVM) can take the clock nemesis this way; Go programs (etcd) read
//! time through the vDSO and cannot.
//!
//! - **The file holds an offset only** (`+1.250` or `-0.500`: seconds, read by libfaketime
//!   on every time call because of `FAKETIME_NO_CACHE=1`). A rate change is the harness's
//!   own: while a clock runs at a rate other than 1, a ticker thread rewrites the offset
//!   every [`TICK_MS`] so that the clock advances `rate` times as fast as real time.
//!   libfaketime's own `x` modifier measures the rate from the process's start (so a
//!   change of rate jumps by `(new − old) × uptime`, and every restart resets it); an
//!   offset the harness computes is one clock per node, across restarts, and
//!   [`FakeClock::offset_ms`] says what it is at any time.
//! - **Every write is atomic**: a temporary file in the same directory, renamed over the
//!   clock file, so the process never reads half a line.
//! - **Monotonic time is left alone** (`FAKETIME_DONT_FAKE_MONOTONIC=1`): the clock
//!   nemesis moves the wall clock (what a lease or an expiry compares against, and what NTP
//!   steps); event loops and the JVM's timers keep running on `CLOCK_MONOTONIC`, and the
//!   JVM hangs otherwise (libfaketime's README).
//! - **The JVM** ([`Libfaketime::for_jvm`]) gets `libfaketimeMT.so.1`, the build whose
//!   `time()` intercept and cached state are guarded by a lock (libfaketime's README;
//!   Jepsen's `faketime -m` does the same), and `FAKETIME_FORCE_MONOTONIC_FIX=0`. Without
//!   the latter, libfaketime 0.9.10 on this glibc rewrites the deadline of every
//!   `pthread_cond_timedwait` on a `CLOCK_MONOTONIC` condition, which is how HotSpot
//!   implements every timed wait, so the waits return at once and the JVM's timer threads
//!   spin (libfaketime issue #425): measured, an idle ZooKeeper server used a core (526
//!   CPU ticks in 12 s, against 39 without libfaketime and 42 with the fix off), and three
//!   of them elected no leader in 20 s on a 2-core machine. redis-server keeps
//!   `libfaketime.so.1` and the default fix, with which its tests pass.
//! - **jemalloc**: libfaketime and jemalloc do not mix (libfaketime issue #130: jemalloc's
//!   initialisation calls `clock_gettime` while libfaketime's calls `calloc`; Debian's
//!   redis-server dies with "Cannot recover from unexpected recursive calls to
//!   clock_gettime()"). [`Libfaketime::glibc_malloc`] preloads glibc's
//!   `libc_malloc_debug.so.0` first, which gives the process glibc's malloc, free and
//!   `malloc_usable_size` in place of jemalloc's.
//! - **Nothing is left behind**: the clock file lives in the node's data dir (a temporary
//!   dir of the run); [`FakeClock`]'s drop stops its ticker and removes the file, and the
//!   ticker stops by itself once the file's directory is gone. libfaketime makes a
//!   semaphore and a shared-memory segment per process (`/dev/shm/sem.faketime_sem_PID`,
//!   `/dev/shm/faketime_shm_PID`) and removes them only on a clean exit; a node the nemesis
//!   SIGKILLs leaves them, and a later process with the same pid would fail to start
//!   ("shm_open failed: File exists"). The launcher removes them once the cluster reaped
//!   the process ([`remove_shared_memory`]); `nemesis/tests/redis.rs` checks `/dev/shm`.
//! - **One clock per node** ([`NodeClocks`]): a system whose nodes run under libfaketime
//!   (redis, ZooKeeper) keeps one [`FakeClock`] per node of the run's layout, in the node's
//!   data dir, wraps each node's command in it and moves it on `set_clock`.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cluster::Layout;
use crate::{Error, NodeId};

/// How often a clock that runs at a rate other than 1 has its offset rewritten, ms.
pub const TICK_MS: u64 = 10;
/// Where Debian (and other multiarch distributions) put libfaketime.
const LIBRARY_DIRS: [&str; 3] = [
    "/usr/lib/x86_64-linux-gnu/faketime",
    "/usr/lib/aarch64-linux-gnu/faketime",
    "/usr/lib/faketime",
];
/// Where glibc's preloadable malloc lives (glibc 2.34 and later).
const MALLOC_DEBUG_DIRS: [&str; 3] = [
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib",
];

/// The name of a node's clock file in its data dir ([`NodeClocks`]).
pub const CLOCK_FILE: &str = "faketime.rc";
/// The multithreaded build's file name, next to `libfaketime.so.1`.
const MULTITHREADED: &str = "libfaketimeMT.so.1";

/// The libraries to preload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Libfaketime {
    /// `libfaketime.so.1`.
    pub library: PathBuf,
    /// `libc_malloc_debug.so.0`, preloaded first for a process linked with jemalloc.
    pub glibc_malloc: Option<PathBuf>,
    /// False: `FAKETIME_FORCE_MONOTONIC_FIX=0` (for the JVM, see the module docs); true:
    /// libfaketime's own choice.
    pub monotonic_fix: bool,
}

impl Libfaketime {
    /// Finds `libfaketime.so.1` (`LOCKSMITH_LIBFAKETIME` overrides), or says how to get it.
    pub fn find() -> Result<Libfaketime, Error> {
        let from_env = std::env::var_os("LOCKSMITH_LIBFAKETIME").map(PathBuf::from);
        let library = from_env
            .into_iter()
            .chain(
                LIBRARY_DIRS
                    .iter()
                    .map(|dir| Path::new(dir).join("libfaketime.so.1")),
            )
            .find(|p| p.is_file())
            .ok_or_else(|| {
                Error::Unsupported(
                    "libfaketime.so.1 not found (Debian package faketime; run ci/install.sh)"
                        .into(),
                )
            })?;
        Ok(Libfaketime {
            library,
            glibc_malloc: None,
            monotonic_fix: true,
        })
    }

    /// The same for a JVM (see the module docs): the multithreaded build,
    /// `libfaketimeMT.so.1` from the same directory, with the monotonic fix off. An error
    /// when the multithreaded build is not there.
    pub fn for_jvm(mut self) -> Result<Libfaketime, Error> {
        let library = self.library.with_file_name(MULTITHREADED);
        if !library.is_file() {
            return Err(Error::Unsupported(format!(
                "{} not found (Debian package libfaketime; run ci/install.sh)",
                library.display()
            )));
        }
        self.library = library;
        self.monotonic_fix = false;
        Ok(self)
    }

    /// The same, with glibc's malloc preloaded first (for a process linked with jemalloc,
    /// see the module docs); an error when this glibc has no `libc_malloc_debug.so.0`.
    pub fn with_glibc_malloc(mut self) -> Result<Libfaketime, Error> {
        let shim = MALLOC_DEBUG_DIRS
            .iter()
            .map(|dir| Path::new(dir).join("libc_malloc_debug.so.0"))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                Error::Unsupported(
                    "libc_malloc_debug.so.0 (glibc 2.34 or later) not found: a jemalloc process \
                     cannot run under libfaketime without it"
                        .into(),
                )
            })?;
        self.glibc_malloc = Some(shim);
        Ok(self)
    }

    /// The `LD_PRELOAD` value.
    pub fn preload(&self) -> String {
        self.glibc_malloc
            .iter()
            .chain([&self.library])
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(":")
    }
}

/// Removes libfaketime's semaphore and shared memory of process `pid` (see the module
/// docs); call it only once `pid` is gone. Returns how many files it removed.
pub fn remove_shared_memory(pid: u32) -> usize {
    [
        format!("/dev/shm/faketime_shm_{pid}"),
        format!("/dev/shm/sem.faketime_sem_{pid}"),
    ]
    .iter()
    .filter(|path| std::fs::remove_file(path).is_ok())
    .count()
}

/// Where a clock stands: its offset at `anchor`, and its rate from then on.
#[derive(Clone, Copy, Debug)]
struct ClockState {
    offset_ms_at_anchor: f64,
    anchor: Instant,
    rate_permille: u32,
}

impl ClockState {
    fn offset_ms(&self, now: Instant) -> f64 {
        let elapsed_ms = now.saturating_duration_since(self.anchor).as_secs_f64() * 1000.0;
        self.offset_ms_at_anchor + elapsed_ms * (f64::from(self.rate_permille) - 1000.0) / 1000.0
    }
}

/// One process's fake wall clock: the file libfaketime reads, and the harness's handle on it.
#[derive(Debug)]
pub struct FakeClock {
    file: PathBuf,
    state: Mutex<ClockState>,
    ticker: Mutex<Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>>,
    /// Held across each write of the file: the ticker and `set` write through one
    /// temporary file, and two writers at once renamed it from under each other.
    writes: Mutex<()>,
}

/// The text of the clock file for an offset in ms: signed seconds with three decimals.
pub fn offset_line(offset_ms: f64) -> String {
    let sign = if offset_ms < 0.0 { '-' } else { '+' };
    format!("{sign}{:.3}\n", offset_ms.abs() / 1000.0)
}

fn write_atomically(file: &Path, text: &str) -> Result<(), Error> {
    let mut temp = file.as_os_str().to_owned();
    temp.push(".tmp");
    let temp = PathBuf::from(temp);
    let io = |e: std::io::Error| Error::Io(format!("{}: {e}", file.display()));
    let mut out = std::fs::File::create(&temp).map_err(io)?;
    out.write_all(text.as_bytes()).map_err(io)?;
    drop(out);
    std::fs::rename(&temp, file).map_err(io)
}

impl FakeClock {
    /// A clock at real time whose file is `file` (written now).
    pub fn create(file: PathBuf) -> Result<Arc<FakeClock>, Error> {
        write_atomically(&file, &offset_line(0.0))?;
        Ok(Arc::new(FakeClock {
            file,
            state: Mutex::new(ClockState {
                offset_ms_at_anchor: 0.0,
                anchor: Instant::now(),
                rate_permille: 1000,
            }),
            ticker: Mutex::new(None),
            writes: Mutex::new(()),
        }))
    }

    /// Writes `text` to the clock file atomically, one writer at a time.
    fn write(&self, text: &str) -> Result<(), Error> {
        let _one_writer = self.writes.lock().unwrap_or_else(|p| p.into_inner());
        write_atomically(&self.file, text)
    }

    /// The clock file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Sets the environment that starts `command` under libfaketime on this clock.
    pub fn wrap(&self, command: &mut Command, library: &Libfaketime) {
        command
            .env("LD_PRELOAD", library.preload())
            .env("FAKETIME_TIMESTAMP_FILE", &self.file)
            .env("FAKETIME_NO_CACHE", "1")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .env_remove("FAKETIME");
        if library.monotonic_fix {
            command.env_remove("FAKETIME_FORCE_MONOTONIC_FIX");
        } else {
            command.env("FAKETIME_FORCE_MONOTONIC_FIX", "0");
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ClockState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The clock's offset from real time now, ms (positive: ahead).
    pub fn offset_ms(&self) -> f64 {
        self.lock().offset_ms(Instant::now())
    }

    /// The clock's rate, per mille of real time.
    pub fn rate_permille(&self) -> u32 {
        self.lock().rate_permille
    }

    /// Jumps the clock by `jump_ms` (negative: back) and runs it at `rate_permille` of real
    /// time from now on.
    pub fn set(self: &Arc<Self>, rate_permille: u32, jump_ms: i64) -> Result<(), Error> {
        let now = Instant::now();
        let offset = {
            let mut state = self.lock();
            let offset = state.offset_ms(now) + jump_ms as f64;
            *state = ClockState {
                offset_ms_at_anchor: offset,
                anchor: now,
                rate_permille,
            };
            offset
        };
        self.write(&offset_line(offset))?;
        self.stop_ticker();
        if rate_permille != 1000 {
            self.start_ticker();
        }
        Ok(())
    }

    /// Back to real time: offset 0, rate 1 (a step back when the clock was ahead, as NTP
    /// steps a clock).
    pub fn reset(self: &Arc<Self>) -> Result<(), Error> {
        self.stop_ticker();
        *self.lock() = ClockState {
            offset_ms_at_anchor: 0.0,
            anchor: Instant::now(),
            rate_permille: 1000,
        };
        self.write(&offset_line(0.0))
    }

    fn start_ticker(self: &Arc<Self>) {
        let stop = Arc::new(AtomicBool::new(false));
        let clock = Arc::downgrade(self);
        let stopped = stop.clone();
        let handle = std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(TICK_MS));
                let Some(clock) = clock.upgrade() else { return };
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                let line = offset_line(clock.offset_ms());
                // The file's directory is gone (the run ended): nothing left to move.
                if clock.write(&line).is_err() {
                    return;
                }
            }
        });
        *self.ticker.lock().unwrap_or_else(|p| p.into_inner()) = Some((stop, handle));
    }

    fn stop_ticker(&self) {
        let ticker = self.ticker.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((stop, handle)) = ticker {
            stop.store(true, Ordering::SeqCst);
            // The ticker holds only a weak reference, so joining here cannot wait on itself
            // (a drop from the ticker's own upgrade returns before the join matters).
            if handle.thread().id() != std::thread::current().id() {
                let _ = handle.join();
            }
        }
    }
}

impl Drop for FakeClock {
    fn drop(&mut self) {
        self.stop_ticker();
        let _ = std::fs::remove_file(&self.file);
        let mut temp = self.file.as_os_str().to_owned();
        temp.push(".tmp");
        let _ = std::fs::remove_file(PathBuf::from(temp));
    }
}

/// One [`FakeClock`] per node of a system whose nodes run under libfaketime (see the
/// module docs): the launcher wraps each node's command in its node's clock, and the
/// system's `set_clock` and `reset_clock` move it.
#[derive(Debug)]
pub struct NodeClocks {
    library: Libfaketime,
    clocks: Mutex<BTreeMap<NodeId, Arc<FakeClock>>>,
}

impl NodeClocks {
    /// No clocks yet; [`NodeClocks::create`] makes them for a layout.
    pub fn new(library: Libfaketime) -> Arc<NodeClocks> {
        Arc::new(NodeClocks {
            library,
            clocks: Mutex::new(BTreeMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<NodeId, Arc<FakeClock>>> {
        self.clocks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A clock at real time for every node of `layout`, its file [`CLOCK_FILE`] in the
    /// node's data dir;
    /// the clocks of an earlier layout are dropped (their files removed).
    pub fn create(&self, layout: &Layout) -> Result<(), Error> {
        let mut clocks = BTreeMap::new();
        for id in &layout.nodes {
            let file = layout.data_dir[id].join(CLOCK_FILE);
            clocks.insert(*id, FakeClock::create(file)?);
        }
        *self.lock() = clocks;
        Ok(())
    }

    /// Sets the environment that starts node `id`'s `command` under libfaketime on its
    /// clock. A node without a clock (none was created for it) starts as it is.
    pub fn wrap(&self, id: NodeId, command: &mut Command) {
        if let Some(clock) = self.lock().get(&id) {
            clock.wrap(command, &self.library);
        }
    }

    /// Node `id`'s clock, or why the clock nemesis cannot move it.
    pub fn clock(&self, id: NodeId) -> Result<Arc<FakeClock>, Error> {
        self.lock()
            .get(&id)
            .cloned()
            .ok_or_else(|| Error::Unsupported(format!("n{id}: no libfaketime clock for this node")))
    }

    /// The clock files (for tests: they must be gone after a run).
    pub fn files(&self) -> Vec<PathBuf> {
        self.lock()
            .values()
            .map(|c| c.file().to_path_buf())
            .collect()
    }

    /// Drops the clocks (stops their tickers, removes their files).
    pub fn clear(&self) {
        self.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(clock: &FakeClock) -> f64 {
        let text = std::fs::read_to_string(clock.file()).expect("clock file");
        text.trim().parse::<f64>().expect("a signed number") * 1000.0
    }

    #[test]
    fn offsets_are_signed_seconds_libfaketime_reads() {
        assert_eq!(offset_line(0.0), "+0.000\n");
        assert_eq!(offset_line(1250.0), "+1.250\n");
        assert_eq!(offset_line(-500.0), "-0.500\n");
    }

    #[test]
    fn concurrent_writers_of_one_clock_never_fail() {
        // CI failure 2026-12-06 (nemesis/tests/zookeeper.rs, clock nemesis, seed 2): a strobe
        // moved a clock every 32 ms while its ticker rewrote the file every 10 ms. Both wrote
        // through the same temporary file, so one's rename could find it already renamed by
        // the other ("faketime.rc: No such file or directory") and the fault failed to act.
        // Two threads writing one clock 5,000 times each: without the clock's write lock
        // this failed at the first write.
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = FakeClock::create(dir.path().join(CLOCK_FILE)).expect("create");
        let writers: Vec<_> = (0..2)
            .map(|w| {
                let clock = Arc::clone(&clock);
                std::thread::spawn(move || {
                    for i in 0..5_000 {
                        if let Err(e) = clock.write(&offset_line(f64::from(i))) {
                            return Err(format!("writer {w}, write {i}: {e}"));
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for writer in writers {
            writer
                .join()
                .expect("writer thread")
                .expect("every write succeeds");
        }
        assert!((0.0..5_000.0).contains(&read(&clock)));
    }

    #[test]
    fn jumps_add_up_rates_move_the_offset_and_drop_removes_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = FakeClock::create(dir.path().join(CLOCK_FILE)).expect("create");
        assert_eq!(read(&clock), 0.0);
        clock.set(1000, 2000).expect("jump forward");
        clock.set(1000, -500).expect("jump back");
        assert!((read(&clock) - 1500.0).abs() < 1.0, "{}", read(&clock));
        // Twice as fast: after 200 ms the clock is about 200 ms further ahead, and the
        // ticker has written it.
        clock.set(2000, 0).expect("rate");
        std::thread::sleep(Duration::from_millis(200));
        let ahead = read(&clock) - 1500.0;
        assert!((150.0..400.0).contains(&ahead), "{ahead}");
        clock.reset().expect("reset");
        assert_eq!(read(&clock), 0.0);
        std::thread::sleep(Duration::from_millis(3 * TICK_MS));
        assert_eq!(read(&clock), 0.0, "the ticker stopped at the reset");
        let file = clock.file().to_path_buf();
        clock.set(500, 0).expect("slow ticker running");
        drop(clock);
        assert!(!file.exists(), "the clock file is removed");
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
    }

    #[test]
    fn node_clocks_live_in_each_data_dir_and_wrap_only_their_nodes() {
        // Module docs, "One clock per node": a clock file per node, the MT library for
        // the JVM sits next to the plain one, and a node without a clock is not wrapped.
        let dir = tempfile::tempdir().expect("tempdir");
        let layout = Layout::new(2, dir.path()).expect("layout");
        let library = Libfaketime {
            library: PathBuf::from("/nowhere/libfaketime.so.1"),
            glibc_malloc: None,
            monotonic_fix: true,
        };
        assert!(library.clone().for_jvm().is_err(), "no MT build there");
        let clocks = NodeClocks::new(library);
        clocks.create(&layout).expect("create");
        assert_eq!(clocks.files().len(), 2);
        assert!(layout.data_dir[&1].join(CLOCK_FILE).is_file());
        let mut command = Command::new("true");
        clocks.wrap(1, &mut command);
        let file = command
            .get_envs()
            .find(|(k, _)| *k == "FAKETIME_TIMESTAMP_FILE")
            .and_then(|(_, v)| v.map(PathBuf::from));
        assert_eq!(file, Some(layout.data_dir[&1].join(CLOCK_FILE)));
        let env = |command: &Command, name: &str| {
            command
                .get_envs()
                .find(|(k, _)| *k == name)
                .and_then(|(_, v)| v.map(|v| v.to_string_lossy().into_owned()))
        };
        assert_eq!(env(&command, "FAKETIME_NO_CACHE").as_deref(), Some("1"));
        let mut other = Command::new("true");
        clocks.wrap(3, &mut other);
        assert_eq!(other.get_envs().count(), 0, "n3 has no clock");
        assert_eq!(env(&command, "FAKETIME_FORCE_MONOTONIC_FIX"), None);
        // A JVM's clocks turn libfaketime's monotonic fix off.
        let jvm_clocks = NodeClocks::new(Libfaketime {
            library: PathBuf::from("/nowhere/libfaketimeMT.so.1"),
            glibc_malloc: None,
            monotonic_fix: false,
        });
        jvm_clocks.create(&layout).expect("create");
        let mut jvm = Command::new("true");
        jvm_clocks.wrap(1, &mut jvm);
        assert_eq!(
            env(&jvm, "FAKETIME_FORCE_MONOTONIC_FIX").as_deref(),
            Some("0")
        );
        assert!(clocks.clock(3).is_err());
        clocks.clock(2).expect("n2").set(1000, 5000).expect("jump");
        let text = std::fs::read_to_string(layout.data_dir[&2].join(CLOCK_FILE)).expect("file");
        assert_eq!(text, "+5.000\n");
    }
}
