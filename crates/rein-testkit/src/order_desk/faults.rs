//! Faults the order desk injects into its own answers.

use std::collections::{BTreeMap, VecDeque};
use std::num::NonZeroU32;
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
/// | `DelayPerUnit { arg, per_unit }` | as normal, after `per_unit` × the number in argument `arg` | the normal answer, later the larger the request |
/// | `ApplyThenStatus { code }` | yes | `code` with a structured error body (`effect: maybe_applied` for writes) |
/// | `Hold` | as normal, once released | the normal answer, once the test releases it |
///
/// JSON form (`POST /_faults`): `{"kind": "lose_response"}`,
/// `{"kind": "status", "code": 429, "retry_after": {"seconds": 3600}}`,
/// `{"kind": "delay", "ms": 1500}`,
/// `{"kind": "delay_per_unit", "arg": "rows", "per_unit_us": 200}`,
/// `{"kind": "apply_then_status", "code": 500}`,
/// `{"kind": "hold"}`.
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
    /// Sleep (tokio time) `per_unit` × the number in the top-level
    /// argument `arg` (0 when it is missing or not a whole number), then
    /// handle the request normally: a tool whose latency grows with the
    /// size of what it is asked for (rows, items), as a search does. Set
    /// it with [`Faults::always`] to slow every request by its own size.
    DelayPerUnit {
        /// The argument holding the size.
        arg: String,
        /// The delay per unit of size.
        per_unit: Duration,
    },
    /// Apply the effect, then answer `code`: "executed but reported
    /// failure". The error path does not know the write landed, so it says
    /// `maybe_applied` — the gray zone a lookup by key must resolve.
    ApplyThenStatus {
        /// The HTTP status, 400..=599.
        code: u16,
    },
    /// Hold the request, arrived and logged but not handled, until the test
    /// releases it ([`OrderDesk::release_held`], or `POST /_release`); then
    /// handle it normally.
    ///
    /// # Why
    ///
    /// A test that needs a call *in flight* at a given moment (an interrupt
    /// landing mid-call) synchronises on the request having arrived
    /// ([`OrderDesk::held_count`]) and lets it go when it is ready, instead
    /// of betting on a delay being long enough on a loaded machine.
    ///
    /// [`OrderDesk::release_held`]: super::OrderDesk::release_held
    /// [`OrderDesk::held_count`]: super::OrderDesk::held_count
    Hold,
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
            Fault::DelayPerUnit { .. } => "delay_per_unit",
            Fault::ApplyThenStatus { .. } => "apply_then_status",
            Fault::Hold => "hold",
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
    DelayPerUnit {
        arg: String,
        per_unit_us: u64,
    },
    ApplyThenStatus {
        code: u16,
    },
    Hold,
}

impl From<Fault> for FaultSpec {
    fn from(fault: Fault) -> FaultSpec {
        match fault {
            Fault::LoseResponse => FaultSpec::LoseResponse,
            Fault::Status { code, retry_after } => FaultSpec::Status { code, retry_after },
            Fault::Delay(d) => FaultSpec::Delay {
                ms: u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
            },
            Fault::DelayPerUnit { arg, per_unit } => FaultSpec::DelayPerUnit {
                arg,
                per_unit_us: u64::try_from(per_unit.as_micros()).unwrap_or(u64::MAX),
            },
            Fault::ApplyThenStatus { code } => FaultSpec::ApplyThenStatus { code },
            Fault::Hold => FaultSpec::Hold,
        }
    }
}

impl From<FaultSpec> for Fault {
    fn from(spec: FaultSpec) -> Fault {
        match spec {
            FaultSpec::LoseResponse => Fault::LoseResponse,
            FaultSpec::Status { code, retry_after } => Fault::Status { code, retry_after },
            FaultSpec::Delay { ms } => Fault::Delay(Duration::from_millis(ms)),
            FaultSpec::DelayPerUnit { arg, per_unit_us } => Fault::DelayPerUnit {
                arg,
                per_unit: Duration::from_micros(per_unit_us),
            },
            FaultSpec::ApplyThenStatus { code } => Fault::ApplyThenStatus { code },
            FaultSpec::Hold => Fault::Hold,
        }
    }
}

/// The faults planned for one tool.
///
/// Each request takes the front of `queue`; once the queue is empty, every
/// [`every.n`](Every::n)-th request takes the next of `every`'s faults, and
/// every other request gets `always` (or no fault).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolFaults {
    /// Faults for the next requests, one each, in order.
    #[serde(default)]
    pub queue: VecDeque<Fault>,
    /// A fault for every n-th request after the queue ran out.
    #[serde(default)]
    pub every: Option<Every>,
    /// The fault for every request after the queue ran out (that `every`
    /// does not fault).
    #[serde(default)]
    pub always: Option<Fault>,
}

/// A fault for every `n`-th request: a fixed rate of faults, deterministic.
///
/// # Why
///
/// A load test wants "10% of tool calls fail" without a random source: the
/// n-th, 2n-th, 3n-th… request (counted once the queue ran out) takes the
/// next of `faults` in turn, cycling, so a run of the test injects the same
/// number of each kind. Which *run's* call is hit still depends on the
/// order requests arrive in. An empty `faults` injects nothing.
///
/// JSON form: `{"n": 10, "faults": [{"kind": "lose_response"}], "seen": 0}`
/// (`seen` optional, default 0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Every {
    /// The period: 1 faults every request, 10 every tenth.
    pub n: NonZeroU32,
    /// The faults, taken in turn.
    pub faults: Vec<Fault>,
    /// Requests counted so far.
    #[serde(default)]
    pub seen: u64,
}

