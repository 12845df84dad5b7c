//! The rule catalogue: every rule's stable id, default severity, what it
//! looks for and how to fix what it finds.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// How much a finding matters.
///
/// Ordered: `Note < Warning < Error`, so that "at or above" compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Advice: the definition works, a model would do better with more.
    Note,
    /// A model is likely to misuse the tool as defined.
    Warning,
    /// A sign of tampering, or a contradiction that makes rein less careful
    /// than the tool's own server says it must be.
    Error,
}

impl Severity {
    /// Its name in output and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Note => "note",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One lint rule. The id ([`Rule::id`]) is what output shows and what
/// `[tools.NAME.lint] allow` names; it never changes once released.
///
/// See the [module docs](super) for the table of rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Rule {
    /// The first sentence opens with a verb and its object, and its verb
    /// does not contradict the tool's class.
    VerbObjectFirst,
    /// The name and the description say different things.
    NameDescriptionMismatch,
    /// The description runs past [`MAX_DESCRIPTION_WORDS`](super::MAX_DESCRIPTION_WORDS).
    DescriptionLength,
    /// A string whose name says it is one of a few values has no `enum`.
    FreeTextEnum,
    /// A duration, size or amount of money without its unit.
    MissingUnit,
    /// A boolean that hides a third state.
    BooleanThirdState,
    /// An id the model has no way to look up.
    IdWithoutLookup,
    /// A formatted string without an example.
    MissingExample,
    /// Two tools of the same kind on the same object, neither saying when
    /// not to use it.
    NegativeConstraint,
    /// The same concept named differently across tools.
    InconsistentNaming,
    /// An irreversible or destructive tool without a confirmation parameter
    /// or an approval gate.
    DestructiveWithoutConfirmation,
    /// The schema is not accepted by OpenAI's strict mode.
    StrictMode,
    /// The server's MCP annotations contradict rein's class.
    AnnotationContradictsClass,
    /// Invisible or direction-changing characters.
    HiddenUnicode,
    /// Text addressed to the model as instructions.
    InstructionLikeText,
}

