//! The desk's state and the tools' semantics, synchronous and behind one
//! lock, so a duplicate key can never slip between check and apply.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use rein_core::{Category, Effect, Failure};
use serde_json::{Map, Value, json};

use super::{
    DeskLog, EffectKind, ErrorDetail, Fault, Faults, GET_ORDER, IDEMPOTENCY_KEY_HEADER, Order,
    RESTORE_DELIVERY_TIME, ReinHeaders, RequestRecord, SEND_EMAIL, SideEffect,
    UPDATE_DELIVERY_TIME,
};
use crate::{RetryAfter, TestkitError};

/// The desk's tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Tool {
    GetOrder,
    UpdateDeliveryTime,
    RestoreDeliveryTime,
    SendEmail,
}

impl Tool {
    pub(crate) const ALL: [Tool; 4] = [
        Tool::GetOrder,
        Tool::UpdateDeliveryTime,
        Tool::RestoreDeliveryTime,
        Tool::SendEmail,
    ];

    pub(crate) fn parse(name: &str) -> Option<Tool> {
        Tool::ALL.into_iter().find(|t| t.name() == name)
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Tool::GetOrder => GET_ORDER,
            Tool::UpdateDeliveryTime => UPDATE_DELIVERY_TIME,
            Tool::RestoreDeliveryTime => RESTORE_DELIVERY_TIME,
            Tool::SendEmail => SEND_EMAIL,
        }
    }

    /// Whether the tool deduplicates by `Idempotency-Key` (and so answers a
    /// status lookup by key).
    pub(crate) fn is_keyed(self) -> bool {
        matches!(self, Tool::UpdateDeliveryTime | Tool::RestoreDeliveryTime)
    }

    /// Whether the tool changes anything.
    pub(crate) fn writes(self) -> bool {
        !matches!(self, Tool::GetOrder)
    }
}

/// A successful answer.
#[derive(Debug)]
pub(crate) struct Success {
    pub(crate) body: Value,
    pub(crate) replayed: bool,
}

/// An error answer: HTTP status, the structured detail, and the
/// `Retry-After` header to send.
#[derive(Debug)]
pub(crate) struct ToolError {
    pub(crate) status: u16,
    pub(crate) detail: ErrorDetail,
    pub(crate) retry_after: Option<RetryAfter>,
}

impl ToolError {
    fn plain(status: u16, category: Category, message: String) -> ToolError {
        ToolError {
            status,
            detail: ErrorDetail {
                category,
                retryable: category.is_retryable(),
                retry_after_ms: None,
                effect: Effect::NotApplied,
                message,
            },
            retry_after: None,
        }
    }

    pub(crate) fn invalid(message: String) -> ToolError {
        ToolError::plain(400, Category::InvalidArguments, message)
    }

    pub(crate) fn not_found(message: String) -> ToolError {
        ToolError::plain(404, Category::NotFound, message)
    }

    fn conflict(message: String) -> ToolError {
        ToolError::plain(409, Category::Conflict, message)
    }

    fn internal(message: String) -> ToolError {
        ToolError::plain(500, Category::Unknown, message)
    }

    /// The error an injected status fault answers with. The category follows
    /// rein-core's status table so the body and the status agree.
    pub(crate) fn injected(
        code: u16,
        retry_after: Option<RetryAfter>,
        effect: Effect,
        message: String,
    ) -> ToolError {
        // NOTE: the category mapping is rein-core's (Failure::from_http_status);
        // the body only adds what the status cannot say: the effect.
        let category = Failure::from_http_status("order_desk", code, None, SystemTime::UNIX_EPOCH)
            .map_or(Category::Unknown, |f| f.category());
        let now = SystemTime::now();
        ToolError {
            status: code,
            detail: ErrorDetail {
                category,
                retryable: category.is_retryable(),
                retry_after_ms: retry_after.map(|r| r.millis_from(now)),
                effect,
                message,
            },
            retry_after,
        }
    }
}

/// A result stored under an idempotency key, with the arguments it was
/// applied for.
#[derive(Debug)]
struct Stored {
    order_id: String,
    delivery_date: String,
    result: Value,
}

#[derive(Debug)]
struct DeskState {
    orders: BTreeMap<String, Order>,
    faults: Faults,
    stored: HashMap<(Tool, String), Stored>,
    side_effects: Vec<SideEffect>,
    requests: Vec<RequestRecord>,
    emails_sent: u64,
}

/// The shared state of one desk.
#[derive(Debug)]
pub(crate) struct Desk {
    state: Mutex<DeskState>,
    /// The origin of [`RequestRecord::received`].
    started: tokio::time::Instant,
    held: Held,
}

