//! Issue 15's fairness bound as end-to-end figures: a quiet tenant's
//! queue wait (p50, p99), alone and behind a noisy tenant's flowing
//! backlog, on the bench profile's optimised `rein serve`. The harness and
//! what it measures are described in `tests/queue_wait/mod.rs`.
//!
//! ```text
//! cargo bench -p rein-cli --bench queue_wait [-- --backlog N] [--quiet-runs N]
//!     [--workers N] [--desk-ms MS[,MS…]] [--json]
//! ```
//!
//! Each desk delay is measured with the tenant floor kept and, in a build
//! with crash points (the bench's `rein` has them: rein-cli's
//! dev-dependencies enable them), lent like the rest (`no_tenant_floor`),
//! the baseline of the same run. Exits 2 when the harness fails.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};

#[path = "../tests/queue_wait/mod.rs"]
mod queue_wait;

use queue_wait::{QueueWaitConfig, QueueWaitReport};

/// Parses the arguments after `--`; `cargo bench` adds `--bench`, which is
/// ignored.
fn parse(args: impl Iterator<Item = String>) -> Result<(QueueWaitConfig, Vec<u64>, bool)> {
    let mut config = QueueWaitConfig::default();
    let mut desk_ms = vec![0, 20];
    let mut json = false;
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--bench" => {}
            "--json" => json = true,
            "--backlog" => config.backlog = value("--backlog")?.parse().context("--backlog")?,
            "--quiet-runs" => {
                config.quiet_runs = value("--quiet-runs")?.parse().context("--quiet-runs")?;
            }
            "--workers" => config.workers = value("--workers")?.parse().context("--workers")?,
            "--desk-ms" => {
                desk_ms = value("--desk-ms")?
                    .split(',')
                    .map(|ms| ms.trim().parse().context("--desk-ms takes MS[,MS…]"))
                    .collect::<Result<_>>()?;
            }
            other => bail!("unknown argument {other:?}"),
        }
    }
    Ok((config, desk_ms, json))
}

async fn measure(config: QueueWaitConfig, desk_ms: &[u64]) -> Result<Vec<QueueWaitReport>> {
    let rein = Path::new(env!("CARGO_BIN_EXE_rein"));
    let mut sabotages = vec![""];
    if rein_engine::crash::ENABLED {
        sabotages.push("no_tenant_floor");
    }
    let mut reports = Vec::new();
    for &ms in desk_ms {
        for sabotage in &sabotages {
            let config = QueueWaitConfig {
                desk_delay: Duration::from_millis(ms),
                sabotage: (*sabotage).to_owned(),
                ..config.clone()
            };
            let report = queue_wait::run(rein, config).await?;
            eprintln!("{report}");
            reports.push(report);
        }
    }
    Ok(reports)
}

fn table(reports: &[QueueWaitReport]) -> String {
    let p = QueueWaitReport::percentile;
    let mut out = String::from(
        "| desk | floor | idle p50 | idle p99 | loaded p50 | loaded p99 | p99 ratio | run ends waited (max) |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in reports {
        out.push_str(&format!(
            "| {} ms | {} | {} ms | {} ms | {} ms | {} ms | {:.2} | {} |\n",
            r.config.desk_delay.as_millis(),
            if r.config.sabotage.is_empty() {
                "kept"
            } else {
                "lent"
            },
            p(&r.idle_ms, 50),
            p(&r.idle_ms, 99),
            p(&r.loaded_ms, 50),
            p(&r.loaded_ms, 99),
            r.p99_ratio(),
            r.ends_waited_for.iter().max().unwrap_or(&0),
        ));
    }
    out
}

fn main() -> ExitCode {
    let (config, desk_ms, json) = match parse(std::env::args().skip(1)) {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("queue_wait: {e:#}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("queue_wait: cannot start a runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let reports = match runtime.block_on(measure(config, &desk_ms)) {
        Ok(reports) => reports,
        Err(e) => {
            eprintln!("queue_wait: {e:#}");
            return ExitCode::from(2);
        }
    };
    if json {
        match serde_json::to_string_pretty(&reports) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("queue_wait: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        print!("{}", table(&reports));
    }
    ExitCode::SUCCESS
}
