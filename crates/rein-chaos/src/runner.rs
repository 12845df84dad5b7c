//! Runs scenarios: builds the world, drives the runs (crashing a real
//! process when the scenario says so), gathers the evidence, checks the
//! invariants and counts the mechanisms that fired.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rein_core::{Event, RunId, TenantId};
use rein_engine::SystemClock;
use rein_engine::bind::{bind_compensations, bind_tools};
use rein_engine::crash::CRASH_ENV;
use rein_engine::reconcile::{ReconcileConfig, Reconciler, SweepClasses};
use rein_engine::run::{Engine, EngineBuilder, Observer, RunRequest, http_client};
use rein_store::Store;
use serde::Serialize;

use crate::ChaosError;
use crate::backend::{ScenarioStore, StoreBackend};
use crate::evidence::{Evidence, RunEvidence};
use crate::invariant::{self, Violation};
use crate::mechanism::{self, Mechanism};
use crate::recording::RecordingProvider;
use crate::scenario::{Approval, Decide, Plan, Scenario};
use crate::store_fault::StoreFaults;
use crate::world::{Services, WorldConfig};
use rein_store::Intercepted;

/// How long past its wall-clock budget a run (or a worker process) may
/// take before the runner gives up on it and records a hang: generous,
/// because a hang is a defect, not a slow machine.
pub const HANG_MARGIN: std::time::Duration = std::time::Duration::from_secs(30);

/// The task every run is given.
pub const INPUT: &str = "Move order A-1001 to 2026-12-24T10:00:00Z and tell the buyer.";

/// A change to every engine the runner builds: the checker's self-test
/// uses it to switch on a deliberately broken mechanism.
pub type EngineHook = Arc<dyn Fn(EngineBuilder) -> EngineBuilder + Send + Sync>;

/// How scenarios are run.
#[derive(Clone, Default)]
pub struct RunnerOptions {
    /// The `rein` binary, for scenarios that crash a process; without it
    /// they are skipped.
    pub rein_exe: Option<PathBuf>,
    /// Applied to every engine built in this process.
    pub engine_hook: Option<EngineHook>,
    /// Keeps each scenario's directory (config, SQLite file) and, on
    /// PostgreSQL, its database for a post mortem, and says where in the
    /// result.
    pub keep_dirs: bool,
    /// Where each scenario's store lives: a SQLite file in its directory
    /// by default.
    pub store: StoreBackend,
}

/// What became of one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioResult {
    /// Its number.
    pub id: u32,
    /// `C` + its number.
    pub label: String,
    /// Its name.
    pub name: String,
    /// Its layer.
    pub layer: &'static str,
    /// Whether it is a sustained scenario.
    pub long: bool,
    /// The outcome of each run (`crashed→resumed` runs show their final
    /// outcome).
    pub outcomes: Vec<String>,
    /// Broken invariants: any of these fails the suite.
    pub violations: Vec<Violation>,
    /// Mechanisms that fired.
    pub activated: BTreeSet<Mechanism>,
    /// Mechanisms the scenario expects that did not fire: findings.
    pub missing: Vec<Mechanism>,
    /// Why it did not run, when it did not.
    pub skipped: Option<String>,
    /// Why its world could not be built: a harness failure, counted apart
    /// from invariant violations.
    pub error: Option<String>,
    /// How long it took.
    pub elapsed_ms: u64,
    /// Its directory, when kept.
    pub dir: Option<PathBuf>,
    /// The backend its store was on: `sqlite` or `postgres`.
    pub store: &'static str,
    /// Its database, on PostgreSQL (dropped at the end unless kept).
    pub database: Option<String>,
    /// Everything it left behind (not serialized by default: large).
    #[serde(skip)]
    pub evidence: Option<Evidence>,
}

impl ScenarioResult {
    fn empty(s: &Scenario) -> ScenarioResult {
        ScenarioResult {
            id: s.id,
            label: s.label(),
            name: s.name.to_owned(),
            layer: s.layer.name(),
            long: s.long,
            outcomes: Vec::new(),
            violations: Vec::new(),
            activated: BTreeSet::new(),
            missing: Vec::new(),
            skipped: None,
            error: None,
            elapsed_ms: 0,
            dir: None,
            store: "sqlite",
            database: None,
            evidence: None,
        }
    }

    /// Whether an invariant was violated.
    pub fn violated(&self) -> bool {
        !self.violations.is_empty()
    }
}

