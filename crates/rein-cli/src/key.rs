//! `rein key`: derive an idempotency key.

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use rein_core::idempotency::{IdempotencyKey, Normalizer, NormalizerConfig};
use rein_core::{IntentId, TenantId, ToolClass};

/// Arguments of `rein key`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  rein key --tenant default --intent INTENT_ID --tool get_order --class read '{\"order_id\": \"A-1001\"}'
  rein key --tenant acme --intent INTENT_ID --tool update_delivery_time --json \\
    '{\"order_id\": \"A-1001\", \"delivery_date\": \"2026-01-08T14:00:00Z\"}'   # with the canonical arguments
  rein key --tenant acme --intent INTENT_ID --tool update_delivery_time --volatile note \\
    '{\"order_id\": \"A-1001\", \"delivery_date\": \"2026-01-08T14:00:00Z\", \"note\": \"x\"}'   # the same key: note dropped

The intent id of a call is in its run's ledger (`rein runs ledger RUN_ID --json`).")]
pub struct KeyArgs {
    /// The tenant the run belongs to.
    #[arg(long)]
    tenant: String,
    /// The intent id assigned when the call was planned.
    #[arg(long)]
    intent: String,
    /// The tool's registry name.
    #[arg(long)]
    tool: String,
    /// The tool's class; irreversible tools have no key.
    #[arg(long, value_enum, default_value_t = Class::IdempotentWrite)]
    class: Class,
    /// Extra field names to drop before digesting (besides trace_id,
    /// request_id and names beginning with `_`).
    #[arg(long = "volatile", value_name = "FIELD")]
    volatile: Vec<String>,
    /// Field names whose string values are compared without case.
    #[arg(long = "case-insensitive", value_name = "FIELD")]
    case_insensitive: Vec<String>,
    /// Print the key and the canonical arguments as JSON.
    #[arg(long)]
    json: bool,
    /// The call's arguments, as a JSON object.
    args: String,
}

/// Spelled as config and JSON spell a class (`idempotent_write`); the
/// kebab-case spelling clap would choose is kept as an alias.
#[derive(Debug, Clone, Copy, ValueEnum)]
#[value(rename_all = "snake_case")]
enum Class {
    Read,
    #[value(alias = "idempotent-write")]
    IdempotentWrite,
    Irreversible,
}

impl From<Class> for ToolClass {
    fn from(c: Class) -> Self {
        match c {
            Class::Read => ToolClass::Read,
            Class::IdempotentWrite => ToolClass::IdempotentWrite,
            Class::Irreversible => ToolClass::Irreversible,
        }
    }
}

/// Runs `rein key`.
pub fn run(a: KeyArgs) -> Result<()> {
    let tenant = TenantId::new(a.tenant).context("invalid --tenant")?;
    let intent = IntentId::new(a.intent).context("invalid --intent")?;
    let args: serde_json::Value =
        serde_json::from_str(&a.args).context("ARGS must be a JSON value")?;
    let mut config = NormalizerConfig::default();
    config.volatile_fields.extend(a.volatile);
    config.case_insensitive_fields.extend(a.case_insensitive);
    let normalizer = Normalizer::new(config);
    let canonical = String::from_utf8_lossy(&normalizer.canonical_json(&args)).into_owned();
    let class = ToolClass::from(a.class);
    let key = IdempotencyKey::derive(class, &tenant, &intent, &a.tool, &args, &normalizer);
    if a.json {
        let out = serde_json::json!({
            "key": key.as_ref().map(IdempotencyKey::as_str),
            "class": class,
            "canonical_args": canonical,
        });
        println!("{out}");
        return Ok(());
    }
    match key {
        Some(key) => println!("{key}"),
        None => bail!(
            "{} tools have no idempotency key: they are never retried",
            class
        ),
    }
    Ok(())
}
