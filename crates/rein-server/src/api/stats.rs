//! `GET /v1/stats`: the caller's runs over a time window, counted by
//! outcome, with success rate, tokens and cost per success, in total, by
//! agent and by model; and which guardrails fired how often, per agent.
//!
//! # Why the store counts
//!
//! The numbers come from [`rein_store::RunStore::run_stats`], grouped in SQL
//! by each backend: a request costs a few rows per agent and model
//! however many runs the window holds, where reading the runs' reports
//! once cost a row (and a report) per run. The window is still bounded
//! ([`MAX_WINDOW_MS`]) so one request never walks more than a month of
//! the creation-time index.
//!
//! # Guardrails
//!
//! `guardrails` counts, by name ([`rein_core::event::Guardrail`], whose
//! module documents the set and the events behind each), how many times
//! each fired (`fired`) and in how many runs (`runs`), in total and by
//! agent. A guardrail that never fired in the window is absent.
//!
//! # Parameters
//!
//! | parameter | meaning | default |
//! | --- | --- | --- |
//! | `since` | runs created at or after, Unix ms | `until` minus 24 h |
//! | `until` | runs created before, Unix ms | now |
//! | `agent` | one agent's runs only | every agent |
//! | `buckets` | also cut the window into this many equal slices, each counted (`series`), 1 to 62 | none |
//!
//! A run that used several models counts once under each in `by_model`;
//! a run without a report (queued, running) has no model and counts only
//! in `runs` and `unfinished`.
//!
//! # Tool latency
//!
//! `tool_latency` is each tool's observed attempt latency (p50, p95, p99
//! and the samples they rest on) as the store holds it: every process's
//! samples, summed since they began, whichever tenant's runs made them (a
//! tool's latency is its backend's, like its breaker). It is what a run
//! plans its allowances with in observe mode, not the window's.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use rein_core::event::Guardrail;
use rein_core::{Outcome, TenantId};
use rein_store::{RunStats, RunStatus, Store, StoreError, Timestamp};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::api::listing::MAX_CREATED_MS;
use crate::http::auth::Tenant;
use crate::http::problem::Problem;
use crate::http::query::invalid;
use crate::http::state::AppState;

/// The window when `since` is not given: a day.
pub const DEFAULT_WINDOW_MS: u64 = 24 * 3_600_000;

/// The longest window one request may ask for: 31 days.
pub const MAX_WINDOW_MS: u64 = 31 * 24 * 3_600_000;

/// The query of `GET /v1/stats`, as the document describes it; [`parse`]
/// reads the pairs itself to name the parameter of a 400.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StatsQuery {
    /// Runs created at or after this time, Unix milliseconds (default:
    /// `until` minus 24 hours; at most 31 days before `until`).
    #[param(minimum = 0, maximum = 253_402_300_799_999_f64)]
    pub since: Option<u64>,
    /// Runs created before this time, Unix milliseconds (default: now).
    #[param(minimum = 0, maximum = 253_402_300_799_999_f64)]
    pub until: Option<u64>,
    /// Only this agent's runs.
    #[param(min_length = 1)]
    pub agent: Option<String>,
    /// Also cut the window into this many equal slices, each counted
    /// (`series`): outcomes over time.
    #[param(minimum = 1, maximum = 62)]
    pub buckets: Option<u32>,
}

/// The most slices one request may ask for: two a day over 31 days.
pub const MAX_BUCKETS: u32 = 62;

/// Counts over a set of runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Tally {
    /// Runs counted.
    pub runs: u64,
    /// Runs not yet ended (queued or running).
    pub unfinished: u64,
    /// Ended runs by outcome name.
    pub outcomes: BTreeMap<String, u64>,
    /// Succeeded runs over ended runs (`null` when none ended).
    pub success_rate: Option<f64>,
    /// Tokens the ended runs consumed.
    pub tokens: u64,
    /// Cost the ended runs consumed, micro-dollars.
    pub cost_micros: u64,
    /// `cost_micros` over succeeded runs (`null` when none succeeded):
    /// what one success costs, failures included.
    pub cost_per_success_micros: Option<u64>,
}

