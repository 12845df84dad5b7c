//! Every model an `openai` provider calls has a known output-ceiling
//! field.
//!
//! OpenAI's reasoning models refuse `max_tokens` and other compatible
//! servers know nothing else, so rein must not guess for a model whose
//! name looks like a reasoning model but is not in its table
//! ([`is_ambiguous`]): such a model needs `output_tokens_field` in its
//! provider's config. Any other unknown model is sent `max_tokens`.

use std::path::Path;

use super::Checker;
use super::Entry;
use crate::output_field::is_ambiguous;
use crate::registry::ModelLink;
use crate::registry::config::ProviderConfig;

impl Checker<'_> {
    /// Reports `link` (written at `field`) when its model's field would be
    /// a guess: ambiguous and not configured in `provider`.
    pub(super) fn output_field(
        &mut self,
        provider: &Entry<'_, ProviderConfig>,
        file: &Path,
        field: &str,
        link: &ModelLink,
    ) {
        if provider
            .config
            .output_tokens_field
            .contains_key(&link.model)
            || !is_ambiguous(&link.model)
        {
            return;
        }
        self.report(
            file,
            field.to_owned(),
            format!(
                "model `{}` is not in rein's table of well-known models, and its name looks like an OpenAI reasoning model, which refuses `max_tokens`: say which field it takes its output ceiling in, in [providers.{}.output_tokens_field] (`\"{}\" = \"max_completion_tokens\"` or `\"max_tokens\"`)",
                link.model, link.provider, link.model
            ),
        );
    }
}
