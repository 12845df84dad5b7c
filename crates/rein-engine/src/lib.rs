//! rein-engine: the async run engine — the run loop and the guarded call,
//! tool adapters, model providers, the governor, the ledger and
//! compensation, the reconciler, workers and leases.
//!
//! # Two ways in
//!
//! - **rein drives the loop.** [`run::Engine::run`] runs an agent (its
//!   model, its tools) on a task to an honest end: every model turn and
//!   tool call guarded, checkpointed, resumable ([`run::Engine::resume`]).
//!   Agents usually come from a config file ([`config`], [`bind`]).
//! - **Your program drives the loop.** [`run::Engine::begin`] opens a run
//!   and hands back a [`run::RunHandle`]: each [`call`](run::RunHandle::call)
//!   is the same guarded call (validation, budget, breakers, governor,
//!   idempotency key, write-ahead ledger, retries or a lookup by key),
//!   [`finish`](run::RunHandle::finish) the same settlement and report, and
//!   [`run::Engine::rejoin`] takes the run back after a crash. Tools that
//!   are your own code are [`tool::InProcessTool`]s.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use rein_core::deadline::BudgetLimits;
//! use rein_core::{LatencyProfile, Outcome, ToolClass};
//! use rein_engine::run::{AcceptAll, AgentBinding, Engine, RunRequest, ToolBinding};
//! use rein_engine::tool::InProcessTool;
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let store = Arc::new(rein_store_sqlite::SqliteStore::open(dir.path().join("rein.db"))?);
//! let engine = Engine::builder(store).build()?;
//!
//! // A tool that is the program's own code.
//! let find_order = InProcessTool::new("find_order", |args, _call| async move {
//!     Ok(json!({"order_id": args["order_id"], "status": "shipped"}))
//! });
//! let ms = Duration::from_millis;
//! let latency = LatencyProfile::new(ms(5), ms(20), ms(50), 0)?;
//! let agent = AgentBinding::new("support", BudgetLimits::new(Duration::from_secs(30))?)
//!     .with_tool(ToolBinding::adapter("find_order", ToolClass::Read, latency, find_order));
//!
//! // The program's loop: its model decided to look the order up.
//! let request = RunRequest { input: "Where is order A-1?".into(), ..RunRequest::default() };
//! let mut run = engine.begin(&agent, &AcceptAll, request).await?;
//! let found = run.call("find_order", json!({"order_id": "A-1"}), "find-a1").await;
//! let order = found.outcome.map_err(|f| f.human_message().to_owned())?;
//! assert_eq!(order["status"], "shipped");
//! let output = run.finish(Some("It shipped.".into())).await?;
//! assert_eq!(output.report.outcome, Outcome::Succeeded);
//! # Ok(())
//! # }
//! ```
//!
//! # Modules
//!
//! | module | holds |
//! | --- | --- |
//! | [`run`] | the engine, the run loop, the guarded call, settlement, resume, the public guard API |
//! | [`tool`] | how an attempt reaches a tool: http, command, in-process, the [`tool::ToolAdapter`] seam |
//! | [`provider`] | model providers: OpenAI-compatible, Anthropic, scripted |
//! | [`config`], [`bind`] | the TOML config, validated, and bound into agents |
//! | `reconcile` (unix) | settles ledger records left in doubt from the tools' own state |
//! | [`metrics`], [`telemetry`], [`log`] | what every decision leaves behind |
//! | [`webhook`] | the dispatcher that sends the webhook outbox, signed, at least once |
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bind;
mod clock;
pub mod config;
pub mod crash;
pub mod handoff;
#[cfg(unix)]
pub mod lease;
pub mod log;
pub mod metrics;
pub mod provider;
#[cfg(unix)]
pub mod reconcile;
pub mod recovery;
pub mod run;
#[cfg(feature = "sabotage")]
pub mod sabotage;
mod secrets;
pub mod startup;
pub mod telemetry;
#[cfg(feature = "test-util")]
pub mod testing;
pub mod tool;
pub mod webhook;

// The adapters under their former paths, for embedders that import them.
#[cfg(unix)]
pub use tool::command as tool_command;
pub use tool::http as tool_http;

pub use clock::{SystemClock, Timer};
