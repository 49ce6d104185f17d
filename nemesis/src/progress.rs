//! Progress of long commands (test, sim, model check, check on big inputs, bench), fitted to
//! where it runs: a bar (indicatif) when stderr is a terminal, and one plain line per
//! interval when it is not (CI logs, pipes), so a log has neither carriage returns nor a
//! line per tick.
//!
//! ```
//! use std::time::Duration;
//! use nemesis::progress::Progress;
//! // `locksmith sim` style: a known total, many threads.
//! let progress = Progress::lines("sim", Some(3), Duration::ZERO, Vec::new());
//! for seed in 0..3 {
//!     progress.inc(1, &format!("seed {seed} valid"));
//! }
//! progress.finish("3 seeds, 0 failed");
//! ```

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The interval between two lines when stderr is not a terminal.
pub const LINE_INTERVAL: Duration = Duration::from_secs(5);

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A bar redrawn in place (stderr is a terminal).
    Bar,
    /// A line per interval.
    Lines(Duration),
    /// Nothing.
    Hidden,
}

impl Mode {
    /// A bar when stderr is a terminal, lines every [`LINE_INTERVAL`] otherwise.
    pub fn for_stderr() -> Mode {
        if std::io::stderr().is_terminal() {
            Mode::Bar
        } else {
            Mode::Lines(LINE_INTERVAL)
        }
    }
}

enum Show {
    Bar(ProgressBar),
    Lines {
        interval: Duration,
        // The last line's time; `None` before the first.
        last: Mutex<(Option<Instant>, Box<dyn Write + Send>)>,
    },
    Hidden,
}

/// A progress display; cheap to share between threads (`&Progress` is enough to update).
pub struct Progress {
    label: String,
    total: Option<u64>,
    position: AtomicU64,
    start: Instant,
    show: Show,
}

impl Progress {
    /// Progress of `label` toward `total` (units of work; `None` when unknown), shown as
    /// [`Mode::for_stderr`] says.
    pub fn new(label: &str, total: Option<u64>) -> Progress {
        Progress::with_mode(label, total, Mode::for_stderr())
    }

    /// Progress shown in this mode, on stderr.
    pub fn with_mode(label: &str, total: Option<u64>, mode: Mode) -> Progress {
        let show = match mode {
            Mode::Bar => {
                let bar = match total {
                    Some(n) => ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::stderr()),
                    None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
                };
                let template = if total.is_some() {
                    "{prefix} [{elapsed_precise}] [{wide_bar}] {pos}/{len} (eta {eta}) {msg}"
                } else {
                    "{prefix} [{elapsed_precise}] {spinner} {msg}"
                };
                if let Ok(style) = ProgressStyle::with_template(template) {
                    bar.set_style(style.progress_chars("=> "));
                }
                bar.set_prefix(label.to_string());
                bar.enable_steady_tick(Duration::from_millis(200));
                Show::Bar(bar)
            }
            Mode::Lines(interval) => Show::Lines {
                interval,
                last: Mutex::new((None, Box::new(std::io::stderr()))),
            },
            Mode::Hidden => Show::Hidden,
        };
        Progress {
            label: label.to_string(),
            total,
            position: AtomicU64::new(0),
            start: Instant::now(),
            show,
        }
    }

    /// Lines every `interval` into `out` (for tests, and for callers with their own log).
    pub fn lines(
        label: &str,
        total: Option<u64>,
        interval: Duration,
        out: impl Write + Send + 'static,
    ) -> Progress {
        let mut progress = Progress::with_mode(label, total, Mode::Hidden);
        progress.show = Show::Lines {
            interval,
            last: Mutex::new((None, Box::new(out))),
        };
        progress
    }

    /// Sets the position and the message (what is happening now).
    pub fn set(&self, position: u64, message: &str) {
        self.position.store(position, Ordering::Relaxed);
        self.show(message, false);
    }

    /// Advances the position by `n`.
    pub fn inc(&self, n: u64, message: &str) {
        self.position.fetch_add(n, Ordering::Relaxed);
        self.show(message, false);
    }

    /// The last word: clears the bar, or prints a final line.
    pub fn finish(&self, message: &str) {
        self.show(message, true);
        if let Show::Bar(bar) = &self.show {
            bar.finish_and_clear();
            eprintln!("{}", self.line(message));
        }
    }

    /// The text of a line: `[  12s] sim: 340/1000 (34%) seed 340 valid`.
    fn line(&self, message: &str) -> String {
        let position = self.position.load(Ordering::Relaxed);
        let done = match self.total {
            Some(total) if total > 0 => {
                format!(
                    "{position}/{total} ({}%)",
                    position.min(total) * 100 / total
                )
            }
            // Without a total the message says what was done.
            _ => String::new(),
        };
        let text = [done.as_str(), message]
            .iter()
            .filter(|t| !t.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(" ");
        format!(
            "[{:>5.0}s] {}: {text}",
            self.start.elapsed().as_secs_f64(),
            self.label
        )
    }

    fn show(&self, message: &str, last_word: bool) {
        match &self.show {
            Show::Bar(bar) => {
                bar.set_position(self.position.load(Ordering::Relaxed));
                bar.set_message(message.to_string());
            }
            Show::Lines { interval, last } => {
                let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
                let due = last.0.is_none_or(|t| t.elapsed() >= *interval);
                if due || last_word {
                    let line = self.line(message);
                    let _ = writeln!(last.1, "{line}");
                    last.0 = Some(Instant::now());
                }
            }
            Show::Hidden => {}
        }
    }
}

