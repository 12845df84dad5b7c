//! Checkpoint cost by run length: runs of 10, 100 and 400 tool steps of the
//! scripted model over the testkit's loopback order desk, on a SQLite file,
//! each checkpointed two ways in the same process:
//!
//! - `appended`: as the engine checkpoints now, each step's
//!   `CheckpointDelta` (what the step added);
//! - `whole` (the baseline): each step's checkpoint written whole, as
//!   releases before deltas did. A store wrapper applies the engine's delta
//!   to the run's latest checkpoint and commits the result whole instead,
//!   so the rows, their bytes and the SQLite work are the old ones.
//!
//! Bytes are the lengths of the checkpoint rows' JSON columns as stored
//! (`checkpoint_deltas`, or `checkpoints` with one row per step, as
//! before); per-step time is the time between consecutive checkpoint
//! commits, i.e. a whole step: model turn, call, ledger, events and
//! commits. Growth is linear when the total bytes of 400 steps are about
//! 4x those of 100, and the per-step time of the last steps is that of the
//! first.
//!
//! The baseline's engine side is today's (the incremental state digest
//! included): it differs only in the checkpoint written and stored.
//!
//! Run: `cargo bench -p rein-engine --bench checkpoints` (medians over 3
//! runs per length and form; `REIN_BENCH_REPEAT=n` for more). Under
//! `cargo test --benches` it makes one 10-step run of each form.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rein_core::deadline::BudgetLimits;
use rein_core::idempotency::Normalizer;
use rein_core::registry::DEFAULT_IDEMPOTENCY_HEADER;
use rein_core::{LatencyProfile, Outcome, RunId, ToolClass};
use rein_engine::provider::ScriptedProvider;
use rein_engine::run::{AcceptAll, AgentBinding, Engine, RunRequest, ToolBinding};
use rein_engine::tool_http::HttpTarget;
use rein_store::{Checkpoint, Committed, Intercept, Intercepted, StepCommit, Store, StoreError};
use rein_store_sqlite::SqliteStore;
use rein_testkit::order_desk::{GET_ORDER, OrderDesk, UPDATE_DELIVERY_TIME};
use serde_json::{Value, json};

/// The run lengths measured, in model turns that call a tool.
const LENGTHS: [u32; 3] = [10, 100, 400];

/// How a run's checkpoints are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// What a step added (the engine's own form).
    Appended,
    /// The whole checkpoint every step (the baseline).
    Whole,
}

/// Forwards every call to the SQLite store; records when each step's
/// checkpoint became durable, and writes it whole under [`Form::Whole`].
struct Metered {
    form: Form,
    /// The run's latest checkpoint, for [`Form::Whole`].
    whole: Mutex<Option<Checkpoint>>,
    /// (step, when its checkpoint commit returned).
    steps: Mutex<Vec<(u32, Instant)>>,
}

