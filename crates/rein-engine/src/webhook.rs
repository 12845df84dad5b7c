//! The webhook dispatcher: sends the outbox's deliveries (see
//! `rein_store::webhook`), signed, at least once, never on a run's path.
//!
//! One pass ([`Dispatcher::route`], then [`Dispatcher::claim`] and
//! [`Dispatcher::deliver`] for each claimed delivery):
//!
//! 1. routes each new outbox event to the configured webhooks that want it
//!    (topic, `outcomes`, and not older than the webhook's `max_age`);
//! 2. claims the due deliveries, each until its POST's timeout and a
//!    margin have passed, so that no other dispatcher sends it meanwhile
//!    and a dispatcher that died mid-send leaves it due again (at least
//!    once);
//! 3. POSTs each one: the body as recorded, `Rein-Signature`,
//!    `Rein-Event-Id`, `Rein-Event-Type`; redirects are not followed (a 3xx
//!    is a failure: a signed body is never re-sent somewhere the config
//!    does not name); the per-webhook `timeout` bounds the whole exchange;
//! 4. records the answer: a 2xx delivers it; anything else reschedules it
//!    with full jitter ([`DeliverySchedule`]) or gives it up once the next
//!    attempt would pass `max_age`.
//!
//! # Why it never slows a run
//!
//! A run's only part in this is the outbox row its event commit writes.
//! The dispatcher runs on its own task (in `rein serve`, one per store,
//! under a singleton), each POST on a task of its own, so a receiver that
//! hangs holds one delivery's task until its timeout, not the dispatcher,
//! and never a run.
//!
//! Time comes from the engine's [`Timer`] (waits, timeouts, and the wall
//! time stamped and signed) and jitter from a seedable RNG, so a test
//! drives both.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use rand::SeedableRng;
use rand::rngs::StdRng;
use rein_core::Timestamp;
use rein_core::registry::WebhookSpec;
use rein_core::webhook::{DeliverySchedule, EVENT_ID_HEADER, SIGNATURE_HEADER, signature_header};
use rein_store::{AttemptNext, DueDelivery, Store, StoreError, WebhookAttempt, WebhookDelivery};

use crate::clock::Timer;

/// How long past a POST's timeout its claim lasts: time to record the
/// answer before another dispatcher may take the delivery again.
pub const CLAIM_MARGIN: Duration = Duration::from_secs(30);

/// How long a delivery log outlives the longest `max_age`: what was
/// delivered or given up stays listed for a week, then
/// [`Dispatcher::prune`] deletes it with its event.
pub const KEPT_PAST_MAX_AGE: Duration = Duration::from_secs(7 * 86_400);

/// The header naming the event's topic (also `type` in the body).
pub const EVENT_TYPE_HEADER: &str = "Rein-Event-Type";

/// Why a dispatcher could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// A webhook's `secret_env` is not set (or empty) in this process.
    #[error("webhook {webhook}: its secret_env {var} is not set; deliveries could not be signed")]
    SecretNotSet {
        /// The webhook.
        webhook: String,
        /// The variable.
        var: String,
    },
    /// The HTTP client could not be built (TLS roots).
    #[error("webhooks: cannot build the HTTP client: {0}")]
    Client(String),
}

/// A webhook and its signing secret.
struct Hook {
    spec: WebhookSpec,
    secret: Vec<u8>,
}

/// Sends webhook deliveries from the store's outbox. Cheap to clone (one
/// shared state), so each delivery can run on a task of its own.
#[derive(Clone)]
pub struct Dispatcher {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn Store>,
    hooks: BTreeMap<String, Hook>,
    client: reqwest::Client,
    clock: Arc<dyn Timer>,
    rng: Mutex<StdRng>,
}

