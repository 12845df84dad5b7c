//! `rein chaos`: run the chaos suite and report invariants and mechanism
//! activation.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use rein_chaos::invariant::Invariant;
use rein_chaos::{
    RunnerOptions, Scenario, ScenarioResult, StoreBackend, Summary, catalog, run_scenario,
};
use serde_json::json;

use crate::run::runtime;

/// Arguments of `rein chaos`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  rein chaos --list                          # the catalog
  rein chaos --scenario C018 --keep          # one scenario, its directory kept for a post mortem
  rein chaos --sample 5 --seed 42            # five at random; the same five again with this seed
  rein chaos --all --include-long --store postgres://root@127.0.0.1:5432/postgres --json")]
pub struct ChaosArgs {
    /// Scenarios to run, by id (`7` or `C007`); repeatable.
    #[arg(long = "scenario", short, value_name = "ID", conflicts_with = "all")]
    scenarios: Vec<String>,
    /// Run the whole catalog (sustained scenarios only with --include-long).
    #[arg(long)]
    all: bool,
    /// Also run sustained-failure scenarios (marked `long`).
    #[arg(long)]
    include_long: bool,
    /// Run N scenarios chosen at random from the selection; the choice is
    /// reproducible with --seed, the scenarios' parameters never vary.
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    sample: Option<usize>,
    /// The seed of --sample.
    #[arg(long, default_value_t = 0, requires = "sample")]
    seed: u64,
    /// List the catalog and exit.
    #[arg(long)]
    list: bool,
    /// Keep each scenario's directory (config, SQLite file) for a post
    /// mortem, and with --store postgres://… its database.
    #[arg(long)]
    keep: bool,
    /// Where each scenario's store lives: `sqlite` (a file in its
    /// directory), or `postgres://…` naming a server on which each scenario
    /// gets a database of its own, created for it and dropped after it
    /// (the URL's database is only where the suite connects to do that).
    #[arg(long, value_name = "sqlite|URL", default_value = "sqlite")]
    store: String,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    json: bool,
    /// Internal: drive one crash scenario's run in this process.
    #[arg(long, hide = true, value_name = "DIR")]
    worker: Option<PathBuf>,
    /// Internal: the run id of --worker.
    #[arg(long, hide = true, requires = "worker")]
    run_id: Option<String>,
    /// Internal: the store of --worker (a SQLite file, or a database URL).
    #[arg(long, hide = true, requires = "worker")]
    data: Option<PathBuf>,
    /// Internal: --worker continues the run (after a human's decision)
    /// instead of starting it.
    #[arg(long, hide = true, requires = "worker")]
    resume: bool,
}

fn parse_id(text: &str) -> Result<u32> {
    let digits = text.trim().trim_start_matches(['C', 'c']);
    digits
        .parse()
        .with_context(|| format!("--scenario {text}: expected a number such as 7 or C007"))
}

/// The scenarios the arguments select.
fn select(args: &ChaosArgs) -> Result<Vec<Scenario>> {
    let all = catalog();
    let mut chosen: Vec<Scenario> = if args.scenarios.is_empty() {
        if !args.all && !args.list && args.sample.is_none() {
            bail!("say which scenarios to run: --all, --scenario ID, or --sample N (see --list)");
        }
        all.into_iter()
            .filter(|s| args.include_long || args.list || !s.long)
            .collect()
    } else {
        let mut out = Vec::new();
        for text in &args.scenarios {
            let id = parse_id(text)?;
            let Some(s) = all.iter().find(|s| s.id == id) else {
                bail!(
                    "--scenario {text}: no such scenario in catalog version {} (see rein chaos --list)",
                    rein_chaos::CATALOG_VERSION
                );
            };
            out.push(s.clone());
        }
        out
    };
    if let Some(n) = args.sample {
        use rand::SeedableRng;
        use rand::seq::SliceRandom;
        let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
        chosen.shuffle(&mut rng);
        chosen.truncate(n);
        chosen.sort_by_key(|s| s.id);
    }
    Ok(chosen)
}