/// Runs one scenario. Never panics on a scenario's behaviour: whatever the
/// engine does ends up in the result.
pub async fn run_scenario(scenario: &Scenario, options: &RunnerOptions) -> ScenarioResult {
    let started = Instant::now();
    let mut result = ScenarioResult::empty(scenario);
    if scenario.crashes() && options.rein_exe.is_none() {
        result.skipped = Some("crashes a process and no rein binary was given".into());
        return result;
    }
    if scenario.crashes() && !rein_engine::crash::ENABLED {
        // The worker is this same binary: without the feature its crash
        // point would never fire and the scenario would prove nothing.
        result.skipped = Some(
            "crashes a process at a crash point, and this build has none \
             (cargo build -p rein-cli --features crash-points)"
                .into(),
        );
        return result;
    }
    let dir = match tempfile::Builder::new().prefix("rein-chaos-").tempdir() {
        Ok(d) => d,
        Err(e) => {
            result.error = Some(format!("cannot create a scenario directory: {e}"));
            return result;
        }
    };
    result.store = options.store.name();
    let store = match ScenarioStore::open(&options.store, dir.path(), &scenario.label()).await {
        Ok(store) => store,
        Err(e) => {
            result.error = Some(e.to_string());
            return result;
        }
    };
    result.database = store.database();
    let driven = drive(scenario, options, dir.path(), &store).await;
    store.close(options.keep_dirs).await;
    match driven {
        Ok(evidence) => {
            result.violations = invariant::check(&evidence);
            result.activated = mechanism::activated(&evidence);
            result.missing = scenario
                .expects
                .iter()
                .copied()
                .filter(|m| !result.activated.contains(m))
                .collect();
            result.outcomes = evidence
                .runs
                .iter()
                .map(|r| {
                    let outcome = r
                        .report
                        .as_ref()
                        .map_or("no report", |rep| rep.outcome.as_str());
                    match (r.crashed, &r.refused) {
                        (true, _) => format!("crashed→{outcome}"),
                        (false, Some(_)) => "refused".to_owned(),
                        _ => outcome.to_owned(),
                    }
                })
                .collect();
            result.evidence = Some(evidence);
        }
        Err(e) => result.error = Some(e.to_string()),
    }
    if options.keep_dirs {
        let kept = dir.keep();
        result.dir = Some(kept);
    }
    result.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    result
}

/// Collects events as they happen.
fn collector() -> (Observer, Arc<Mutex<Vec<Event>>>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let observer: Observer = Arc::new(move |e: &Event| match sink.lock() {
        Ok(mut v) => v.push(e.clone()),
        Err(p) => p.into_inner().push(e.clone()),
    });
    (observer, events)
}

fn taken(events: &Arc<Mutex<Vec<Event>>>) -> Vec<Event> {
    match events.lock() {
        Ok(v) => v.clone(),
        Err(p) => p.into_inner().clone(),
    }
}

/// The engine of a scenario's process.
pub(crate) fn engine(
    store: Arc<dyn Store>,
    world: &WorldConfig,
    plan: &Plan,
    seed: u64,
    client: &reqwest::Client,
    hook: Option<&EngineHook>,
) -> Result<Engine, ChaosError> {
    let mut builder = Engine::builder(store)
        .http_client(client.clone())
        .breakers(world.breakers(plan))
        .rng_seed(seed);
    if let Some(ms) = plan.tune.store_patience_ms {
        builder = builder.store_patience(std::time::Duration::from_millis(ms));
    }
    if let Some(hook) = hook {
        builder = hook(builder);
    }
    builder
        .build()
        .map_err(|e| ChaosError::Setup(format!("the engine: {e}")))
}

/// One run as it was driven, before the evidence is read back.
struct Driven {
    run_id: RunId,
    tenant: String,
    limits: rein_core::deadline::BudgetLimits,
    policy: rein_core::FailurePolicy,
    report: Option<rein_core::RunReport>,
    events: Vec<Event>,
    model_inputs: Vec<Vec<rein_engine::provider::Message>>,
    observed_ms: Option<u64>,
    crashed: bool,
    escaped: Option<String>,
    refused: Option<String>,
    /// Whether the driving call returned the run handed on unfinished.
    interrupted: bool,
    /// Whether the runner resumed it after the store was healed.
    resumed: bool,
    /// What the store held of it right after its driving call returned.
    at_return: Option<crate::evidence::Snapshot>,
}

/// What the store holds of a run now, read through the durable store
/// (never through the faults).
async fn snapshot(
    store: &Arc<dyn Store>,
    run_id: &RunId,
) -> Result<crate::evidence::Snapshot, ChaosError> {
    let read = |e: rein_store::StoreError| ChaosError::Setup(format!("reading the store: {e}"));
    Ok(crate::evidence::Snapshot {
        stored_status: store
            .get_run(run_id)
            .await
            .map_err(read)?
            .map(|r| r.status.as_str().to_owned()),
        ledger: store.ledger(run_id).await.map_err(read)?,
        events: store.events(run_id, 0).await.map_err(read)?,
    })
}

