//! Agent trees on real parts: a parent run starts child runs of another
//! agent through a tool of kind `agent`, within the tree's bounds, with
//! cancellation flowing from a root to its children and not back up.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use rein_core::Timestamp;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use common::{agent, answer, call, conflict_on_update, effect_order, effects, ms, script, update};
use rein_core::deadline::ChildCaps;
use rein_core::registry::AgentGraphLimits;
use rein_core::{LatencyProfile, LedgerStatus, Outcome, RunId, ToolClass};
use rein_engine::run::{
    AcceptAll, AgentBinding, AgentResolver, AgentTarget, CancellationToken, Engine, RunOutput,
    RunRequest, ToolBinding, ToolTarget,
};
use rein_store::{Store, StoreExt};
use rein_store_sqlite::SqliteStore;
use rein_testkit::order_desk::{
    Fault, Faults, GET_ORDER, OrderDesk, OrderDeskConfig, RESTORE_DELIVERY_TIME, SEND_EMAIL,
    UPDATE_DELIVERY_TIME,
};
use serde_json::{Value, json};

const ASK: &str = "ask_child";

/// The agent tool: starts a child run of `child`.
fn ask_tool() -> ToolBinding {
    ask_tool_of("child", ToolClass::Read)
}

/// An agent tool of `class` that starts a child run of `agent`.
fn ask_tool_of(agent: &str, class: ToolClass) -> ToolBinding {
    ToolBinding {
        name: ASK.into(),
        class,
        latency: LatencyProfile::new(ms(50), ms(500), ms(2_000), 100).unwrap(),
        normalizer: rein_core::idempotency::Normalizer::default(),
        target: ToolTarget::Agent(AgentTarget {
            agent: agent.into(),
            budget_ratio: rein_core::Ratio::new("r", 0.5).unwrap(),
            caps: ChildCaps::default(),
        }),
        resource_group: None,
        self_heal_allowance: None,
        declared: Default::default(),
    }
}

fn with_ask(mut a: AgentBinding, name: &str) -> AgentBinding {
    a.name = name.into();
    a.tools.insert(ASK.into(), ask_tool());
    a
}

fn ask(task: &str) -> Value {
    call(ASK, json!({"task": task}))
}

struct Tree {
    desk: Arc<OrderDesk>,
    store: Arc<dyn Store>,
    engine: Arc<Engine>,
    _dir: tempfile::TempDir,
}

/// An engine whose agent tools start `child` agents that follow
/// `child_turns` (each child run gets a fresh script).
async fn tree(faults: Faults, child_turns: Value, limits: AgentGraphLimits) -> Tree {
    let desk = Arc::new(
        OrderDesk::start_with(OrderDeskConfig::default().with_faults(faults))
            .await
            .unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let sqlite: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap());
    let store: Arc<dyn Store> = Arc::new(common::pause_safe(sqlite));
    let for_children = desk.clone();
    let resolve: AgentResolver = Arc::new(move |name: &str| {
        (name == "child").then(|| {
            with_ask(
                agent(&for_children, script(child_turns.clone()), false),
                "child",
            )
        })
    });
    let engine = Engine::builder(store.clone())
        .rng_seed(3)
        .agents(resolve)
        .agent_graph(limits)
        .build()
        .unwrap();
    Tree {
        desk,
        store,
        engine: Arc::new(engine),
        _dir: dir,
    }
}

fn parent(t: &Tree, turns: Value) -> AgentBinding {
    with_ask(agent(&t.desk, script(turns), false), "parent")
}

async fn run(t: &Tree, parent: &AgentBinding, cancel: Option<CancellationToken>) -> RunOutput {
    t.engine
        .run(
            parent,
            &AcceptAll,
            RunRequest {
                input: "Find out about order A-1001.".into(),
                cancel,
                ..RunRequest::default()
            },
        )
        .await
        .unwrap()
}

async fn children(t: &Tree, parent: &RunId) -> Vec<rein_store::RunRecord> {
    t.store
        .list_runs(100)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.parent_run_id.as_ref() == Some(parent))
        .collect()
}

