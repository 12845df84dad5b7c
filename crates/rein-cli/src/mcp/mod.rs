//! `rein mcp`: MCP both ways — rein's tools served to MCP clients
//! (`serve`), and an MCP server's tools imported into the registry
//! (`import`).

use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Subcommand};

mod elicit;
mod import;
mod serve;
mod toml_text;

/// Arguments of `rein mcp`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  rein mcp serve --config examples/order-desk --agent order_desk   # for an MCP client, on stdio
  rein mcp import everything --config rein.toml >> tools.toml      # [mcp_servers.everything]'s tools, for review")]
pub struct McpArgs {
    #[command(subcommand)]
    command: McpCommand,
}

#[derive(Debug, Subcommand)]
enum McpCommand {
    /// Serve an agent's tools to MCP clients over stdio (one client) or
    /// streamable HTTP (`--listen`), each call through rein's guarded
    /// call (schema, budget, breakers, key, ledger, retries by class,
    /// approvals); a stdio session is one run of the agent, over HTTP each
    /// key's tenant has one.
    ///
    /// Over stdio, stdout is the MCP channel; rein's own lines go to
    /// stderr. When the client disconnects or a signal comes, every run
    /// ends by the agent's failure policy and its report is in the store
    /// (`rein runs show`).
    #[command(after_help = "\
Examples:
  rein mcp serve --config examples/order-desk --agent order_desk   # a session on stdio
  rein mcp serve -c /etc/rein -a order_desk --tenant acme --data postgres://rein@db.internal/rein
  rein mcp serve -c /etc/rein -a order_desk --approve-via api   # approvals only through rein, never the client's user
  rein mcp serve -c /etc/rein -a order_desk --listen 127.0.0.1:8811   # streamable HTTP at http://127.0.0.1:8811/mcp

As a desktop assistant's server entry:
  {\"command\": \"rein\", \"args\": [\"mcp\", \"serve\", \"--config\", \"/etc/rein\", \"--agent\", \"order_desk\"]}")]
    Serve(serve::ServeArgs),
    /// Print registry entries for an MCP server's tools, for review: the
    /// class suggested from the server's hints (with why), its description
    /// and schema, and the pin of the definition seen.
    ///
    /// The server is `[mcp_servers.NAME]` of the config. Entries already in
    /// the config whose pinned definition changed on the server are shown
    /// with the difference on stderr, and the exit status is 1.
    #[command(after_help = "\
Examples:
  rein mcp import everything --config rein.toml >> tools.toml     # every tool of [mcp_servers.everything]
  rein mcp import everything -c rein.toml --tool echo --tool add  # only these two
  rein mcp import everything -c rein.toml --json                  # definitions, digests, hints, changed pins")]
    Import(import::ImportArgs),
}

/// Runs `rein mcp`.
///
/// # Errors
///
/// What the subcommand reports.
pub fn run(args: McpArgs) -> Result<ExitCode> {
    match args.command {
        McpCommand::Serve(args) => serve::run(args),
        McpCommand::Import(args) => import::run(args),
    }
}