/// The requests a [`Fault::Hold`] keeps waiting, and the release that lets
/// them go: a generation that every release advances.
#[derive(Debug)]
struct Held {
    released: tokio::sync::watch::Sender<u64>,
    now: AtomicUsize,
}

/// Counts a held request while it waits, however its wait ends (released,
/// or dropped with its connection).
struct Holding<'a>(&'a AtomicUsize);

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Desk {
    pub(crate) fn new(orders: Vec<Order>, faults: Faults) -> Desk {
        Desk {
            state: Mutex::new(DeskState {
                orders: orders
                    .into_iter()
                    .map(|o| (o.order_id.clone(), o))
                    .collect(),
                faults,
                stored: HashMap::new(),
                side_effects: Vec::new(),
                requests: Vec::new(),
                emails_sent: 0,
            }),
            started: tokio::time::Instant::now(),
            held: Held {
                released: tokio::sync::watch::Sender::new(0),
                now: AtomicUsize::new(0),
            },
        }
    }

    /// Waits until the next [`Desk::release_held`].
    pub(crate) async fn hold(&self) {
        // The generation is read before the request counts as held: a
        // release that a test sends once it sees the request held is
        // always a later generation.
        let mut released = self.held.released.subscribe();
        let arrived_in = *released.borrow_and_update();
        self.held.now.fetch_add(1, Ordering::AcqRel);
        let _holding = Holding(&self.held.now);
        // The sender lives as long as the desk: an error cannot happen
        // while a request is served.
        let _ = released
            .wait_for(|generation| *generation > arrived_in)
            .await;
    }

    /// Lets every request held now go on.
    pub(crate) fn release_held(&self) {
        self.held
            .released
            .send_modify(|generation| *generation += 1);
    }

    /// How many requests are held now.
    pub(crate) fn held_count(&self) -> usize {
        self.held.now.load(Ordering::Acquire)
    }

    /// The state, even if a panicking test thread poisoned the lock: the
    /// logs are most useful exactly then.
    fn lock(&self) -> MutexGuard<'_, DeskState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records an arriving request and takes its fault; returns the
    /// request's sequence number.
    pub(crate) fn arrive(
        &self,
        method: &str,
        target: &str,
        headers: ReinHeaders,
        args: Value,
    ) -> (u64, Option<Fault>) {
        let mut st = self.lock();
        let fault = st.faults.take(target);
        let seq = st.requests.len() as u64 + 1;
        st.requests.push(RequestRecord {
            seq,
            method: method.to_owned(),
            tool: target.to_owned(),
            headers,
            args,
            fault: fault.clone(),
            status: None,
            replayed: false,
            response_lost: false,
            received: self.started.elapsed(),
        });
        (seq, fault)
    }

    /// Completes a request's log entry with how it was answered.
    pub(crate) fn finish(&self, seq: u64, status: u16, replayed: bool, response_lost: bool) {
        let mut st = self.lock();
        let index = usize::try_from(seq.saturating_sub(1)).unwrap_or(usize::MAX);
        if let Some(record) = st.requests.get_mut(index) {
            record.status = Some(status);
            record.replayed = replayed;
            record.response_lost = response_lost;
        }
    }

    /// Runs `tool` with `args` for request `request_seq`.
    pub(crate) fn call(
        &self,
        tool: Tool,
        request_seq: u64,
        headers: &ReinHeaders,
        args: &Value,
    ) -> Result<Success, ToolError> {
        let fields = args.as_object().ok_or_else(|| {
            ToolError::invalid(format!(
                "the arguments of {} must be a JSON object, but they are {}",
                tool.name(),
                json_type(args)
            ))
        })?;
        let mut st = self.lock();
        match tool {
            Tool::GetOrder => st.get_order(fields),
            Tool::UpdateDeliveryTime | Tool::RestoreDeliveryTime => {
                st.set_delivery_time(tool, request_seq, headers, args, fields)
            }
            Tool::SendEmail => st.send_email(request_seq, headers, args, fields),
        }
    }

    /// The result stored under `key` for `tool`, if that key was applied.
    pub(crate) fn lookup(&self, tool: Tool, key: &str) -> Option<Value> {
        self.lock()
            .stored
            .get(&(tool, key.to_owned()))
            .map(|s| s.result.clone())
    }

    pub(crate) fn faults(&self) -> Faults {
        self.lock().faults.clone()
    }

    pub(crate) fn set_faults(&self, faults: Faults) -> Result<(), TestkitError> {
        faults.validate()?;
        self.lock().faults = faults;
        Ok(())
    }

    pub(crate) fn push_fault(&self, tool: &str, fault: Fault) -> Result<(), TestkitError> {
        Faults::validate_one(tool, &fault)?;
        self.lock().faults.push(tool, fault);
        Ok(())
    }

    pub(crate) fn log(&self) -> DeskLog {
        let st = self.lock();
        DeskLog {
            side_effects: st.side_effects.clone(),
            requests: st.requests.clone(),
            orders: st.orders.values().cloned().collect(),
        }
    }

    pub(crate) fn side_effects(&self) -> Vec<SideEffect> {
        self.lock().side_effects.clone()
    }

    pub(crate) fn count_effects(&self, tool: &str, kind: EffectKind) -> usize {
        self.lock()
            .side_effects
            .iter()
            .filter(|e| e.tool == tool && e.effect == kind)
            .count()
    }

    pub(crate) fn requests(&self) -> Vec<RequestRecord> {
        self.lock().requests.clone()
    }

    pub(crate) fn order(&self, order_id: &str) -> Option<Order> {
        self.lock().orders.get(order_id).cloned()
    }

    pub(crate) fn orders(&self) -> Vec<Order> {
        self.lock().orders.values().cloned().collect()
    }
}

