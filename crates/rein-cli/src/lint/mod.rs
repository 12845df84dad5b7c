//! `rein lint --config CONFIG`: the tool-definition lint
//! ([`rein_core::lint`]) over a config's tools, as a compiler reports.
//!
//! The config is loaded as `rein check` loads it (files, `${ENV}`, the
//! integrity check, schema compilation): a config that does not load
//! cannot be linted, and its problems are printed instead (exit 2). Each
//! finding is placed at its field's line with the same source maps
//! `rein check` uses.
//!
//! One difference: a `${VAR}` that is not set reads as
//! [`UNSET_PLACEHOLDER`] instead of being a problem. The lint reads tool
//! definitions, not a deployment, and CI should not need the deployment's
//! URLs and tokens to lint them. (A value the placeholder does not fit,
//! such as `http://${HOST}:8080`, still needs its variable set.)
//!
//! | exit | when |
//! | --- | --- |
//! | 0 | no finding at or above `--deny` (default `warning`): notes alone pass |
//! | 1 | a finding at or above `--deny` |
//! | 2 | the config could not be read or has problems |

mod sarif;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use rein_core::lint::{self, Finding, Report, Severity};
use rein_engine::config::{Loaded, Loader, Position};
use serde_json::{Value, json};

use crate::log::{Level, note};

/// What an unset `${VAR}` reads as while linting: an absolute URL of a
/// reserved domain that never resolves, so that the `${BASE}/path` form of
/// tool URLs and provider base URLs still loads.
pub const UNSET_PLACEHOLDER: &str = "http://unset.invalid";

/// Arguments of `rein lint`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  rein lint --config examples/order-desk               # compiler-style findings
  rein lint --config rein.toml --deny error            # fail CI on errors only
  rein lint --config rein.toml --json | jq '.findings[].rule'
  rein lint --config rein.toml --format sarif > rein-lint.sarif
  rein lint --config rein.toml --mcp everything        # a live MCP server's tools

Silence a rule for one tool, with a reason (required):
  [tools.send_email.lint]
  allow = [{ rule = \"destructive-without-confirmation\", reason = \"approved before the run\" }]

Exit status: 0 when no finding is at or above --deny (notes alone pass),
1 when one is, 2 when the config could not be read.")]
pub struct LintArgs {
    /// The config: a TOML file or a directory of them (read as `rein
    /// check` reads it, an unset `${VAR}` as `http://unset.invalid`).
    #[arg(long, short)]
    config: PathBuf,
    /// The output: `text` (compiler-style, one finding and its help per
    /// place), `json` (one document) or `sarif` (SARIF 2.1.0, for code
    /// scanning).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Shorthand for `--format json`: `{"ok", "deny", "tools", "counts",
    /// "findings": [{"rule", "severity", "tool", "field", "message",
    /// "help", "file", "line"?, "column"?}], "silenced": [{…, "reason"}],
    /// "unused_allowances": [{"tool", "rule", "field", "file", "line"?,
    /// "column"?}]}`.
    #[arg(long, conflicts_with = "format")]
    json: bool,
    /// The lowest severity that fails the lint (exit 1).
    #[arg(long, value_enum, default_value_t = Deny::Warning)]
    deny: Deny,
    /// Lint the tools a live MCP server lists (`[mcp_servers.NAME]` of the
    /// config) instead of the config's tools: its descriptions, schemas
    /// and annotations, with rein's class where the config has an entry
    /// for the tool (so a `destructiveHint` that contradicts it is found).
    #[arg(long, value_name = "SERVER")]
    mcp: Option<String>,
}

/// How the findings are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// `FILE:LINE:COLUMN: SEVERITY[RULE] tool TOOL field FIELD: MESSAGE`,
    /// then `help: …`.
    Text,
    /// One JSON document.
    Json,
    /// A SARIF 2.1.0 log.
    Sarif,
}

/// `--deny`: a severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Deny {
    /// Any finding fails.
    Note,
    /// Warnings and errors fail.
    Warning,
    /// Only errors fail.
    Error,
}

impl From<Deny> for Severity {
    fn from(deny: Deny) -> Severity {
        match deny {
            Deny::Note => Severity::Note,
            Deny::Warning => Severity::Warning,
            Deny::Error => Severity::Error,
        }
    }
}

/// A finding and where it is written.
pub(crate) struct Placed<'r> {
    pub finding: &'r Finding,
    /// The reason, when a tool's `allow` silenced it.
    pub reason: Option<&'r str>,
    /// The config file of its tool.
    pub file: PathBuf,
    /// Its dotted path in the config: `tools.NAME.<field>`.
    pub config_field: String,
    /// Its line and column there, when the file writes it (or its table).
    pub position: Option<Position>,
}

