//! The typed payload of every event kind, and its one decoder.

use serde_json::Value;

use super::EventKind;
use super::approval::*;
use super::effect::*;
use super::governor::*;
use super::guard::*;
use super::latency::*;
use super::model::*;
use super::retry::*;
use super::run::*;
use super::tool::*;

/// A payload that does not have the shape of its kind: a stored event
/// that is not rein's, or a wire name that changed without a migration.
#[derive(Debug, thiserror::Error)]
#[error("the data of a {kind} event does not have its shape: {source}")]
pub struct DecodeError {
    /// The kind whose shape was expected.
    pub kind: EventKind,
    /// What serde found wrong.
    #[source]
    pub source: serde_json::Error,
}

macro_rules! event_data {
    ($($kind:ident),* $(,)?) => {
        /// What an event says: one payload type per [`EventKind`], named
        /// after it.
        ///
        /// # Why typed
        ///
        /// The engine writes these and resume, metrics, the chaos checker,
        /// the reconciler, the server and the CLI read them. With a shared
        /// type, a field renamed on one side is a compile error on the
        /// other, not a resume that silently refunds budget or an
        /// invariant check that passes because it reads nothing.
        ///
        /// # Versions
        ///
        /// The JSON form ([`EventData::to_value`], [`EventData::decode`])
        /// is schema [`EVENT_SCHEMA`](super::EVENT_SCHEMA); a field added
        /// later is optional (`#[serde(default)]`), and every schema-1
        /// event still decodes (`super::schema`). `tests/event_wire.rs`
        /// decodes a fixture of every kind and shape as schema 1 stored it,
        /// writes it as schema 2, and writes schema 2 back byte for byte.
        #[derive(Debug, Clone, PartialEq)]
        #[non_exhaustive]
        #[allow(missing_docs)]
        pub enum EventData {
            $($kind($kind),)*
        }

        impl EventData {
            /// The kind this payload belongs to.
            pub fn kind(&self) -> EventKind {
                match self {
                    $(EventData::$kind(_) => EventKind::$kind,)*
                }
            }

            /// Decodes the stored or wire form of a `kind` event's data,
            /// as either schema wrote it ([`super::schema`]).
            ///
            /// # Errors
            ///
            /// [`DecodeError`] when `data` lacks a field the kind always
            /// had, or a field has another type.
            pub fn decode(kind: EventKind, data: Value) -> Result<Self, DecodeError> {
                let data = super::schema::upgrade(kind, data);
                match kind {
                    $(EventKind::$kind => serde_json::from_value(data).map(EventData::$kind),)*
                }
                .map_err(|source| DecodeError { kind, source })
            }

            /// The payload with every secret redacted ([`crate::redact`]),
            /// as it may leave the process.
            ///
            /// Redacts the JSON form and decodes it again. A secret that
            /// matched a number (or, absurdly, a field name or an enum
            /// word) would leave a form that no longer decodes; then only
            /// the strings are redacted: the numbers of a payload are
            /// rein's own counts and durations, not outside text, while
            /// every string that quotes outside text is covered.
            #[must_use]
            pub fn redacted(self) -> Self {
                // Nearly every event holds nothing to redact: it keeps its
                // typed form, and no JSON form is built (the probe visits
                // what that form would hold).
                if !self.needs_redaction() {
                    return self;
                }
                let kind = self.kind();
                let Ok(mut value) = self.to_value() else {
                    return self;
                };
                if !crate::redact::json(&mut value) {
                    return self;
                }
                if let Ok(clean) = EventData::decode(kind, value) {
                    return clean;
                }
                let Ok(mut value) = self.to_value() else {
                    return self;
                };
                crate::redact::json_strings(&mut value);
                EventData::decode(kind, value).unwrap_or(self)
            }

            /// Whether [`EventData::redacted`] would change the payload's
            /// JSON form ([`crate::redact::json_changes`]).
            fn needs_redaction(&self) -> bool {
                match self {
                    $(EventData::$kind(p) => crate::redact::json_changes(p),)*
                }
            }

            /// The stored and wire form: a JSON value whose object keys are
            /// sorted (as every event's data has always been written).
            ///
            /// # Errors
            ///
            /// Only if a payload held a map whose keys are not strings,
            /// which none does.
            pub fn to_value(&self) -> Result<Value, serde_json::Error> {
                match self {
                    $(EventData::$kind(p) => serde_json::to_value(p),)*
                }
            }
        }

        $(
            impl From<$kind> for EventData {
                fn from(payload: $kind) -> Self {
                    EventData::$kind(payload)
                }
            }
        )*
    };
}

