//! What a scenario leaves behind: everything the invariant checker and the
//! activation counter read.
//!
//! # Why gather it in one place
//!
//! The checker must be a pure function over recorded facts so that it can
//! be tested on its own (a broken mechanism must produce a violation) and
//! so that a failing scenario can be inspected offline from its JSON. The
//! facts come from three independent witnesses: rein's own event stream
//! and ledger, the order desk's log of what it actually did, and the fault
//! proxy's trace of what crossed the wire.

use std::collections::BTreeMap;

use rein_core::deadline::BudgetLimits;
use rein_core::{Event, FailurePolicy, LedgerRecord, RunId, RunReport, ToolClass};
use rein_engine::provider::Message;
use rein_store::PlannedIntent;
use rein_testkit::mock_model::UsageEntry;
use rein_testkit::order_desk::DeskLog;
use serde::Serialize;

use crate::proxy::TraceRecord;

/// One run of a scenario, as rein recorded it.
#[derive(Debug, Clone, Serialize)]
pub struct RunEvidence {
    /// The run.
    pub run_id: RunId,
    /// Its tenant.
    pub tenant: String,
    /// The limits it ran under.
    pub limits: BudgetLimits,
    /// What its agent does with effects when it fails.
    pub policy: FailurePolicy,
    /// Its report, once it ended.
    pub report: Option<RunReport>,
    /// Every event, in order: what was durable from a crashed process,
    /// then everything the resuming process emitted.
    pub events: Vec<Event>,
    /// The ledger at the end (after reconciliation).
    pub ledger: Vec<LedgerRecord>,
    /// The persisted plans, with the step of each.
    pub intents: Vec<(u32, PlannedIntent)>,
    /// What the model received, one entry per model call.
    pub model_inputs: Vec<Vec<Message>>,
    /// Wall-clock time the driving call took, measured by the runner around
    /// it (not rein's own figure); `None` for a crashed-and-resumed run,
    /// whose two processes' times rein itself must add up.
    pub observed_ms: Option<u64>,
    /// Its status as the store holds it after everything ended.
    pub stored_status: Option<String>,
    /// Events the run emitted that never became durable, those stating a
    /// record aside (written with it or not at all; invariant 11 holds
    /// them to the ledger).
    pub lost_events: usize,
    /// Whether a process driving it was aborted at a crash point.
    pub crashed: bool,
    /// Something that escaped the run's structured outcome: a panic, an
    /// engine error, a process that died other than at its crash point.
    pub escaped: Option<String>,
    /// Why the engine refused to start it (a structured error before the
    /// run existed, e.g. the store refused to record it).
    pub refused: Option<String>,
    /// Whether its first call handed it on unfinished (the store stayed
    /// away) and the runner resumed it once the store was back.
    pub resumed: bool,
    /// What the store held of it right after its first call returned,
    /// before the store was healed, a resume or reconciliation: taken in
    /// scenarios that fault the store.
    pub at_return: Option<Snapshot>,
    /// The approvals its calls waited for, with their decisions.
    pub approvals: Vec<rein_core::approval::Approval>,
}

/// A run as the store held it at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// Its status.
    pub stored_status: Option<String>,
    /// Its ledger.
    pub ledger: Vec<LedgerRecord>,
    /// Its events.
    pub events: Vec<Event>,
}

/// Everything a scenario left behind.
#[derive(Debug, Clone, Serialize)]
pub struct Evidence {
    /// The runs, in the order they started.
    pub runs: Vec<RunEvidence>,
    /// The order desk's own log: ground truth for side effects.
    pub desk: DeskLog,
    /// What crossed the proxy in front of the tools.
    pub tool_trace: Vec<TraceRecord>,
    /// Where in `tool_trace` the post-run reconciliation began: requests
    /// from that position on were made by the reconciler, not by a run.
    pub reconcile_from: usize,
    /// The desk's last request seq before the post-run reconciliation.
    pub desk_reconcile_from: u64,
    /// What crossed the proxy in front of the model, when one was used.
    pub model_trace: Vec<TraceRecord>,
    /// What crossed the proxy in front of the backup model (the `backup`
    /// provider), when one was started.
    pub backup_trace: Vec<TraceRecord>,
    /// The class of every tool of the world.
    pub classes: BTreeMap<String, ToolClass>,
    /// Concurrency ceilings per resource group.
    pub ceilings: BTreeMap<String, u32>,
    /// Peak concurrency measured at the proxy per resource group.
    pub peaks: BTreeMap<String, usize>,
    /// The usage the primary mock model server reported, answer by answer:
    /// the model side's own count.
    pub model_usage: Vec<UsageEntry>,
    /// The usage the backup mock model server reported.
    pub backup_usage: Vec<UsageEntry>,
    /// Per-million-token prices (input, output) in micro-dollars, keyed
    /// `mock/<model>` and `backup/<model>`.
    pub prices: BTreeMap<String, (u64, u64)>,
    /// What the client saw of its submissions, when the scenario submits
    /// through the server.
    pub submissions: Vec<SubmissionAttempt>,
    /// Tools whose arms a scenario's own concurrency makes unsafe to judge
    /// by event order alone (runs that share breakers concurrently).
    pub concurrent_runs: bool,
    /// The calls one turn of the scenario's agent may propose.
    pub fan_out_cap: u32,
    /// Request buckets per resource group: (calls per second, burst).
    pub rates: BTreeMap<String, (f64, u32)>,
    /// The token bucket of the agent's model provider: (tokens per minute,
    /// token burst), when the scenario gives it one.
    pub model_tokens: Option<(u64, u64)>,
    /// Requests the primary mock model received while a 429 of its own
    /// still held (`Plan::enforced_retry_after`): sent into an empty
    /// provider bucket.
    pub model_hammered: usize,
    /// What the store faults injected, one line per refused (or, on
    /// PostgreSQL, terminated) write.
    pub store_injected: Vec<String>,
    /// The resource group of every tool of the world.
    pub groups: BTreeMap<String, String>,
    /// The tools that declare the resource their writes change, by name.
    pub write_keys: BTreeMap<String, WriteKey>,
    /// Whether the scenario probes adaptive concurrency: the calls of each
    /// group with a ceiling must fall under the injected fault and rise
    /// back after it.
    pub adaptive_probe: bool,
    /// The tools whose calls need a human's approval in this scenario.
    pub gated: std::collections::BTreeSet<String>,
}

/// Where a tool's writes name their resource: its resource group and the
/// path of its `resource_key` below the arguments.
#[derive(Debug, Clone, Serialize)]
pub struct WriteKey {
    /// The tool's resource group.
    pub group: String,
    /// The path below `args`.
    pub path: Vec<String>,
}

impl Evidence {
    /// The class of `tool`, if the world knows it.
    pub fn class(&self, tool: &str) -> Option<ToolClass> {
        self.classes.get(tool).copied()
    }
}

/// One attempt of a client to submit a run.
#[derive(Debug, Clone, Serialize)]
pub struct SubmissionAttempt {
    /// The `Idempotency-Key` it carried.
    pub key: String,
    /// The status it got; `None` for a transport error.
    pub status: Option<u16>,
    /// Whether the response was a replay (`Idempotency-Replayed: true`).
    pub replayed: bool,
    /// The run it named (`Location`), if any.
    pub location: Option<String>,
}