async fn drive(
    scenario: &Scenario,
    options: &RunnerOptions,
    dir: &Path,
    scenario_store: &ScenarioStore,
) -> Result<Evidence, ChaosError> {
    let plan = &scenario.plan;
    let services = Services::start(plan).await?;
    let world = Arc::new(WorldConfig::write(dir, services.endpoints(), plan)?);
    let client = http_client().map_err(|e| ChaosError::Setup(format!("HTTP client: {e}")))?;
    // The worker of a crash scenario opens the same store from this.
    let db = scenario_store.data.clone();
    // SQLite or PostgreSQL: the durable record every part writes to.
    let durable: Arc<dyn Store> = scenario_store.store.clone();
    let seed = u64::from(scenario.id);

    let mut driven = Vec::new();
    let mut submissions = Vec::new();
    let mut store_injected = Vec::new();
    if let Some(submission) = plan.submission {
        let key = format!("chaos-{}", scenario.label());
        let (attempts, runs) =
            crate::submission::submit(plan, submission, &world, durable.clone(), seed, &key)
                .await?;
        submissions = attempts;
        let (agent, _) = world.bind(plan, &client, None)?;
        for record in runs {
            driven.push(Driven {
                run_id: record.run_id,
                tenant: record.tenant.to_string(),
                limits: agent.budget,
                policy: agent.on_failure,
                report: record.report,
                events: Vec::new(),
                model_inputs: Vec::new(),
                observed_ms: None,
                crashed: false,
                escaped: None,
                refused: None,
                interrupted: false,
                resumed: false,
                at_return: None,
            });
        }
    } else if let Some(approval) = plan.approval {
        let engine = Arc::new(engine(
            durable.clone(),
            &world,
            plan,
            seed,
            &client,
            options.engine_hook.as_ref(),
        )?);
        let run = Continuation {
            scenario,
            exe: options.rein_exe.as_deref(),
            dir,
            db: &db,
            world: &world,
            store: &durable,
            client: &client,
        };
        driven.push(run.approval_flow(approval, &engine).await?);
    } else if let Some(crash) = plan.crash {
        let exe = options
            .rein_exe
            .as_ref()
            .ok_or_else(|| ChaosError::Setup("no rein binary".into()))?;
        driven.push(
            crash_and_resume(scenario, crash, exe, dir, &db, &world, &durable, &client).await?,
        );
    } else {
        let faults = (!plan.store_faults.is_empty()).then(|| {
            let mut hooks = StoreFaults::new(plan.store_faults.clone());
            if let Some(terminator) = scenario_store.terminator() {
                hooks = hooks.terminator(terminator);
            }
            Arc::new(Intercepted::new(durable.clone(), hooks))
        });
        let store: Arc<dyn Store> = match &faults {
            Some(faulty) => faulty.clone(),
            None => durable.clone(),
        };
        let engine = Arc::new(engine(
            store,
            &world,
            plan,
            seed,
            &client,
            options.engine_hook.as_ref(),
        )?);
        let mut handles = Vec::new();
        for i in 0..plan.runs {
            let tenant = plan
                .tenants
                .get(i as usize % plan.tenants.len().max(1))
                .copied()
                .unwrap_or("default")
                .to_owned();
            let run = in_process(
                engine.clone(),
                world.clone(),
                Arc::new(plan.clone()),
                client.clone(),
                tenant,
            );
            if plan.concurrent {
                handles.push(tokio::spawn(run));
            } else {
                if i > 0 && plan.pause_ms > 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(plan.pause_ms)).await;
                }
                driven.push(run.await?);
            }
        }
        for handle in handles {
            match handle.await {
                Ok(run) => driven.push(run?),
                Err(e) => return Err(ChaosError::Setup(format!("a run's task failed: {e}"))),
            }
        }
        if let Some(faulty) = &faults {
            // What each run left in the store when its call returned,
            // before anything (the store back, a resume, reconciliation)
            // repaired it: a run that ended must be whole already.
            for d in &mut driven {
                d.at_return = Some(snapshot(&durable, &d.run_id).await?);
            }
            if faulty.hooks().has_outage() {
                // The outage ends; the marks the process held are written,
                // and the runs it handed on are resumed, as an operator (or
                // another node) would.
                faulty.hooks().heal();
                let held = engine.flush_held_marks(HANG_MARGIN).await;
                if held > 0 {
                    tracing::warn!("{held} held ledger marks were not written after the outage");
                }
                for d in driven.iter_mut().filter(|d| d.interrupted) {
                    resume_in_process(&engine, &world, plan, &client, d).await?;
                }
            }
            store_injected = faulty.hooks().injected();
        }
    }

    // Late deliveries land before the evidence is read.
    let quiet = std::time::Duration::from_secs(10);
    if !services.tool_proxy.wait_idle(quiet).await {
        tracing::warn!("the tool proxy still had requests in flight after {quiet:?}");
    }
    // Requests from here on are the reconciler's, not any run's.
    let reconcile_from = services.tool_proxy.trace().len();
    let desk_reconcile_from = services.desk.requests().last().map_or(0, |r| r.seq);
    if plan.reconcile {
        let reconciler = Reconciler::new(
            durable.clone(),
            Arc::new(SystemClock::new()),
            client.clone(),
            bind_tools(&world.registry).map_err(|e| ChaosError::Setup(e.to_string()))?,
            bind_compensations(&world.registry).map_err(|e| ChaosError::Setup(e.to_string()))?,
            ReconcileConfig {
                pending_timeout: std::time::Duration::ZERO,
                ..ReconcileConfig::default()
            },
        );
        match tokio::time::timeout(HANG_MARGIN, reconciler.sweep(SweepClasses::ALL)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!("reconciliation after the runs failed: {e}"),
            Err(_) => {
                return Err(ChaosError::Setup(format!(
                    "reconciliation did not end within {HANG_MARGIN:?}"
                )));
            }
        }
    }

    let mut runs = Vec::new();
    for mut d in driven {
        let read = |e: rein_store::StoreError| ChaosError::Setup(format!("reading the store: {e}"));
        // The durable record is the evidence: what the store holds is what
        // an operator, a resume or a reconciler would see.
        let stored = durable.get_run(&d.run_id).await.map_err(read)?;
        let stored_events = durable.events(&d.run_id, 0).await.map_err(read)?;
        // Events stating a record the store did not take are written with
        // it or not at all (invariant 11 holds the statements to the
        // ledger): every other event the run emitted must be durable.
        let others = |events: &[Event]| events.iter().filter(|e| !e.data.states_record()).count();
        let lost_events = others(&d.events).saturating_sub(others(&stored_events));
        if !stored_events.is_empty() {
            d.events = stored_events;
        }
        let approvals = durable
            .approvals(&rein_store::ApprovalFilter {
                run_id: Some(d.run_id.clone()),
                limit: rein_store::approval::MAX_APPROVALS_PAGE,
                ..rein_store::ApprovalFilter::default()
            })
            .await
            .map_err(read)?;
        runs.push(RunEvidence {
            approvals,
            stored_status: stored.map(|r| r.status.as_str().to_owned()),
            lost_events,
            ledger: durable.ledger(&d.run_id).await.map_err(read)?,
            intents: durable.intents(&d.run_id).await.map_err(read)?,
            run_id: d.run_id,
            tenant: d.tenant,
            limits: d.limits,
            policy: d.policy,
            report: d.report,
            events: d.events,
            model_inputs: d.model_inputs,
            observed_ms: d.observed_ms,
            crashed: d.crashed,
            escaped: d.escaped,
            refused: d.refused,
            resumed: d.resumed,
            at_return: d.at_return,
        });
    }
    services.tool_proxy.wait_idle(quiet).await;
    let mut peaks = BTreeMap::new();
    peaks.insert(
        crate::world::GROUP.to_owned(),
        services.tool_proxy.peak_calls_in_flight(),
    );
    Ok(Evidence {
        runs,
        desk: services.desk.log(),
        tool_trace: services.tool_proxy.trace(),
        reconcile_from,
        desk_reconcile_from,
        model_trace: services
            .model_proxy
            .as_ref()
            .map(|p| p.trace())
            .unwrap_or_default(),
        backup_trace: services
            .backup_proxy
            .as_ref()
            .map(|p| p.trace())
            .unwrap_or_default(),
        classes: world
            .registry
            .tools()
            .iter()
            .map(|(name, spec)| (name.clone(), spec.class))
            .collect(),
        ceilings: Services::ceilings(&world.registry, plan),
        peaks,
        model_usage: services
            .model
            .as_ref()
            .map(|m| m.usage_log())
            .unwrap_or_default(),
        backup_usage: services
            .backup
            .as_ref()
            .map(|m| m.usage_log())
            .unwrap_or_default(),
        prices: model_prices(&world.registry),
        concurrent_runs: plan.concurrent,
        gated: if plan.tune.gate_email {
            BTreeSet::from([rein_testkit::order_desk::SEND_EMAIL.to_owned()])
        } else {
            BTreeSet::new()
        },
        submissions,
        fan_out_cap: Services::fan_out_cap(&world.registry, plan),
        adaptive_probe: plan.tune.adaptive_probe,
        rates: Services::rates(&world.registry, plan),
        model_tokens: plan.tune.provider_tokens,
        model_hammered: services.model.as_ref().map_or(0, |m| m.hammered()),
        store_injected,
        groups: world
            .registry
            .tools()
            .iter()
            .map(|(name, spec)| (name.clone(), spec.resource_group.clone()))
            .collect(),
        write_keys: world
            .registry
            .tools()
            .iter()
            .filter_map(|(name, spec)| {
                let key = spec.resource_key.as_ref()?;
                Some((
                    name.clone(),
                    crate::evidence::WriteKey {
                        group: spec.resource_group.clone(),
                        path: key.path().to_vec(),
                    },
                ))
            })
            .collect(),
    })
}

