//! What the engine teaches the process's redactor
//! ([`rein_core::redact::register`]) from the parts it is given, so an
//! embedder that builds a provider or a tool target by hand — without the
//! config loader — is protected too.
//!
//! | part | taught when | what |
//! | --- | --- | --- |
//! | [`OpenAiProvider::new`](crate::provider::OpenAiProvider::new), [`AnthropicProvider::new`](crate::provider::AnthropicProvider::new) | built | the key; the base URL's userinfo |
//! | [`HttpTarget`](crate::tool::http::HttpTarget) | every request (a read lock once known) | credential headers; userinfo of its URLs |
//! | [`CommandTarget`](crate::tool::command::CommandTarget) | every attempt | credential-named `env` values |
//!
//! A value too short to be redacted is skipped here: the config loader
//! reports it, naming its field.

use rein_core::redact::{self, Candidate, Secrets};

/// Registers every candidate long enough to be redacted.
pub(crate) fn teach(candidates: impl IntoIterator<Item = Candidate>) {
    let mut secrets = Secrets::new();
    for candidate in candidates {
        let _ = secrets.insert(&candidate.value);
    }
    redact::register(&secrets);
}

/// Registers a provider's key and the userinfo of its base URL.
pub(crate) fn teach_provider(api_key: Option<&str>, base_url: &str) {
    let key = api_key.map(|k| Candidate {
        value: k.to_owned(),
        warn_if_short: true,
    });
    teach(key.into_iter().chain(redact::url_secrets(base_url, &[])));
}
