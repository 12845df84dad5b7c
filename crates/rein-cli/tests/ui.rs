//! Issue 38: the dashboard at `/ui` in headless Chromium, driven by
//! Playwright (`tests/ui/dashboard.mjs`) against a real `rein serve` on
//! SQLite with API keys. The page signs in with a key, lists a finished
//! run, shows its ledger, approves one waiting call by clicking and
//! another by keyboard alone, and follows a run's timeline live; a POST
//! without the CSRF token and a form posted from another origin change
//! nothing. This side then reads the store through the API: the two
//! decisions are recorded under the key's name, the forged ones are not.
//!
//! Needs Node, `playwright-core` (in `$REIN_PLAYWRIGHT`, default
//! `~/.cache/rein-node/node_modules`, which `.ci/run` fills) and
//! Debian's `chromium`; without one of them the test says so and passes,
//! except under CI (`common::missing_part`), where it fails. Screenshots
//! of every page go to `<target dir>/ui-screenshots/`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rein_testkit::order_desk::{
    Fault, Faults, OrderDesk, OrderDeskConfig, RESTORE_DELIVERY_TIME, SEND_EMAIL,
    UPDATE_DELIVERY_TIME,
};
use serde_json::{Value, json};

mod common;
use common::{Server, example_config};

/// The key the page signs in with, and its name (the decisions' author).
const KEY: &str = "acme-dashboard-key";
const KEY_NAME: &str = "ops-alice";
/// A key of tenant `beta`, which is no operator.
const OTHER_KEY: &str = "beta-dashboard-key";

/// Chromium's binary: Debian's `chromium` (or Ubuntu's
/// `chromium-browser`), on `PATH` or in `/usr/bin`.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
        .find(|p| p.is_file())
}

/// The `node_modules` holding `playwright-core`.
fn playwright() -> Option<PathBuf> {
    let dir = match std::env::var_os("REIN_PLAYWRIGHT") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/rein-node/node_modules"),
    };
    dir.join("playwright-core/package.json")
        .is_file()
        .then_some(dir)
}

/// Node, Playwright and Chromium, or `None` after
/// [`common::missing_part`] said which is missing.
fn parts() -> Option<(PathBuf, PathBuf)> {
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !node {
        common::missing_part("no `node` on PATH: install Node.js (`apt-get install -y nodejs`)");
        return None;
    }
    let Some(modules) = playwright() else {
        common::missing_part(
            "no playwright-core in $REIN_PLAYWRIGHT or ~/.cache/rein-node/node_modules: run .ci/run, or `npm install --prefix ~/.cache/rein-node playwright-core`",
        );
        return None;
    };
    let Some(chromium) = chromium() else {
        common::missing_part(
            "no chromium or chromium-browser on PATH: install it with `apt-get install -y chromium` (.ci/run does)",
        );
        return None;
    };
    Some((modules, chromium))
}

/// Where the screenshots go: `ui-screenshots` in the target directory.
fn screenshots() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        PathBuf::from,
    );
    let dir = target.join("ui-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn sha256(key: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The script of the `mover` agent: three updates, the third refused (as
/// `tests/handoff.rs`'s), so that with every restore refused too the run
/// is handed off with two records awaiting a human.
const THREE_UPDATES: &str = r#"{"turns": [
  {"tool_calls": [{"name": "update_delivery_time", "arguments": {"order_id": "A-1001", "delivery_date": "2026-02-01T10:00:00Z"}}]},
  {"tool_calls": [{"name": "update_delivery_time", "arguments": {"order_id": "A-1002", "delivery_date": "2026-02-02T10:00:00Z"}}]},
  {"tool_calls": [{"name": "update_delivery_time", "arguments": {"order_id": "A-1003", "delivery_date": "2026-02-03T10:00:00Z"}}]},
  {"text": "The third order cannot be moved."}
]}"#;

