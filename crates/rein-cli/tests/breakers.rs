//! `GET /v1/breakers` on a real `rein serve` process: a gateway call whose
//! primary provider refuses connections opens that provider's arm (one
//! counted failure opens it in this config); the answer lists the open arm
//! with its remaining break, the fallback's closed arm, and the opening the
//! process shared through its SQLite store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_testkit::mock_model::{MockModel, MockModelConfig};
use serde_json::Value;

mod common;
use common::Server;

/// Two tenants' keys and their SHA-256 (`printf %s KEY | sha256sum`).
const ACME: &str = "rein-gateway-key";
const ACME_SHA256: &str = "5266a8d2b07490eb2852a8a32974e26c4c24a59701709187f794d75d1b323310";
const OTHER: &str = "rein-other-key";
const OTHER_SHA256: &str = "a0cad532c6c631fe0a2afc7b414bb35fb941534a6f96f32097864b85f40e31b7";

/// The break the config sets, in milliseconds.
const BREAK_MS: u64 = 60_000;

fn config(dir: &std::path::Path, model_url: &str) -> std::path::PathBuf {
    let text = format!(
        r#"
[providers.mock]
kind = "openai"
base_url = "{model_url}"
max_output_tokens = {{ "mock-model" = 4096 }}

[providers.dead]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
max_output_tokens = {{ gone = 4096 }}

# A primary nobody answers: every call falls back to the mock.
[models.resilient]
provider = "dead"
model = "gone"
fallbacks = [{{ provider = "mock", model = "mock-model" }}]

[breakers.provider]
consecutive_failures = 1
break_duration = "60s"

[[server.api_keys]]
tenant = "acme"
sha256 = "{ACME_SHA256}"
name = "acme"

[[server.api_keys]]
tenant = "other"
sha256 = "{OTHER_SHA256}"
name = "other"
"#
    );
    std::fs::write(dir.join("rein.toml"), text).unwrap();
    dir.join("rein.toml")
}

async fn breakers(client: &reqwest::Client, server: &Server, key: &str) -> Value {
    let answer = client
        .get(server.url("/v1/breakers"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    answer.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_provider_arm_and_its_shared_opening_are_listed() {
    let model = MockModel::start_with(MockModelConfig::default().with_fallback_text("fallback"))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &model.openai_base_url());
    let server = Server::start_with_env(&config, &dir.path().join("rein.db"), &[]);
    let client = reqwest::Client::new();

    let anonymous = client.get(server.url("/v1/breakers")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let before = breakers(&client, &server, ACME).await;
    assert_eq!(before["arms"], Value::Array(vec![]), "{before}");
    assert_eq!(before["shared"], Value::Array(vec![]), "{before}");

    let chat = client
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(ACME)
        .header("content-type", "application/json")
        .body(r#"{"model": "resilient", "messages": [{"role": "user", "content": "Hi."}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(chat.status(), 200);
    assert_eq!(chat.headers()["rein-fallback"], "true");

    let after = breakers(&client, &server, ACME).await;
    let node = after["node"].as_str().unwrap();
    assert!(!node.is_empty());
    let arms = after["arms"].as_array().unwrap();
    assert_eq!(arms.len(), 2, "{after}");
    let dead = &arms[0];
    assert_eq!(
        (&dead["kind"], &dead["name"], &dead["state"]),
        (&"provider".into(), &"dead".into(), &"open".into()),
        "{after}"
    );
    let retry_after = dead["retry_after_ms"].as_u64().unwrap();
    assert!(retry_after > 0 && retry_after <= BREAK_MS, "{after}");
    let since = dead["since_ms"].as_u64().unwrap();
    assert_eq!(dead["consecutive_failures"], Value::Null);
    let mock = &arms[1];
    assert_eq!(
        (&mock["name"], &mock["state"], &mock["consecutive_failures"]),
        (&"mock".into(), &"closed".into(), &0.into()),
        "{after}"
    );
    assert_eq!(mock["since_ms"], Value::Null);

    let shared = after["shared"].as_array().unwrap();
    assert_eq!(shared.len(), 1, "{after}");
    assert_eq!(shared[0]["arm"], "provider.dead");
    assert_eq!(shared[0]["opened_by"], node);
    let until = shared[0]["open_until_ms"].as_u64().unwrap();
    assert!(
        until > since && until <= since + BREAK_MS + 1_000,
        "the shared opening ends with the local break: {after}"
    );

    // The arms are the process's, not a tenant's: another tenant's key
    // reads the same state.
    let other = breakers(&client, &server, OTHER).await;
    assert_eq!(other["arms"][0]["state"], "open", "{other}");
    assert_eq!(other["shared"], after["shared"]);
}
