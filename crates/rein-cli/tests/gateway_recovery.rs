//! The gateway retries the model it was asked for when that is worth it
//! (issue 35, item 3), through a real `rein serve` and two mock models over
//! loopback: a primary whose faults are scripted, and a fallback.
//!
//! - A 429 with `Retry-After: 1` is waited out and answered by the primary
//!   (streamed or not): `Rein-Fallback: false`, the fallback never asked,
//!   the second request at least the server's wait after the first.
//! - A single 500 is answered by the primary's retry.
//! - A `Retry-After` above `retry_after_max` falls back at once, and so
//!   does a 500 on a binding with `retry_before_fallback = 0`.
//! - A timed-out call is not sent again (it may be billed twice) unless
//!   its binding says `retry_timeouts = true`.
//! - Every same-model retry is counted (`rein_retries_total`).
//! - A call cut by rein's own deadline (the binding's `deadline` here) is
//!   not the provider's failure: its breaker arm stays closed.
//! - A 429 is a cooldown of its (provider, model), not a pause of the
//!   provider nor a failure of its breaker arm: a burst of 429s on one
//!   model leaves another model of the same provider answering.
//!
//! - A flapping primary whose circuit opened is used again once it
//!   recovers: short breaks (1 s) that double on each failed probe.
//!
//! The tests synchronize on the answers and the mocks' request logs; they
//! assert lower bounds of time (the server's wait), never upper ones.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use rein_testkit::RetryAfter;
use rein_testkit::mock_model::{MockModel, MockModelConfig, Reply};
use serde_json::{Value, json};

mod common;
use common::Server;

/// The gateway's bearer key and its SHA-256 (`printf %s KEY | sha256sum`).
const KEY: &str = "rein-gateway-key";
const KEY_SHA256: &str = "5266a8d2b07490eb2852a8a32974e26c4c24a59701709187f794d75d1b323310";

fn config(dir: &std::path::Path, primary: &str, backup: &str) -> std::path::PathBuf {
    let text = format!(
        r#"
[providers.primary]
kind = "openai"
base_url = "{primary}"
max_output_tokens = {{ "primary-model" = 4096, "other-model" = 4096 }}

[providers.backup]
kind = "openai"
base_url = "{backup}"
max_output_tokens = {{ "backup-model" = 4096 }}

# The defaults: one same-model retry, Retry-After waited up to 5 s.
[models.main]
provider = "primary"
model = "primary-model"
fallbacks = [{{ provider = "backup", model = "backup-model" }}]

# No same-model retry: every transient failure falls back at once.
[models.strict]
provider = "primary"
model = "primary-model"
fallbacks = [{{ provider = "backup", model = "backup-model" }}]
retry_before_fallback = 0

# Another model of the primary's provider, alone.
[models.other]
provider = "primary"
model = "other-model"

# A short default deadline for calls that send no Rein-Deadline-Ms.
[models.short]
provider = "primary"
model = "primary-model"
deadline = "1500ms"

# Waits out at most half a second of Retry-After.
[models.brief]
provider = "primary"
model = "primary-model"
fallbacks = [{{ provider = "backup", model = "backup-model" }}]
retry_after_max = "500ms"

# The primary again, under a short per-attempt timeout.
[providers.hasty]
kind = "openai"
base_url = "{primary}"
timeout = "1s"
max_output_tokens = {{ "primary-model" = 4096 }}

# A timed-out generation is not sent again (it may be billed) ...
[models.hasty]
provider = "hasty"
model = "primary-model"
fallbacks = [{{ provider = "backup", model = "backup-model" }}]

# Alone, with no fallback: a timeout is still not sent again.
[models.hasty_alone]
provider = "hasty"
model = "primary-model"

# ... unless the binding says so.
[models.hasty_resend]
provider = "hasty"
model = "primary-model"
fallbacks = [{{ provider = "backup", model = "backup-model" }}]
retry_timeouts = true

# Short breaks that grow: a flapping provider is probed again within
# seconds, less often while it keeps failing.
[breakers.provider]
consecutive_failures = 3
break_duration = "1s"
max_break_duration = "4s"
close_after_successes = 1

[server]
metrics_tenants = ["acme"]

[[server.api_keys]]
tenant = "acme"
sha256 = "{KEY_SHA256}"
name = "recovery-test"
"#
    );
    std::fs::write(dir.join("rein.toml"), text).unwrap();
    dir.join("rein.toml")
}

