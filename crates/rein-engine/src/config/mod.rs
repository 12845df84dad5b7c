//! Loading the registry from TOML: one file, or a directory of `*.toml`
//! files that together form one config.
//!
//! # Why here and not in rein-core
//!
//! [`rein_core::registry`] holds the types and the integrity check, pure.
//! This module is the I/O around it: reading files, reporting TOML errors
//! with their line and column, interpolating `${ENV}` in the values that
//! differ per deployment (rules below), and compiling each tool's JSON
//! Schema — then it hands everything to [`rein_core::registry::check`] and
//! returns its [`Registry`] or **every** problem found as [`ConfigErrors`],
//! each placed at its file, line and column ([`SourceMaps`]): the line of
//! the field, or of its table's header when the field is missing.
//!
//! A config is one file or a directory of files; nothing else feeds it (no
//! includes, no environment overrides of settings: `${ENV}` is written in
//! the file, so a problem with it has the line it is written on).
//!
//! # Pipeline
//!
//! ```text
//!  path ─► files (*.toml, name order) ─► TOML ─► entries, one by one ─► ${ENV}
//!        ─► rein_core::registry::check (+ JSON Schema compile) ─► Registry
//! ```
//!
//! A file that is not valid TOML stops the pipeline before the integrity
//! check: with part of the config unknown, cross-file checks would report
//! only noise. A single bad entry does not: it is reported with its field
//! path, and the rest is still checked.
//!
//! # `${ENV}` interpolation
//!
//! Only in `providers.*.base_url`, `tools.*.adapter.url`,
//! `tools.*.adapter.status_url`, `tools.*.adapter.headers.*` and
//! `tools.*.adapter.env.*`. An unset
//! variable is a problem naming the file and field, never an empty string;
//! `$${` writes a literal `${`.
//!
//! ```
//! # use std::collections::HashMap;
//! # use rein_engine::config::{CompiledSchemas, Loader};
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("rein.toml");
//! # std::fs::write(&path, r#"
//! # [resource_groups.orders]
//! # [tools.get_order]
//! # description = "Look up one order by its id."
//! # class = "read"
//! # resource_group = "orders"
//! # side_effect_tier = "none"
//! # owner = "orders-team"
//! # latency = { mode = "observe", fallback_p99 = "2s" }
//! # adapter = { kind = "http", url = "${DESK}/tools/get_order" }
//! # schema = { type = "object", properties = { order_id = { type = "string", description = "e.g. A-1001" } }, required = ["order_id"] }
//! # "#)?;
//! let env = HashMap::from([("DESK", "http://127.0.0.1:8080")]);
//! let registry = Loader::with_env(|name| env.get(name).map(|v| v.to_string())).load(&path)?;
//! let schemas = CompiledSchemas::compile(&registry)?;
//! assert!(schemas.validate_args("get_order", &serde_json::json!({})).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod env;
mod error;
mod parse;
pub(crate) mod schema;
mod source_maps;

use std::path::Path;

use rein_core::registry;

pub use env::EnvLookup;
pub use error::ConfigErrors;
pub use rein_core::registry::{ConfigProblem, Position, Registry};
pub use schema::{ArgProblem, CompiledSchemas, MAX_ARG_PROBLEMS};
pub use source_maps::SourceMaps;

/// Loads the config at `path` (a file or a directory of `*.toml` files),
/// interpolating `${ENV}` from the process environment.
///
/// # Errors
///
/// [`ConfigErrors`] with every problem found, each naming its file and
/// field.
pub fn load(path: &Path) -> Result<Registry, ConfigErrors> {
    Loader::new().load(path)
}

/// Loads configs, with an environment lookup of the caller's choice.
///
/// [`Loader::new`] reads the process environment; [`Loader::with_env`]
/// takes any lookup, so tests inject variables without mutating the
/// process environment (which other tests in the same process share).
pub struct Loader<'e> {
    env: Box<EnvLookup<'e>>,
}

impl std::fmt::Debug for Loader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader").finish_non_exhaustive()
    }
}

impl Default for Loader<'_> {
    fn default() -> Self {
        Loader::new()
    }
}

