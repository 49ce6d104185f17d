//! `locksmith serve`: a browser for the store, like Jepsen's `serve`.
//!
//! - `/` lists the runs, newest first: time, test, system, seed, verdict, ops, faults (from
//!   each run's `results.json`, read back as [`Results`]; a run without one, cut short, or
//!   whose results.json does not read as the struct, older or damaged, is listed as
//!   `incomplete` with the reason and what its directory tells).
//! - `/run/<test>/<timestamp>/` is a run's page: its verdict and failing checks in words,
//!   its plots, and links to results, timeline, plots, history.csv, plan and node logs.
//! - `/files/<path>` serves one file under the store, and nothing outside it: each path
//!   segment is percent-decoded and refused if it is `.`, `..` or holds a separator, and the
//!   canonical path (symlinks resolved) must lie under the canonical store.
//!
//! A small HTTP/1.1 server on tokio (already the harness's runtime) rather than hyper or
//! axum: it answers GET and HEAD for a few read-only pages, one request per connection,
//! and so adds no dependency to a workspace that builds on two shared cores. It binds
//! 127.0.0.1 unless told otherwise.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use checker::Verdict;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use checker::report::plot::PLOT_FILES;

use crate::store::{Results, RunDir};

/// The most runs the list shows (newest first); the page says when there are more.
pub const RUNS_MAX: usize = 2000;
/// The longest request head read, bytes.
const REQUEST_MAX: usize = 16 * 1024;
/// How long a client may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A reply: a page made here, or a file of the store.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// Status, content type, body.
    Page(u16, &'static str, String),
    /// A file under the store.
    File(PathBuf),
}

/// Serves `store` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, store: PathBuf) -> std::io::Result<()> {
    let store = std::sync::Arc::new(store);
    loop {
        let (stream, _) = listener.accept().await?;
        let store = store.clone();
        tokio::spawn(async move {
            let _ = handle(stream, &store).await;
        });
    }
}

/// Binds `addr` and serves `store` forever (for `locksmith serve`).
pub fn run_blocking(store: PathBuf, addr: SocketAddr) -> Result<(), crate::Error> {
    if !store.is_dir() {
        return Err(crate::Error::BadArgument(format!(
            "--store {}: no such directory",
            store.display()
        )));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| crate::Error::Io(e.to_string()))?;
    runtime.block_on(async {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| crate::Error::Io(format!("bind {addr}: {e}")))?;
        eprintln!(
            "locksmith serve: {} on http://{}/ (Ctrl-C stops)",
            store.display(),
            listener.local_addr().map_or(addr, |a| a)
        );
        serve(listener, store)
            .await
            .map_err(|e| crate::Error::Io(e.to_string()))
    })
}

async fn handle(mut stream: TcpStream, store: &Path) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    let read = tokio::time::timeout(REQUEST_TIMEOUT, async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < REQUEST_MAX {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok::<_, std::io::Error>(())
    })
    .await;
    if read.is_err() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&head);
    let mut parts = text.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let reply = if method == "GET" || method == "HEAD" {
        route(store, target)
    } else {
        page(405, "method not allowed: only GET and HEAD")
    };
    let head_only = method == "HEAD";
    match reply {
        Reply::Page(status, content_type, body) => {
            write_head(&mut stream, status, content_type, body.len() as u64).await?;
            if !head_only {
                stream.write_all(body.as_bytes()).await?;
            }
        }
        Reply::File(path) => {
            let mut file = tokio::fs::File::open(&path).await?;
            let len = file.metadata().await?.len();
            write_head(&mut stream, 200, content_type(&path), len).await?;
            if !head_only {
                tokio::io::copy(&mut file, &mut stream).await?;
            }
        }
    }
    stream.shutdown().await
}

async fn write_head(s: &mut TcpStream, status: u16, ctype: &str, len: u64) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        _ => "Method Not Allowed",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len}\r\n\
         X-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await
}

fn page(status: u16, message: &str) -> Reply {
    Reply::Page(
        status,
        "text/html; charset=utf-8",
        format!(
            "<!doctype html><title>{status}</title><p>{}</p><p><a href=\"/\">runs</a></p>\n",
            esc(message)
        ),
    )
}

fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "svg" => "image/svg+xml",
        "json" => "application/json",
        "png" => "image/png",
        "xml" => "application/xml",
        "csv" | "txt" | "log" | "edn" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// The reply to a GET of `target` (path and query as sent).
