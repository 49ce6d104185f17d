//! The session table under a soak, in one process (issue 27, the soak's table part): a
//! million distinct client sessions registered and 100,000 keys held, applied to the lock
//! table as every node applies them, then the snapshot of that table encoded as a node sends
//! and stores it. Prints the apply rate, the sessions kept (the cap), the snapshot's size
//! against the frame and record limits, and this process's peak RSS.
//!
//! ```text
//! cargo bench -p lockd --bench sessions -- [--sessions 1000000] [--keys 100000] [--key-len 16]
//! ```
//!
//! What it does not do: run a cluster of processes, kill and restart a follower, or measure
//! each node's RSS. `locksmith bench --soak` does (nemesis/src/bench/soak/).

use std::time::Instant;

use lockd::lock::{Command, LockTable, Origin, Outcome, Proposal, SessionLimits};

fn arg(name: &str, default: u64) -> Result<u64, String> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == name) {
        Some(at) => args
            .get(at + 1)
            .ok_or(format!("{name} needs a value"))?
            .parse()
            .map_err(|e| format!("{name}: {e}")),
        None => Ok(default),
    }
}

/// This process's peak resident set size, in KiB (Linux: VmHWM).
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() -> Result<(), String> {
    let sessions = arg("--sessions", 1_000_000)?;
    let keys = arg("--keys", 100_000)?;
    let key_len = arg("--key-len", 16)? as usize;
    let limits = SessionLimits::DEFAULT;
    let mut table = LockTable::new().with_session_limits(limits);
    let started = Instant::now();
    let mut index = 0_u64;
    let mut held = 0_u64;
    for n in 0..sessions {
        index += 1;
        // One registration a millisecond of committed time: 1,000 s of registrations.
        let register = Proposal {
            origin: None,
            command: Command::RegisterSession,
            time_ms: n,
        };
        let Outcome::SessionRegistered { session } = table.apply_proposal(index, &register) else {
            return Err(format!("registration {n} refused"));
        };
        // The last `keys` sessions each take a key (the earlier ones are evicted by then,
        // and their keys would be too: the cap keeps the newest).
        if n >= sessions.saturating_sub(keys) {
            index += 1;
            let key = format!("{:0>width$}", held, width = key_len);
            let grant = Proposal {
                origin: Some(Origin {
                    session,
                    request: 1,
                }),
                command: Command::Grant {
                    key,
                    lease_ms: 600_000,
                },
                time_ms: 0,
            };
            match table.apply_proposal(index, &grant) {
                Outcome::Granted { .. } => held += 1,
                other => return Err(format!("grant {held}: {other:?}")),
            }
        }
    }
    let applied_s = started.elapsed().as_secs_f64();
    let encode = Instant::now();
    let snapshot = serde_json::to_vec(&table).map_err(|e| e.to_string())?;
    let encode_s = encode.elapsed().as_secs_f64();
    let frame_max = lockd::rpc::FRAME_LEN_MAX;
    let record_max = lockd::storage::RECORD_BYTES_MAX;
    println!("sessions registered    {sessions}");
    println!(
        "entries applied        {index} in {applied_s:.1} s ({:.0}/s)",
        index as f64 / applied_s
    );
    println!(
        "sessions kept          {} (cap {})",
        table.sessions_len(),
        limits.sessions_max
    );
    println!("keys held              {}", table.locks().len());
    println!(
        "snapshot (JSON)        {} bytes, encoded in {encode_s:.2} s; frame limit {frame_max} ({}), record limit {record_max} ({})",
        snapshot.len(),
        if snapshot.len() <= frame_max {
            "under"
        } else {
            "OVER"
        },
        if snapshot.len() <= record_max {
            "under"
        } else {
            "OVER"
        },
    );
    match peak_rss_kib() {
        Some(kib) => println!("peak RSS               {} MiB", kib / 1024),
        None => println!("peak RSS               unknown (no /proc/self/status)"),
    }
    if table.sessions_len() > limits.sessions_max {
        return Err("the session table grew past its cap".to_owned());
    }
    Ok(())
}
