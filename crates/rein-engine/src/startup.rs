//! What every start does before it opens a store or listens: `rein check`,
//! `rein run`, `rein resume`, `rein reconcile`, `rein demo` and `rein
//! serve` all call [`prepare`], so a config that `rein check` accepts
//! starts.
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
//!    ─► build every provider, once (scripts read and parsed), and every tool adapter
//!    ─► bind every agent and every [models.*] binding, with those providers
//!    ─► the engine's own refusals (its breaker settings)
//!    ─► the server's own refusals (a non-loopback listen without API keys)
//! ```
//!
//! Every refusal is a [`ConfigProblem`] naming the file and the field, and
//! states its cause once. What a start says but does not refuse (a secret
//! too short to be redacted) is a warning, kept on success and on failure
//! alike ([`ConfigErrors::warnings`]).
//!
//! # Purpose
//!
//! Some refusals belong to one command: `rein serve` refuses to listen on
//! a non-loopback address without API keys, and `rein run` — which never
//! listens — does not. [`Purpose`] says which start this is; `rein check`
//! ([`Purpose::Check`]) reports a serve-only refusal as a warning naming
//! `rein serve`, and `rein check --serve` ([`Purpose::Serve`]) as the
//! error `rein serve` would give.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rein_core::registry::ConfigProblem;

use crate::bind::{self, BindError};
use crate::config::{CompiledSchemas, ConfigErrors, Loader, Registry, SourceMaps};
use crate::provider::ModelProvider;
use crate::run::{AgentBinding, ModelBinding};

/// Which start [`prepare`] runs the steps of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Purpose {
    /// `rein check`: every refusal of a run; what only `rein serve` would
    /// refuse is a warning naming it.
    Check,
    /// A command that runs agents but never listens (`rein run`, `resume`,
    /// `reconcile`, `demo`).
    Run,
    /// `rein serve` (or `rein check --serve`), listening on `listen` —
    /// `--listen` — or, when `None`, on `server.listen`.
    Serve {
        /// The address given instead of `server.listen`.
        listen: Option<SocketAddr>,
    },
}

/// A config that passed every step of a start, with what the steps built.
pub struct Startup {
    /// The registry.
    pub registry: Registry,
    /// Every tool's compiled argument schema.
    pub schemas: CompiledSchemas,
    /// Every agent, bound (each provider was built once for all of them;
    /// take one for a run: a scripted provider starts at its first turn).
    pub agents: BTreeMap<String, AgentBinding>,
    /// Every `[models.*]` binding, bound with the same providers.
    pub models: BTreeMap<String, ModelBinding>,
    /// What a start says but does not refuse (a secret too short to be
    /// redacted; for [`Purpose::Check`], what `rein serve` would refuse),
    /// each naming its field.
    pub warnings: Vec<ConfigProblem>,
    /// Where each setting is written: a caller refusing more
    /// ([`SourceMaps::place`]) names the line too.
    pub sources: SourceMaps,
}

impl std::fmt::Debug for Startup {
    // By hand: the registry and the bindings hold header values and keys.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Startup")
            .field("tools", &self.registry.tools().len())
            .field("agents", &self.agents.keys().collect::<Vec<_>>())
            .field("models", &self.models.keys().collect::<Vec<_>>())
            .field("warnings", &self.warnings)
            .finish_non_exhaustive()
    }
}

/// Runs every step of a start on the config at `path`; see the module
/// docs. `env` is what binding reads provider keys from.
///
/// # Errors
///
/// [`ConfigErrors`] with every problem found, each naming its file and
/// field, and the warnings found on the way.
pub fn prepare(
    loader: &Loader<'_>,
    path: &Path,
    client: &reqwest::Client,
    env: &dyn Fn(&str) -> Option<String>,
    purpose: Purpose,
) -> Result<Startup, ConfigErrors> {
    let loaded = loader.load_with_warnings(path)?;
    let registry = loaded.registry;
    let sources = loaded.sources;
    let mut warnings = loaded.warnings;
    // Every problem and warning of the steps below is placed at its line
    // (`sources`) as it is found; what `--listen` gave has none.
    let refuse = |problems: Vec<ConfigProblem>, warnings: Vec<ConfigProblem>| {
        ConfigErrors::new(problems).with_warnings(sources.place_all(warnings))
    };
    let schemas = match CompiledSchemas::compile(&registry) {
        Ok(schemas) => schemas,
        Err(errors) => return Err(refuse(sources.place_all(errors.into_problems()), warnings)),
    };
    let mut problems = Vec::new();
    let mut providers: BTreeMap<String, Arc<dyn ModelProvider>> = BTreeMap::new();
    for (name, spec) in registry.providers() {
        match bind::build_provider(&registry, name, client, env) {
            Ok(provider) => {
                providers.insert(name.clone(), provider);
            }
            Err(e) => {
                let field = match e {
                    BindError::Script(_) => format!("providers.{name}.script"),
                    _ => format!("providers.{name}"),
                };
                problems.push(ConfigProblem::new(&spec.source, field, e.to_string()));
            }
        }
    }
    for (name, spec) in registry.tools() {
        if let Err(e) = bind::build_tool(spec) {
            let field = format!("tools.{name}.adapter");
            problems.push(ConfigProblem::new(&spec.source, field, e.to_string()));
        }
    }
    // With every provider and tool built, an agent or binding can only
    // fail on what joins them; each is reported on its own entry.
    let mut agents = BTreeMap::new();
    let mut models = BTreeMap::new();
    if problems.is_empty() {
        let source = bind::built(&providers);
        for (name, spec) in registry.agents() {
            match bind::bind_agent_using(&registry, name, &source) {
                Ok(agent) => {
                    agents.insert(name.clone(), agent);
                }
                Err(e) => problems.push(ConfigProblem::new(
                    &spec.source,
                    format!("agents.{name}"),
                    e.to_string(),
                )),
            }
        }
        for (name, spec) in registry.models() {
            match bind::bind_model_using(&registry, name, &source) {
                Ok(model) => {
                    models.insert(name.clone(), model);
                }
                Err(e) => problems.push(ConfigProblem::new(
                    &spec.source,
                    format!("models.{name}"),
                    e.to_string(),
                )),
            }
        }
    }
    let mut problems = sources.place_all(problems);
    // The engine's own refusals, on the same inputs `Engine::build` is
    // given (NOTE: keep in step with `EngineBuilder::build`; the node id
    // is generated, not configured, so only the breakers can be refused).
    problems.extend(breakers_problem(
        registry.breakers(),
        &sources,
        &registry_file(&registry, path),
    ));
    if let Some(listen_problem) = listen_problem(&registry, path, purpose) {
        match purpose {
            // The address `--listen` gave is not written in the file.
            Purpose::Serve { listen: Some(_) } => problems.push(listen_problem),
            Purpose::Serve { listen: None } => problems.push(sources.place(listen_problem)),
            Purpose::Check => warnings.push(ConfigProblem::new(
                &listen_problem.file,
                &listen_problem.field,
                format!(
                    "rein serve would refuse this (rein run would not): {}",
                    listen_problem.message
                ),
            )),
            Purpose::Run => {}
        }
    }
    if !problems.is_empty() {
        return Err(refuse(problems, warnings));
    }
    let warnings = sources.place_all(warnings);
    Ok(Startup {
        registry,
        schemas,
        agents,
        models,
        warnings,
        sources,
    })
}

