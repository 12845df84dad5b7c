//! rein around a program's own agent loop, with two in-process tools.
//!
//! The loop is this program's: a scripted "model" (a fixed plan) decides
//! each step, and each decision goes through rein's guarded call
//! ([`RunHandle::call`]): the tool's class, its idempotency key, the
//! write-ahead ledger, retries, the run's one deadline. The tools are
//! async Rust functions ([`InProcessTool`]) that reach the order desk with
//! the program's own HTTP client, passing rein's key on.
//!
//! Kill it mid-run and start it again with `--resume RUN_ID`: the loop
//! runs from its start, every action already recorded answers from the
//! ledger, the move in doubt is sent again under its key (the desk
//! deduplicates), and the email is sent once.
//!
//! ```text
//! cargo run -p rein-engine --example embed_own_loop -- --desk http://127.0.0.1:PORT --data /tmp/embed.db
//! cargo run -p rein-engine --example embed_own_loop -- --desk … --data /tmp/embed.db --resume RUN_ID
//! ```
//!
//! `--desk` is an order desk's base URL (`rein_testkit::order_desk`); its
//! test, `tests/embed_own_loop.rs`, starts one, kills this program while
//! the desk holds its move, and resumes it.

use std::sync::Arc;
use std::time::Duration;

use rein_core::deadline::BudgetLimits;
use rein_core::{Category, Effect, Failure, LatencyProfile, ToolClass};
use rein_engine::run::{AcceptAll, AgentBinding, Engine, RunRequest, ToolBinding};
use rein_engine::tool::InProcessTool;
use rein_engine::tool::in_process::Call;
use rein_store_sqlite::SqliteStore;
use serde_json::{Value, json};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The program's plan: what its "model" decides, step by step, each under
/// the intent name it gives the action.
fn plan() -> Vec<(&'static str, Value, &'static str)> {
    vec![
        (
            "move_delivery",
            json!({"order_id": "A-1001", "delivery_date": "2026-12-24"}),
            "move-order",
        ),
        (
            "email_buyer",
            json!({"to": "buyer@example.com", "subject": "Your order moves", "body": "Christmas Eve"}),
            "tell-buyer",
        ),
    ]
}

/// An in-process tool that posts `args` to the desk's `tool`, with rein's
/// key as `Idempotency-Key` when the class has one.
fn desk_tool(
    http: reqwest::Client,
    desk: String,
    name: &'static str,
    tool: &'static str,
) -> InProcessTool {
    InProcessTool::new(name, move |args: Value, call: Call| {
        let (http, url) = (http.clone(), format!("{desk}/tools/{tool}"));
        async move {
            let mut request = http.post(url).json(&args);
            if let Some(key) = &call.key {
                request = request.header("Idempotency-Key", key.as_str());
            }
            let response = request.send().await.map_err(|e| {
                Failure::new(name, Category::Transient)
                    .with_effect(if e.is_connect() {
                        Effect::NotApplied
                    } else {
                        Effect::MaybeApplied
                    })
                    .with_human_message(format!("{name}: {e}"))
            })?;
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            if let Some(failure) = Failure::from_http_status(
                name,
                status,
                retry_after.as_deref(),
                std::time::SystemTime::now(),
            ) {
                return Err(failure);
            }
            response.json::<Value>().await.map_err(|e| {
                Failure::new(name, Category::Transient)
                    .with_effect(Effect::MaybeApplied)
                    .with_human_message(format!("{name}: unreadable answer: {e}"))
            })
        }
    })
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let desk = flag("--desk").ok_or("--desk URL is required")?;
    let data = flag("--data").ok_or("--data PATH is required")?;
    let resume = flag("--resume");

    let store = Arc::new(SqliteStore::open(&data)?);
    let engine = Engine::builder(store).build()?;
    let http = reqwest::Client::new();
    let latency = LatencyProfile::new(
        Duration::from_millis(50),
        Duration::from_millis(500),
        Duration::from_secs(2),
        0,
    )?;
    let agent = AgentBinding::new(
        "embedded",
        BudgetLimits::new(Duration::from_secs(60))?.with_steps(10)?,
    )
    .with_tool(ToolBinding::adapter(
        "move_delivery",
        ToolClass::IdempotentWrite,
        latency,
        desk_tool(
            http.clone(),
            desk.clone(),
            "move_delivery",
            "update_delivery_time",
        ),
    ))
    .with_tool(ToolBinding::adapter(
        "email_buyer",
        ToolClass::Irreversible,
        latency,
        desk_tool(http, desk, "email_buyer", "send_email"),
    ));

    let mut run = match &resume {
        Some(id) => {
            engine
                .rejoin(&agent, &AcceptAll, &rein_core::RunId::new(id.clone())?)
                .await?
        }
        None => {
            let request = RunRequest {
                input: "Move order A-1001 to Christmas Eve and tell the buyer.".into(),
                ..RunRequest::default()
            };
            engine.begin(&agent, &AcceptAll, request).await?
        }
    };
    println!("run: {}", run.run_id());

    // The program's own loop.
    let mut all_ok = true;
    for (tool, args, intent) in plan() {
        println!("calling {tool} as {intent}");
        let result = run.call(tool, args, intent).await;
        match &result.outcome {
            Ok(value) => println!("  {intent}: ok {value}"),
            Err(failure) => {
                all_ok = false;
                println!(
                    "  {intent}: {} ({})",
                    failure.category().as_str(),
                    failure.model_message()
                );
                break;
            }
        }
    }
    let output = if all_ok {
        run.finish(Some("moved and told".into())).await?
    } else {
        run.abandon("an action failed").await?
    };
    println!("ended: {}", output.report.outcome.as_str());
    println!("{}", output.report.summary);
    Ok(())
}
