//! `rein`: run LLM agents safely against the real world.
//!
//! The binary is thin: it parses arguments into a validated command, calls
//! library code, prints data to stdout and diagnostics to stderr, and maps
//! errors to exit codes in one place.
#![forbid(unsafe_code)]

mod approvals;
mod chaos;
mod check;
mod demo;
mod dev;
mod handoff;
mod idempotency;
mod init;
mod key;
mod latency;
mod lint;
mod log;
mod mcp;
mod migrate;
mod output_fields;
mod reconcile;
mod resume;
mod run;
mod runs;
mod schema;
mod serve;
mod signal;
mod stats;
mod store;
mod timeline;
mod webhooks;

use std::process::ExitCode;

// The limits as a human reads them, shared with the dashboard's config page.
use rein_core::registry::explain as limits;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use tracing_subscriber::filter::LevelFilter;

/// rein — a runtime that makes LLM agents safe to run against the real world.
///
/// rein governs every action an agent's model proposes: one deadline and one
/// triple budget per run, idempotency keys bound to intent, classified and
/// budgeted retries, circuit breakers, a write-ahead side-effect ledger with
/// compensation, and honest outcomes.
#[derive(Debug, Parser)]
#[command(name = "rein", version, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: log::LogArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Derive the idempotency key rein sends for a tool call.
    ///
    /// The key is digest(tenant | intent | tool | normalized arguments),
    /// identical in every process and release. Use it to find a call in a
    /// tool's deduplication store, or to check another implementation.
    Key(key::KeyArgs),
    /// Check a config (a file or a directory of *.toml files) and list every
    /// problem, each naming its file and field.
    ///
    /// Exits 0 when the config loads, 1 when it has problems.
    Check(check::CheckArgs),
    /// Lint the tool definitions a model reads, and report like a compiler.
    ///
    /// Named rules on names, descriptions and schemas (side effect first,
    /// units, enums, ids, examples, confirmation of destructive tools,
    /// strict mode, hidden text, ...); each finding gives its file, line,
    /// tool, field, rule id and a fix. See docs/lint.md for every rule.
    ///
    /// Exits 0 when no finding is at or above --deny (warning; notes alone
    /// pass), 1 when one is, 2 when the config could not be read.
    Lint(lint::LintArgs),
    /// Run the order-desk scenario end to end, with no setup.
    ///
    /// Starts a loopback order desk whose first delivery update applies but
    /// loses its response and whose email service answers 429 with a long
    /// Retry-After, runs the order-desk agent with a recorded model, and
    /// prints the timeline, the report and the desk's own side-effect log:
    /// exactly one update, no email, an honest partial success.
    Demo(demo::DemoArgs),
    /// Start the example's services on loopback until Ctrl-C: the order
    /// desk (its tools, with fault switches) and the mock model (OpenAI
    /// and Anthropic formats), and print the exports the example config
    /// reads (`ORDER_DESK_URL`, `MOCK_MODEL_URL`).
    Dev(dev::DevArgs),
    /// Write a working config for a new agent: a model with a fallback, a
    /// read tool, a write tool with its compensation and a budget, each
    /// commented, and `tool_service.py`, the tools' HTTP contract as a
    /// service to run and change.
    ///
    /// Asks at a terminal (defaults in brackets); `--yes` or flags for
    /// scripts. The config runs as written against `rein dev`. Never
    /// overwrites a file without `--force`.
    Init(init::InitArgs),
    /// Run an agent from a config: the live timeline, then the report.
    ///
    /// The run's id is printed on stderr as it starts. Exits 0 when the run
    /// succeeded, 1 when it ended otherwise (the report says how and what to
    /// do), 2 when it could not run, 76 when it paused for a human's
    /// approval (the commands that decide are printed; `rein resume`
    /// continues it after). Ctrl-C (SIGINT) or SIGTERM stops it at
    /// a safe point, leaves it resumable, prints the exact `rein resume`
    /// command and exits 130 (SIGINT) or 143 (SIGTERM); a second signal
    /// quits at once.
    Run(run::RunArgs),
    /// Continue a run that stopped mid-way (crash, kill) from its last
    /// checkpoint, with what is left of its budget.
    ///
    /// Completed steps are not run again; the interrupted step replays its
    /// persisted plan with the original intent ids and idempotency keys. A
    /// run that ended recoverable because an action was refused for a time
    /// (a Retry-After, an open breaker, a budget) first sends exactly that
    /// action again, under its original intent, then asks the model.
    Resume(resume::ResumeArgs),
    /// Show the handoff package of a run that automation had to stop, and
    /// record a human's decision on each record it left (`rein handoff
    /// resolve`).
    Handoff(handoff::HandoffArgs),
    /// List the calls waiting for a human's approval (`[tools.NAME]
    /// approval`, `[agents.NAME.approval]`), from the store file or a
    /// `rein serve`.
    Approvals(approvals::ApprovalsArgs),
    /// Approve a call a run waits for: exactly the arguments it was
    /// requested with are then sent, once, under its intent's key.
    ///
    /// The run continues once every call of its turn is decided: a `rein
    /// serve` on the store takes it at once; a run of `rein run` continues
    /// with `rein resume`. A call decided before (or whose window closed)
    /// is refused, naming the decision that stands (exit 2).
    Approve(approvals::DecideArgs),
    /// Reject a call a run waits for: it is never sent, and the model is
    /// told "a human declined it" with --reason.
    Reject(approvals::DecideArgs),
    /// List the configured webhooks (`[webhooks.NAME]`) and each one's
    /// delivery log, from the store file or a `rein serve`.
    Webhooks(webhooks::WebhooksArgs),
    /// Sweep the ledger: decide records in doubt from the tools' own state,
    /// hand off what cannot be decided, reclaim leases of crashed processes.
    Reconcile(reconcile::ReconcileArgs),
    /// Run the chaos suite: numbered fault scenarios against real parts on
    /// loopback, each checked against rein's ten invariants.
    ///
    /// Prints a table (scenario, outcome, invariants held or violated,
    /// mechanisms activated) and the activation rate of each mechanism.
    /// Exits 1 only when an invariant is violated; runs that fail under
    /// injected faults are counted, not failures of the suite.
    Chaos(chaos::ChaosArgs),
    /// Serve the HTTP API: submit runs (sync or queued) with exact
    /// Idempotency-Key semantics, follow their events live, resume and
    /// cancel them. Tenants and API keys come from the config's `[server]`.
    ///
    /// SIGTERM or SIGINT drains within server.shutdown_grace (25 s in all):
    /// /readyz answers 503, new work is refused, runs in flight get the
    /// grace less 7 s to finish, what is left is stopped at a safe point
    /// and handed on to the next server on the same store; exits 0 with one
    /// line saying what was finished and what was handed on. A second
    /// signal hands the runs on at once; a third quits at once.
    Serve(serve::ServeArgs),
    /// List runs and inspect one: its report, events and ledger, read from
    /// the store file (`--data`) or from a `rein serve` (`--server`).
    ///
    /// A run whose process was killed is listed `running`; `rein resume`
    /// continues it.
    Runs(runs::RunsArgs),
    /// Count runs over a window: outcomes, success rate, tokens and cost
    /// per success, by agent and by model, and which guardrails fired how
    /// often; read from the store (`--data`) or a `rein serve`
    /// (`--server`), as `rein runs` reads.
    Stats(stats::StatsArgs),
    /// Apply the run store's schema migrations (SQLite or PostgreSQL), or
    /// with --check only say whether any are pending.
    ///
    /// Every command migrates the store it opens; with several nodes on one
    /// database, run this once before starting the new release. --check
    /// exits 0 when the store is current, 1 when migrations are pending.
    Migrate(migrate::MigrateArgs),
    /// List or clear submissions' idempotency records (the operator's path
    /// after a crash left a reservation in progress).
    Idempotency(idempotency::IdempotencyArgs),
    /// Show the latency observed per tool and model (p50/p95/p99 and
    /// samples, summed over every process on the store), beside each
    /// tool's declared profile and the allowance a call gets now
    /// (`--config`). Read from the store file (`--data`).
    Latency(latency::LatencyArgs),
    /// MCP both ways: serve an agent's tools to MCP clients through rein's
    /// guarded call (`rein mcp serve`), and import an MCP server's tools
    /// into the registry for review (`rein mcp import`).
    Mcp(mcp::McpArgs),
    /// Print the JSON Schema of a config file, for editors that complete
    /// and check TOML against one (taplo, Even Better TOML).
    Schema(schema::SchemaArgs),
    /// Print a completion script for SHELL, generated from rein's own
    /// commands and flags.
    #[command(after_help = "\