async fn tool_replies(t: &Tree, run: &RunId) -> Vec<String> {
    let checkpoint = t.store.latest_checkpoint(run).await.unwrap().unwrap();
    checkpoint
        .messages
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_run_answers_its_parent_and_is_recorded_under_it() {
    let t = tree(
        Faults::none(),
        json!([
            call(GET_ORDER, json!({"order_id": "A-1001"})),
            answer("A-1001 is confirmed.")
        ]),
        AgentGraphLimits::default(),
    )
    .await;
    let p = parent(
        &t,
        json!([ask("Look up A-1001."), answer("It is confirmed.")]),
    );
    let out = run(&t, &p, None).await;
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:?}", out.report);
    let kids = children(&t, &out.run_id).await;
    assert_eq!(kids.len(), 1);
    let child = &kids[0];
    assert_eq!(child.agent, "child");
    assert_eq!(child.status.as_str(), "succeeded");
    assert_eq!(child.input, "Look up A-1001.");
    let replies = tool_replies(&t, &out.run_id).await;
    let reply: Value = serde_json::from_str(&replies[0]).unwrap();
    assert_eq!(reply["result"]["child_run_id"], child.run_id.as_str());
    assert_eq!(reply["result"]["answer"], "A-1001 is confirmed.");
    assert_eq!(
        t.desk.request_count(GET_ORDER),
        1,
        "the child called the tool"
    );
    // One budget for the tree: the child's two steps are charged to the
    // parent, which took two of its own.
    let child_report = child.report.as_ref().unwrap();
    assert_eq!(child_report.consumed.steps, 2);
    assert_eq!(out.report.consumed.steps, 4, "{:?}", out.report.consumed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_past_the_trees_bounds_are_refused_with_a_structured_failure() {
    // Depth: the child asks for a grandchild, which depth 1 forbids.
    let t = tree(
        Faults::none(),
        json!([ask("Go deeper."), answer("I could not go deeper.")]),
        AgentGraphLimits::default().with_max_depth(1),
    )
    .await;
    let p = parent(&t, json!([ask("Dig."), answer("Done.")]));
    let out = run(&t, &p, None).await;
    let kids = children(&t, &out.run_id).await;
    assert_eq!(kids.len(), 1);
    assert!(
        children(&t, &kids[0].run_id).await.is_empty(),
        "no grandchild"
    );
    let replies = tool_replies(&t, &kids[0].run_id).await;
    assert!(
        replies[0].starts_with("tool_error target=ask_child category=budget_exhausted"),
        "{replies:?}"
    );

    // Count: a second child is refused once the tree started one.
    let t = tree(
        Faults::none(),
        json!([answer("ok")]),
        AgentGraphLimits::default().with_max_total_runs(NonZeroU32::new(1)),
    )
    .await;
    let p = parent(&t, json!([ask("First."), ask("Second."), answer("Done.")]));
    let out = run(&t, &p, None).await;
    assert_eq!(children(&t, &out.run_id).await.len(), 1);
    let replies = tool_replies(&t, &out.run_id).await;
    assert!(
        replies[1].contains("category=budget_exhausted"),
        "{replies:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_root_cancels_its_child_but_not_the_other_way_round() {
    // The child's read hangs at the desk.
    let slow = || Faults::none().then(GET_ORDER, Fault::Delay(Duration::from_secs(5)));
    let child_turns = json!([
        call(GET_ORDER, json!({"order_id": "A-1001"})),
        answer("found")
    ]);

    // Root cancelled: both end cancelled, at once.
    let t = tree(slow(), child_turns.clone(), AgentGraphLimits::default()).await;
    let p = parent(&t, json!([ask("Look."), answer("Done.")]));
    let cancel = CancellationToken::new();
    let watch = async {
        while t.desk.request_count(GET_ORDER) == 0 {
            tokio::time::sleep(ms(5)).await;
        }
        cancel.cancel();
    };
    let started = tokio::time::Instant::now();
    let (out, ()) = tokio::join!(run(&t, &p, Some(cancel.clone())), watch);
    // Paused time: the tree ended before the desk would have answered.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out.report.outcome, Outcome::Cancelled, "{:?}", out.report);
    let kids = children(&t, &out.run_id).await;
    assert_eq!(kids[0].status.as_str(), "cancelled");

    // Child cancelled alone: the parent carries on and answers.
    let t = tree(slow(), child_turns, AgentGraphLimits::default()).await;
    let p = parent(&t, json!([ask("Look."), answer("The child was stopped.")]));
    let engine = t.engine.clone();
    let store = t.store.clone();
    let watch = async {
        let child = loop {
            let runs = store.list_runs(10).await.unwrap();
            if let Some(c) = runs.iter().find(|r| r.parent_run_id.is_some())
                && t.desk.request_count(GET_ORDER) > 0
            {
                break c.run_id.clone();
            }
            tokio::time::sleep(ms(5)).await;
        };
        assert!(engine.cancel(&child), "the child is live here");
    };
    let (out, ()) = tokio::join!(run(&t, &p, None), watch);
    assert_ne!(out.report.outcome, Outcome::Cancelled, "{:?}", out.report);
    assert_eq!(out.report.answer.as_deref(), Some("The child was stopped."));
    let kids = children(&t, &out.run_id).await;
    assert_eq!(kids[0].status.as_str(), "cancelled");
}

/// A tree of named agents: each `(name, turns, asks)` is an agent that
/// follows `turns` and whose agent tool (of `class`) starts `asks`.
async fn named_tree(agents: Vec<(&'static str, Value, &'static str)>, class: ToolClass) -> Tree {
    let desk = Arc::new(OrderDesk::start().await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap());
    let for_children = desk.clone();
    let resolve: AgentResolver = Arc::new(move |name: &str| {
        let (name, turns, asks) = agents.iter().find(|(n, _, _)| *n == name)?.clone();
        let mut a = roomy(agent(&for_children, script(turns), false));
        a.name = name.into();
        a.tools.insert(ASK.into(), ask_tool_of(asks, class));
        Some(a)
    });
    let engine = Engine::builder(store.clone())
        .rng_seed(3)
        .agents(resolve.clone())
        .build()
        .unwrap();
    Tree {
        desk,
        store,
        engine: Arc::new(engine),
        _dir: dir,
    }
}

/// `a` with steps enough for a tree's worth of turns.
fn roomy(mut a: AgentBinding) -> AgentBinding {
    a.budget = a.budget.with_steps(100).unwrap();
    a
}

fn root_of(t: &Tree, turns: Value, asks: &str, class: ToolClass) -> AgentBinding {
    let mut a = roomy(agent(&t.desk, script(turns), false));
    a.name = "root".into();
    a.tools.insert(ASK.into(), ask_tool_of(asks, class));
    a
}

async fn ledger_statuses(t: &Tree, run: &RunId) -> Vec<(String, LedgerStatus)> {
    t.store
        .ledger(run)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.tool, r.status))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_root_undoes_its_descendants_effects_in_one_reverse_order() {
    // root: update A-1001, ask a child (which asks a grandchild to update
    // A-1002, then updates A-1003 itself), then update A-1004: a conflict.
    let t = named_tree(
        vec![
            (
                "child",
                json!([
                    ask("Move A-1002."),
                    update("A-1003", "2026-03-03T10:00:00Z"),
                    answer("moved")
                ]),
                "grandchild",
            ),
            (
                "grandchild",
                json!([update("A-1002", "2026-03-02T10:00:00Z"), answer("moved")]),
                "nobody",
            ),
        ],
        ToolClass::IdempotentWrite,
    )
    .await;
    conflict_on_update(&t.desk, 4);
    let root = root_of(
        &t,
        json!([
            update("A-1001", "2026-03-01T10:00:00Z"),
            ask("Move A-1002 and A-1003."),
            update("A-1004", "2026-03-04T10:00:00Z"),
            answer("could not finish"),
        ]),
        "child",
        ToolClass::IdempotentWrite,
    );
    let out = run(&t, &root, None).await;
    assert_eq!(out.report.outcome, Outcome::Failed, "{:?}", out.report);
    assert_eq!(
        effect_order(&t.desk),
        effects(&[
            (UPDATE_DELIVERY_TIME, "A-1001"),
            (UPDATE_DELIVERY_TIME, "A-1002"),
            (UPDATE_DELIVERY_TIME, "A-1003"),
            (RESTORE_DELIVERY_TIME, "A-1003"),
            (RESTORE_DELIVERY_TIME, "A-1002"),
            (RESTORE_DELIVERY_TIME, "A-1001"),
        ]),
        "{:?}",
        out.report.compensations
    );
    // Each effect is settled in the ledger of the run that caused it, and
    // each call that started a child is settled with its subtree.
    let child = &children(&t, &out.run_id).await[0];
    let grandchild = &children(&t, &child.run_id).await[0];
    assert_eq!(
        child.status.as_str(),
        "succeeded",
        "the child's own run ended well"
    );
    assert_eq!(
        ledger_statuses(&t, &grandchild.run_id).await,
        vec![(UPDATE_DELIVERY_TIME.to_owned(), LedgerStatus::Compensated)]
    );
    assert_eq!(
        ledger_statuses(&t, &child.run_id).await,
        vec![
            (ASK.to_owned(), LedgerStatus::Compensated),
            (UPDATE_DELIVERY_TIME.to_owned(), LedgerStatus::Compensated),
        ]
    );
    let root_ledger = ledger_statuses(&t, &out.run_id).await;
    assert!(
        root_ledger.iter().all(|(tool, status)| {
            *status == LedgerStatus::Compensated
                || (tool == UPDATE_DELIVERY_TIME && *status == LedgerStatus::Failed)
        }),
        "{root_ledger:?}"
    );
    // The report lists every settled effect, the children's included.
    assert_eq!(
        out.report
            .compensations
            .iter()
            .filter(|c| c.status == LedgerStatus::Compensated)
            .count(),
        5,
        "{:?}",
        out.report.compensations
    );
    // The child's run shows its settlement, and its claim was let go.
    let child_events = t.store.events(&child.run_id, 0).await.unwrap();
    assert!(
        child_events
            .iter()
            .any(|e| e.kind() == rein_core::EventKind::CompensationFinished),
        "the child's stream records its compensation"
    );
    assert!(
        t.store
            .leases_of_run(&child.run_id)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_irreversible_effect_in_a_child_stops_the_trees_automatic_undoing() {
    let t = named_tree(
        vec![(
            "child",
            json!([
                call(
                    SEND_EMAIL,
                    json!({"to": "buyer@example.com", "subject": "A-1002", "body": "moved"})
                ),
                answer("told")
            ]),
            "nobody",
        )],
        ToolClass::Read,
    )
    .await;
    conflict_on_update(&t.desk, 2);
    let root = root_of(
        &t,
        json!([
            update("A-1001", "2026-03-01T10:00:00Z"),
            ask("Tell the buyer."),
            update("A-1004", "2026-03-04T10:00:00Z"),
            answer("could not finish"),
        ]),
        "child",
        ToolClass::Read,
    );
    let out = run(&t, &root, None).await;
    assert_eq!(out.report.outcome, Outcome::HandedOff, "{:?}", out.report);
    assert_eq!(
        t.desk
            .side_effects()
            .iter()
            .map(|e| e.tool.as_str())
            .collect::<Vec<_>>(),
        vec![UPDATE_DELIVERY_TIME, SEND_EMAIL],
        "nothing undone"
    );
    let package = out.report.handoff.as_ref().unwrap();
    assert!(
        package
            .awaiting_decision
            .iter()
            .any(|e| e.tool == SEND_EMAIL && e.status == LedgerStatus::Uncompensatable),
        "the child's email awaits a human: {package:?}"
    );
    assert!(
        package
            .awaiting_decision
            .iter()
            .any(|e| e.tool == UPDATE_DELIVERY_TIME && e.status == LedgerStatus::Manual),
        "{package:?}"
    );
}

/// A run recorded directly in the store, as a crashed process left it.
async fn recorded_run(t: &Tree, id: &str, agent: &str, parent: Option<&RunId>) -> RunId {
    let run_id = RunId::new(id).unwrap();
    t.store
        .create_run(rein_store::NewRun {
            run_id: run_id.clone(),
            tenant: rein_core::TenantId::new("default").unwrap(),
            agent: agent.into(),
            input: "Move A-1002.".into(),
            parent_run_id: parent.cloned(),
            budget: json!({}),
            created_at_ms: Timestamp::from_millis(1),
            trace_parent: None,
        })
        .await
        .unwrap();
    let running = rein_store::StepCommit {
        status: Some(rein_store::StatusChange {
            status: rein_store::RunStatus::Running,
            report: None,
            at_ms: Timestamp::from_millis(2),
        }),
        ..rein_store::StepCommit::default()
    };
    t.store.commit_step(&run_id, running).await.unwrap();
    run_id
}

fn record(
    run: &RunId,
    intent: &rein_core::IntentId,
    tool: &str,
    class: ToolClass,
    args: Value,
) -> rein_core::LedgerRecord {
    rein_core::LedgerRecord {
        run_id: run.clone(),
        intent_id: intent.clone(),
        seq: 0,
        step: 1,
        tool: tool.into(),
        class,
        idempotency_key: None,
        args,
        status: LedgerStatus::Pending,
        result: None,
        failure: None,
        attempts: 0,
        created_at_ms: Timestamp::from_millis(3),
        updated_at_ms: Timestamp::from_millis(3),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_call_left_in_doubt_is_settled_by_whether_its_child_exists() {
    // A crash left the root's (irreversible) agent call `pending` after its
    // child had moved A-1002 and finished; the root's settlement had begun.
    let t = named_tree(
        vec![("child", json!([answer("moved")]), "nobody")],
        ToolClass::Irreversible,
    )
    .await;
    let root = root_of(
        &t,
        json!([answer("unused")]),
        "child",
        ToolClass::Irreversible,
    );
    let root_id = recorded_run(&t, "root-run", "root", None).await;
    let call = rein_core::IntentId::new("ask-1").unwrap();
    let mut commit = rein_store::StepCommit {
        intents: vec![(
            1,
            rein_store::PlannedIntent {
                intent_id: call.clone(),
                ordinal: 0,
                call_id: "c1".into(),
                tool: ASK.into(),
                args: json!({"task": "Move A-1002."}),
            },
        )],
        declares: vec![record(
            &root_id,
            &call,
            ASK,
            ToolClass::Irreversible,
            json!({"task": "Move A-1002."}),
        )],
        ..rein_store::StepCommit::default()
    };
    commit.events.push(rein_core::Event {
        run_id: root_id.clone(),
        seq: 0,
        step: 1,
        intent_id: None,
        attempt_id: None,
        idempotency_key: None,
        at_ms: Timestamp::from_millis(4),
        data: rein_core::event::SettlementStarted {
            policy: rein_core::FailurePolicy::default(),
            irreversible_open: false,
            open_records: 1,
            already_with_a_human: false,
            child_runs: 1,
        }
        .into(),
    });
    t.store.commit_step(&root_id, commit).await.unwrap();

    // The child: it moved A-1002 (for real, at the desk) and succeeded.
    let child_id = RunId::new("ask-1-child").unwrap();
    recorded_run(&t, child_id.as_str(), "child", Some(&root_id)).await;
    let moved = reqwest::Client::new()
        .post(format!(
            "{}/tools/{UPDATE_DELIVERY_TIME}",
            t.desk.base_url()
        ))
        .header("Idempotency-Key", "child-update-1")
        .json(&json!({"order_id": "A-1002", "delivery_date": "2026-03-02T10:00:00Z"}))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert!(moved["previous_delivery_date"].is_string(), "{moved}");
    let update = rein_core::IntentId::new("update-1").unwrap();
    let args = json!({"order_id": "A-1002", "delivery_date": "2026-03-02T10:00:00Z"});
    let finished = rein_store::StepCommit {
        declares: vec![record(
            &child_id,
            &update,
            UPDATE_DELIVERY_TIME,
            ToolClass::IdempotentWrite,
            args,
        )],
        marks: vec![(
            update.clone(),
            rein_store::LedgerMark {
                status: LedgerStatus::Succeeded,
                result: Some(moved),
                failure: None,
                attempts: 1,
                at_ms: Timestamp::from_millis(5),
            },
        )],
        ..rein_store::StepCommit::default()
    };
    t.store.commit_step(&child_id, finished).await.unwrap();

    let out = t
        .engine
        .resume(&root, &AcceptAll, &root_id, None)
        .await
        .unwrap();
    let root_ledger = ledger_statuses(&t, &root_id).await;
    assert_eq!(
        root_ledger,
        vec![(ASK.to_owned(), LedgerStatus::Compensated)],
        "settled by its child, never left pending: {:?}",
        out.report
    );
    assert_eq!(
        ledger_statuses(&t, &child_id).await,
        vec![(UPDATE_DELIVERY_TIME.to_owned(), LedgerStatus::Compensated)]
    );
    assert_eq!(
        effect_order(&t.desk),
        effects(&[
            (UPDATE_DELIVERY_TIME, "A-1002"),
            (RESTORE_DELIVERY_TIME, "A-1002"),
        ])
    );
}

/// How deep [`a_tree_deeper_than_one_threads_stack_runs_to_its_end`]
/// goes. One level's polls take about 600 KiB of stack in a debug build
/// and 70–100 KiB in a release one (a tree 3 deep needed more than 1.8 MB
/// and 200 KB): 32 levels are more than the 2 MiB of a test's or a
/// runtime worker's thread holds in either.
const DEEP: usize = 32;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_deeper_than_one_threads_stack_runs_to_its_end() {
    let desk = Arc::new(OrderDesk::start().await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap());
    let for_levels = desk.clone();
    // `level-N` asks `level-N+1` and answers; the deepest answers at once.
    let level = move |n: usize| {
        let turns = if n < DEEP {
            json!([ask("Go one level down."), answer("done")])
        } else {
            json!([answer("the bottom")])
        };
        let mut a = agent(&for_levels, script(turns), false);
        // Enough for 32 levels, each child getting its share of what its
        // parent has left (after the parent's compensation reserve).
        a.budget = a
            .budget
            .with_steps(10_000)
            .unwrap()
            .with_wall_clock(Duration::from_secs(3_600))
            .unwrap();
        a.name = format!("level-{n}");
        let mut ask = ask_tool_of(&format!("level-{}", n + 1), ToolClass::Read);
        // A call lasts as long as the whole tree below it.
        ask.latency = LatencyProfile::new(ms(50), ms(500), ms(600_000), 100).unwrap();
        if let ToolTarget::Agent(target) = &mut ask.target {
            // Most of the budget goes down: 32 halvings would leave none.
            target.budget_ratio = rein_core::Ratio::new("r", 0.99).unwrap();
        }
        a.tools.insert(ASK.into(), ask);
        a
    };
    let root = level(0);
    let resolve: AgentResolver = Arc::new(move |name: &str| {
        let n: usize = name.strip_prefix("level-")?.parse().ok()?;
        (n <= DEEP).then(|| level(n))
    });
    let engine = Engine::builder(store.clone())
        .rng_seed(3)
        .agents(resolve)
        .agent_graph(
            AgentGraphLimits::default()
                .with_max_depth(DEEP as u32)
                .with_max_total_runs(None)
                .with_max_total_tokens(None),
        )
        .build()
        .unwrap();
    let out = engine
        .run(
            &root,
            &AcceptAll,
            RunRequest {
                input: "Go down.".into(),
                ..RunRequest::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:?}", out.report);
    let runs = store.list_runs(100).await.unwrap();
    assert_eq!(runs.len(), DEEP + 1, "every level ran");
}
