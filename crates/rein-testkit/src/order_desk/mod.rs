//! The order desk: a small HTTP tool service with an in-memory order store,
//! its own log of every side effect it performs, and fault injection.
//!
//! # Why
//!
//! It is the outside world of seed 000's order adjustment task, and of
//! `rein demo`: one read, one idempotent write with a compensation, one
//! irreversible action. Because it logs what it *actually did*, a test can
//! check rein's invariants against ground truth rather than against rein's
//! own ledger: "each idempotency key produced at most one side effect",
//! "an irreversible tool was never retried".
//!
//! # Tools
//!
//! `POST /tools/{name}` with a JSON object of arguments; JSON answers.
//!
//! | tool | class | arguments | result |
//! | --- | --- | --- | --- |
//! | `get_order` | read | `order_id` | the [`Order`]: `{order_id, status, delivery_date, buyer_email, items: [{sku, name, quantity}]}` |
//! | `update_delivery_time` | idempotent write | `order_id`, `delivery_date` | `{order_id, previous_delivery_date, delivery_date}` |
//! | `restore_delivery_time` | idempotent write, the compensation of the update | `order_id`, `delivery_date` | `{order_id, previous_delivery_date, delivery_date}` |
//! | `send_email` | irreversible | `to`, `subject`, `body` | `{message_id, to, subject, status: "sent"}` |
//!
//! The two idempotent writes require an `Idempotency-Key` header (400
//! without one). The first request with a key applies and stores its result
//! under the key; a later one with the same key and the same arguments gets
//! the stored result with `Idempotent-Replayed: true` and changes nothing;
//! the same key with other arguments is a 409 `conflict`. Keys are scoped
//! per tool. `send_email` never deduplicates: every accepted request sends.
//!
//! `GET /tools/{tool}/status?key=K` answers a keyed tool's stored result
//! (200) or 404 `not_found`: rein's lookup by key after a lost response.
//!
//! Every error has the structured body [`ErrorBody`]:
//! `{"error": {"category", "retryable", "retry_after_ms", "effect", "message"}}`
//! (`invalid_arguments` 400 for missing or mistyped arguments, `not_found`
//! 404 for unknown orders and tools, `conflict` 409 for a reused key).
//!
//! The desk reads and logs `Idempotency-Key`, `Rein-Deadline-Ms`,
//! `Rein-Run-Id`, `Rein-Intent-Id` and `Rein-Attempt` ([`ReinHeaders`]).
//!
//! # Faults
//!
//! A [`Faults`] plan, given at start and changeable at any time through the
//! handle or `POST /_faults`, gives each tool a queue of [`Fault`]s taken
//! one per request, then an optional fault for every n-th later request
//! ([`Every`], a fixed fault rate), then an optional fault for every other
//! later request.
//! Status lookups take faults under `<tool>/status`.
//!
//! # Inspection
//!
//! Through the handle, or `GET /_log` (a [`DeskLog`]): the side-effect log
//! ([`SideEffect`], `effect` `applied` or `replayed`), the request log
//! ([`RequestRecord`], with the fault injected and the status answered), and
//! the orders. `GET /_faults` shows the remaining plan; `DELETE /_faults`
//! clears it.

mod faults;
mod orders;
mod records;
mod routes;
mod state;

use std::net::SocketAddr;
use std::sync::Arc;

pub use faults::{DEMO_EMAIL_RETRY_AFTER, Every, Fault, Faults, ToolFaults};
pub use orders::{Item, Order, seed_orders};
pub use records::{
    DeskLog, EffectKind, ErrorBody, ErrorDetail, ReinHeaders, RequestRecord, SideEffect,
};
pub use rein_core::deadline::DEADLINE_HEADER;

use crate::TestkitError;
use crate::server::Server;
use state::Desk;

