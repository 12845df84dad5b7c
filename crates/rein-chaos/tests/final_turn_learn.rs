//! The last turn holds the ceilings (issue 16, item 5): C094 (tokens
//! short) and C095 (time short) end `budget_exhausted` after one last
//! minimal-output turn, within every limit as the mock model counted; with
//! the last turn's reservation bypassed (sabotage `unreserved_final_turn`)
//! the checker reports the overrun from the same usage log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use rein_chaos::invariant::Invariant;
use rein_chaos::runner::EngineHook;
use rein_chaos::{RunnerOptions, ScenarioResult, catalog, run_scenario};
use rein_engine::sabotage::Sabotage;

async fn run(id: u32, sabotage: Option<Sabotage>) -> ScenarioResult {
    let scenario = catalog().into_iter().find(|s| s.id == id).unwrap();
    let engine_hook: Option<EngineHook> = sabotage.map(|s| {
        let hook: EngineHook = Arc::new(move |b: rein_engine::run::EngineBuilder| b.sabotage(s));
        hook
    });
    let options = RunnerOptions {
        engine_hook,
        ..RunnerOptions::default()
    };
    let result = run_scenario(&scenario, &options).await;
    assert!(result.error.is_none(), "{:?}", result.error);
    result
}

async fn holds_and_is_caught(id: u32) {
    let control = run(id, None).await;
    assert!(
        control.violations.is_empty(),
        "C{id:03}: {:?}",
        control.violations
    );
    assert_eq!(control.outcomes, vec!["budget_exhausted".to_owned()]);
    assert!(control.missing.is_empty(), "{:?}", control.missing);

    let s = Sabotage {
        unreserved_final_turn: true,
        ..Sabotage::default()
    };
    let sabotaged = run(id, Some(s)).await;
    assert!(
        sabotaged
            .violations
            .iter()
            .any(|v| v.invariant == Invariant::BudgetsHold
                && v.detail.starts_with("the model servers counted")),
        "C{id:03} with the last turn unreserved: {:?}",
        sabotaged.violations
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_short_last_turn_holds_the_token_ceiling_and_its_sabotage_is_caught() {
    holds_and_is_caught(94).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_short_last_turn_holds_the_token_ceiling_and_its_sabotage_is_caught() {
    holds_and_is_caught(95).await;
}