/// Progress of one long step that reports nothing itself (a check of a big history, a bench
/// measurement): shows the elapsed time until dropped, from a thread of its own.
pub struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    /// Starts showing `label: message` with the elapsed time.
    pub fn start(label: &str, message: &str) -> Ticker {
        Ticker::start_with(Progress::new(label, None), message)
    }

    /// Starts showing `label: message` as seconds out of `total_s` (a timed measurement).
    pub fn timed(label: &str, message: &str, total_s: u64) -> Ticker {
        Ticker::start_with(Progress::new(label, Some(total_s)), message)
    }

    /// Starts ticking `progress` with `message` until dropped; with a total, the position
    /// is the seconds elapsed.
    pub fn start_with(progress: Progress, message: &str) -> Ticker {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let message = message.to_string();
        let thread = std::thread::Builder::new()
            .name("progress".into())
            .spawn(move || {
                let start = Instant::now();
                let timed = progress.total.is_some();
                while !flag.load(Ordering::Relaxed) {
                    let seconds = if timed { start.elapsed().as_secs() } else { 0 };
                    progress.set(seconds, &message);
                    std::thread::sleep(Duration::from_millis(100));
                }
                if let Show::Bar(bar) = &progress.show {
                    bar.finish_and_clear();
                }
            })
            .ok();
        Ticker { stop, thread }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_come_once_per_interval_and_the_last_word_always() {
        let sink = Sink::default();
        let progress = Progress::lines("sim", Some(200), Duration::from_secs(3600), sink.clone());
        for _ in 0..200 {
            progress.inc(1, "running");
        }
        progress.finish("200 seeds, 1 failed");
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "the first update and the last word: {text}");
        assert!(lines[0].ends_with("sim: 1/200 (0%) running"), "{text}");
        assert!(
            lines[1].ends_with("sim: 200/200 (100%) 200 seeds, 1 failed"),
            "{text}"
        );
        assert!(!text.contains('\r'), "no carriage returns in a log");
    }

    #[test]
    fn every_update_is_a_line_when_the_interval_is_zero() {
        let sink = Sink::default();
        let progress = Progress::lines("check", None, Duration::ZERO, sink.clone());
        // Without a total, the message says what was done.
        progress.set(5, "5 MB read");
        progress.set(9, "9 MB read");
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        assert!(
            text.contains("check: 5 MB read\n") && text.contains("check: 9 MB read\n"),
            "{text}"
        );
    }
}
