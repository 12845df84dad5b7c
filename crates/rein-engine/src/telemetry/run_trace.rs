//! One run's spans, built from its events as they are announced.

use rein_core::Timestamp;
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, Span};
use rein_core::event::{
    CompensationFinished, CompensationStarted, ModelCallFinished, ModelCallResult,
    ModelCallStarted, RunFinished, ToolCallFinished, ToolCallStarted,
};
use rein_core::model::FinishReason;
use rein_core::{AttemptId, Event, EventData};

use super::attributes as attr;
use super::propagate::TraceParent;

/// The spans of one run (or one gateway call), opened and ended by its
/// events ([`RunTrace::record`]).
///
/// # Invariants
///
/// - Every span starts and ends at the time of the events that open and
///   end it (`at_ms`), not at the time they are recorded here.
/// - A model call or tool attempt is a child of its step's span, a step
///   and a compensation a child of the run's, the run a child of the
///   caller's `traceparent` when there was one.
/// - A span still open when the trace is dropped (a run whose process
///   stops mid-call) is ended then, by the SDK.
#[derive(Debug)]
pub struct RunTrace {
    tracer: SdkTracer,
    tenant: String,
    agent: String,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The caller's context: the parent of the root span.
    parent: Context,
    /// The spans the root span links to: a resumed run's first run span.
    links: Vec<opentelemetry::trace::Link>,
    /// The run (or gateway call) span and its context.
    root: Option<Open>,
    /// The open step.
    step: Option<(u32, Open)>,
    /// Model calls in flight, by provider, model and attempt.
    models: Vec<(ModelKey, Open)>,
    /// Tool attempts in flight, by attempt id.
    tools: Vec<(AttemptId, Open)>,
    /// Compensations in flight, by tool.
    compensations: Vec<(String, Open)>,
}

/// A span and the context its children start in.
#[derive(Debug)]
struct Open {
    span: Span,
    cx: Context,
}

impl Open {
    fn end(mut self, at: SystemTime) {
        self.span.end_with_timestamp(at);
    }
}

#[derive(Debug, PartialEq)]
struct ModelKey {
    provider: String,
    model: String,
    attempt: u32,
}

fn time(at_ms: Timestamp) -> SystemTime {
    at_ms.to_system_time()
}

fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The correlation fields an event carries, as span attributes.
fn correlation(event: &Event) -> Vec<KeyValue> {
    let mut out = vec![
        KeyValue::new(attr::RUN_ID, event.run_id.as_str().to_owned()),
        KeyValue::new(attr::STEP, i64::from(event.step)),
    ];
    if let Some(intent) = &event.intent_id {
        out.push(KeyValue::new(attr::INTENT_ID, intent.as_str().to_owned()));
    }
    if let Some(attempt) = &event.attempt_id {
        out.push(KeyValue::new(attr::ATTEMPT_ID, attempt.as_str().to_owned()));
    }
    if let Some(key) = &event.idempotency_key {
        out.push(KeyValue::new(
            attr::IDEMPOTENCY_KEY,
            key.as_str().to_owned(),
        ));
    }
    out
}

fn finish_reason(f: FinishReason) -> &'static str {
    match f {
        FinishReason::Stop => "stop",
        FinishReason::StopSequence => "stop_sequence",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::Length => "length",
        FinishReason::ContentFilter => "content_filter",
        FinishReason::Other => "other",
    }
}

impl RunTrace {
    /// A run's trace; its root span opens at `run_started`.
    pub(super) fn new(
        tracer: SdkTracer,
        parent: Option<&TraceParent>,
        tenant: &str,
        agent: &str,
    ) -> Self {
        RunTrace {
            tracer,
            tenant: tenant.to_owned(),
            agent: agent.to_owned(),
            state: Mutex::new(State {
                parent: parent.map_or_else(Context::new, TraceParent::context),
                links: Vec::new(),
                root: None,
                step: None,
                models: Vec::new(),
                tools: Vec::new(),
                compensations: Vec::new(),
            }),
        }
    }

