//! `[models.ALIAS]`: model bindings, their fallback chains and same-model retries.

use std::collections::BTreeMap;
use std::path::Path;

use humantime_serde::re::humantime::format_duration;

use super::{Checker, Merged};
use crate::registry::config::{BindingKind, ModelBindingConfig, ModelLinkConfig};
use crate::registry::spec::{ModelBindingSpec, ModelLink};
use crate::retry::{
    DEFAULT_RETRY_AFTER_MAX, DEFAULT_RETRY_BEFORE_FALLBACK, MAX_RETRY_AFTER_MAX,
    MAX_RETRY_BEFORE_FALLBACK, SameModelRetry,
};

impl<'a> Checker<'a> {
    pub(super) fn models(&mut self, merged: &Merged<'a>) -> BTreeMap<String, ModelBindingSpec> {
        let mut out = BTreeMap::new();
        for (name, entry) in &merged.models {
            if let Some(spec) = self.model_binding(merged, entry.file, name, entry.config) {
                out.insert((*name).to_owned(), spec);
            }
        }
        out
    }

    pub(super) fn model_binding(
        &mut self,
        merged: &Merged<'a>,
        file: &Path,
        name: &str,
        c: &ModelBindingConfig,
    ) -> Option<ModelBindingSpec> {
        let p = format!("models.{name}");
        self.name(file, &p, name);
        let provider = match c.provider.as_deref() {
            None => {
                self.report(
                    file,
                    format!("{p}.provider"),
                    "is required: the provider of the primary model",
                );
                None
            }
            Some(provider) => self.provider_ref(merged, file, &format!("{p}.provider"), provider),
        };
        let model = self.required_text(file, &p, "model", c.model.as_deref());
        let primary = provider.zip(model).map(|(p, m)| ModelLink::new(p, m));
        let (fallbacks, context_fallbacks) = self.fallback_lists(
            merged,
            file,
            &p,
            primary.as_ref(),
            &c.fallbacks,
            &c.context_fallbacks,
        );
        let kind = c.kind.unwrap_or_default();
        // An embedding model writes no output: it has no cap to respect.
        if kind == BindingKind::Chat {
            self.output_caps(
                merged,
                file,
                &p,
                [
                    ("model", primary.iter().collect()),
                    ("fallbacks", fallbacks.iter().flatten().collect()),
                    (
                        "context_fallbacks",
                        context_fallbacks.iter().flatten().collect(),
                    ),
                ],
            );
        }
        let deadline = self.positive(
            file,
            &format!("{p}.deadline"),
            c.deadline,
            crate::registry::DEFAULT_GATEWAY_DEADLINE,
        );
        if kind == BindingKind::Embedding && c.recover_streams.is_some() {
            self.report(
                file,
                format!("{p}.recover_streams"),
                "is only for chat bindings: an embedding is never streamed; remove recover_streams",
            );
        }
        let same_model = self.same_model_retry(file, &p, c)?;
        Some(ModelBindingSpec {
            name: name.to_owned(),
            kind,
            primary: primary?,
            fallbacks: fallbacks?,
            context_fallbacks: context_fallbacks?,
            same_model,
            deadline,
            recover_streams: c.recover_streams.unwrap_or(true),
            source: file.to_path_buf(),
        })
    }

    /// A binding's same-model retries before fallback (`p` is its table
    /// path), each field in range or reported.
    pub(super) fn same_model_retry(
        &mut self,
        file: &Path,
        p: &str,
        c: &ModelBindingConfig,
    ) -> Option<SameModelRetry> {
        let mut ok = true;
        let retries = c
            .retry_before_fallback
            .unwrap_or(DEFAULT_RETRY_BEFORE_FALLBACK);
        if retries > MAX_RETRY_BEFORE_FALLBACK {
            self.report(
                file,
                format!("{p}.retry_before_fallback"),
                format!(
                    "must be at most {MAX_RETRY_BEFORE_FALLBACK} (more turns a fallback chain into \
                     a retry loop), but it is {retries}"
                ),
            );
            ok = false;
        }
        let retry_after_max = c.retry_after_max.unwrap_or(DEFAULT_RETRY_AFTER_MAX);
        if retry_after_max > MAX_RETRY_AFTER_MAX {
            self.report(
                file,
                format!("{p}.retry_after_max"),
                format!(
                    "must be at most {} (a longer wait is better spent on the fallback), but it \
                     is {}",
                    format_duration(MAX_RETRY_AFTER_MAX),
                    format_duration(retry_after_max)
                ),
            );
            ok = false;
        }
        ok.then_some(SameModelRetry {
            retries,
            retry_after_max,
            retry_timeouts: c.retry_timeouts.unwrap_or(false),
        })
    }

