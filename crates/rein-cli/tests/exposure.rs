//! Issue 12 against a real `rein serve`: what a web page in the operator's
//! browser (or a DNS-rebinding attacker) can make it do — nothing — in open
//! mode and with keys; what allowed hosts, `/metrics`, the access log and
//! the store's file modes look like from outside.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;

use rein_store_sqlite::SqliteStore;
use rein_testkit::order_desk::OrderDesk;
use reqwest::header::{CONTENT_TYPE, HOST, ORIGIN};
use serde_json::Value;

mod common;
use common::{Server, example_config, example_config_with, serve_command};
use rein_store::RunStore;

/// A bearer key of tenant `acme`.
const KEY: &str = "exposure-key";
/// A bearer key of tenant `ops`, the operator's scraper.
const OPS_KEY: &str = "exposure-ops-key";

fn sha256(key: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn keys_config() -> String {
    format!(
        "[[server.api_keys]]\ntenant = \"acme\"\nsha256 = \"{}\"\n[[server.api_keys]]\ntenant = \"ops\"\nsha256 = \"{}\"\n",
        sha256(KEY),
        sha256(OPS_KEY)
    )
}

const RUNS: &str = "/v1/agents/order_desk/runs";
const TASK: &str = r#"{"input": "Move order A-1001."}"#;

struct World {
    desk: OrderDesk,
    server: Server,
    db: std::path::PathBuf,
    http: reqwest::Client,
    key: Option<&'static str>,
    _dir: tempfile::TempDir,
}

/// The example config with `server` lines in its `[server]` table, and
/// a key when `keys`.
async fn world(server: &str, keys: bool) -> World {
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let extra = if keys { keys_config() } else { String::new() };
    let config = example_config_with(dir.path(), server, &extra);
    let db = dir.path().join("rein.db");
    let server = Server::start(&config, &db, desk.base_url());
    World {
        desk,
        server,
        db,
        http: reqwest::Client::new(),
        key: keys.then_some(KEY),
        _dir: dir,
    }
}

impl World {
    fn post(&self, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.post(self.server.url(path));
        match self.key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// Nothing ran: the desk saw no request, the store holds no run.
    async fn nothing_ran(&self) {
        assert_eq!(self.desk.requests().len(), 0, "the desk saw a call");
        let store = SqliteStore::open(&self.db).unwrap();
        assert!(
            store.list_runs(10).await.unwrap().is_empty(),
            "a run was recorded"
        );
    }
}

async fn problem(response: reqwest::Response, status: u16, kind: &str) -> Value {
    assert_eq!(response.status().as_u16(), status);
    assert_eq!(response.headers()[CONTENT_TYPE], "application/problem+json");
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["type"],
        format!("https://rein.dev/problems/{kind}"),
        "{body}"
    );
    body
}

/// The requests a web page (or a rebinding one) can send start nothing.
async fn browser_shaped_requests_start_nothing(w: &World) {
    // The reproduction of issue 12: no-cors fetch, text/plain, a foreign
    // page and a rebound name.
    let r = w
        .post(RUNS)
        .header(CONTENT_TYPE, "text/plain")
        .header(ORIGIN, "http://evil.example")
        .header(HOST, "evil.example")
        .body(TASK)
        .send()
        .await
        .unwrap();
    problem(r, 421, "host-not-allowed").await;
    // The same from a page on another origin, sent to the right name.
    let r = w
        .post(RUNS)
        .header(CONTENT_TYPE, "text/plain")
        .header(ORIGIN, "http://evil.example")
        .body(TASK)
        .send()
        .await
        .unwrap();
    problem(r, 403, "origin-not-allowed").await;
    // JSON does not help a foreign page, nor another loopback port.
    for origin in ["http://evil.example", "http://127.0.0.1:1", "null"] {
        let r = w
            .post(RUNS)
            .header(CONTENT_TYPE, "application/json")
            .header(ORIGIN, origin)
            .body(TASK)
            .send()
            .await
            .unwrap();
        problem(r, 403, "origin-not-allowed").await;
    }
    // DNS rebinding: the page's own name, then a JSON body.
    let r = w
        .post(RUNS)
        .header(CONTENT_TYPE, "application/json")
        .header(HOST, "evil.example:8787")
        .body(TASK)
        .send()
        .await
        .unwrap();
    problem(r, 421, "host-not-allowed").await;
    // A form post without an Origin (old browsers): not JSON.
    let r = w
        .post(RUNS)
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body("input=Move+order+A-1001.")
        .send()
        .await
        .unwrap();
    let p = problem(r, 415, "unsupported-media-type").await;
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains("application/x-www-form-urlencoded"),
        "{p}"
    );
    // The gateway, which spends the operator's provider key.
    let r = w
        .post("/v1/chat/completions")
        .header(CONTENT_TYPE, "text/plain")
        .header(ORIGIN, "http://evil.example")
        .body(r#"{"model": "m", "messages": [{"role": "user", "content": "hi"}]}"#)
        .send()
        .await
        .unwrap();
    let p = problem(r, 403, "origin-not-allowed").await;
    assert_eq!(
        p["error"]["type"], "permission_error",
        "OpenAI's member: {p}"
    );
    // Absolute-form target naming a foreign host, and HTTP/1.0 without a
    // Host at all.
    let addr = w.server.addr.clone();
    let raw = |request: String| {
        let mut tcp = std::net::TcpStream::connect(&addr).unwrap();
        tcp.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        tcp.read_to_string(&mut answer).unwrap();
        answer
    };
    let auth = w
        .key
        .map(|k| format!("Authorization: Bearer {k}\r\n"))
        .unwrap_or_default();
    let absolute = raw(format!(
        "POST http://evil.example{RUNS} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{TASK}",
        TASK.len()
    ));
    assert!(absolute.starts_with("HTTP/1.1 421"), "{absolute}");
    let no_host = raw(format!(
        "POST {RUNS} HTTP/1.0\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{TASK}",
        TASK.len()
    ));
    assert!(no_host.starts_with("HTTP/1.0 400"), "{no_host}");
    assert!(no_host.contains("host-missing"), "{no_host}");
    w.nothing_ran().await;
    // Each refusal was logged.
    let line = w
        .server
        .wait_for_line(|l| l.contains("host or origin not allowed"));
    assert!(line.contains("evil.example"), "{line}");
}

/// A legitimate client on a loopback name is served.
async fn loopback_clients_are_served(w: &World) {
    for host in [
        format!("localhost:{}", port(&w.server)),
        "localhost.".to_owned(),
    ] {
        let r = w
            .post(RUNS)
            .header(CONTENT_TYPE, "application/json; charset=utf-8")
            .header(HOST, host.as_str())
            .body(TASK)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "Host {host}");
    }
    // The page the server itself would serve: its own origin.
    let r = w
        .post(RUNS)
        .header(CONTENT_TYPE, "application/json")
        .header(ORIGIN, format!("http://{}", w.server.addr))
        .body(TASK)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(!w.desk.requests().is_empty(), "the runs reached the desk");
}

