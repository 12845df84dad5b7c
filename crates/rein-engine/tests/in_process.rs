//! In-process tools: an async Rust function behind the whole guarded call.
//!
//! The functions keep their own log of what they applied (the in-process
//! stand-in for the order desk's side-effect log), deduplicating by the
//! key rein sends, as a remote tool would. The runs are real: the engine,
//! a scripted model, the SQLite store; paused time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{agent, answer, call, harness, run, script};
use rein_core::event::ToolCallFinished;
use rein_core::{Category, Effect, Failure, LatencyProfile, LedgerStatus, Outcome, ToolClass};
use rein_engine::run::{AgentBinding, ToolBinding};
use rein_engine::tool::InProcessTool;
use rein_engine::tool::in_process::Call;
use rein_testkit::order_desk::Faults;
use serde_json::{Value, json};

const RESERVE: &str = "reserve_stock";
const NOTIFY: &str = "notify_warehouse";

fn latency() -> LatencyProfile {
    let ms = Duration::from_millis;
    LatencyProfile::new(ms(10), ms(50), ms(100), 100).unwrap()
}

/// What an in-process tool applied, by key (the key-less applied under
/// their attempt id).
#[derive(Clone, Default)]
struct Applied(Arc<Mutex<BTreeMap<String, Value>>>);

impl Applied {
    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// A reservation that deduplicates by key; its first `lose` calls apply
/// but lose their answer (a timeout, effect unknown), its first `refuse`
/// are refused before applying.
fn reserve(applied: &Applied, refuse: u32, lose: u32, lookup: bool) -> InProcessTool {
    let calls = Arc::new(AtomicU32::new(0));
    let (store, seen) = (applied.clone(), calls.clone());
    let tool = InProcessTool::new(RESERVE, move |args: Value, call: Call| {
        let (store, seen) = (store.clone(), seen.clone());
        async move {
            let n = seen.fetch_add(1, Ordering::SeqCst) + 1;
            if n <= refuse {
                return Err(Failure::new(RESERVE, Category::Transient)
                    .with_effect(Effect::NotApplied)
                    .with_human_message("the stock service is busy"));
            }
            let key = call
                .key
                .expect("an idempotent write gets its key")
                .as_str()
                .to_owned();
            let result = json!({"reserved": args["sku"], "key": key});
            store.0.lock().unwrap().entry(key).or_insert(result.clone());
            if n <= refuse + lose {
                return Err(Failure::new(RESERVE, Category::Timeout)
                    .with_effect(Effect::MaybeApplied)
                    .with_human_message("the answer was lost"));
            }
            Ok(result)
        }
    });
    if !lookup {
        return tool;
    }
    let store = applied.clone();
    tool.with_lookup(move |key| {
        let store = store.clone();
        async move { Ok(store.0.lock().unwrap().get(key.as_str()).cloned()) }
    })
}

fn with_tools(mut a: AgentBinding, tools: Vec<ToolBinding>) -> AgentBinding {
    for t in tools {
        a.tools.insert(t.name.clone(), t);
    }
    a
}

fn reserve_then_answer() -> Arc<dyn rein_engine::provider::ModelProvider> {
    script(json!([
        call(RESERVE, json!({"sku": "SKU-7"})),
        answer("reserved")
    ]))
}

#[tokio::test(start_paused = true)]
async fn a_refused_in_process_write_is_retried_and_applied_once() {
    let h = harness(Faults::none()).await;
    let applied = Applied::default();
    let tool = ToolBinding::adapter(
        RESERVE,
        ToolClass::IdempotentWrite,
        latency(),
        reserve(&applied, 2, 0, false),
    );
    let a = with_tools(agent(&h.desk, reserve_then_answer(), false), vec![tool]);
    let out = run(&h, &a).await;

    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    assert_eq!(applied.count(), 1);
    let ledger = h.store.ledger(&out.run_id).await.unwrap();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].status, LedgerStatus::Succeeded);
    assert_eq!(ledger[0].attempts, 3, "two refusals, then the call");
}

#[tokio::test(start_paused = true)]
async fn a_lost_answer_is_looked_up_by_key_not_applied_again() {
    let h = harness(Faults::none()).await;
    let applied = Applied::default();
    // The first call applies and loses its answer; every later call would
    // answer. A lookup finds the first.
    let tool = ToolBinding::adapter(
        RESERVE,
        ToolClass::IdempotentWrite,
        latency(),
        reserve(&applied, 0, 1, true),
    );
    assert!(tool.target.has_status_lookup());
    let a = with_tools(agent(&h.desk, reserve_then_answer(), false), vec![tool]);
    let out = run(&h, &a).await;

    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    assert_eq!(applied.count(), 1);
    let ledger = h.store.ledger(&out.run_id).await.unwrap();
    assert_eq!(ledger[0].status, LedgerStatus::Succeeded);
    assert_eq!(ledger[0].attempts, 1, "found by its key, not sent again");
    assert_eq!(ledger[0].result.as_ref().unwrap()["reserved"], "SKU-7");
}

#[tokio::test(start_paused = true)]
async fn an_irreversible_in_process_tool_is_never_repeated_and_a_panic_fails_only_its_call() {
    let h = harness(Faults::none()).await;
    let calls = Arc::new(AtomicU32::new(0));
    let seen = calls.clone();
    let notify = InProcessTool::new(NOTIFY, move |_args: Value, _call: Call| {
        let seen = seen.clone();
        async move {
            seen.fetch_add(1, Ordering::SeqCst);
            Err::<Value, _>(
                Failure::new(NOTIFY, Category::Transient)
                    .with_effect(Effect::NotApplied)
                    .with_human_message("the warehouse is busy"),
            )
        }
    });
    let panicking = InProcessTool::new(RESERVE, |_args: Value, _call: Call| async move {
        panic!("a bug in the embedding program's tool");
    });
    let a = with_tools(
        agent(
            &h.desk,
            script(json!([
                call(NOTIFY, json!({"sku": "SKU-7"})),
                call(RESERVE, json!({"sku": "SKU-7"})),
                answer("could not finish")
            ])),
            false,
        ),
        vec![
            ToolBinding::adapter(NOTIFY, ToolClass::Irreversible, latency(), notify),
            ToolBinding::adapter(RESERVE, ToolClass::Read, latency(), panicking),
        ],
    );
    let out = run(&h, &a).await;

    assert_eq!(calls.load(Ordering::SeqCst), 1, "irreversible: one attempt");
    // The run went on after both failures to its own end (failed: no
    // action completed, an honest report, not a crash); the panic is the
    // read's failure, recorded with its reason.
    assert_eq!(out.report.outcome, Outcome::Failed, "{:#?}", out.report);
    assert!(
        out.report.summary.contains("reserve_stock (unknown"),
        "{}",
        out.report.summary
    );
    let events = h.store.events(&out.run_id, 0).await.unwrap();
    let reasons: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.data {
            rein_core::EventData::ToolCallFinished(ToolCallFinished::Failed(f))
                if f.tool == RESERVE =>
            {
                Some(f.reason.clone())
            }
            _ => None,
        })
        .collect();
    assert!(
        !reasons.is_empty() && reasons.iter().all(|r| r.contains("panicked")),
        "{reasons:?}"
    );
}
