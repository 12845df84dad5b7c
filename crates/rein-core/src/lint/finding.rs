//! What the lint reports: [`Finding`]s, and the [`Report`] that sorts them
//! into those that stand and those a tool's `allow` silenced.

use std::fmt;

use serde::Serialize;

use super::rule::{Rule, Severity};

/// One thing a rule found in one place of one tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Finding {
    /// The rule.
    #[serde(serialize_with = "rule_id")]
    pub rule: Rule,
    /// How much it matters (the rule's, or milder for a milder case).
    pub severity: Severity,
    /// The tool.
    pub tool: String,
    /// Where in the tool, as a dotted path relative to its definition:
    /// `description`, `schema.properties.priority`, or empty for the tool
    /// as a whole. Under a registry entry it is `tools.NAME.<field>`.
    pub field: String,
    /// What is wrong, lowercase, no trailing period.
    pub message: String,
    /// How to fix it.
    pub help: String,
}

fn rule_id<S: serde::Serializer>(rule: &Rule, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(rule.id())
}

impl Finding {
    /// A finding of `rule` at `field` of `tool`, of the rule's severity and
    /// with its general help.
    pub fn new(
        rule: Rule,
        tool: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Finding {
        Finding {
            rule,
            severity: rule.severity(),
            tool: tool.into(),
            field: field.into(),
            message: message.into(),
            help: rule.help().to_owned(),
        }
    }

    /// The same finding with a specific `help`.
    pub fn with_help(mut self, help: impl Into<String>) -> Finding {
        self.help = help.into();
        self
    }

    /// The same finding at `severity`.
    pub fn with_severity(mut self, severity: Severity) -> Finding {
        self.severity = severity;
        self
    }
}

impl fmt::Display for Finding {
    /// `severity[rule] tool `x` field `y`: message`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}] tool `{}`", self.severity, self.rule, self.tool)?;
        if !self.field.is_empty() {
            write!(f, " field `{}`", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// A finding a tool's `allow` silenced, with the reason given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Silenced {
    /// The finding.
    #[serde(flatten)]
    pub finding: Finding,
    /// Why it is silenced.
    pub reason: String,
}

/// An allowance that silenced nothing: the rule finds nothing in its tool
/// (any more), so the allowance only hides the next real finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct UnusedAllowance {
    /// The tool.
    pub tool: String,
    /// The rule it allows.
    #[serde(serialize_with = "rule_id")]
    pub rule: Rule,
    /// Its index in the tool's `allow` list (`lint.allow[N]`).
    pub index: usize,
}

/// What [`lint`](super::lint) found over a tool set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Report {
    /// The findings that stand, by tool, then field, then rule.
    pub findings: Vec<Finding>,
    /// The findings silenced by a tool's `allow`, in the same order.
    pub silenced: Vec<Silenced>,
    /// The allowances that silenced nothing, by tool.
    pub unused: Vec<UnusedAllowance>,
}

impl Report {
    /// How many findings stand at `severity` exactly.
    pub fn count(&self, severity: Severity) -> usize {
        self.findings
            .iter()
            .filter(|finding| finding.severity == severity)
            .count()
    }

    /// Whether any finding stands at `severity` or above.
    pub fn any_at_or_above(&self, severity: Severity) -> bool {
        self.findings
            .iter()
            .any(|finding| finding.severity >= severity)
    }
}