impl DeskState {
    fn get_order(&self, fields: &Map<String, Value>) -> Result<Success, ToolError> {
        let order_id = required_str(GET_ORDER, fields, "order_id")?;
        let order = self
            .orders
            .get(order_id)
            .ok_or_else(|| ToolError::not_found(format!("no order with order_id {order_id:?}")))?;
        let body = serde_json::to_value(order)
            .map_err(|err| ToolError::internal(format!("cannot encode order: {err}")))?;
        Ok(Success {
            body,
            replayed: false,
        })
    }

    fn set_delivery_time(
        &mut self,
        tool: Tool,
        request_seq: u64,
        headers: &ReinHeaders,
        args: &Value,
        fields: &Map<String, Value>,
    ) -> Result<Success, ToolError> {
        let name = tool.name();
        let key = headers
            .idempotency_key
            .as_deref()
            .filter(|k| !k.is_empty())
            .ok_or_else(|| {
                ToolError::invalid(format!(
                    "{name} is an idempotent write and needs an {IDEMPOTENCY_KEY_HEADER} header"
                ))
            })?;
        let order_id = required_str(name, fields, "order_id")?;
        let delivery_date = required_str(name, fields, "delivery_date")?;

        if let Some(stored) = self.stored.get(&(tool, key.to_owned())) {
            if stored.order_id != order_id || stored.delivery_date != delivery_date {
                return Err(ToolError::conflict(format!(
                    "{IDEMPOTENCY_KEY_HEADER} {key:?} was first used for {name} of order {:?} to {:?}; \
                     a key must not be reused with other arguments",
                    stored.order_id, stored.delivery_date
                )));
            }
            let result = stored.result.clone();
            self.log_effect(
                name,
                request_seq,
                Some(key),
                args,
                EffectKind::Replayed,
                &result,
            );
            tracing::debug!(
                tool = name,
                key,
                "duplicate key: replayed the stored result"
            );
            return Ok(Success {
                body: result,
                replayed: true,
            });
        }

        let order = self
            .orders
            .get_mut(order_id)
            .ok_or_else(|| ToolError::not_found(format!("no order with order_id {order_id:?}")))?;
        let previous = std::mem::replace(&mut order.delivery_date, delivery_date.to_owned());
        let result = json!({
            "order_id": order_id,
            "previous_delivery_date": previous,
            "delivery_date": delivery_date,
        });
        self.stored.insert(
            (tool, key.to_owned()),
            Stored {
                order_id: order_id.to_owned(),
                delivery_date: delivery_date.to_owned(),
                result: result.clone(),
            },
        );
        self.log_effect(
            name,
            request_seq,
            Some(key),
            args,
            EffectKind::Applied,
            &result,
        );
        tracing::debug!(tool = name, key, order_id, "applied");
        Ok(Success {
            body: result,
            replayed: false,
        })
    }

    fn send_email(
        &mut self,
        request_seq: u64,
        headers: &ReinHeaders,
        args: &Value,
        fields: &Map<String, Value>,
    ) -> Result<Success, ToolError> {
        let to = required_str(SEND_EMAIL, fields, "to")?;
        let subject = required_str(SEND_EMAIL, fields, "subject")?;
        required_str(SEND_EMAIL, fields, "body")?;
        self.emails_sent += 1;
        let result = json!({
            "message_id": format!("msg-{:06}", self.emails_sent),
            "to": to,
            "subject": subject,
            "status": "sent",
        });
        // Irreversible and not deduplicated: a key, if sent, is only logged.
        let key = headers.idempotency_key.clone();
        self.log_effect(
            SEND_EMAIL,
            request_seq,
            key.as_deref(),
            args,
            EffectKind::Applied,
            &result,
        );
        tracing::debug!(tool = SEND_EMAIL, to, "email sent");
        Ok(Success {
            body: result,
            replayed: false,
        })
    }