#[async_trait]
impl Intercept for Metered {
    async fn commit_step(
        &self,
        inner: &dyn Store,
        run_id: &RunId,
        mut commit: StepCommit,
    ) -> Result<Committed, StoreError> {
        let step = commit.checkpoint_delta.as_ref().map(|d| d.step);
        if self.form == Form::Whole
            && let Some(delta) = commit.checkpoint_delta.take()
        {
            // What releases before deltas wrote: the whole checkpoint.
            let mut whole = self.whole.lock().unwrap();
            let latest = whole.get_or_insert_with(|| Checkpoint::empty(run_id.clone()));
            latest.apply(delta)?;
            commit.checkpoint = Some(latest.clone());
        }
        let committed = inner.commit_step(run_id, commit).await;
        if let Some(step) = step {
            self.steps.lock().unwrap().push((step, Instant::now()));
        }
        committed
    }
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// `steps` tool calls: an update of one of the three orders to a date no
/// step used, then a read of that order (which now shows the date), so
/// every step learns a new fact and the loop guard never trips.
fn script(steps: u32) -> String {
    let orders = ["A-1001", "A-1002", "A-1003"];
    let mut turns: Vec<Value> = (0..steps)
        .map(|i| {
            let order = orders[(i as usize / 2) % orders.len()];
            let call = if i % 2 == 0 {
                let (day, minute) = (1 + i / 1440, i % 1440);
                let date = format!("2027-01-{day:02}T{:02}:{:02}:00Z", minute / 60, minute % 60);
                json!({"name": UPDATE_DELIVERY_TIME,
                       "arguments": {"order_id": order, "delivery_date": date}})
            } else {
                json!({"name": GET_ORDER, "arguments": {"order_id": order}})
            };
            json!({"tool_calls": [call]})
        })
        .collect();
    turns.push(json!({"text": "Done."}));
    json!({ "turns": turns }).to_string()
}

fn tool(desk: &OrderDesk, name: &str, class: ToolClass) -> ToolBinding {
    ToolBinding {
        name: name.to_owned(),
        class,
        latency: LatencyProfile::new(ms(10), ms(100), ms(250), 100).unwrap(),
        normalizer: Normalizer::default(),
        target: HttpTarget {
            name: name.to_owned(),
            url: desk.tool_url(name),
            method: reqwest::Method::POST,
            headers: BTreeMap::new(),
            idempotency_header: DEFAULT_IDEMPOTENCY_HEADER.to_owned(),
            status_url: Some(format!("{}/tools/{name}/status", desk.base_url())),
            max_result_bytes: 16 * 1024,
        }
        .into(),
        resource_group: Some("order_api".to_owned()),
        self_heal_allowance: None,
        declared: Default::default(),
    }
}

fn agent(desk: &OrderDesk, steps: u32) -> AgentBinding {
    let tools: BTreeMap<String, ToolBinding> = [
        tool(desk, GET_ORDER, ToolClass::Read),
        tool(desk, UPDATE_DELIVERY_TIME, ToolClass::IdempotentWrite),
    ]
    .into_iter()
    .map(|t| (t.name.clone(), t))
    .collect();
    let mut agent = AgentBinding::new(
        "order_desk",
        BudgetLimits::new(Duration::from_secs(600))
            .unwrap()
            .with_steps(steps + 1)
            .unwrap(),
    )
    .with_model(
        Arc::new(ScriptedProvider::from_json("scripted", &script(steps)).unwrap()),
        "scripted",
    )
    .with_system_prompt("You adjust orders.")
    .with_model_latency(LatencyProfile::new(ms(5), ms(50), ms(100), 0).unwrap());
    agent.tools = tools;
    agent
}

/// One run measured.
struct Measured {
    /// Checkpoint bytes stored, per step, in step order.
    bytes: Vec<u64>,
    /// Time of each step after the first (between checkpoint commits), µs.
    step_us: Vec<f64>,
}

/// The stored checkpoint bytes of `run_id`, per step.
fn stored_bytes(db: &Path, run_id: &RunId, form: Form) -> Vec<u64> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let sql = match form {
        Form::Appended => {
            "SELECT LENGTH(messages) + LENGTH(completed_intents) + LENGTH(appended) \
             + LENGTH(state) FROM checkpoint_deltas WHERE run_id = ?1 ORDER BY step"
        }
        Form::Whole => {
            "SELECT LENGTH(messages) + LENGTH(completed_intents) + LENGTH(state) \
             FROM checkpoints WHERE run_id = ?1 ORDER BY step"
        }
    };
    let mut statement = conn.prepare(sql).unwrap();
    statement
        .query_map([run_id.as_str()], |row| row.get::<_, i64>(0))
        .unwrap()
        .map(|n| u64::try_from(n.unwrap()).unwrap())
        .collect()
}

