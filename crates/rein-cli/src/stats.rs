//! `rein stats`: runs over a window by outcome, with success rate, tokens
//! and cost per success, by agent and by model, and which guardrails fired
//! how often: what `GET /v1/stats` answers, read from a `rein serve`
//! (`--server`) or from the store itself (`--data`), exactly as `rein runs`
//! chooses.
//!
//! Tables go to stdout, or with `--json` the `GET /v1/stats` document; a
//! note (a window cut to 31 days) goes to stderr.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use rein_core::TenantId;
use rein_server::api::stats::{GuardrailTally, KeySpend, Stats, Tally};

use crate::run::runtime;
use crate::runs::API_KEY_ENV;
use crate::runs::render::{duration, table, time};
use crate::runs::source::Source;

/// Arguments of `rein stats`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  rein stats                                      # the last day, from rein-data/rein.db
  rein stats --since 7d --group-by guardrail      # which guardrails fired most this week
  rein stats --agent order_desk --since 1h
  rein stats --data postgres://rein@db/rein --tenant acme --json
  REIN_API_KEY=… rein stats --server https://rein.example.com --since 30m")]
pub struct StatsArgs {
    /// The store runs are recorded in: a SQLite file (as `rein run
    /// --data`) or a PostgreSQL URL; read directly, every tenant's runs
    /// unless --tenant.
    #[arg(long, visible_alias = "db", default_value = "rein-data/rein.db")]
    data: PathBuf,
    /// Read from a `rein serve` at this URL instead: the runs of the API
    /// key's tenant.
    #[arg(long, value_name = "URL")]
    server: Option<String>,
    /// The API key for --server (never printed).
    #[arg(long, env = API_KEY_ENV, hide_env_values = true)]
    api_key: Option<String>,
    /// Runs created within this long before now (`30m`, `2h`, `7d`; at
    /// most 31 days).
    #[arg(long, visible_alias = "window", value_parser = humantime::parse_duration, default_value = "24h")]
    since: Duration,
    /// Only runs of this agent.
    #[arg(long)]
    agent: Option<String>,
    /// Only this tenant's runs (a store holds every tenant's; a server
    /// shows only its key's tenant).
    #[arg(long)]
    tenant: Option<String>,
    /// Show one table only: by agent, by model, or by guardrail.
    #[arg(long, value_enum)]
    group_by: Option<GroupBy>,
    /// Print the `GET /v1/stats` JSON document instead of tables.
    #[arg(long)]
    json: bool,
}

/// The table `--group-by` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum GroupBy {
    /// Runs by agent.
    Agent,
    /// Runs by model.
    Model,
    /// Guardrails fired, by guardrail, with the agents they fired in.
    Guardrail,
    /// What each API key spent through the gateway, with its models.
    Key,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Runs `rein stats`: exit 0 with the tables, 2 when the store or server
/// cannot be read.
pub fn run(args: StatsArgs) -> Result<ExitCode> {
    let now = now_ms();
    let since_ms = now.saturating_sub(u64::try_from(args.since.as_millis()).unwrap_or(u64::MAX));
    // The server's own parser: the same bounds, defaults and clamping.
    let mut pairs = vec![
        ("since".to_owned(), since_ms.to_string()),
        ("until".to_owned(), now.to_string()),
    ];
    if let Some(agent) = &args.agent {
        pairs.push(("agent".to_owned(), agent.clone()));
    }
    let window = rein_server::api::stats::parse(&pairs, now)
        .map_err(|problem| anyhow::anyhow!("invalid window: {}", problem.detail))?;
    let tenant = args
        .tenant
        .map(TenantId::new)
        .transpose()
        .context("invalid --tenant")?;
    let stats = runtime()?.block_on(async {
        let source = match &args.server {
            Some(url) => Source::server(url, args.api_key.clone())?,
            None => Source::open_store(&args.data)?,
        };
        source.stats(&window, tenant).await
    })?;
    if stats.clamped {
        crate::log::note(
            crate::log::Level::Warn,
            "the window is cut to its last 31 days (the longest one request reads)",
        );
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
    } else {
        print!("{}", render(&stats, args.group_by));
    }
    Ok(ExitCode::SUCCESS)
}