/// The engine's refusal of the `[breakers]` settings, if it refuses them,
/// filed under the file (and at the line) that writes the refused field:
/// in a directory config `[breakers]` need not sit beside `[server]`.
/// `fallback` is for a field no file writes (a default).
fn breakers_problem(
    breakers: &rein_core::breaker::BreakersConfig,
    sources: &SourceMaps,
    fallback: &Path,
) -> Option<ConfigProblem> {
    let e = rein_core::breaker::Breakers::new(breakers.clone()).err()?;
    let field = e.field().replacen("breaker.", "breakers.", 1);
    let file = sources.holding(&field).unwrap_or(fallback);
    Some(sources.place(ConfigProblem::new(file, field, e.to_string())))
}

/// The file a problem with a setting of no table of its own is filed
/// under: the `[server]` table's, else the config given.
fn registry_file(registry: &Registry, path: &Path) -> PathBuf {
    registry
        .server()
        .source
        .clone()
        .unwrap_or_else(|| path.to_path_buf())
}

/// `rein serve`'s refusal to listen on a non-loopback address without API
/// keys, when it applies; for [`Purpose::Run`], never. The problem names
/// where the address came from: `--listen`, `server.listen`, or the
/// default.
fn listen_problem(registry: &Registry, path: &Path, purpose: Purpose) -> Option<ConfigProblem> {
    let server = registry.server();
    let (listen, from) = match purpose {
        Purpose::Run => return None,
        Purpose::Serve {
            listen: Some(listen),
        } => (listen, " (given by --listen)"),
        Purpose::Serve { listen: None } | Purpose::Check => (
            server.listen,
            if server.source.is_some() {
                ""
            } else {
                " (the default; there is no [server] table)"
            },
        ),
    };
    if !server.api_keys.is_empty() || listen.ip().is_loopback() {
        return None;
    }
    Some(ConfigProblem::new(
        registry_file(registry, path),
        "server.listen",
        format!(
            "is {listen}{from}, not a loopback address, but there is no [[server.api_keys]]: \
             rein serve refuses to serve without authentication; add API keys or listen on a \
             loopback address"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use rein_core::registry::{Position, SourceMap};

    use super::*;

    /// A directory config whose `[breakers]` is not in the `[server]`
    /// file: the refusal names the breakers' file and line, not the
    /// server's file.
    #[test]
    fn a_breakers_refusal_names_the_file_and_line_of_the_field() {
        let breakers_text = "# breakers\n\n[breakers.provider]\nbreak_duration = \"0s\"\n";
        let mut sources = SourceMaps::default();
        sources.insert(
            Path::new("10-server.toml"),
            SourceMap::parse("[server]\nlisten = \"127.0.0.1:8787\"\n").unwrap(),
        );
        sources.insert(
            Path::new("20-breakers.toml"),
            SourceMap::parse(breakers_text).unwrap(),
        );
        let config: toml::Table = toml::from_str(breakers_text).unwrap();
        let breakers: rein_core::breaker::BreakersConfig =
            config["breakers"].clone().try_into().unwrap();
        let problem = breakers_problem(&breakers, &sources, Path::new("10-server.toml"))
            .expect("a zero break_duration is refused");
        assert_eq!(problem.file, Path::new("20-breakers.toml"));
        assert_eq!(problem.field, "breakers.provider.break_duration");
        assert_eq!(problem.position, Some(Position { line: 4, column: 1 }));
        assert!(
            breakers_problem(
                &rein_core::breaker::BreakersConfig::default(),
                &sources,
                Path::new("10-server.toml")
            )
            .is_none()
        );
    }
}
