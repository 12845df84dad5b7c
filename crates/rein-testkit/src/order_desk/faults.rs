//! Faults the order desk injects into its own answers.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{SEND_EMAIL, UPDATE_DELIVERY_TIME};
use crate::{RetryAfter, TestkitError};

/// The `Retry-After` of the demo's rate-limited email: an hour, far longer
/// than any run's remaining budget, so rein must give up rather than wait.
pub const DEMO_EMAIL_RETRY_AFTER: RetryAfter = RetryAfter::Seconds(3600);

/// One injected fault, consumed by one request.
///
/// | fault | effect applied? | what the client sees |
/// | --- | --- | --- |
/// | `LoseResponse` | yes (as normal) | status and headers, then the connection aborts mid-body |
/// | `Status { code, retry_after }` | no | `code` with a structured error body (`effect: not_applied`) and `Retry-After` when set |
/// | `Delay(d)` | as normal, after `d` | the normal answer, late |
/// | `ApplyThenStatus { code }` | yes | `code` with a structured error body (`effect: maybe_applied` for writes) |
///
/// JSON form (`POST /_faults`): `{"kind": "lose_response"}`,
/// `{"kind": "status", "code": 429, "retry_after": {"seconds": 3600}}`,
/// `{"kind": "delay", "ms": 1500}`, `{"kind": "apply_then_status", "code": 500}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "FaultSpec", from = "FaultSpec")]
#[non_exhaustive]
pub enum Fault {
    /// Apply the effect, then lose the response: the "timeout after the
    /// write landed" of seed 000, which rein must resolve by key.
    LoseResponse,
    /// Answer `code` without applying anything: a refusal at the door.
    /// A 429 is `rate_limited` and retryable; `retry_after` adds the header
    /// and `retry_after_ms`.
    Status {
        /// The HTTP status, 400..=599.
        code: u16,
        /// The wait to ask for, if any.
        retry_after: Option<RetryAfter>,
    },
    /// Sleep (tokio time, so paused-time tests stay instant) before handling
    /// the request normally.
    Delay(Duration),
    /// Apply the effect, then answer `code`: "executed but reported
    /// failure". The error path does not know the write landed, so it says
    /// `maybe_applied` — the gray zone a lookup by key must resolve.
    ApplyThenStatus {
        /// The HTTP status, 400..=599.
        code: u16,
    },
}

impl Fault {
    /// A refusal with `code` and no `Retry-After`.
    pub fn status(code: u16) -> Fault {
        Fault::Status {
            code,
            retry_after: None,
        }
    }

    /// A 429 asking the client to wait `retry_after`.
    pub fn rate_limited(retry_after: RetryAfter) -> Fault {
        Fault::Status {
            code: 429,
            retry_after: Some(retry_after),
        }
    }

    /// The fault's name in logs and JSON.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::LoseResponse => "lose_response",
            Fault::Status { .. } => "status",
            Fault::Delay(_) => "delay",
            Fault::ApplyThenStatus { .. } => "apply_then_status",
        }
    }

    fn validate(&self, tool: &str) -> Result<(), TestkitError> {
        match self {
            Fault::Status { code, .. } | Fault::ApplyThenStatus { code }
                if !(400..=599).contains(code) =>
            {
                Err(TestkitError::InvalidFault {
                    tool: tool.to_owned(),
                    code: *code,
                })
            }
            _ => Ok(()),
        }
    }
}

/// The wire form of [`Fault`]: internally tagged, the delay in milliseconds.
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum FaultSpec {
    LoseResponse,
    Status {
        code: u16,
        #[serde(default)]
        retry_after: Option<RetryAfter>,
    },
    Delay {
        ms: u64,
    },
    ApplyThenStatus {
        code: u16,
    },
}

impl From<Fault> for FaultSpec {
    fn from(fault: Fault) -> FaultSpec {
        match fault {
            Fault::LoseResponse => FaultSpec::LoseResponse,
            Fault::Status { code, retry_after } => FaultSpec::Status { code, retry_after },
            Fault::Delay(d) => FaultSpec::Delay {
                ms: u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
            },
            Fault::ApplyThenStatus { code } => FaultSpec::ApplyThenStatus { code },
        }
    }
}

impl From<FaultSpec> for Fault {
    fn from(spec: FaultSpec) -> Fault {
        match spec {
            FaultSpec::LoseResponse => Fault::LoseResponse,
            FaultSpec::Status { code, retry_after } => Fault::Status { code, retry_after },
            FaultSpec::Delay { ms } => Fault::Delay(Duration::from_millis(ms)),
            FaultSpec::ApplyThenStatus { code } => Fault::ApplyThenStatus { code },
        }
    }
}

/// The faults planned for one tool.
///
/// Each request takes the front of `queue`; once the queue is empty every
/// request gets `always` (or no fault).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolFaults {
    /// Faults for the next requests, one each, in order.
    #[serde(default)]
    pub queue: VecDeque<Fault>,
    /// The fault for every request after the queue ran out.
    #[serde(default)]
    pub always: Option<Fault>,
}

