//! Issue 12 in a real browser: a page on another origin (a loopback page
//! server on another port) loaded in headless Chromium tries what a
//! malicious page would — a `no-cors` `text/plain` POST, a normal CORS
//! fetch, a form POST — against a real `rein serve`, and starts nothing.
//! The controls prove the test can fail: the browser's requests do reach
//! the server (a `no-cors` GET of `/healthz` is in its access log), and an
//! origin listed in `[server.cors]` does start a run.
//!
//! Chromium is the Debian package `chromium` (`.ci/run` installs it),
//! found on `PATH`. Without it the test says so and passes, except under
//! CI (`common::missing_part`), where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use rein_store_sqlite::SqliteStore;
use rein_testkit::order_desk::OrderDesk;
use serde_json::Value;

mod common;
use common::{Server, example_config_with};
use rein_store::RunStore;

/// How long the page may take to report (generous: two loaded cores).
const REPORT_TIMEOUT: Duration = Duration::from_secs(90);

/// The names Chromium's binary goes by (Debian's `chromium`, Ubuntu's
/// and older `chromium-browser`).
const CHROMIUM_NAMES: [&str; 2] = ["chromium", "chromium-browser"];

/// The Chromium binary on `PATH` (or in `/usr/bin`), or `None` after
/// [`common::missing_part`] said why.
///
/// # Panics
///
/// Under CI when Chromium is missing (see [`common::missing_part`]).
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .flat_map(|dir| CHROMIUM_NAMES.map(|name| dir.join(name)))
        .find(|p| p.is_file());
    if found.is_none() {
        common::missing_part(
            "no chromium or chromium-browser on PATH: install it with `apt-get install -y chromium` (.ci/run does)",
        );
    }
    found
}

/// The page: it tries each request against `target`, then reports what it
/// saw to its own origin (`POST /report`).
fn page(target: &str) -> String {
    format!(
        r#"<!doctype html>
<html><body><iframe name="sink"></iframe><script>
const target = "{target}";
const task = JSON.stringify({{input: "Move order A-1001."}});
async function attempt(name, run) {{
  try {{ results[name] = await run(); }} catch (e) {{ results[name] = "blocked: " + e.name; }}
}}
const results = {{}};
(async () => {{
  await attempt("no_cors_post", async () => {{
    const r = await fetch(target + "/v1/agents/order_desk/runs", {{
      mode: "no-cors", method: "POST", body: task, headers: {{"content-type": "text/plain"}}}});
    return "sent (opaque: " + r.type + ")";
  }});
  await attempt("cors_post", async () => {{
    const r = await fetch(target + "/v1/agents/order_desk/runs", {{
      method: "POST", body: task, headers: {{"content-type": "application/json"}}}});
    return "status " + r.status;
  }});
  await attempt("form_post", () => new Promise((resolve) => {{
    const sink = document.querySelector("iframe");
    sink.onload = () => resolve("submitted");
    const form = document.createElement("form");
    form.method = "POST"; form.enctype = "text/plain"; form.target = "sink";
    form.action = target + "/v1/agents/order_desk/runs";
    const input = document.createElement("input");
    input.name = '{{"input": "Move order A-1001.", "x": "'; input.value = '"}}';
    form.appendChild(input); document.body.appendChild(form); form.submit();
  }}));
  await attempt("no_cors_healthz", async () => {{
    const r = await fetch(target + "/healthz", {{mode: "no-cors", headers: {{}}}});
    return "sent (opaque: " + r.type + ")";
  }});
  await fetch("/report", {{method: "POST", body: JSON.stringify(results)}});
}})();
</script></body></html>"#
    )
}

/// A loopback page server: serves [`page`] at `/`, and sends each
/// `POST /report` body to the channel.
struct PageServer {
    origin: String,
    reports: mpsc::Receiver<String>,
}