impl Every {
    /// Every `n`-th request takes the next of `faults`, cycling.
    pub fn new(n: NonZeroU32, faults: impl IntoIterator<Item = Fault>) -> Every {
        Every {
            n,
            faults: faults.into_iter().collect(),
            seen: 0,
        }
    }

    /// Counts one request; the fault it takes, if it is an n-th one.
    fn take(&mut self) -> Option<Fault> {
        self.seen += 1;
        let n = u64::from(self.n.get());
        if self.faults.is_empty() || self.seen % n != 0 {
            return None;
        }
        let turn = (self.seen / n - 1) % self.faults.len() as u64;
        self.faults.get(usize::try_from(turn).unwrap_or(0)).cloned()
    }
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

    /// Faults every `n`-th request to `tool` once its queue is empty, with
    /// `faults` in turn (see [`Every`]).
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use rein_testkit::order_desk::{Fault, Faults};
    /// let ten = NonZeroU32::new(10).ok_or("zero")?;
    /// // 10% of calls: a lost response, then a 503, then a lost response…
    /// let faults = Faults::none().every("get_order", ten, [Fault::LoseResponse, Fault::status(503)]);
    /// assert!(!faults.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn every(
        mut self,
        tool: &str,
        n: NonZeroU32,
        faults: impl IntoIterator<Item = Fault>,
    ) -> Faults {
        self.tools.entry(tool.to_owned()).or_default().every = Some(Every::new(n, faults));
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
        self.tools.values().all(|t| {
            t.queue.is_empty()
                && t.always.is_none()
                && t.every.as_ref().is_none_or(|e| e.faults.is_empty())
        })
    }

    /// Checks every fault's status code.
    ///
    /// # Errors
    ///
    /// [`TestkitError::InvalidFault`] for a status outside 400..=599.
    pub fn validate(&self) -> Result<(), TestkitError> {
        for (tool, faults) in &self.tools {
            let every = faults.every.iter().flat_map(|e| &e.faults);
            for fault in faults.queue.iter().chain(every).chain(&faults.always) {
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
        if let Some(fault) = faults.queue.pop_front() {
            return Some(fault);
        }
        faults
            .every
            .as_mut()
            .and_then(Every::take)
            .or_else(|| faults.always.clone())
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
    fn every_faults_each_nth_request_after_the_queue_cycling_its_faults() {
        let three = NonZeroU32::new(3).unwrap();
        let mut faults = Faults::none()
            .then("t", Fault::status(429))
            .every("t", three, [Fault::LoseResponse, Fault::status(503)])
            .always("t", Fault::Delay(Duration::from_millis(1)));
        let taken: Vec<Option<Fault>> = (0..8).map(|_| faults.take("t")).collect();
        let delay = Some(Fault::Delay(Duration::from_millis(1)));
        assert_eq!(
            taken,
            [
                Some(Fault::status(429)),
                delay.clone(),
                delay.clone(),
                Some(Fault::LoseResponse),
                delay.clone(),
                delay.clone(),
                Some(Fault::status(503)),
                delay,
            ]
        );
    }

    #[test]
    fn every_with_no_faults_injects_nothing_and_counts_as_empty() {
        let one = NonZeroU32::new(1).unwrap();
        let mut faults = Faults::none().every("t", one, []);
        assert!(faults.is_empty());
        assert_eq!(faults.take("t"), None);
    }

    #[test]
    fn every_validates_its_faults_and_round_trips() {
        let ten = NonZeroU32::new(10).unwrap();
        let bad = Faults::none().every("t", ten, [Fault::ApplyThenStatus { code: 302 }]);
        assert!(matches!(
            bad.validate(),
            Err(TestkitError::InvalidFault { code: 302, .. })
        ));
        let good = Faults::none().every("t", ten, [Fault::ApplyThenStatus { code: 500 }]);
        let json = serde_json::to_value(&good).unwrap();
        assert_eq!(
            json["t"]["every"],
            serde_json::json!({"n": 10, "faults": [{"kind": "apply_then_status", "code": 500}], "seen": 0})
        );
        assert_eq!(serde_json::from_value::<Faults>(json).unwrap(), good);
        let zero = serde_json::from_str::<Faults>(r#"{"t": {"every": {"n": 0, "faults": []}}}"#);
        assert!(zero.is_err(), "a period of 0 is refused");
    }

    #[test]
    fn json_form_round_trips() {
        let faults = Faults::demo()
            .then("get_order", Fault::Delay(Duration::from_millis(1500)))
            .always("send_email", Fault::ApplyThenStatus { code: 500 })
            .then("restore_delivery_time", Fault::Hold)
            .always(
                "get_order",
                Fault::DelayPerUnit {
                    arg: "rows".into(),
                    per_unit: Duration::from_micros(200),
                },
            );
        let json = serde_json::to_value(&faults).unwrap();
        assert_eq!(
            json["get_order"]["always"],
            serde_json::json!({"kind": "delay_per_unit", "arg": "rows", "per_unit_us": 200})
        );
        assert_eq!(
            json["restore_delivery_time"]["queue"][0],
            serde_json::json!({"kind": "hold"})
        );
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