pub fn route(store: &Path, target: &str) -> Reply {
    let path = target.split(['?', '#']).next().unwrap_or("");
    if path == "/" {
        return index(store);
    }
    if let Some(rest) = path.strip_prefix("/files/") {
        return match resolve(store, rest) {
            Ok(file) if file.is_file() => Reply::File(file),
            Ok(_) => page(404, "no such file"),
            Err(reply) => reply,
        };
    }
    if let Some(rest) = path.strip_prefix("/run/") {
        return match resolve(store, rest.trim_end_matches('/')) {
            Ok(dir) if dir.is_dir() => run_page(store, &dir),
            Ok(_) => page(404, "no such run"),
            Err(reply) => reply,
        };
    }
    page(404, "not found")
}

/// The path under `store` that `encoded` (a URL path, `/`-separated, percent-encoded)
/// names, or the refusal.
pub fn resolve(store: &Path, encoded: &str) -> Result<PathBuf, Reply> {
    let mut path = store.to_path_buf();
    for segment in encoded.split('/') {
        let decoded = percent_decode(segment).ok_or_else(|| page(400, "bad percent-encoding"))?;
        if decoded.is_empty()
            || decoded == "."
            || decoded == ".."
            || decoded.contains(['/', '\\', '\0'])
        {
            return Err(page(403, "refused: the path leaves the store"));
        }
        path.push(decoded);
    }
    let root = std::fs::canonicalize(store).map_err(|_| page(404, "no store"))?;
    let real = std::fs::canonicalize(&path).map_err(|_| page(404, "not found"))?;
    if real.starts_with(&root) {
        Ok(real)
    } else {
        Err(page(403, "refused: the path leaves the store"))
    }
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A relative path as a URL path: each segment percent-encoded.
pub fn url_path(rel: &Path) -> String {
    let segments: Vec<String> = rel
        .components()
        .map(|c| {
            let s = c.as_os_str().to_string_lossy();
            s.bytes()
                .map(|b| match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                        (b as char).to_string()
                    }
                    _ => format!("%{b:02X}"),
                })
                .collect()
        })
        .collect();
    segments.join("/")
}

/// One run of the store, as the list shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSummary {
    /// `<test>/<timestamp>` under the store.
    pub rel: PathBuf,
    /// When it started (from the directory's name), e.g. `2026-12-03 09:53:01Z`.
    pub time: String,
    /// The test's name.
    pub test: String,
    /// `lockd`, `etcd`, or empty when unknown.
    pub system: String,
    /// The seed, or empty.
    pub seed: String,
    /// The run's verdict, or why it has none: no results.json, or one that does not read
    /// as [`Results`] (the run shows as `incomplete`).
    pub verdict: Result<Verdict, String>,
    /// Completed client ops, or empty.
    pub ops: String,
    /// Faults by kind, e.g. `kill 3, pause 2`.
    pub faults: String,
}

impl RunSummary {
    /// `valid`, `invalid`, `unknown`, or `incomplete`: the word the list shows, and its CSS
    /// class.
    pub fn status(&self) -> &'static str {
        match &self.verdict {
            Ok(verdict) => verdict.as_str(),
            Err(_) => "incomplete",
        }
    }
}

/// The runs of `store` (`<test>/<timestamp>/` directories), newest first.
pub fn list_runs(store: &Path) -> Vec<RunSummary> {
    let mut runs = Vec::new();
    for test in read_dirs(store) {
        for run in read_dirs(&test) {
            let is_run = [RunDir::RESULTS, RunDir::HISTORY, RunDir::SEED, RunDir::PLAN]
                .iter()
                .any(|f| run.join(f).is_file());
            if is_run {
                runs.push(summarize(store, &run).0);
            }
        }
    }
    // Timestamps `YYYYMMDDTHHMMSS.mmmZ` sort by time.
    runs.sort_by(|a, b| {
        let name = |r: &RunSummary| r.rel.file_name().map(|n| n.to_os_string());
        name(b).cmp(&name(a))
    });
    runs
}

fn read_dirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect()
}

/// A run's results.json as [`Results`], or why the run has none to show.
fn read_results(run: &RunDir) -> Result<Results, String> {
    if !run.file(RunDir::RESULTS).is_file() {
        return Err(format!(
            "no {} (a run cut short, or still going)",
            RunDir::RESULTS
        ));
    }
    run.read_results().map_err(|e| e.to_string())
}