    fn log_effect(
        &mut self,
        tool: &str,
        request_seq: u64,
        key: Option<&str>,
        args: &Value,
        effect: EffectKind,
        result: &Value,
    ) {
        let seq = self.side_effects.len() as u64 + 1;
        self.side_effects.push(SideEffect {
            seq,
            request_seq,
            tool: tool.to_owned(),
            idempotency_key: key.map(str::to_owned),
            args: args.clone(),
            effect,
            result: result.clone(),
        });
    }
}

/// A required, non-empty string argument.
fn required_str<'a>(
    tool: &str,
    fields: &'a Map<String, Value>,
    name: &str,
) -> Result<&'a str, ToolError> {
    match fields.get(name) {
        None => Err(ToolError::invalid(format!(
            "{tool} needs the argument {name:?}, but it is missing"
        ))),
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(other) => Err(ToolError::invalid(format!(
            "the argument {name:?} of {tool} must be a non-empty string, but it is {}",
            json_type(other)
        ))),
    }
}

/// What kind of JSON value `v` is, for error messages.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(s) if s.is_empty() => "an empty string",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::order_desk::seed_orders;

    fn keyed(key: &str) -> ReinHeaders {
        ReinHeaders {
            idempotency_key: Some(key.to_owned()),
            ..ReinHeaders::default()
        }
    }

    #[test]
    fn same_key_twice_applies_once_and_replays_once() {
        let desk = Desk::new(seed_orders(), Faults::none());
        let args = json!({"order_id": "A-1001", "delivery_date": "2026-01-06T09:00:00Z"});
        let first = desk
            .call(Tool::UpdateDeliveryTime, 1, &keyed("k1"), &args)
            .unwrap();
        let second = desk
            .call(Tool::UpdateDeliveryTime, 2, &keyed("k1"), &args)
            .unwrap();
        assert!(!first.replayed);
        assert!(second.replayed);
        assert_eq!(first.body, second.body);
        assert_eq!(
            desk.count_effects(UPDATE_DELIVERY_TIME, EffectKind::Applied),
            1
        );
        assert_eq!(
            desk.count_effects(UPDATE_DELIVERY_TIME, EffectKind::Replayed),
            1
        );
    }

    #[test]
    fn reused_key_with_other_arguments_is_a_conflict() {
        let desk = Desk::new(seed_orders(), Faults::none());
        let a = json!({"order_id": "A-1001", "delivery_date": "d1"});
        let b = json!({"order_id": "A-1001", "delivery_date": "d2"});
        desk.call(Tool::UpdateDeliveryTime, 1, &keyed("k"), &a)
            .unwrap();
        let err = desk
            .call(Tool::UpdateDeliveryTime, 2, &keyed("k"), &b)
            .unwrap_err();
        assert_eq!(err.status, 409);
        assert_eq!(err.detail.category, Category::Conflict);
        assert_eq!(desk.order("A-1001").unwrap().delivery_date, "d1");
    }

    #[test]
    fn keys_are_scoped_per_tool() {
        let desk = Desk::new(seed_orders(), Faults::none());
        let args = json!({"order_id": "A-1001", "delivery_date": "d1"});
        desk.call(Tool::UpdateDeliveryTime, 1, &keyed("k"), &args)
            .unwrap();
        let restore = desk
            .call(Tool::RestoreDeliveryTime, 2, &keyed("k"), &args)
            .unwrap();
        assert!(!restore.replayed);
        assert!(desk.lookup(Tool::RestoreDeliveryTime, "k").is_some());
        assert!(desk.lookup(Tool::UpdateDeliveryTime, "other").is_none());
    }

    #[test]
    fn wrong_argument_type_is_invalid_and_names_the_field() {
        let desk = Desk::new(seed_orders(), Faults::none());
        let err = desk
            .call(
                Tool::GetOrder,
                1,
                &ReinHeaders::default(),
                &json!({"order_id": 7}),
            )
            .unwrap_err();
        assert_eq!(err.status, 400);
        assert_eq!(err.detail.category, Category::InvalidArguments);
        assert!(
            err.detail.message.contains("\"order_id\""),
            "{}",
            err.detail.message
        );
    }

    #[test]
    fn injected_429_is_rate_limited_and_retryable_with_wait() {
        let err = ToolError::injected(
            429,
            Some(RetryAfter::Seconds(3600)),
            Effect::NotApplied,
            String::new(),
        );
        assert_eq!(err.detail.category, Category::RateLimited);
        assert!(err.detail.retryable);
        assert_eq!(err.detail.retry_after_ms, Some(3_600_000));
    }
}