event_data! {
    RunStarted,
    PlanCreated,
    BudgetAllocated,
    ModelCallStarted,
    ModelCallFinished,
    CallRejected,
    ToolCallStarted,
    ToolCallFinished,
    RetryScheduled,
    RetryAbandoned,
    RunCancelled,
    RunFailed,
    ConcurrencyWaitExpired,
    RateLimited,
    CallShed,
    ConcurrencyAdjusted,
    FanOutRefused,
    ModelQueueWaited,
    ModelFallbackUsed,
    ModelOutputTruncated,
    StreamRecovered,
    IdempotencyLookup,
    LedgerRecorded,
    BreakerStateChanged,
    BudgetExhausted,
    FinalTurnRequested,
    LoopDetected,
    ToolDisabled,
    CheckpointWritten,
    SettlementStarted,
    CompensationStarted,
    CompensationFinished,
    HandoffCreated,
    PartialSuccessReturned,
    RunFinished,
    RunResumed,
    RunInterrupted,
    LatencyDegraded,
    ApprovalRequested,
    ApprovalDecided,
    HandoffDecided,
}

impl EventData {
    /// Whether the event states what a stored record holds: a ledger
    /// status (`ledger_recorded`, `compensation_finished`), a checkpoint
    /// (`checkpoint_written`) or the run's end (`run_finished`).
    ///
    /// # Why
    ///
    /// Such an event is true only together with its record: it is stored
    /// in the transaction that writes the record, or not at all. The
    /// events of a commit that did not land are put back for the next
    /// commit, except these: a `ledger_recorded succeeded` carried by a
    /// later commit without its mark would put the event log ahead of the
    /// ledger.
    pub fn states_record(&self) -> bool {
        matches!(
            self,
            EventData::LedgerRecorded(_)
                | EventData::CompensationFinished(_)
                | EventData::HandoffDecided(_)
                | EventData::CheckpointWritten(_)
                | EventData::RunFinished(_)
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::Category;
    use crate::event::{Flag, ModelCallFailed, ModelCallFinished, ModelCallResult};
    use crate::redact::{Secrets, register};

    fn failed(reason: &str, tokens_spent: u64) -> EventData {
        ModelCallFinished {
            provider: "p".into(),
            model: "m".into(),
            attempt: 1,
            cost: None,
            elapsed: None,
            first_event: None,
            result: ModelCallResult::Failed(ModelCallFailed {
                ok: Flag,
                category: Category::Unauthorized,
                reason: reason.into(),
                tokens_spent,
                key_env: Some("KEY".into()),
            }),
        }
        .into()
    }

    fn reason(data: &EventData) -> (&str, u64) {
        match data {
            EventData::ModelCallFinished(ModelCallFinished {
                result: ModelCallResult::Failed(f),
                ..
            }) => (f.reason.as_str(), f.tokens_spent),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn redacted_strips_a_secret_from_a_string_and_keeps_the_payload_typed() {
        let mut secrets = Secrets::new();
        secrets.insert("event-canary-4411").unwrap();
        register(&secrets);
        let clean = failed("refused key event-canary-4411", 3).redacted();
        assert_eq!(reason(&clean), ("refused key [redacted]", 3));
    }

    #[test]
    fn redacted_keeps_a_count_that_matches_a_numeric_secret_and_still_redacts_strings() {
        // A numeric secret turns a matching number into a string, which no
        // longer decodes as a count: the strings are redacted alone.
        let mut secrets = Secrets::new();
        secrets.insert("918273645").unwrap();
        register(&secrets);
        let clean = failed("refused 918273645", 918_273_645).redacted();
        assert_eq!(reason(&clean), ("refused [redacted]", 918_273_645));
    }
}
