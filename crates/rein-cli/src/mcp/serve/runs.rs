//! The runs of `rein mcp serve`: one per tenant, begun at its first call
//! (over stdio, at start), each ended by the agent's failure policy when
//! the server stops.
//!
//! # Why one run per tenant
//!
//! A run is what rein bounds (its budget) and records (its ledger, its
//! report), and within a run the same intent is one action. Over stdio
//! the server has one client, and its session is the run. Over streamable
//! HTTP a client may come back in a new session, and from protocol
//! `2026-07-28` there are no sessions at all: what ties a repeated call to
//! the first one is who sends it, its key's tenant. So each tenant's calls
//! are one run for the server's life: a client that sends a call again
//! after a dropped connection gets the recorded answer, never a second
//! effect; tenants keep separate budgets and ledgers.

use std::collections::HashMap;
use std::sync::Arc;

use rein_core::TenantId;
use rein_engine::run::{AgentBinding, RunHandle, RunOutput, RunRequest};
use tokio_util::sync::CancellationToken;

use crate::run::Session;

/// A tenant's run, as far as it got.
pub enum Slot {
    /// Not begun: no call yet.
    Fresh,
    /// Taking calls.
    Open(Box<RunHandle<'static>>),
    /// Ended: the server is stopping.
    Ended,
}

/// The runs of one server; see the module docs.
pub struct Runs {
    session: &'static Session,
    binding: &'static AgentBinding,
    default_tenant: TenantId,
    transport: &'static str,
    slots: std::sync::Mutex<HashMap<TenantId, Arc<tokio::sync::Mutex<Slot>>>>,
    /// Cancelled when the server stops: no run begins, and calls waiting
    /// for an approval give up (they hold their run's slot).
    closing: CancellationToken,
}

impl Runs {
    /// No runs yet, of `binding` in `session`, over `transport` (for the
    /// run's input); `default_tenant` is the tenant of unauthenticated
    /// calls.
    pub fn new(
        session: &'static Session,
        binding: &'static AgentBinding,
        default_tenant: TenantId,
        transport: &'static str,
    ) -> Runs {
        Runs {
            session,
            binding,
            default_tenant,
            transport,
            slots: std::sync::Mutex::new(HashMap::new()),
            closing: CancellationToken::new(),
        }
    }

    /// Cancelled when the server stops.
    pub fn closing(&self) -> &CancellationToken {
        &self.closing
    }

    /// The tenant of calls that name none.
    pub fn default_tenant(&self) -> &TenantId {
        &self.default_tenant
    }

    /// The slot of `tenant`'s run: its calls are made one at a time.
    pub fn slot(&self, tenant: &TenantId) -> Arc<tokio::sync::Mutex<Slot>> {
        let mut slots = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        slots
            .entry(tenant.clone())
            .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(Slot::Fresh)))
            .clone()
    }

    /// The run of `slot`, begun for `tenant` if it was not.
    ///
    /// # Errors
    ///
    /// Why no call can be made: the server is stopping, or the run could
    /// not begin (the store refused it).
    pub async fn open<'s>(
        &self,
        slot: &'s mut Slot,
        tenant: &TenantId,
    ) -> Result<&'s mut RunHandle<'static>, String> {
        if matches!(slot, Slot::Fresh) {
            if self.closing.is_cancelled() {
                return Err("the server is stopping".to_owned());
            }
            let handle = self
                .begin(tenant)
                .await
                .map_err(|e| format!("the run could not begin: {e}"))?;
            *slot = Slot::Open(Box::new(handle));
        }
        match slot {
            Slot::Open(handle) => Ok(handle),
            _ => Err("the server is stopping: its runs have ended".to_owned()),
        }
    }

    /// Begins `tenant`'s run, and says so on stderr.
    pub async fn begin(
        &self,
        tenant: &TenantId,
    ) -> Result<RunHandle<'static>, rein_engine::run::EngineError> {
        let handle = self
            .session
            .engine
            .begin(
                self.binding,
                &self.session.schemas,
                RunRequest {
                    tenant: Some(tenant.clone()),
                    input: format!(
                        "MCP session over {}: the tools of agent `{}`",
                        self.transport, self.binding.name
                    ),
                    ..RunRequest::default()
                },
            )
            .await?;
        crate::log::note(
            crate::log::Level::Info,
            &format!(
                "rein mcp serve: tenant `{tenant}` calls the tools of agent `{}` as run {}",
                self.binding.name,
                handle.run_id()
            ),
        );
        Ok(handle)
    }

    /// Ends every run by the agent's failure policy; no run begins after
    /// this. A call waiting for its approval gives up at once (it is not
    /// sent); one in flight finishes first (it holds its run until it is
    /// recorded, bounded by its own deadline).
    ///
    /// # Errors
    ///
    /// When a run's end cannot be recorded.
    pub async fn end_all(&self) -> Result<Vec<RunOutput>, rein_engine::run::EngineError> {
        self.closing.cancel();
        let slots: Vec<_> = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        let mut ended = Vec::new();
        for slot in slots {
            let mut slot = slot.lock().await;
            if let Slot::Open(handle) = std::mem::replace(&mut *slot, Slot::Ended) {
                let run_id = handle.run_id().clone();
                let output = handle.finish(None).await?;
                crate::log::note(
                    crate::log::Level::Info,
                    &format!(
                        "rein mcp serve: run {run_id} ended {}: {}",
                        output.report.outcome, output.report.summary
                    ),
                );
                ended.push(output);
            }
        }
        Ok(ended)
    }
}