impl Tally {
    /// Adds `runs` runs with `status` that consumed `tokens` and `cost`.
    fn add(&mut self, status: RunStatus, runs: u64, tokens: u64, cost_micros: u64) {
        self.runs += runs;
        match status.outcome() {
            Some(outcome) => {
                *self
                    .outcomes
                    .entry(outcome.as_str().to_owned())
                    .or_default() += runs;
                self.tokens = self.tokens.saturating_add(tokens);
                self.cost_micros = self.cost_micros.saturating_add(cost_micros);
            }
            None => self.unfinished += runs,
        }
    }

    /// Fills the ratios once every run is added.
    fn finish(mut self) -> Tally {
        let ended = self.runs - self.unfinished;
        let succeeded = self
            .outcomes
            .get(Outcome::Succeeded.as_str())
            .copied()
            .unwrap_or(0);
        self.success_rate = (ended > 0).then(|| succeeded as f64 / ended as f64);
        self.cost_per_success_micros = (succeeded > 0).then(|| self.cost_micros / succeeded);
        self
    }
}

/// What `GET /v1/stats` answers.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Stats {
    /// The window's start (inclusive), Unix milliseconds.
    pub since_ms: u64,
    /// The window's end (exclusive), Unix milliseconds.
    pub until_ms: u64,
    /// Whether the window asked for was longer than 31 days: `since_ms` is
    /// then 31 days before `until_ms`, not the `since` given.
    pub clamped: bool,
    /// Every run counted.
    pub total: Tally,
    /// By agent name.
    pub by_agent: BTreeMap<String, Tally>,
    /// By model (`provider/model`), from each report's `models`.
    pub by_model: BTreeMap<String, Tally>,
    /// By guardrail name: how often each fired, in total and by agent.
    #[serde(default)]
    pub guardrails: BTreeMap<String, GuardrailTally>,
    /// What the tenant's API keys spent through the gateway, by key, over
    /// the whole UTC days the window touches (spend is kept per day):
    /// tokens and micro-dollars, in total and by model. A key that spent
    /// nothing is absent. Read over every tenant (`rein stats` on a store
    /// file without `--tenant`), each key is named `tenant/key`.
    #[serde(default)]
    pub keys: BTreeMap<String, KeySpend>,
    /// The window cut into `buckets` equal slices, oldest first, each
    /// counted as `total` is (empty unless `buckets` was asked for).
    #[serde(default)]
    pub series: Vec<Slice>,
    /// Each tool's observed attempt latency, by tool name: every process's
    /// samples since they began (not the window's), what observe mode
    /// plans allowances with.
    #[serde(default)]
    pub tool_latency: BTreeMap<String, ToolLatency>,
}

/// One slice of the window, counted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Slice {
    /// Its start (inclusive), Unix milliseconds.
    pub since_ms: u64,
    /// Its end (exclusive), Unix milliseconds.
    pub until_ms: u64,
    /// The runs created in it.
    #[serde(flatten)]
    pub tally: Tally,
}

/// A tool's observed attempt latency.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolLatency {
    /// Attempts measured.
    pub samples: u64,
    /// Median, milliseconds.
    pub p50_ms: f64,
    /// 95th percentile, milliseconds.
    pub p95_ms: f64,
    /// 99th percentile, milliseconds.
    pub p99_ms: f64,
}

/// One key's gateway spend.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct KeySpend {
    /// Input plus output tokens.
    pub tokens: u64,
    /// Their cost, in micro-dollars.
    pub cost_micros: u64,
    /// The same, by the model that answered (`provider/model`).
    pub by_model: BTreeMap<String, ModelSpend>,
}

/// A key's spend on one model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ModelSpend {
    /// Input plus output tokens.
    pub tokens: u64,
    /// Their cost, in micro-dollars.
    pub cost_micros: u64,
}

/// How often a guardrail fired.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Fired {
    /// Events recording it firing.
    pub fired: u64,
    /// Runs in which it fired at least once.
    pub runs: u64,
}

/// How often a guardrail fired, in total and by agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GuardrailTally {
    /// Events recording it firing, every agent together.
    pub fired: u64,
    /// Runs in which it fired at least once.
    pub runs: u64,
    /// By agent name.
    pub by_agent: BTreeMap<String, Fired>,
}