/// The price of each model of the world's mock servers, per million
/// tokens in micro-dollars, keyed `mock/<model>` (the primary server, whose
/// providers `mock` and `mock_stream` price alike) and `backup/<model>`.
fn model_prices(registry: &rein_core::registry::Registry) -> BTreeMap<String, (u64, u64)> {
    ["mock", "backup"]
        .into_iter()
        .filter_map(|server| registry.provider(server).map(|p| (server, p)))
        .flat_map(|(server, p)| {
            p.prices.iter().map(move |(model, price)| {
                (
                    format!("{server}/{model}"),
                    (
                        price.input_per_mtok.micros(),
                        price.output_per_mtok.micros(),
                    ),
                )
            })
        })
        .collect()
}

/// Drives one run in this process; a panic or an engine error is caught
/// and recorded, never propagated.
async fn in_process(
    engine: Arc<Engine>,
    world: Arc<WorldConfig>,
    plan: Arc<Plan>,
    client: reqwest::Client,
    tenant: String,
) -> Result<Driven, ChaosError> {
    let (agent, recording) = world.bind(&plan, &client, None)?;
    let run_id = crate::new_run_id();
    let (observer, events) = collector();
    let limits = agent.budget;
    let policy = agent.on_failure;
    let schemas = world.schemas.clone();
    let tenant_id =
        TenantId::new(tenant.clone()).map_err(|e| ChaosError::Setup(format!("tenant: {e}")))?;
    let request = RunRequest {
        run_id: Some(run_id.clone()),
        tenant: Some(tenant_id),
        input: INPUT.to_owned(),
        observer: Some(observer),
        enqueued: false,
        cancel: None,
        reservation: None,
        trace_parent: None,
        picked: None,
    };
    let started = Instant::now();
    let limit = limits.wall_clock() + HANG_MARGIN;
    let mut handle =
        tokio::spawn(async move { engine.run(&agent, schemas.as_ref(), request).await });
    let mut interrupted = false;
    let (report, escaped, refused) = match tokio::time::timeout(limit, &mut handle).await {
        Ok(Ok(Ok(out))) => {
            interrupted = out.interrupted;
            (Some(out.report), None, None)
        }
        Ok(Ok(Err(e))) => (None, None, Some(e.to_string())),
        Ok(Err(e)) if e.is_panic() => (None, Some(format!("the run panicked: {e}")), None),
        Ok(Err(e)) => (None, Some(format!("the run's task ended: {e}")), None),
        Err(_) => {
            handle.abort();
            (
                None,
                Some(format!("the run did not return within {limit:?}")),
                None,
            )
        }
    };
    let observed_ms = Some(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
    Ok(Driven {
        run_id,
        tenant,
        limits,
        policy,
        report,
        events: taken(&events),
        model_inputs: recording.inputs(),
        observed_ms,
        crashed: false,
        escaped,
        refused,
        interrupted,
        resumed: false,
        at_return: None,
    })
}

/// Resumes a run its first call handed on (the store stayed away), on the
/// same engine once the store is back: its report becomes the resumed
/// run's, its events are what the store holds.
async fn resume_in_process(
    engine: &Arc<Engine>,
    world: &Arc<WorldConfig>,
    plan: &Plan,
    client: &reqwest::Client,
    d: &mut Driven,
) -> Result<(), ChaosError> {
    let (agent, recording) = world.bind(plan, client, None)?;
    let (observer, resumed) = collector();
    let limit = agent.budget.wall_clock() + HANG_MARGIN;
    let engine = engine.clone();
    let schemas = world.schemas.clone();
    let id = d.run_id.clone();
    let mut handle = tokio::spawn(async move {
        engine
            .resume(&agent, schemas.as_ref(), &id, Some(observer))
            .await
    });
    d.resumed = true;
    d.observed_ms = None;
    match tokio::time::timeout(limit, &mut handle).await {
        Ok(Ok(Ok(out))) => {
            d.interrupted = out.interrupted;
            d.report = Some(out.report);
        }
        Ok(Ok(Err(e))) => {
            d.escaped = Some(format!("the handed-on run could not be resumed: {e}"));
        }
        Ok(Err(e)) => d.escaped = Some(format!("the resume panicked: {e}")),
        Err(_) => {
            handle.abort();
            d.escaped = Some(format!("the resume did not return within {limit:?}"));
        }
    }
    d.events.extend(taken(&resumed));
    d.model_inputs.extend(recording.inputs());
    Ok(())
}

/// Runs the scenario in a `rein` worker process armed to abort at the
/// crash point, then resumes the run here, as an operator would.
#[allow(clippy::too_many_arguments)]
async fn crash_and_resume(
    scenario: &Scenario,
    crash: crate::scenario::Crash,
    exe: &Path,
    dir: &Path,
    db: &Path,
    world: &WorldConfig,
    store: &Arc<dyn Store>,
    client: &reqwest::Client,
) -> Result<Driven, ChaosError> {
    let plan = &scenario.plan;
    let run_id = crate::new_run_id();
    let journal = dir.join("model-inputs.jsonl");
    let (agent, recording) = world.bind(plan, client, None)?;
    let limit = agent.budget.wall_clock() + HANG_MARGIN;
    let (crashed, mut escaped) =
        crash_worker(scenario, crash, exe, dir, db, &run_id, false, limit).await?;
    let mut events = store
        .events(&run_id, 0)
        .await
        .map_err(|e| ChaosError::Setup(format!("reading the store: {e}")))?;
    let mut model_inputs = RecordingProvider::read_journal(&journal);
    let limits = agent.budget;
    let policy = agent.on_failure;
    let mut report = None;
    let mut refused = None;
    if crashed {
        let engine = Arc::new(engine(
            store.clone(),
            world,
            plan,
            u64::from(scenario.id),
            client,
            None,
        )?);
        let (observer, resumed) = collector();
        let schemas = world.schemas.clone();
        let id = run_id.clone();
        let mut handle = tokio::spawn(async move {
            engine
                .resume(&agent, schemas.as_ref(), &id, Some(observer))
                .await
        });
        match tokio::time::timeout(limit, &mut handle).await {
            Ok(Ok(Ok(out))) => report = Some(out.report),
            Ok(Ok(Err(e))) => {
                escaped = Some(format!("the crashed run could not be resumed: {e}"));
            }
            Ok(Err(e)) => escaped = Some(format!("the resume panicked: {e}")),
            Err(_) => {
                handle.abort();
                escaped = Some(format!("the resume did not return within {limit:?}"));
            }
        }
        // The resumed process's events are durable (crash scenarios fault
        // no storage), numbered by the store after the crashed process's.
        events = store
            .events(&run_id, 0)
            .await
            .map_err(|e| ChaosError::Setup(format!("reading the store: {e}")))?;
        if events
            .iter()
            .all(|e| e.kind() != rein_core::EventKind::RunResumed)
        {
            events.extend(taken(&resumed));
        }
        model_inputs.extend(recording.inputs());
    } else if escaped.is_none() {
        match store.get_run(&run_id).await {
            Ok(Some(record)) => report = record.report,
            Ok(None) => refused = Some("the worker never created the run".into()),
            Err(e) => return Err(ChaosError::Setup(format!("reading the store: {e}"))),
        }
    }
    Ok(Driven {
        run_id,
        tenant: "default".into(),
        limits,
        policy,
        report,
        events,
        model_inputs,
        observed_ms: None,
        crashed,
        escaped,
        refused,
        interrupted: false,
        resumed: false,
        at_return: None,
    })
}

/// What continuing a run of an approval scenario needs: the scenario, the
/// `rein` binary for its workers, and the world and store it runs in.
struct Continuation<'a> {
    scenario: &'a Scenario,
    exe: Option<&'a Path>,
    dir: &'a Path,
    db: &'a Path,
    world: &'a Arc<WorldConfig>,
    store: &'a Arc<dyn Store>,
    client: &'a reqwest::Client,
}

