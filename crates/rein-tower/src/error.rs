//! What the layers answer instead of a response.

use rein_core::Failure;

/// A call a layer did not let through, or cut short: the breaker was open,
/// the deadline passed, the governor shed it. Boxed as the service's error
/// ([`tower::BoxError`]); downcast it to read the classified [`Failure`]
/// (category, whether it may be retried, the wait the layer asks for).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", .0.human_message())]
pub struct Refused(pub Failure);

impl Refused {
    /// The classified failure.
    pub fn failure(&self) -> &Failure {
        &self.0
    }
}

/// The [`Refused`] inside `error`, if the error is one.
pub fn refused(error: &tower::BoxError) -> Option<&Refused> {
    error.downcast_ref::<Refused>()
}
