//! `[providers.NAME]`: kinds, endpoints, keys, limits and stream timeouts.

use std::collections::BTreeMap;
use std::num::{NonZeroU32, NonZeroU64};
use std::path::Path;
use std::time::Duration;

use super::{Checker, Merged, is_env_name, resolve_relative};
use crate::deadline::Cost;
use crate::registry::config::{ProviderConfig, ProviderKindName, StreamConfig};
use crate::registry::constants::DEFAULT_PROVIDER_TIMEOUT;
use crate::registry::constants::{DEFAULT_STREAM_FIRST_BYTE_TIMEOUT, DEFAULT_STREAM_IDLE_TIMEOUT};
use crate::registry::spec::{Price, ProviderKind, ProviderSpec, StreamSpec, TokenLimit};

impl<'a> Checker<'a> {
    pub(super) fn providers(&mut self, merged: &Merged<'a>) -> BTreeMap<String, ProviderSpec> {
        let mut out = BTreeMap::new();
        for (name, entry) in &merged.providers {
            if let Some(spec) = self.provider(entry.file, name, entry.config) {
                out.insert((*name).to_owned(), spec);
            }
        }
        out
    }

    pub(super) fn provider(
        &mut self,
        file: &Path,
        name: &str,
        c: &ProviderConfig,
    ) -> Option<ProviderSpec> {
        let p = format!("providers.{name}");
        self.name(file, &p, name);
        let kind = match c.kind {
            None => {
                self.report(
                    file,
                    format!("{p}.kind"),
                    "is required: openai, anthropic or scripted",
                );
                None
            }
            Some(ProviderKindName::Openai) => self
                .network_provider(file, &p, "openai", "https://api.openai.com/v1", c)
                .map(|(base_url, api_key_env, timeout)| ProviderKind::OpenAi {
                    base_url,
                    api_key_env,
                    timeout,
                }),
            Some(ProviderKindName::Anthropic) => self
                .network_provider(file, &p, "anthropic", "https://api.anthropic.com/v1", c)
                .map(|(base_url, api_key_env, timeout)| ProviderKind::Anthropic {
                    base_url,
                    api_key_env,
                    timeout,
                }),
            Some(ProviderKindName::Scripted) => {
                for (present, field) in [
                    (c.base_url.is_some(), "base_url"),
                    (c.api_key_env.is_some(), "api_key_env"),
                    (c.timeout.is_some(), "timeout"),
                ] {
                    if present {
                        self.report(
                            file,
                            format!("{p}.{field}"),
                            format!("is only for openai and anthropic providers; remove {field}"),
                        );
                    }
                }
                if c.stream.is_some() {
                    self.report(
                        file,
                        format!("{p}.stream"),
                        "is only for openai and anthropic providers: a scripted provider replays \
                         recorded turns and has no stream to time; remove [stream]",
                    );
                }
                match &c.script {
                    Some(script) if !script.as_os_str().is_empty() => {
                        Some(ProviderKind::Scripted {
                            script: resolve_relative(file, script),
                        })
                    }
                    _ => {
                        self.report(
                            file,
                            format!("{p}.script"),
                            "is required for a scripted provider: a path relative to this file",
                        );
                        None
                    }
                }
            }
        };
        // Allowed on every kind, scripted included: the limit is rein's own,
        // not the transport's, so a scripted config can rehearse the limits
        // its production twin will run under.
        let max_concurrency = match c.max_concurrency {
            None => None,
            Some(n) => {
                let limit = NonZeroU32::new(n);
                if limit.is_none() {
                    self.report(
                        file,
                        format!("{p}.max_concurrency"),
                        "must be greater than zero; leave it out for no limit",
                    );
                }
                limit
            }
        };
        let tokens = self.provider_tokens(file, &p, c, max_concurrency);
        let stream = match (&c.stream, kind.as_ref().and_then(ProviderKind::timeout)) {
            // An HTTP provider (one with a timeout) streams.
            (Some(stream), Some(_)) => self.stream(file, &p, stream),
            _ => None,
        };
        let mut prices = BTreeMap::new();
        for (model, price) in &c.prices {
            let prefix = format!("{p}.prices.{model}");
            let input = Cost::from_usd("input_per_mtok_usd", price.input_per_mtok_usd);
            let output = Cost::from_usd("output_per_mtok_usd", price.output_per_mtok_usd);
            match (input, output) {
                (Ok(input_per_mtok), Ok(output_per_mtok)) => {
                    prices.insert(
                        model.clone(),
                        Price {
                            input_per_mtok,
                            output_per_mtok,
                        },
                    );
                }
                (input, output) => {
                    for err in [input.err(), output.err()].into_iter().flatten() {
                        self.config_error(file, &prefix, &err);
                    }
                }
            }
        }
        let mut output_caps = BTreeMap::new();
        for (model, cap) in &c.max_output_tokens {
            match NonZeroU32::new(*cap) {
                Some(cap) => {
                    output_caps.insert(model.clone(), cap);
                }
                None => self.report(
                    file,
                    format!("{p}.max_output_tokens.{model}"),
                    "must be at least 1: the most output tokens the model may produce in one answer",
                ),
            }
        }
        if !c.output_tokens_field.is_empty()
            && !matches!(c.kind, Some(ProviderKindName::Openai) | None)
        {
            self.report(
                file,
                format!("{p}.output_tokens_field"),
                "is only for openai providers: the Anthropic Messages API takes its output \
                 ceiling in max_tokens alone, and a scripted provider sends nothing; remove \
                 output_tokens_field",
            );
        }
        if c.continuation.is_some() && !matches!(c.kind, Some(ProviderKindName::Openai) | None) {
            self.report(
                file,
                format!("{p}.continuation"),
                "is only for openai providers: the Anthropic Messages API continues an \
                 assistant prefix natively, and a scripted provider replays recorded turns; \
                 remove continuation",
            );
        }
        Some(ProviderSpec {
            name: name.to_owned(),
            kind: kind?,
            prices,
            output_caps,
            output_fields: c.output_tokens_field.clone(),
            continuation: c.continuation,
            max_concurrency,
            tokens,
            stream,
            source: file.to_path_buf(),
        })
    }