impl std::fmt::Debug for Dispatcher {
    // By hand: never the secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("webhooks", &self.inner.hooks.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Dispatcher {
    /// A dispatcher of `webhooks` over `store`, reading each secret with
    /// `env` (the process environment in `rein serve`) and time from
    /// `clock`.
    ///
    /// # Errors
    ///
    /// [`WebhookError::SecretNotSet`] for a webhook whose secret is not
    /// set: refused at start rather than found at the first event.
    pub fn new(
        store: Arc<dyn Store>,
        webhooks: &BTreeMap<String, WebhookSpec>,
        env: impl Fn(&str) -> Option<String>,
        clock: Arc<dyn Timer>,
    ) -> Result<Dispatcher, WebhookError> {
        let mut hooks = BTreeMap::new();
        for (name, spec) in webhooks {
            let secret = env(&spec.secret_env)
                .filter(|value| !value.is_empty())
                .ok_or_else(|| WebhookError::SecretNotSet {
                    webhook: name.clone(),
                    var: spec.secret_env.clone(),
                })?;
            hooks.insert(
                name.clone(),
                Hook {
                    spec: spec.clone(),
                    secret: secret.into_bytes(),
                },
            );
        }
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("rein/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| WebhookError::Client(e.to_string()))?;
        Ok(Dispatcher {
            inner: Arc::new(Inner {
                store,
                hooks,
                client,
                clock,
                rng: Mutex::new(StdRng::from_os_rng()),
            }),
        })
    }

    /// The same dispatcher drawing its jitter from `seed` (tests), so a
    /// schedule reproduces.
    #[must_use]
    pub fn seeded(self, seed: u64) -> Dispatcher {
        if let Ok(mut rng) = self.inner.rng.lock() {
            *rng = StdRng::seed_from_u64(seed);
        }
        self
    }

    /// Whether any webhook is configured.
    pub fn is_empty(&self) -> bool {
        self.inner.hooks.is_empty()
    }

    fn now(&self) -> Timestamp {
        Timestamp::from_system_time(self.inner.clock.system_now())
    }

    /// Routes up to `limit` new outbox events to the webhooks that want
    /// them; returns how many events were routed.
    ///
    /// # Errors
    ///
    /// The store's; the events left unrouted are taken again next pass.
    pub async fn route(&self, limit: usize) -> Result<usize, StoreError> {
        let events = self.inner.store.unrouted_webhook_events(limit).await?;
        let now = self.now();
        for event in &events {
            let wanted: Vec<String> = self
                .inner
                .hooks
                .values()
                .filter(|hook| {
                    hook.spec.wants(event.topic, event.outcome)
                        && DeliverySchedule::new(hook.spec.max_age)
                            .is_live(event.created_at_ms, now)
                })
                .map(|hook| hook.spec.name.clone())
                .collect();
            self.inner
                .store
                .route_webhook_event(&event.event_id, &wanted, now)
                .await?;
        }
        Ok(events.len())
    }

    /// Deletes up to `limit` events, older than the longest `max_age` and
    /// [`KEPT_PAST_MAX_AGE`], whose deliveries are all over (delivered or
    /// given up); returns how many. Pending deliveries are never pruned.
    ///
    /// # Errors
    ///
    /// The store's.
    pub async fn prune(&self, limit: usize) -> Result<u64, StoreError> {
        let longest = self
            .inner
            .hooks
            .values()
            .map(|hook| hook.spec.max_age)
            .max()
            .unwrap_or_default();
        let before = self.now().saturating_sub(longest + KEPT_PAST_MAX_AGE);
        self.inner.store.prune_webhook_outbox(before, limit).await
    }

    /// Claims up to `limit` due deliveries, each until the longest
    /// webhook timeout and [`CLAIM_MARGIN`] have passed.
    ///
    /// # Errors
    ///
    /// The store's.
    pub async fn claim(&self, limit: usize) -> Result<Vec<DueDelivery>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let longest = self
            .inner
            .hooks
            .values()
            .map(|hook| hook.spec.timeout)
            .max()
            .unwrap_or_default();
        let now = self.now();
        let until = now.saturating_add(longest + CLAIM_MARGIN);
        self.inner
            .store
            .claim_webhook_deliveries(now, until, limit)
            .await
    }