struct Setup {
    primary: MockModel,
    backup: MockModel,
    server: Server,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

async fn setup() -> Setup {
    let primary = MockModel::start_with(MockModelConfig::default().with_fallback_text("primary"))
        .await
        .unwrap();
    let backup = MockModel::start_with(MockModelConfig::default().with_fallback_text("backup"))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        dir.path(),
        &primary.openai_base_url(),
        &backup.openai_base_url(),
    );
    let server = Server::start_with_env(&config, &dir.path().join("rein.db"), &[]);
    Setup {
        primary,
        backup,
        server,
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap(),
        _dir: dir,
    }
}

impl Setup {
    /// Asks `model` once; the response (its body read) and which model
    /// answered (`Rein-Model`, `Rein-Fallback`).
    async fn ask(&self, model: &str, stream: bool) -> (u16, String, String, String) {
        let response = self
            .client
            .post(self.server.url("/v1/chat/completions"))
            .bearer_auth(KEY)
            .header("content-type", "application/json")
            .body(
                json!({
                    "model": model,
                    "stream": stream,
                    "messages": [{"role": "user", "content": "Hi."}],
                })
                .to_string(),
            )
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let (answered, fell_back) = (header("rein-model"), header("rein-fallback"));
        let body = response.text().await.unwrap();
        (status, answered, fell_back, body)
    }

