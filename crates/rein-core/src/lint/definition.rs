//! [`ToolDefinition`]: what the lint reads about one tool, whichever source
//! it came from.
//!
//! # Why a type of its own
//!
//! A tool a model sees comes from rein's registry or, for MCP servers, from
//! a server's `tools/list`; the two hold different facts (rein's class and
//! approval gates; the server's annotations). The rules read one typed
//! shape that holds either, so a tool list from anywhere is linted the same
//! way: [`definitions`] builds it from a [`Registry`], and an MCP importer
//! builds it with [`ToolDefinition::new`] and sets what it knows.

use serde_json::Value;

use super::rule::Rule;
use crate::registry::{CompensationGrade, Registry, SideEffectTier, ToolApproval, ToolSpec};
use crate::tool::ToolClass;

/// One tool as a model sees it, with what rein and its server say about it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolDefinition {
    /// The name the model calls it by.
    pub name: String,
    /// Its description, as written (without the side-effect label rein
    /// prefixes to a registry tool's description: that label is generated
    /// from the class, so it cannot be wrong).
    pub description: String,
    /// The JSON Schema of its arguments.
    pub schema: Value,
    /// rein's class, when the tool has a registry entry.
    pub class: Option<ToolClass>,
    /// rein's side-effect tier, when the tool has a registry entry.
    pub side_effect_tier: Option<SideEffectTier>,
    /// How its effect is undone, when the tool has a registry entry.
    pub compensation: Option<CompensationGrade>,
    /// Whether a human approves its calls before they are sent.
    pub approval: ApprovalGate,
    /// What its MCP server says about it, if it came from one.
    pub annotations: Annotations,
    /// The rules silenced for this tool, each with its reason.
    pub allow: Vec<Allowance>,
}

impl ToolDefinition {
    /// A tool of `name`, `description` and argument `schema`, of which
    /// nothing else is known (no class, no approval, no annotations).
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        schema: Value,
    ) -> ToolDefinition {
        ToolDefinition {
            name: name.into(),
            description: description.into(),
            schema,
            class: None,
            side_effect_tier: None,
            compensation: None,
            approval: ApprovalGate::None,
            annotations: Annotations::default(),
            allow: Vec::new(),
        }
    }

    /// The same tool with rein's `class`.
    pub fn with_class(mut self, class: ToolClass) -> ToolDefinition {
        self.class = Some(class);
        self
    }

    /// The same tool with its server's `annotations`.
    pub fn with_annotations(mut self, annotations: Annotations) -> ToolDefinition {
        self.annotations = annotations;
        self
    }

    /// The same tool with its calls gated by `approval`.
    pub fn with_approval(mut self, approval: ApprovalGate) -> ToolDefinition {
        self.approval = approval;
        self
    }

    /// The same tool with `rule` silenced for `reason`.
    pub fn allowing(mut self, rule: Rule, reason: impl Into<String>) -> ToolDefinition {
        self.allow.push(Allowance {
            rule,
            reason: reason.into(),
        });
        self
    }

    /// The reason `rule` is silenced for this tool, if it is.
    pub fn allowed(&self, rule: Rule) -> Option<&str> {
        self.allow
            .iter()
            .find(|allowance| allowance.rule == rule)
            .map(|allowance| allowance.reason.as_str())
    }
}

/// Whether a human approves a tool's calls before rein sends them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApprovalGate {
    /// No gate: calls go out as the model proposes them.
    #[default]
    None,
    /// Calls whose arguments match a rule wait (`approval = { when = … }`).
    Conditional,
    /// Every call waits (`approval = "required"`, or a tier gate of every
    /// agent that offers the tool).
    Always,
}

/// The MCP tool annotations a server states (`readOnlyHint`,
/// `destructiveHint`, `idempotentHint`, `openWorldHint`).
///
/// `None` is "not stated": the rules compare only what a server says, never
/// the MCP spec's defaults, which are guesses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Annotations {
    /// `readOnlyHint`: the tool does not modify its environment.
    pub read_only: Option<bool>,
    /// `destructiveHint`: the tool may destroy or overwrite, rather than
    /// only add.
    pub destructive: Option<bool>,
    /// `idempotentHint`: repeating a call with the same arguments has no
    /// further effect.
    pub idempotent: Option<bool>,
    /// `openWorldHint`: the tool reaches outside entities.
    pub open_world: Option<bool>,
}

impl Annotations {
    /// Annotations stating `read_only`, `destructive` and `idempotent`.
    pub fn new(
        read_only: Option<bool>,
        destructive: Option<bool>,
        idempotent: Option<bool>,
    ) -> Annotations {
        Annotations {
            read_only,
            destructive,
            idempotent,
            open_world: None,
        }
    }
}

