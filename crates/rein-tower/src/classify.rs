//! Turning a service's answer into rein's error contract.

use std::time::SystemTime;

use rein_core::Failure;
use rein_core::failure::{Category, Effect};
use tower::BoxError;

use crate::error::Refused;

/// Judges an answer: `None` for a success, else the classified
/// [`Failure`] the retry decision, the breaker and the governor read.
pub trait Classify<Res>: Clone + Send + Sync + 'static {
    /// The failure `outcome` is, or `None`.
    fn classify(&self, outcome: &Result<Res, BoxError>) -> Option<Failure>;
}

/// Classifies HTTP answers as rein's tool adapters do
/// ([`Failure::from_http_status`]: 429 rate limited, 503 a refusal at the
/// door, 500/502/504 maybe applied, `Retry-After` honoured), and errors
/// from the client as transient with an unknown effect: a generic client
/// error does not say whether the request left. A [`Refused`] from a
/// layer below keeps its own classification.
#[derive(Debug, Clone)]
pub struct HttpStatus {
    target: String,
}

impl HttpStatus {
    /// Classifies answers from `target` (named in failures).
    pub fn new(target: impl Into<String>) -> HttpStatus {
        HttpStatus {
            target: target.into(),
        }
    }
}

impl<B> Classify<http::Response<B>> for HttpStatus {
    fn classify(&self, outcome: &Result<http::Response<B>, BoxError>) -> Option<Failure> {
        match outcome {
            Ok(response) => {
                let retry_after = response
                    .headers()
                    .get(http::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok());
                Failure::from_http_status(
                    &self.target,
                    response.status().as_u16(),
                    retry_after,
                    SystemTime::now(),
                )
            }
            Err(error) => Some(match error.downcast_ref::<Refused>() {
                Some(refused) => refused.0.clone(),
                None => Failure::new(&self.target, Category::Transient)
                    .with_effect(Effect::MaybeApplied)
                    .with_human_message(format!("{} failed: {error}", self.target)),
            }),
        }
    }
}
