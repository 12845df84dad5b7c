//! `rein dev`: the example's services on loopback, for the README's
//! serving walk-through and for trying your own config against them.
//!
//! # Why in the binary
//!
//! The order desk and the mock model are what `rein demo`, the chaos suite
//! and the tests already run in-process; without a way to start them on
//! their own, the README's `ORDER_DESK_URL` and `MOCK_MODEL_URL` pointed at
//! nothing and a newcomer's first queued run failed with "no response".
//! The same code serves here, on fixed ports by default, until Ctrl-C.

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use rein_testkit::mock_model::{MockModel, MockModelConfig};
use rein_testkit::order_desk::{Faults, OrderDesk, OrderDeskConfig};

use crate::run::runtime;
use crate::signal::Listener;

/// The fault plan the order desk starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DeskFaults {
    /// None: every call succeeds at once.
    None,
    /// `rein demo`'s: the first delivery update applies but loses its
    /// answer; the email service answers 429 with a Retry-After of an hour.
    Demo,
}

/// Arguments of `rein dev`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  rein dev                                   # desk on :8080, model on :8081, until Ctrl-C
  rein dev --faults demo                     # the demo's lost answer and 429
  rein dev --desk-port 0 --model-port 0 --json   # any free ports, one JSON line with the URLs

Then, in another terminal, paste the exports it prints and run
  rein serve --config examples/order-desk

Faults can be changed while it runs: POST a plan to <desk>/_faults
(DELETE clears it); <desk>/_log is the desk's own side-effect log.
POST {\"replies\": [{\"kind\": \"rate_limited\", \"retry_after_s\": 2}, …]} to
<model>/_script queues the model's next answers (faults included).")]
pub struct DevArgs {
    /// The order desk's loopback port (0: any free port).
    #[arg(long, default_value_t = 8080)]
    desk_port: u16,
    /// The mock model's loopback port (0: any free port).
    #[arg(long, default_value_t = 8081)]
    model_port: u16,
    /// The fault plan the desk starts with.
    #[arg(long, value_enum, default_value_t = DeskFaults::None)]
    faults: DeskFaults,
    /// Print one JSON line with the services' URLs instead of the exports.
    #[arg(long)]
    json: bool,
}

/// Runs `rein dev`: starts both services, says where they are, and serves
/// until SIGINT or SIGTERM, then stops them (exit 0).
pub fn run(args: DevArgs) -> Result<ExitCode> {
    runtime()?.block_on(async {
        let mut signals = Listener::install()?;
        let faults = match args.faults {
            DeskFaults::None => Faults::none(),
            DeskFaults::Demo => Faults::demo(),
        };
        let desk = OrderDesk::start_with(
            OrderDeskConfig::default()
                .with_faults(faults)
                .with_port(args.desk_port),
        )
        .await
        .with_context(|| {
            format!(
                "cannot start the order desk on 127.0.0.1:{} (pass --desk-port 0 for any free port)",
                args.desk_port
            )
        })?;
        let model = MockModel::start_with(MockModelConfig::default().with_port(args.model_port))
            .await
            .with_context(|| {
                format!(
                    "cannot start the mock model on 127.0.0.1:{} (pass --model-port 0 for any free port)",
                    args.model_port
                )
            })?;
        if args.json {
            println!(
                "{}",
                serde_json::json!({
                    "order_desk_url": desk.base_url(),
                    "mock_model_url": model.base_url(),
                    "faults": format!("{:?}", args.faults).to_lowercase(),
                })
            );
        } else {
            println!(
                "order desk at {} (faults: {}), mock model at {} (OpenAI and Anthropic formats)\n",
                desk.base_url(),
                format!("{:?}", args.faults).to_lowercase(),
                model.base_url()
            );
            println!("in another terminal:");
            println!(
                "  export ORDER_DESK_URL={} MOCK_MODEL_URL={}",
                desk.base_url(),
                model.base_url()
            );
            println!("  rein serve --config examples/order-desk\n");
            println!(
                "the desk's side-effect log: curl -s {}/_log   (Ctrl-C stops both)",
                desk.base_url()
            );
        }
        let stop = signals.next().await;
        tracing::info!(signal = stop.name(), "stopping the dev services");
        let (desk, model) = tokio::join!(desk.shutdown(), model.shutdown());
        desk.context("the order desk did not stop cleanly")?;
        model.context("the mock model did not stop cleanly")?;
        Ok(ExitCode::SUCCESS)
    })
}
