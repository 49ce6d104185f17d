//! Headless Chromium for the report tests: the DOM of a page after its scripts ran, and
//! screenshots. Shared by `checker/tests/plots.rs` and `nemesis/tests/serve.rs` (by path).
//!
//! Chromium runs with a fresh profile, no network services of its own, and is killed when
//! the call returns (a guard), bounded at 90 s.

#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The Chromium binary, if installed. Under CI (`CI` set) a missing browser is a failure:
/// ci/install.sh installs it, and a test that silently skips its browser half proves nothing.
pub fn chromium() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser"].into_iter().find(|name| {
        Command::new(name)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "chromium is not installed (ci/install.sh installs it)"
        );
        println!(
            "skipping the browser half: chromium is not installed (ci/install.sh installs it)"
        );
    }
    found
}

/// Where the tests put their screenshots: `$LOCKSMITH_SCREENSHOTS`, or `target/screenshots`
/// of the workspace.
pub fn screenshot_dir() -> PathBuf {
    let dir = std::env::var_os("LOCKSMITH_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("target")
                .join("screenshots")
        });
    std::fs::create_dir_all(&dir).expect("create the screenshot dir");
    std::fs::canonicalize(&dir).unwrap_or(dir)
}

fn run(browser: &str, args: &[String], url: &str) -> String {
    let profile = tempfile::tempdir().expect("a fresh profile dir");
    let child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let mut guard = KillOnDrop(child);
    let mut out = String::new();
    if let Some(mut stdout) = guard.0.stdout.take() {
        // Read on a thread so a page that never finishes cannot block the test forever.
        let reader = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stdout.read_to_string(&mut text);
            text
        });
        let start = Instant::now();
        while guard.0.try_wait().expect("poll chromium").is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "chromium did not finish within 90 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        out = reader.join().unwrap_or_default();
    }
    out
}

/// The DOM of `url` after its scripts ran.
pub fn dump_dom(browser: &str, url: &str) -> String {
    run(browser, &["--dump-dom".to_string()], url)
}

/// A PNG screenshot of `url`, `width` x `height`, into `path`; panics if none was written.
pub fn screenshot(browser: &str, url: &str, path: &Path, width: u32, height: u32) {
    let _ = std::fs::remove_file(path);
    run(
        browser,
        &[
            format!("--screenshot={}", path.display()),
            format!("--window-size={width},{height}"),
        ],
        url,
    );
    let png = std::fs::read(path).unwrap_or_default();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 1000,
        "no screenshot at {}",
        path.display()
    );
    println!("screenshot: {}", path.display());
}

/// What Chromium lays out of a message-flow diagram (`messages.svg`, issue 28), loaded
/// inline in a page next to it: `lanes`, the `data-lane` of every lane drawn with a
/// non-empty box; `failing`, how many `.failing` elements have one; `failing_op`, whether
/// the failing op's arrow (`#failing-op`) is there; `focus`, the diagram's focus line.
pub fn messages_layout(browser: &str, svg: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(svg).expect("messages.svg reads");
    let page = svg.with_extension("check.html");
    let html = format!(
        r#"<!doctype html><html><body><div id="d">{text}</div><pre id="report"></pre><script>
const laid = (el) => {{ const r = el.getBoundingClientRect(); return r.width > 0 || r.height > 0; }};
const svg = document.querySelector('#d > svg');
const report = {{
  lanes: [...svg.querySelectorAll('g.lane')].filter(laid).map((g) => g.getAttribute('data-lane')),
  failing: [...svg.querySelectorAll('.failing')].filter(laid).length,
  failing_op: svg.querySelector('#failing-op') !== null,
  focus: (svg.querySelector('.focus') || {{ textContent: '' }}).textContent,
}};
document.getElementById('report').textContent = JSON.stringify(report);
</script></body></html>"#
    );
    std::fs::write(&page, html).expect("write the check page");
    let dom = dump_dom(browser, &format!("file://{}", page.display()));
    let _ = std::fs::remove_file(&page);
    let json = dom
        .split("<pre id=\"report\">")
        .nth(1)
        .and_then(|rest| rest.split("</pre>").next())
        .unwrap_or_else(|| panic!("no report in the DOM: {dom}"));
    let json = json
        .replace("&quot;", "\"")
        .replace("&gt;", ">")
        .replace("&lt;", "<")
        .replace("&amp;", "&");
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"))
}
