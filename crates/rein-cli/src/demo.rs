//! `rein demo`: the order-desk scenario, end to end, with no setup.

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use rein_core::TenantId;
use rein_engine::config::Loader;
use rein_testkit::order_desk::{EffectKind, Faults, OrderDesk, OrderDeskConfig};

use rein_engine::startup::Purpose;

use crate::run::{execute, is_demo_outcome, runtime, start_with};

/// The demo's config and model script, built into the binary so that the
/// demo needs no files.
const CONFIG: &str = include_str!("../../../examples/order-desk/rein.toml");
const SCRIPT: &str = include_str!("../../../examples/order-desk/demo.script.json");

/// Arguments of `rein demo`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  rein demo                                  # timeline, report and the desk's log; nothing kept
  rein demo --data /tmp/demo.db              # keep the run: rein runs list --data /tmp/demo.db
  rein demo --json > demo.json               # one JSON document: the run id, report, events and ledger")]
pub struct DemoArgs {
    /// Keep the run in this SQLite file instead of a temporary one.
    #[arg(long)]
    data: Option<std::path::PathBuf>,
    /// Print one JSON document instead of the timeline.
    #[arg(long)]
    json: bool,
}

/// Runs `rein demo`: starts the order desk on a loopback port with the
/// seed's faults (the first delivery update applies but its response is
/// lost; the email service answers 429 with a Retry-After of an hour), runs
/// the order-desk agent with its recorded model script, and prints the
/// timeline, the report and the desk's own side-effect log.
pub fn run(args: DemoArgs) -> Result<ExitCode> {
    let runtime = runtime()?;
    runtime.block_on(async {
        let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(Faults::demo()))
            .await
            .context("cannot start the order desk")?;
        let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
        let config_path = dir.path().join("rein.toml");
        std::fs::write(&config_path, CONFIG)?;
        std::fs::write(dir.path().join("demo.script.json"), SCRIPT)?;
        let desk_url = desk.base_url().to_owned();
        let loader = Loader::with_env(move |name: &str| match name {
            "ORDER_DESK_URL" => Some(desk_url.clone()),
            // The demo uses the scripted model; the OpenAI provider of the
            // example config is not called.
            "MOCK_MODEL_URL" => Some("http://127.0.0.1:9".to_owned()),
            _ => None,
        });
        let startup = start_with(&loader, &config_path, Purpose::Run)
            .context("the built-in demo config has problems")?;
        let data = args.data.clone().unwrap_or_else(|| dir.path().join("rein.db"));
        if !args.json {
            println!("rein demo — order desk at {} (faults: lost response on the first update, 429 on email)\n", desk.base_url());
        }
        let out = execute(
            startup,
            "order_desk",
            "Move the delivery of order A-1001 to 2026-01-08 14:00 UTC and tell the buyer.",
            &data,
            TenantId::new("demo")?,
            args.json,
            None,
        )
        .await?;
        if !args.json {
            println!("\nthe order desk's own side-effect log (ground truth):");
            let effects = desk.side_effects();
            if effects.is_empty() {
                println!("  (none)");
            }
            for e in &effects {
                let kind = match e.effect {
                    EffectKind::Applied => "applied",
                    EffectKind::Replayed => "replayed (duplicate collapsed, not applied)",
                };
                println!("  #{} {} {} — {}", e.seq, e.tool, e.args, kind);
            }
            let updates = desk.applied_count("update_delivery_time");
            let emails = desk.applied_count("send_email");
            println!(
                "\n  update_delivery_time applied {}; send_email sent {}",
                crate::timeline::count(updates, "time"),
                crate::timeline::count(emails, "email")
            );
            if let Some(path) = &args.data {
                println!("  the run is recorded in {}", path.display());
            }
        }
        let _ = desk.shutdown().await;
        Ok(if is_demo_outcome(&out.report) {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    })
}
