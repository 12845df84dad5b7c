//! End-to-end runs per second on SQLite and on PostgreSQL, with one and
//! with three `rein serve` processes sharing the store (issue 17).
//!
//! ```text
//! cargo bench -p rein-cli --bench store_runs [-- --rounds N] [--runs N] [--workers N]
//!     [--fault-every N]
//! ```
//!
//! Each measurement is the bounded load harness of `tests/load/mod.rs`
//! (what `serve_load` runs): real `rein serve` processes on the example
//! config, a real order desk on loopback faulting every `--fault-every`-th
//! request of each tool (10 = 10%), `--runs` (100) queued runs submitted
//! through the HTTP API, timed from the first submission until every run
//! is seen terminal; then every run is checked (none lost, none executed
//! twice, against the desk's own log). Each process has `--workers` (8)
//! queue workers, so three processes have three times the workers: the
//! figure is what adding nodes gives.
//!
//! Every round measures every shape once, in turn, on a fresh store (a
//! SQLite file, or a scratch database on the machine's PostgreSQL,
//! `REIN_TEST_POSTGRES_URL`), so a change of the machine's load hits all
//! of them alike. The report gives the median of `--rounds` (3) rounds and
//! each shape's ratio to the baseline measured in the same run: one
//! process on SQLite. Exits 1 when a run was lost or executed twice, 2
//! when the harness fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::num::NonZeroU32;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use rein_store_postgres::scratch::ScratchDatabase;

#[path = "../tests/load/mod.rs"]
mod load;

struct Settings {
    rounds: usize,
    runs: usize,
    workers: u32,
    fault_every: NonZeroU32,
}

fn parse(args: impl Iterator<Item = String>) -> Result<Settings> {
    let mut settings = Settings {
        rounds: 3,
        runs: 100,
        workers: 8,
        fault_every: NonZeroU32::MIN.saturating_add(9),
    };
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--bench" => {}
            "--rounds" => settings.rounds = value("--rounds")?.parse().context("--rounds")?,
            "--runs" => settings.runs = value("--runs")?.parse().context("--runs")?,
            "--workers" => settings.workers = value("--workers")?.parse().context("--workers")?,
            "--fault-every" => {
                settings.fault_every = value("--fault-every")?
                    .parse()
                    .context("--fault-every must be at least 1")?;
            }
            other => bail!("unknown argument {other:?}"),
        }
    }
    if settings.rounds == 0 || settings.runs == 0 || settings.workers == 0 {
        bail!("--rounds, --runs and --workers must be at least 1");
    }
    Ok(settings)
}

/// One measurement; `None` when PostgreSQL is asked for and absent.
async fn measure(
    postgres: bool,
    servers: usize,
    settings: &Settings,
) -> Result<Option<load::LoadReport>> {
    let database = if postgres {
        match ScratchDatabase::create("bench_store_runs").await {
            Some(database) => Some(database),
            None => return Ok(None),
        }
    } else {
        None
    };
    let config = load::LoadConfig {
        runs: settings.runs,
        servers,
        workers: settings.workers,
        client_concurrency: 16,
        fault_every: settings.fault_every,
        postgres: database.as_ref().map(ScratchDatabase::url_text),
        ..load::LoadConfig::default()
    };
    let report = load::run(config).await;
    if let Some(database) = database {
        database.drop_database().await;
    }
    Ok(Some(report?))
}

async fn main_async(settings: Settings) -> Result<bool> {
    let shapes = [(false, 1), (false, 3), (true, 1), (true, 3)];
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); shapes.len()];
    let mut clean = true;
    for round in 0..settings.rounds {
        for (i, &(postgres, servers)) in shapes.iter().enumerate() {
            let Some(report) = measure(postgres, servers, &settings).await? else {
                continue;
            };
            eprintln!(
                "round {}: {} × {servers}: {:.1} runs/s, {} lost, {} executed twice",
                round + 1,
                if postgres { "postgres" } else { "sqlite" },
                report.throughput_runs_per_sec,
                report.lost,
                report.duplicated()
            );
            if !report.is_clean() {
                clean = false;
                eprint!("{report}");
            }
            rates[i].push(report.throughput_runs_per_sec);
        }
    }
    let medians: Vec<Option<f64>> = rates
        .iter_mut()
        .map(|r| {
            r.sort_by(f64::total_cmp);
            r.get(r.len() / 2).copied()
        })
        .collect();
    let baseline = medians[0].context("the baseline was not measured")?;
    println!(
        "end-to-end runs/s: {} queued runs per round, {} workers per process, every {}th tool \
         request faulted, median of {} rounds (baseline: sqlite, 1 process)",
        settings.runs, settings.workers, settings.fault_every, settings.rounds
    );
    for ((&(postgres, servers), median), rates) in shapes.iter().zip(&medians).zip(&rates) {
        let name = format!(
            "{:<8} {servers} process{}",
            if postgres { "postgres" } else { "sqlite" },
            if servers == 1 { " " } else { "es" }
        );
        match median {
            Some(median) => println!(
                "  {name}  median {median:>6.1} runs/s  ×{:.2} baseline  (min {:.1}, max {:.1})",
                median / baseline,
                rates[0],
                rates[rates.len() - 1]
            ),
            None => println!("  {name}  skipped: no PostgreSQL server"),
        }
    }
    Ok(clean)
}

fn main() -> ExitCode {
    let settings = match parse(std::env::args().skip(1)) {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("store_runs: {e:#}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("store_runs: cannot start a runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(main_async(settings)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("store_runs: a run was lost or executed twice");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("store_runs: {e:#}");
            ExitCode::from(2)
        }
    }
}
