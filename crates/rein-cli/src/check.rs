//! `rein check CONFIG [--json]`: load a config and report every problem.
//!
//! Runs exactly what `rein run` and `rein serve` run at start —
//! [`rein_engine::startup::prepare`]: file reading, `${ENV}` interpolation,
//! the integrity check and numeric ranges, JSON Schema compilation, every
//! provider (scripts read), tool adapter, agent and model binding bound —
//! so a config that passes here starts there (with the same environment).
//! What only `rein serve` refuses is a warning, or an error with `--serve`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use rein_engine::config::{ConfigErrors, ConfigProblem, Loader, Registry};
use rein_engine::run::http_client;
use rein_engine::startup::{self, Purpose, Startup};
use serde_json::{Value, json};

use crate::log::{Level, note};

/// Arguments of `rein check`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  export ORDER_DESK_URL=http://127.0.0.1:8080 MOCK_MODEL_URL=http://127.0.0.1:8081   # what the example reads
  rein check examples/order-desk
  rein check examples/order-desk/rein.toml --explain   # and every limit each agent's runs get
  rein check examples/order-desk --serve --listen 0.0.0.0:8787 --json   # refused there: no API keys")]
pub struct CheckArgs {
    /// A config file, or a directory whose `*.toml` files form one config.
    #[arg(
        value_name = "CONFIG",
        required_unless_present = "config_flag",
        conflicts_with = "config_flag"
    )]
    config: Option<PathBuf>,
    /// The config, given as every other command takes it.
    #[arg(
        long = "config",
        short = 'c',
        id = "config_flag",
        value_name = "CONFIG"
    )]
    config_flag: Option<PathBuf>,
    /// Print one JSON document on stdout:
    /// `{"ok": bool, "problems": [{"file", "field", "message", "line"?, "column"?}], "warnings": [...]}`.
    #[arg(long)]
    json: bool,
    /// Check as `rein serve` starts: what only a server refuses (a
    /// non-loopback listen without API keys) is an error, not a warning.
    #[arg(long)]
    serve: bool,
    /// With `--serve`: the address `rein serve --listen` would be given
    /// (implies `--serve`).
    #[arg(long, value_name = "IP:PORT")]
    listen: Option<SocketAddr>,
    /// The run store `rein run`/`rein serve --data` would be given: a
    /// SQLite path, or a PostgreSQL URL whose form is checked (not
    /// connected to) and shown without its credentials.
    #[arg(long, visible_alias = "db", value_name = "DATA")]
    data: Option<PathBuf>,
    /// Also print, per agent, every limit its runs get: the effective
    /// budget (rein's defaults marked), calls per turn, retries, approval
    /// and its resource groups' rates and ceilings (`--json`: `explain`).
    #[arg(long)]
    explain: bool,
}

/// The TLS settings of the PostgreSQL store a start would open (`--data`
/// or `[store] url`, with `[store] ca_file`), as the start builds them:
/// the CA read and parsed, its combination with `sslmode` checked, nothing
/// connected to. A URL whose form is wrong is reported by the callers'
/// other checks, not here.
fn tls_problem(
    data: Option<&Path>,
    spec: Option<&rein_core::registry::StoreSpec>,
) -> Option<ConfigProblem> {
    let chosen = crate::store::chosen(data, spec);
    let Ok(crate::store::Data::Postgres(url)) = crate::store::Data::parse(&chosen) else {
        return None;
    };
    let ca_file = spec.and_then(|spec| spec.ca_file.as_deref());
    let error = url.connector(ca_file).err()?;
    let (file, field) = match (spec, data) {
        // The config's CA, the URL naming none: the CA (or its pairing
        // with the URL's sslmode) is the problem.
        (Some(spec), _) if ca_file.is_some() && url.tls().root_certs.is_none() => {
            (spec.file.display().to_string(), "store.ca_file")
        }
        (_, Some(data)) => (crate::store::shown(data), "--data"),
        (Some(spec), None) => (spec.file.display().to_string(), "store.url"),
        (None, None) => return None,
    };
    Some(ConfigProblem::new(file, field, format!("{error:#}")))
}