impl Rule {
    /// Every rule, in the order of the docs' table.
    pub const ALL: &'static [Rule] = &[
        Rule::VerbObjectFirst,
        Rule::NameDescriptionMismatch,
        Rule::DescriptionLength,
        Rule::FreeTextEnum,
        Rule::MissingUnit,
        Rule::BooleanThirdState,
        Rule::IdWithoutLookup,
        Rule::MissingExample,
        Rule::NegativeConstraint,
        Rule::InconsistentNaming,
        Rule::DestructiveWithoutConfirmation,
        Rule::StrictMode,
        Rule::AnnotationContradictsClass,
        Rule::HiddenUnicode,
        Rule::InstructionLikeText,
    ];

    /// The stable id: what output shows and `allow` names.
    pub fn id(self) -> &'static str {
        match self {
            Rule::VerbObjectFirst => "verb-object-first",
            Rule::NameDescriptionMismatch => "name-description-mismatch",
            Rule::DescriptionLength => "description-length",
            Rule::FreeTextEnum => "free-text-enum",
            Rule::MissingUnit => "missing-unit",
            Rule::BooleanThirdState => "boolean-third-state",
            Rule::IdWithoutLookup => "id-without-lookup",
            Rule::MissingExample => "missing-example",
            Rule::NegativeConstraint => "negative-constraint",
            Rule::InconsistentNaming => "inconsistent-naming",
            Rule::DestructiveWithoutConfirmation => "destructive-without-confirmation",
            Rule::StrictMode => "strict-mode",
            Rule::AnnotationContradictsClass => "annotation-contradicts-class",
            Rule::HiddenUnicode => "hidden-unicode",
            Rule::InstructionLikeText => "instruction-like-text",
        }
    }

    /// The severity its findings have unless a finding says otherwise
    /// (some rules give a milder one to a milder case).
    pub fn severity(self) -> Severity {
        match self {
            Rule::MissingExample | Rule::StrictMode => Severity::Note,
            Rule::HiddenUnicode => Severity::Error,
            _ => Severity::Warning,
        }
    }

    /// One line: what a finding of it means.
    pub fn summary(self) -> &'static str {
        match self {
            Rule::VerbObjectFirst => {
                "the first sentence does not say what the tool does: a verb, its object, its side effect"
            }
            Rule::NameDescriptionMismatch => {
                "the tool's name and its description say different things"
            }
            Rule::DescriptionLength => "the description is longer than about 200 words",
            Rule::FreeTextEnum => "a string that takes one of a few values has no enum",
            Rule::MissingUnit => "a duration, size or amount of money has no unit",
            Rule::BooleanThirdState => "a boolean hides a third state or a degree",
            Rule::IdWithoutLookup => {
                "an id parameter does not say where the model gets valid values"
            }
            Rule::MissingExample => "a formatted string parameter has no example",
            Rule::NegativeConstraint => {
                "two tools of the same kind on the same object do not say when not to use each"
            }
            Rule::InconsistentNaming => "the same concept is named differently across tools",
            Rule::DestructiveWithoutConfirmation => {
                "an irreversible or destructive tool has no confirm/dry_run parameter and no approval"
            }
            Rule::StrictMode => {
                "the schema is not accepted by OpenAI's structured-outputs strict mode"
            }
            Rule::AnnotationContradictsClass => {
                "the server's MCP annotations contradict rein's class"
            }
            Rule::HiddenUnicode => "invisible, bidi-control or tag characters in model-facing text",
            Rule::InstructionLikeText => "model-facing text reads like instructions to the model",
        }
    }

    /// What the rule looks for, in full: the heuristic, so that a reader
    /// can judge a finding (SARIF `fullDescription`, the docs' table).
    pub fn looks_for(self) -> &'static str {
        match self {
            Rule::VerbObjectFirst => {
                "The description's first sentence (up to the first `.`, `!` or `?` followed by a space or the end, `e.g.`, `i.e.`, `etc.` and `vs.` excepted) must not open with a non-verb such as `This`, `The`, `A`, `Tool`, `Used`, `Allows`; must have at least two words (a verb and its object); and the verb it opens with (after an adverb such as `Permanently`) must not contradict the class: a read verb (`get`, `list`, `search`, …) on a write, or an unambiguous write verb (`send`, `delete`, `update`, …; not `add`, `run` or `open`) on a read."
            }
            Rule::NameDescriptionMismatch => {
                "The name's first word is a verb of one kind (read or write) and the description's opening verb of the other; or the name says a general channel (`notification`, `message`, `alert`) and the description names exactly one specific channel (`email`, `SMS`, `Slack`, …); or the name names one channel and the description another. A name whose object words (after the verb) all appear nowhere in the description is a note."
            }
            Rule::DescriptionLength => {
                "More than 200 words in the tool's description: past that, the tool probably does too many things and should be split."
            }
            Rule::FreeTextEnum => {
                "A string parameter whose name's last word is `priority`, `status`, `state`, `level`, `mode`, `type`, `kind`, `category`, `severity`, `tier`, `channel`, `sort`, `direction`, `visibility`, `role`, `stage`, `phase`, `environment`, `strategy`, `scope`, `granularity` or `format`, with no `enum`, `const`, `oneOf`/`anyOf` of constants, `pattern` or `format`."
            }
            Rule::MissingUnit => {
                "A number or integer parameter whose name holds a duration word (`timeout`, `delay`, `interval`, `ttl`, `wait`, `age`, `retention`, `window`, …), a size word (`size` other than a page or batch size, `memory`, `disk`, `bandwidth`) or a money word (`amount`, `price`, `cost`, `fee`, `budget`, `balance`, `charge`, `refund`), and no unit in its name (`_ms`, `_seconds`, `_bytes`, `_mib`, `_cents`, `_usd`, …): a warning when its description names no unit either (nor, for money, a sibling `currency` parameter), a note when only the description does."
            }
            Rule::BooleanThirdState => {
                "A boolean that may also be null (`type = [\"boolean\", \"null\"]`, `nullable = true`), or whose name is a degree rather than a yes/no (`details`, `detailed`, `verbose`, `full`, `extended`, `extra`, `deep`, `brief`, `summary`, …). An optional boolean without a `default` whose description says nothing of a default is a note: absent is a third state."
            }
            Rule::IdWithoutLookup => {
                "A string or integer parameter named `id`, `…_id`, `…Id`, `…_ids` or `…_key` (not an API, secret, access or idempotency key), without `enum` or `const`, whose description and the tool's description give no source: no other tool of the set named, and none of `from`, `returned`, `call`, `list`, `look up`, `search`, `given`, `provided`, `obtain`, `retrieve`, `as shown`."
            }
            Rule::MissingExample => {
                "A string parameter without `enum`, `const`, `format`, `pattern`, `examples` or `default`, whose name holds a formatted kind (`date`, `time`, `timestamp`, `since`, `until`, `query`, `filter`, `expression`, `sql`, `path`, `url`, `uri`, `phone`, `range`, `cron`, `regex`, `selector`, `sku`, `code`, `locale`, `version`, or an id), whose description has no example: no `e.g.`, `example`, `such as`, `for instance`, quoted value, or format name (`ISO`, `RFC`, `YYYY`)."
            }
            Rule::NegativeConstraint => {
                "Two tools whose names have the same object (the words after the verb, compared exactly) and verbs of the same kind (`update`/`patch`/`modify`/`edit`/`change`/`set`/`replace`/`overwrite`; `delete`/`remove`/`destroy`/`purge`/`erase`/`drop`/`archive`; `get`/`fetch`/`read`/`lookup`/`find`/`retrieve`/`show`; `send`/`post`/`publish`/`notify`; `create`/`add`/`insert`/`make`/`register`), where a tool's description neither names the other tool nor says what it does not do (`not`, `never`, `only`, `instead`, `unlike`, `rather than`)."
            }
            Rule::InconsistentNaming => {
                "Parameters across the tool set that are the same words spelled differently (`order_id`, `orderId`, `OrderID`): every spelling but the most common (on a tie, the snake_case one) is flagged. And a bare `id` in a tool whose object is `X` when another tool takes `X_id`."
            }
            Rule::DestructiveWithoutConfirmation => {
                "A tool that is irreversible (class `irreversible`), destructive by its server's word (`destructiveHint: true`, not read-only), or a write of side-effect tier `high` or named with a destructive verb (`delete`, `remove`, `drop`, `purge`, `destroy`, `erase`, `wipe`, `truncate`, `terminate`, `revoke`) without a strong compensation, that has no parameter named `confirm`, `confirmed`, `confirmation`, `dry_run`, `preview`, `simulate` or `validate_only`, and no approval gate (`approval = \"required\"` or a `when` rule, or a tier gate of every agent that offers it)."
            }
            Rule::StrictMode => {
                "What OpenAI's structured-outputs strict mode refuses: a root that is not an object; an object without `additionalProperties: false`; a property not listed in `required` (strict mode wants optional values as a union with `null`); keywords it does not support (`allOf`, `not`, `if`/`then`/`else`, `dependentRequired`, `dependentSchemas`, `patternProperties`, `unevaluatedProperties`, `propertyNames`, `minProperties`, `maxProperties`, `minLength`, `maxLength`, `unevaluatedItems`, `contains`, `minContains`, `maxContains`, `uniqueItems`); more than 10 levels of nesting, 5000 properties or 1000 enum values. A note: rein does not send `strict: true` itself."
            }
            Rule::AnnotationContradictsClass => {
                "MCP annotations against rein's class: an error where rein would be less careful than the server says (a `read` the server says is not read-only or is destructive; an `idempotent_write` the server says is not idempotent), a warning otherwise (a write the server says is read-only; an `irreversible` tool the server says is not destructive or is idempotent). Only annotations the server states count, not the spec's defaults."
            }
            Rule::HiddenUnicode => {
                "In the name, the description and every string of the schema (keys, descriptions, enum values): zero-width characters (U+200B–U+200D, U+2060–U+2064, U+FEFF), bidi controls (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069), Unicode tags (U+E0000–U+E007F), variation selectors (U+FE00–U+FE0F, U+E0100–U+E01EF), the soft hyphen, and control characters other than tab and newline. They hide text from a human reviewer that the model still reads."
            }
            Rule::InstructionLikeText => {
                "In the description and the schema's descriptions and titles, case-insensitive: `ignore`/`disregard`/`forget` followed within four words by `instructions`/`rules`/`prompt`; `you must always`, `you must never`, `you must first`; `before using any other tool`; pseudo-tags such as `<important>`, `<system>`, `<instructions>`; `do not tell the user`, `without telling the user`, `do not mention`; `system prompt`; paths to secrets (`~/.ssh`, `id_rsa`). Basic signs of tool poisoning, not proof of it."
            }
        }
    }

    /// How to fix a finding of it, in general (a finding's own `help` is
    /// specific).
    pub fn help(self) -> &'static str {
        match self {
            Rule::VerbObjectFirst => {
                "open with what the tool does to what, and its side effect: \"Permanently delete one record\", \"Look up one order\""
            }
            Rule::NameDescriptionMismatch => {
                "make the name say exactly what the description says (send_email for email only), or widen the description and add a parameter for the choice"
            }
            Rule::DescriptionLength => {
                "keep the description within about 200 words; a longer one usually means the tool should be split"
            }
            Rule::FreeTextEnum => {
                "list the accepted values in `enum`, with the casing the backend expects, and say when to use each"
            }
            Rule::MissingUnit => {
                "put the unit in the name and in the description: timeout_seconds, \"Request timeout in seconds\""
            }
            Rule::BooleanThirdState => {
                "use a string enum whose values say what each does (detail_level = summary | full), or give the boolean a default and define both values"
            }
            Rule::IdWithoutLookup => {
                "enumerate the valid values, or say where they come from: \"call list_projects first\", \"as get_order returned it\""
            }
            Rule::MissingExample => {
                "add a concrete example of the exact format: \"e.g. 2026-01-08T14:00:00Z\""
            }
            Rule::NegativeConstraint => {
                "say in each description what it does not do and when to use the other tool instead"
            }
            Rule::InconsistentNaming => {
                "name the same concept the same way in every tool, e.g. order_id everywhere"
            }
            Rule::DestructiveWithoutConfirmation => {
                "add a `confirm` (or `dry_run`) boolean whose false value previews, or gate the tool with `approval = \"required\"`"
            }
            Rule::StrictMode => {
                "set additionalProperties = false on every object, list every property in `required` (optional ones as a union with null), and drop unsupported keywords"
            }
            Rule::AnnotationContradictsClass => {
                "find out what the tool really does and correct rein's class, or have the server's annotations corrected"
            }
            Rule::HiddenUnicode => {
                "remove the character; if the text came from a server, treat the tool as untrusted until it is explained"
            }
            Rule::InstructionLikeText => {
                "describe what the tool does; instructions to the model belong in the agent's system prompt, not in a tool"
            }
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

/// A rule id that names no rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a lint rule; the rules are {rules}", rules = rule_list())]
pub struct UnknownRule(pub String);

fn rule_list() -> String {
    Rule::ALL
        .iter()
        .map(|rule| rule.id())
        .collect::<Vec<_>>()
        .join(", ")
}

impl FromStr for Rule {
    type Err = UnknownRule;

    fn from_str(id: &str) -> Result<Rule, UnknownRule> {
        Rule::ALL
            .iter()
            .copied()
            .find(|rule| rule.id() == id)
            .ok_or_else(|| UnknownRule(id.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_parses_back_from_its_id_and_ids_are_unique() {
        let mut ids = std::collections::BTreeSet::new();
        for rule in Rule::ALL {
            assert_eq!(rule.id().parse::<Rule>(), Ok(*rule));
            assert!(ids.insert(rule.id()), "{} twice", rule.id());
        }
    }

    #[test]
    fn an_unknown_id_is_refused_naming_the_known_ones() {
        let error = "free-text".parse::<Rule>().unwrap_err();
        assert!(error.to_string().contains("free-text-enum"), "{error}");
    }

    /// The docs' rule list is the catalogue's: a rule added or a heuristic
    /// changed here without the docs fails.
    #[test]
    fn docs_lint_md_describes_every_rule_as_the_catalogue_does() {
        let docs = include_str!("../../../../docs/lint.md");
        for rule in Rule::ALL {
            let heading = format!("### `{}` ({})", rule.id(), rule.severity());
            assert!(docs.contains(&heading), "docs/lint.md lacks {heading}");
            assert!(
                docs.contains(rule.looks_for()),
                "docs/lint.md does not say what `{}` looks for as Rule::looks_for does",
                rule.id()
            );
        }
    }

    #[test]
    fn severities_order_note_below_warning_below_error() {
        assert!(Severity::Note < Severity::Warning && Severity::Warning < Severity::Error);
    }
}