    /// The `fallbacks` and `context_fallbacks` of a binding or an agent
    /// (`p` is its table path), checked against its `primary` when that
    /// passed.
    pub(super) fn fallback_lists(
        &mut self,
        merged: &Merged<'a>,
        file: &Path,
        p: &str,
        primary: Option<&ModelLink>,
        fallbacks: &[ModelLinkConfig],
        context_fallbacks: &[ModelLinkConfig],
    ) -> (Option<Vec<ModelLink>>, Option<Vec<ModelLink>>) {
        let fallbacks = self.links(
            merged,
            file,
            &format!("{p}.fallbacks"),
            primary,
            fallbacks,
            "a fallback must be another model, or it would only retry the one that just failed \
             (retries are the retry policy's job)",
        );
        let context_fallbacks = self.links(
            merged,
            file,
            &format!("{p}.context_fallbacks"),
            primary,
            context_fallbacks,
            "on context_overflow the same model is never retried: the prompt would not fit again; \
             name a model with a larger context window",
        );
        (fallbacks, context_fallbacks)
    }

    /// One list of links under `f` (`models.smart.fallbacks`), each
    /// reported at `f[i]`: its provider and model required and the provider
    /// known; no link equal to `primary` (`why` says why not) or to an
    /// earlier link of the list.
    pub(super) fn links(
        &mut self,
        merged: &Merged<'a>,
        file: &Path,
        f: &str,
        primary: Option<&ModelLink>,
        links: &[ModelLinkConfig],
        why: &str,
    ) -> Option<Vec<ModelLink>> {
        let mut ok = true;
        // Each link that passed, with its index in the list as written.
        let mut out: Vec<(usize, ModelLink)> = Vec::with_capacity(links.len());
        for (i, link) in links.iter().enumerate() {
            let at = format!("{f}[{i}]");
            let provider = match link.provider.as_deref() {
                None => {
                    self.report(
                        file,
                        format!("{at}.provider"),
                        "is required: the provider of this model",
                    );
                    None
                }
                Some(provider) => {
                    self.provider_ref(merged, file, &format!("{at}.provider"), provider)
                }
            };
            let model = self.required_text(file, &at, "model", link.model.as_deref());
            let Some(link) = provider.zip(model).map(|(p, m)| ModelLink::new(p, m)) else {
                ok = false;
                continue;
            };
            if primary == Some(&link) {
                self.report(
                    file,
                    at,
                    format!(
                        "is the primary model (`{}` of provider `{}`); {why}",
                        link.model, link.provider
                    ),
                );
                ok = false;
            } else if let Some((j, _)) = out.iter().find(|(_, earlier)| *earlier == link) {
                self.report(
                    file,
                    at,
                    format!(
                        "repeats {f}[{j}] (`{}` of provider `{}`); the same model would be tried twice",
                        link.model, link.provider
                    ),
                );
                ok = false;
            }
            out.push((i, link));
        }
        ok.then(|| out.into_iter().map(|(_, link)| link).collect())
    }

    /// A reference to a provider at `field`, if the provider is defined.
    pub(super) fn provider_ref(
        &mut self,
        merged: &Merged<'a>,
        file: &Path,
        field: &str,
        provider: &str,
    ) -> Option<String> {
        if merged.has("providers", provider) {
            return Some(provider.to_owned());
        }
        self.report(
            file,
            field,
            format!("names `{provider}`, which is not a provider; define [providers.{provider}]"),
        );
        None
    }
}
