//! Durable step commits per second through the Store API (issue 17), on
//! SQLite and on PostgreSQL, from one process and from three processes
//! sharing the store, and what PostgreSQL's `NOTIFY` in each commit costs.
//!
//! ```text
//! cargo bench -p rein-cli --bench store_commits [-- --rounds N] [--commits N] [--writers N]
//! ```
//!
//! Each process runs `--writers` committers (8: a node's queue workers),
//! each committing `--commits` steps (100) of a run of its own; a commit is
//! what a step of a run writes: a ledger declaration, two events and a
//! checkpoint, in one transaction. The processes are this binary started
//! again (`REIN_BENCH_COMMITTER`): each opens the store, creates its runs
//! and says it is ready; the parent then says go to all at once and
//! times from go until the last one is done, so startup is not counted.
//!
//! Every round measures every shape once, in turn, so a change of the
//! machine's load hits all of them alike; the report gives the median of
//! `--rounds` (5) rounds, and each shape's ratio to the baseline measured
//! in the same run: one process on SQLite. The `NOTIFY` cost is the ratio
//! of PostgreSQL with `PostgresOptions::notify` off to on, same process
//! count. PostgreSQL is the machine's (`REIN_TEST_POSTGRES_URL`, a scratch
//! database per shape); without one only SQLite is measured.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rein_core::RunId;
use rein_store::Store;
use rein_store::conformance::{workload_run, workload_step};
use rein_store_postgres::scratch::ScratchDatabase;
use rein_store_postgres::{PostgresOptions, PostgresStore};
use rein_store_sqlite::SqliteStore;

/// Set in a committer process: `<data> <writers> <commits> <tag> <notify>`.
const COMMITTER_ENV: &str = "REIN_BENCH_COMMITTER";

/// What one round measures, in turn.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Shape {
    postgres: bool,
    processes: usize,
    notify: bool,
}

impl Shape {
    fn name(self) -> String {
        let backend = if self.postgres {
            if self.notify {
                "postgres notify on"
            } else {
                "postgres notify off"
            }
        } else {
            "sqlite"
        };
        format!(
            "{backend:<20} {} process{}",
            self.processes,
            if self.processes == 1 { " " } else { "es" }
        )
    }
}

struct Settings {
    rounds: usize,
    commits: u32,
    writers: usize,
}

fn parse(args: impl Iterator<Item = String>) -> Result<Settings> {
    let mut settings = Settings {
        rounds: 5,
        commits: 100,
        writers: 8,
    };
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--bench" => {}
            "--rounds" => settings.rounds = value("--rounds")?.parse().context("--rounds")?,
            "--commits" => settings.commits = value("--commits")?.parse().context("--commits")?,
            "--writers" => settings.writers = value("--writers")?.parse().context("--writers")?,
            other => bail!("unknown argument {other:?}"),
        }
    }
    if settings.rounds == 0 || settings.commits == 0 || settings.writers == 0 {
        bail!("--rounds, --commits and --writers must be at least 1");
    }
    Ok(settings)
}

fn run_id(tag: &str, writer: usize) -> RunId {
    RunId::new(format!("bench-{tag}-{writer}")).unwrap()
}

async fn open(data: &str, notify: bool) -> Result<Arc<dyn Store>> {
    if rein_store_postgres::is_postgres_url(data) {
        let url = rein_store_postgres::PostgresUrl::parse(data)?;
        let options = PostgresOptions {
            notify,
            ..PostgresOptions::default()
        };
        Ok(Arc::new(PostgresStore::connect_with(&url, options).await?))
    } else {
        Ok(Arc::new(SqliteStore::open(data)?))
    }
}