/// A stats request, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// Inclusive start, Unix ms.
    pub since_ms: u64,
    /// Exclusive end, Unix ms.
    pub until_ms: u64,
    /// One agent, or all.
    pub agent: Option<String>,
    /// Whether `since` was moved to [`MAX_WINDOW_MS`] before `until`.
    pub clamped: bool,
    /// Slices to count apart (`series`), when asked for.
    pub buckets: Option<u32>,
}

fn millis(parameter: &str, value: &str) -> Result<u64, Problem> {
    value
        .parse::<u64>()
        .ok()
        .filter(|ms| *ms <= MAX_CREATED_MS)
        .ok_or_else(|| {
            invalid(
                parameter,
                format!(
                    "{parameter} must be Unix milliseconds from 0 to {MAX_CREATED_MS}, but it is {value:?}"
                ),
            )
        })
}

/// Reads the query's pairs into a [`Window`] ending by default at `now_ms`.
///
/// # Errors
///
/// A 400 naming the parameter that is unknown, repeated or out of range.
pub fn parse(pairs: &[(String, String)], now_ms: u64) -> Result<Window, Problem> {
    let (mut since, mut until, mut agent, mut buckets) = (None, None, None, None);
    crate::http::query::once(pairs)?;
    for (name, value) in pairs {
        match name.as_str() {
            "since" => since = Some(millis(name, value)?),
            "until" => until = Some(millis(name, value)?),
            "agent" if value.is_empty() => {
                return Err(invalid("agent", "agent must not be empty".to_owned()));
            }
            "agent" => agent = Some(value.clone()),
            "buckets" => {
                let n = value
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=MAX_BUCKETS).contains(n))
                    .ok_or_else(|| {
                        invalid(
                            "buckets",
                            format!(
                                "buckets must be a whole number from 1 to {MAX_BUCKETS}, but it is {value:?}"
                            ),
                        )
                    })?;
                buckets = Some(n);
            }
            other => {
                return Err(invalid(
                    other,
                    format!("unknown parameter {other:?}; expected since, until, agent or buckets"),
                ));
            }
        }
    }
    let until_ms = until.unwrap_or(now_ms.min(MAX_CREATED_MS));
    let asked = since.unwrap_or(until_ms.saturating_sub(DEFAULT_WINDOW_MS));
    // A window over the maximum keeps its newest 31 days, and says so in
    // `clamped`; one whose start is not before its end holds no run.
    let floor = until_ms.saturating_sub(MAX_WINDOW_MS);
    Ok(Window {
        since_ms: asked.max(floor),
        until_ms,
        agent,
        clamped: asked < floor,
        buckets,
    })
}