/// Runs `rein lint`; see the module docs for the exit status.
pub fn run(args: LintArgs) -> ExitCode {
    let env = |name: &str| {
        std::env::var(name)
            .ok()
            .or_else(|| Some(UNSET_PLACEHOLDER.to_owned()))
    };
    let loaded = match Loader::with_env(env).load_with_warnings(&args.config) {
        Ok(loaded) => loaded,
        Err(errors) => {
            for problem in errors.problems() {
                note(Level::Error, &problem.to_string());
            }
            note(
                Level::Error,
                &format!(
                    "error: the config {} has problems (`rein check` lists them too); nothing was linted",
                    args.config.display()
                ),
            );
            return ExitCode::from(2);
        }
    };
    for warning in &loaded.warnings {
        note(Level::Warn, &format!("warning: {warning}"));
    }
    let format = if args.json { Format::Json } else { args.format };
    if let Some(server) = &args.mcp {
        return lint_mcp(&loaded, server, format, Severity::from(args.deny));
    }
    let definitions = lint::definitions(&loaded.registry);
    let report = lint::lint(&definitions);
    let placed = place(&loaded, &report);
    let unused = unused(&loaded, &report);
    emit(
        format,
        Severity::from(args.deny),
        &report,
        &placed,
        &unused,
        definitions.len(),
    )
}

/// `rein lint --mcp SERVER`: the tools `server` lists now, each with
/// rein's class, tier, compensation and approval where the config has an
/// entry calling it (its allowances too), and the server's annotations.
fn lint_mcp(loaded: &Loaded, server: &str, format: Format, deny: Severity) -> ExitCode {
    use rein_core::registry::AdapterSpec;
    let Some(spec) = loaded.registry.mcp_servers().get(server) else {
        note(
            Level::Error,
            &format!("error: the config has no [mcp_servers.{server}]; nothing was linted"),
        );
        return ExitCode::from(2);
    };
    let listed = match crate::run::runtime().map(|runtime| {
        runtime.block_on(async {
            let session = rein_engine::tool::mcp::McpSession::new(spec.clone());
            let listed = rein_engine::tool::mcp::discover(&session).await;
            session.close().await;
            listed
        })
    }) {
        Ok(Ok(listed)) => listed,
        Ok(Err(e)) => {
            note(Level::Error, &format!("error: MCP server `{server}`: {e}"));
            return ExitCode::from(2);
        }
        Err(e) => {
            note(Level::Error, &format!("error: {e}"));
            return ExitCode::from(2);
        }
    };
    let registered = lint::definitions(&loaded.registry);
    let definitions: Vec<lint::ToolDefinition> = listed
        .iter()
        .map(|tool| {
            // The registry entry that calls this tool, if any: rein's view.
            let entry = loaded.registry.tools().values().find(|t| {
                matches!(&t.adapter, AdapterSpec::Mcp { server: s, tool: name, .. }
                    if s.name == server && *name == tool.name)
            });
            let mut definition = entry
                .and_then(|e| registered.iter().find(|d| d.name == e.name).cloned())
                .unwrap_or_else(|| {
                    lint::ToolDefinition::new(tool.name.clone(), String::new(), Value::Null)
                });
            definition.name = tool.name.clone();
            definition.description = tool.description.clone().unwrap_or_default();
            definition.schema = tool.input_schema.clone();
            let mut annotations = lint::Annotations::new(
                tool.hints.read_only,
                tool.hints.destructive,
                tool.hints.idempotent,
            );
            annotations.open_world = tool.hints.open_world;
            definition.annotations = annotations;
            definition
        })
        .collect();
    let report = lint::lint(&definitions);
    let file = PathBuf::from(format!("mcp:{server}"));
    let standing = report.findings.iter().map(|f| (f, None));
    let silenced = report
        .silenced
        .iter()
        .map(|s| (&s.finding, Some(s.reason.as_str())));
    let placed: Vec<Placed<'_>> = standing
        .chain(silenced)
        .map(|(finding, reason)| Placed {
            finding,
            reason,
            file: file.clone(),
            config_field: if finding.field.is_empty() {
                finding.tool.clone()
            } else {
                format!("{}.{}", finding.tool, finding.field)
            },
            position: None,
        })
        .collect();
    emit(format, deny, &report, &placed, &[], definitions.len())
}

/// Prints `report` in `format` and gives the exit status for `deny`.
///
/// Where the findings came from is in `placed` and `unused` only, so a
/// tool list that is not a config (an MCP server's) is printed the same
/// way with its own places (no line, a `file` naming the server).
fn emit(
    format: Format,
    deny: Severity,
    report: &Report,
    placed: &[Placed<'_>],
    unused: &[Unused],
    tools: usize,
) -> ExitCode {
    match format {
        Format::Text => print_text(report, placed, unused, tools),
        Format::Json => println!("{}", json_document(report, placed, unused, deny, tools)),
        Format::Sarif => println!("{}", sarif::log(placed)),
    }
    if report.any_at_or_above(deny) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Every finding of `report`, standing then silenced, with its place; in
/// each group by file, then line and column, as a compiler reports (the
/// library's order, by tool then field, breaks ties).
fn place<'r>(loaded: &Loaded, report: &'r Report) -> Vec<Placed<'r>> {
    let standing = report.findings.iter().map(|f| (f, None));
    let silenced = report
        .silenced
        .iter()
        .map(|s| (&s.finding, Some(s.reason.as_str())));
    let mut placed = standing
        .chain(silenced)
        .map(|(finding, reason)| {
            let file = loaded
                .registry
                .tool(&finding.tool)
                .map(|tool| tool.source.clone())
                .unwrap_or_default();
            let config_field = if finding.field.is_empty() {
                format!("tools.{}", finding.tool)
            } else {
                format!("tools.{}.{}", finding.tool, finding.field)
            };
            let position = loaded.sources.locate(&file, &config_field);
            Placed {
                finding,
                reason,
                file,
                config_field,
                position,
            }
        })
        .collect::<Vec<_>>();
    // Stable: equal places keep the library's order.
    placed.sort_by(|a, b| {
        (a.reason.is_some(), &a.file, a.position).cmp(&(b.reason.is_some(), &b.file, b.position))
    });
    placed
}