    /// A gateway call's trace; its root span opens now and ends when the
    /// trace is dropped (the call, or its stream, is over).
    pub(super) fn gateway(
        tracer: SdkTracer,
        parent: Option<&TraceParent>,
        tenant: &str,
        model: &str,
    ) -> Self {
        let trace = RunTrace::new(tracer, parent, tenant, "gateway");
        {
            let mut state = trace.lock();
            let span = trace
                .tracer
                .span_builder(format!("gateway {model}"))
                .with_kind(SpanKind::Server)
                .with_attributes([
                    KeyValue::new(attr::TENANT, trace.tenant.clone()),
                    KeyValue::new(attr::GEN_AI_REQUEST_MODEL, model.to_owned()),
                ])
                .start_with_context(&trace.tracer, &state.parent);
            let root = trace.open(span);
            state.root = Some(root);
        }
        trace
    }

    /// This trace, its root span linked to `first`: the run span of the
    /// run's first drive, for a run resumed or taken over (its new run
    /// span is in a new trace, or its caller's; the link leads back).
    pub(super) fn linked_to(self, first: &TraceParent) -> Self {
        self.lock()
            .links
            .push(opentelemetry::trace::Link::with_context(
                first.span_context(),
            ));
        self
    }

    /// The run span, as the store keeps it with the run
    /// ([`rein_store::RunRecord::first_span`]); `None` before it opened.
    pub fn root_span(&self) -> Option<rein_store::SpanRef> {
        let state = self.lock();
        let root = state.root.as_ref()?;
        super::propagate::span_ref(root.span.span_context())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn open(&self, span: Span) -> Open {
        let cx = Context::new().with_remote_span_context(span.span_context().clone());
        Open { span, cx }
    }

    /// The context a tool attempt is sent in: its span's, while it is open.
    pub fn attempt_context(&self, attempt: &AttemptId) -> Option<Context> {
        let state = self.lock();
        state
            .tools
            .iter()
            .find(|(id, _)| id == attempt)
            .map(|(_, open)| open.cx.clone())
    }

    /// The context a model call is sent in: the span of the latest model
    /// call still open (a run asks one model at a time).
    pub fn model_context(&self) -> Option<Context> {
        let state = self.lock();
        state.models.last().map(|(_, open)| open.cx.clone())
    }

    /// The context of the run's root span: the parent of a child run's.
    pub fn root_context(&self) -> Option<Context> {
        self.lock().root.as_ref().map(|open| open.cx.clone())
    }

    /// Opens, ends or annotates spans for `event`.
    pub fn record(&self, event: &Event) {
        let at = time(event.at_ms);
        let mut state = self.lock();
        match &event.data {
            EventData::RunStarted(d) => {
                self.start_root(&mut state, &d.agent, event, at);
                return;
            }
            EventData::RunResumed(_) => {
                if state.root.is_none() {
                    let agent = self.agent.clone();
                    self.start_root(&mut state, &agent, event, at);
                }
                return;
            }
            EventData::RunFinished(d) => {
                self.finish_root(&mut state, Some(d), event, at);
                return;
            }
            EventData::RunInterrupted(_) => {
                self.finish_root(&mut state, None, event, at);
                return;
            }
            _ => {}
        }
        if state.root.is_some() && event.step > 0 {
            self.enter_step(&mut state, event, at);
        }
        match &event.data {
            EventData::ModelCallStarted(d) => self.model_started(&mut state, d, event, at),
            EventData::ModelCallFinished(d) => self.model_finished(&mut state, d, at),
            EventData::ToolCallStarted(d) => self.tool_started(&mut state, d, event, at),
            EventData::ToolCallFinished(d) => self.tool_finished(&mut state, d, event, at),
            EventData::CompensationStarted(d) => {
                self.compensation_started(&mut state, d, event, at);
            }
            EventData::CompensationFinished(d) => self.compensation_finished(&mut state, d, at),
            _ => state.annotate(event, at),
        }
    }

    fn start_root(&self, state: &mut State, agent: &str, event: &Event, at: SystemTime) {
        let mut attributes = correlation(event);
        attributes.push(KeyValue::new(attr::TENANT, self.tenant.clone()));
        attributes.push(KeyValue::new(attr::AGENT, agent.to_owned()));
        let span = self
            .tracer
            .span_builder(format!("run {agent}"))
            .with_kind(SpanKind::Internal)
            .with_start_time(at)
            .with_attributes(attributes)
            .with_links(state.links.clone())
            .start_with_context(&self.tracer, &state.parent);
        state.root = Some(self.open(span));
    }

    fn finish_root(
        &self,
        state: &mut State,
        finished: Option<&RunFinished>,
        event: &Event,
        at: SystemTime,
    ) {
        state.close_all(at);
        let Some(mut root) = state.root.take() else {
            return;
        };
        match finished {
            Some(d) => {
                root.span
                    .set_attribute(KeyValue::new(attr::OUTCOME, d.outcome.as_str()));
                root.span
                    .set_attribute(KeyValue::new(attr::STEPS, i64::from(d.steps)));
                if d.outcome != rein_core::Outcome::Succeeded {
                    root.span
                        .set_status(Status::error(d.outcome.as_str().to_owned()));
                }
            }
            None => {
                root.span
                    .add_event_with_timestamp(event.kind().as_str(), at, correlation(event));
            }
        }
        root.end(at);
    }

    /// Ends the open step when `event` belongs to a later one, and opens
    /// the step `event` belongs to.
    fn enter_step(&self, state: &mut State, event: &Event, at: SystemTime) {
        match &state.step {
            Some((n, _)) if *n >= event.step => return,
            Some(_) => {
                if let Some((_, open)) = state.step.take() {
                    open.end(at);
                }
            }
            None => {}
        }
        let Some(root) = &state.root else {
            return;
        };
        let span = self
            .tracer
            .span_builder(format!("step {}", event.step))
            .with_kind(SpanKind::Internal)
            .with_start_time(at)
            .with_attributes([
                KeyValue::new(attr::RUN_ID, event.run_id.as_str().to_owned()),
                KeyValue::new(attr::STEP, i64::from(event.step)),
            ])
            .start_with_context(&self.tracer, &root.cx);
        state.step = Some((event.step, self.open(span)));
    }

    fn model_started(
        &self,
        state: &mut State,
        d: &ModelCallStarted,
        event: &Event,
        at: SystemTime,
    ) {
        let mut attributes = correlation(event);
        attributes.extend([
            KeyValue::new(attr::GEN_AI_OPERATION_NAME, attr::OPERATION_CHAT),
            KeyValue::new(attr::GEN_AI_SYSTEM, d.provider.clone()),
            KeyValue::new(attr::GEN_AI_PROVIDER_NAME, d.provider.clone()),
            KeyValue::new(attr::GEN_AI_REQUEST_MODEL, d.model.clone()),
            KeyValue::new(attr::ATTEMPT, i64::from(d.attempt)),
        ]);
        let span = self
            .tracer
            .span_builder(format!("{} {}", attr::OPERATION_CHAT, d.model))
            .with_kind(SpanKind::Client)
            .with_start_time(at)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, state.parent_of_call());
        let key = ModelKey {
            provider: d.provider.clone(),
            model: d.model.clone(),
            attempt: d.attempt,
        };
        let open = self.open(span);
        state.models.push((key, open));
    }

