//! What every start does before it opens a store or listens: `rein check`,
//! `rein run` and `rein serve` all call [`prepare`], so a config that
//! `rein check` accepts starts.
//!
//! # Why one function
//!
//! A check that runs *some* of the start's steps passes configs the start
//! then refuses (a script file that does not exist), or that crash it (a
//! duration that overflows the deadline arithmetic). So the steps are here,
//! once, in the order a start runs them:
//!
//! ```text
//!  load (files, TOML, ${ENV}, secrets, integrity check, numeric ranges)
//!    ─► compile every tool's JSON Schema
//!    ─► build every provider (scripts read and parsed) and every tool adapter
//!    ─► bind every agent and every [models.*] binding
//!    ─► the server's own refusals (a non-loopback listen without API keys)
//! ```
//!
//! Every refusal is a [`ConfigProblem`] naming the file and the field, and
//! states its cause once.

use std::net::SocketAddr;
use std::path::Path;

use rein_core::registry::ConfigProblem;

use crate::bind::{self, BindError};
use crate::config::{CompiledSchemas, ConfigErrors, Loader, Registry};

/// A config that passed every step of a start.
#[derive(Debug)]
pub struct Startup {
    /// The registry.
    pub registry: Registry,
    /// Every tool's compiled argument schema.
    pub schemas: CompiledSchemas,
    /// What a start says but does not refuse (a secret too short to be
    /// redacted), each naming its field.
    pub warnings: Vec<ConfigProblem>,
}

/// Runs every step of a start on the config at `path`; see the module
/// docs. `env` is what binding reads provider keys from; `listen` is the
/// address a `rein serve --listen` gives instead of `server.listen`.
///
/// # Errors
///
/// [`ConfigErrors`] with every problem found, each naming its file and
/// field.
pub fn prepare(
    loader: &Loader<'_>,
    path: &Path,
    client: &reqwest::Client,
    env: &dyn Fn(&str) -> Option<String>,
    listen: Option<SocketAddr>,
) -> Result<Startup, ConfigErrors> {
    let loaded = loader.load_with_warnings(path)?;
    let registry = loaded.registry;
    let schemas = CompiledSchemas::compile(&registry)?;
    let mut problems = Vec::new();
    for (name, spec) in registry.providers() {
        if let Err(e) = bind::build_provider(&registry, name, client, env) {
            let field = match e {
                BindError::Script(_) => format!("providers.{name}.script"),
                _ => format!("providers.{name}"),
            };
            problems.push(ConfigProblem::new(&spec.source, field, e.to_string()));
        }
    }
    for (name, spec) in registry.tools() {
        if let Err(e) = bind::build_tool(spec) {
            let field = format!("tools.{name}.adapter");
            problems.push(ConfigProblem::new(&spec.source, field, e.to_string()));
        }
    }
    // With every provider and tool built, an agent or binding can only
    // fail on what joins them; those are reported on their own entry.
    if problems.is_empty() {
        for (name, spec) in registry.agents() {
            if let Err(e) = bind::bind_agent(&registry, name, client, env) {
                let field = format!("agents.{name}");
                problems.push(ConfigProblem::new(&spec.source, field, e.to_string()));
            }
        }
        if let Err(e) = bind::bind_models(&registry, client, env) {
            let file = registry
                .models()
                .values()
                .next()
                .map(|m| m.source.clone())
                .unwrap_or_default();
            problems.push(ConfigProblem::new(file, "models", e.to_string()));
        }
    }
    let server = registry.server();
    let listen = listen.unwrap_or(server.listen);
    if server.api_keys.is_empty() && !listen.ip().is_loopback() {
        problems.push(ConfigProblem::new(
            server.source.clone().unwrap_or_default(),
            "server.listen",
            format!(
                "is {}, not a loopback address, but there is no [[server.api_keys]]: rein \
                 refuses to serve without authentication; add API keys or listen on a \
                 loopback address",
                listen
            ),
        ));
    }
    if !problems.is_empty() {
        return Err(ConfigErrors::new(problems));
    }
    Ok(Startup {
        registry,
        schemas,
        warnings: loaded.warnings,
    })
}
