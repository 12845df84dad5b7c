//! Per-key budgets at the gateway (issue 36, item 2): a key's calls stop
//! with 429 and `Retry-After` once its spend reaches its limit, in each
//! wire format's error shape, while another key goes on; the spend stored
//! per key and model is what the mock model reported, call for call.
//!
//! A real `rein serve` over a real SQLite file, the testkit's mock model
//! metering its usage on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_store::{SpendQuery, SpendStore};
use rein_testkit::mock_model::{MockModel, MockModelConfig, Reply};
use serde_json::{Value, json};

mod common;
use common::Server;

/// Two keys: one with a budget, one without.
const CAPPED: &str = "rein-capped-key";
const FREE: &str = "rein-free-key";

fn sha256(text: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn config(dir: &std::path::Path, model_url: &str, tokens_per_day: u64) -> std::path::PathBuf {
    config_with(
        dir,
        model_url,
        &format!("tokens_per_day = {tokens_per_day}\ncost_usd_per_month = 100.0"),
        "",
    )
}

/// The config with `key_budget` as the capped key's budget table and
/// `extra` appended.
fn config_with(
    dir: &std::path::Path,
    model_url: &str,
    key_budget: &str,
    extra: &str,
) -> std::path::PathBuf {
    let text = format!(
        r#"
[providers.mock]
kind = "openai"
base_url = "{model_url}"
max_output_tokens = {{ "mock-model" = 4096 }}
[providers.mock.prices."mock-model"]
input_per_mtok_usd = 1.0
output_per_mtok_usd = 2.0

[models.chat]
provider = "mock"
model = "mock-model"

# The tenant's own scraper reads /metrics with its key.
[server]
metrics_tenants = ["acme"]

[[server.api_keys]]
tenant = "acme"
sha256 = "{capped}"
name = "capped"
[server.api_keys.budget]
{key_budget}

[[server.api_keys]]
tenant = "acme"
sha256 = "{free}"
name = "free"
{extra}
"#,
        capped = sha256(CAPPED),
        free = sha256(FREE),
    );
    std::fs::write(dir.join("rein.toml"), text).unwrap();
    dir.join("rein.toml")
}

/// The mock model, metering what each answer used.
async fn metered_model() -> MockModel {
    MockModel::start_with(
        MockModelConfig::default()
            .with_fallback_text("A-1001 has shipped and arrives on Friday.")
            .with_metered_usage(),
    )
    .await
    .unwrap()
}

async fn chat(server: &Server, key: &str, stream: bool) -> reqwest::Response {
    reqwest::Client::new()
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(key)
        .json(&json!({"model": "chat", "stream": stream,
                      "messages": [{"role": "user", "content": "Where is order A-1001?"}]}))
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_calls_stop_at_its_budget_and_its_spend_is_what_the_model_reported() {
    let model = metered_model().await;
    model.push_replies([
        Reply::text("A-1001 has shipped."),
        Reply::text("It arrives on Friday."),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rein.db");
    // One answer of the mock is some tens of tokens: the second call of
    // the capped key passes the limit, the third is refused.
    let config = config(dir.path(), &model.openai_base_url(), 40);
    let server = Server::start_async(&config, &db, "http://127.0.0.1:9").await;

    let first = chat(&server, CAPPED, false).await;
    assert_eq!(first.status(), 200);
    let second = chat(&server, CAPPED, true).await;
    assert_eq!(second.status(), 200);
    // The stream's spend is written when it ends: read it to the end.
    let streamed = second.text().await.unwrap();
    assert!(streamed.contains("[DONE]"), "{streamed}");
    let after_two: Vec<u64> = model
        .usage_log()
        .iter()
        .map(|u| u.prompt_tokens + u.completion_tokens)
        .collect();
    assert_eq!(after_two.len(), 2);
    assert!(
        after_two.iter().sum::<u64>() >= 40,
        "the two answers pass the limit: {after_two:?}"
    );

    // The third call: refused before any model is asked, whichever wire.
    let mut refused = None;
    for _ in 0..50 {
        let third = chat(&server, CAPPED, false).await;
        if third.status() == 429 {
            refused = Some(third);
            break;
        }
        // The stream's spend lands in the background, just after its end.
        assert_eq!(third.status(), 200, "only until the stream's spend lands");
        tokio::task::yield_now().await;
    }
    let refused = refused.expect("the capped key is refused");
    let retry_after: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=86_400).contains(&retry_after), "{retry_after}");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "key_budget_exceeded", "{body}");
    assert_eq!(body["period"], "day", "{body}");
    assert_eq!(body["dimension"], "tokens", "{body}");
    let asked = model.request_count();
    let anthropic = reqwest::Client::new()
        .post(server.url("/v1/messages"))
        .header("x-api-key", CAPPED)
        .header("anthropic-version", "2023-06-01")
        .json(&json!({"model": "chat", "max_tokens": 100,
                      "messages": [{"role": "user", "content": "Hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(anthropic.status(), 429);
    let body: Value = anthropic.json().await.unwrap();
    assert_eq!(body["type"], "error", "Anthropic's shape: {body}");
    assert_eq!(model.request_count(), asked, "no model was asked");

    // The other key goes on.
    let free = chat(&server, FREE, false).await;
    assert_eq!(free.status(), 200);

    // What is stored per key and model is what the mock reported.
    let usage: Vec<u64> = model
        .usage_log()
        .iter()
        .map(|u| u.prompt_tokens + u.completion_tokens)
        .collect();
    // `/v1/stats` shows the tenant's keys, as `rein stats` does.
    let stats: Value = reqwest::Client::new()
        .get(server.url("/v1/stats"))
        .bearer_auth(FREE)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let capped_tokens: u64 = usage[..usage.len() - 1].iter().sum();
    assert_eq!(
        stats["keys"]["capped"]["tokens"],
        json!(capped_tokens),
        "{stats}"
    );
    assert_eq!(
        stats["keys"]["capped"]["by_model"]["mock/mock-model"]["tokens"],
        json!(capped_tokens),
        "{stats}"
    );
    // `/metrics` counts each key's spend as charged, and the refusals.
    let metrics = reqwest::Client::new()
        .get(server.url("/metrics"))
        .bearer_auth(FREE)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let value = |series: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(series))
            .unwrap_or_else(|| panic!("no {series} in\n{metrics}"))
            .trim()
            .parse()
            .unwrap()
    };
    assert_eq!(
        value(r#"rein_gateway_key_tokens_total{tenant="acme",key="capped"}"#),
        capped_tokens as f64
    );
    assert_eq!(
        value(r#"rein_gateway_key_tokens_total{tenant="acme",key="free"}"#),
        usage[usage.len() - 1] as f64
    );
    assert!(value(r#"rein_gateway_key_cost_usd_total{tenant="acme",key="capped"}"#) > 0.0);
    assert_eq!(
        value(
            r#"rein_gateway_budget_refusals_total{tenant="acme",key="capped",scope="key",period="day"}"#
        ),
        2.0,
        "the chat and the messages call"
    );
    server.kill_async().await;
    let store = rein_store_sqlite::SqliteStore::open(&db).unwrap();
    let rows = store
        .spend(&SpendQuery {
            tenant: None,
            key: None,
            from_day: 0,
            until_day: u32::MAX,
        })
        .await
        .unwrap();
    let of = |key: &str| -> (u64, u64) {
        rows.iter()
            .filter(|r| r.key == key && r.model == "mock/mock-model")
            .fold((0, 0), |(t, c), r| (t + r.tokens, c + r.cost_micros))
    };
    let free_tokens = usage[usage.len() - 1];
    assert_eq!(of("capped").0, capped_tokens, "{rows:?}");
    assert_eq!(of("free").0, free_tokens, "{rows:?}");
    assert!(of("capped").1 > 0, "priced: {rows:?}");
    assert_eq!(
        rows.iter()
            .filter(|r| r.key != "capped" && r.key != "free")
            .count(),
        0
    );
}

/// A tenant's budget holds for its keys together: each key spends within
/// its own (none here), and once their sum reaches the tenant's limit both
/// are refused, naming the tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_keys_together_stop_at_the_tenants_budget() {
    let model = metered_model().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rein.db");
    let config = config_with(
        dir.path(),
        &model.openai_base_url(),
        "",
        "[server.quotas.tenants.acme.budget]\ntokens_per_day = 60",
    );
    let server = Server::start_async(&config, &db, "http://127.0.0.1:9").await;
    let mut statuses = Vec::new();
    for key in [CAPPED, FREE, CAPPED, FREE, CAPPED, FREE] {
        let answer = chat(&server, key, false).await;
        let status = answer.status().as_u16();
        statuses.push(status);
        if status == 429 {
            let body: Value = answer.json().await.unwrap();
            assert_eq!(body["error"]["code"], "tenant_budget_exceeded", "{body}");
            assert_eq!(body["tenant"], "acme", "{body}");
        }
    }
    let answered: u64 = model
        .usage_log()
        .iter()
        .map(|u| u.prompt_tokens + u.completion_tokens)
        .sum();
    let served = statuses.iter().filter(|s| **s == 200).count();
    assert!(
        served >= 2,
        "both keys spent before the limit: {statuses:?}"
    );
    assert!(answered >= 60, "the limit was reached: {answered} tokens");
    // Once refused, every later call of either key is refused too.
    let first_refusal = statuses.iter().position(|s| *s == 429).unwrap();
    assert!(
        statuses[first_refusal..].iter().all(|s| *s == 429),
        "{statuses:?}"
    );
    server.kill_async().await;
}

/// A key without a budget is charged behind its answers
/// (`rein_server::gateway::spend_book`): a server stopped by SIGTERM writes what
/// the book held before it exits, call for call what the mock reported,
/// whole answers and a stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbudgeted_keys_spend_is_written_behind_and_kept_by_a_graceful_stop() {
    let model = metered_model().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rein.db");
    let config = config(dir.path(), &model.openai_base_url(), 1_000_000);
    let mut server = Server::start_async(&config, &db, "http://127.0.0.1:9").await;
    for stream in [false, true, false] {
        let answer = chat(&server, FREE, stream).await;
        assert_eq!(answer.status(), 200);
        // A stream is charged when it ends: read it to the end.
        answer.bytes().await.unwrap();
    }
    let reported: u64 = model
        .usage_log()
        .iter()
        .map(|u| u.prompt_tokens + u.completion_tokens)
        .sum();
    assert_eq!(model.usage_log().len(), 3);
    server.signal(nix::sys::signal::Signal::SIGTERM);
    let status = tokio::task::spawn_blocking(move || {
        let status = server.wait_exit(std::time::Duration::from_secs(60));
        (status, server.log_tail())
    })
    .await
    .unwrap();
    assert!(status.0.success(), "{:?}\n{}", status.0, status.1);
    let store = rein_store_sqlite::SqliteStore::open(&db).unwrap();
    let rows = store
        .spend(&SpendQuery {
            tenant: None,
            key: Some("free".to_owned()),
            from_day: 0,
            until_day: u32::MAX,
        })
        .await
        .unwrap();
    let tokens: u64 = rows.iter().map(|r| r.tokens).sum();
    assert_eq!(tokens, reported, "{rows:?}");
    assert!(rows.iter().all(|r| r.cost_micros > 0), "priced: {rows:?}");
}
