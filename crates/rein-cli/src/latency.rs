//! `rein latency`: the observed latency of every tool and model, as the
//! store holds it (the sum of every process's samples), beside what the
//! config declares and what a run plans with now.
//!
//! Reads the store file directly, like `rein runs --data`. With
//! `--config`, each tool of the config is listed (with no samples too) with
//! its mode, its declared p99 (or observe mode's fallback), its allowance
//! factor, and the profile and allowance a call is planned with now; and
//! each model its agents call, with the configured `model_latency` and
//! whether a call is planned with it or with the observed profile (from
//! [`DEFAULT_OBSERVE_MIN_SAMPLES`] calls on, as `rein run` and `rein
//! serve` plan). A tool with a `latency.scale` has a row per
//! argument-scale bucket (`tool_scale:NAME/101-1000`) besides its
//! tool-wide row: a call is planned with its bucket's row.

use rein_store::HealthStore;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use rein_core::LatencyProfile;
use rein_core::latency::{
    AllowanceFactor, LatencyHistogram, LatencySubject, ModelLatencySource, ScaleBucket, plan_model,
};
use rein_core::registry::{DEFAULT_OBSERVE_MIN_SAMPLES, LatencySpec, Registry, ToolSpec};
use rein_store_sqlite::SqliteStore;
use serde_json::{Value, json};

use crate::run::runtime;

/// Arguments of `rein latency`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  rein latency                                   # what rein-data/rein.db has observed
  rein latency --config examples/order-desk      # beside each tool's declared profile
  rein latency --data /var/lib/rein/rein.db --json")]