/// The read tool: look up an order.
pub const GET_ORDER: &str = "get_order";
/// The idempotent write: change an order's delivery time.
pub const UPDATE_DELIVERY_TIME: &str = "update_delivery_time";
/// The compensation of [`UPDATE_DELIVERY_TIME`]: put the old time back.
pub const RESTORE_DELIVERY_TIME: &str = "restore_delivery_time";
/// The irreversible tool: notify someone by email.
pub const SEND_EMAIL: &str = "send_email";

// The header names rein's HTTP tool adapter sends, and the one a tool
// answers a replay with: defined once, in rein-core.
pub use rein_core::header::{
    ATTEMPT_HEADER, IDEMPOTENCY_KEY_HEADER, INTENT_ID_HEADER, RUN_ID_HEADER,
    TOOL_REPLAYED_HEADER as REPLAYED_HEADER,
};

/// How an order desk starts.
///
/// Defaults: the [`seed_orders`] and no faults.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OrderDeskConfig {
    /// The orders in the store at start.
    pub orders: Vec<Order>,
    /// The fault plan at start.
    pub faults: Faults,
    /// The loopback port to listen on; `0` (the default) takes any free
    /// one.
    pub port: u16,
}

impl Default for OrderDeskConfig {
    fn default() -> Self {
        OrderDeskConfig {
            orders: seed_orders(),
            faults: Faults::none(),
            port: 0,
        }
    }
}

impl OrderDeskConfig {
    /// The `rein demo` desk: the seed orders and [`Faults::demo`].
    pub fn demo() -> OrderDeskConfig {
        OrderDeskConfig::default().with_faults(Faults::demo())
    }

    /// Replaces the fault plan.
    pub fn with_faults(mut self, faults: Faults) -> OrderDeskConfig {
        self.faults = faults;
        self
    }

    /// Replaces the orders.
    pub fn with_orders(mut self, orders: Vec<Order>) -> OrderDeskConfig {
        self.orders = orders;
        self
    }

    /// Listens on `127.0.0.1:port` (`0`: any free port).
    pub fn with_port(mut self, port: u16) -> OrderDeskConfig {
        self.port = port;
        self
    }
}

/// A running order desk on `127.0.0.1:<port>`: the handle tests and
/// `rein demo` hold.
///
/// Dropping it stops the service (without waiting); [`shutdown`](Self::shutdown)
/// stops it and waits.
#[derive(Debug)]
pub struct OrderDesk {
    desk: Arc<Desk>,
    server: Server,
}

impl OrderDesk {
    /// Starts a desk with the seed orders and no faults.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Bind`] or [`TestkitError::LocalAddr`] when no
    /// loopback port can be had.
    pub async fn start() -> Result<OrderDesk, TestkitError> {
        OrderDesk::start_with(OrderDeskConfig::default()).await
    }

    /// Starts a desk as `config` says.
    ///
    /// # Errors
    ///
    /// [`TestkitError::InvalidFault`] for a fault with a non-error status;
    /// [`TestkitError::Bind`] or [`TestkitError::LocalAddr`] when no
    /// loopback port can be had.
    pub async fn start_with(config: OrderDeskConfig) -> Result<OrderDesk, TestkitError> {
        config.faults.validate()?;
        let desk = Arc::new(Desk::new(config.orders, config.faults));
        let server =
            Server::start("order desk", config.port, routes::router(Arc::clone(&desk))).await?;
        Ok(OrderDesk { desk, server })
    }

