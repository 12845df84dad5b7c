//! Building events with their correlation fields, handing them to a live
//! observer at once and to the store in batches.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use rein_core::idempotency::IdempotencyKey;
use rein_core::{AttemptId, Clock, Event, EventData, IntentId, RunId, Timestamp};

/// Receives every event as it happens (e.g. the CLI's live timeline).
pub type Observer = Arc<dyn Fn(&Event) + Send + Sync>;

/// The correlation fields of an event beyond the run.
#[derive(Debug, Clone, Default)]
pub struct Correlation {
    /// The step.
    pub step: u32,
    /// The planned action.
    pub intent_id: Option<IntentId>,
    /// The attempt.
    pub attempt_id: Option<AttemptId>,
    /// The idempotency key.
    pub idempotency_key: Option<IdempotencyKey>,
}

/// Collects a run's events until the next store commit.
///
/// Events are durable in batches — with the ledger write before a call, with
/// the checkpoint after a step, and with the final status — so one fsync
/// covers many events (group commit) while the observer sees each at once.
pub struct Emitter {
    run_id: RunId,
    clock: Arc<dyn Clock>,
    observer: Option<Observer>,
    metrics: Option<(Arc<crate::metrics::Metrics>, crate::metrics::Scope)>,
    trace: Option<Arc<crate::telemetry::RunTrace>>,
    buffer: Mutex<Vec<Event>>,
    /// Whether log lines name the run (a gateway call's emitter has an id
    /// of its own that names no run, so its lines omit it).
    log_run: bool,
}

impl Emitter {
    /// An emitter for `run_id`.
    pub fn new(run_id: RunId, clock: Arc<dyn Clock>, observer: Option<Observer>) -> Self {
        Emitter {
            run_id,
            clock,
            observer,
            metrics: None,
            trace: None,
            buffer: Mutex::new(Vec::new()),
            log_run: true,
        }
    }

    /// Counts every event in `metrics` as it is emitted, under the tenant
    /// and agent labels of `scope`.
    pub fn with_metrics(
        mut self,
        metrics: Arc<crate::metrics::Metrics>,
        scope: crate::metrics::Scope,
    ) -> Self {
        self.metrics = Some((metrics, scope));
        self
    }

    /// Turns every event into spans of `trace` as it is emitted.
    pub fn with_trace(mut self, trace: Option<Arc<crate::telemetry::RunTrace>>) -> Self {
        self.trace = trace;
        self
    }

    /// The run's spans, when traces are on: the context a call is sent in.
    pub fn trace(&self) -> Option<&Arc<crate::telemetry::RunTrace>> {
        self.trace.as_ref()
    }

    /// What announces events after this emitter is gone (a stream that
    /// outlives the call that opened it): the log, the observer and the
    /// metrics, never the store.
    pub(crate) fn announcer(&self) -> Announcer {
        Announcer {
            run_id: self.run_id.clone(),
            clock: self.clock.clone(),
            observer: self.observer.clone(),
            metrics: self.metrics.clone(),
            trace: self.trace.clone(),
            log_run: self.log_run,
        }
    }

    /// Leaves the run id out of log lines: it names no run (a gateway
    /// call, whose events go nowhere a run id could be looked up).
    pub fn without_run_in_logs(mut self) -> Self {
        self.log_run = false;
        self
    }

    /// Records an event; `data` is its rationale, and says its kind.
    ///
    /// `data` is redacted here ([`EventData::redacted`]), before the
    /// observer, the metrics or the store see it: the one place every event
    /// passes, so no rationale quoting an error carries a secret out.
    pub fn emit(&self, c: &Correlation, data: impl Into<EventData>) {
        let event = self.event(c, data);
        self.announce(std::slice::from_ref(&event));
        self.buffer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event);
    }

    /// An event of this run, now, redacted like every event ([`Emitter::emit`]),
    /// built but not recorded: for a commit that may have to be made again
    /// with other events (the end of a run whose report is derived again).
    /// [`Emitter::announce`] it once it is stored.
    pub fn event(&self, c: &Correlation, data: impl Into<EventData>) -> Event {
        let data = data.into().redacted();
        let at_ms = self.clock.timestamp();
        Event {
            run_id: self.run_id.clone(),
            seq: 0,
            step: c.step,
            intent_id: c.intent_id.clone(),
            attempt_id: c.attempt_id.clone(),
            idempotency_key: c.idempotency_key.clone(),
            at_ms,
            data,
        }
    }

    /// Hands events to the event log, the observer, the metrics and the
    /// trace (not to the buffer).
    pub fn announce(&self, events: &[Event]) {
        for event in events {
            super::event_log::log(event, self.log_run);
            if let Some(observer) = &self.observer {
                observer(event);
            }
            if let Some((metrics, scope)) = &self.metrics {
                metrics.record(event, scope);
            }
            if let Some(trace) = &self.trace {
                trace.record(event);
            }
        }
    }

    /// Takes the events recorded since the last drain.
    pub fn drain(&self) -> Vec<Event> {
        std::mem::take(&mut *self.buffer.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Puts back events whose commit failed, ahead of any recorded since,
    /// so they ride along with the next commit: a store outage delays
    /// events, it never loses them.
    pub fn requeue(&self, mut events: Vec<Event>) {
        if events.is_empty() {
            return;
        }
        let mut buffer = self.buffer.lock().unwrap_or_else(|p| p.into_inner());
        events.append(&mut buffer);
        *buffer = events;
    }
}

/// Announces events of an emitter that may be gone ([`Emitter::announcer`]):
/// to the log, the observer and the metrics. Nothing it announces is
/// stored, so it serves only calls whose events are not (a gateway call's
/// stream).
#[derive(Clone)]
pub(crate) struct Announcer {
    run_id: RunId,
    clock: Arc<dyn Clock>,
    observer: Option<Observer>,
    metrics: Option<(Arc<crate::metrics::Metrics>, crate::metrics::Scope)>,
    trace: Option<Arc<crate::telemetry::RunTrace>>,
    log_run: bool,
}

impl Announcer {
    /// Announces an event now, redacted like every event.
    pub(crate) fn announce(&self, c: &Correlation, data: impl Into<EventData>) {
        let emitter = Emitter {
            run_id: self.run_id.clone(),
            clock: self.clock.clone(),
            observer: self.observer.clone(),
            metrics: self.metrics.clone(),
            trace: self.trace.clone(),
            buffer: Mutex::new(Vec::new()),
            log_run: self.log_run,
        };
        let event = emitter.event(c, data);
        emitter.announce(std::slice::from_ref(&event));
    }
}

/// `time` as the store records it (milliseconds since the Unix epoch).
pub fn unix_ms(time: SystemTime) -> Timestamp {
    Timestamp::from_system_time(time)
}
