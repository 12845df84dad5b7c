//! `rein demo`: the order-desk scenario, end to end, with no setup.

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use rein_core::TenantId;
use rein_engine::config::Loader;
use rein_testkit::order_desk::{DeskLog, EffectKind, Faults, OrderDesk, OrderDeskConfig};

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
  rein demo --json > demo.json               # one JSON document: the run id, report, events and ledger
  rein demo --desk http://127.0.0.1:8080 --data /tmp/demo.db
                                             # against `rein dev --faults demo`'s desk, kept: then
                                             # do what the report recommends with the rein resume it prints")]
pub struct DemoArgs {
    /// Keep the run in this SQLite file instead of a temporary one (its
    /// config is kept beside it, in FILE.config/, for `rein resume`).
    #[arg(long, visible_alias = "db")]
    data: Option<std::path::PathBuf>,
    /// Use the order desk at this URL (`rein dev --faults demo` serves
    /// one) instead of one that lives only as long as the demo: with
    /// `--data`, the run can then be resumed against the same desk.
    #[arg(long, value_name = "URL")]
    desk: Option<String>,
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
        // The demo's own desk, unless one that outlives it was given.
        let own_desk = match &args.desk {
            Some(_) => None,
            None => Some(
                OrderDesk::start_with(OrderDeskConfig::default().with_faults(Faults::demo()))
                    .await
                    .context("cannot start the order desk")?,
            ),
        };
        let desk_url = match (&own_desk, &args.desk) {
            (Some(desk), _) => desk.base_url().to_owned(),
            (None, Some(url)) => url.trim_end_matches('/').to_owned(),
            (None, None) => unreachable!("the demo starts its own desk without --desk"),
        };
        let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
        // A kept run keeps its config beside it: `rein resume RUN` reads
        // the path the run recorded, so it must still be there. The URLs
        // are written into it, so it needs no environment.
        let config_dir = match &args.data {
            Some(data) => {
                let mut name = data.as_os_str().to_owned();
                name.push(".config");
                std::path::PathBuf::from(name)
            }
            None => dir.path().to_path_buf(),
        };
        std::fs::create_dir_all(&config_dir)
            .with_context(|| format!("cannot create {}", config_dir.display()))?;
        let config_path = config_dir.join("rein.toml");
        // The example's OpenAI provider is not called: the demo's agent
        // uses the scripted model.
        let config = CONFIG
            .replace("${ORDER_DESK_URL}", &desk_url)
            .replace("${MOCK_MODEL_URL}", "http://127.0.0.1:9");
        std::fs::write(&config_path, config)
            .with_context(|| format!("cannot write {}", config_path.display()))?;
        std::fs::write(config_dir.join("demo.script.json"), SCRIPT).with_context(|| {
            format!("cannot write the demo's script in {}", config_dir.display())
        })?;
        let loader = Loader::with_env(|_: &str| None);
        let startup = start_with(&loader, &config_path, Purpose::Run)
            .context("the built-in demo config has problems")?;
        let data = args
            .data
            .clone()
            .unwrap_or_else(|| dir.path().join("rein.db"));
        if !args.json {
            let faults = if own_desk.is_some() {
                " (faults: lost response on the first update, 429 on email)"
            } else {
                ""
            };
            println!("rein demo — order desk at {desk_url}{faults}\n");
        }
        let out = execute(
            startup,
            &config_path,
            "order_desk",
            "Move the delivery of order A-1001 to 2026-01-08 14:00 UTC and tell the buyer.",
            &data,
            TenantId::new("demo")?,
            args.json,
        )
        .await?;
        if !args.json {
            println!("\nthe order desk's own side-effect log (ground truth):");
            let log = match &own_desk {
                Some(desk) => Ok(desk.log()),
                None => desk_log(&desk_url).await,
            };
            match log {
                Ok(log) => print_effects(&log),
                Err(e) => println!("  (cannot read it: {e:#})"),
            }
            follow_up(&args, own_desk.is_some(), &out);
        }
        if let Some(desk) = own_desk {
            let _ = desk.shutdown().await;
        }
        Ok(if is_demo_outcome(&out.report) {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    })
}

/// The side-effect log of the desk at `url` (`GET /_log`).
async fn desk_log(url: &str) -> Result<DeskLog> {
    let body = reqwest::get(format!("{url}/_log"))
        .await?
        .error_for_status()?
        .text()
        .await?;
    Ok(serde_json::from_str(&body)?)
}

/// Prints the desk's side effects and the count of each kind the demo is
/// about.
fn print_effects(log: &DeskLog) {
    if log.side_effects.is_empty() {
        println!("  (none)");
    }
    for e in &log.side_effects {
        let kind = match e.effect {
            EffectKind::Applied => "applied",
            EffectKind::Replayed => "replayed (duplicate collapsed, not applied)",
        };
        println!("  #{} {} {} — {}", e.seq, e.tool, e.args, kind);
    }
    let applied = |tool: &str| {
        log.side_effects
            .iter()
            .filter(|e| e.tool == tool && e.effect == EffectKind::Applied)
            .count()
    };
    println!(
        "\n  update_delivery_time applied {}; send_email sent {}",
        rein_core::plural::count(applied("update_delivery_time"), "time"),
        rein_core::plural::count(applied("send_email"), "email")
    );
}

/// What to run to do what the report recommends: the commands, exactly,
/// when the run and the desk outlive the demo; otherwise how to keep them.
fn follow_up(args: &DemoArgs, own_desk: bool, out: &rein_engine::run::RunOutput) {
    // Only a run that its report says to retry has something to follow.
    let to_retry = out.report.recoverable && !out.report.incomplete.is_empty();
    let Some(data) = &args.data else {
        if to_retry {
            println!(
                "\n  the run and its order desk were temporary. To do what the report recommends, keep both:\n    rein dev --faults demo                     # in another terminal: the desk stays up\n    rein demo --desk http://127.0.0.1:8080 --data rein-demo.db"
            );
        }
        return;
    };
    println!("  the run is recorded in {}", data.display());
    if !to_retry {
        return;
    }
    if own_desk {
        println!(
            "  its order desk stopped with the demo: to resume it against a desk that stays up, run the demo with `rein dev --faults demo` in another terminal and --desk http://127.0.0.1:8080"
        );
        return;
    }
    let resume = crate::run::resume_recorded(&out.run_id, data);
    println!(
        "\n  to do what the report recommends, once the wait it names is over:\n    {resume}\n  or now, before the wait ends:\n    {resume} --now"
    );
}
