//! Conformance checks of [`Store::run_stats`]: counts by agent, status and
//! model, and guardrails fired, over a window and a tenant.

use crate::StoreExt as _;
use rein_core::event::Guardrail;
use rein_core::{EventData, EventKind, Outcome, RunId, TenantId};
use serde_json::{Value, json};

use super::{event, ms, report, run_of, scaled, unique_tenant};
use crate::{GuardrailCount, ModelCount, RunStats, RunStatus, StatsQuery, StatusCount, Store};
use rein_core::Timestamp;

/// A window no other check creates runs in.
const BASE: Timestamp = scaled(13);

fn data(kind: EventKind, data: Value) -> EventData {
    EventData::decode(kind, data).unwrap()
}

fn exhausted(dimension: &str) -> EventData {
    data(
        EventKind::BudgetExhausted,
        json!({"scope": "run", "exhausted": {"dimension": dimension, "needed": 3, "remaining": 0}}),
    )
}

fn refused() -> EventData {
    data(
        EventKind::CallRejected,
        json!({"tool": "t", "reason": "arguments do not match the schema"}),
    )
}

fn circuit_open() -> EventData {
    data(
        EventKind::CallRejected,
        json!({"arm": "tool", "name": "t", "reason": "circuit_open", "retry_after_ms": 500}),
    )
}

fn repeated() -> EventData {
    data(
        EventKind::LoopDetected,
        json!({"message": "repeated", "trip": {"reason": "repeated_action", "tool": "t",
               "digest": "0367bd21d8de5a131bffae8fd039c2dd", "count": 4, "max": 3}}),
    )
}

/// Creates a run of `tenant`/`agent` at `at_ms`, appends `events`, and
/// ends it with `outcome` (a report with `tokens`, `cost` and `models`)
/// or leaves it running.
async fn driven(
    store: &dyn Store,
    tenant: &TenantId,
    agent: &str,
    at_ms: Timestamp,
    events: Vec<EventData>,
    end: Option<(Outcome, u64, u64, &[&str])>,
) -> RunId {
    let run_id = store
        .create_run(run_of(tenant, agent, "stats", at_ms))
        .await
        .unwrap()
        .run_id;
    let events = events
        .into_iter()
        .map(|data| rein_core::Event {
            data,
            ..event(&run_id, EventKind::CheckpointWritten, 1)
        })
        .collect();
    store.append_events(&run_id, events).await.unwrap();
    let (status, report) = match end {
        Some((outcome, tokens, cost, models)) => {
            let mut report = report(outcome);
            report.consumed.tokens = tokens;
            report.consumed.cost = rein_core::deadline::Cost::from_micros(cost);
            report.models = models.iter().map(|m| (*m).to_owned()).collect();
            (RunStatus::Finished(outcome), Some(report))
        }
        None => (RunStatus::Running, None),
    };
    store
        .set_run_status(&run_id, status, report, at_ms + ms(1))
        .await
        .unwrap();
    run_id
}

fn sorted(mut stats: RunStats) -> RunStats {
    stats
        .statuses
        .sort_by(|a, b| (&a.agent, a.status.as_str()).cmp(&(&b.agent, b.status.as_str())));
    stats
        .models
        .sort_by(|a, b| (&a.model, a.status.as_str()).cmp(&(&b.model, b.status.as_str())));
    stats
        .guardrails
        .sort_by(|a, b| (&a.agent, a.guardrail).cmp(&(&b.agent, b.guardrail)));
    stats
}

fn status(agent: &str, status: RunStatus, runs: u64, tokens: u64, cost: u64) -> StatusCount {
    StatusCount {
        agent: agent.to_owned(),
        status,
        runs,
        tokens,
        cost_micros: cost,
    }
}

fn fired(agent: &str, guardrail: Guardrail, fired: u64, runs: u64) -> GuardrailCount {
    GuardrailCount {
        agent: agent.to_owned(),
        guardrail,
        fired,
        runs,
    }
}