/// A committer process: creates its runs, says `ready`, waits for `go`,
/// commits, says `done`.
async fn committer(spec: &str) -> Result<()> {
    let parts: Vec<&str> = spec.split(' ').collect();
    let [data, writers, commits, tag, notify] = parts.as_slice() else {
        bail!("{COMMITTER_ENV} is {spec:?}");
    };
    let (writers, commits): (usize, u32) = (writers.parse()?, commits.parse()?);
    let store = open(data, *notify == "on").await?;
    for writer in 0..writers {
        store.create_run(workload_run(run_id(tag, writer))).await?;
    }
    // One commit per writer first, so every pooled connection is open.
    for writer in 0..writers {
        let run = run_id(tag, writer);
        store.commit_step(&run, workload_step(&run, 1)).await?;
    }
    println!("ready");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let tasks: Vec<_> = (0..writers)
        .map(|writer| {
            let store = store.clone();
            let run = run_id(tag, writer);
            tokio::spawn(async move {
                for step in 2..=commits + 1 {
                    store.commit_step(&run, workload_step(&run, step)).await?;
                }
                Ok::<_, rein_store::StoreError>(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    println!("done");
    Ok(())
}

/// One measurement: `shape.processes` committers on `data`; commits per
/// second from go to the last done.
fn measure(shape: Shape, data: &str, settings: &Settings, round: usize) -> Result<f64> {
    let exe = std::env::current_exe()?;
    let mut children: Vec<(Child, BufReader<std::process::ChildStdout>)> = Vec::new();
    for process in 0..shape.processes {
        let tag = format!("r{round}p{process}{}", if shape.notify { "n" } else { "q" });
        let spec = format!(
            "{data} {} {} {tag} {}",
            settings.writers,
            settings.commits,
            if shape.notify { "on" } else { "off" }
        );
        let mut child = Command::new(&exe)
            .env(COMMITTER_ENV, spec)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = BufReader::new(child.stdout.take().context("stdout")?);
        children.push((child, stdout));
    }
    for (_, stdout) in &mut children {
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        if line.trim() != "ready" {
            bail!("a committer did not get ready: {line:?}");
        }
    }
    let started = Instant::now();
    for (child, _) in &mut children {
        writeln!(child.stdin.as_mut().context("stdin")?, "go")?;
    }
    for (child, stdout) in &mut children {
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        if line.trim() != "done" {
            bail!("a committer failed: {line:?}");
        }
        child.wait()?;
    }
    let elapsed = started.elapsed().max(Duration::from_micros(1));
    let total = f64::from(settings.commits) * (settings.writers * shape.processes) as f64;
    Ok(total / elapsed.as_secs_f64())
}

fn median(rates: &mut [f64]) -> f64 {
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

async fn main_async(settings: Settings) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut shapes: Vec<(Shape, String)> = Vec::new();
    for processes in [1, 3] {
        // One file per shape, created here so no committer migrates.
        let path = dir.path().join(format!("rein-{processes}.db"));
        SqliteStore::open(&path)?;
        shapes.push((
            Shape {
                postgres: false,
                processes,
                notify: false,
            },
            path.display().to_string(),
        ));
    }
    let mut databases = Vec::new();
    'postgres: for notify in [true, false] {
        for processes in [1, 3] {
            let Some(database) = ScratchDatabase::create("bench_store_commits").await else {
                println!("postgres skipped: no server");
                break 'postgres;
            };
            PostgresStore::connect(&database.url_text()).await?.close();
            shapes.push((
                Shape {
                    postgres: true,
                    processes,
                    notify,
                },
                database.url_text(),
            ));
            databases.push(database);
        }
    }
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); shapes.len()];
    let measured = tokio::task::block_in_place(|| -> Result<()> {
        for round in 0..settings.rounds {
            for (i, (shape, data)) in shapes.iter().enumerate() {
                rates[i].push(measure(*shape, data, &settings, round)?);
            }
        }
        Ok(())
    });
    for database in databases {
        database.drop_database().await;
    }
    measured?;
    let medians: Vec<f64> = rates.iter_mut().map(|r| median(r)).collect();
    let baseline = medians[0];
    println!(
        "durable step commits/s, {} writers per process, {} commits each, median of {} rounds \
         (baseline: sqlite, 1 process)",
        settings.writers, settings.commits, settings.rounds
    );
    for (((shape, _), median), rates) in shapes.iter().zip(&medians).zip(&rates) {
        println!(
            "  {}  median {:>6.0}/s  ×{:.2} baseline  (min {:.0}, max {:.0})",
            shape.name(),
            median,
            median / baseline,
            rates[0],
            rates[rates.len() - 1]
        );
    }
    for processes in [1, 3] {
        let find = |notify: bool| {
            shapes
                .iter()
                .position(|(s, _)| {
                    *s == Shape {
                        postgres: true,
                        processes,
                        notify,
                    }
                })
                .map(|i| medians[i])
        };
        if let (Some(on), Some(off)) = (find(true), find(false)) {
            println!(
                "  NOTIFY cost, {processes} process(es): notify off/on ×{:.2} ({:+.1}% commits/s without it)",
                off / on,
                (off / on - 1.0) * 100.0
            );
        }
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let result = match std::env::var(COMMITTER_ENV) {
        Ok(spec) => runtime.block_on(committer(&spec)),
        Err(_) => match parse(std::env::args().skip(1)) {
            Ok(settings) => runtime.block_on(main_async(settings)),
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("store_commits: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