/// One silenced rule (`[tools.NAME.lint] allow = [{ rule, reason }]`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Allowance {
    /// The rule silenced.
    pub rule: Rule,
    /// Why: required, so that the next reader can judge it.
    pub reason: String,
}

impl Allowance {
    /// `rule`, silenced for `reason`.
    pub fn new(rule: Rule, reason: impl Into<String>) -> Allowance {
        Allowance {
            rule,
            reason: reason.into(),
        }
    }
}

/// Every tool of `registry`, in name order, as the lint reads it.
///
/// A tool's approval gate is its own (`approval`), or, when it has none,
/// the agents' tier gates: [`ApprovalGate::Always`] when every agent that
/// offers it gates its tier (a tool no agent offers has no such gate).
pub fn definitions(registry: &Registry) -> Vec<ToolDefinition> {
    registry
        .tools()
        .values()
        .map(|tool| definition(registry, tool))
        .collect()
}

fn definition(registry: &Registry, tool: &ToolSpec) -> ToolDefinition {
    let approval = match tool.approval {
        ToolApproval::Required => ApprovalGate::Always,
        ToolApproval::When(_) => ApprovalGate::Conditional,
        _ => {
            let mut offering = registry
                .agents()
                .values()
                .filter(|agent| agent.tools.contains(&tool.name))
                .peekable();
            let offered = offering.peek().is_some();
            let gated = offering.all(|agent| {
                agent
                    .approval
                    .from_tier
                    .is_some_and(|tier| tool.side_effect_tier >= tier)
            });
            if offered && gated {
                ApprovalGate::Always
            } else {
                ApprovalGate::None
            }
        }
    };
    ToolDefinition {
        name: tool.name.clone(),
        description: tool.description.clone(),
        schema: tool.schema.clone(),
        class: Some(tool.class),
        side_effect_tier: Some(tool.side_effect_tier),
        compensation: Some(tool.compensation_grade()),
        approval,
        annotations: Annotations::default(),
        allow: tool.lint_allow.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{self, ConfigFile, ConfigSource};

    const TOOLS: &str = r#"
[tools.send_email]
description = "Send an email."
class = "irreversible"
avoid_at_plan_time = true
compensation = { grade = "none" }
adapter = { kind = "http", url = "http://127.0.0.1:1/send" }
schema = { type = "object", properties = { to = { type = "string", description = "Recipient." } } }
[tools.send_email.lint]
allow = [{ rule = "missing-example", reason = "addresses are free-form" }]

[tools.refund]
description = "Refund an order."
class = "irreversible"
avoid_at_plan_time = true
compensation = { grade = "none" }
approval = { when = { "args.amount" = { gt = 100 } } }
adapter = { kind = "http", url = "http://127.0.0.1:1/refund" }
schema = { type = "object", properties = { amount = { type = "integer", description = "Cents." } } }

[providers.p]
kind = "scripted"
script = "s.json"
"#;

    fn registry(agents: &str) -> Registry {
        let file: ConfigFile = toml::from_str(&format!("{TOOLS}{agents}")).unwrap();
        registry::check(&[ConfigSource::new("rein.toml", file)], &|_| Vec::new()).unwrap()
    }

    fn gate(registry: &Registry, name: &str) -> ApprovalGate {
        definitions(registry)
            .into_iter()
            .find(|d| d.name == name)
            .unwrap()
            .approval
    }

    #[test]
    fn a_registry_tool_carries_its_class_approval_and_allowances() {
        let registry = registry("");
        let defs = definitions(&registry);
        let email = defs.iter().find(|d| d.name == "send_email").unwrap();
        assert_eq!(email.class, Some(ToolClass::Irreversible));
        assert_eq!(email.approval, ApprovalGate::None);
        assert_eq!(
            email.allowed(Rule::MissingExample),
            Some("addresses are free-form")
        );
        assert_eq!(gate(&registry, "refund"), ApprovalGate::Conditional);
    }

    #[test]
    fn a_tier_gate_counts_only_when_every_agent_offering_the_tool_has_one() {
        let gated = r#"
[agents.a]
provider = "p"
model = "m"
tools = ["send_email"]
approval = { from_tier = "high" }
"#;
        assert_eq!(gate(&registry(gated), "send_email"), ApprovalGate::Always);
        let one_ungated = format!(
            "{gated}\n[agents.b]\nprovider = \"p\"\nmodel = \"m\"\ntools = [\"send_email\"]\n"
        );
        assert_eq!(
            gate(&registry(&one_ungated), "send_email"),
            ApprovalGate::None
        );
    }
}
