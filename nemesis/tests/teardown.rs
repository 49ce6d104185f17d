//! No process outlives a run, also on Ctrl-C (issue 5): `locksmith test` is interrupted with
//! SIGINT once its cluster is up; it must exit 2 and every node it started must be gone.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Pids whose parent is `parent` (from /proc/<pid>/stat, field 4).
fn children(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let after = stat.rsplit(')').next().unwrap_or("");
        let ppid = after
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            out.push(pid);
        }
    }
    out
}

fn alive(pid: u32) -> bool {
    // A reaped process has no /proc entry; a zombie has state Z.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|s| s.split_whitespace().next());
    matches!(state, Some(s) if s != "Z")
}

#[test]
fn ctrl_c_kills_every_node_and_exits_2() {
    // Issue 5: no process outlives the run, also on Ctrl-C.
    let store = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_locksmith"))
        .args([
            "test", "--nodes", "3", "--time-s", "60", "--seed", "5", "--store",
        ])
        .arg(store.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start locksmith");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut up = false;
    while Instant::now() < deadline {
        match lines.next() {
            Some(Ok(line)) if line.contains("nodes up") => {
                up = true;
                break;
            }
            Some(Ok(_)) => continue,
            _ => break,
        }
    }
    if !up {
        let _ = child.kill();
        panic!("the cluster never came up");
    }
    let nodes = children(child.id());
    assert_eq!(nodes.len(), 3, "three lockd children: {nodes:?}");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).expect("SIGINT");
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("locksmith did not exit within 15 s of SIGINT");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        status.code(),
        Some(2),
        "Ctrl-C is 'could not run': {status:?}"
    );
    std::thread::sleep(Duration::from_millis(200));
    let left: Vec<u32> = nodes.into_iter().filter(|p| alive(*p)).collect();
    assert!(left.is_empty(), "nodes outlived the run: {left:?}");
}
