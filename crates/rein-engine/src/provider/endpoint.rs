//! What every HTTP model provider holds and does alike: its name, base
//! URL, key, timeout, client, stream settings and clock, and the posting
//! of one JSON body under the deadline header.
//!
//! # Why one type
//!
//! The OpenAI and Anthropic providers differ only in their wire format
//! (the path, how the key is sent, the body and the answer); where the key
//! is taught to the redactor, how it is kept out of `Debug`, and how a
//! call's allowance is capped must not drift apart between them.

use std::sync::Arc;
use std::time::Duration;

use rein_core::Failure;
use rein_core::deadline::DEADLINE_HEADER;

use super::http::{self, post_json};
use super::sse::{self, Decoder, Opening};
use super::stream::StreamSettings;
use super::{StreamLimits, TurnStream};
use crate::{SystemClock, Timer};

/// How a provider's API takes the key.
#[derive(Clone, Copy, Debug)]
pub(super) enum KeyHeader {
    /// `Authorization: Bearer <key>`.
    Bearer,
    /// The key as the whole value of this header.
    Named(&'static str),
}

/// The wire facts of one API that are not in the body.
#[derive(Clone, Copy, Debug)]
pub(super) struct Api {
    /// The path below the base URL, e.g. `/chat/completions`.
    pub(super) path: &'static str,
    /// How the key is sent.
    pub(super) key: KeyHeader,
    /// Headers every request carries, e.g. the API version.
    pub(super) headers: &'static [(&'static str, &'static str)],
}

/// One HTTP model endpoint: a provider's settings, without its wire format.
#[derive(Clone)]
pub(super) struct Endpoint {
    pub(super) name: String,
    base_url: String,
    /// `base_url` and the API's path, parsed once here rather than on
    /// every call; `None` when it does not parse, and each post then
    /// reports that as reqwest does.
    url: Option<reqwest::Url>,
    api_key: Option<String>,
    timeout: Duration,
    client: reqwest::Client,
    api: Api,
    pub(super) streaming: Option<StreamSettings>,
    pub(super) key_env: Option<String>,
    /// Times the limits and dates `Retry-After`.
    pub(super) clock: Arc<dyn Timer>,
}

impl Endpoint {
    /// An endpoint named `name` at `base_url`, speaking `api`.
    pub(super) fn new(
        name: &str,
        base_url: &str,
        api_key: Option<String>,
        timeout: Duration,
        client: reqwest::Client,
        api: Api,
    ) -> Self {
        // The key is taught to the redactor here, where it enters rein,
        // so no error that echoes it shows it (crate::secrets).
        crate::secrets::teach_provider(api_key.as_deref(), base_url);
        let base_url = base_url.trim_end_matches('/').to_owned();
        let url = reqwest::Url::parse(&format!("{base_url}{}", api.path)).ok();
        Endpoint {
            name: name.to_owned(),
            base_url,
            url,
            api_key,
            timeout,
            client,
            api,
            streaming: None,
            key_env: None,
            clock: Arc::new(SystemClock::new()),
        }
    }

    /// The fields of a provider's `Debug`, under the provider's type name:
    /// the key is never printed, and the base URL is redacted.
    pub(super) fn debug_struct<'a, 'b>(
        &self,
        f: &'a mut std::fmt::Formatter<'b>,
        type_name: &str,
    ) -> std::fmt::DebugStruct<'a, 'b> {
        let mut d = f.debug_struct(type_name);
        d.field("name", &self.name)
            .field("base_url", &rein_core::redact::text(&self.base_url))
            .field(
                "api_key",
                &self.api_key.as_ref().map(|_| rein_core::redact::REDACTED),
            )
            .field("key_env", &self.key_env)
            .field("timeout", &self.timeout)
            .field("streaming", &self.streaming);
        d
    }

    fn post(&self, path: &str, body: Vec<u8>, allowance: Duration) -> reqwest::RequestBuilder {
        let builder = match self.url.as_ref().filter(|_| path == self.api.path) {
            Some(url) => self.client.post(url.clone()),
            None => self.client.post(format!("{}{path}", self.base_url)),
        };
        let mut builder = builder.header(DEADLINE_HEADER, allowance.as_millis().to_string());
        // The model call's span, when traces are on.
        builder = crate::telemetry::inject(builder);
        for (name, value) in self.api.headers {
            builder = builder.header(*name, *value);
        }
        builder = builder
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        match (&self.api_key, self.api.key) {
            (Some(key), KeyHeader::Bearer) => builder.bearer_auth(key),
            (Some(key), KeyHeader::Named(header)) => builder.header(header, key),
            (None, _) => builder,
        }
    }

    /// Posts one non-streamed `body` within the run's `allowance` capped by
    /// the timeout, and returns the answer's text.
    ///
    /// # Errors
    ///
    /// `budget_exhausted` when no time is left (no call is made), a
    /// transport failure, or the classified error answer.
    pub(super) async fn post_json(
        &self,
        body: Vec<u8>,
        allowance: Duration,
    ) -> Result<String, Failure> {
        self.post_json_at(self.api.path, body, allowance).await
    }

    /// [`Endpoint::post_json`] to another `path` of the same API (an
    /// OpenAI-compatible provider's `/embeddings`).
    ///
    /// # Errors
    ///
    /// As [`Endpoint::post_json`].
    pub(super) async fn post_json_at(
        &self,
        path: &str,
        body: Vec<u8>,
        allowance: Duration,
    ) -> Result<String, Failure> {
        let allowance = http::allowance(&self.name, allowance, self.timeout)?;
        post_json(
            &self.name,
            self.post(path, body, allowance),
            allowance,
            self.clock.as_ref(),
        )
        .await
    }

    /// Posts a streaming `body` and reads its events with `decoder`, under
    /// `limits`.
    ///
    /// # Why the timeout does not cap a stream
    ///
    /// The provider's `timeout` bounds a call that shows no progress until
    /// it ends. A stream shows its progress: it is bounded by its
    /// first-byte and idle limits and by the caller's deadline (the
    /// allowance), so a long healthy answer still flowing at the timeout
    /// is not cut, and the provider not blamed for it (issue 35, item 2).
    ///
    /// # Errors
    ///
    /// As [`sse::open`], and `budget_exhausted` when no time is left.
    pub(super) async fn open_stream<D: Decoder>(
        &self,
        body: Vec<u8>,
        limits: StreamLimits,
        decoder: D,
    ) -> Result<TurnStream, Failure> {
        let allowance = http::allowance(&self.name, limits.allowance, Duration::MAX)?;
        let request_bytes = body.len();
        sse::open(Opening {
            clock: self.clock.clone(),
            name: &self.name,
            request: self.post(self.api.path, body, allowance),
            request_bytes,
            limits: StreamLimits {
                allowance,
                ..limits
            },
            decoder,
        })
        .await
    }
}