pub struct LatencyArgs {
    /// The SQLite file runs are recorded in (as `rein run --data`).
    #[arg(long, visible_alias = "db", default_value = "rein-data/rein.db")]
    data: PathBuf,
    /// A config (file or directory): list its tools with their declared
    /// profiles and the profile each call is planned with now.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

/// One row: a subject, what was observed, and (for a configured tool)
/// what is declared and planned with.
struct Row {
    subject: String,
    observed: Option<LatencyHistogram>,
    tool: Option<ToolPlan>,
    model: Option<ModelRow>,
}

/// A configured model's side: what its agents configure and what a call
/// of it is planned with now.
struct ModelRow {
    /// The first agent (in name order) that calls it, whose
    /// `model_latency` is shown.
    agent: String,
    /// That agent's configured profile (p95 4 ×, p99 10 × its median).
    configured: LatencyProfile,
    /// `configured` or `observed`.
    in_use: &'static str,
    profile: LatencyProfile,
}

/// A configured tool's declared side and the plan it gives now.
struct ToolPlan {
    mode: &'static str,
    /// The declared p99, or observe mode's fallback.
    declared_p99: Duration,
    /// How many observations a declared profile says its quantiles rest on
    /// (`tools.NAME.latency.samples`; 0 when not said): shown beside what
    /// was observed, so a profile written from 20 samples is not trusted
    /// like one from 20 000.
    declared_samples: Option<u64>,
    min_samples: Option<u64>,
    factor: AllowanceFactor,
    /// What a call is planned with now: `declared`, `fallback` or `observed`.
    in_use: &'static str,
    profile: LatencyProfile,
    /// The tool's argument-scale buckets, when it declares them.
    scale: Option<ScaleColumn>,
}

/// A scaled tool's `latency.scale`, and the bucket a row is of (`None`:
/// the tool-wide row, which plans only calls of no argument in particular).
struct ScaleColumn {
    arg: String,
    bounds: Vec<u64>,
    bucket: Option<ScaleBucket>,
}

/// What an unset `${VAR}` of the config reads as here: an address that
/// never resolves (RFC 6761), valid wherever a URL is expected.
const UNSET_PLACEHOLDER: &str = "http://unset.invalid";

/// Runs `rein latency`.
pub fn run(args: LatencyArgs) -> Result<ExitCode> {
    // It reads profiles and calls nothing, so a URL or header variable
    // that is unset where it runs is not needed: it reads as a placeholder.
    let loader = rein_engine::config::Loader::with_env(|name| {
        Some(std::env::var(name).unwrap_or_else(|_| UNSET_PLACEHOLDER.to_owned()))
    });
    let registry = match &args.config {
        Some(path) => Some(loader.load(path).map_err(|e| anyhow::anyhow!("{e}"))?),
        None => None,
    };
    if !args.data.exists() {
        bail!(
            "no run store at {} (runs record there with `rein run --data`)",
            args.data.display()
        );
    }
    let rows = runtime()?.block_on(async {
        let store = SqliteStore::open(&args.data)
            .with_context(|| format!("cannot open the run store {}", args.data.display()))?;
        store
            .latency_histograms()
            .await
            .context("cannot read the observed latency")
    })?;
    for corrupt in &rows.corrupt {
        crate::log::note(
            crate::log::Level::Warn,
            &format!(
                "the stored latency of {} cannot be read (left out; the next run's flush replaces it): {}",
                corrupt.subject, corrupt.reason
            ),
        );
    }
    let observed: BTreeMap<String, LatencyHistogram> = rows
        .records
        .into_iter()
        .map(|r| (r.subject, r.histogram))
        .collect();
    let table = rows_of(observed, registry.as_ref());
    if args.json {
        let corrupt: Vec<Value> = rows
            .corrupt
            .iter()
            .map(|c| json!({"subject": c.subject, "reason": c.reason}))
            .collect();
        let doc = json!({
            "subjects": table.iter().map(row_json).collect::<Vec<_>>(),
            "corrupt": corrupt,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else if table.is_empty() {
        println!("no latency observed yet in {}", args.data.display());
    } else {
        print_table(&table);
    }
    Ok(ExitCode::SUCCESS)
}

/// Every observed subject, and every tool of `registry` (observed or not).
fn rows_of(
    mut observed: BTreeMap<String, LatencyHistogram>,
    registry: Option<&Registry>,
) -> Vec<Row> {
    let mut rows = Vec::new();
    if let Some(registry) = registry {
        for spec in registry.tools().values() {
            let subject = LatencySubject::tool(&spec.name).key();
            let seen = observed.remove(&subject);
            let plan = tool_plan(spec, seen.as_ref(), None);
            rows.push(Row {
                subject,
                observed: seen,
                model: None,
                tool: Some(plan),
            });
            // A scaled tool's calls are planned per bucket: one row each,
            // observed or not yet.
            let Some(scale) = &spec.latency_scale else {
                continue;
            };
            for bucket in scale.buckets() {
                let subject = LatencySubject::ToolScale {
                    tool: spec.name.clone(),
                    bucket,
                }
                .key();
                let seen = observed.remove(&subject);
                let plan = tool_plan(spec, seen.as_ref(), Some(bucket));
                rows.push(Row {
                    subject,
                    observed: seen,
                    model: None,
                    tool: Some(plan),
                });
            }
        }
    }
    if let Some(registry) = registry {
        rows.extend(model_rows(&mut observed, registry));
    }
    rows.extend(observed.into_iter().map(|(subject, histogram)| Row {
        subject,
        observed: Some(histogram),
        tool: None,
        model: None,
    }));
    rows
}

/// What a call of `spec` (in `bucket`, for a scaled tool) is planned with,
/// given what was `seen`.
fn tool_plan(
    spec: &ToolSpec,
    seen: Option<&LatencyHistogram>,
    bucket: Option<ScaleBucket>,
) -> ToolPlan {
    let profile = spec
        .latency
        .profile(seen.and_then(LatencyHistogram::profile).as_ref());
    let (mode, declared_p99, declared_samples, min_samples, in_use) = match spec.latency {
        LatencySpec::Observe {
            fallback,
            min_samples,
        } => {
            let trusted = seen.is_some_and(|h| h.samples() >= min_samples);
            let in_use = if trusted { "observed" } else { "fallback" };
            ("observe", fallback.p99(), None, Some(min_samples), in_use)
        }
        declared => {
            let profile = declared.profile(None);
            let samples = Some(profile.samples());
            ("declared", profile.p99(), samples, None, "declared")
        }
    };
    ToolPlan {
        mode,
        declared_p99,
        declared_samples,
        min_samples,
        factor: spec.allowance_factor,
        in_use,
        profile,
        scale: spec.latency_scale.as_ref().map(|scale| ScaleColumn {
            arg: scale.arg(),
            bounds: scale.bounds().to_vec(),
            bucket,
        }),
    }
}

/// One row per model the agents of `registry` call (primary and
/// fallbacks), taking its observed histogram out of `observed`.
fn model_rows(observed: &mut BTreeMap<String, LatencyHistogram>, registry: &Registry) -> Vec<Row> {
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    for (name, agent) in registry.agents() {
        let p50 = agent.model_latency.max(Duration::from_millis(1));
        let Ok(configured) =
            LatencyProfile::new(p50, p50.saturating_mul(4), p50.saturating_mul(10), 0)
        else {
            continue;
        };
        let links = std::iter::once((agent.provider.as_str(), agent.model.as_str())).chain(
            agent
                .fallbacks
                .iter()
                .chain(&agent.context_fallbacks)
                .map(|l| (l.provider.as_str(), l.model.as_str())),
        );
        for (provider, model) in links {
            let subject = LatencySubject::Model {
                provider: provider.to_owned(),
                model: model.to_owned(),
            }
            .key();
            if rows.contains_key(&subject) {
                continue;
            }
            let seen = observed.remove(&subject);
            let plan = plan_model(configured, seen.as_ref(), DEFAULT_OBSERVE_MIN_SAMPLES);
            let in_use = match plan.source {
                ModelLatencySource::Observed => "observed",
                ModelLatencySource::Configured => "configured",
            };
            rows.insert(
                subject.clone(),
                Row {
                    subject,
                    observed: seen,
                    tool: None,
                    model: Some(ModelRow {
                        agent: name.clone(),
                        configured,
                        in_use,
                        profile: plan.profile,
                    }),
                },
            );
        }
    }
    rows.into_values().collect()
}

/// A duration in human units: `850µs`, `12.3ms`, `1.25s`, `2m5s`.
fn human(d: Duration) -> String {
    let micros = d.as_micros();
    if micros < 1_000 {
        format!("{micros}µs")
    } else if micros < 1_000_000 {
        format!("{}ms", trimmed(d.as_secs_f64() * 1e3))
    } else if d < Duration::from_secs(60) {
        format!("{}s", trimmed(d.as_secs_f64()))
    } else {
        let secs = d.as_secs();
        format!("{}m{}s", secs / 60, secs % 60)
    }
}

/// Three significant digits, trailing zeros dropped.
fn trimmed(v: f64) -> String {
    let text = if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// The unit of a subject's samples in the table.
fn unit(subject: &str) -> &'static str {
    if subject.starts_with("model_per_token:") {
        "/token"
    } else {
        ""
    }
}

fn print_table(rows: &[Row]) {
    println!(
        "{:<40} {:>8} {:>14} {:>14} {:>14}  {:<10} {:>10} {:>7}  {:<9} {:>10}",
        "subject",
        "samples",
        "p50",
        "p95",
        "p99",
        "mode",
        "declared",
        "factor",
        "planned",
        "allowance"
    );
    for row in rows {
        let u = unit(&row.subject);
        let q = |f: fn(&LatencyProfile) -> Duration| {
            row.observed
                .as_ref()
                .and_then(LatencyHistogram::profile)
                .map_or("-".to_owned(), |p| format!("{}{u}", human(f(&p))))
        };
        let samples = row.observed.as_ref().map_or(0, LatencyHistogram::samples);
        let (mode, declared, factor, planned, allowance) = match &row.tool {
            Some(t) => (
                t.mode.to_owned(),
                human(t.declared_p99),
                format!("{}", t.factor.get()),
                match (t.in_use, t.min_samples, t.declared_samples) {
                    ("fallback", Some(min), _) => format!("fallback ({samples}/{min})"),
                    (in_use, _, Some(n)) if n > 0 => format!("{in_use} (n={n})"),
                    (in_use, _, _) => in_use.to_owned(),
                },
                human(t.factor.apply(t.profile.p99())),
            ),
            None => match &row.model {
                Some(m) => (
                    "model".into(),
                    human(m.configured.p99()),
                    "-".into(),
                    match m.in_use {
                        "configured" => {
                            format!("configured ({samples}/{DEFAULT_OBSERVE_MIN_SAMPLES})")
                        }
                        in_use => in_use.to_owned(),
                    },
                    "-".into(),
                ),
                None => ("-".into(), "-".into(), "-".into(), "-".into(), "-".into()),
            },
        };
        println!(
            "{:<40} {:>8} {:>14} {:>14} {:>14}  {:<10} {:>10} {:>7}  {:<9} {:>10}",
            row.subject,
            samples,
            q(LatencyProfile::p50),
            q(LatencyProfile::p95),
            q(LatencyProfile::p99),
            mode,
            declared,
            factor,
            planned,
            allowance
        );
    }
}

fn row_json(row: &Row) -> Value {
    let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    let observed = row
        .observed
        .as_ref()
        .and_then(LatencyHistogram::profile)
        .map(|p| {
            json!({"samples": p.samples(), "p50_us": micros(p.p50()), "p95_us": micros(p.p95()),
               "p99_us": micros(p.p99())})
        });
    let tool = row.tool.as_ref().map(|t| {
        json!({"mode": t.mode, "declared_p99_us": micros(t.declared_p99),
               "declared_samples": t.declared_samples, "min_samples": t.min_samples, "allowance_factor": t.factor.get(), "planned": t.in_use,
               "planned_p99_us": micros(t.profile.p99()),
               "allowance_us": micros(t.factor.apply(t.profile.p99())),
               "scale": t.scale.as_ref().map(|s| json!({"arg": s.arg, "buckets": s.bounds,
                   "bucket": s.bucket}))})
    });
    let model = row.model.as_ref().map(|m| {
        json!({"agent": m.agent, "configured_p50_us": micros(m.configured.p50()),
               "min_samples": DEFAULT_OBSERVE_MIN_SAMPLES, "planned": m.in_use,
               "planned_p50_us": micros(m.profile.p50()),
               "planned_p99_us": micros(m.profile.p99())})
    });
    json!({"subject": row.subject, "observed": observed, "tool": tool, "model": model})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_in_human_units() {
        let cases = [
            (Duration::from_micros(850), "850µs"),
            (Duration::from_micros(12_340), "12.3ms"),
            (Duration::from_millis(300), "300ms"),
            (Duration::from_millis(1_250), "1.25s"),
            (Duration::from_secs(5), "5s"),
            (Duration::from_secs(125), "2m5s"),
        ];
        for (d, want) in cases {
            assert_eq!(human(d), want);
        }
    }

    /// A declared profile's `samples` reaches `rein latency`: the shipped
    /// example declares 1000 for `get_order`, observe mode none.
    #[test]
    fn a_declared_profiles_sample_count_is_shown_beside_it() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/order-desk");
        let loader = rein_engine::config::Loader::with_env(|name| {
            matches!(name, "ORDER_DESK_URL" | "MOCK_MODEL_URL")
                .then(|| "http://127.0.0.1:9".to_owned())
        });
        let registry = match loader.load(std::path::Path::new(dir)) {
            Ok(registry) => registry,
            Err(e) => panic!("the example config loads: {e}"),
        };
        let rows = rows_of(BTreeMap::new(), Some(&registry));
        let doc = |name: &str| {
            let subject = LatencySubject::tool(name).key();
            rows.iter()
                .find(|r| r.subject == subject)
                .map(row_json)
                .unwrap_or_default()
        };
        assert_eq!(doc("get_order")["tool"]["declared_samples"], 1000);
        assert_eq!(doc("get_order")["tool"]["mode"], "declared");
        let observed = doc("send_email");
        assert_eq!(observed["tool"]["mode"], "observe", "{observed}");
        assert!(observed["tool"]["declared_samples"].is_null());
    }

    /// Each model the example's agents call is listed with its configured
    /// latency until enough calls were observed, then with the observed.
    #[test]
    fn a_models_observed_latency_replaces_the_configured_one_from_min_samples_on() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/order-desk");
        let loader = rein_engine::config::Loader::with_env(|name| {
            matches!(name, "ORDER_DESK_URL" | "MOCK_MODEL_URL")
                .then(|| "http://127.0.0.1:9".to_owned())
        });
        let registry = match loader.load(std::path::Path::new(dir)) {
            Ok(registry) => registry,
            Err(e) => panic!("the example config loads: {e}"),
        };
        let Some(agent) = registry.agents().values().next() else {
            panic!("the example has an agent");
        };
        let subject = LatencySubject::Model {
            provider: agent.provider.clone(),
            model: agent.model.clone(),
        }
        .key();
        let doc = |observed: BTreeMap<String, LatencyHistogram>| {
            rows_of(observed, Some(&registry))
                .iter()
                .find(|r| r.subject == subject)
                .map(row_json)
                .unwrap_or_default()
        };
        let mut seen = LatencyHistogram::new();
        for _ in 1..DEFAULT_OBSERVE_MIN_SAMPLES {
            seen.record(Duration::from_secs(3));
        }
        let few = doc(BTreeMap::from([(subject.clone(), seen.clone())]));
        assert_eq!(few["model"]["planned"], "configured", "{few}");
        seen.record(Duration::from_secs(3));
        let enough = doc(BTreeMap::from([(subject.clone(), seen)]));
        assert_eq!(enough["model"]["planned"], "observed", "{enough}");
        let p50 = enough["model"]["planned_p50_us"]
            .as_u64()
            .unwrap_or_default();
        // Within the histogram's precision.
        assert!((3_000_000..3_050_000).contains(&p50), "{enough}");
    }
}
