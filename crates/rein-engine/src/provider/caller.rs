//! The provider of an agent whose loop is its caller's.

use std::time::Duration;

use async_trait::async_trait;
use rein_core::{Category, Failure};

use super::{ModelProvider, ModelRequest, ModelResponse};

/// The provider of an agent driven by a caller's own loop
/// ([`Engine::begin`](crate::run::Engine::begin)): the caller asks its
/// model itself, so rein has none to ask. Asked anyway (the agent run by
/// [`Engine::run`](crate::run::Engine::run) by mistake), it fails the turn
/// with a message that says so instead of inventing one.
#[derive(Debug, Clone, Copy, Default)]
pub struct CallerDriven;

#[async_trait]
impl ModelProvider for CallerDriven {
    fn name(&self) -> &str {
        "caller"
    }

    async fn complete(
        &self,
        _request: &ModelRequest,
        _allowance: Duration,
    ) -> Result<ModelResponse, Failure> {
        Err(
            Failure::new("caller", Category::InvalidArguments).with_human_message(
                "this agent's loop is its caller's (Engine::begin): rein has no model to ask",
            ),
        )
    }
}