/// The list's row of the run in `dir`, and its results when they read.
fn summarize(store: &Path, dir: &Path) -> (RunSummary, Option<Results>) {
    let run = RunDir::at(dir);
    let rel = dir.strip_prefix(store).unwrap_or(dir).to_path_buf();
    let stamp = dir
        .file_name()
        .map_or(String::new(), |n| n.to_string_lossy().into_owned());
    let time = pretty_time(&stamp);
    match read_results(&run) {
        Ok(results) => {
            let faults: Vec<String> = results
                .faults
                .by_kind
                .iter()
                .map(|(kind, count)| format!("{kind} {count}"))
                .collect();
            let summary = RunSummary {
                rel,
                time,
                test: results.test.clone(),
                system: results.system.clone(),
                seed: results.seed.to_string(),
                verdict: Ok(results.verdict.clone()),
                ops: results.ops.completed.to_string(),
                faults: faults.join(", "),
            };
            (summary, Some(results))
        }
        Err(reason) => {
            // What the directory tells: its test (the parent folder) and seed.txt.
            let summary = RunSummary {
                rel,
                time,
                test: run.test_name(),
                system: String::new(),
                seed: run.seed().map_or(String::new(), |s| s.to_string()),
                verdict: Err(reason),
                ops: String::new(),
                faults: String::new(),
            };
            (summary, None)
        }
    }
}

/// `20261203T095301.123Z` as `2026-12-03 09:53:01Z`; anything else as it is.
fn pretty_time(stamp: &str) -> String {
    let b = stamp.as_bytes();
    if b.len() >= 15 && b[8] == b'T' && stamp.is_char_boundary(15) {
        format!(
            "{}-{}-{} {}:{}:{}Z",
            &stamp[0..4],
            &stamp[4..6],
            &stamp[6..8],
            &stamp[9..11],
            &stamp[11..13],
            &stamp[13..15]
        )
    } else {
        stamp.to_string()
    }
}

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em;color:#24292f}\
table{border-collapse:collapse}td,th{padding:4px 10px;border-bottom:1px solid #d0d7de;text-align:left}\
th{background:#f6f8fa}.valid{color:#1a7f37;font-weight:bold}.invalid{color:#cf222e;font-weight:bold}\
.unknown{color:#9a6700;font-weight:bold}.incomplete{color:#6e7781}\
pre{background:#f6f8fa;padding:8px;white-space:pre-wrap}img{border:1px solid #d0d7de;margin:6px 0}\
img.plot{width:100%}.messages{overflow-x:auto}";

fn html(title: &str, body: &str) -> Reply {
    Reply::Page(
        200,
        "text/html; charset=utf-8",
        format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body>\n{body}</body></html>\n",
            esc(title)
        ),
    )
}

fn index(store: &Path) -> Reply {
    let runs = list_runs(store);
    let mut body = format!(
        "<h1>locksmith runs</h1><p>store <code>{}</code>: {} runs, newest first</p>\n\
         <table id=\"runs\"><tr><th>time</th><th>test</th><th>system</th><th>seed</th><th>verdict</th><th>ops</th><th>faults</th></tr>\n",
        esc(&store.display().to_string()),
        runs.len()
    );
    for run in runs.iter().take(RUNS_MAX) {
        let _ = writeln!(
            body,
            "<tr class=\"run\"><td><a href=\"/run/{href}/\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td class=\"{v}\"{why}>{v}</td><td>{}</td><td>{}</td></tr>",
            esc(&run.time),
            esc(&run.test),
            esc(&run.system),
            esc(&run.seed),
            esc(&run.ops),
            esc(&run.faults),
            href = url_path(&run.rel),
            v = run.status(),
            why = match &run.verdict {
                Err(reason) => format!(" title=\"{}\"", esc(reason)),
                Ok(_) => String::new(),
            },
        );
    }
    body.push_str("</table>\n");
    if runs.len() > RUNS_MAX {
        let _ = writeln!(
            body,
            "<p>showing the newest {RUNS_MAX} of {} runs</p>",
            runs.len()
        );
    }
    html("locksmith runs", &body)
}

fn run_page(store: &Path, dir: &Path) -> Reply {
    let root = std::fs::canonicalize(store).unwrap_or_else(|_| store.to_path_buf());
    let (run, results) = summarize(&root, dir);
    let files = |name: &str| format!("/files/{}", url_path(&run.rel.join(name)));
    let mut body = format!(
        "<p><a href=\"/\">runs</a></p><h1>{} <span class=\"{v}\">{v}</span></h1>\n\
         <p>{}, system {}, seed {}, ops {}, faults {}</p>\n<ul id=\"links\">\n",
        esc(&run.test),
        esc(&run.time),
        esc(&run.system),
        esc(&run.seed),
        esc(&run.ops),
        esc(if run.faults.is_empty() {
            "none"
        } else {
            &run.faults
        }),
        v = run.status(),
    );
    if let Err(reason) = &run.verdict {
        let _ = writeln!(body, "<p class=\"incomplete\">{}</p>", esc(reason));
    }
    let mut names: Vec<String> = [RunDir::RESULTS, RunDir::TIMELINE, RunDir::MESSAGES]
        .into_iter()
        .chain(PLOT_FILES)
        .chain([RunDir::HISTORY, RunDir::PLAN, RunDir::SEED, "junit.xml"])
        .map(str::to_string)
        .collect();
    let mut logs: Vec<String> = std::fs::read_dir(dir.join(RunDir::NODE_LOGS))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| format!("{}/{}", RunDir::NODE_LOGS, e.file_name().to_string_lossy()))
                .collect()
        })
        .unwrap_or_default();
    logs.sort();
    names.extend(logs);
    for name in names.iter().filter(|n| dir.join(n).is_file()) {
        let _ = writeln!(
            body,
            "<li><a href=\"{}\">{}</a></li>",
            files(name),
            esc(name)
        );
    }
    body.push_str("</ul>\n");
    let failing = results
        .iter()
        .filter_map(|r| r.checks.as_ref())
        .flat_map(|c| c.results.iter())
        .filter(|r| !r.verdict.is_valid());
    for check in failing {
        let why = match (&check.explanation, &check.verdict) {
            (Some(explanation), _) => explanation.as_str(),
            (None, Verdict::Unknown { reason }) => reason.as_str(),
            (None, _) => "",
        };
        let _ = writeln!(
            body,
            "<h3>{}: <span class=\"{v}\">{v}</span></h3><pre>{}</pre>",
            esc(check.name.as_str()),
            esc(why),
            v = check.verdict.as_str(),
        );
    }
    // The message-flow diagram at its own size (it scrolls: shrunk to the page, a 5-node,
    // 10-client diagram would be unreadable); the plots at the page's width.
    if dir.join(RunDir::MESSAGES).is_file() {
        let _ = writeln!(
            body,
            "<h3>messages around the failure</h3><div class=\"messages\"><img id=\"messages\" src=\"{}\" alt=\"{}\"></div>",
            files(RunDir::MESSAGES),
            RunDir::MESSAGES
        );
    }
    for plot in PLOT_FILES.iter().filter(|p| dir.join(p).is_file()) {
        let _ = writeln!(
            body,
            "<div><img class=\"plot\" src=\"{}\" alt=\"{plot}\"></div>",
            files(plot)
        );
    }
    html(&format!("{} {}", run.test, run.time), &body)
}