async fn measure(desk: &OrderDesk, form: Form, steps: u32) -> Measured {
    // A file of its own, so that no run pays for another's rows (the
    // baseline's grow to tens of MB) or its WAL.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rein.db");
    let sqlite: Arc<dyn Store> = Arc::new(SqliteStore::open(&db).unwrap());
    let metered = Arc::new(Intercepted::new(
        sqlite.clone(),
        Metered {
            form,
            whole: Mutex::new(None),
            steps: Mutex::new(Vec::new()),
        },
    ));
    let engine = Engine::builder(metered.clone())
        .rng_seed(7)
        .build()
        .unwrap();
    let request = RunRequest {
        input: "Move the delivery dates.".into(),
        ..RunRequest::default()
    };
    let out = engine
        .run(&agent(desk, steps), &AcceptAll, request)
        .await
        .unwrap();
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    assert_eq!(out.report.steps, steps + 1);
    let bytes = stored_bytes(&db, &out.run_id, form);
    assert_eq!(bytes.len(), steps as usize, "one checkpoint per tool step");
    let times = metered.hooks().steps.lock().unwrap().clone();
    assert_eq!(times.len(), steps as usize);
    let step_us = times
        .windows(2)
        .map(|w| w[1].1.duration_since(w[0].1).as_secs_f64() * 1e6)
        .collect();
    Measured { bytes, step_us }
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The medians over one length's runs of one form.
struct Row {
    total_bytes: f64,
    bytes_per_step: f64,
    last_step_bytes: f64,
    step_us: f64,
    first_tenth_us: f64,
    last_tenth_us: f64,
}

fn row(runs: &[Measured]) -> Row {
    let per_run =
        |f: &dyn Fn(&Measured) -> f64| median(&mut runs.iter().map(f).collect::<Vec<_>>());
    let tenth = |m: &Measured, last: bool| {
        let n = (m.step_us.len() / 10).max(1);
        let mut part: Vec<f64> = if last {
            m.step_us[m.step_us.len() - n..].to_vec()
        } else {
            m.step_us[..n].to_vec()
        };
        median(&mut part)
    };
    let total = |m: &Measured| m.bytes.iter().sum::<u64>() as f64;
    Row {
        total_bytes: per_run(&total),
        bytes_per_step: per_run(&|m| total(m) / m.bytes.len() as f64),
        last_step_bytes: per_run(&|m| m.bytes.last().copied().unwrap_or(0) as f64),
        step_us: per_run(&|m| median(&mut m.step_us.clone())),
        first_tenth_us: per_run(&|m| tenth(m, false)),
        last_tenth_us: per_run(&|m| tenth(m, true)),
    }
}

fn name(form: Form) -> &'static str {
    match form {
        Form::Appended => "appended",
        Form::Whole => "whole",
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: one
    // short pass then, to keep the bench compiling and working.
    let quick = !std::env::args().any(|a| a == "--bench");
    let repeat: usize = if quick {
        1
    } else {
        std::env::var("REIN_BENCH_REPEAT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3)
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let desk = runtime.block_on(OrderDesk::start()).unwrap();
    let lengths: &[u32] = if quick { &LENGTHS[..1] } else { &LENGTHS };
    let mut table: Vec<(Form, u32, Row)> = Vec::new();
    for &steps in lengths {
        // Interleaved, so both forms see the same machine load.
        let (mut appended, mut whole) = (Vec::new(), Vec::new());
        for _ in 0..repeat {
            appended.push(runtime.block_on(measure(&desk, Form::Appended, steps)));
            whole.push(runtime.block_on(measure(&desk, Form::Whole, steps)));
        }
        table.push((Form::Appended, steps, row(&appended)));
        table.push((Form::Whole, steps, row(&whole)));
    }
    println!("checkpoints: medians over {repeat} run(s) per length and form");
    println!(
        "{:<9} {:>5} {:>12} {:>10} {:>10} {:>9} {:>10} {:>10}",
        "form",
        "steps",
        "total bytes",
        "bytes/step",
        "last step",
        "µs/step",
        "first 10%",
        "last 10%"
    );
    for (form, steps, r) in &table {
        println!(
            "{:<9} {:>5} {:>12.0} {:>10.0} {:>10.0} {:>9.0} {:>10.0} {:>10.0}",
            name(*form),
            steps,
            r.total_bytes,
            r.bytes_per_step,
            r.last_step_bytes,
            r.step_us,
            r.first_tenth_us,
            r.last_tenth_us
        );
    }
    let find = |form: Form, steps: u32| {
        table
            .iter()
            .find(|(f, s, _)| *f == form && *s == steps)
            .map(|(_, _, r)| r)
    };
    for form in [Form::Appended, Form::Whole] {
        if let (Some(a), Some(b)) = (find(form, 100), find(form, 400)) {
            println!(
                "checkpoints: {:<8} 400 vs 100 steps: total bytes x{:.2}, µs/step x{:.2}; \
                 in the 400-step run, last 10% vs first 10% of steps x{:.2}",
                name(form),
                b.total_bytes / a.total_bytes,
                b.step_us / a.step_us,
                b.last_tenth_us / b.first_tenth_us,
            );
        }
    }
    if let (Some(a), Some(w)) = (find(Form::Appended, 400), find(Form::Whole, 400)) {
        println!(
            "checkpoints: 400 steps, whole/appended: total bytes x{:.1}, µs/step x{:.2}",
            w.total_bytes / a.total_bytes,
            w.step_us / a.step_us,
        );
    }
    runtime.block_on(desk.shutdown()).unwrap();
}
