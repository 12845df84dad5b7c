//! The worker: the process a crash scenario aborts.
//!
//! # Why a separate process
//!
//! "A crash never loses or duplicates an effect" is a claim about a
//! process that dies between two writes with no unwinding and no flushing.
//! Only a real `abort` at a named crash point proves it, and that kills
//! whatever process reaches it — so the run is driven by `rein chaos
//! --worker`, armed through `REIN_CRASH_AT`, while the suite's own process
//! survives to resume the run and check the invariants.

use std::path::Path;
use std::sync::Arc;

use rein_core::{RunId, TenantId};
use rein_engine::run::{RunRequest, http_client};
use rein_store::Store;

use crate::ChaosError;
use crate::runner::INPUT;
use crate::scenario::catalog;
use crate::store_fault::faulty;
use crate::world::WorldConfig;

/// Drives scenario `id`'s run `run_id` in this process, over the world
/// config in `dir` and the store `data` (a SQLite file, or the scenario
/// database's URL on PostgreSQL), or with `resume` continues it (after a
/// human's decision). Returns when the run ends (if the crash point was
/// never reached).
///
/// # Errors
///
/// When the scenario, its world or its store cannot be set up.
pub async fn work(
    id: u32,
    dir: &Path,
    run_id: &str,
    data: &Path,
    resume: bool,
) -> Result<String, ChaosError> {
    let scenario = catalog()
        .into_iter()
        .find(|s| s.id == id)
        .ok_or(ChaosError::UnknownScenario(id))?;
    let plan = &scenario.plan;
    let world = WorldConfig::load(dir)?;
    let client = http_client().map_err(|e| ChaosError::Setup(format!("HTTP client: {e}")))?;
    let durable = crate::backend::open_data(data).await?;
    let store: Arc<dyn Store> = if plan.store_faults.is_empty() {
        durable
    } else {
        Arc::new(faulty(durable, plan.store_faults.clone()))
    };
    let engine = crate::runner::engine(store, &world, plan, u64::from(id), &client, None)?;
    let (agent, _) = world.bind(plan, &client, Some(dir.join("model-inputs.jsonl")))?;
    let run_id =
        RunId::new(run_id.to_owned()).map_err(|e| ChaosError::Setup(format!("run id: {e}")))?;
    let tenant = TenantId::new("default").map_err(|e| ChaosError::Setup(format!("tenant: {e}")))?;
    if resume {
        let out = engine
            .resume(&agent, world.schemas.as_ref(), &run_id, None)
            .await
            .map_err(|e| ChaosError::Setup(format!("the run could not be resumed: {e}")))?;
        return Ok(out.report.outcome.as_str().to_owned());
    }
    let out = engine
        .run(
            &agent,
            world.schemas.as_ref(),
            RunRequest {
                run_id: Some(run_id),
                tenant: Some(tenant),
                input: INPUT.to_owned(),
                observer: None,
                enqueued: false,
                cancel: None,
                reservation: None,
                trace_parent: None,
                picked: None,
            },
        )
        .await
        .map_err(|e| ChaosError::Setup(format!("the run could not start: {e}")))?;
    Ok(out.report.outcome.as_str().to_owned())
}