impl PageServer {
    fn start(listener: TcpListener, page: String) -> PageServer {
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let (tx, reports) = mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).is_err() {
                    continue;
                }
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some((name, value)) = line.split_once(':')
                        && name.eq_ignore_ascii_case("content-length")
                    {
                        length = value.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                let (status, content) = if request_line.starts_with("GET / ") {
                    ("200 OK", page.clone())
                } else if request_line.starts_with("POST /report ") {
                    let _ = tx.send(String::from_utf8_lossy(&body).into_owned());
                    ("200 OK", String::new())
                } else {
                    ("404 Not Found", String::new())
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{content}",
                    content.len()
                );
            }
        });
        PageServer { origin, reports }
    }
}

/// Headless Chromium on `url`, with a fresh profile; killed when dropped.
struct Browser {
    child: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn open(chromium: &PathBuf, url: &str) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let child = Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Browser {
            child,
            _profile: profile,
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Loads the page (served from another loopback port) against a
/// `rein serve` whose config has `extra(page origin)` appended; the page's
/// report, the desk, the server and its directory.
async fn visit(
    chromium: &PathBuf,
    extra: impl FnOnce(&str) -> String,
) -> (Value, OrderDesk, Server, tempfile::TempDir) {
    let desk = OrderDesk::start().await.unwrap();
    let pages = TcpListener::bind("127.0.0.1:0").unwrap();
    let page_origin = format!("http://{}", pages.local_addr().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let config = example_config_with(dir.path(), "", &extra(&page_origin));
    let server = Server::start(&config, &dir.path().join("rein.db"), desk.base_url());
    let pages = PageServer::start(pages, page(&server.url("")));
    assert_eq!(pages.origin, page_origin);
    let _browser = Browser::open(chromium, &format!("{page_origin}/"));
    let report = tokio::task::block_in_place(|| pages.reports.recv_timeout(REPORT_TIMEOUT))
        .unwrap_or_else(|e| {
            panic!(
                "the page did not report ({e}); server log:\n{}",
                server.log_tail()
            )
        });
    (serde_json::from_str(&report).unwrap(), desk, server, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_12_a_page_on_another_origin_starts_nothing() {
    let Some(chromium) = chromium() else { return };
    let (report, desk, server, dir) = visit(&chromium, |_| String::new()).await;
    // The control: the browser's requests reach this server (a no-cors
    // GET carries no Origin and reads nothing).
    let control =
        server.wait_for_line(|l| l.contains("route=/healthz") && l.contains("status=200"));
    assert!(control.contains("request_id="), "{control}");
    assert!(
        report["no_cors_healthz"]
            .as_str()
            .unwrap()
            .starts_with("sent"),
        "{report}"
    );
    // The attacks were refused before any handler ran...
    assert!(
        report["cors_post"].as_str().unwrap().starts_with("blocked"),
        "{report}"
    );
    let refusals = server
        .log_lines()
        .iter()
        .filter(|l| l.contains("origin not allowed") || l.contains("OriginNotAllowed"))
        .count();
    assert!(
        refusals >= 3,
        "no-cors POST, preflight, form POST:\n{}",
        server.log_tail()
    );
    // ... and started nothing.
    assert_eq!(desk.requests().len(), 0, "the desk saw a call: {report}");
    let store = SqliteStore::open(dir.path().join("rein.db")).unwrap();
    assert!(
        store.list_runs(10).await.unwrap().is_empty(),
        "a run was recorded: {report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_an_origin_listed_in_server_cors_does_start_a_run() {
    let Some(chromium) = chromium() else { return };
    let (report, desk, server, dir) = visit(&chromium, |origin| {
        format!("[server.cors]\nallowed_origins = [\"{origin}\"]\n")
    })
    .await;
    // The CORS fetch (preflighted, JSON) is admitted and reads its answer.
    assert_eq!(
        report["cors_post"],
        "status 200",
        "{report}\n{}",
        server.log_tail()
    );
    assert!(!desk.requests().is_empty(), "the run reached the desk");
    let store = SqliteStore::open(dir.path().join("rein.db")).unwrap();
    // Only that one: the no-cors and form POSTs are text/plain (415).
    assert_eq!(store.list_runs(10).await.unwrap().len(), 1, "{report}");
    server.wait_for_line(|l| l.contains("status=415"));
}