/// Runs `rein chaos`. Exit status: 0 when every invariant held, 1 on any
/// violation, 2 when the suite could not run.
pub fn run(args: ChaosArgs) -> Result<ExitCode> {
    if let Some(dir) = &args.worker {
        return worker(&args, dir);
    }
    let scenarios = select(&args)?;
    if args.list {
        list(&scenarios, args.json);
        return Ok(ExitCode::SUCCESS);
    }
    let options = RunnerOptions {
        rein_exe: Some(std::env::current_exe().context("cannot locate the rein binary")?),
        engine_hook: None,
        keep_dirs: args.keep,
        store: StoreBackend::parse(&args.store)?,
    };
    let progress = if args.json || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new(scenarios.len() as u64);
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    };
    let results: Vec<ScenarioResult> = runtime()?.block_on(async {
        let mut results = Vec::new();
        for s in &scenarios {
            progress.set_message(format!("{} {}", s.label(), s.name));
            results.push(run_scenario(s, &options).await);
            progress.inc(1);
        }
        results
    });
    progress.finish_and_clear();
    let summary = Summary::of(&results);
    if args.json {
        let doc = json!({"summary": summary, "scenarios": results});
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", render(&results, &summary));
    }
    Ok(if summary.violations > 0 {
        ExitCode::from(1)
    } else if summary.errors > 0 {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

fn worker(args: &ChaosArgs, dir: &std::path::Path) -> Result<ExitCode> {
    let [id] = args.scenarios.as_slice() else {
        bail!("--worker needs exactly one --scenario");
    };
    let id = parse_id(id)?;
    let run_id = args.run_id.as_deref().context("--worker needs --run-id")?;
    let data = args.data.as_deref().context("--worker needs --data")?;
    let outcome =
        runtime()?.block_on(rein_chaos::worker::work(id, dir, run_id, data, args.resume))?;
    crate::log::note(
        crate::log::Level::Warn,
        &format!("worker: the run ended {outcome} without reaching its crash point"),
    );
    Ok(ExitCode::SUCCESS)
}

fn list(scenarios: &[Scenario], json_out: bool) {
    if json_out {
        let doc: Vec<_> = scenarios
            .iter()
            .map(|s| {
                json!({"id": s.label(), "layer": s.layer.name(), "name": s.name, "long": s.long,
                       "description": s.description,
                       "risks": s.risks.iter().map(ToString::to_string).collect::<Vec<_>>(),
                       "expects": s.expects.iter().map(|m| m.name()).collect::<Vec<_>>()})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        return;
    }
    println!(
        "chaos catalog version {} — every scenario is checked against all thirteen invariants:",
        rein_chaos::CATALOG_VERSION
    );
    for i in Invariant::ALL {
        println!("  {i:<4} {}", i.describe());
    }
    println!();
    for s in scenarios {
        let long = if s.long { " [long]" } else { "" };
        println!("{}  {:<13} {}{long}", s.label(), s.layer.name(), s.name);
        println!("      {}", s.description);
        let risks: Vec<String> = s.risks.iter().map(ToString::to_string).collect();
        let expects: Vec<&str> = s.expects.iter().map(|m| m.name()).collect();
        println!(
            "      risks {}{}",
            risks.join(" "),
            if expects.is_empty() {
                String::new()
            } else {
                format!(" · expects {}", expects.join(", "))
            }
        );
    }
}

fn render(results: &[ScenarioResult], summary: &Summary) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<5} {:<13} {:<36} {:<26} {:<12} mechanisms activated",
        "id", "layer", "scenario", "outcome", "invariants"
    );
    for r in results {
        let outcome = if let Some(why) = &r.skipped {
            format!("skipped ({why})")
        } else if let Some(e) = &r.error {
            format!("error: {e}")
        } else {
            r.outcomes.join(",")
        };
        let invariants = if r.skipped.is_some() || r.error.is_some() {
            "-".to_owned()
        } else if r.violations.is_empty() {
            "held".to_owned()
        } else {
            let mut broken: Vec<Invariant> = r.violations.iter().map(|v| v.invariant).collect();
            broken.sort();
            broken.dedup();
            let names: Vec<String> = broken.iter().map(ToString::to_string).collect();
            format!("VIOLATED {}", names.join(","))
        };
        let mut mechanisms: Vec<String> = r.activated.iter().map(|m| m.to_string()).collect();
        mechanisms.extend(r.missing.iter().map(|m| format!("!{m}")));
        let _ = writeln!(
            out,
            "{:<5} {:<13} {:<36} {:<26} {:<12} {}",
            r.label,
            r.layer,
            truncate(&r.name, 36),
            truncate(&outcome, 26),
            invariants,
            mechanisms.join(" ")
        );
    }
    let _ = writeln!(
        out,
        "\nmechanism activation across {} scenarios:",
        summary.ran
    );
    for a in &summary.activation {
        let _ = writeln!(
            out,
            "  {:<24} {:>3} scenarios  {:>5.1}%",
            a.mechanism.name(),
            a.scenarios,
            a.rate * 100.0
        );
    }
    let _ = writeln!(
        out,
        "\n{} scenarios run, {} skipped, {} harness errors; {} runs: {}",
        summary.ran,
        summary.skipped,
        summary.errors,
        summary.runs,
        summary
            .outcomes
            .iter()
            .map(|(o, n)| format!("{n} {o}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if !summary.never_fired.is_empty() {
        let names: Vec<&str> = summary.never_fired.iter().map(|m| m.name()).collect();
        let _ = writeln!(out, "never fired (a finding): {}", names.join(", "));
    }
    if summary.findings > 0 {
        let _ = writeln!(
            out,
            "{} scenarios missed a mechanism they expect (marked !name above)",
            summary.findings
        );
    }
    for r in results {
        if let Some(e) = &r.error {
            let _ = writeln!(out, "HARNESS ERROR {}: {e}", r.label);
        }
    }
    for r in results.iter().filter(|r| r.violated()) {
        for v in &r.violations {
            let _ = writeln!(
                out,
                "VIOLATION {} {} ({}): {}{}",
                r.label,
                v.invariant,
                v.invariant.describe(),
                v.detail,
                v.run_id
                    .as_ref()
                    .map(|id| format!(" [run {id}]"))
                    .unwrap_or_default()
            );
        }
    }
    let _ = writeln!(
        out,
        "{}",
        if summary.violations == 0 {
            "all invariants held".to_owned()
        } else {
            format!("{} invariant violations", summary.violations)
        }
    );
    out
}

fn truncate(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_owned()
    } else {
        let mut s: String = text.chars().take(width.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

/// `--sample`'s count: a sample of no scenario is a mistake, not a run.
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}
