//! Traces: each run as an OpenTelemetry trace — a span per run, step,
//! model call and tool attempt — exported over OTLP/HTTP, and the W3C
//! `traceparent` that ties a run to its caller, its tools and its
//! providers.
//!
//! # Why spans are built from the event stream
//!
//! Every decision of a run is already a typed [`Event`](rein_core::Event)
//! with its correlation fields and its time (the run's emitter); the
//! metrics count the same stream. A [`RunTrace`] turns it into spans with
//! explicit start and end times — `model_call_started` opens a model-call
//! span and `model_call_finished` ends it — so a trace shows exactly what
//! the stream says and nothing the stream does not, and the span tree
//! follows rein's run structure (run > step > model call | tool attempt,
//! compensations under the run) instead of the shape of the code's
//! futures. `tracing-opentelemetry` would make spans of the `tracing`
//! spans the code happens to open; rein opens none per call, and
//! instrumenting the loop twice (events and spans) would let the two
//! disagree.
//!
//! # Spans and attributes
//!
//! | span | name | from → to | attributes |
//! | --- | --- | --- | --- |
//! | run | `run AGENT` | `run_started` / `run_resumed` → `run_finished` / `run_interrupted` | `rein.run_id`, `rein.tenant`, `rein.agent`, `rein.outcome`, `rein.steps` |
//! | gateway call | `gateway MODEL` | the call → its answer | `rein.tenant`, `gen_ai.request.model` |
//! | step | `step N` | first event of step N → the next step or the end | `rein.run_id`, `rein.step` |
//! | model call | `chat MODEL` | `model_call_started` → `model_call_finished` | GenAI: `gen_ai.operation.name` = `chat`, `gen_ai.system` and `gen_ai.provider.name` (the provider), `gen_ai.request.model`, `gen_ai.response.model`, `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`, `gen_ai.response.finish_reasons`; `rein.attempt`, `error.type` |
//! | tool attempt | `execute_tool TOOL` | `tool_call_started` → `tool_call_finished` | `gen_ai.operation.name` = `execute_tool`, `gen_ai.tool.name`, `rein.tool.class`, `rein.attempt`, `rein.effect`, `error.type` |
//! | compensation | `compensate TOOL` | `compensation_started` → `compensation_finished` (its tool attempts under it) | `rein.tool`, `rein.compensation.status` |
//!
//! Every span carries the correlation fields its events carry:
//! `rein.run_id`, `rein.step`, `rein.intent_id`, `rein.attempt_id`,
//! `rein.idempotency_key`. Every other decision (`retry_scheduled`,
//! `model_fallback_used`, `breaker_state_changed`, `budget_exhausted`, …)
//! is a span event, named by its kind, on the innermost open span.
//!
//! # Propagation
//!
//! A client's `traceparent` on `POST /v1/runs` or on the gateway is the
//! parent of the run (or gateway call) span ([`TraceParent`]). A queued
//! run keeps it in the store ([`rein_store::NewRun::trace_parent`]), so the
//! worker that drives it later, in any process, parents its run span the
//! same way. The run span of a run's first drive is stored with it too
//! ([`rein_store::RunRecord::first_span`]): a resumed or taken-over run's
//! new run span carries a span link to it. Each tool attempt and model call is sent with its
//! own span as `traceparent` ([`inject`]), beside `Rein-Deadline-Ms`.
//!
//! # Sampling
//!
//! `sample_ratio` decides once per trace rein starts (by trace id); a
//! caller's `traceparent` brings its own decision, which rein follows. An
//! unsampled run still sends a `traceparent` (flag `00`) to its tools and
//! providers, so their spans stay unsampled too.
//!
//! # Export
//!
//! A batch processor exports on its own thread; its HTTP requests go
//! through the process's reqwest client on the tokio runtime
//! (`export`). [`Telemetry::shutdown`] flushes what is left: `rein serve`
//! calls it once it drained, `rein run` before it exits.

mod attributes;
mod export;
mod propagate;
mod run_trace;

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider, SpanExporter};
use rein_core::registry::TelemetrySpec;

pub use propagate::{TraceParent, TraceParentError, inject};
pub use run_trace::RunTrace;