    async fn metrics(&self) -> String {
        self.client
            .get(self.server.url("/metrics"))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

/// The value of the counter line that starts with `series`, 0 when absent.
fn counter(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

const MODEL_RETRIES: &str = "rein_retries_total{kind=\"model\",target=\"primary\"}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_retry_after_is_waited_out_on_the_primary_streamed_or_not() {
    let s = setup().await;
    for stream in [false, true] {
        let before = s.primary.request_count();
        s.primary
            .push_reply(Reply::rate_limited(Some(RetryAfter::Seconds(1))));
        let (status, answered, fell_back, body) = s.ask("main", stream).await;
        assert_eq!(status, 200, "stream {stream}: {body}");
        assert_eq!(answered, "primary/primary-model", "stream {stream}");
        assert_eq!(fell_back, "false", "stream {stream}");
        assert!(body.contains("primary"), "{body}");
        // The 429, then the retry after the server's wait.
        let arrivals = s.primary.arrivals();
        assert_eq!(arrivals.len(), before + 2, "stream {stream}");
        let waited = arrivals[before + 1].saturating_duration_since(arrivals[before]);
        assert!(waited >= Duration::from_secs(1), "retried after {waited:?}");
    }
    assert_eq!(s.backup.request_count(), 0, "the fallback was never asked");
    let metrics = s.metrics().await;
    assert_eq!(counter(&metrics, MODEL_RETRIES), 2, "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_500_is_served_by_the_primarys_retry() {
    let s = setup().await;
    s.primary.push_reply(Reply::server_error());
    let (status, answered, fell_back, body) = s.ask("main", false).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (answered.as_str(), fell_back.as_str()),
        ("primary/primary-model", "false")
    );
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "primary");
    assert_eq!(s.primary.request_count(), 2, "the 500 and its retry");
    assert_eq!(s.backup.request_count(), 0);
    assert_eq!(counter(&s.metrics().await, MODEL_RETRIES), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_retry_after_or_no_retry_configured_falls_back_at_once() {
    let s = setup().await;
    // retry_before_fallback = 0: a single 500 falls back.
    s.primary.push_reply(Reply::server_error());
    let (status, answered, fell_back, body) = s.ask("strict", false).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (answered.as_str(), fell_back.as_str()),
        ("backup/backup-model", "true")
    );
    assert_eq!(s.primary.request_count(), 1, "the primary was not retried");

    // Above the default retry_after_max (5 s): the fallback answers now.
    s.primary
        .push_reply(Reply::rate_limited(Some(RetryAfter::Seconds(30))));
    let (status, answered, fell_back, body) = s.ask("main", false).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (answered.as_str(), fell_back.as_str()),
        ("backup/backup-model", "true")
    );
    assert_eq!(s.primary.request_count(), 2, "the primary was not retried");
    assert_eq!(s.backup.request_count(), 2);
    assert_eq!(counter(&s.metrics().await, MODEL_RETRIES), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_max_bounds_the_wait_on_the_primary() {
    let s = setup().await;
    s.primary
        .push_reply(Reply::rate_limited(Some(RetryAfter::Seconds(1))));
    let (status, answered, fell_back, body) = s.ask("brief", false).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (answered.as_str(), fell_back.as_str()),
        ("backup/backup-model", "true")
    );
    assert_eq!(s.primary.request_count(), 1, "1 s is above retry_after_max");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_call_is_resent_only_when_the_binding_says_so() {
    let s = setup().await;
    let slow = || Reply::text("late").delayed(Duration::from_secs(3));
    // Not resent: the fallback answers after the one timeout.
    s.primary.push_reply(slow());
    let (status, answered, fell_back, body) = s.ask("hasty", false).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (answered.as_str(), fell_back.as_str()),
        ("backup/backup-model", "true")
    );
    assert_eq!(s.primary.request_count(), 1, "the timed-out call, once");

    // retry_timeouts = true: the primary is asked again and answers.
    s.primary.push_reply(slow());
    let (status, answered, fell_back, body) = s.ask("hasty_resend", false).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (answered.as_str(), fell_back.as_str()),
        ("hasty/primary-model", "false")
    );
    assert_eq!(s.primary.request_count(), 3, "the timeout and its resend");

    // Without a fallback, the retry policy does not resend it either: 504,
    // sent once.
    s.primary.push_reply(slow());
    let (status, _, _, body) = s.ask("hasty_alone", false).await;
    assert_eq!(status, 504, "{body}");
    assert_eq!(s.primary.request_count(), 4, "the timed-out call, once");
    assert_eq!(
        counter(
            &s.metrics().await,
            "rein_retries_total{kind=\"model\",target=\"hasty\"}"
        ),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_on_one_model_leave_another_model_of_the_provider_answering() {
    let s = setup().await;
    // More 429s in a row than the provider arm's consecutive_failures (3),
    // without Retry-After: each falls back at once, none counts against
    // the provider's arm.
    for _ in 0..6 {
        s.primary.push_reply(Reply::rate_limited(None));
        let (status, answered, _, body) = s.ask("main", false).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(answered, "backup/backup-model");
    }
    let (status, answered, _, body) = s.ask("other", false).await;
    assert_eq!(status, 200, "the provider's circuit stayed closed: {body}");
    assert_eq!(answered, "primary/other-model");

    // A Retry-After far beyond the call's deadline cools the model that
    // got it down: its binding moves on at once, without asking it...
    s.primary
        .push_reply(Reply::rate_limited(Some(RetryAfter::Seconds(300))));
    let (status, answered, _, body) = s.ask("main", false).await;
    assert_eq!(
        (status, answered.as_str()),
        (200, "backup/backup-model"),
        "{body}"
    );
    let asked = s.primary.request_count();
    let (status, answered, _, body) = s.ask("main", false).await;
    assert_eq!(
        (status, answered.as_str()),
        (200, "backup/backup-model"),
        "{body}"
    );
    assert_eq!(
        s.primary.request_count(),
        asked,
        "a cooled-down model is not asked"
    );
    // ... while the provider's other model answers (a pause of the whole
    // provider would refuse it: 300 s do not fit its deadline).
    let (status, answered, _, body) = s.ask("other", false).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(answered, "primary/other-model");
    assert_eq!(s.primary.request_count(), asked + 1);
    let metrics = s.metrics().await;
    assert!(
        !metrics.contains("rein_breaker_transitions_total{arm=\"provider\",name=\"primary\",transition=\"opened\"}"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_by_reins_own_deadline_is_never_the_providers_failure() {
    let s = setup().await;
    // More cuts in a row than the provider arm's consecutive_failures (3):
    // the binding's 1.5 s deadline ends each call before the model answers.
    for n in 1..=6 {
        s.primary
            .push_reply(Reply::text("late").delayed(Duration::from_secs(4)));
        let (status, _, _, body) = s.ask("short", false).await;
        assert_eq!(status, 504, "{body}");
        assert_eq!(s.primary.request_count(), n, "each call was sent");
    }
    // The provider was never blamed: its other model answers.
    let (status, answered, _, body) = s.ask("other", false).await;
    assert_eq!(status, 200, "the provider's circuit stayed closed: {body}");
    assert_eq!(answered, "primary/other-model");
    let metrics = s.metrics().await;
    assert!(
        !metrics.contains(
            "rein_breaker_transitions_total{arm=\"provider\",name=\"primary\",transition=\"opened\"}"
        ),
        "{metrics}"
    );
}

impl Setup {
    /// How long the primary's provider arm still refuses calls, as
    /// `GET /v1/breakers` says (`None` unless open).
    async fn primary_reopens_in(&self) -> Option<Duration> {
        let list: Value = self
            .client
            .get(self.server.url("/v1/breakers"))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        list["arms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["kind"] == "provider" && a["name"] == "primary")
            .and_then(|a| a["retry_after_ms"].as_u64())
            .map(Duration::from_millis)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_primary_is_used_again_once_it_recovers() {
    let s = setup().await;
    // Three 500s in a row (a call and its same-model retry, then the next
    // call) open the arm: the fallback answers, and goes on answering
    // while the arm is open.
    s.primary.push_replies([
        Reply::server_error(),
        Reply::server_error(),
        Reply::server_error(),
    ]);
    for _ in 0..2 {
        let (_, answered, _, _) = s.ask("main", false).await;
        assert_eq!(answered, "backup/backup-model");
    }
    let first = s.primary_reopens_in().await.expect("the arm opened");
    assert!(
        first <= Duration::from_secs(1),
        "the first break: {first:?}"
    );
    let (_, answered, _, _) = s.ask("main", false).await;
    assert_eq!(answered, "backup/backup-model");
    assert_eq!(s.primary.request_count(), 3, "an open arm is not called");

    // The break over (as the arm says), its probe fails: the arm reopens
    // for twice as long.
    tokio::time::sleep(first).await;
    s.primary.push_reply(Reply::server_error());
    let (_, answered, _, _) = s.ask("main", false).await;
    assert_eq!(answered, "backup/backup-model");
    assert_eq!(s.primary.request_count(), 4, "one probe");
    let second = s.primary_reopens_in().await.expect("the arm reopened");
    assert!(
        second > Duration::from_secs(1),
        "a longer break: {second:?}"
    );

    // Recovered: once the break is over, the probe answers and the
    // primary is used again.
    tokio::time::sleep(second).await;
    let (status, answered, fell_back, body) = s.ask("main", false).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (answered.as_str(), fell_back.as_str()),
        ("primary/primary-model", "false")
    );
    assert_eq!(s.primary_reopens_in().await, None, "closed again");
    let metrics = s.metrics().await;
    let transitions = |t: &str| {
        counter(
            &metrics,
            &format!(
                "rein_breaker_transitions_total{{arm=\"provider\",name=\"primary\",transition=\"{t}\"}}"
            ),
        )
    };
    assert_eq!(
        (transitions("opened"), transitions("closed")),
        (2, 1),
        "{metrics}"
    );
}

/// A healthy stream that outlasts its provider's `timeout` (1 s here; 60 s
/// by default) reaches the client whole and is sent upstream once: the
/// timeout bounds a non-streamed call, a stream is bounded by its progress
/// (issue 35, item 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_stream_longer_than_the_providers_timeout_is_not_cut() {
    let words = "word ".repeat(30);
    let slow = MockModel::start_with(
        MockModelConfig::new([Reply::text(&words)]).with_event_interval(Duration::from_millis(100)),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"
[providers.slowpoke]
kind = "openai"
base_url = "{}"
timeout = "1s"
max_output_tokens = {{ "slow-model" = 4096 }}

[models.long]
provider = "slowpoke"
model = "slow-model"

[[server.api_keys]]
tenant = "acme"
sha256 = "{KEY_SHA256}"
name = "recovery-test"
"#,
        slow.openai_base_url()
    );
    std::fs::write(dir.path().join("rein.toml"), text).unwrap();
    let server = Server::start_with_env(
        &dir.path().join("rein.toml"),
        &dir.path().join("rein.db"),
        &[],
    );
    let started = std::time::Instant::now();
    let body = reqwest::Client::new()
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .body(
            json!({"model": "long", "stream": true,
                   "messages": [{"role": "user", "content": "Hi."}]})
            .to_string(),
        )
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        started.elapsed() > Duration::from_secs(1),
        "the stream outlasted the provider's timeout"
    );
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
    assert!(!body.contains("\"error\""), "{body}");
    assert_eq!(slow.request_count(), 1, "sent upstream once");
}
