//! The exporter's HTTP client: the process's reqwest client, driven on
//! the tokio runtime.
//!
//! # Why a wrapper
//!
//! The SDK's batch processor exports on its own thread, outside any tokio
//! runtime, where a reqwest future cannot run (it needs the runtime's
//! reactor). Its alternative, the blocking client, starts a runtime of
//! its own per process and cannot be built or dropped inside async code.
//! So each export is spawned onto rein's runtime and awaited from the
//! processor's thread: one connection pool, one runtime.

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// Sends the exporter's requests with `client` on `runtime`.
#[derive(Debug, Clone)]
pub(super) struct OnRuntime {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl OnRuntime {
    pub(super) fn new(client: reqwest::Client, runtime: tokio::runtime::Handle) -> Self {
        OnRuntime { client, runtime }
    }
}

#[async_trait::async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        self.runtime
            .spawn(async move { client.send_bytes(request).await })
            .await?
    }
}