/// `run_stats` counts a tenant's runs of the window by agent and status
/// (tokens and cost from their reports), by model, and the guardrails
/// their events record, per agent; another tenant's runs and runs outside
/// the window never count.
pub async fn run_stats_count_a_tenants_window_by_agent_model_and_guardrail(store: &dyn Store) {
    let (a, b) = (unique_tenant("stats-a"), unique_tenant("stats-b"));
    let succeeded = Outcome::Succeeded;
    driven(
        store,
        &a,
        "desk",
        BASE,
        vec![refused(), refused(), circuit_open(), repeated()],
        Some((succeeded, 100, 7, &["p/m1", "p/m2"])),
    )
    .await;
    driven(
        store,
        &a,
        "desk",
        BASE + ms(10),
        vec![refused()],
        Some((succeeded, 50, 3, &["p/m1"])),
    )
    .await;
    driven(store, &a, "desk", BASE + ms(20), vec![], None).await;
    driven(
        store,
        &a,
        "mail",
        BASE + ms(30),
        vec![exhausted("steps")],
        Some((Outcome::BudgetExhausted, 40, 11, &["p/m2"])),
    )
    .await;
    // Outside the window: at its end, and before its start.
    for at in [BASE + ms(100), BASE - ms(1)] {
        driven(
            store,
            &a,
            "desk",
            at,
            vec![refused()],
            Some((succeeded, 9, 9, &["p/m1"])),
        )
        .await;
    }
    // Another tenant's, inside the window.
    driven(
        store,
        &b,
        "desk",
        BASE + ms(5),
        vec![refused(), exhausted("tokens")],
        Some((Outcome::Failed, 1_000, 1_000, &["p/m1"])),
    )
    .await;

    let window = |tenant: Option<&TenantId>, agent: Option<&str>| StatsQuery {
        tenant: tenant.cloned(),
        agent: agent.map(str::to_owned),
        since_ms: BASE,
        until_ms: BASE + ms(100),
    };
    let got = sorted(store.run_stats(&window(Some(&a), None)).await.unwrap());
    let done = RunStatus::Finished;
    assert_eq!(
        got.statuses,
        vec![
            status("desk", RunStatus::Running, 1, 0, 0),
            status("desk", done(succeeded), 2, 150, 10),
            status("mail", done(Outcome::BudgetExhausted), 1, 40, 11),
        ],
        "a's runs of the window by agent and status"
    );
    let model = |model: &str, outcome, runs, tokens, cost| ModelCount {
        model: model.to_owned(),
        status: done(outcome),
        runs,
        tokens,
        cost_micros: cost,
    };
    assert_eq!(
        got.models,
        vec![
            model("p/m1", succeeded, 2, 150, 10),
            model("p/m2", Outcome::BudgetExhausted, 1, 40, 11),
            model("p/m2", succeeded, 1, 100, 7),
        ],
        "a run counts under each model it used"
    );
    assert_eq!(
        got.guardrails,
        vec![
            fired("desk", Guardrail::RepeatedAction, 1, 1),
            fired("desk", Guardrail::Validation, 3, 2),
            fired("desk", Guardrail::Breaker, 1, 1),
            fired("mail", Guardrail::BudgetSteps, 1, 1),
        ],
        "guardrails by agent: events fired and runs they fired in"
    );

    let mail = sorted(
        store
            .run_stats(&window(Some(&a), Some("mail")))
            .await
            .unwrap(),
    );
    assert_eq!(
        mail.statuses,
        vec![status("mail", done(Outcome::BudgetExhausted), 1, 40, 11)]
    );
    assert_eq!(
        mail.guardrails,
        vec![fired("mail", Guardrail::BudgetSteps, 1, 1)]
    );

    let other = sorted(store.run_stats(&window(Some(&b), None)).await.unwrap());
    assert_eq!(
        other.statuses,
        vec![status("desk", done(Outcome::Failed), 1, 1_000, 1_000)],
        "b sees only its own run"
    );
    assert_eq!(
        other.guardrails,
        vec![
            fired("desk", Guardrail::BudgetTokens, 1, 1),
            fired("desk", Guardrail::Validation, 1, 1),
        ]
    );

    let everyone = store.run_stats(&window(None, None)).await.unwrap();
    let runs: u64 = everyone.statuses.iter().map(|s| s.runs).sum();
    // At least a's and b's: a store that already held data may hold more.
    assert!(
        runs >= 5,
        "with no tenant, every tenant's runs of the window: {runs}"
    );

    let empty = store
        .run_stats(&StatsQuery {
            since_ms: BASE + ms(50),
            until_ms: BASE + ms(50),
            ..window(Some(&a), None)
        })
        .await
        .unwrap();
    assert_eq!(empty, RunStats::default(), "an empty window counts nothing");
}