/// The fault plan of an order desk, per tool.
///
/// Keys are tool names (`update_delivery_time`) or a status lookup path
/// (`update_delivery_time/status`). JSON form:
/// `{"update_delivery_time": {"queue": [{"kind": "lose_response"}], "always": null}}`.
///
/// ```
/// use rein_testkit::order_desk::{Fault, Faults};
/// let faults = Faults::none()
///     .then("update_delivery_time", Fault::LoseResponse)
///     .always("send_email", Fault::status(503));
/// assert!(!faults.is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Faults {
    tools: BTreeMap<String, ToolFaults>,
}

impl Faults {
    /// No faults: every request is handled normally.
    pub fn none() -> Faults {
        Faults::default()
    }

    /// The faults of `rein demo` (issue 3, item 8; seed 000's order
    /// adjustment task): the first `update_delivery_time` applies the change
    /// but its response is lost, and the first `send_email` answers 429 with
    /// a `Retry-After` of [`DEMO_EMAIL_RETRY_AFTER`], longer than any
    /// remaining budget.
    ///
    /// Only the first email is refused: if rein wrongly retried an
    /// irreversible call, the second try would send, and the side-effect log
    /// would show it.
    pub fn demo() -> Faults {
        Faults::none()
            .then(UPDATE_DELIVERY_TIME, Fault::LoseResponse)
            .then(SEND_EMAIL, Fault::rate_limited(DEMO_EMAIL_RETRY_AFTER))
    }

    /// Adds `fault` to the end of `tool`'s queue.
    pub fn then(mut self, tool: &str, fault: Fault) -> Faults {
        self.push(tool, fault);
        self
    }

    /// Sets the fault every request to `tool` gets once its queue is empty.
    pub fn always(mut self, tool: &str, fault: Fault) -> Faults {
        self.tools.entry(tool.to_owned()).or_default().always = Some(fault);
        self
    }

    /// The plan for `tool`, if any.
    pub fn tool(&self, tool: &str) -> Option<&ToolFaults> {
        self.tools.get(tool)
    }

    /// Whether no request will get a fault.
    pub fn is_empty(&self) -> bool {
        self.tools
            .values()
            .all(|t| t.queue.is_empty() && t.always.is_none())
    }

    /// Checks every fault's status code.
    ///
    /// # Errors
    ///
    /// [`TestkitError::InvalidFault`] for a status outside 400..=599.
    pub fn validate(&self) -> Result<(), TestkitError> {
        for (tool, faults) in &self.tools {
            for fault in faults.queue.iter().chain(&faults.always) {
                fault.validate(tool)?;
            }
        }
        Ok(())
    }

    pub(crate) fn push(&mut self, tool: &str, fault: Fault) {
        self.tools
            .entry(tool.to_owned())
            .or_default()
            .queue
            .push_back(fault);
    }

    /// The fault for the next request to `tool`, consuming it from the queue.
    pub(crate) fn take(&mut self, tool: &str) -> Option<Fault> {
        let faults = self.tools.get_mut(tool)?;
        faults.queue.pop_front().or_else(|| faults.always.clone())
    }

    pub(crate) fn validate_one(tool: &str, fault: &Fault) -> Result<(), TestkitError> {
        fault.validate(tool)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn take_consumes_queue_then_repeats_always() {
        let mut faults = Faults::none()
            .then("t", Fault::LoseResponse)
            .always("t", Fault::status(503));
        assert_eq!(faults.take("t"), Some(Fault::LoseResponse));
        assert_eq!(faults.take("t"), Some(Fault::status(503)));
        assert_eq!(faults.take("t"), Some(Fault::status(503)));
        assert_eq!(faults.take("other"), None);
    }

    #[test]
    fn json_form_round_trips() {
        let faults = Faults::demo()
            .then("get_order", Fault::Delay(Duration::from_millis(1500)))
            .always("send_email", Fault::ApplyThenStatus { code: 500 });
        let json = serde_json::to_value(&faults).unwrap();
        assert_eq!(
            json["update_delivery_time"]["queue"][0],
            serde_json::json!({"kind": "lose_response"})
        );
        assert_eq!(
            json["send_email"]["queue"][0],
            serde_json::json!({"kind": "status", "code": 429, "retry_after": {"seconds": 3600}})
        );
        assert_eq!(
            json["get_order"]["queue"][0],
            serde_json::json!({"kind": "delay", "ms": 1500})
        );
        assert_eq!(serde_json::from_value::<Faults>(json).unwrap(), faults);
    }

    #[test]
    fn validate_refuses_non_error_status() {
        let err = Faults::none()
            .then("send_email", Fault::status(200))
            .validate()
            .unwrap_err();
        assert!(matches!(err, TestkitError::InvalidFault { code: 200, .. }));
        assert!(Faults::demo().validate().is_ok());
    }

    #[test]
    fn unknown_fault_kind_is_refused() {
        let err = serde_json::from_str::<Faults>(r#"{"t": {"queue": [{"kind": "explode"}]}}"#);
        assert!(err.is_err());
    }
}