/// An allowance that silenced nothing, and where it is written.
pub(crate) struct Unused {
    pub tool: String,
    pub rule: &'static str,
    pub file: PathBuf,
    /// `tools.NAME.lint.allow[N]`.
    pub config_field: String,
    /// Its line and column there.
    pub position: Option<Position>,
}

fn unused(loaded: &Loaded, report: &Report) -> Vec<Unused> {
    report
        .unused
        .iter()
        .map(|u| {
            let file = loaded
                .registry
                .tool(&u.tool)
                .map(|tool| tool.source.clone())
                .unwrap_or_default();
            let config_field = format!("tools.{}.lint.allow[{}]", u.tool, u.index);
            let position = loaded.sources.locate(&file, &config_field);
            Unused {
                tool: u.tool.clone(),
                rule: u.rule.id(),
                file,
                config_field,
                position,
            }
        })
        .collect()
}

fn location(file: &Path, position: Option<Position>) -> String {
    match position {
        Some(Position { line, column }) => format!("{}:{line}:{column}", file.display()),
        None => file.display().to_string(),
    }
}

fn print_text(report: &Report, placed: &[Placed<'_>], unused: &[Unused], tools: usize) {
    for p in placed.iter().filter(|p| p.reason.is_none()) {
        println!("{}: {}", location(&p.file, p.position), p.finding);
        println!("  help: {}", p.finding.help);
    }
    for u in unused {
        println!(
            "{}: note: tool `{}` field `{}`: silences `{}`, which finds nothing here",
            location(&u.file, u.position),
            u.tool,
            u.config_field,
            u.rule
        );
        println!("  help: remove the allowance, so that it hides no future finding");
    }
    let counts: Vec<String> = [Severity::Error, Severity::Warning, Severity::Note]
        .into_iter()
        .filter_map(|severity| {
            let n = report.count(severity);
            (n > 0).then(|| count(n, severity.as_str()))
        })
        .collect();
    let silenced = match report.silenced.len() {
        0 => String::new(),
        n => format!(" ({n} silenced with a reason)"),
    };
    let tools = count(tools, "tool");
    if counts.is_empty() {
        println!("ok: {tools}, no findings{silenced}");
    } else {
        println!("{} in {tools}{silenced}", counts.join(", "));
    }
}

fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

fn finding_json(p: &Placed<'_>) -> Value {
    let mut doc = json!({
        "rule": p.finding.rule.id(),
        "severity": p.finding.severity.as_str(),
        "tool": p.finding.tool,
        "field": p.finding.field,
        "message": p.finding.message,
        "help": p.finding.help,
        "file": p.file.display().to_string(),
    });
    if let Some(map) = doc.as_object_mut() {
        if let Some(position) = p.position {
            map.insert("line".into(), json!(position.line));
            map.insert("column".into(), json!(position.column));
        }
        if let Some(reason) = p.reason {
            map.insert("reason".into(), json!(reason));
        }
    }
    doc
}

fn json_document(
    report: &Report,
    placed: &[Placed<'_>],
    unused: &[Unused],
    deny: Severity,
    tools: usize,
) -> Value {
    let (silenced, standing): (Vec<&Placed<'_>>, Vec<&Placed<'_>>) =
        placed.iter().partition(|p| p.reason.is_some());
    json!({
        "ok": !report.any_at_or_above(deny),
        "deny": deny.as_str(),
        "tools": tools,
        "counts": {
            "error": report.count(Severity::Error),
            "warning": report.count(Severity::Warning),
            "note": report.count(Severity::Note),
        },
        "findings": standing.into_iter().map(finding_json).collect::<Vec<Value>>(),
        "silenced": silenced.into_iter().map(finding_json).collect::<Vec<Value>>(),
        "unused_allowances": unused.iter().map(unused_json).collect::<Vec<Value>>(),
    })
}

fn unused_json(u: &Unused) -> Value {
    let mut doc = json!({
        "tool": u.tool,
        "rule": u.rule,
        "field": u.config_field,
        "file": u.file.display().to_string(),
    });
    if let (Some(position), Some(map)) = (u.position, doc.as_object_mut()) {
        map.insert("line".into(), json!(position.line));
        map.insert("column".into(), json!(position.column));
    }
    doc
}