    /// `http://127.0.0.1:<port>`, without a trailing slash.
    pub fn base_url(&self) -> &str {
        self.server.base_url()
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// The URL to `POST` a call of `tool` to.
    pub fn tool_url(&self, tool: &str) -> String {
        format!("{}/tools/{tool}", self.base_url())
    }

    /// The URL of the status lookup of `tool` by `key`, the key
    /// percent-encoded.
    pub fn status_url(&self, tool: &str, key: &str) -> String {
        format!(
            "{}/tools/{tool}/status?key={}",
            self.base_url(),
            percent_encode(key)
        )
    }

    /// Replaces the fault plan; requests already past fault selection keep
    /// theirs.
    ///
    /// # Errors
    ///
    /// [`TestkitError::InvalidFault`] for a fault with a non-error status;
    /// the plan is then unchanged.
    pub fn set_faults(&self, faults: Faults) -> Result<(), TestkitError> {
        self.desk.set_faults(faults)
    }

    /// Appends `fault` to `tool`'s queue.
    ///
    /// # Errors
    ///
    /// [`TestkitError::InvalidFault`] for a fault with a non-error status.
    pub fn push_fault(&self, tool: &str, fault: Fault) -> Result<(), TestkitError> {
        self.desk.push_fault(tool, fault)
    }

    /// Removes every planned fault.
    pub fn clear_faults(&self) {
        // An empty plan always validates.
        let _ = self.desk.set_faults(Faults::none());
    }

    /// Lets every request a [`Fault::Hold`] keeps waiting now go on
    /// (handled normally); a later held request waits for the next release.
    pub fn release_held(&self) {
        self.desk.release_held();
    }

    /// How many requests a [`Fault::Hold`] keeps waiting now: each arrived
    /// (it is in [`requests`](Self::requests)) and nothing of it was
    /// handled yet.
    pub fn held_count(&self) -> usize {
        self.desk.held_count()
    }

    /// Waits until `n` requests are held, at most `bound`; whether they
    /// were. For a test that needs a call in flight before it acts.
    pub async fn until_held(&self, n: usize, bound: std::time::Duration) -> bool {
        let until = tokio::time::Instant::now() + bound;
        while self.held_count() < n {
            if tokio::time::Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        true
    }

    /// The faults still planned.
    pub fn faults(&self) -> Faults {
        self.desk.faults()
    }

    /// Everything the desk knows: side effects, requests, orders.
    pub fn log(&self) -> DeskLog {
        self.desk.log()
    }

    /// The side-effect log, replays included.
    pub fn side_effects(&self) -> Vec<SideEffect> {
        self.desk.side_effects()
    }

    /// The effects `tool` actually performed (replays excluded).
    pub fn applied(&self, tool: &str) -> Vec<SideEffect> {
        self.desk
            .side_effects()
            .into_iter()
            .filter(|e| e.tool == tool && e.effect == EffectKind::Applied)
            .collect()
    }

    /// How many effects `tool` actually performed.
    pub fn applied_count(&self, tool: &str) -> usize {
        self.desk.count_effects(tool, EffectKind::Applied)
    }

    /// How many duplicate keys `tool` answered from its store.
    pub fn replayed_count(&self, tool: &str) -> usize {
        self.desk.count_effects(tool, EffectKind::Replayed)
    }

    /// The request log.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.desk.requests()
    }

    /// How many requests reached `target` (a tool, or `<tool>/status`),
    /// whatever their answer.
    pub fn request_count(&self, target: &str) -> usize {
        self.desk
            .requests()
            .iter()
            .filter(|r| r.tool == target)
            .count()
    }

    /// The current state of one order.
    pub fn order(&self, order_id: &str) -> Option<Order> {
        self.desk.order(order_id)
    }

    /// The current state of every order, by id.
    pub fn orders(&self) -> Vec<Order> {
        self.desk.orders()
    }

    /// Stops accepting connections and waits (bounded) for in-flight
    /// requests. The logs stay readable until the handle is dropped; take
    /// [`log`](Self::log) first if you need them afterwards.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Serve`] or [`TestkitError::Task`] when the server
    /// loop failed.
    pub async fn shutdown(self) -> Result<(), TestkitError> {
        self.server.shutdown().await
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_encode_keeps_unreserved_and_escapes_the_rest() {
        assert_eq!(percent_encode("a-b_c.d~9"), "a-b_c.d~9");
        assert_eq!(percent_encode("k 1&x=%"), "k%201%26x%3D%25");
    }
}