    /// A provider's token bucket (`tokens_per_minute`, `token_burst`),
    /// refused where the provider's governor would refuse it.
    pub(super) fn provider_tokens(
        &mut self,
        file: &Path,
        p: &str,
        c: &ProviderConfig,
        max_concurrency: Option<NonZeroU32>,
    ) -> Option<TokenLimit> {
        let per_minute = match (c.tokens_per_minute, c.token_burst) {
            (None, None) => return None,
            (None, Some(_)) => {
                self.report(
                    file,
                    format!("{p}.token_burst"),
                    "has no effect without tokens_per_minute: set both, or leave both out",
                );
                return None;
            }
            (Some(tpm), _) => match NonZeroU64::new(tpm) {
                Some(tpm) => tpm,
                None => {
                    self.report(
                        file,
                        format!("{p}.tokens_per_minute"),
                        "must be greater than zero; leave it out for no token bucket",
                    );
                    return None;
                }
            },
        };
        let burst = match c.token_burst.map(NonZeroU64::new) {
            None => per_minute,
            Some(Some(burst)) => burst,
            Some(None) => {
                self.report(
                    file,
                    format!("{p}.token_burst"),
                    "must be greater than zero; leave it out for a bucket of tokens_per_minute",
                );
                return None;
            }
        };
        let tokens = TokenLimit::new(per_minute, burst);
        let config = crate::governor::GovernorConfig::provider(max_concurrency, Some(tokens));
        if let Err(e) = crate::governor::Governor::new(config) {
            let field = if e.field().contains("token_burst") {
                "token_burst"
            } else {
                "tokens_per_minute"
            };
            self.report(file, format!("{p}.{field}"), e.to_string());
            return None;
        }
        Some(tokens)
    }

    /// The settings shared by providers that call an HTTP API (`openai`,
    /// `anthropic`): `(base_url, api_key_env, timeout)` when they pass.
    pub(super) fn network_provider(
        &mut self,
        file: &Path,
        p: &str,
        kind: &str,
        example_url: &str,
        c: &ProviderConfig,
    ) -> Option<(String, Option<String>, Duration)> {
        if c.script.is_some() {
            self.report(
                file,
                format!("{p}.script"),
                "is only for scripted providers; remove script",
            );
        }
        let base_url = match &c.base_url {
            None => {
                self.report(
                    file,
                    format!("{p}.base_url"),
                    format!("is required for an {kind} provider, e.g. \"{example_url}\""),
                );
                None
            }
            Some(url) => self.url(file, &format!("{p}.base_url"), url),
        };
        if let Some(var) = c.api_key_env.as_deref().filter(|v| !is_env_name(v)) {
            self.report(
                file,
                format!("{p}.api_key_env"),
                format!(
                    "must be the name of an environment variable (letters, digits, _), but it is `{var}`"
                ),
            );
        }
        let timeout = c.timeout.unwrap_or(DEFAULT_PROVIDER_TIMEOUT);
        if timeout.is_zero() {
            self.report(file, format!("{p}.timeout"), "must be greater than zero");
        }
        base_url.map(|base_url| (base_url, c.api_key_env.clone(), timeout))
    }

    /// `[providers.NAME.stream]`: each timeout positive. Neither is
    /// bounded by the provider's `timeout`: that bounds a non-streamed
    /// call, while a stream is bounded by its progress (these limits) and
    /// the caller's deadline, so a long healthy answer is not cut
    /// (issue 35, item 2).
    pub(super) fn stream(&mut self, file: &Path, p: &str, c: &StreamConfig) -> Option<StreamSpec> {
        let mut ok = true;
        let mut limit = |value: Option<Duration>, default: Duration, field: &str| {
            let f = format!("{p}.stream.{field}");
            let d = value.unwrap_or(default);
            if d.is_zero() {
                self.report(file, f, "must be greater than zero");
                ok = false;
            }
            d
        };
        let first_byte_timeout = limit(
            c.first_byte_timeout,
            DEFAULT_STREAM_FIRST_BYTE_TIMEOUT,
            "first_byte_timeout",
        );
        let idle_timeout = limit(c.idle_timeout, DEFAULT_STREAM_IDLE_TIMEOUT, "idle_timeout");
        ok.then_some(StreamSpec {
            first_byte_timeout,
            idle_timeout,
        })
    }
}