impl Continuation<'_> {
    fn exe(&self) -> Result<&Path, ChaosError> {
        self.exe
            .ok_or_else(|| ChaosError::Setup("no rein binary".into()))
    }

    /// Drives an approval scenario's run, as its people would: the run
    /// pauses for a human (here, or in a worker killed while it waits at
    /// the plan's crash point), the human decides in the store (approve,
    /// reject, or let the window close), and the run is continued (in a
    /// worker killed while it applies the decision, then here; or here
    /// at once).
    async fn approval_flow(
        &self,
        approval: Approval,
        engine: &Arc<Engine>,
    ) -> Result<Driven, ChaosError> {
        use rein_core::approval::{Decision, Verdict};
        let plan = &self.scenario.plan;
        let read = |e: rein_store::StoreError| ChaosError::Setup(format!("the store: {e}"));
        let page = rein_store::approval::MAX_APPROVALS_PAGE;
        let mut d = match plan.crash {
            None => {
                in_process(
                    engine.clone(),
                    self.world.clone(),
                    Arc::new(plan.clone()),
                    self.client.clone(),
                    "default".to_owned(),
                )
                .await?
            }
            Some(crash) => {
                let run_id = crate::new_run_id();
                let (agent, _) = self.world.bind(plan, self.client, None)?;
                let limit = agent.budget.wall_clock() + HANG_MARGIN;
                let (crashed, escaped) = crash_worker(
                    self.scenario,
                    crash,
                    self.exe()?,
                    self.dir,
                    self.db,
                    &run_id,
                    false,
                    limit,
                )
                .await?;
                Driven {
                    run_id,
                    tenant: "default".into(),
                    limits: agent.budget,
                    policy: agent.on_failure,
                    report: None,
                    events: Vec::new(),
                    model_inputs: RecordingProvider::read_journal(
                        &self.dir.join("model-inputs.jsonl"),
                    ),
                    observed_ms: None,
                    crashed,
                    escaped,
                    refused: None,
                    interrupted: false,
                    resumed: false,
                    at_return: None,
                }
            }
        };
        if d.escaped.is_some() {
            return Ok(d);
        }
        let waiting = self
            .store
            .approvals(&rein_store::ApprovalFilter {
                run_id: Some(d.run_id.clone()),
                pending: true,
                limit: page,
                ..rein_store::ApprovalFilter::default()
            })
            .await
            .map_err(read)?;
        let now = rein_core::Timestamp::from_system_time(std::time::SystemTime::now());
        match approval.decide {
            Decide::Expire => {
                if let Some(closes) = waiting.iter().map(|a| a.request.expires_at_ms).max() {
                    self.store
                        .expire_approvals(closes, page)
                        .await
                        .map_err(read)?;
                }
            }
            decide => {
                let verdict = if decide == Decide::Approve {
                    Verdict::Approved
                } else {
                    Verdict::Rejected
                };
                for a in &waiting {
                    let decision = Decision {
                        verdict,
                        by: "chaos-operator".into(),
                        at_ms: now,
                        reason: (verdict == Verdict::Rejected)
                            .then(|| "the chaos operator declines".to_owned()),
                    };
                    self.store
                        .decide_approval(&d.run_id, &a.request.intent_id, decision)
                        .await
                        .map_err(read)?;
                }
            }
        }
        // Nothing waited (the gate let everything through): the run ended.
        if waiting.is_empty() {
            return Ok(d);
        }
        if let Some(crash) = approval.then_crash {
            let limit = d.limits.wall_clock() + HANG_MARGIN;
            let (crashed, escaped) = crash_worker(
                self.scenario,
                crash,
                self.exe()?,
                self.dir,
                self.db,
                &d.run_id,
                true,
                limit,
            )
            .await?;
            d.crashed |= crashed;
            if escaped.is_some() {
                d.escaped = escaped;
                return Ok(d);
            }
            if !crashed {
                // It ended in the worker without reaching the crash point.
                d.report = self
                    .store
                    .get_run(&d.run_id)
                    .await
                    .map_err(read)?
                    .and_then(|r| r.report);
                d.events = self.store.events(&d.run_id, 0).await.map_err(read)?;
                return Ok(d);
            }
        }
        resume_in_process(engine, self.world, plan, self.client, &mut d).await?;
        d.events = self.store.events(&d.run_id, 0).await.map_err(read)?;
        Ok(d)
    }
}

