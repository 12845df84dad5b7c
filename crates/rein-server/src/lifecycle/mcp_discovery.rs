//! Discovery refresh: the tools of every MCP server the registry calls,
//! listed again on each server's `refresh` by one `rein serve` of those
//! sharing the store, and compared with the definitions the registry
//! pinned.
//!
//! # Why, beside the check at call time
//!
//! A call of a pinned tool is refused while the server's definition
//! differs from the pin, read from a listing at most `refresh` old
//! (`rein_engine::tool::McpTool`). That protects the call, but says
//! nothing until a model tries one, possibly hours after the server
//! changed. Discovery finds it on its own: a warning naming the tools and
//! `rein mcp import` to review them, and metrics an alert can watch
//! (`rein_mcp_pins_broken` above 0). It also refreshes this node's
//! listing, so its next call is checked against what the server says now.
//!
//! # Why elected
//!
//! Listing is the same answer for every node: one node asks (seed 004,
//! discovery as an elected service), so a cluster of many nodes does not
//! multiply a server's load, and a dead holder is replaced within
//! [`crate::lifecycle::singleton::LEASE_PASSES`] passes.

use std::collections::BTreeMap;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use rein_core::Clock as _;
use rein_core::registry::{AdapterSpec, McpServerSpec, Registry};
use rein_engine::tool::mcp::McpSession;

use crate::http::state::AppState;

/// The discovery refresh service.
pub const MCP_DISCOVERY: &str = "mcp-discovery";

/// A pinned tool of a server: its registry name, its name on the server,
/// its pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinned {
    /// The registry entry's name.
    pub tool: String,
    /// The tool's name on the server.
    pub remote: String,
    /// The digest of the definition the entry was made from.
    pub pin: String,
}

/// What one listing found of a server's pinned tools.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Findings {
    /// Pinned tools whose definition is another now.
    pub changed: Vec<String>,
    /// Pinned tools the server no longer lists.
    pub missing: Vec<String>,
}

impl Findings {
    /// How many pinned tools are not as pinned.
    pub fn broken(&self) -> usize {
        self.changed.len() + self.missing.len()
    }
}

/// The servers the registry calls tools of, each with its pinned tools
/// (a server whose tools are all unpinned is listed too: its listing is
/// refreshed, nothing is compared).
pub fn servers(registry: &Registry) -> BTreeMap<McpServerSpec, Vec<Pinned>> {
    let mut servers: BTreeMap<McpServerSpec, Vec<Pinned>> = BTreeMap::new();
    for (name, spec) in registry.tools() {
        if let AdapterSpec::Mcp {
            server, tool, pin, ..
        } = &spec.adapter
        {
            let pinned = servers.entry(server.clone()).or_default();
            if let Some(pin) = pin {
                pinned.push(Pinned {
                    tool: name.clone(),
                    remote: tool.clone(),
                    pin: pin.clone(),
                });
            }
        }
    }
    servers
}

/// Compares `pinned` with what `session` lists now.
///
/// # Errors
///
/// Why the server could not be listed.
pub async fn inspect(session: &McpSession, pinned: &[Pinned]) -> Result<Findings, String> {
    let listed = session.refresh().await.map_err(|e| e.to_string())?;
    let mut findings = Findings::default();
    for p in pinned {
        match listed.get(&p.remote) {
            None => findings.missing.push(p.tool.clone()),
            Some(definition) if definition.digest() != p.pin => {
                findings.changed.push(p.tool.clone());
            }
            Some(_) => {}
        }
    }
    Ok(findings)
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabel {
    server: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    server: String,
    /// `as_pinned`, `changed` (some pinned tool is not as pinned) or
    /// `unreachable`.
    outcome: &'static str,
}

/// The discovery metrics.
#[derive(Clone)]
pub struct DiscoveryMetrics {
    listings: Family<OutcomeLabel, Counter>,
    broken: Family<ServerLabel, Gauge>,
}

impl DiscoveryMetrics {
    /// Registers them in `metrics` (once per process).
    pub fn register(metrics: &rein_engine::metrics::Metrics) -> Self {
        let listings = Family::<OutcomeLabel, Counter>::default();
        let broken = Family::<ServerLabel, Gauge>::default();
        metrics.register(
            "rein_mcp_discoveries",
            "Listings of an MCP server's tools by the discovery refresh, by server and outcome (as_pinned, changed, unreachable); counted by the node that holds the discovery lease",
            listings.clone(),
        );
        metrics.register(
            "rein_mcp_pins_broken",
            "Pinned MCP tools whose server lists another definition or none, at the last listing of the node holding the discovery lease (calls of them are refused until re-imported)",
            broken.clone(),
        );
        DiscoveryMetrics { listings, broken }
    }

    fn record(&self, server: &str, found: &Result<Findings, String>) {
        let outcome = match found {
            Ok(findings) if findings.broken() == 0 => "as_pinned",
            Ok(_) => "changed",
            Err(_) => "unreachable",
        };
        self.listings
            .get_or_create(&OutcomeLabel {
                server: server.to_owned(),
                outcome,
            })
            .inc();
        if let Ok(findings) = found {
            self.broken
                .get_or_create(&ServerLabel {
                    server: server.to_owned(),
                })
                .set(i64::try_from(findings.broken()).unwrap_or(i64::MAX));
        }
    }
}

/// Lists every server's tools on its `refresh`, while this process holds
/// the [`MCP_DISCOVERY`] lease; returns at once when the registry calls
/// no MCP server.
pub async fn refresh_forever(state: Arc<AppState>) {
    let servers = servers(&state.registry);
    let Some(every) = servers.keys().map(|s| s.refresh).min() else {
        return;
    };
    let clock = state.engine.clock();
    let mut due: BTreeMap<String, rein_core::Instant> = BTreeMap::new();
    loop {
        clock.sleep(every).await;
        if !crate::lifecycle::singleton::holds(&state, MCP_DISCOVERY, every).await {
            continue;
        }
        for (spec, pinned) in &servers {
            let now = clock.now();
            if due.get(&spec.name).is_some_and(|at| now < *at) {
                continue;
            }
            due.insert(spec.name.clone(), now + spec.refresh);
            let found = inspect(&McpSession::shared(spec), pinned).await;
            state.mcp_discovery.record(&spec.name, &found);
            report(&spec.name, &found);
        }
    }
}

/// Says what a listing found, on the log.
fn report(server: &str, found: &Result<Findings, String>) {
    match found {
        Ok(findings) if findings.broken() == 0 => {
            tracing::debug!(server, "MCP discovery: the pinned tools are as pinned");
        }
        Ok(findings) => tracing::warn!(
            server,
            changed = ?findings.changed,
            missing = ?findings.missing,
            "MCP discovery: pinned tools are no longer as pinned; their calls are refused until re-imported (`rein mcp import {server} --config …` shows the difference)"
        ),
        Err(why) => tracing::warn!(
            server,
            "MCP discovery: cannot list the server's tools: {why}"
        ),
    }
}
