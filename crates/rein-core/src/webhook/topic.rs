//! The events a webhook subscribes to.

use serde::{Deserialize, Serialize};

use crate::breaker::Transition;
use crate::event::EventData;
use crate::outcome::Outcome;

/// An event a webhook can be told about: a subset of a run's event kinds
/// that a human or another system acts on.
///
/// # Why a subset
///
/// Every other kind (a model call, a retry, a ledger mark) happens many
/// times a run; sending those would make a webhook a second, lossy event
/// stream (`GET /v1/runs/{id}/events` is the whole one). These six are
/// the moments someone outside must act or learns an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Topic {
    /// A call waits for a human's decision (`approval_requested`).
    ApprovalRequested,
    /// A human decided, or the window closed (`approval_decided`).
    ApprovalDecided,
    /// Automation stopped and a human has the package (`handoff_created`).
    HandoffCreated,
    /// A human decided a record the run left awaiting one
    /// (`handoff_decided`; its `closed` names the outcome when that
    /// decision closed the run). An attempt whose compensation or retry
    /// failed is not sent: nothing was decided.
    HandoffDecided,
    /// A run ended (`run_finished`), with its outcome.
    RunFinished,
    /// A circuit breaker arm opened (`breaker_state_changed` to open).
    BreakerOpened,
}

/// A topic name that is not one of [`Topic::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a webhook event; expected one of approval_requested, approval_decided, handoff_created, handoff_decided, run_finished, breaker_opened"
)]
pub struct UnknownTopic(pub String);

impl Topic {
    /// Every topic, in the order they are documented.
    pub const ALL: [Topic; 6] = [
        Topic::ApprovalRequested,
        Topic::ApprovalDecided,
        Topic::HandoffCreated,
        Topic::HandoffDecided,
        Topic::RunFinished,
        Topic::BreakerOpened,
    ];

    /// The name as configured, stored and sent (`type` in the body).
    pub fn as_str(self) -> &'static str {
        match self {
            Topic::ApprovalRequested => "approval_requested",
            Topic::ApprovalDecided => "approval_decided",
            Topic::HandoffCreated => "handoff_created",
            Topic::HandoffDecided => "handoff_decided",
            Topic::RunFinished => "run_finished",
            Topic::BreakerOpened => "breaker_opened",
        }
    }

    /// Reads a configured or stored name.
    ///
    /// # Errors
    ///
    /// [`UnknownTopic`] for any other name.
    pub fn parse(text: &str) -> Result<Topic, UnknownTopic> {
        Topic::ALL
            .into_iter()
            .find(|topic| topic.as_str() == text)
            .ok_or_else(|| UnknownTopic(text.to_owned()))
    }

    /// The topic of a run event, and the run's outcome for `run_finished`;
    /// `None` for an event no webhook is told about.
    pub fn of(data: &EventData) -> Option<(Topic, Option<Outcome>)> {
        match data {
            EventData::ApprovalRequested(_) => Some((Topic::ApprovalRequested, None)),
            EventData::ApprovalDecided(_) => Some((Topic::ApprovalDecided, None)),
            EventData::HandoffCreated(_) => Some((Topic::HandoffCreated, None)),
            // `outcomes` filters `run_finished` only: a decision is sent
            // whatever outcome it closed the run with.
            EventData::HandoffDecided(decided) => decided
                .failed
                .is_none()
                .then_some((Topic::HandoffDecided, None)),
            EventData::RunFinished(finished) => Some((Topic::RunFinished, Some(finished.outcome))),
            EventData::BreakerStateChanged(changed) => {
                matches!(changed.transition, Transition::Opened { .. })
                    .then_some((Topic::BreakerOpened, None))
            }
            _ => None,
        }
    }
}

impl std::fmt::Display for Topic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_topic_reads_back_from_its_name_and_no_other_name_reads() {
        for topic in Topic::ALL {
            assert_eq!(Topic::parse(topic.as_str()), Ok(topic));
        }
        assert!(Topic::parse("run_started").is_err());
        assert!(Topic::parse("RUN_FINISHED").is_err());
    }
}
