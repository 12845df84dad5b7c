//! `[server.metrics_labels]`: which tenants and agents get a label value of
//! their own in `/metrics`.
//!
//! # Why configurable
//!
//! Every label value is a series a scraper keeps. Tenants and agents are
//! the two labels an operator may have many of; by default the first
//! [`DEFAULT_METRICS_LABEL_VALUES`] of each seen get their own value and
//! the rest are counted as `other`. Naming the ones that matter keeps them
//! apart whatever order they come in, and folds the rest.

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::TenantId;

/// How many distinct tenants (and, apart, agents) get a label value of
/// their own unless `max_values` says otherwise.
pub const DEFAULT_METRICS_LABEL_VALUES: u32 = 50;

/// The most `max_values` may be: beyond, a scraper keeps too many series.
pub const MAX_METRICS_LABEL_VALUES: u32 = 1000;

/// `[server.metrics_labels]` as written in config.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct MetricsLabelsConfig {
    /// The tenants that keep their own value; absent: the first seen.
    pub tenants: Option<Vec<String>>,
    /// The agents that keep their own value; absent: the first seen.
    pub agents: Option<Vec<String>>,
    /// The most values of each label (a list may name no more).
    pub max_values: Option<u32>,
}

/// `[server.metrics_labels]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MetricsLabels {
    /// The tenants that keep their own value; `None`: the first
    /// `max_values` seen. Every other tenant is `other`.
    pub tenants: Option<Vec<TenantId>>,
    /// The agents that keep their own value; `None`: the first
    /// `max_values` seen. Every other agent is `other`.
    pub agents: Option<Vec<String>>,
    /// The most distinct values of each label.
    pub max_values: u32,
}

impl Default for MetricsLabels {
    fn default() -> Self {
        MetricsLabels {
            tenants: None,
            agents: None,
            max_values: DEFAULT_METRICS_LABEL_VALUES,
        }
    }
}

/// What a tenant list may name: the tenants of the keys, or, without keys,
/// `default` (every request acts for it).
pub(super) struct Known<'a> {
    /// The tenants of `[[server.api_keys]]`, in order.
    pub(super) key_tenants: Vec<&'a TenantId>,
    /// The `[agents.*]` names.
    pub(super) agents: BTreeSet<&'a str>,
}

/// Checks `c`: the settings, and each problem as (field, message).
pub(super) fn check(
    c: &MetricsLabelsConfig,
    known: &Known<'_>,
) -> (MetricsLabels, Vec<(String, String)>) {
    let mut problems = Vec::new();
    let mut out = MetricsLabels::default();
    match c.max_values {
        Some(n) if n == 0 || n > MAX_METRICS_LABEL_VALUES => problems.push((
            "server.metrics_labels.max_values".to_owned(),
            format!("must be 1..={MAX_METRICS_LABEL_VALUES}, but it is {n}"),
        )),
        Some(n) => out.max_values = n,
        None => {}
    }
    let limit = usize::try_from(out.max_values).unwrap_or(usize::MAX);
    if let Some(tenants) = &c.tenants {
        out.tenants = Some(check_tenants(tenants, known, limit, &mut problems));
    }
    if let Some(agents) = &c.agents {
        out.agents = Some(check_agents(agents, known, limit, &mut problems));
    }
    (out, problems)
}

fn too_many(field: &str, n: usize, limit: usize) -> (String, String) {
    (
        field.to_owned(),
        format!(
            "names {n} values, more than server.metrics_labels.max_values ({limit}): raise max_values, or name fewer"
        ),
    )
}

fn check_tenants(
    entries: &[String],
    known: &Known<'_>,
    limit: usize,
    problems: &mut Vec<(String, String)>,
) -> Vec<TenantId> {
    const FIELD: &str = "server.metrics_labels.tenants";
    if entries.len() > limit {
        problems.push(too_many(FIELD, entries.len(), limit));
    }
    let mut out: Vec<TenantId> = Vec::new();
    for (i, text) in entries.iter().enumerate() {
        let field = format!("{FIELD}[{i}]");
        let tenant = match TenantId::new(text.trim()) {
            Ok(tenant) => tenant,
            Err(err) => {
                problems.push((field, err.to_string()));
                continue;
            }
        };
        let possible = if known.key_tenants.is_empty() {
            tenant.as_str() == "default"
        } else {
            known.key_tenants.contains(&&tenant)
        };
        if !possible {
            let names: Vec<&str> = known.key_tenants.iter().map(|t| t.as_str()).collect();
            let who = if names.is_empty() {
                "without [[server.api_keys]] every request acts for `default`".to_owned()
            } else {
                format!("keys exist for: {}", names.join(", "))
            };
            problems.push((
                field,
                format!("`{tenant}` is no tenant a request can act for ({who}), so it would never be counted"),
            ));
        } else if out.contains(&tenant) {
            problems.push((field, format!("`{tenant}` is listed twice")));
        } else {
            out.push(tenant);
        }
    }
    out
}

fn check_agents(
    entries: &[String],
    known: &Known<'_>,
    limit: usize,
    problems: &mut Vec<(String, String)>,
) -> Vec<String> {
    const FIELD: &str = "server.metrics_labels.agents";
    if entries.len() > limit {
        problems.push(too_many(FIELD, entries.len(), limit));
    }
    let mut out: Vec<String> = Vec::new();
    for (i, text) in entries.iter().enumerate() {
        let field = format!("{FIELD}[{i}]");
        let name = text.trim();
        if !known.agents.contains(name) {
            let names: Vec<&str> = known.agents.iter().copied().collect();
            problems.push((
                field,
                format!(
                    "`{name}` is no [agents.*] of this config, so it would never be counted; agents: {}",
                    if names.is_empty() { "none".to_owned() } else { names.join(", ") }
                ),
            ));
        } else if out.iter().any(|a| a == name) {
            problems.push((field, format!("`{name}` is listed twice")));
        } else {
            out.push(name.to_owned());
        }
    }
    out
}
