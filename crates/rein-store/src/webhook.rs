//! The webhook outbox: events recorded for outside receivers in the
//! transaction that appends them, and each webhook's deliveries of them.
//!
//! # Why the store writes the outbox, not the engine
//!
//! Every event of a run is appended by one function of each backend,
//! whatever path appends it (a step commit, a run closed from outside, a
//! take-over). That function also writes the event's outbox row when the
//! event has a webhook [`Topic`] ([`outbox_event`]), in the same
//! transaction: an event that is stored is in the outbox, and one that is
//! not stored never is, with no second write a crash could split from the
//! first. The cost to a run is one small insert for the few events that
//! have a topic (about one per run); nothing of the delivery itself is on
//! the run's path: no lookup of the configured webhooks, no network, no
//! wait. The row names no webhook: which webhooks want it is decided when
//! the dispatcher routes it ([`WebhookStore::route_webhook_event`]), by the
//! config of the process that delivers.
//!
//! | operation | effect |
//! | --- | --- |
//! | appending an event with a topic | its [`WebhookEvent`], unrouted |
//! | [`WebhookStore::route_webhook_event`] | one pending [`WebhookDelivery`] per webhook that wants it, and the event marked routed, atomically |
//! | [`WebhookStore::claim_webhook_deliveries`] | the due pending deliveries, each claimed until a time so no second dispatcher sends it meanwhile |
//! | [`WebhookStore::record_webhook_attempt`] | the attempt's answer, and the delivery delivered, rescheduled or given up |
//! | [`WebhookStore::webhook_deliveries`] | a webhook's delivery log, newest first |
//! | [`WebhookStore::prune_webhook_outbox`] | the old events whose deliveries are over, deleted with them |
//!
//! [`WebhookStore::route_webhook_event`]: crate::WebhookStore::route_webhook_event
//! [`WebhookStore::claim_webhook_deliveries`]: crate::WebhookStore::claim_webhook_deliveries
//! [`WebhookStore::record_webhook_attempt`]: crate::WebhookStore::record_webhook_attempt
//! [`WebhookStore::webhook_deliveries`]: crate::WebhookStore::webhook_deliveries
//! [`WebhookStore::prune_webhook_outbox`]: crate::WebhookStore::prune_webhook_outbox

use rein_core::outcome::Outcome;
use rein_core::webhook::Topic;
use rein_core::{Event, RunId, Timestamp};
use serde::{Deserialize, Serialize};

use crate::error::StoreError;

/// The most deliveries one listing or claim returns.
pub const MAX_WEBHOOK_PAGE: usize = 1_000;

/// The longest error text kept of an attempt: a receiver's page of HTML is
/// not a delivery log.
pub const MAX_ATTEMPT_ERROR_LEN: usize = 500;

/// An event recorded for webhooks: what every webhook that wants it is
/// sent, byte for byte, on every attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookEvent {
    /// `<run_id>:<seq>`: the same on every attempt and every node, sent as
    /// `Rein-Event-Id` so that a receiver can drop a second delivery.
    pub event_id: String,
    /// Its topic.
    pub topic: Topic,
    /// The run's outcome, for `run_finished`.
    pub outcome: Option<Outcome>,
    /// The run.
    pub run_id: RunId,
    /// The JSON body POSTed.
    pub body: String,
    /// When the event happened: its maximum age counts from here.
    pub created_at_ms: Timestamp,
}

/// The body of a delivery: the event's id, topic and run, and the event's
/// own payload as its stream shows it.
#[derive(Serialize)]
struct Body<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    topic: Topic,
    run_id: &'a RunId,
    seq: u64,
    at_ms: u64,
    data: serde_json::Value,
}

/// The outbox row of `event` (its `seq` assigned), or `None` when no
/// webhook topic covers it. Backends call it for every event they append.
///
/// # Errors
///
/// [`StoreError::Invalid`] when the payload cannot be written as JSON (it
/// could not have been stored either).
pub fn outbox_event(event: &Event) -> Result<Option<WebhookEvent>, StoreError> {
    let Some((topic, outcome)) = Topic::of(&event.data) else {
        return Ok(None);
    };
    let invalid = |error: serde_json::Error| StoreError::Invalid {
        what: "webhook body",
        expected: "a payload serializable as JSON".to_owned(),
        found: error.to_string(),
    };
    let event_id = format!("{}:{}", event.run_id, event.seq);
    let body = serde_json::to_string(&Body {
        id: &event_id,
        topic,
        run_id: &event.run_id,
        seq: event.seq,
        at_ms: event.at_ms.as_millis(),
        data: event.data.to_value().map_err(invalid)?,
    })
    .map_err(invalid)?;
    Ok(Some(WebhookEvent {
        event_id,
        topic,
        outcome,
        run_id: event.run_id.clone(),
        body,
        created_at_ms: event.at_ms,
    }))
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// Not delivered yet; tried at `next_attempt_at_ms`.
    Pending,
    /// A 2xx answer was received.
    Delivered,
    /// Its maximum age passed before a 2xx answer.
    GivenUp,
}

