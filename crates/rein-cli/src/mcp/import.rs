//! `rein mcp import SERVER`: registry entries for a server's tools, for
//! review, and what changed on the server since the entries were made.
//!
//! # Why entries to review, not tools taken as they are
//!
//! Every tool an agent calls needs rein's own class, key recipe and
//! compensation: the server's hints (`readOnlyHint`, `idempotentHint`,
//! `destructiveHint`) may be wrong, and a wrong `read` is a write retried
//! without a key. So import writes TOML a person reads and commits: the
//! class suggested from the hints with the reason, the server's
//! description and schema as they are (rein shows the model what the
//! server says), and the pin of the definition seen, so that a server
//! that later changes it is refused until someone looks again.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Args;
use rein_core::ToolClass;
use rein_core::registry::{AdapterSpec, Registry};
use rein_engine::startup::Purpose;
use rein_engine::tool::mcp::{McpSession, McpToolDefinition, ToolHints};
use serde_json::{Value, json};

use super::toml_text::{key, value};

/// Arguments of `rein mcp import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The server, as named by `[mcp_servers.NAME]` in the config.
    server: String,
    /// The config: a TOML file or a directory of them.
    #[arg(long, short)]
    config: PathBuf,
    /// Only these tools (by their name on the server); every tool when
    /// omitted.
    #[arg(long = "tool", value_name = "NAME")]
    tools: Vec<String>,
    /// Print one JSON document instead of TOML: each tool's definition,
    /// digest, hints and suggested class, and the registry entries whose
    /// pin no longer matches.
    #[arg(long)]
    json: bool,
}

/// A class suggested from a server's hints, and why.
fn suggested_class(hints: ToolHints) -> (ToolClass, &'static str) {
    match (hints.read_only, hints.destructive, hints.idempotent) {
        (Some(true), _, _) => (ToolClass::Read, "readOnlyHint = true"),
        (_, Some(true), _) => (
            ToolClass::Irreversible,
            "destructiveHint = true: never retried; consider an approval",
        ),
        (_, _, Some(true)) => (
            ToolClass::IdempotentWrite,
            "idempotentHint = true: retried under its key; check the server deduplicates by `_meta[\"rein/idempotency-key\"]`",
        ),
        _ => (
            ToolClass::Irreversible,
            "no hint says it is safe to repeat: never retried until you say otherwise",
        ),
    }
}

/// A registry entry whose pinned definition is not the server's now.
struct Changed<'a> {
    entry: &'a str,
    tool: &'a str,
    pin: &'a str,
    now: Option<&'a McpToolDefinition>,
    description: &'a str,
    schema: &'a Value,
}

/// Runs `rein mcp import`. Exit status: 0 when the entries were printed and
/// no pinned entry changed, 1 when some pinned entry's definition changed
/// or its tool is gone, 2 when the server could not be reached.
pub fn run(args: ImportArgs) -> Result<ExitCode> {
    let runtime = crate::run::runtime()?;
    runtime.block_on(async {
        let startup = crate::run::start(&args.config, Purpose::Run)?;
        let registry = &startup.registry;
        let Some(spec) = registry.mcp_servers().get(&args.server) else {
            let known: Vec<&str> = registry.mcp_servers().keys().map(String::as_str).collect();
            bail!(
                "{} has no [mcp_servers.{}]; it defines: {}",
                args.config.display(),
                args.server,
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            );
        };
        let session = McpSession::new(spec.clone());
        let listed = session
            .tools()
            .await
            .with_context(|| format!("cannot list the tools of MCP server `{}`", args.server));
        session.close().await;
        let listed = listed?;
        for wanted in &args.tools {
            if !listed.contains_key(wanted) {
                bail!(
                    "MCP server `{}` lists no tool `{wanted}`; it lists: {}",
                    args.server,
                    listed.keys().cloned().collect::<Vec<_>>().join(", ")
                );
            }
        }
        let chosen: Vec<&McpToolDefinition> = listed
            .values()
            .filter(|d| args.tools.is_empty() || args.tools.contains(&d.name))
            .collect();
        let changed = changed(registry, &args.server, &listed);
        if args.json {
            print_json(&chosen, &changed);
        } else {
            print!("{}", entries(&args.server, &chosen, registry));
            for c in &changed {
                eprint!("{}", describe_change(&args.server, c));
            }
        }
        Ok(if changed.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    })
}

/// The registry's pinned entries of `server` whose definition changed.
fn changed<'a>(
    registry: &'a Registry,
    server: &str,
    listed: &'a std::collections::BTreeMap<String, McpToolDefinition>,
) -> Vec<Changed<'a>> {
    let mut out = Vec::new();
    for spec in registry.tools().values() {
        let AdapterSpec::Mcp {
            server: s,
            tool,
            pin: Some(pin),
            ..
        } = &spec.adapter
        else {
            continue;
        };
        if s.name != server {
            continue;
        }
        let now = listed.get(tool);
        if now.is_some_and(|d| d.digest() == *pin) {
            continue;
        }
        out.push(Changed {
            entry: &spec.name,
            tool,
            pin,
            now,
            description: &spec.description,
            schema: &spec.schema,
        });
    }
    out
}

