//! `rein schema`: the JSON Schema of the config, for editors.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

/// Arguments of `rein schema`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  rein schema > rein.schema.json           # then `#:schema ./rein.schema.json` atop rein.toml
  rein schema --output .vscode/rein.schema.json

Editors with taplo (Even Better TOML in VS Code, taplo's language server) \
complete keys and flag a misspelt one from it. It states the tables, keys, \
types and enums rein reads; `rein check` checks everything else.")]
pub struct SchemaArgs {
    /// Write the schema to FILE instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// Prints or writes the schema.
pub fn run(args: SchemaArgs) -> Result<()> {
    let schema = rein_core::registry::config_json_schema();
    let mut text = serde_json::to_string_pretty(&schema).context("serializing the schema")?;
    text.push('\n');
    match args.output {
        Some(path) => {
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?
        }
        None => print!("{text}"),
    }
    Ok(())
}
