//! Chaos for the store (issue 31): every scenario that fails the store's
//! writes — blinks the engine's retry absorbs, outages past a run's
//! patience that hand the run on — holds every invariant on SQLite,
//! and on PostgreSQL: the test server (`REIN_TEST_POSTGRES_URL`, default
//! the machine's trust-auth loopback server), each scenario on a database
//! of its own, dropped after it. Without a server that half skips; under
//! `CI=true` it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_chaos::backend::StoreBackend;
use rein_chaos::{RunnerOptions, Scenario, ScenarioResult, catalog, run_scenario};

/// The catalog's scenarios that fault the store by kind of write.
fn store_scenarios() -> Vec<Scenario> {
    catalog()
        .into_iter()
        .filter(|s| (99..=109).contains(&s.id))
        .collect()
}

fn verdict(results: &[ScenarioResult]) {
    for r in results {
        eprintln!(
            "{} {} on {}: {:?} violations {:#?} missing {:?} error {:?}",
            r.label, r.name, r.store, r.outcomes, r.violations, r.missing, r.error
        );
    }
    for r in results {
        assert!(r.error.is_none(), "{}: {:?}", r.label, r.error);
        assert!(r.skipped.is_none(), "{}: {:?}", r.label, r.skipped);
        assert!(
            r.violations.is_empty(),
            "{} on {}: {:#?}",
            r.label,
            r.store,
            r.violations
        );
        assert!(r.missing.is_empty(), "{}: {:?}", r.label, r.missing);
        // A blink or an outage ends every run as it would have ended
        // without it; an I/O error (C109) in any structured outcome.
        assert!(
            r.id == 109 || r.outcomes.iter().all(|o| o == "succeeded" || o == "failed"),
            "{}: {:?}",
            r.label,
            r.outcomes
        );
    }
}

async fn run_all(options: &RunnerOptions) -> Vec<ScenarioResult> {
    let mut results = Vec::new();
    for s in store_scenarios() {
        results.push(run_scenario(&s, options).await);
    }
    results
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_scenarios_hold_on_sqlite() {
    let scenarios = store_scenarios();
    assert!(scenarios.len() >= 10, "{}", scenarios.len());
    let results = run_all(&RunnerOptions::default()).await;
    verdict(&results);
    // The outages were outages: each run handed on and resumed.
    for r in &results {
        let evidence = r.evidence.as_ref().unwrap();
        assert!(
            !evidence.store_injected.is_empty(),
            "{}: no fault fired",
            r.label
        );
        assert!(
            !r.name.starts_with("store-outage")
                || evidence
                    .store_injected
                    .iter()
                    .any(|l| l.ends_with("outage")),
            "{}: {:?}",
            r.label,
            evidence.store_injected
        );
        // A compensation mark held ends nothing early: that run ends
        // failed for its conflict, with the marks written afterwards.
        if r.name.starts_with("store-outage") && r.id != 107 {
            assert!(
                evidence.runs.iter().all(|run| run.resumed),
                "{}: every run handed on and resumed",
                r.label
            );
        }
    }
}

/// The server the PostgreSQL half runs on, as the store's own tests pick
/// it.
fn postgres() -> String {
    std::env::var("REIN_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/postgres".to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_scenarios_hold_on_postgres() {
    let store = StoreBackend::parse(&postgres()).unwrap();
    let options = RunnerOptions {
        store,
        ..RunnerOptions::default()
    };
    let results = run_all(&options).await;
    if results.iter().all(|r| {
        r.error
            .as_deref()
            .is_some_and(|e| e.contains("cannot connect") || e.contains("cannot create"))
    }) {
        let why = format!("no PostgreSQL server at hand: {:?}", results[0].error);
        assert!(std::env::var("CI").map_or(true, |ci| ci != "true"), "{why}");
        eprintln!("{why}: skipped");
        return;
    }
    verdict(&results);
    // On PostgreSQL the terminated-connection faults ended the backends
    // for real.
    let terminated: Vec<String> = results
        .iter()
        .flat_map(|r| r.evidence.as_ref().unwrap().store_injected.clone())
        .filter(|line| line.contains("backends terminated"))
        .collect();
    eprintln!("{terminated:#?}");
    assert!(!terminated.is_empty(), "no backend was terminated");
}