impl<'e> Loader<'e> {
    /// A loader reading the process environment.
    pub fn new() -> Loader<'e> {
        Loader {
            env: Box::new(env::process_env),
        }
    }

    /// A loader looking variables up with `env`.
    pub fn with_env(env: impl Fn(&str) -> Option<String> + 'e) -> Loader<'e> {
        Loader { env: Box::new(env) }
    }

    /// Loads the config at `path`; see [`load`].
    ///
    /// # Errors
    ///
    /// [`ConfigErrors`] with every problem found.
    pub fn load(&self, path: &Path) -> Result<Registry, ConfigErrors> {
        self.load_with_warnings(path).map(|loaded| loaded.registry)
    }

    /// Loads the config at `path`, with the warnings a start prints (a
    /// secret too short to be redacted).
    ///
    /// Loading teaches the process the config's secrets
    /// ([`rein_core::redact::register`]) before anything else is checked,
    /// so that no problem, log line or error of this process ever shows
    /// one: credential headers and command variables, credentials in URLs,
    /// each provider's `api_key_env`, and the API key digests (the rule is
    /// in [`rein_core::redact`]).
    ///
    /// # Errors
    ///
    /// [`ConfigErrors`] with every problem found, and the warnings
    /// ([`ConfigErrors::warnings`]).
    pub fn load_with_warnings(&self, path: &Path) -> Result<Loaded, ConfigErrors> {
        let mut parsed = parse::read(path);
        let maps = std::mem::take(&mut parsed.maps);
        if parsed.incomplete {
            return Err(ConfigErrors::new(maps.place_all(parsed.problems)));
        }
        let mut env_problems = Vec::new();
        let mut found = env::FoundSecrets::default();
        for source in &mut parsed.sources {
            env::interpolate_source(source, &*self.env, &mut env_problems, &mut found);
            self.note_keys(source, &mut found);
        }
        rein_core::redact::register(&found.secrets);
        let checked = registry::check(&parsed.sources, &schema::schema_issues);
        let mut problems = parsed.problems;
        let check_problems = checked.as_ref().err().cloned().unwrap_or_default();
        // A value that could not be interpolated is reported once, as such,
        // not again as (say) an invalid URL; a field that did not read (and
        // was taken out to read the rest of its entry) once, as it was
        // written, not again as missing.
        let unread = problems.clone();
        problems.extend(check_problems.into_iter().filter(|p| {
            !env_problems
                .iter()
                .any(|e| env::same_place(e, &p.file, &p.field))
                && !unread
                    .iter()
                    .any(|u| u.file == p.file && u.field == p.field)
        }));
        problems.extend(env_problems);
        problems.extend(self.unset_webhook_secrets(&parsed.sources));
        match checked {
            Ok(registry) if problems.is_empty() => Ok(Loaded {
                registry,
                warnings: maps.place_all(found.too_short),
                sources: maps,
            }),
            _ => Err(
                ConfigErrors::new(maps.place_all(group_by_file(&parsed.sources, problems)))
                    .with_warnings(maps.place_all(found.too_short)),
            ),
        }
    }

    /// A problem for each webhook whose `secret_env` names a variable that
    /// is not set (or is empty): its deliveries could not be signed, and a
    /// start that waited for the first event to say so would have sent
    /// nothing meanwhile.
    fn unset_webhook_secrets(&self, sources: &[registry::ConfigSource]) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        for source in sources {
            for (name, webhook) in &source.config.webhooks {
                if let Some(var) = webhook.secret_env.as_deref()
                    && (self.env)(var).is_none_or(|value| value.is_empty())
                {
                    problems.push(ConfigProblem::new(
                        &source.path,
                        format!("webhooks.{name}.secret_env"),
                        format!("names {var}, which is not set: deliveries could not be signed"),
                    ));
                }
            }
        }
        problems
    }

    /// Notes the provider keys and API key digests of `source` as secrets.
    fn note_keys(&self, source: &registry::ConfigSource, found: &mut env::FoundSecrets) {
        for (name, provider) in &source.config.providers {
            if let Some(key) = provider.api_key_env.as_deref().and_then(|v| (self.env)(v)) {
                found.note(&source.path, &format!("providers.{name}.api_key_env"), &key);
            }
        }
        for (name, webhook) in &source.config.webhooks {
            if let Some(secret) = webhook.secret_env.as_deref().and_then(|v| (self.env)(v)) {
                found.note(
                    &source.path,
                    &format!("webhooks.{name}.secret_env"),
                    &secret,
                );
            }
        }
        if let Some(server) = &source.config.server {
            for (i, key) in server.api_keys.iter().enumerate() {
                // A digest that is not 64 hex digits is refused by the
                // integrity check; it is no secret worth a second warning.
                if let Some(digest) = &key.sha256
                    && digest.len() == 64
                    && digest.bytes().all(|b| b.is_ascii_hexdigit())
                {
                    let field = format!("server.api_keys[{i}].sha256");
                    found.note(&source.path, &field, digest);
                    found.note(&source.path, &field, &digest.to_ascii_lowercase());
                }
            }
        }
    }
}

/// A loaded config and its warnings.
pub struct Loaded {
    /// The registry.
    pub registry: Registry,
    /// What a start should say but not refuse: values too short to be
    /// redacted, each naming its field.
    pub warnings: Vec<ConfigProblem>,
    /// Where each setting is written, to place problems found later (at
    /// start, by `rein check`) at their lines.
    pub sources: SourceMaps,
}

impl std::fmt::Debug for Loaded {
    // By hand: the registry holds header values and URLs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("tools", &self.registry.tools().len())
            .field("providers", &self.registry.providers().len())
            .field("warnings", &self.warnings)
            .finish_non_exhaustive()
    }
}

/// `problems` grouped by file in the order files were read, keeping each
/// file's problems in the order they were found.
fn group_by_file(
    sources: &[registry::ConfigSource],
    mut problems: Vec<ConfigProblem>,
) -> Vec<ConfigProblem> {
    let rank = |p: &ConfigProblem| {
        sources
            .iter()
            .position(|s| s.path == p.file)
            .unwrap_or(usize::MAX)
    };
    problems.sort_by_key(rank);
    problems
}