impl DeliveryState {
    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::GivenUp => "given_up",
        }
    }

    /// Reads a stored name.
    ///
    /// # Errors
    ///
    /// [`StoreError::Corrupt`] for any other.
    pub fn decode(text: &str) -> Result<DeliveryState, StoreError> {
        match text {
            "pending" => Ok(DeliveryState::Pending),
            "delivered" => Ok(DeliveryState::Delivered),
            "given_up" => Ok(DeliveryState::GivenUp),
            other => Err(StoreError::Corrupt {
                table: "webhook_deliveries",
                column: "state",
                reason: format!("unknown state `{other}`"),
            }),
        }
    }
}

/// Reads a stored topic.
///
/// # Errors
///
/// [`StoreError::Corrupt`] for a name that is not a topic.
pub fn decode_topic(table: &'static str, text: &str) -> Result<Topic, StoreError> {
    Topic::parse(text).map_err(|err| StoreError::Corrupt {
        table,
        column: "topic",
        reason: err.to_string(),
    })
}

/// One webhook's delivery of one event, as its log shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebhookDelivery {
    /// The webhook's name.
    pub webhook: String,
    /// The event (`Rein-Event-Id`).
    pub event_id: String,
    /// Its topic.
    pub topic: Topic,
    /// The run.
    pub run_id: RunId,
    /// Where it stands.
    pub state: DeliveryState,
    /// Attempts made.
    pub attempts: u32,
    /// When the event happened.
    pub created_at_ms: Timestamp,
    /// When it is tried next, while pending.
    pub next_attempt_at_ms: Timestamp,
    /// When the last attempt ended.
    pub last_attempt_at_ms: Option<Timestamp>,
    /// The last attempt's HTTP status, when an answer came.
    pub last_status: Option<u16>,
    /// Why the last attempt failed, when it did.
    pub last_error: Option<String>,
}

/// A due delivery claimed for sending, with what to send.
#[derive(Debug, Clone, PartialEq)]
pub struct DueDelivery {
    /// The delivery as claimed.
    pub delivery: WebhookDelivery,
    /// The body, as recorded with the event.
    pub body: String,
}

/// What an attempt leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptNext {
    /// It was answered 2xx: done.
    Delivered,
    /// It failed; try again at this time.
    RetryAt(Timestamp),
    /// It failed and the next try would be past the maximum age.
    GiveUp,
}

/// One attempt of a delivery, recorded by
/// [`WebhookStore::record_webhook_attempt`](crate::WebhookStore::record_webhook_attempt).
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookAttempt {
    /// The webhook.
    pub webhook: String,
    /// The event.
    pub event_id: String,
    /// When the attempt ended.
    pub at_ms: Timestamp,
    /// The HTTP status, when an answer came.
    pub status: Option<u16>,
    /// Why it failed (a status is not an error by itself: a 2xx has none).
    pub error: Option<String>,
    /// What follows.
    pub next: AttemptNext,
}

impl WebhookAttempt {
    /// The error text as stored: at most [`MAX_ATTEMPT_ERROR_LEN`] bytes,
    /// cut at a character boundary.
    pub fn stored_error(&self) -> Option<String> {
        self.error.as_deref().map(|text| {
            let mut end = text.len().min(MAX_ATTEMPT_ERROR_LEN);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text[..end].to_owned()
        })
    }

    /// The state, next attempt time and attempt count a backend writes
    /// over a pending delivery that made `attempts` attempts before this
    /// one and was due at `due`.
    pub fn applied(&self, attempts: u32, due: Timestamp) -> (DeliveryState, Timestamp, u32) {
        let (state, next) = match self.next {
            AttemptNext::Delivered => (DeliveryState::Delivered, due),
            AttemptNext::RetryAt(at) => (DeliveryState::Pending, at),
            AttemptNext::GiveUp => (DeliveryState::GivenUp, due),
        };
        (state, next, attempts.saturating_add(1))
    }
}

/// Checks a webhook name before a backend writes or reads it.
///
/// # Errors
///
/// [`StoreError::Invalid`] for an empty name, one over 200 bytes, or one
/// with control characters.
pub fn validate_webhook_name(name: &str) -> Result<(), StoreError> {
    if name.is_empty() || name.len() > 200 || name.chars().any(char::is_control) {
        return Err(StoreError::Invalid {
            what: "webhook name",
            expected: "1 to 200 bytes without control characters".to_owned(),
            found: format!("{} bytes", name.len()),
        });
    }
    Ok(())
}