/// Drives scenario `scenario`'s run `run_id` in a `rein chaos --worker`
/// process armed to abort at `crash` (continuing it, after a human's
/// decision, when `resume`). Whether it reached the crash point, and what
/// escaped otherwise (a hang past `limit`, another exit).
#[allow(clippy::too_many_arguments)]
async fn crash_worker(
    scenario: &Scenario,
    crash: crate::scenario::Crash,
    exe: &Path,
    dir: &Path,
    db: &Path,
    run_id: &RunId,
    resume: bool,
    limit: std::time::Duration,
) -> Result<(bool, Option<String>), ChaosError> {
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("chaos")
        .arg("--worker")
        .arg(dir)
        .arg("--scenario")
        .arg(scenario.id.to_string())
        .arg("--run-id")
        .arg(run_id.as_str())
        .arg("--data")
        .arg(db)
        .env(CRASH_ENV, format!("{}:{}", crash.point, crash.nth))
        .env("RUST_LOG", "off")
        .kill_on_drop(true);
    if resume {
        cmd.arg("--resume");
    }
    // kill_on_drop: a worker that hangs is killed when the wait is dropped.
    let output = match tokio::time::timeout(limit, cmd.output()).await {
        Ok(output) => Some(
            output
                .map_err(|e| ChaosError::Setup(format!("cannot start {}: {e}", exe.display())))?,
        ),
        Err(_) => None,
    };
    let mut escaped = None;
    let mut crashed = false;
    match &output {
        None => escaped = Some(format!("the worker did not end within {limit:?}; killed")),
        Some(output) => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            // Only the planned abort counts as the crash: any other abort
            // (a double panic, a failed allocation) escaped the run.
            let marker = format!("crash point {}:{} reached", crash.point, crash.nth);
            crashed = aborted(&output.status) && stderr.contains(&marker);
            if !crashed && !output.status.success() {
                let tail: String = stderr.lines().rev().take(5).collect::<Vec<_>>().join(" / ");
                escaped = Some(format!("the worker exited with {}: {tail}", output.status));
            }
        }
    }
    Ok((crashed, escaped))
}