    /// Sends one claimed delivery and records the attempt; returns the
    /// delivery as it then stands.
    ///
    /// # Errors
    ///
    /// The store's, when the attempt cannot be recorded: the claim runs
    /// out and the delivery is sent again (at least once).
    pub async fn deliver(&self, due: DueDelivery) -> Result<WebhookDelivery, StoreError> {
        let delivery = &due.delivery;
        let Some(hook) = self.inner.hooks.get(&delivery.webhook) else {
            // Its webhook left the config: nobody is left to send it to.
            return self
                .record(
                    delivery,
                    None,
                    Some("the webhook is no longer configured"),
                    AttemptNext::GiveUp,
                )
                .await;
        };
        let schedule = DeliverySchedule::new(hook.spec.max_age);
        if !schedule.is_live(delivery.created_at_ms, self.now()) {
            return self
                .record(
                    delivery,
                    None,
                    Some("older than the webhook's max_age"),
                    AttemptNext::GiveUp,
                )
                .await;
        }
        let (status, error) = self.post(hook, &due).await;
        let next = if error.is_none() {
            AttemptNext::Delivered
        } else {
            let failed = delivery.attempts.saturating_add(1);
            let now = self.now();
            let at = match self.inner.rng.lock() {
                Ok(mut rng) => {
                    schedule.next_attempt(failed, delivery.created_at_ms, now, &mut *rng)
                }
                // A poisoned RNG still has state; the delay need not be
                // random to be correct, only bounded.
                Err(poisoned) => schedule.next_attempt(
                    failed,
                    delivery.created_at_ms,
                    now,
                    &mut *poisoned.into_inner(),
                ),
            };
            at.map_or(AttemptNext::GiveUp, AttemptNext::RetryAt)
        };
        match (&error, next) {
            (None, _) => {
                tracing::debug!(webhook = %delivery.webhook, event = %delivery.event_id, "webhook delivered")
            }
            (Some(why), AttemptNext::GiveUp) => {
                tracing::warn!(webhook = %delivery.webhook, event = %delivery.event_id, attempts = delivery.attempts + 1, "webhook delivery given up: {why}")
            }
            (Some(why), _) => {
                tracing::info!(webhook = %delivery.webhook, event = %delivery.event_id, "webhook delivery failed, will retry: {why}")
            }
        }
        self.record(delivery, status, error.as_deref(), next).await
    }

    /// POSTs `due` to `hook`: the answer's status, and why it failed.
    async fn post(&self, hook: &Hook, due: &DueDelivery) -> (Option<u16>, Option<String>) {
        let t = self
            .inner
            .clock
            .system_now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        let signature = signature_header(&hook.secret, t, due.body.as_bytes());
        let request = self
            .inner
            .client
            .post(&hook.spec.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(SIGNATURE_HEADER, signature)
            .header(EVENT_ID_HEADER, &due.delivery.event_id)
            .header(EVENT_TYPE_HEADER, due.delivery.topic.as_str())
            .body(due.body.clone())
            .send();
        let clock: &dyn Timer = &*self.inner.clock;
        match clock.timeout(hook.spec.timeout, request).await {
            Err(_) => (
                None,
                Some(format!(
                    "no answer within {} ms",
                    hook.spec.timeout.as_millis()
                )),
            ),
            // Without the URL: a query string may carry a token.
            Ok(Err(e)) => (None, Some(e.without_url().to_string())),
            Ok(Ok(answer)) => {
                let status = answer.status();
                let error = if status.is_success() {
                    None
                } else if status.is_redirection() {
                    Some(format!("answered {status}: redirects are not followed"))
                } else {
                    Some(format!("answered {status}"))
                };
                (Some(status.as_u16()), error)
            }
        }
    }

    async fn record(
        &self,
        delivery: &WebhookDelivery,
        status: Option<u16>,
        error: Option<&str>,
        next: AttemptNext,
    ) -> Result<WebhookDelivery, StoreError> {
        self.inner
            .store
            .record_webhook_attempt(&WebhookAttempt {
                webhook: delivery.webhook.clone(),
                event_id: delivery.event_id.clone(),
                at_ms: self.now(),
                status,
                error: error.map(str::to_owned),
                next,
            })
            .await
    }
}
