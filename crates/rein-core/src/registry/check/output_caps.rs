//! Every model an agent or a binding may call has an output cap.
//!
//! rein never asks a model for more output than it accepts (a provider
//! answers that with a 400), so a model that rein's table of well-known
//! models does not know needs `max_output_tokens` in its provider's
//! config. A scripted provider replays recorded turns and has no cap to
//! respect: its models need none.

use std::collections::BTreeSet;
use std::path::Path;

use super::{Checker, Merged};
use crate::output_cap::known_output_cap;
use crate::registry::ModelLink;
use crate::registry::config::ProviderKindName;

impl<'a> Checker<'a> {
    /// Reports each link of `roles` (`(field, links)`, the field under `p`
    /// a link is written at) whose model has no output cap.
    pub(super) fn output_caps(
        &mut self,
        merged: &Merged<'a>,
        file: &Path,
        p: &str,
        roles: [(&str, Vec<&ModelLink>); 3],
    ) {
        let mut seen = BTreeSet::new();
        for (field, links) in roles {
            for link in links {
                if !seen.insert(link) {
                    continue;
                }
                let Some(entry) = merged.providers.get(link.provider.as_str()) else {
                    continue;
                };
                if matches!(entry.config.kind, Some(ProviderKindName::Openai)) {
                    self.output_field(entry, file, &format!("{p}.{field}"), link);
                }
                let networked = !matches!(entry.config.kind, Some(ProviderKindName::Scripted));
                if !networked
                    || entry.config.max_output_tokens.contains_key(&link.model)
                    || known_output_cap(&link.model).is_some()
                {
                    continue;
                }
                self.report(
                    file,
                    format!("{p}.{field}"),
                    format!(
                        "model `{}` has no known output cap: set the most output tokens it may produce in one answer in [providers.{}.max_output_tokens] (`\"{}\" = N`); rein never asks for more",
                        link.model, link.provider, link.model
                    ),
                );
            }
        }
    }
}