fn esc(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_that_leave_the_store_are_refused() {
        let store = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(store.path().join("t/1")).unwrap();
        std::fs::write(store.path().join("t/1/seed.txt"), "7\n").unwrap();
        assert!(
            matches!(resolve(store.path(), "t/1/seed.txt"), Ok(p) if p.ends_with("t/1/seed.txt"))
        );
        for bad in [
            "..",
            "t/../..",
            "%2e%2e",
            "t/%2E%2E/%2e%2e/etc",
            "t%2f..%2f..",
            "..%5c..",
            "t//1",
            "%zz",
        ] {
            let reply = resolve(store.path(), bad).expect_err(bad);
            assert!(
                matches!(reply, Reply::Page(403 | 400, ..)),
                "{bad}: {reply:?}"
            );
        }
        assert_eq!(pretty_time("20261203T095301.123Z"), "2026-12-03 09:53:01Z");
        assert_eq!(url_path(Path::new("a b/c%")), "a%20b/c%25");
    }

    #[test]
    fn a_results_json_that_does_not_read_lists_as_incomplete_with_the_reason() {
        // Issue 23: serve reads results.json as `Results`; an older schema is no verdict.
        let store = tempfile::tempdir().unwrap();
        let dir = store.path().join("lockd-kill/20261203T090000.000Z");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(RunDir::SEED), "9\n").unwrap();
        std::fs::write(
            dir.join(RunDir::RESULTS),
            r#"{"seed": 9, "verdict": "valid"}"#,
        )
        .unwrap();

        let runs = list_runs(store.path());

        assert_eq!(runs.len(), 1);
        let run = &runs[0];
        assert_eq!(run.status(), "incomplete");
        assert_eq!((run.test.as_str(), run.seed.as_str()), ("lockd-kill", "9"));
        let reason = run.verdict.as_ref().unwrap_err();
        assert!(
            reason.contains("results.json") && reason.contains("missing field"),
            "{reason}"
        );
        let Reply::Page(200, _, page) = route(store.path(), "/") else {
            panic!("no list");
        };
        assert!(
            page.contains("class=\"incomplete\" title=") && page.contains("missing field"),
            "{page}"
        );
        let Reply::Page(200, _, page) =
            route(store.path(), "/run/lockd-kill/20261203T090000.000Z/")
        else {
            panic!("no run page");
        };
        assert!(page.contains("<p class=\"incomplete\">"), "{page}");
    }
}