    fn model_finished(&self, state: &mut State, d: &ModelCallFinished, at: SystemTime) {
        let key = ModelKey {
            provider: d.provider.clone(),
            model: d.model.clone(),
            attempt: d.attempt,
        };
        let Some(i) = state.models.iter().position(|(k, _)| *k == key) else {
            return;
        };
        let (_, mut open) = state.models.remove(i);
        let span = &mut open.span;
        span.set_attribute(KeyValue::new(
            attr::GEN_AI_USAGE_INPUT_TOKENS,
            count(d.input_tokens()),
        ));
        span.set_attribute(KeyValue::new(
            attr::GEN_AI_USAGE_OUTPUT_TOKENS,
            count(d.output_tokens()),
        ));
        match &d.result {
            ModelCallResult::Answered(a) => {
                span.set_attribute(KeyValue::new(attr::GEN_AI_RESPONSE_MODEL, d.model.clone()));
                span.set_attribute(KeyValue::new(
                    attr::GEN_AI_RESPONSE_FINISH_REASONS,
                    opentelemetry::Value::Array(
                        vec![opentelemetry::StringValue::from(finish_reason(a.finish))].into(),
                    ),
                ));
            }
            ModelCallResult::Failed(f) => {
                span.set_attribute(KeyValue::new(attr::ERROR_TYPE, f.category.as_str()));
                span.set_status(Status::error(f.reason.clone()));
            }
        }
        open.end(at);
    }