fn port(server: &Server) -> u16 {
    server.addr.rsplit(':').next().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_12_a_web_page_starts_nothing_in_open_mode() {
    let w = world("", false).await;
    browser_shaped_requests_start_nothing(&w).await;
    loopback_clients_are_served(&w).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_12_a_web_page_starts_nothing_with_keys_either() {
    let w = world("", true).await;
    browser_shaped_requests_start_nothing(&w).await;
    loopback_clients_are_served(&w).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_hosts_are_served_and_others_are_421() {
    let w = world(
        "allowed_hosts = [\"rein.test\", \"*.rein.internal:8443\"]",
        true,
    )
    .await;
    for (host, status) in [
        ("rein.test", 200),
        ("REIN.test.:8787", 200),
        ("a.rein.internal:8443", 200),
        ("a.rein.internal:8444", 421),
        ("rein.internal:8443", 421),
        ("other.test", 421),
    ] {
        let r = w
            .post(RUNS)
            .header(CONTENT_TYPE, "application/json")
            .header(HOST, host)
            .body(TASK)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "Host {host}");
    }
    let store = SqliteStore::open(&w.db).unwrap();
    assert_eq!(
        store.list_runs(10).await.unwrap().len(),
        3,
        "one run per allowed host"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_json_posts_are_415_naming_what_was_sent() {
    let w = world("", false).await;
    for (ct, says) in [
        (Some("application/xml"), "`application/xml`"),
        (
            Some("text/plain;charset=utf-8"),
            "`text/plain;charset=utf-8`",
        ),
        (None, "no Content-Type"),
        // Another JSON-based type is not the one the API reads.
        (
            Some("application/merge-patch+json"),
            "`application/merge-patch+json`",
        ),
        (
            Some("application/problem+json"),
            "`application/problem+json`",
        ),
    ] {
        let mut r = w.post(RUNS).body("<run><input>x</input></run>");
        if let Some(ct) = ct {
            r = r.header(CONTENT_TYPE, ct);
        }
        let r = r.send().await.unwrap();
        assert_eq!(r.headers()["accept-post"], "application/json");
        let p = problem(r, 415, "unsupported-media-type").await;
        assert!(p["detail"].as_str().unwrap().contains(says), "{p}");
    }
    // Without [server.cors], OPTIONS is a method no route has, and HEAD is
    // GET without the body.
    let r = w
        .http
        .request(reqwest::Method::OPTIONS, w.server.url("/v1/runs/r-1"))
        .send()
        .await
        .unwrap();
    assert!(r.headers().contains_key("allow"));
    problem(r, 405, "method-not-allowed").await;
    let r = w.http.head(w.server.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // Bodiless POSTs are JSON too.
    let r = w.post("/v1/runs/nope/cancel").send().await.unwrap();
    problem(r, 415, "unsupported-media-type").await;
    let r = w
        .post("/v1/runs/nope/cancel")
        .header(CONTENT_TYPE, "application/json")
        .send()
        .await
        .unwrap();
    problem(r, 404, "not-found").await;
    w.nothing_ran().await;
}

/// A presented key no config has, distinctive enough that no other log
/// text contains it.
const FAKE_KEY: &str = "fake-key-7f3a9c2e51d84b06";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_a_listed_tenants_key_when_keys_exist_unless_open() {
    let protected = world("metrics_tenants = [\"ops\"]", true).await;
    let url = protected.server.url("/metrics");
    let r = protected.http.get(&url).send().await.unwrap();
    assert_eq!(r.headers()["www-authenticate"], r#"Bearer realm="rein""#);
    problem(r, 401, "unauthorized").await;
    let r = protected
        .http
        .get(&url)
        .bearer_auth(FAKE_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["www-authenticate"],
        r#"Bearer realm="rein", error="invalid_token""#
    );
    problem(r, 401, "unauthorized").await;
    // A tenant's key reads no process-wide counters; the scraper's does.
    let r = protected
        .http
        .get(&url)
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    let p = problem(r, 403, "metrics-forbidden").await;
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains("server.metrics_tenants lists ops"),
        "{p}"
    );
    let r = protected
        .http
        .get(&url)
        .bearer_auth(OPS_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("rein_"), "the counters");
    // The failed attempts were logged with their reason, never the key.
    let line = protected.server.wait_for_line(|l| {
        l.contains("authentication failed") && l.contains("matches no configured key")
    });
    assert!(line.contains("peer=127.0.0.1:"), "{line}");
    assert!(line.contains("route=/metrics"), "{line}");
    assert!(
        !protected.server.log_tail().contains(FAKE_KEY),
        "the presented key is not logged"
    );

    // No tenant named: no key reads /metrics, and the start says so.
    let unnamed = world("", true).await;
    unnamed
        .server
        .wait_for_line(|l| l.contains("WARN") && l.contains("no key may read /metrics"));
    let r = unnamed
        .http
        .get(unnamed.server.url("/metrics"))
        .bearer_auth(OPS_KEY)
        .send()
        .await
        .unwrap();
    let p = problem(r, 403, "metrics-forbidden").await;
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains("server.metrics_tenants"),
        "{p}"
    );

    let open = world("metrics = \"open\"", true).await;
    let r = open
        .http
        .get(open.server.url("/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let no_keys = world("", false).await;
    let r = no_keys
        .http
        .get(no_keys.server.url("/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        200,
        "open mode: loopback only, no keys to ask for"
    );
    let doc: Value = no_keys
        .http
        .get(no_keys.server.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        doc["paths"]["/metrics"]["get"]["security"].is_null(),
        "documented as open"
    );
}

/// `rein serve` with keys on a wildcard address, as in a pod: its
/// probes answer whatever the `Host`, and nothing else does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_are_answered_off_loopback_and_the_start_warns_about_allowed_hosts() {
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = example_config(dir.path(), &keys_config());
    let mut command = Command::new(env!("CARGO_BIN_EXE_rein"));
    command
        .env("ORDER_DESK_URL", desk.base_url())
        .env("MOCK_MODEL_URL", "http://127.0.0.1:2")
        .env_remove("REIN_CRASH_AT")
        .args(["serve", "--config"])
        .arg(&config)
        .args(["--listen", "0.0.0.0:0", "--data"])
        .arg(dir.path().join("rein.db"));
    let server = Server::spawn(command);
    let warning = server.wait_for_line(|l| l.contains("WARN") && l.contains("allowed_hosts"));
    assert!(warning.contains("listening on 0.0.0.0:"), "{warning}");
    let port = port(&server);
    let base = format!("http://127.0.0.1:{port}");
    let pod = format!("10.1.2.3:{port}");
    let http = reqwest::Client::new();
    for (method, path) in [
        (reqwest::Method::GET, "/healthz"),
        (reqwest::Method::HEAD, "/healthz"),
        (reqwest::Method::GET, "/readyz"),
        (reqwest::Method::HEAD, "/readyz"),
    ] {
        let r = http
            .request(method.clone(), format!("{base}{path}"))
            .header(HOST, pod.as_str())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{method} {path} with Host {pod}");
    }
    // The API, and a page's origin on a probe, are still refused.
    let r = http
        .get(format!("{base}/v1/runs/r-1"))
        .bearer_auth(KEY)
        .header(HOST, pod.as_str())
        .send()
        .await
        .unwrap();
    problem(r, 421, "host-not-allowed").await;
    let r = http
        .get(format!("{base}/healthz"))
        .header(HOST, pod.as_str())
        .header(ORIGIN, format!("http://{pod}"))
        .send()
        .await
        .unwrap();
    problem(r, 403, "origin-not-allowed").await;
}

/// Refusals and failed authentication name the route, never the path a
/// client sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_name_the_route_template_not_the_path_sent() {
    let w = world("", true).await;
    let r = w
        .http
        .get(w.server.url("/v1/runs/path-secret-4f2a"))
        .header(HOST, "evil.example")
        .send()
        .await
        .unwrap();
    problem(r, 421, "host-not-allowed").await;
    let r = w
        .http
        .get(w.server.url("/v1/runs/auth-secret-77c1/ledger"))
        .send()
        .await
        .unwrap();
    problem(r, 401, "unauthorized").await;
    let r = w
        .http
        .get(w.server.url("/no-such-route-91be"))
        .header(ORIGIN, "http://evil.example")
        .send()
        .await
        .unwrap();
    problem(r, 403, "origin-not-allowed").await;
    let refused = w.server.wait_for_line(|l| {
        l.contains("host or origin not allowed") && l.contains("HostNotAllowed")
    });
    assert!(refused.contains("route=/v1/runs/{id}"), "{refused}");
    let failed = w
        .server
        .wait_for_line(|l| l.contains("authentication failed"));
    assert!(failed.contains("route=/v1/runs/{id}/ledger"), "{failed}");
    let unmatched = w
        .server
        .wait_for_line(|l| l.contains("OriginNotAllowed") && l.contains("route="));
    assert!(unmatched.contains("route=unmatched"), "{unmatched}");
    // Every line has been written once the last access line is.
    w.server
        .wait_for_line(|l| l.contains("latency_ms=") && l.contains("status=403"));
    let log = w.server.log_tail();
    for sent in ["path-secret-4f2a", "auth-secret-77c1", "no-such-route-91be"] {
        assert!(!log.contains(sent), "{sent} in the log:\n{log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_has_one_access_line_with_its_request_id() {
    let w = world("", true).await;
    let r = w
        .http
        .get(w.server.url("/v1/runs/r-404"))
        .bearer_auth(KEY)
        .header("request-id", "client-id-7")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["request-id"], "client-id-7", "echoed");
    assert_eq!(r.status(), 404);
    let r = w
        .http
        .get(w.server.url("/healthz"))
        .header("request-id", "has space")
        .send()
        .await
        .unwrap();
    let made = r.headers()["request-id"].to_str().unwrap().to_owned();
    assert_eq!(
        uuid::Uuid::parse_str(&made).unwrap().get_version_num(),
        7,
        "a fresh UUIDv7"
    );
    let line = w
        .server
        .wait_for_line(|l| l.contains("request_id=client-id-7"));
    for part in [
        "method=GET",
        "route=/v1/runs/{id}",
        "status=404",
        "tenant=acme",
        "latency_ms=",
        "peer=127.0.0.1:",
    ] {
        assert!(line.contains(part), "{part} in {line}");
    }
    assert!(
        !line.contains("r-404"),
        "the template, not the path: {line}"
    );
    let line = w
        .server
        .wait_for_line(|l| l.contains(&format!("request_id={made}")));
    assert!(
        line.contains("route=/healthz") && line.contains("status=200"),
        "{line}"
    );
    let count = |id: &str| {
        w.server
            .log_lines()
            .iter()
            .filter(|l| l.contains("rein::access") || l.contains("route="))
            .filter(|l| l.contains(&format!("request_id={id}")))
            .count()
    };
    assert_eq!(count("client-id-7"), 1, "one line per request");
    assert_eq!(count(&made), 1);
}

/// `rein serve` under `umask 000`: what it creates is private anyway.
#[cfg(unix)]
#[test]
fn the_store_is_created_private_whatever_the_umask() {
    let dir = tempfile::tempdir().unwrap();
    let config = example_config(dir.path(), "");
    let data = dir.path().join("data/nested");
    let db = data.join("rein.db");
    let mut wrapper = Command::new("sh");
    wrapper.args([
        "-c",
        "umask 000; exec \"$0\" \"$@\"",
        env!("CARGO_BIN_EXE_rein"),
    ]);
    let env = [
        ("ORDER_DESK_URL", "http://127.0.0.1:1"),
        ("MOCK_MODEL_URL", "http://127.0.0.1:2"),
    ];
    let server = Server::spawn(serve_command(wrapper, &config, &db, &env));
    let mode = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    };
    assert_eq!(mode(&data), 0o700, "the data directory");
    for file in ["rein.db", "rein.db-wal", "rein.db-shm"] {
        assert_eq!(mode(&data.join(file)), 0o600, "{file}");
    }
    server.kill();
    // An existing world-readable database keeps its mode, with a warning.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let server = Server::spawn(serve_command(
        Command::new(env!("CARGO_BIN_EXE_rein")),
        &config,
        &db,
        &env,
    ));
    let warning = server.wait_for_line(|l| l.contains("readable by every local user"));
    assert!(
        warning.contains("WARN") && warning.contains("chmod 600"),
        "{warning}"
    );
    assert!(
        warning.contains("files=") && warning.contains("rein.db") && !warning.contains("-wal"),
        "the readable file is named, not the private -wal: {warning}"
    );
    assert_eq!(mode(&db), 0o644, "left alone");
}

/// Not only `rein serve`: every command that opens the store warns.
#[cfg(unix)]
#[test]
fn a_command_opening_a_store_anyone_may_read_warns() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rein.db");
    drop(SqliteStore::open(&db).unwrap());
    let list = || {
        let out = Command::new(env!("CARGO_BIN_EXE_rein"))
            .args(["idempotency", "list", "--data"])
            .arg(&db)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stderr).unwrap()
    };
    assert!(
        !list().contains("readable by every local user"),
        "a private store"
    );
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let stderr = list();
    assert!(
        stderr.contains("readable by every local user") && stderr.contains("rein.db"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_admits_its_origins_with_their_methods_and_headers_only() {
    let app = "http://app.example:3000";
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = example_config(
        dir.path(),
        &format!(
            "[server.cors]\nallowed_origins = [\"{app}\"]\nallowed_methods = [\"GET\"]\nallowed_headers = [\"content-type\"]\n"
        ),
    );
    let server = Server::start(&config, &dir.path().join("rein.db"), desk.base_url());
    let http = reqwest::Client::new();
    // A preflight is answered with what the config allows, and no more.
    let r = http
        .request(reqwest::Method::OPTIONS, server.url("/v1/runs/r-1"))
        .header(ORIGIN, app)
        .header("access-control-request-method", "GET")
        .header(
            "access-control-request-headers",
            "content-type, idempotency-key",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let h = r.headers();
    assert_eq!(h["access-control-allow-origin"], app);
    assert_eq!(h["access-control-allow-methods"], "GET");
    assert_eq!(h["access-control-allow-headers"], "content-type");
    assert_eq!(h["access-control-max-age"], "600");
    // A listed origin reads its answers, with the headers a client needs.
    let r = http
        .get(server.url("/v1/runs/r-1"))
        .header(ORIGIN, app)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.headers()["access-control-allow-origin"], app);
    let exposed = r.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        exposed.contains("request-id") && exposed.contains("location"),
        "{exposed}"
    );
    // The same origin spelled otherwise (case, a trailing dot) is the
    // listed one to the guard, and to the CORS headers alike.
    let r = http
        .get(server.url("/v1/runs/r-1"))
        .header(ORIGIN, "http://App.Example.:3000")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "http://App.Example.:3000"
    );
    // HEAD is GET without the body.
    let r = http
        .head(server.url("/healthz"))
        .header(ORIGIN, app)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["access-control-allow-origin"], app);
    // OPTIONS without a preflight's request method: the CORS layer answers
    // every OPTIONS itself (it runs nothing), with the allow-origin for a
    // listed origin only; an origin not listed is refused first.
    for (origin, allowed) in [(Some(app), Some(app)), (None, None)] {
        let mut r = http.request(reqwest::Method::OPTIONS, server.url("/v1/runs/r-1"));
        if let Some(origin) = origin {
            r = r.header(ORIGIN, origin);
        }
        let r = r.send().await.unwrap();
        assert_eq!(r.status(), 200, "OPTIONS from {origin:?}");
        assert_eq!(
            r.headers()
                .get("access-control-allow-origin")
                .map(|v| v.to_str().unwrap()),
            allowed,
            "OPTIONS from {origin:?}"
        );
    }
    let r = http
        .request(reqwest::Method::OPTIONS, server.url("/v1/runs/r-1"))
        .header(ORIGIN, "http://other.example")
        .send()
        .await
        .unwrap();
    problem(r, 403, "origin-not-allowed").await;
    // Methods the config leaves out are refused before anything runs.
    let r = http
        .post(server.url(RUNS))
        .header(ORIGIN, app)
        .header(CONTENT_TYPE, "application/json")
        .body(TASK)
        .send()
        .await
        .unwrap();
    let p = problem(r, 403, "origin-not-allowed").await;
    assert!(
        p["detail"].as_str().unwrap().contains("allowed_methods"),
        "{p}"
    );
    let r = http
        .delete(server.url("/v1/runs/r-1"))
        .header(ORIGIN, app)
        .send()
        .await
        .unwrap();
    let p = problem(r, 403, "origin-not-allowed").await;
    assert_eq!(p["method"], "DELETE", "{p}");
    // An origin that is not listed gets no CORS headers at all.
    let r = http
        .request(reqwest::Method::OPTIONS, server.url("/v1/runs/r-1"))
        .header(ORIGIN, "http://other.example")
        .header("access-control-request-method", "GET")
        .send()
        .await
        .unwrap();
    assert!(r.headers().get("access-control-allow-origin").is_none());
    problem(r, 403, "origin-not-allowed").await;
    assert_eq!(desk.requests().len(), 0);
}
