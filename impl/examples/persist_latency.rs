//! Persist latency of the data dir on the acquire path: one entry plus the hard state per
//! persist (what a leader writes for one Grant), in both sync modes.
//!
//! Run: `cargo run --release -p lockd --example persist_latency [count] [dir]`
//! (count defaults to 2000, bounded to 100000; dir defaults to a temporary directory, so
//! pass a path on the disk you care about).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use lockd::lock::{Command, Proposal};
use lockd::raft::{Entry, HardState, Persist};
use lockd::storage::{DataDir, SyncMode};

const COUNT_MAX: usize = 100_000;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let count: usize = args.next().map_or(Ok(2000), |a| a.parse())?;
    let count = count.clamp(1, COUNT_MAX);
    let base = tempfile::tempdir_in(args.next().map_or_else(std::env::temp_dir, PathBuf::from))?;
    for sync in [SyncMode::Fsync, SyncMode::UserBuffer] {
        let path = base.path().join(format!("{sync:?}"));
        let (mut dir, _) = DataDir::open(&path, sync)?;
        let mut samples = Vec::with_capacity(count);
        for index in 1..=count as u64 {
            let persist = Persist {
                entries: vec![Entry {
                    term: 1,
                    index,
                    proposal: Proposal::system(Command::Grant {
                        key: format!("key-{}", index % 100),
                        lease_ms: 10_000,
                    }),
                }],
                hard_state: Some(HardState {
                    term: 1,
                    voted_for: Some(1),
                    commit: index - 1,
                }),
                ..Persist::default()
            };
            let start = Instant::now();
            dir.persist(&persist)?;
            samples.push(start.elapsed());
        }
        samples.sort();
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
        let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
        println!(
            "{sync:?}: {count} persists (1 entry + hard state): mean {mean:?} p50 {:?} p99 {:?} max {:?}",
            at(0.5),
            at(0.99),
            at(1.0)
        );
    }
    Ok(())
}