/// The caller's runs over a window, counted.
#[utoipa::path(
    get, path = "/v1/stats", tag = "runs",
    params(StatsQuery),
    responses((status = 200, description = "The caller's runs in the window, by outcome, agent and model", body = Stats),
              (status = 400, description = "a parameter unknown, repeated or out of range, (`parameter` names it)", body = Problem),
              (status = 401, description = "missing or invalid API key", body = Problem)),
    security(("bearer" = []))
)]
pub async fn get_stats(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Json<Stats>, Problem> {
    let Query(pairs) = query.map_err(|e| Problem::bad_request(format!("invalid query: {e}")))?;
    let window = parse(&pairs, crate::lifecycle::recovery::now_ms().as_millis())?;
    // The caller's tenant, whatever the query.
    state.spend.before_read().await;
    Ok(Json(
        compute(state.store.as_ref(), Some(tenant), &window).await?,
    ))
}

/// The stats of `window` over `store`: one tenant's runs, or every
/// tenant's with `None` (an operator reading the store itself, as `rein
/// stats --data` does).
///
/// # Errors
///
/// What [`RunStore::run_stats`](rein_store::RunStore::run_stats) fails with.
pub async fn compute(
    store: &dyn Store,
    tenant: Option<TenantId>,
    window: &Window,
) -> Result<Stats, StoreError> {
    let counted = if window.since_ms < window.until_ms {
        store
            .run_stats(&rein_store::StatsQuery {
                tenant: tenant.clone(),
                agent: window.agent.clone(),
                since_ms: Timestamp::from_millis(window.since_ms),
                until_ms: Timestamp::from_millis(window.until_ms),
            })
            .await?
    } else {
        // An empty window (since not before until) holds no run.
        RunStats::default()
    };
    let spent = if window.since_ms < window.until_ms {
        store
            .spend(&rein_store::SpendQuery {
                tenant: tenant.clone(),
                key: None,
                from_day: rein_core::registry::day_of(window.since_ms),
                // The day of the window's last millisecond, inclusive.
                until_day: rein_core::registry::day_of(window.until_ms - 1).saturating_add(1),
            })
            .await?
    } else {
        Vec::new()
    };
    let every_tenant = tenant.is_none();
    let mut stats = Stats::of(window, &counted);
    stats.series = series(store, tenant.as_ref(), window).await?;
    stats.tool_latency = tool_latency(store).await?;
    for row in spent {
        // Over every tenant (an operator reading the store file), two
        // tenants' keys of one name are told apart: `tenant/key`.
        let name = if every_tenant {
            format!("{}/{}", row.tenant, row.key)
        } else {
            row.key
        };
        let key = stats.keys.entry(name).or_default();
        key.tokens = key.tokens.saturating_add(row.tokens);
        key.cost_micros = key.cost_micros.saturating_add(row.cost_micros);
        let model = key.by_model.entry(row.model).or_default();
        model.tokens = model.tokens.saturating_add(row.tokens);
        model.cost_micros = model.cost_micros.saturating_add(row.cost_micros);
    }
    Ok(stats)
}

/// `window` cut into its `buckets` slices, each counted (none unless
/// asked for). Slice `i` starts at `since + length × i / buckets` (whole
/// milliseconds), so the slices are equal to the millisecond and the last
/// ends at the window's end; a window shorter than `buckets` ms has one
/// slice per millisecond. Each is a store count of its own, so a request
/// costs a count per slice.
async fn series(
    store: &dyn Store,
    tenant: Option<&TenantId>,
    window: &Window,
) -> Result<Vec<Slice>, StoreError> {
    let Some(buckets) = window.buckets else {
        return Ok(Vec::new());
    };
    let length = window.until_ms.saturating_sub(window.since_ms);
    if length == 0 {
        return Ok(Vec::new());
    }
    let buckets = u64::from(buckets).min(length);
    // `length × i` in 128 bits: a window's length times 62 cannot
    // overflow, whatever the bounds of a millisecond time.
    let bound = |i: u64| {
        let offset = u128::from(length) * u128::from(i) / u128::from(buckets);
        window.since_ms + u64::try_from(offset).unwrap_or(length)
    };
    let mut slices = Vec::with_capacity(usize::try_from(buckets).unwrap_or(0));
    for i in 0..buckets {
        let (since, until) = (bound(i), bound(i + 1));
        let counted = store
            .run_stats(&rein_store::StatsQuery {
                tenant: tenant.cloned(),
                agent: window.agent.clone(),
                since_ms: Timestamp::from_millis(since),
                until_ms: Timestamp::from_millis(until),
            })
            .await?;
        let part = Window {
            since_ms: since,
            until_ms: until,
            agent: window.agent.clone(),
            clamped: false,
            buckets: None,
        };
        slices.push(Slice {
            since_ms: since,
            until_ms: until,
            tally: Stats::of(&part, &counted).total,
        });
    }
    Ok(slices)
}

/// Each tool's observed latency, as the store holds it (a row that cannot
/// be read is left out: the next flush replaces it).
async fn tool_latency(store: &dyn Store) -> Result<BTreeMap<String, ToolLatency>, StoreError> {
    use rein_core::latency::LatencySubject;
    let millis = |d: std::time::Duration| d.as_secs_f64() * 1_000.0;
    let rows = store.latency_histograms().await?;
    Ok(rows
        .records
        .into_iter()
        .filter_map(|record| {
            let LatencySubject::Tool(tool) = LatencySubject::parse(&record.subject)? else {
                return None;
            };
            let profile = record.histogram.profile()?;
            Some((
                tool,
                ToolLatency {
                    samples: record.histogram.samples(),
                    p50_ms: millis(profile.p50()),
                    p95_ms: millis(profile.p95()),
                    p99_ms: millis(profile.p99()),
                },
            ))
        })
        .collect())
}

impl Stats {
    /// The tallies of the store's counts.
    fn of(window: &Window, counted: &RunStats) -> Stats {
        let (mut total, mut by_agent, mut by_model) = (
            Tally::default(),
            BTreeMap::<String, Tally>::new(),
            BTreeMap::<String, Tally>::new(),
        );
        for row in &counted.statuses {
            total.add(row.status, row.runs, row.tokens, row.cost_micros);
            by_agent.entry(row.agent.clone()).or_default().add(
                row.status,
                row.runs,
                row.tokens,
                row.cost_micros,
            );
        }
        for row in &counted.models {
            by_model.entry(row.model.clone()).or_default().add(
                row.status,
                row.runs,
                row.tokens,
                row.cost_micros,
            );
        }
        let mut guardrails = BTreeMap::<Guardrail, GuardrailTally>::new();
        for row in &counted.guardrails {
            let tally = guardrails.entry(row.guardrail).or_default();
            tally.fired += row.fired;
            tally.runs += row.runs;
            let agent = tally.by_agent.entry(row.agent.clone()).or_default();
            agent.fired += row.fired;
            agent.runs += row.runs;
        }
        let finish =
            |m: BTreeMap<String, Tally>| m.into_iter().map(|(k, t)| (k, t.finish())).collect();
        Stats {
            since_ms: window.since_ms,
            until_ms: window.until_ms,
            clamped: window.clamped,
            total: total.finish(),
            by_agent: finish(by_agent),
            by_model: finish(by_model),
            guardrails: guardrails
                .into_iter()
                .map(|(g, t)| (g.as_str().to_owned(), t))
                .collect(),
            keys: BTreeMap::new(),
            series: Vec::new(),
            tool_latency: BTreeMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn pairs(query: &[(&str, &str)]) -> Vec<(String, String)> {
        query
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_window_defaults_to_the_last_day_and_is_bounded() {
        let now = 100 * DEFAULT_WINDOW_MS;
        let window = parse(&[], now).unwrap();
        assert_eq!(
            (window.since_ms, window.until_ms),
            (now - DEFAULT_WINDOW_MS, now)
        );
        let at_most = parse(
            &pairs(&[("since", "0"), ("until", &MAX_WINDOW_MS.to_string())]),
            now,
        )
        .unwrap();
        assert_eq!((at_most.since_ms, at_most.clamped), (0, false));
        let over = (MAX_WINDOW_MS + 7).to_string();
        let over = parse(&pairs(&[("since", "0"), ("until", &over)]), now).unwrap();
        assert_eq!((over.since_ms, over.clamped), (7, true));
        for (query, parameter) in [
            (vec![("until", "x")], "until"),
            (vec![("agent", "")], "agent"),
            (vec![("agent", "a"), ("agent", "b")], "agent"),
            (vec![("sinse", "1")], "sinse"),
            (vec![("buckets", "0")], "buckets"),
            (vec![("buckets", "63")], "buckets"),
        ] {
            let problem = parse(&pairs(&query), now).unwrap_err();
            assert_eq!(problem.extra.unwrap()["parameter"], parameter, "{query:?}");
        }
    }

    #[test]
    fn ratios_are_over_ended_runs_and_successes() {
        let mut tally = Tally {
            runs: 4,
            unfinished: 1,
            cost_micros: 900,
            ..Tally::default()
        };
        tally.outcomes.insert("succeeded".into(), 2);
        tally.outcomes.insert("failed".into(), 1);
        let tally = tally.finish();
        assert_eq!(tally.success_rate, Some(2.0 / 3.0));
        assert_eq!(tally.cost_per_success_micros, Some(450));
        let none = Tally::default().finish();
        assert_eq!(
            (none.success_rate, none.cost_per_success_micros),
            (None, None)
        );
    }
}
