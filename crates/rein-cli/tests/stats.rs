//! `GET /v1/stats` on a real `rein serve` process over a real SQLite file:
//! the numbers equal what the test's runs did (outcomes, tokens and cost
//! from each run's own report), and one tenant never sees another's runs;
//! `rein stats --server` reads the same numbers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_testkit::order_desk::OrderDesk;
use serde_json::Value;

mod common;
use common::{Server, example_config};

fn sha256(key: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

async fn stats(client: &reqwest::Client, server: &Server, key: &str, query: &str) -> Value {
    let answer = client
        .get(server.url(&format!("/v1/stats{query}")))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    answer.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_count_exactly_the_callers_runs() {
    let (acme, other) = ("rein-stats-acme", "rein-stats-other");
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = example_config(
        dir.path(),
        &format!(
            "[[server.api_keys]]\ntenant = \"acme\"\nsha256 = \"{}\"\n\n\
             [[server.api_keys]]\ntenant = \"other\"\nsha256 = \"{}\"\n",
            sha256(acme),
            sha256(other)
        ),
    );
    let server = Server::start_async(&config, &dir.path().join("rein.db"), desk.base_url()).await;
    let client = reqwest::Client::new();
    let submit = |key: &'static str| {
        client
            .post(server.url("/v1/agents/order_desk/runs"))
            .bearer_auth(key)
            .header("content-type", "application/json")
            .body(r#"{"input": "Move order A-1001."}"#)
            .send()
    };
    let (mut tokens, mut cost, mut outcomes) = (0_u64, 0_u64, Vec::new());
    for key in [acme, acme, other] {
        let answer = submit(key).await.unwrap();
        assert_eq!(answer.status(), 200);
        let run: Value = answer.json().await.unwrap();
        if key == acme {
            let report = &run["report"];
            tokens += report["consumed"]["tokens"].as_u64().unwrap();
            // Reports say dollars; stats sum micro-dollars.
            cost += (report["consumed"]["cost_usd"].as_f64().unwrap() * 1e6).round() as u64;
            outcomes.push(report["outcome"].as_str().unwrap().to_owned());
        }
    }
    assert!(tokens > 0, "the runs consumed tokens");

    let mine = stats(&client, &server, acme, "").await;
    let total = &mine["total"];
    assert_eq!(total["runs"], 2, "{mine}");
    assert_eq!(total["unfinished"], 0, "{mine}");
    let succeeded = outcomes.iter().filter(|o| *o == "succeeded").count() as u64;
    assert_eq!(
        total["outcomes"]["succeeded"].as_u64().unwrap_or(0),
        succeeded
    );
    assert_eq!(total["tokens"], tokens, "{mine}");
    assert_eq!(total["cost_micros"], cost, "{mine}");
    assert_eq!(
        succeeded, 2,
        "the order desk answers every call: {outcomes:?}"
    );
    assert_eq!(total["cost_per_success_micros"], cost / 2);
    assert_eq!(total["success_rate"].as_f64(), Some(1.0));
    assert_eq!(mine["by_agent"]["order_desk"], *total, "{mine}");
    assert!(
        mine.get("truncated").is_none(),
        "the store counts every run: {mine}"
    );
    let models = mine["by_model"].as_object().unwrap();
    assert!(!models.is_empty(), "{mine}");
    for tally in models.values() {
        assert_eq!(tally["runs"], 2, "{mine}");
    }

    // Another tenant's numbers are its own.
    let theirs = stats(&client, &server, other, "").await;
    assert_eq!(theirs["total"]["runs"], 1, "{theirs}");

    // `rein stats --server` reads the same, with the key from the
    // environment, and never prints it.
    let cli = |key: &'static str, args: &'static [&'static str]| {
        let base = server.url("");
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_rein"))
                .args(["stats", "--server", &base])
                .args(args)
                .env("REIN_API_KEY", key)
                .output()
                .unwrap()
        })
    };
    let output = cli(acme, &["--json"]).await.unwrap();
    assert!(output.status.success(), "{output:?}");
    let read: Value = serde_json::from_slice(&output.stdout).unwrap();
    for part in ["total", "by_agent", "by_model", "guardrails"] {
        assert_eq!(read[part], mine[part], "{part}: {read}");
    }
    let output = cli(other, &[]).await.unwrap();
    let table = String::from_utf8(output.stdout).unwrap();
    assert!(table.contains("1 runs (0 unfinished)"), "{table}");
    assert!(
        table.contains("\nby agent\nagent ") && table.contains("\norder_desk "),
        "{table}"
    );
    for output in [
        &table,
        &String::from_utf8_lossy(&output.stderr).into_owned(),
    ] {
        assert!(
            !output.contains(other) && !output.contains(acme),
            "{output}"
        );
    }
    let refused = cli("wrong-key", &[]).await.unwrap();
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("401") && !said.contains("wrong-key"),
        "{said}"
    );

    // The window and the agent filter select.
    let until = mine["until_ms"].as_u64().unwrap();
    let empty = stats(
        &client,
        &server,
        acme,
        &format!("?until={}&since=0", until.min(1)),
    )
    .await;
    assert_eq!(empty["total"]["runs"], 0, "{empty}");
    let nobody = stats(&client, &server, acme, "?agent=nobody").await;
    assert_eq!(nobody["total"]["runs"], 0, "{nobody}");

    let too_long = stats(&client, &server, acme, "?since=0").await;
    assert_eq!(too_long["clamped"], true, "{too_long}");
    assert_eq!(too_long["total"]["runs"], 2, "{too_long}");
    let bad = client
        .get(server.url("/v1/stats?since=soon"))
        .bearer_auth(acme)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let anonymous = client.get(server.url("/v1/stats")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
}
