//! Fixtures for the run modules' unit tests: a small agent, stored records
//! and a run context over a real SQLite store in a temp dir.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_core::Timestamp;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use rein_core::deadline::BudgetLimits;
use rein_core::idempotency::Normalizer;
use rein_core::loop_guard::LoopGuardConfig;
use rein_core::retry::RetryPolicy;
use rein_core::{Event, EventData, Instant, LatencyProfile, RunId, TenantId, ToolClass};
use rein_store::{Checkpoint, NewRun, RunRecord, Store};
use rein_store_sqlite::SqliteStore;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::ctx::{Lineage, ModelRetryUse, Retries, RunCtx};
use super::emitter::Emitter;
use super::engine::Engine;
use super::guarded::millis;
use super::step::LoopState;
use super::{AgentBinding, ArgValidator, ToolBinding};
use crate::provider::ScriptedProvider;
use crate::tool_http::HttpTarget;

/// The read tool of [`agent`].
pub(super) const READ: &str = "get_order";
/// The idempotent write of [`agent`].
pub(super) const WRITE: &str = "update_order";

/// A tool of `class` at an address nothing listens on: handler tests never
/// call it.
fn tool(name: &str, class: ToolClass) -> ToolBinding {
    ToolBinding {
        name: name.to_owned(),
        class,
        latency: LatencyProfile::new(
            Duration::from_millis(10),
            Duration::from_millis(100),
            Duration::from_millis(250),
            100,
        )
        .unwrap(),
        normalizer: Normalizer::default(),
        target: HttpTarget {
            name: name.to_owned(),
            url: "http://127.0.0.1:9/".to_owned(),
            method: reqwest::Method::POST,
            headers: BTreeMap::new(),
            idempotency_header: rein_core::registry::DEFAULT_IDEMPOTENCY_HEADER.to_owned(),
            status_url: None,
            max_result_bytes: 1024,
        }
        .into(),
        resource_group: None,
        self_heal_allowance: None,
        declared: Default::default(),
    }
}

/// An agent with a read and a write, 10 steps and 20 s.
pub(super) fn agent() -> AgentBinding {
    let provider =
        ScriptedProvider::from_json("scripted", &json!({"turns": []}).to_string()).unwrap();
    AgentBinding {
        name: "desk".into(),
        model: "m".into(),
        system_prompt: "You adjust orders.".into(),
        provider: Arc::new(provider),
        price: None,
        max_output_tokens: None,
        tool_definitions: vec![],
        tools: [
            tool(READ, ToolClass::Read),
            tool(WRITE, ToolClass::IdempotentWrite),
        ]
        .into_iter()
        .map(|t| (t.name.clone(), t))
        .collect(),
        budget: BudgetLimits::new(Duration::from_secs(20))
            .unwrap()
            .with_steps(10)
            .unwrap(),
        retry: RetryPolicy::default(),
        loop_guard: LoopGuardConfig::default(),
        model_latency: LatencyProfile::new(
            Duration::from_millis(5),
            Duration::from_millis(50),
            Duration::from_millis(100),
            0,
        )
        .unwrap(),
        on_failure: rein_core::FailurePolicy::default(),
        compensation_reserve: rein_core::Ratio::new("r", 0.2).unwrap(),
        compensations: BTreeMap::new(),
        group_limits: BTreeMap::new(),
        group_rates: BTreeMap::new(),
        fallbacks: Vec::new(),
        context_fallbacks: Vec::new(),
        provider_limits: BTreeMap::new(),
        provider_tokens: BTreeMap::new(),
        model_retry: Default::default(),
        fan_out: Default::default(),
        planner: Default::default(),
        approval: Default::default(),
    }
}

/// The id of the fixtures' run.
pub(super) fn run_id() -> RunId {
    RunId::new("r-1").unwrap()
}

/// The record of a run of [`agent`] created at 1,000 ms.
pub(super) fn record() -> RunRecord {
    RunRecord::new(NewRun {
        run_id: run_id(),
        tenant: TenantId::new("t").unwrap(),
        agent: "desk".into(),
        input: "Move order A-1.".into(),
        parent_run_id: None,
        budget: json!({}),
        created_at_ms: Timestamp::from_millis(1_000),
        trace_parent: None,
    })
}

/// An event of the fixtures' run.
pub(super) fn event(step: u32, at_ms: Timestamp, data: impl Into<EventData>) -> Event {
    Event {
        run_id: run_id(),
        seq: 0,
        step,
        intent_id: None,
        attempt_id: None,
        idempotency_key: None,
        at_ms,
        data: data.into(),
    }
}

/// The checkpoint of `state`'s last step in the whole form that releases
/// before checkpoint deltas wrote after every step (the code as it was):
/// old runs are stored so, and must still restore.
pub(super) fn whole_checkpoint(
    run_id: &RunId,
    state: &LoopState,
    provider_calls: u32,
    now: Instant,
    at_ms: Timestamp,
) -> Checkpoint {
    Checkpoint {
        run_id: run_id.clone(),
        step: state.step,
        messages: json!(state.messages),
        completed_intents: state
            .calls
            .iter()
            .filter(|c| c.outcome.is_ok())
            .map(|c| c.planned.intent_id.clone())
            .collect(),
        consumed: state.budget.used(),
        elapsed_ms: state.elapsed_before_ms + millis(now.saturating_duration_since(state.started)),
        state: json!({
            "calls": state.calls,
            "facts": state.progress.facts(),
            "tools_tried": state.progress.tools_tried(),
            "provider_calls": provider_calls,
        }),
        at_ms,
    }
}

/// A real SQLite store in a temp dir, and an engine over it.
pub(super) struct Bench {
    pub(super) store: Arc<dyn Store>,
    pub(super) engine: Engine,
    _dir: tempfile::TempDir,
}

impl Bench {
    pub(super) fn new() -> Bench {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("r.db")).unwrap());
        let engine = Engine::builder(store.clone()).rng_seed(7).build().unwrap();
        Bench {
            store,
            engine,
            _dir: dir,
        }
    }

    /// The context of a root run of `agent`, not claimed (a handler test
    /// commits nothing through it).
    pub(super) fn ctx<'a>(
        &'a self,
        agent: &'a AgentBinding,
        validator: &'a dyn ArgValidator,
    ) -> RunCtx<'a> {
        RunCtx {
            run_id: run_id(),
            tenant: TenantId::new("t").unwrap(),
            input: "Move order A-1.".into(),
            agent,
            store: &self.store,
            emitter: Emitter::new(run_id(), self.engine.clock.clone(), None),
            provider_calls: std::sync::atomic::AtomicU32::new(0),
            last_input_tokens: std::sync::atomic::AtomicU64::new(0),
            model_failures: Default::default(),
            cancel: CancellationToken::new(),
            lost: CancellationToken::new(),
            interrupt: CancellationToken::new(),
            store_away: std::sync::Mutex::new(None),
            claim_owner: "test".into(),
            settling: std::sync::atomic::AtomicBool::new(false),
            validator,
            lineage: Lineage::root(rein_core::governor::Class::Interactive),
            child_usage: std::sync::Mutex::new(HashMap::new()),
            models: std::sync::Mutex::new(Vec::new()),
            model_retries: ModelRetryUse::default(),
            retries: Retries::default(),
        }
    }
}
