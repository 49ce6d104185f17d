//! Logs captured in memory, and panics told in one line: a `tracing` subscriber whose lines go to a shared buffer, each
//! stamped with the time a given clock reads (the simulator's clock for `locksmith sim`, whose
//! nodes all log in one process; the store then splits the lines per node).

use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Runs `f` with, when `on`, every log line captured into a buffer that `f` is given too
/// (for log tails while it runs), each line starting with `clock()` in seconds. The filter
/// is the environment variable `filter_var` when set, else `default_filter`. Returns what
/// `f` returned and the lines.
pub fn capturing<T>(
    on: bool,
    filter_var: &str,
    default_filter: &str,
    clock: fn() -> Duration,
    f: impl FnOnce(Option<Arc<Mutex<Vec<u8>>>>) -> T,
) -> (T, Option<String>) {
    if !on {
        return (f(None), None);
    }
    let buffer = Arc::new(Mutex::new(Vec::new()));
    let subscriber = subscriber(buffer.clone(), filter_var, default_filter, clock);
    let value = tracing::subscriber::with_default(subscriber, || f(Some(buffer.clone())));
    let bytes = buffer.lock().map(|b| b.clone()).unwrap_or_default();
    (value, Some(String::from_utf8_lossy(&bytes).into_owned()))
}

fn subscriber(
    buffer: Arc<Mutex<Vec<u8>>>,
    filter_var: &str,
    default_filter: &str,
    clock: fn() -> Duration,
) -> impl tracing::Subscriber + Send + Sync {
    use tracing_subscriber::fmt::format::Writer;
    use tracing_subscriber::fmt::time::FormatTime;

    struct Clock(fn() -> Duration);
    impl FormatTime for Clock {
        fn format_time(&self, w: &mut Writer<'_>) -> std::fmt::Result {
            write!(w, "{:>10.3}s", (self.0)().as_secs_f64())
        }
    }
    let writer = move || BufferWriter(buffer.clone());
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            std::env::var(filter_var).unwrap_or_else(|_| default_filter.to_owned()),
        ))
        .with_timer(Clock(clock))
        .with_ansi(false)
        .with_target(false)
        .with_writer(writer)
        .finish()
}

struct BufferWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for BufferWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut buffer) = self.0.lock() {
            buffer.extend_from_slice(bytes);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The text of a panic's payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    (payload.downcast_ref::<&str>().map(|m| (*m).to_owned()))
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// From now on a panic prints one line, `PREFIX: panic at FILE:LINE: MESSAGE`, not a
/// backtrace: for a process where panics are expected and reported elsewhere (a simulated
/// seed, whose nodes' panics are part of its verdict). Panics are kept for [`take_panics`]
/// as after [`record_panics`].
pub fn one_line_panics(prefix: String) {
    record_panics();
    *PANIC_PREFIX.lock().unwrap_or_else(|e| e.into_inner()) = Some(prefix);
}

/// From now on each panic is also kept, per thread, for [`take_panics`] (the hook that was
/// in place reports it as before, unless [`one_line_panics`] replaced that by one line). A
/// simulated seed runs on a thread of its own, and a panic in a task that lockd or tarpc
/// spawned (a peer link, a connection) ends only that task, silently, with the node up.
pub fn record_panics() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let location = info
                .location()
                .map(|l| format!(" at {}:{}", l.file(), l.line()))
                .unwrap_or_default();
            let message = panic_message(info.payload());
            let line = format!("panic{location}: {message}");
            let prefix = PANIC_PREFIX.lock().map(|p| p.clone()).unwrap_or_default();
            match prefix {
                Some(prefix) => eprintln!("{prefix}: {line}"),
                None => previous(info),
            }
            PANICS.with(|panics| panics.borrow_mut().push(line));
        }));
    });
}

static PANIC_PREFIX: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

thread_local! {
    static PANICS: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The panics of this thread since the last call, as `panic at FILE:LINE: MESSAGE` (kept
/// once [`record_panics`] or [`one_line_panics`] ran).
pub fn take_panics() -> Vec<String> {
    PANICS.with(|panics| std::mem::take(&mut *panics.borrow_mut()))
}