#[cfg(unix)]
fn aborted(status: &std::process::ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    status.signal() == Some(6)
}

#[cfg(not(unix))]
fn aborted(_status: &std::process::ExitStatus) -> bool {
    false
}

/// A suite's totals.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The catalog version.
    pub catalog_version: u32,
    /// Scenarios run.
    pub ran: usize,
    /// Scenarios skipped.
    pub skipped: usize,
    /// Scenarios whose world could not be built.
    pub errors: usize,
    /// Invariant violations in all.
    pub violations: usize,
    /// Runs in all, and how each ended.
    pub runs: usize,
    /// Outcomes across runs.
    pub outcomes: BTreeMap<String, usize>,
    /// Per mechanism: the scenarios in which it fired, and the share of
    /// the scenarios run.
    pub activation: Vec<Activation>,
    /// Mechanisms issue 5 requires that never fired.
    pub never_fired: Vec<Mechanism>,
    /// Scenarios with expected mechanisms that did not fire.
    pub findings: usize,
}

/// One row of the activation table.
#[derive(Debug, Clone, Serialize)]
pub struct Activation {
    /// The mechanism.
    pub mechanism: Mechanism,
    /// Scenarios in which it fired.
    pub scenarios: usize,
    /// `scenarios / ran`.
    pub rate: f64,
}

