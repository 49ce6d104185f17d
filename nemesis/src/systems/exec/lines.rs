//! `locksmith client --cluster ... lines`: the adapter side of the client protocol for
//! lockd, in Rust. It reads requests on stdin and answers each through the harness's own
//! lockd client ([`crate::systems::lockd::lock_client`]), so an exec run of lockd through
//! it differs from the native run only by the protocol: two pipes, JSON, and whatever
//! process sits in between (`examples/lockd_client.py`).
//!
//! Requests are served one at a time, in order, as the harness sends them (one op in flight
//! per client process). A line that is not a request is reported on stderr and skipped; the
//! harness then records the op `info` at its deadline.

use std::net::SocketAddr;
use std::time::Duration;

use history::ErrorWord;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::time::Instant;

use super::protocol::{IncomingRequest, answer_line};
use crate::harness::workload::OP_TIMEOUT_MS;
use crate::systems::Outcome;

/// Serves requests until stdin closes; the exit status (0, or 2 when stdout is gone).
pub async fn serve(cluster: Vec<SocketAddr>, client_id: u64) -> u8 {
    let client = crate::systems::lockd::lock_client(cluster, client_id);
    let mut stdout = tokio::io::stdout();
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    if stdout
        .write_all(b"{\"type\":\"init\",\"fencing\":true}\n")
        .await
        .is_err()
    {
        return 2;
    }
    let _ = stdout.flush().await;
    while let Ok(Some(line)) = lines.next_line().await {
        if line.trim().is_empty() {
            continue;
        }
        let request: IncomingRequest = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("locksmith client lines: not a request: {line:?}: {e}");
                continue;
            }
        };
        let timeout = request.timeout_ms.unwrap_or(OP_TIMEOUT_MS);
        let deadline = Instant::now() + Duration::from_millis(timeout);
        let outcome = match (request.op.as_str(), request.token) {
            ("acquire", _) => {
                client
                    .acquire(&request.key, request.lease_ms, request.wait_ms, deadline)
                    .await
            }
            ("release", Some(token)) => client.release(&request.key, token, deadline).await,
            _ => Outcome::Fail {
                error: ErrorWord::Invalid,
                node: None,
            },
        };
        let mut answer = answer_line(request.id, &outcome);
        answer.push('\n');
        if stdout.write_all(answer.as_bytes()).await.is_err() || stdout.flush().await.is_err() {
            return 2;
        }
    }
    0
}