/// The tables of `stats`: a summary line, then runs by agent, by model and
/// the guardrails fired (or only the table `group_by` names).
fn render(stats: &Stats, group_by: Option<GroupBy>) -> String {
    let mut out = format!(
        "{} to {} UTC ({})\n",
        time(stats.since_ms),
        time(stats.until_ms),
        duration(stats.until_ms.saturating_sub(stats.since_ms))
    );
    let show = |g: GroupBy| group_by.is_none_or(|only| only == g);
    let total = &stats.total;
    if total.runs == 0 {
        out.push_str("no runs in the window\n");
        if show(GroupBy::Key) && !stats.keys.is_empty() {
            out.push_str("\nkeys (gateway spend, whole UTC days)\n");
            out.push_str(&keys(&stats.keys));
        }
        return out;
    }
    out.push_str(&format!(
        "{} runs ({} unfinished), success {}, {} tokens, cost {}, per success {}\n",
        total.runs,
        total.unfinished,
        percent(total.success_rate),
        tokens(total.tokens),
        dollars(total.cost_micros),
        total
            .cost_per_success_micros
            .map_or("-".to_owned(), dollars),
    ));
    if show(GroupBy::Agent) {
        out.push_str("\nby agent\n");
        out.push_str(&tallies("agent", &stats.by_agent));
    }
    if show(GroupBy::Model) {
        out.push_str("\nby model\n");
        if stats.by_model.is_empty() {
            out.push_str("no ended run named a model\n");
        } else {
            out.push_str(&tallies("model", &stats.by_model));
        }
    }
    if show(GroupBy::Guardrail) {
        out.push_str("\nguardrails\n");
        out.push_str(&guardrails(&stats.guardrails));
    }
    if show(GroupBy::Key) {
        out.push_str("\nkeys (gateway spend, whole UTC days)\n");
        if stats.keys.is_empty() {
            out.push_str("no key spent through the gateway\n");
        } else {
            out.push_str(&keys(&stats.keys));
        }
    }
    out
}

/// Keys, most tokens first, each with its models.
fn keys(spent: &std::collections::BTreeMap<String, KeySpend>) -> String {
    let mut sorted: Vec<(&String, &KeySpend)> = spent.iter().collect();
    sorted.sort_by(|a, b| b.1.tokens.cmp(&a.1.tokens).then(a.0.cmp(b.0)));
    let rows: Vec<Vec<String>> = sorted
        .into_iter()
        .map(|(key, s)| {
            let models = s
                .by_model
                .iter()
                .map(|(model, m)| format!("{model} {}", tokens(m.tokens)))
                .collect::<Vec<_>>()
                .join(", ");
            vec![
                key.clone(),
                tokens(s.tokens),
                dollars(s.cost_micros),
                models,
            ]
        })
        .collect();
    table(&["key", "tokens", "cost", "by model"], &rows)
}

fn tallies(name: &str, tallies: &std::collections::BTreeMap<String, Tally>) -> String {
    let rows: Vec<Vec<String>> = tallies
        .iter()
        .map(|(key, t)| {
            let outcomes = t
                .outcomes
                .iter()
                .map(|(outcome, n)| format!("{outcome} {n}"))
                .collect::<Vec<_>>();
            let mut outcomes = outcomes.join(", ");
            if t.unfinished > 0 {
                if !outcomes.is_empty() {
                    outcomes.push_str(", ");
                }
                outcomes.push_str(&format!("unfinished {}", t.unfinished));
            }
            vec![
                key.clone(),
                t.runs.to_string(),
                percent(t.success_rate),
                tokens(t.tokens),
                dollars(t.cost_micros),
                t.cost_per_success_micros.map_or("-".to_owned(), dollars),
                outcomes,
            ]
        })
        .collect();
    table(
        &[
            name,
            "runs",
            "success",
            "tokens",
            "cost",
            "per success",
            "outcomes",
        ],
        &rows,
    )
}

/// Guardrails, most fired first, each with the agents it fired in.
fn guardrails(fired: &std::collections::BTreeMap<String, GuardrailTally>) -> String {
    if fired.is_empty() {
        return "no guardrail fired\n".to_owned();
    }
    let mut sorted: Vec<(&String, &GuardrailTally)> = fired.iter().collect();
    sorted.sort_by(|a, b| b.1.fired.cmp(&a.1.fired).then(a.0.cmp(b.0)));
    let rows: Vec<Vec<String>> = sorted
        .into_iter()
        .map(|(name, t)| {
            let mut agents: Vec<_> = t.by_agent.iter().collect();
            agents.sort_by(|a, b| b.1.fired.cmp(&a.1.fired).then(a.0.cmp(b.0)));
            let agents = agents
                .iter()
                .map(|(agent, f)| format!("{agent} {}", f.fired))
                .collect::<Vec<_>>()
                .join(", ");
            vec![
                name.clone(),
                t.fired.to_string(),
                t.runs.to_string(),
                agents,
            ]
        })
        .collect();
    table(&["guardrail", "fired", "runs", "by agent"], &rows)
}

/// A ratio as a percentage to a tenth, `-` when there is none.
fn percent(ratio: Option<f64>) -> String {
    ratio.map_or("-".to_owned(), |r| format!("{:.1}%", r * 100.0))
}

/// Micro-dollars in dollars, to the micro-dollar: `$0.001234`.
fn dollars(micros: u64) -> String {
    rein_core::deadline::Cost::from_micros(micros).to_string()
}

/// A token count, shortened from ten thousand up: `812`, `12.3k`, `4.1M`.
fn tokens(n: u64) -> String {
    match n {
        0..10_000 => n.to_string(),
        10_000..10_000_000 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_human() {
        assert_eq!(tokens(812), "812");
        assert_eq!(tokens(12_345), "12.3k");
        assert_eq!(tokens(41_000_000), "41.0M");
        assert_eq!(dollars(1_234), "$0.001234");
        assert_eq!(percent(Some(2.0 / 3.0)), "66.7%");
        assert_eq!(percent(None), "-");
    }
}