Examples:
  rein completions bash > ~/.local/share/bash-completion/completions/rein
  rein completions zsh > ~/.zfunc/_rein
  rein completions fish > ~/.config/fish/completions/rein.fish")]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

fn main() -> ExitCode {
    // `--color` applies to clap's own help and errors too, which are
    // written while parsing: read it first.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let color = log::ColorWhen::scan(&args);
    let matches = Cli::command()
        .color(color.for_clap())
        .get_matches_from(&args);
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.format(&mut Cli::command()).exit(),
    };
    // Diagnostics go to stderr: a server reports what it decides (takeovers,
    // orphans, breakers, fallbacks); other commands what went wrong, and
    // warnings (a run store anyone may read, a secret too short to redact).
    let level = match cli.command {
        Command::Serve(_) => LevelFilter::INFO,
        _ => LevelFilter::WARN,
    };
    log::init(&cli.log, level);
    // After the log's own hook, which it wraps.
    quiet_on_closed_stdout();
    let result = match cli.command {
        Command::Key(args) => key::run(args).map(|()| ExitCode::SUCCESS),
        Command::Check(args) => return check::run(args),
        Command::Lint(args) => return lint::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Dev(args) => dev::run(args),
        Command::Init(args) => init::run(args),
        Command::Run(args) => run::run(args),
        Command::Resume(args) => resume::run(args),
        Command::Handoff(args) => handoff::run(args),
        Command::Approvals(args) => approvals::run(args),
        Command::Approve(args) => approvals::decide(args, rein_core::approval::Verdict::Approved),
        Command::Reject(args) => approvals::decide(args, rein_core::approval::Verdict::Rejected),
        Command::Webhooks(args) => webhooks::run(args),
        Command::Reconcile(args) => reconcile::run(args),
        Command::Chaos(args) => chaos::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Idempotency(args) => idempotency::run(args),
        Command::Runs(args) => runs::run(args),
        Command::Stats(args) => stats::run(args),
        Command::Migrate(args) => migrate::run(args),
        Command::Latency(args) => latency::run(args),
        Command::Mcp(args) => mcp::run(args),
        Command::Schema(args) => schema::run(args).map(|()| ExitCode::SUCCESS),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "rein", &mut script);
            print!("{}", String::from_utf8_lossy(&script));
            Ok(ExitCode::SUCCESS)
        }
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            log::note(log::Level::Error, &format!("error: {err:#}"));
            ExitCode::from(2)
        }
    }
}

/// Ends the command quietly when whoever reads its output stops reading
/// (`rein runs list --json | head -1`).
///
/// # Why a panic hook
///
/// Rust ignores SIGPIPE, so a write to a closed pipe is an error, and
/// `println!` turns it into a panic ("failed printing to stdout: Broken
/// pipe"): a reader that had enough is not a failure of the command. The
/// hook exits 0 for exactly that panic and hands every other one to the
/// default hook. SIGPIPE itself is left ignored: a tool's child process or
/// a client that hangs up must never kill a `rein serve`.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}
