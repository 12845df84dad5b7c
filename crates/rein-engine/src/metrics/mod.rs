//! Metrics of every decision the engine makes — counters, histograms and
//! gauges per tenant, agent, tool, provider, model and arm — on the
//! `prometheus-client` registry, encoded in the Prometheus text format.
//!
//! # Why derived from events
//!
//! Events explain one run; an operator watching a fleet needs rates and
//! tails: how often a provider's breaker opens, how slow the p99 tool call
//! is, how many tokens a tenant burns. Counting the events as they are
//! emitted (not as they are stored) keeps one source of truth: a decision
//! that made no event is not counted, and a counted decision can always be
//! found in a run's stream. Model retries, tool retries and self-healing
//! are separate series, so one cannot hide in the other.
//!
//! Metrics live in the engine's process, like its breakers; a cluster is
//! summed by the scraper. The server registers its own families (HTTP
//! requests, connections) in the same registry ([`Metrics::register`]),
//! so one [`Metrics::render`] is the whole `/metrics`.

mod families;
mod labels;
mod record;

use std::sync::{Mutex, PoisonError};

use prometheus_client::collector::Collector;
use prometheus_client::registry::{Metric, Registry};

pub use labels::{DEFAULT_MAX_VALUES, LabelBounds, NONE, OTHER, Scope};

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The engine's metrics, and the registry a host adds its own to.
#[derive(Debug)]
pub struct Metrics {
    registry: Mutex<Registry>,
    families: families::Families,
    bounds: labels::Bounds,
    /// Each tool's class, as its attempts' `tool_call_started` said (a
    /// finished attempt's event does not repeat it).
    classes: Mutex<std::collections::HashMap<String, rein_core::ToolClass>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new(LabelBounds::default())
    }
}

impl Metrics {
    /// Metrics whose tenant and agent labels are bounded by `bounds`.
    pub fn new(bounds: LabelBounds) -> Self {
        let mut registry = Registry::default();
        let families = families::Families::register(&mut registry);
        Metrics {
            registry: Mutex::new(registry),
            families,
            bounds: labels::Bounds::new(bounds),
            classes: Mutex::default(),
        }
    }

    /// The label values a run of `agent` for `tenant` is counted under
    /// (each `other` when beyond the bounds).
    pub fn scope(&self, tenant: &str, agent: &str) -> Scope {
        self.bounds.scope(tenant, agent)
    }

    /// Registers a host's own metric (a server's request histogram), so
    /// [`Metrics::render`] shows it beside the engine's. Register each name
    /// once per process.
    pub fn register(&self, name: &str, help: &str, metric: impl Metric) {
        self.registry().register(name, help, metric);
    }

    /// Registers a host's collector (values it keeps itself, encoded at
    /// each scrape).
    pub fn register_collector(&self, collector: Box<dyn Collector>) {
        self.registry().register_collector(collector);
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Observes that a run of `scope` stopped at its `dimension` ceiling
    /// having used `share` of it (a ratio, 1 for all of it).
    pub fn budget_used(&self, scope: &Scope, dimension: &str, share: f64) {
        self.families
            .budget_used
            .get_or_create(&families::BudgetUse {
                tenant: scope.tenant.clone(),
                agent: scope.agent.clone(),
                dimension: dimension.to_owned(),
            })
            .observe(share);
    }

    /// Every metric in the Prometheus text exposition format (0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail; an encoder error would be a bug
        // of a collector, and the families encoded so far are kept.
        if let Err(e) =
            prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry())
        {
            tracing::warn!("encoding the metrics failed: {e}");
        }
        out
    }

    /// The tenant label value `tenant`'s events are counted under, when
    /// they are counted apart from other tenants' (`None`: not counted
    /// yet, or counted as `other` with the tenants
    /// `[server.metrics_labels]` leaves out). Unlike [`Metrics::scope`],
    /// it admits nothing: reading the counters never takes a label value.
    pub fn own_tenant_label(&self, tenant: &str) -> Option<String> {
        self.bounds.own_tenant(tenant)
    }

    /// Every sample named `name` whose labels include all of `labels`: what
    /// a dashboard reads of this process's counters, one per label set.
    /// (Read from the rendered text, the one encoding `/metrics` also
    /// serves, rather than from each family's typed labels.)
    pub fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<Sample> {
        samples(&self.render())
            .filter(|s| s.name == name)
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(k2, v2)| k == k2 && v == v2))
            })
            .collect()
    }

    /// The sum of every sample named `name` whose labels include all of
    /// `labels` (0 when none): `rein_tool_calls_total` with
    /// `[("tool", "update")]` sums over tenants, agents and outcomes.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let sum: f64 = self.samples(name, labels).iter().map(|s| s.value).sum();
        whole(sum)
    }
}

/// One sample of a metric: its labels and value, as [`Metrics::render`]
/// wrote them.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The sample's name (a counter's carries `_total`).
    pub name: String,
    /// Its labels, in the order written.
    pub labels: Vec<(String, String)>,
    /// Its value.
    pub value: f64,
}

/// `value` as a count: a fraction (a cost) is cut, and what is not a
/// finite non-negative number is 0.
fn whole(value: f64) -> u64 {
    if value.is_finite() && value >= 0.0 {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let whole = value as u64;
        whole
    } else {
        0
    }
}

impl Sample {
    /// The value as a count ([`Metrics::get`]'s rule): a counter's is a
    /// whole number.
    pub fn count(&self) -> u64 {
        whole(self.value)
    }

    /// The value of label `name` (`""` when the sample has none).
    pub fn label(&self, name: &str) -> &str {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    }
}

/// The samples of `text`, in the text format this module writes (label
/// values escaped with `\\`, `\"` and `\n`).
fn samples(text: &str) -> impl Iterator<Item = Sample> + '_ {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let value = value.parse().ok()?;
            let (name, labels) = match series.split_once('{') {
                None => (series, ""),
                Some((name, rest)) => (name, rest.strip_suffix('}')?),
            };
            Some(Sample {
                name: name.to_owned(),
                labels: parse_labels(labels),
                value,
            })
        })
}

fn parse_labels(mut rest: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, other)) => value.push(other),
                    None => {}
                },
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.push((key.trim_start_matches(',').to_owned(), value));
        rest = &after[end..];
    }
    out
}

#[cfg(test)]
mod tests;
