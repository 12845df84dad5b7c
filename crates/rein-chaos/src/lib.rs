//! rein-chaos: the fault proxy, the scenario catalog and the invariant
//! checker that prove rein's mechanisms work.
//!
//! # Why
//!
//! Every reliability mechanism is invisible on the happy path: a correct
//! idempotency key gives no feedback at all. Only fault injection shows
//! that retries, breakers, compensation and resume do what they claim, and
//! only invariants — not pass rates — keep that proof stable in CI (seed
//! 000, "Chaos Testing"). This crate injects faults at seed 000's four
//! layers, runs numbered scenarios with fixed parameters against real parts
//! on loopback (the order desk, the mock model, a real SQLite file, a real
//! `rein` process aborted at named crash points), and checks DESIGN.md's
//! ten invariants (and issue 31's two about the store) against three
//! independent witnesses.
//!
//! # Using it
//!
//! Most people run it as `rein chaos` (`--list` for the catalog, `--all`
//! or `--scenario C003` to run, `--store postgres://…` for PostgreSQL).
//! A test of your own calls the same two pieces: [`catalog`] lists the
//! numbered [`Scenario`]s (what each injects, the [`Invariant`]s it puts
//! at risk and the [`Mechanism`]s it must set off), and [`run_scenario`]
//! builds a scenario's world, runs it and checks every invariant against
//! what the world recorded, returning a [`ScenarioResult`]. A scenario passes when it violates no invariant;
//! an expected mechanism that did not fire is a finding (`missing`), since
//! a fault that nothing noticed proves nothing. [`RunnerOptions`] chooses
//! the store ([`StoreBackend`]) and gives the `rein` binary that crash
//! scenarios abort; without it they are skipped, and say so.
//!
//! C003 cuts the connection after the order desk applied a delivery
//! change: the effect is in doubt, and must be found by its idempotency
//! key rather than applied twice.
//!
//! ```
//! use rein_chaos::{Invariant, Mechanism, RunnerOptions, catalog, run_scenario};
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let scenarios = catalog();
//! let c003 = scenarios.iter().find(|s| s.label() == "C003").ok_or("C003 is in the catalog")?;
//! assert!(c003.risks.contains(&Invariant::OneEffectPerKey));
//!
//! let result = run_scenario(c003, &RunnerOptions::default()).await;
//! assert_eq!(result.error, None);
//! assert!(!result.violated(), "{:#?}", result.violations);
//! // The lost answer was found by key, not applied a second time.
//! assert!(result.activated.contains(&Mechanism::DuplicateCollapsed));
//! assert!(result.missing.is_empty());
//! # Ok(())
//! # }
//! ```
//!
//! | module | job |
//! | --- | --- |
//! | [`backend`] | each scenario's store: a SQLite file, or a PostgreSQL database of its own |
//! | [`proxy`] | programmable HTTP fault proxy with a call trace |
//! | [`store_fault`] | a store whose writes fail on a plan |
//! | [`model_fault`] | model faults for the scripted and OpenAI-compatible providers |
//! | [`recording`] | records what the model received |
//! | [`scenario`] | the numbered, versioned catalog |
//! | [`world`] | the order desk world, bound through rein's real config |
//! | [`runner`] | drives a scenario and gathers its [`evidence`] |
//! | [`invariant`] | the checker |
//! | [`mechanism`] | which mechanisms fired |
//! | [`submission`] | runs submitted through `rein serve` by a retrying client |
//! | [`worker`] | the crashing process of crash scenarios |
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
pub mod evidence;
pub mod invariant;
pub mod mechanism;
pub mod model_fault;
pub mod proxy;
pub mod recording;
pub mod runner;
pub mod scenario;
pub mod store_fault;
pub mod submission;
pub mod worker;
pub mod world;

pub use backend::StoreBackend;
pub use invariant::{Invariant, Violation};
pub use mechanism::Mechanism;
pub use runner::{RunnerOptions, ScenarioResult, Summary, run_scenario};
pub use scenario::{CATALOG_VERSION, Layer, Scenario, catalog};

/// A scenario whose world could not be built or read: a harness failure,
/// never an invariant violation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChaosError {
    /// Setting up or reading back the world failed.
    #[error("chaos setup: {0}")]
    Setup(String),
    /// No scenario has this id.
    #[error("no scenario C{0:03} in catalog version {version}", version = scenario::CATALOG_VERSION)]
    UnknownScenario(u32),
}

/// A fresh run id.
pub(crate) fn new_run_id() -> rein_core::RunId {
    match rein_core::RunId::new(format!("chaos-{}", uuid::Uuid::now_v7())) {
        Ok(id) => id,
        Err(_) => unreachable!("a UUID is a valid identifier"),
    }
}