/// How long one export may take before it is abandoned: a collector that
/// does not answer must not hold spans (and memory) for longer.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why traces could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// The exporter refused its settings (`telemetry.otlp_endpoint`).
    #[error("telemetry.otlp_endpoint: the OTLP exporter cannot be built: {0}")]
    Exporter(String),
    /// Traces need the tokio runtime their exports run on.
    #[error("traces must be set up inside the tokio runtime that exports them")]
    NoRuntime,
}

/// The process's tracer: where a run's spans go.
///
/// Cheap to clone (the provider and tracer are shared handles).
#[derive(Debug, Clone)]
pub struct Telemetry {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Telemetry {
    /// Traces exported to `spec.traces_url` over OTLP/HTTP (protobuf),
    /// sent with `client` on the current tokio runtime.
    ///
    /// # Errors
    ///
    /// [`TelemetryError::NoRuntime`] outside a tokio runtime;
    /// [`TelemetryError::Exporter`] when the exporter refuses the URL.
    pub fn new(spec: &TelemetrySpec, client: reqwest::Client) -> Result<Telemetry, TelemetryError> {
        let runtime =
            tokio::runtime::Handle::try_current().map_err(|_| TelemetryError::NoRuntime)?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(export::OnRuntime::new(client, runtime))
            .with_endpoint(spec.traces_url.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        Ok(Telemetry::with_exporter(
            exporter,
            &spec.service_name,
            spec.sample_ratio.get(),
        ))
    }

    /// Traces of service `service_name` handed to `exporter` in batches,
    /// `sample_ratio` of the traces rein starts kept (a caller's sampled
    /// flag is followed).
    pub fn with_exporter(
        exporter: impl SpanExporter + 'static,
        service_name: &str,
        sample_ratio: f64,
    ) -> Telemetry {
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                sample_ratio,
            ))))
            .with_resource(
                Resource::builder_empty()
                    .with_service_name(service_name.to_owned())
                    .build(),
            )
            .build();
        let tracer = provider.tracer("rein");
        Telemetry { provider, tracer }
    }

    /// The spans of one run, children of `parent` (a caller's
    /// `traceparent`) when given.
    pub fn run(&self, parent: Option<&TraceParent>, tenant: &str, agent: &str) -> Arc<RunTrace> {
        Arc::new(RunTrace::new(self.tracer.clone(), parent, tenant, agent))
    }

    /// The spans of a run driven again (resumed, taken over): children of
    /// `parent` when given, the run span linked to `first`, the run span of
    /// its first drive, when the store kept one.
    pub fn resumed_run(
        &self,
        parent: Option<&TraceParent>,
        first: Option<&TraceParent>,
        tenant: &str,
        agent: &str,
    ) -> Arc<RunTrace> {
        let trace = RunTrace::new(self.tracer.clone(), parent, tenant, agent);
        Arc::new(match first {
            Some(first) => trace.linked_to(first),
            None => trace,
        })
    }

    /// The spans of one gateway call: a root span for the call, with the
    /// model calls of its chain under it.
    pub fn gateway(
        &self,
        parent: Option<&TraceParent>,
        tenant: &str,
        model: &str,
    ) -> Arc<RunTrace> {
        Arc::new(RunTrace::gateway(
            self.tracer.clone(),
            parent,
            tenant,
            model,
        ))
    }

    /// Exports every finished span now. Blocks a thread of the blocking
    /// pool, not the caller's: the export itself runs on the runtime.
    pub async fn flush(&self) {
        let provider = self.provider.clone();
        match tokio::task::spawn_blocking(move || provider.force_flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("flushing the traces failed: {e}"),
            Err(e) => tracing::warn!("flushing the traces failed: {e}"),
        }
    }

    /// Exports what is left and stops the exporter; spans ended after it
    /// are dropped.
    pub async fn shutdown(&self) {
        let provider = self.provider.clone();
        match tokio::task::spawn_blocking(move || provider.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("stopping the trace exporter failed: {e}"),
            Err(e) => tracing::warn!("stopping the trace exporter failed: {e}"),
        }
    }
}