impl Summary {
    /// Totals over `results`.
    pub fn of(results: &[ScenarioResult]) -> Summary {
        let ran: Vec<&ScenarioResult> = results
            .iter()
            .filter(|r| r.skipped.is_none() && r.error.is_none())
            .collect();
        let mut outcomes = BTreeMap::new();
        for o in ran.iter().flat_map(|r| &r.outcomes) {
            *outcomes.entry(o.clone()).or_insert(0) += 1;
        }
        let activation: Vec<Activation> = Mechanism::ALL
            .iter()
            .map(|m| {
                let n = ran.iter().filter(|r| r.activated.contains(m)).count();
                Activation {
                    mechanism: *m,
                    scenarios: n,
                    rate: if ran.is_empty() {
                        0.0
                    } else {
                        n as f64 / ran.len() as f64
                    },
                }
            })
            .collect();
        let never_fired = Mechanism::REQUIRED
            .iter()
            .copied()
            .filter(|m| !ran.iter().any(|r| r.activated.contains(m)))
            .collect();
        Summary {
            catalog_version: crate::scenario::CATALOG_VERSION,
            ran: ran.len(),
            skipped: results.iter().filter(|r| r.skipped.is_some()).count(),
            errors: results.iter().filter(|r| r.error.is_some()).count(),
            violations: results.iter().map(|r| r.violations.len()).sum(),
            runs: ran.iter().map(|r| r.outcomes.len()).sum(),
            outcomes,
            activation,
            never_fired,
            findings: ran.iter().filter(|r| !r.missing.is_empty()).count(),
        }
    }
}