/// What changed of one pinned entry, for a person: the description and
/// the schema's properties, registry (`-`) against server (`+`).
fn describe_change(server: &str, c: &Changed<'_>) -> String {
    let mut out = String::new();
    let Some(now) = c.now else {
        let _ = writeln!(
            out,
            "changed: [tools.{}] calls `{}`, which MCP server `{server}` no longer lists",
            c.entry, c.tool
        );
        return out;
    };
    let _ = writeln!(
        out,
        "changed: [tools.{}] (`{}` on `{server}`): pinned {}, the server's is now {}",
        c.entry,
        c.tool,
        c.pin,
        now.digest()
    );
    let description = now.description.as_deref().unwrap_or_default();
    if description != c.description {
        let _ = writeln!(
            out,
            "  description:\n  - {}\n  + {description}",
            c.description
        );
    }
    if &now.input_schema != c.schema {
        let props = |schema: &Value| -> std::collections::BTreeMap<String, Value> {
            schema
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| p.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_default()
        };
        let (was, is) = (props(c.schema), props(&now.input_schema));
        let _ = writeln!(out, "  schema:");
        for (name, schema) in &was {
            match is.get(name) {
                None => {
                    let _ = writeln!(out, "  - {name}: {schema}");
                }
                Some(now) if now != schema => {
                    let _ = writeln!(out, "  - {name}: {schema}\n  + {name}: {now}");
                }
                Some(_) => {}
            }
        }
        for (name, schema) in is.iter().filter(|(n, _)| !was.contains_key(*n)) {
            let _ = writeln!(out, "  + {name}: {schema}");
        }
        if was == is {
            let _ = writeln!(out, "  - {}\n  + {}", c.schema, now.input_schema);
        }
    }
    let _ = writeln!(
        out,
        "  calls to it are refused until the entry is reviewed and its pin updated"
    );
    out
}

/// The TOML of registry entries for `tools` of `server`.
fn entries(server: &str, tools: &[&McpToolDefinition], registry: &Registry) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Imported from MCP server `{server}` by `rein mcp import`: review each entry.\n\
         # The class is rein's, not the server's: it decides retries and keys.\n\
         # `pin` is the digest of the definition seen now; a server that changes it\n\
         # is refused until the entry is reviewed again."
    );
    for tool in tools {
        let name = registry_name(&tool.name);
        let (class, why) = suggested_class(tool.hints);
        let _ = writeln!(out);
        if registry.tool(&name).is_some() {
            let _ = writeln!(out, "# [tools.{name}] exists already in the config");
        }
        let _ = writeln!(out, "[tools.{}]", key(&name));
        let description = tool
            .description
            .clone()
            .or_else(|| tool.title.clone())
            .unwrap_or_default();
        let _ = writeln!(out, "description = {}", value(&Value::String(description)));
        let _ = writeln!(out, "class = \"{}\"  # suggested: {why}", class_name(class));
        if class == ToolClass::Irreversible {
            let _ = writeln!(
                out,
                "avoid_at_plan_time = true  # irreversible without a compensation"
            );
        }
        let mut adapter = json!({"kind": "mcp", "server": server});
        if name != tool.name {
            adapter["tool"] = Value::String(tool.name.clone());
        }
        adapter["pin"] = Value::String(tool.digest());
        let _ = writeln!(out, "adapter = {}", value(&adapter));
        let _ = writeln!(out, "schema = {}", value(&tool.input_schema));
    }
    out
}

/// A tool's name as the registry (and the model) can take it: the
/// characters OpenAI and Anthropic accept, at most 64.
fn registry_name(name: &str) -> String {
    let mapped: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if mapped.is_empty() {
        "tool".to_owned()
    } else {
        mapped
    }
}

fn class_name(class: ToolClass) -> &'static str {
    match class {
        ToolClass::Read => "read",
        ToolClass::IdempotentWrite => "idempotent_write",
        _ => "irreversible",
    }
}

fn print_json(tools: &[&McpToolDefinition], changed: &[Changed<'_>]) {
    let tools: Vec<Value> = tools
        .iter()
        .map(|t| {
            let (class, why) = suggested_class(t.hints);
            json!({
                "name": t.name,
                "registry_name": registry_name(&t.name),
                "digest": t.digest(),
                "definition": t,
                "suggested_class": class_name(class),
                "why": why,
            })
        })
        .collect();
    let changed: Vec<Value> = changed
        .iter()
        .map(|c| {
            json!({
                "entry": c.entry,
                "tool": c.tool,
                "pin": c.pin,
                "now": c.now.map(McpToolDefinition::digest),
                "listed": c.now.is_some(),
            })
        })
        .collect();
    println!("{}", json!({"tools": tools, "changed": changed}));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_suggest_a_class_and_no_hint_is_the_safest() {
        let hints = |read_only, destructive, idempotent| ToolHints {
            read_only,
            destructive,
            idempotent,
            open_world: None,
        };
        assert_eq!(
            suggested_class(hints(Some(true), None, None)).0,
            ToolClass::Read
        );
        assert_eq!(
            suggested_class(hints(Some(false), Some(false), Some(true))).0,
            ToolClass::IdempotentWrite
        );
        assert_eq!(
            suggested_class(hints(None, Some(true), Some(true))).0,
            ToolClass::Irreversible
        );
        assert_eq!(
            suggested_class(hints(None, None, None)).0,
            ToolClass::Irreversible
        );
    }

    #[test]
    fn names_the_model_cannot_take_are_mapped() {
        assert_eq!(registry_name("get-sum"), "get-sum");
        assert_eq!(registry_name("files/read file"), "files_read_file");
    }
}
