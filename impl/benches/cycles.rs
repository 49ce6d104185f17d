//! Acquire+release cycles per second and p50/p99 latency on a 3-node loopback cluster of
//! real `lockd` processes (fsync on, data dirs in a temporary directory).
//!
//! ```text
//! cargo bench -p lockd --bench cycles -- [--time-s 10] [--concurrency 1,4,16] [--data-dir-in DIR]
//! ```

#[path = "../tests/processes/cluster.rs"]
mod cluster;

use std::path::{Path, PathBuf};
use std::time::Duration;

use cluster::Cluster;

struct Args {
    time_s: u64,
    concurrency: Vec<usize>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        time_s: 10,
        concurrency: vec![1, 4, 16],
    };
    let mut iter = std::env::args().skip(1);
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--time-s" => {
                let value = iter.next().ok_or("--time-s needs a value")?;
                args.time_s = value
                    .parse()
                    .map_err(|e| format!("--time-s {value}: {e}"))?;
            }
            "--concurrency" => {
                let value = iter.next().ok_or("--concurrency needs a value")?;
                args.concurrency = value
                    .split(',')
                    .map(|c| c.parse().map_err(|e| format!("--concurrency {c}: {e}")))
                    .collect::<Result<_, _>>()?;
                if args.concurrency.contains(&0) {
                    return Err("--concurrency 0: need at least one worker".to_owned());
                }
            }
            // `cargo bench` passes --bench; anything else is a filter we do not use.
            _ => {}
        }
    }
    Ok(args)
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("cycles: {e}");
            std::process::exit(2);
        }
    };
    let lockd = PathBuf::from(env!("CARGO_BIN_EXE_lockd"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(run(&lockd, &args));
}

async fn run(lockd: &Path, args: &Args) {
    let cluster = Cluster::start(lockd, 3, &[]);
    let probe = cluster.client(1);
    let leader = cluster
        .wait_for_leader(&probe, Duration::from_secs(10))
        .await;
    let Some(leader) = leader else {
        eprintln!("cycles: no leader within 10 s\n{}", cluster.log_tails(20));
        std::process::exit(2);
    };
    println!(
        "lockd 3-node loopback cluster (leader n{leader}), data dirs under {}",
        cluster.dir().display()
    );
    let keep = std::env::var_os("LOCKD_BENCH_KEEP_LOGS");
    for &concurrency in &args.concurrency {
        let result = lockd::bench::bench_cycles(
            cluster.client_addrs(),
            Duration::from_secs(args.time_s),
            concurrency,
        )
        .await;
        println!("concurrency {concurrency:>3}: {result}");
        if let Some(dir) = &keep {
            for spec in &cluster.specs {
                let target = Path::new(dir).join(format!("n{}.log", spec.id));
                let _ = std::fs::copy(&spec.log_path, target);
            }
        }
        if result.errors > 0 {
            println!("node logs after errors:\n{}", cluster.log_tails(15));
        }
    }
}