/// The example with its email behind a human's approval, an agent
/// (`mover`) that gets handed off, and the key (an operator's).
fn config(dir: &Path) -> PathBuf {
    std::fs::write(dir.join("handoff.script.json"), THREE_UPDATES).unwrap();
    // The key's tenant is the operator: it may read the config page.
    common::example_config_with(
        dir,
        "metrics_tenants = [\"acme\"]",
        &format!(
            "[agents.order_desk.approval]\nfrom_tier = \"high\"\nwindow = \"1h\"\n\
             [providers.handoff_replay]\nkind = \"scripted\"\nscript = \"handoff.script.json\"\n\
             [agents.mover]\nprovider = \"handoff_replay\"\nmodel = \"gpt-4o-mini\"\n\
             system_prompt = \"Move orders.\"\ntools = [\"get_order\", \"update_delivery_time\"]\n\
             [server.queue]\nlease = \"3s\"\nworkers = 1\n\
             [[server.api_keys]]\ntenant = \"acme\"\nname = \"{KEY_NAME}\"\nsha256 = \"{}\"\n",
            sha256(KEY)
        ),
    )
}

/// A run of `mover`, handed off: (run id, the first record awaiting a
/// decision).
async fn handed_off(client: &reqwest::Client, server: &Server) -> (String, String) {
    let answer: Value = client
        .post(server.url("/v1/agents/mover/runs"))
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .body(r#"{"input": "Move the three orders."}"#)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run = answer["run_id"].as_str().unwrap().to_owned();
    assert_eq!(ended(client, server, &run).await["status"], "handed_off");
    let package = get(client, server, &format!("/v1/runs/{run}/handoff")).await;
    let awaiting = package["awaiting_decision"].as_array().unwrap();
    assert_eq!(awaiting.len(), 2, "{package}");
    (run, awaiting[0]["intent_id"].as_str().unwrap().to_owned())
}

/// A sync run that pauses before its email: (run id, the email's intent).
async fn paused(client: &reqwest::Client, server: &Server) -> (String, String) {
    let answer = client
        .post(server.url("/v1/agents/order_desk/runs"))
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .body(r#"{"input": "Move order A-1001 to 8 January and tell the buyer."}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 202, "a paused sync run");
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["awaiting_approval"][0]["tool"], SEND_EMAIL, "{body}");
    (
        body["run_id"].as_str().unwrap().to_owned(),
        body["awaiting_approval"][0]["intent_id"]
            .as_str()
            .unwrap()
            .to_owned(),
    )
}

async fn get(client: &reqwest::Client, server: &Server, path: &str) -> Value {
    client
        .get(server.url(path))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Polls the API until the run ended; its view.
async fn ended(client: &reqwest::Client, server: &Server, run: &str) -> Value {
    for _ in 0..1200 {
        let view = get(client, server, &format!("/v1/runs/{run}")).await;
        if !matches!(
            view["status"].as_str(),
            Some("queued" | "running" | "awaiting_approval") | None
        ) {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("run {run} did not end; log:\n{}", server.log_tail());
}

/// The approvals of `run`, decided or not.
async fn approvals_of(client: &reqwest::Client, server: &Server, run: &str) -> Vec<Value> {
    get(
        client,
        server,
        &format!("/v1/approvals?pending=false&run_id={run}"),
    )
    .await["approvals"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_38_the_dashboard_signs_in_lists_shows_and_decides_in_a_real_browser() {
    let Some((modules, chromium)) = parts() else {
        return;
    };
    // The mover's third update conflicts and every restore is refused.
    let faults = Faults::none()
        .then(UPDATE_DELIVERY_TIME, Fault::Delay(Duration::ZERO))
        .then(UPDATE_DELIVERY_TIME, Fault::Delay(Duration::ZERO))
        .then(UPDATE_DELIVERY_TIME, Fault::status(409))
        .always(RESTORE_DELIVERY_TIME, Fault::status(503));
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(faults))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let server = Server::start_async(&config, &dir.path().join("rein.db"), desk.base_url()).await;
    let client = reqwest::Client::new();

    // The restores stay refused for the whole test: the reconciler retries
    // a handed-off record's compensation, and one that went through would
    // settle the record the browser decides, or the one that must still
    // wait at the end, however long the browser's steps take.
    let (handoff, handoff_intent) = handed_off(&client, &server).await;

    // A finished run: approved through the API.
    let (finished, intent) = paused(&client, &server).await;
    let decided = client
        .post(server.url(&format!("/v1/runs/{finished}/approvals/{intent}")))
        .bearer_auth(KEY)
        .json(&json!({"decision": "approved"}))
        .send()
        .await
        .unwrap();
    assert_eq!(decided.status(), 200);
    assert_eq!(
        ended(&client, &server, &finished).await["status"],
        "succeeded"
    );
    // Three that wait: one for a click, one for the keyboard, one that
    // forged posts try.
    let (click, click_intent) = paused(&client, &server).await;
    let (keys, keys_intent) = paused(&client, &server).await;
    let (forged, forged_intent) = paused(&client, &server).await;

    let shots = screenshots();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/ui/dashboard.mjs");
    let mut command = Command::new("node");
    command
        .arg(script)
        .env("PLAYWRIGHT_MODULES", modules)
        .env("CHROMIUM", chromium)
        .env("BASE", server.url("").trim_end_matches('/'))
        .env("KEY", KEY)
        .env("KEY_NAME", KEY_NAME)
        .env("SHOTS", &shots)
        .env("FINISHED", &finished)
        .env("CLICK", &click)
        .env("CLICK_INTENT", &click_intent)
        .env("KEYS", &keys)
        .env("KEYS_INTENT", &keys_intent)
        .env("FORGED", &forged)
        .env("FORGED_INTENT", &forged_intent)
        .env("HANDOFF", &handoff)
        .env("HANDOFF_INTENT", &handoff_intent);
    let output = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "the browser script failed:\n{said}\nserver log:\n{}",
        server.log_tail()
    );
    eprintln!("{said}screenshots in {}", shots.display());

    // The store: the clicked and the keyed decisions, by the key's name.
    for run in [&click, &keys] {
        let approvals = approvals_of(&client, &server, run).await;
        assert_eq!(approvals.len(), 1, "{approvals:?}");
        let decision = &approvals[0]["decision"];
        assert_eq!(decision["verdict"], "approved", "{decision}");
        assert_eq!(decision["by"], KEY_NAME, "the signed-in key's name");
        assert_eq!(ended(&client, &server, run).await["status"], "succeeded");
    }
    // The forged posts changed nothing: the call still waits.
    let approvals = approvals_of(&client, &server, &forged).await;
    assert_eq!(approvals.len(), 1);
    assert!(approvals[0]["decision"].is_null(), "{approvals:?}");
    let view = get(&client, &server, &format!("/v1/runs/{forged}")).await;
    assert_eq!(view["status"], "awaiting_approval", "{view}");
    // The handoff decision made by clicking, by the key's name; the other
    // record still waits.
    let events = get(&client, &server, &format!("/v1/runs/{handoff}/events")).await;
    let decided: Vec<&Value> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "handoff_decided")
        .collect();
    assert_eq!(decided.len(), 1, "{events}");
    assert_eq!(decided[0]["intent_id"], handoff_intent.as_str());
    assert_eq!(decided[0]["data"]["decision"], "undone", "{}", decided[0]);
    assert_eq!(decided[0]["data"]["by"], KEY_NAME);
    assert_eq!(decided[0]["data"]["reason"], "restored by hand");
    let package = get(&client, &server, &format!("/v1/runs/{handoff}/handoff")).await;
    assert_eq!(package["awaiting_decision"].as_array().unwrap().len(), 1);
    // The finished run's email and the two approved: three, no more.
    assert_eq!(desk.applied_count(SEND_EMAIL), 3);
    for shot in [
        "sign-in",
        "runs",
        "run-finished",
        "run-waiting",
        "approvals",
        "handoffs",
        "run-live",
        "stats",
        "live",
        "gateway",
        "config",
    ] {
        assert!(shots.join(format!("{shot}.png")).is_file(), "{shot}.png");
    }
    server.kill_async().await;
}

/// The parts of the dashboard a browser cannot show a test, over plain
/// HTTP (no browser needed, so this always runs).
mod over_http {
    use super::*;

    fn client() -> reqwest::Client {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
    }

    fn location(answer: &reqwest::Response) -> String {
        answer.headers()["location"].to_str().unwrap().to_owned()
    }

    /// The session cookie an answer sets (`name=value`), and the whole
    /// `Set-Cookie`.
    fn cookie(answer: &reqwest::Response) -> (String, String) {
        let set = answer.headers()["set-cookie"].to_str().unwrap().to_owned();
        (set.split(';').next().unwrap().to_owned(), set)
    }

    /// The trace a run is submitted under.
    const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

    /// The CSRF token of the first form of `page`.
    fn csrf(page: &str) -> String {
        let at = page.find("name=\"csrf\" value=\"").expect("a csrf field") + 19;
        page[at..at + 64].to_owned()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sign_in_cookies_headers_escaping_and_forgeries() {
        let desk = OrderDesk::start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config = example_config(
            dir.path(),
            &format!(
                "[server.cors]\nallowed_origins = [\"http://tool.example\"]\n\
                 [[server.api_keys]]\ntenant = \"acme\"\nname = \"{KEY_NAME}\"\nsha256 = \"{}\"\n",
                sha256(KEY)
            ),
        );
        let server =
            Server::start_async(&config, &dir.path().join("rein.db"), desk.base_url()).await;
        let http = client();

        // Signed out: to the sign-in form, which comes back.
        let answer = http.get(server.url("/ui/runs")).send().await.unwrap();
        assert_eq!(answer.status(), 303);
        assert_eq!(location(&answer), "/ui/login?next=%2Fui%2Fruns");
        let form = http.get(server.url("/ui/login")).send().await.unwrap();
        assert_eq!(form.status(), 200);
        let headers = form.headers().clone();
        assert!(
            headers["content-security-policy"]
                .to_str()
                .unwrap()
                .starts_with("default-src 'self'")
        );
        assert!(
            headers["content-security-policy"]
                .to_str()
                .unwrap()
                .contains("frame-ancestors 'none'")
        );
        assert_eq!(headers["x-frame-options"], "DENY");
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert_eq!(headers["cache-control"], "no-store");
        let (form_cookie, set) = cookie(&form);
        assert_eq!(
            set.split_once(';').unwrap().1,
            " Path=/ui; HttpOnly; SameSite=Strict",
            "no Secure over plain HTTP"
        );
        let page = form.text().await.unwrap();
        assert!(
            !page.contains("<script>") && !page.contains("style="),
            "nothing inline"
        );
        let token = csrf(&page);
        // Behind a TLS-terminating proxy the cookie is Secure.
        let proxied = http
            .get(server.url("/ui/login"))
            .header("x-forwarded-proto", "https")
            .send()
            .await
            .unwrap();
        assert!(cookie(&proxied).1.ends_with("; Secure"));

        // The sign-in form's own token is needed, then the key.
        let sign_in = |cookie: &str, body: String| {
            http.post(server.url("/ui/login"))
                .header("cookie", cookie)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body)
                .send()
        };
        let forged = sign_in(&form_cookie, format!("key={KEY}&next=%2Fui%2Fruns"))
            .await
            .unwrap();
        assert_eq!(forged.status(), 403, "no token");
        let wrong = sign_in(&form_cookie, format!("csrf={token}&key=nope"))
            .await
            .unwrap();
        assert_eq!(wrong.status(), 401);
        let signed = sign_in(
            &form_cookie,
            format!("csrf={token}&key={KEY}&next=%2Fui%2Fapprovals"),
        )
        .await
        .unwrap();
        assert_eq!(signed.status(), 303);
        assert_eq!(location(&signed), "/ui/approvals");
        let (session, _) = cookie(&signed);
        assert_ne!(session, form_cookie, "a new id once signed in");
        assert!(!session.contains(KEY) && !session.contains(&sha256(KEY)));
        // The form's id opens nothing; the session is no API credential.
        let old = http
            .get(server.url("/ui/runs"))
            .header("cookie", &form_cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(old.status(), 303);
        let api = http
            .get(server.url("/v1/runs"))
            .header("cookie", &session)
            .send()
            .await
            .unwrap();
        assert_eq!(api.status(), 401);

        // Text from a run is escaped.
        let run: Value = http
            .post(server.url("/v1/agents/order_desk/runs"))
            .bearer_auth(KEY)
            .header("content-type", "application/json")
            .header("traceparent", format!("00-{TRACE_ID}-00f067aa0ba902b7-01"))
            .body(r#"{"input": "Move A-1001 <img src=x onerror=alert(1)> \"quoted\""}"#)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let run = run["run_id"].as_str().unwrap();
        let shown = http
            .get(server.url(&format!("/ui/runs/{run}")))
            .header("cookie", &session)
            .send()
            .await
            .unwrap();
        assert_eq!(shown.status(), 200);
        let page = shown.text().await.unwrap();
        assert!(!page.contains("<img src=x"), "escaped");
        assert!(page.contains("&lt;img src=x onerror=alert(1)&gt; &quot;quoted&quot;"));
        // The trace its spans are in: the caller's.
        assert!(
            page.contains(&format!("<code id=\"trace-id\">{TRACE_ID}</code>")),
            "{page}"
        );
        let token = csrf(&page);
        // Created within whole UTC days.
        let listed = |query: &'static str| {
            http.get(server.url(&format!("/ui/runs?{query}")))
                .header("cookie", &session)
                .send()
        };
        let all = listed("from=1970-01-01&to=9999-12-31").await.unwrap();
        assert_eq!(all.status(), 200);
        assert!(all.text().await.unwrap().contains(run));
        let none = listed("from=9999-12-31")
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(!none.contains(run) && none.contains("No runs match these filters"));
        let bad = listed("to=2026-02-30").await.unwrap();
        assert_eq!(bad.status(), 400);
        assert!(bad.text().await.unwrap().contains("is not a date"));

        // A listed CORS origin may call the API, not post the dashboard's
        // forms; nor may another site, even with the token.
        let decision = server.url(&format!("/ui/runs/{run}/approvals/none"));
        for (header, value) in [
            ("origin", "http://tool.example"),
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-site", "same-site"),
        ] {
            let refused = http
                .post(&decision)
                .header("cookie", &session)
                .header(header, value)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(format!("csrf={token}&decision=approved"))
                .send()
                .await
                .unwrap();
            assert_eq!(refused.status(), 403, "{header}: {value}");
            let page = refused.text().await.unwrap();
            assert!(page.contains("not sent from this dashboard"), "{page}");
        }
        // The token and the origin pass: the API's own answer (the run
        // ended: nothing of it waits), as a page.
        let passed = http
            .post(&decision)
            .header("cookie", &session)
            .header("origin", server.url("").trim_end_matches('/'))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("csrf={token}&decision=approved"))
            .send()
            .await
            .unwrap();
        assert_eq!(passed.status(), 409);
        assert!(
            passed.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/html")
        );
        assert!(passed.text().await.unwrap().contains("Run already ended"));
        // The access line names the session's tenant.
        server.wait_for_line(|l| l.contains("route=/ui/runs/{id}") && l.contains("tenant=acme"));
        server.kill_async().await;
    }

    /// The API's JSON answer to a GET of `path` with `KEY`.
    async fn api_json(http: &reqwest::Client, server: &Server, path: &str) -> Value {
        let answer = http
            .get(server.url(path))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200, "{path}");
        answer.json().await.unwrap()
    }

    /// A session of `key`, signed in through the form: its cookie.
    async fn signed_in(http: &reqwest::Client, server: &Server, key: &str) -> String {
        let form = http.get(server.url("/ui/login")).send().await.unwrap();
        let (form_cookie, _) = cookie(&form);
        let token = csrf(&form.text().await.unwrap());
        let signed = http
            .post(server.url("/ui/login"))
            .header("cookie", &form_cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("csrf={token}&key={key}&next=%2Fui%2Fruns"))
            .send()
            .await
            .unwrap();
        assert_eq!(signed.status(), 303);
        cookie(&signed).0
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn outcomes_spend_gateway_capacity_and_config_pages() {
        let desk = OrderDesk::start().await.unwrap();
        let model = rein_testkit::mock_model::MockModel::start_with(
            rein_testkit::mock_model::MockModelConfig::default().with_model("gpt-4o-mini"),
        )
        .await
        .unwrap();
        model.push_reply(rein_testkit::mock_model::Reply::text("Hello.").with_usage(1_000, 200));
        let dir = tempfile::tempdir().unwrap();
        // acme is the operator; beta is a tenant that is not.
        let config = common::example_config_with(
            dir.path(),
            "metrics_tenants = [\"acme\"]",
            &format!(
                "[[server.api_keys]]\ntenant = \"acme\"\nname = \"{KEY_NAME}\"\nsha256 = \"{}\"\n\
                 [[server.api_keys]]\ntenant = \"beta\"\nname = \"beta-bob\"\nsha256 = \"{}\"\n\
                 [models.chat]\nprovider = \"mock\"\nmodel = \"gpt-4o-mini\"\n",
                sha256(KEY),
                sha256(OTHER_KEY)
            ),
        );
        let server = Server::start_with_env(
            &config,
            &dir.path().join("rein.db"),
            &[
                ("ORDER_DESK_URL", desk.base_url()),
                ("MOCK_MODEL_URL", model.base_url()),
            ],
        );
        let http = client();
        let session = signed_in(&http, &server, KEY).await;
        let page =
            |path: &'static str| http.get(server.url(path)).header("cookie", &session).send();
        let text = |path: &'static str| async move {
            let answer = page(path).await.unwrap();
            assert_eq!(answer.status(), 200, "{path}");
            answer.text().await.unwrap()
        };

        // Before any call: what to do, and the process's capacity.
        let gateway = text("/ui/gateway").await;
        assert!(
            gateway.contains("Point an OpenAI or Anthropic client"),
            "{gateway}"
        );
        assert!(
            gateway.contains("No gateway call of your tenant"),
            "{gateway}"
        );
        let live = text("/ui/live").await;
        assert!(live.contains("data-refresh="), "{live}");
        assert!(live.contains("<tr data-row=\"workers\">"), "{live}");
        assert!(
            live.contains("No call went through a resource group or provider"),
            "{live}"
        );

        // Nothing yet: the empty states say what to do.
        let empty = page("/ui/stats").await.unwrap();
        assert_eq!(empty.status(), 200);
        let empty = empty.text().await.unwrap();
        assert!(
            empty.contains("No run was created in this window"),
            "{empty}"
        );
        assert!(empty.contains("No API key spent anything"), "{empty}");
        assert!(
            empty.contains("aria-current=\"page\">Outcomes and spend"),
            "{empty}"
        );

        // One gateway call with the key: its spend, by model, in dollars.
        let answered = http
            .post(server.url("/v1/chat/completions"))
            .bearer_auth(KEY)
            .json(&json!({"model": "chat", "messages": [{"role": "user", "content": "Hi."}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(answered.status(), 200);
        answered.bytes().await.unwrap();
        let spent = page("/ui/stats?window=7d")
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let row = spent
            .split(&format!("<tr data-key=\"{KEY_NAME}\">"))
            .nth(1)
            .unwrap_or_else(|| panic!("no row of the key: {spent}"));
        assert!(row.contains("1200"), "1,000 in and 200 out: {row}");
        assert!(row.contains("mock/gpt-4o-mini"), "{row}");
        assert!(row.contains("$0.000"), "a cost in dollars: {row}");
        assert!(spent.contains("<option value=\"7d\" selected>"), "{spent}");

        // The gateway page: today's spend by key and model, the call by
        // model and outcome; the capacity page: the provider's gate.
        let gateway = text("/ui/gateway").await;
        let row = gateway
            .split(&format!("<tr data-key=\"{KEY_NAME}\">"))
            .nth(1)
            .unwrap_or_else(|| panic!("no spend row of the key: {gateway}"));
        assert!(row.contains("1200"), "{row}");
        let calls = gateway
            .split("<table id=\"calls\">")
            .nth(1)
            .unwrap_or_else(|| panic!("no calls table: {gateway}"));
        assert!(calls.contains("<code>gpt-4o-mini</code>"), "{calls}");
        assert!(
            calls.contains("badge ok\">ok</span></td><td class=\"n\">1</td>"),
            "{calls}"
        );
        assert!(gateway.contains("Every call was answered by its chain's first model"));
        let live = text("/ui/live").await;
        assert!(
            live.contains("<tr data-group=\"mock\"><td>provider</td>"),
            "{live}"
        );
        let api = api_json(&http, &server, "/v1/live").await;
        assert_eq!(api["gateway"]["calls"][0]["count"], 1, "{api}");
        assert_eq!(api["gateway"]["tenant_label"], "acme", "{api}");

        // The config, for the operator: as applied, nothing secret.
        let config = text("/ui/config").await;
        assert!(config.contains("data-agent=\"order_desk\""), "{config}");
        assert!(
            config.contains("kept for compensation"),
            "the limits: {config}"
        );
        assert!(config.contains("ops-alice (tenant acme)"), "{config}");
        assert!(
            config.contains("<code>$OPENAI_API_KEY</code>"),
            "the variable's name: {config}"
        );
        for secret in [KEY, &sha256(KEY), OTHER_KEY, &sha256(OTHER_KEY)] {
            assert!(!config.contains(secret), "{secret} shown: {config}");
        }
        assert!(config.contains("aria-current=\"page\">Config"), "{config}");
        // Not for another tenant: the page and the API both refuse.
        let other = signed_in(&http, &server, OTHER_KEY).await;
        let refused = http
            .get(server.url("/ui/config"))
            .header("cookie", &other)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 403);
        assert!(
            refused
                .text()
                .await
                .unwrap()
                .contains("server.metrics_tenants lists acme")
        );
        let refused = http
            .get(server.url("/v1/config"))
            .bearer_auth(OTHER_KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 403);
        // beta sees none of acme's calls.
        let theirs = http
            .get(server.url("/ui/gateway"))
            .header("cookie", &other)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            theirs.contains("No gateway call of your tenant"),
            "{theirs}"
        );

        // The API's series: the window's runs, cut into slices.
        let series = api_json(&http, &server, "/v1/stats?buckets=3").await;
        let slices = series["series"].as_array().unwrap();
        assert_eq!(slices.len(), 3, "{series}");
        let counted: u64 = slices.iter().map(|s| s["runs"].as_u64().unwrap()).sum();
        assert_eq!(
            counted,
            series["total"]["runs"].as_u64().unwrap(),
            "{series}"
        );
        assert_eq!(slices[0]["until_ms"], slices[1]["since_ms"]);
        let widths: Vec<u64> = slices
            .iter()
            .map(|s| s["until_ms"].as_u64().unwrap() - s["since_ms"].as_u64().unwrap())
            .collect();
        assert!(
            widths.iter().all(|w| *w == widths[0]),
            "equal slices: {widths:?}"
        );

        // A window the page does not offer: a 400 that names the choices.
        let odd = page("/ui/stats?window=2h").await.unwrap();
        assert_eq!(odd.status(), 400);
        assert!(
            odd.text()
                .await
                .unwrap()
                .contains("one of 1h, 24h, 7d or 31d")
        );
        server.kill_async().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_keys_the_dashboard_is_open_as_the_api_is() {
        let desk = OrderDesk::start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config = example_config(dir.path(), "");
        let server =
            Server::start_async(&config, &dir.path().join("rein.db"), desk.base_url()).await;
        let http = client();
        let answer = http.get(server.url("/ui/approvals")).send().await.unwrap();
        assert_eq!(answer.status(), 303);
        let login = http
            .get(server.url(&location(&answer)))
            .send()
            .await
            .unwrap();
        assert_eq!(login.status(), 303, "no form: a session at once");
        assert_eq!(location(&login), "/ui/approvals");
        let (session, _) = cookie(&login);
        let page = http
            .get(server.url("/ui/approvals"))
            .header("cookie", &session)
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), 200);
        let page = page.text().await.unwrap();
        assert!(page.contains("Open mode: no API keys configured"), "{page}");
        assert!(!page.contains("Sign out"));
        assert!(
            page.contains("No call is waiting for approval"),
            "the empty state"
        );
        server.kill_async().await;
    }
}
