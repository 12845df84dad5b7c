//! `rein webhooks list` and `rein webhooks deliveries`: the configured
//! webhooks, and each one's delivery log, from a config and a store file
//! or through a `rein serve`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use rein_engine::config::Loader;
use rein_server::api::webhooks::WebhookView;
use rein_store::WebhookDelivery;

use crate::run::runtime;
use crate::runs::source::Source;

/// Arguments of `rein webhooks`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  rein webhooks list --config rein.toml
  rein webhooks deliveries ops                     # in rein-data/rein.db, newest first
  REIN_API_KEY=… rein webhooks deliveries ops --server https://rein.example.com --json")]
pub struct WebhooksArgs {
    #[command(subcommand)]
    command: WebhooksCommand,
    /// The SQLite file runs are recorded in (as `rein run --data`), or a
    /// PostgreSQL database: `postgres://user[:password]@host[:port]/db`.
    #[arg(
        long,
        visible_alias = "db",
        global = true,
        default_value = "rein-data/rein.db"
    )]
    data: PathBuf,
    /// Go through a `rein serve` at this URL instead: its webhooks, and the
    /// deliveries of the API key's tenant's runs.
    #[arg(long, global = true, value_name = "URL")]
    server: Option<String>,
    /// The API key for --server (never printed).
    #[arg(long, global = true, env = crate::runs::API_KEY_ENV, hide_env_values = true)]
    api_key: Option<String>,
    /// Print JSON.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum WebhooksCommand {
    /// List the configured webhooks: URL, events, outcomes, the variable
    /// holding the secret (never the secret), max age and timeout.
    #[command(after_help = "\
Examples:
  rein webhooks list --config rein.toml
  rein webhooks list --config /etc/rein --json
  REIN_API_KEY=… rein webhooks list --server https://rein.example.com")]
    List {
        /// The config (a TOML file or a directory of them); not with
        /// --server.
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// A webhook's delivery log, newest event first: each event's state
    /// (pending, delivered, given_up), attempts and last answer.
    #[command(after_help = "\
Examples:
  rein webhooks deliveries ops                    # in rein-data/rein.db, newest first
  rein webhooks deliveries ops --data /tmp/x.db --limit 10 --json
  REIN_API_KEY=… rein webhooks deliveries ops --server https://rein.example.com")]
    Deliveries {
        /// The webhook's name (`[webhooks.NAME]`).
        name: String,
        /// At most this many.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u16).range(1..=1000))]
        limit: u16,
    },
}

/// Runs `rein webhooks`.
pub fn run(args: WebhooksArgs) -> Result<ExitCode> {
    runtime()?.block_on(async {
        let source = || match &args.server {
            Some(url) => Source::server(url, args.api_key.clone()),
            None => Source::open_store(&args.data),
        };
        match &args.command {
            WebhooksCommand::List { config } => {
                let webhooks = match (config, &args.server) {
                    (Some(path), None) => {
                        let registry = Loader::new()
                            .load(path)
                            .map_err(|e| anyhow::anyhow!("{e}"))
                            .with_context(|| format!("cannot load {}", path.display()))?;
                        registry.webhooks().values().map(WebhookView::of).collect()
                    }
                    (None, Some(_)) => source()?.webhooks().await?,
                    _ => anyhow::bail!(
                        "pass --config (a config's webhooks) or --server (a server's), one of them"
                    ),
                };
                if args.json {
                    println!("{}", serde_json::to_string_pretty(&webhooks)?);
                } else {
                    print!("{}", list_table(&webhooks));
                }
            }
            WebhooksCommand::Deliveries { name, limit } => {
                let deliveries = source()?
                    .webhook_deliveries(name, usize::from(*limit))
                    .await?;
                if args.json {
                    println!("{}", serde_json::to_string_pretty(&deliveries)?);
                } else {
                    print!("{}", deliveries_table(name, &deliveries));
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

fn list_table(webhooks: &[WebhookView]) -> String {
    if webhooks.is_empty() {
        return "no webhooks configured\n".to_owned();
    }
    let mut out = format!(
        "{:<16} {:<40} {:<16} {}\n",
        "name", "url", "secret_env", "events"
    );
    for w in webhooks {
        let outcomes = w.outcomes.as_ref().map_or(String::new(), |o| {
            format!(" (run_finished: {})", o.join(", "))
        });
        out.push_str(&format!(
            "{:<16} {:<40} {:<16} {}{outcomes}\n",
            w.name,
            w.url,
            w.secret_env,
            w.events.join(", ")
        ));
    }
    out
}

fn deliveries_table(name: &str, deliveries: &[WebhookDelivery]) -> String {
    if deliveries.is_empty() {
        return format!("no deliveries of webhook {name}\n");
    }
    let mut out = format!(
        "{:<44} {:<18} {:<10} {:>8} {:<6} {}\n",
        "event", "type", "state", "attempts", "status", "last error"
    );
    for d in deliveries {
        out.push_str(&format!(
            "{:<44} {:<18} {:<10} {:>8} {:<6} {}\n",
            d.event_id,
            d.topic.as_str(),
            d.state.as_str(),
            d.attempts,
            d.last_status.map_or("-".to_owned(), |s| s.to_string()),
            d.last_error.as_deref().unwrap_or("")
        ));
    }
    out
}