    fn tool_started(&self, state: &mut State, d: &ToolCallStarted, event: &Event, at: SystemTime) {
        let Some(attempt_id) = event.attempt_id.clone() else {
            state.annotate(event, at);
            return;
        };
        let mut attributes = correlation(event);
        attributes.extend([
            KeyValue::new(attr::GEN_AI_OPERATION_NAME, attr::OPERATION_EXECUTE_TOOL),
            KeyValue::new(attr::GEN_AI_TOOL_NAME, d.tool.clone()),
            KeyValue::new(attr::TOOL_CLASS, d.class.as_str()),
            KeyValue::new(attr::ATTEMPT, i64::from(d.attempt)),
        ]);
        let span = self
            .tracer
            .span_builder(format!("{} {}", attr::OPERATION_EXECUTE_TOOL, d.tool))
            .with_kind(SpanKind::Client)
            .with_start_time(at)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, state.parent_of_call());
        let open = self.open(span);
        state.tools.push((attempt_id, open));
    }

    fn tool_finished(
        &self,
        state: &mut State,
        d: &ToolCallFinished,
        event: &Event,
        at: SystemTime,
    ) {
        let found = event
            .attempt_id
            .as_ref()
            .and_then(|id| state.tools.iter().position(|(open, _)| open == id));
        let Some(i) = found else {
            // A call that ended without an attempt (skipped, not sent).
            state.annotate(event, at);
            return;
        };
        let (_, mut open) = state.tools.remove(i);
        if let ToolCallFinished::Failed(f) = d {
            open.span
                .set_attribute(KeyValue::new(attr::ERROR_TYPE, f.category.as_str()));
            open.span
                .set_attribute(KeyValue::new(attr::EFFECT, f.effect.as_str()));
            open.span.set_status(Status::error(f.reason.clone()));
        } else if let Some(category) = d.category() {
            open.span
                .set_attribute(KeyValue::new(attr::ERROR_TYPE, category.as_str()));
            open.span.set_status(Status::error(category.as_str()));
        }
        open.end(at);
    }

    fn compensation_started(
        &self,
        state: &mut State,
        d: &CompensationStarted,
        event: &Event,
        at: SystemTime,
    ) {
        let Some(root) = &state.root else {
            return;
        };
        let mut attributes = correlation(event);
        attributes.push(KeyValue::new(attr::TOOL, d.tool.clone()));
        let span = self
            .tracer
            .span_builder(format!("compensate {}", d.tool))
            .with_kind(SpanKind::Internal)
            .with_start_time(at)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &root.cx);
        let open = self.open(span);
        state.compensations.push((d.tool.clone(), open));
    }

    fn compensation_finished(&self, state: &mut State, d: &CompensationFinished, at: SystemTime) {
        let Some(i) = state.compensations.iter().rposition(|(t, _)| *t == d.tool) else {
            return;
        };
        let (_, mut open) = state.compensations.remove(i);
        open.span
            .set_attribute(KeyValue::new(attr::COMPENSATION_STATUS, d.status.as_str()));
        if d.status != rein_core::LedgerStatus::Compensated {
            open.span.set_status(Status::error(d.note.clone()));
        }
        open.end(at);
    }
}

impl State {
    /// Where a model call or tool attempt starts: the compensation it
    /// serves, else the open step, else the root, else the caller's
    /// context.
    fn parent_of_call(&self) -> &Context {
        if let Some((_, compensation)) = self.compensations.last() {
            return &compensation.cx;
        }
        match (&self.step, &self.root) {
            (Some((_, step)), _) => &step.cx,
            (None, Some(root)) => &root.cx,
            (None, None) => &self.parent,
        }
    }

    /// Adds `event` as a span event on the innermost open span.
    fn annotate(&mut self, event: &Event, at: SystemTime) {
        let span = match (&mut self.step, &mut self.root) {
            (Some((_, step)), _) => &mut step.span,
            (None, Some(root)) => &mut root.span,
            (None, None) => return,
        };
        span.add_event_with_timestamp(event.kind().as_str(), at, correlation(event));
    }

    /// Ends every span under the root at `at`.
    fn close_all(&mut self, at: SystemTime) {
        for (_, open) in self.models.drain(..) {
            open.end(at);
        }
        for (_, open) in self.tools.drain(..) {
            open.end(at);
        }
        for (_, open) in self.compensations.drain(..) {
            open.end(at);
        }
        if let Some((_, open)) = self.step.take() {
            open.end(at);
        }
    }
}
