//! The admin endpoint: the harness's controls of a node (the clock nemesis), on a listener
//! of its own that a node opens only when configured ([`super::AdminConfig`]), and only for a
//! caller that knows the node's admin secret. See `rpc.rs`, "Ports by role".

use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::prelude::*;
use tarpc::context;
use tarpc::server::{BaseChannel, Channel};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tracing::warn;

use super::{Event, clock_rate_in_range, served_transport};
use crate::rpc::{
    ADMIN_SECRET_FILE, Admin, AdminRefusal, CLOCK_JUMP_BACK_MS_MAX, CLOCK_JUMP_FORWARD_MS_MAX,
    ClockReading,
};
use crate::sys::net::TcpListener;

/// At most this many admin connections are served at once (the harness opens one per node).
const ADMIN_CONNECTIONS_MAX: usize = 16;

/// The length of a generated admin secret, in bytes of randomness (written as hex).
const ADMIN_SECRET_BYTES: usize = 16;

/// The longest admin secret accepted from the file, in bytes.
pub(super) const ADMIN_SECRET_LEN_MAX: usize = 256;

#[derive(Clone)]
struct AdminServer {
    events: mpsc::Sender<Event>,
    secret: Arc<str>,
}

/// Whether `given` is `secret`, comparing every byte whatever the first difference (no
/// early exit that would time out the secret a byte at a time).
fn same_secret(given: &str, secret: &str) -> bool {
    let (a, b) = (given.as_bytes(), secret.as_bytes());
    let mut differ = a.len() ^ b.len();
    for (x, y) in a.iter().zip(b.iter()) {
        differ |= usize::from(x ^ y);
    }
    differ == 0
}

/// Checks a `set_clock` call's arguments (the secret apart).
pub(crate) fn check_clock(rate: f64, jump_ms: i64) -> Result<(), AdminRefusal> {
    if !clock_rate_in_range(rate) {
        return Err(AdminRefusal::RateOutOfRange { rate });
    }
    if !(-CLOCK_JUMP_BACK_MS_MAX..=CLOCK_JUMP_FORWARD_MS_MAX).contains(&jump_ms) {
        return Err(AdminRefusal::JumpOutOfRange { jump_ms });
    }
    Ok(())
}

impl Admin for AdminServer {
    async fn set_clock(
        self,
        _: context::Context,
        secret: String,
        rate: f64,
        jump_ms: i64,
    ) -> Result<ClockReading, AdminRefusal> {
        if !same_secret(&secret, &self.secret) {
            warn!("admin call with a wrong secret; refused");
            return Err(AdminRefusal::WrongSecret);
        }
        check_clock(rate, jump_ms)?;
        let (reply, answer) = oneshot::channel();
        let event = Event::SetClock {
            rate,
            jump_ms,
            reply,
        };
        self.events
            .send(event)
            .await
            .map_err(|_| AdminRefusal::ShuttingDown)?;
        answer.await.map_err(|_| AdminRefusal::ShuttingDown)
    }
}

pub(super) async fn serve_admin(
    listener: TcpListener,
    secret: String,
    events: mpsc::Sender<Event>,
) {
    let server = AdminServer {
        events,
        secret: secret.into(),
    };
    let slots = Arc::new(Semaphore::new(ADMIN_CONNECTIONS_MAX));
    loop {
        let stream = match listener.accept().await {
            Ok(stream) => stream,
            Err(e) => {
                warn!(error = %e, "admin accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            warn!(
                bound = ADMIN_CONNECTIONS_MAX,
                "too many admin connections; one closed"
            );
            continue;
        };
        let server = server.clone();
        tokio::spawn(async move {
            BaseChannel::with_defaults(served_transport(stream))
                .execute(server.serve())
                .for_each(|request| async move {
                    tokio::spawn(request);
                })
                .await;
            drop(slot);
        });
    }
}

/// The admin secret of the data dir `data_dir`: read from its `admin.secret`, or made (from
/// the OS's randomness) and written there, readable by its owner only, when there is none.
///
/// # Errors
///
/// The file cannot be read or written, or holds no secret or one longer than 256 bytes.
pub fn admin_secret(data_dir: &Path) -> io::Result<String> {
    let path = data_dir.join(ADMIN_SECRET_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let secret = text.trim();
            if secret.is_empty() || secret.len() > ADMIN_SECRET_LEN_MAX {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{}: the admin secret must be 1 to {ADMIN_SECRET_LEN_MAX} bytes",
                        path.display()
                    ),
                ));
            }
            Ok(secret.to_owned())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let mut bytes = [0_u8; ADMIN_SECRET_BYTES];
            std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
            let secret: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            let mut file = std::fs::OpenOptions::new();
            file.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut file, 0o600);
            let mut file = file.open(&path)?;
            file.write_all(secret.as_bytes())?;
            file.sync_all()?;
            Ok(secret)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abd", "abc"));
        assert!(!same_secret("ab", "abc"));
        assert!(!same_secret("", "abc"));
    }

    #[test]
    fn clock_controls_out_of_bounds_are_refused_typed() {
        // Review finding of issue 27: no bound on a forward jump (a client could overflow the
        // node's clock or expire every lease at once).
        assert_eq!(check_clock(1.0, 0), Ok(()));
        assert_eq!(check_clock(1.0, -3_600_000), Ok(()));
        assert_eq!(check_clock(1.0, CLOCK_JUMP_FORWARD_MS_MAX), Ok(()));
        for jump_ms in [
            CLOCK_JUMP_FORWARD_MS_MAX + 1,
            i64::MAX,
            i64::MIN,
            -3_600_001,
        ] {
            assert_eq!(
                check_clock(1.0, jump_ms),
                Err(AdminRefusal::JumpOutOfRange { jump_ms })
            );
        }
        for rate in [f64::NAN, f64::INFINITY, 0.0, -1.0, 1e9] {
            assert!(matches!(
                check_clock(rate, 0),
                Err(AdminRefusal::RateOutOfRange { .. })
            ));
        }
    }

    #[test]
    fn the_admin_secret_is_made_once_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let first = admin_secret(dir.path()).unwrap();
        assert_eq!(first.len(), 2 * ADMIN_SECRET_BYTES);
        assert_eq!(admin_secret(dir.path()).unwrap(), first);
        std::fs::write(dir.path().join(ADMIN_SECRET_FILE), "  \n").unwrap();
        assert!(
            admin_secret(dir.path()).is_err(),
            "an empty secret is refused"
        );
    }
}