/// Checks the config; exit 0 when it starts, 1 when it has problems.
///
/// The problems are data when `--json` is given (stdout) and diagnostics
/// otherwise (stderr, one `FILE[:LINE:COLUMN]: FIELD: MESSAGE` per line).
/// Warnings (a secret too short to be redacted; without `--serve`, what
/// only `rein serve` would refuse) do not fail the check; they are printed
/// as `warning: FILE[:LINE:COLUMN]: FIELD: MESSAGE`, or listed under
/// `"warnings"`, with the problems or without. A problem has a line when
/// its field is written in its file (a missing field: its table's header);
/// what a flag gave (`--data`, `--listen`) has none.
pub fn run(args: CheckArgs) -> ExitCode {
    // clap requires exactly one of the two.
    let Some(config) = args.config.clone().or_else(|| args.config_flag.clone()) else {
        return ExitCode::from(2);
    };
    let purpose = if args.serve || args.listen.is_some() {
        Purpose::Serve {
            listen: args.listen,
        }
    } else {
        Purpose::Check
    };
    let loaded = prepare(&config, purpose);
    // As `rein serve` refuses it at start, before connecting.
    let data_problem = args.data.as_deref().and_then(|data| {
        crate::store::Data::parse(data).err().map(|error| {
            ConfigProblem::new(crate::store::shown(data), "--data", format!("{error:#}"))
        })
    });
    // `[store] url` as a start opens it, without connecting: a
    // PostgreSQL URL's form (the table's own fields rein-core checked).
    let store_problem = match &loaded {
        Ok(startup) => startup.registry.store().and_then(|spec| match &spec.url {
            rein_core::registry::StoreUrl::Postgres(url) => {
                rein_store_postgres::PostgresUrl::parse(url)
                    .err()
                    .map(|error| {
                        let problem =
                            ConfigProblem::new(&spec.file, "store.url", format!("{error:#}"));
                        startup.sources.place(problem)
                    })
            }
            _ => None,
        }),
        Err(_) => None,
    };
    let tls_problem = match &loaded {
        Ok(startup) => tls_problem(args.data.as_deref(), startup.registry.store()),
        Err(_) => None,
    };
    let (config_problems, mut warnings): (&[ConfigProblem], Vec<ConfigProblem>) = match &loaded {
        Ok(startup) => (&[], startup.warnings.clone()),
        Err(errors) => (errors.problems(), errors.warnings().to_vec()),
    };
    // What `rein serve` warns about at start that a file sets: slots too
    // few for the workers and their tenant floor.
    if let Ok(startup) = &loaded {
        let server = startup.registry.server();
        if let (Some(warning), Some(file)) = (
            rein_server::queue::floor::slots_warning(server),
            server.source.as_deref(),
        ) {
            let field = rein_server::queue::floor::RUN_SLOTS_FIELD;
            warnings.push(
                startup
                    .sources
                    .place(ConfigProblem::new(file, field, warning)),
            );
        }
    }
    let problems: Vec<&ConfigProblem> = config_problems
        .iter()
        .chain(&data_problem)
        .chain(&store_problem)
        .chain(&tls_problem)
        .collect();
    let ok = problems.is_empty();
    let fields = match &loaded {
        Ok(startup) => crate::output_fields::lines(&startup.registry),
        Err(_) => Vec::new(),
    };
    let explained: Vec<(String, Vec<String>)> = match &loaded {
        Ok(startup) if args.explain => startup
            .registry
            .agents()
            .values()
            .map(|agent| {
                (
                    agent.name.clone(),
                    crate::limits::explain(&startup.registry, agent),
                )
            })
            .collect(),
        _ => Vec::new(),
    };
    if args.json {
        let mut doc = json!({
            "ok": ok,
            "problems": problems.iter().map(|p| problem_json(p)).collect::<Vec<Value>>(),
            "warnings": warnings.iter().map(problem_json).collect::<Vec<Value>>(),
            "output_fields": fields.iter().map(crate::output_fields::OutputFieldLine::json).collect::<Vec<Value>>(),
        });
        if args.explain {
            doc["explain"] = explained
                .iter()
                .map(|(agent, lines)| (agent.clone(), json!(lines[1..])))
                .collect::<serde_json::Map<String, Value>>()
                .into();
        }
        println!("{doc}");
    } else {
        for warning in &warnings {
            note(Level::Warn, &format!("warning: {warning}"));
        }
        match &loaded {
            Ok(startup) if ok => {
                println!("ok: {}", summary(&startup.registry));
                for line in &fields {
                    println!("{}", line.text());
                }
                for (_, lines) in &explained {
                    for line in lines {
                        println!("{line}");
                    }
                }
            }
            _ => {
                for problem in &problems {
                    note(Level::Error, &problem.to_string());
                }
                note(
                    Level::Error,
                    &format!(
                        "error: {} in {}",
                        count(problems.len(), "problem", "problems"),
                        config.display()
                    ),
                );
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Every step of a start for `purpose` ([`startup::prepare`]), with the
/// process environment: what `rein check`, `rein run`, `rein resume`,
/// `rein reconcile` and `rein serve` all run.
///
/// # Errors
///
/// Every problem of the config, with the warnings.
pub fn prepare(path: &Path, purpose: Purpose) -> Result<Startup, ConfigErrors> {
    prepare_with(&Loader::new(), path, purpose)
}

/// [`prepare`] with `loader`'s environment for the config (the demo's
/// built-in one); provider keys still come from the process environment.
///
/// # Errors
///
/// Every problem of the config, with the warnings.
pub fn prepare_with(
    loader: &Loader<'_>,
    path: &Path,
    purpose: Purpose,
) -> Result<Startup, ConfigErrors> {
    let client = http_client().map_err(|e| {
        ConfigErrors::new(vec![ConfigProblem::new(
            path,
            "",
            format!("cannot build the HTTP client: {e}"),
        )])
    })?;
    let env = |name: &str| std::env::var(name).ok();
    startup::prepare(loader, path, &client, &env, purpose)
}

fn problem_json(problem: &ConfigProblem) -> Value {
    let mut doc = json!({
        "file": problem.file.display().to_string(),
        "field": problem.field,
        "message": problem.message,
    });
    if let (Some(position), Some(map)) = (problem.position, doc.as_object_mut()) {
        map.insert("line".into(), json!(position.line));
        map.insert("column".into(), json!(position.column));
    }
    doc
}

/// "4 tools, 1 agent, 2 providers, 1 resource group".
fn summary(registry: &Registry) -> String {
    [
        count(registry.tools().len(), "tool", "tools"),
        count(registry.agents().len(), "agent", "agents"),
        count(registry.providers().len(), "provider", "providers"),
        count(
            registry.resource_groups().len(),
            "resource group",
            "resource groups",
        ),
    ]
    .join(", ")
}

fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
