//! `[tools.NAME.adapter]` as written in config: one table per kind of
//! adapter, each with only its own fields, picked by `kind`
//! ([`AdapterConfig`], `#[serde(tag = "kind")]`).
//!
//! # Why a tool holds an [`AdapterTable`], not the adapter
//!
//! A field of another kind (`program` on an http adapter) or a misspelt
//! one fails the variant's deserialization. Were that the tool's own
//! deserialization, the whole tool entry would be refused and its other
//! problems (a schema without descriptions, a missing class) would only
//! show at the next `rein check`: problems in waves. So the tool keeps the
//! table as read — the adapter, or every problem that kept it from being
//! read, each naming its field — and the check reports those with the rest
//! of the tool in one pass.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::spec::HttpMethod;

/// Which adapter calls a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AdapterKind {
    /// JSON over HTTP.
    Http,
    /// A local program: JSON arguments on stdin, the result on stdout.
    Command,
    /// Another agent of the registry, run as a child of the calling run.
    Agent,
    /// A tool of an MCP server (`[mcp_servers.NAME]`).
    Mcp,
}

impl AdapterKind {
    /// Every kind, in the order error messages list them.
    pub const ALL: [AdapterKind; 4] = [
        AdapterKind::Http,
        AdapterKind::Command,
        AdapterKind::Agent,
        AdapterKind::Mcp,
    ];

    /// The kind as config writes it.
    pub fn name(self) -> &'static str {
        match self {
            AdapterKind::Http => "http",
            AdapterKind::Command => "command",
            AdapterKind::Agent => "agent",
            AdapterKind::Mcp => "mcp",
        }
    }

    /// The kind config writes as `name`.
    pub fn from_name(name: &str) -> Option<AdapterKind> {
        AdapterKind::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
    }

    /// The fields a table of this kind may hold besides `kind`: the fields
    /// of its variant's struct, kept in step by a test.
    pub fn fields(self) -> &'static [&'static str] {
        match self {
            AdapterKind::Http => &["url", "method", "headers", "status_url", "max_result_bytes"],
            AdapterKind::Command => &["program", "args", "working_dir", "env", "max_output_bytes"],
            AdapterKind::Agent => &[
                "agent",
                "budget_ratio",
                "max_tokens",
                "max_steps",
                "wall_clock",
                "max_cost_usd",
            ],
            AdapterKind::Mcp => &["server", "tool", "pin", "max_result_bytes"],
        }
    }
}

impl fmt::Display for AdapterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a tool is called: `kind` (http, command, agent or mcp) picks the
/// table, and each kind takes only its own fields.
// A new kind is a variant here, its table struct, its fields in
// `AdapterKind::fields` and its check (`registry/check/adapter.rs`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum AdapterConfig {
    /// `kind = "http"`.
    Http(HttpAdapterConfig),
    /// `kind = "command"`.
    Command(CommandAdapterConfig),
    /// `kind = "agent"`.
    Agent(AgentAdapterConfig),
    /// `kind = "mcp"`.
    Mcp(McpAdapterConfig),
}

impl AdapterConfig {
    /// The variant's kind.
    pub fn kind(&self) -> AdapterKind {
        match self {
            AdapterConfig::Http(_) => AdapterKind::Http,
            AdapterConfig::Command(_) => AdapterKind::Command,
            AdapterConfig::Agent(_) => AdapterKind::Agent,
            AdapterConfig::Mcp(_) => AdapterKind::Mcp,
        }
    }
}

/// `kind = "http"`: JSON over HTTP.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct HttpAdapterConfig {
    /// Where calls go; `${ENV}` is interpolated by the loader. Required.
    pub url: Option<String>,
    /// The HTTP method; `POST` by default.
    pub method: Option<HttpMethod>,
    /// Extra headers; values are `${ENV}`-interpolated.
    pub headers: BTreeMap<String, String>,
    /// `GET status_url?key=K` looks a call up by its idempotency key.
    pub status_url: Option<String>,
    /// Result bytes kept before truncation.
    pub max_result_bytes: Option<u64>,
}

/// `kind = "command"`: a local program, JSON arguments on stdin and the
/// result on stdout.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct CommandAdapterConfig {
    /// The program to run; a bare name is looked up on `PATH` at call
    /// time, a path with a `/` is relative to this config file. Required.
    pub program: Option<String>,
    /// The program's arguments, passed as they are (no shell).
    pub args: Vec<String>,
    /// The working directory, relative to this config file; the directory
    /// rein was started in when unset.
    pub working_dir: Option<PathBuf>,
    /// Extra environment variables; values are `${ENV}`-interpolated by
    /// the loader, and those named for a credential (`API_TOKEN`) are
    /// redacted wherever rein writes. rein passes only a few of its own
    /// (see `rein_engine::tool::command`), so a tool gets what it is given
    /// here.
    pub env: BTreeMap<String, String>,
    /// Stdout and stderr bytes kept, each, before truncation.
    pub max_output_bytes: Option<u64>,
}

/// `kind = "agent"`: another agent of the registry, run as a child of the
/// calling run on a share of its budget.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct AgentAdapterConfig {
    /// The agent to run as a child. Required.
    pub agent: Option<String>,
    /// The share of the caller's remaining budget the child may use, in
    /// (0, 1]; [`DEFAULT_AGENT_BUDGET_RATIO`](super::DEFAULT_AGENT_BUDGET_RATIO)
    /// when unset.
    pub budget_ratio: Option<f64>,
    /// At most this many tokens for the child, on top of its share.
    pub max_tokens: Option<u64>,
    /// At most this many steps for the child, on top of its share.
    pub max_steps: Option<u32>,
    /// At most this much time for the child, on top of its share.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub wall_clock: Option<Duration>,
    /// At most this many dollars for the child, on top of its share.
    pub max_cost_usd: Option<f64>,
}

/// `kind = "mcp"`: a tool of an MCP server.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct McpAdapterConfig {
    /// The server (`[mcp_servers.NAME]`) offering the tool. Required.
    pub server: Option<String>,
    /// The tool's name on its server, when it differs from the registry's
    /// (which the model sees).
    pub tool: Option<String>,
    /// The digest of the tool's definition when it was imported
    /// (`sha256:…`, as `rein mcp import` writes it); a server whose
    /// definition differs is not called.
    pub pin: Option<String>,
    /// Result bytes kept before truncation.
    pub max_result_bytes: Option<u64>,
}

/// `[tools.NAME.adapter]` as read: the adapter as far as it could be
/// read, and every problem that kept it from being read whole.
///
/// A tool keeps this rather than the adapter so that a foreign, misspelt
/// or mistyped adapter field does not fail the whole tool entry: the check
/// reports it beside the tool's other problems, in one pass.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AdapterTable {
    /// The kind's own fields, read by their types; `None` when `kind` is
    /// missing or unknown, or a field has the wrong type. Beside
    /// problems, it lets the check report the fields' own problems in the
    /// same pass.
    pub config: Option<AdapterConfig>,
    /// Every problem found while reading, in field order.
    pub problems: Vec<AdapterProblem>,
}

/// A field of an adapter table that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AdapterProblem {
    /// The field below `adapter` (`program`, `headers.X`); empty for the
    /// table itself.
    pub field: String,
    /// What is wrong, as a sentence following the field.
    pub message: String,
}

impl AdapterProblem {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        AdapterProblem {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl AdapterTable {
    /// Reads `table`: its `kind`, then each field against that kind's, then
    /// the fields that belong to it, by their types.
    pub fn read(mut table: Map<String, Value>) -> AdapterTable {
        const KINDS: &str = "http, command, agent or mcp";
        let unread = |message: String| AdapterTable {
            config: None,
            problems: vec![AdapterProblem::new("kind", message)],
        };
        let kind = match table.remove("kind") {
            None => return unread(format!("is required: {KINDS}")),
            Some(Value::String(name)) => match AdapterKind::from_name(&name) {
                Some(kind) => kind,
                None => return unread(format!("must be {KINDS}, but it is `{name}`")),
            },
            Some(_) => return unread(format!("must be a string: {KINDS}")),
        };
        let own = kind.fields();
        let mut problems: Vec<AdapterProblem> = Vec::new();
        table.retain(|field, value| {
            if !own.contains(&field.as_str()) {
                problems.push(AdapterProblem::new(field.clone(), foreign(kind, field)));
                return false;
            }
            // TOML has no null: a null here is a float the JSON value
            // could not hold (`nan`, `inf`), which would otherwise read
            // as an unset field.
            if value.is_null() {
                problems.push(AdapterProblem::new(
                    field.clone(),
                    "must be a finite number, not nan or inf",
                ));
                return false;
            }
            true
        });
        let table = Value::Object(table);
        let read = match kind {
            AdapterKind::Http => typed(table).map(AdapterConfig::Http),
            AdapterKind::Command => typed(table).map(AdapterConfig::Command),
            AdapterKind::Agent => typed(table).map(AdapterConfig::Agent),
            AdapterKind::Mcp => typed(table).map(AdapterConfig::Mcp),
        };
        let config = read.map_err(|problem| problems.push(problem)).ok();
        // In field order, whatever order the map iterates in.
        problems.sort_by(|a, b| a.field.cmp(&b.field));
        AdapterTable { config, problems }
    }

    /// The adapter, when the table was read whole.
    pub fn read_whole(&self) -> Option<&AdapterConfig> {
        self.config.as_ref().filter(|_| self.problems.is_empty())
    }
}

impl From<AdapterConfig> for AdapterTable {
    fn from(config: AdapterConfig) -> Self {
        AdapterTable {
            config: Some(config),
            problems: Vec::new(),
        }
    }
}

/// A table is described as what it reads: one of the kinds' tables.
impl JsonSchema for AdapterTable {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        AdapterConfig::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        AdapterConfig::json_schema(generator)
    }
}

impl<'de> Deserialize<'de> for AdapterTable {
    /// Only a value that is not a table fails here (and fails the tool):
    /// everything wrong inside one is kept in [`AdapterTable::problems`].
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Map::<String, Value>::deserialize(deserializer).map(AdapterTable::read)
    }
}

/// One kind's table, by its struct's types; a failure names its field.
fn typed<T: serde::de::DeserializeOwned>(table: Value) -> Result<T, AdapterProblem> {
    serde_path_to_error::deserialize(table).map_err(|err| {
        let path = err.path().to_string();
        let field = if path == "." { String::new() } else { path };
        AdapterProblem::new(field, err.into_inner().to_string())
    })
}

/// Why `field` has no place on a `kind` adapter: it belongs to another
/// kind (and `status_url` has a reason of its own), or to none.
fn foreign(kind: AdapterKind, field: &str) -> String {
    if field == "status_url" {
        let why = match kind {
            AdapterKind::Command => "a command has no endpoint to look a call up by key",
            AdapterKind::Agent => "a child run has no endpoint to look a call up by key",
            AdapterKind::Mcp => "MCP has no lookup by idempotency key",
            AdapterKind::Http => unreachable!("status_url is an http field"),
        };
        return format!("is not allowed on a{} {kind} adapter: {why}", article(kind));
    }
    let owners: Vec<&str> = AdapterKind::ALL
        .into_iter()
        .filter(|other| other.fields().contains(&field))
        .map(AdapterKind::name)
        .collect();
    if owners.is_empty() {
        format!(
            "is not a field of a{} {kind} adapter; it takes {}",
            article(kind),
            kind.fields().join(", ")
        )
    } else {
        format!(
            "is not a setting of a{} {kind} adapter but of {}; remove it",
            article(kind),
            owners.join(" and ")
        )
    }
}

/// `n` before a kind whose name starts with a vowel sound.
fn article(kind: AdapterKind) -> &'static str {
    match kind {
        AdapterKind::Http | AdapterKind::Agent | AdapterKind::Mcp => "n",
        AdapterKind::Command => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> AdapterTable {
        toml::from_str::<AdapterTable>(text).unwrap()
    }

    fn problems(text: &str) -> Vec<(String, String)> {
        table(text)
            .problems
            .into_iter()
            .map(|p| (p.field, p.message))
            .collect()
    }

    #[test]
    fn each_kind_reads_its_own_fields() {
        let Some(AdapterConfig::Agent(agent)) = table(
            "kind = \"agent\"\nagent = \"researcher\"\nbudget_ratio = 0.25\nmax_tokens = 2000\nmax_steps = 5\nwall_clock = \"30s\"",
        )
        .config else {
            panic!("not an agent adapter");
        };
        assert_eq!(agent.agent.as_deref(), Some("researcher"));
        assert_eq!(agent.budget_ratio, Some(0.25));
        assert_eq!(agent.max_tokens, Some(2000));
        assert_eq!(agent.max_steps, Some(5));
        assert_eq!(agent.wall_clock, Some(Duration::from_secs(30)));
        assert_eq!(agent.max_cost_usd, None);
        let Some(AdapterConfig::Command(command)) =
            table("kind = \"command\"\nprogram = \"./t\"\nargs = [\"-v\"]\nenv = { A = \"1\" }")
                .config
        else {
            panic!("not a command adapter");
        };
        assert_eq!(command.args, ["-v"]);
        assert_eq!(command.env.get("A").map(String::as_str), Some("1"));
        let read = table("kind = \"http\"\nurl = \"http://x\"\nmethod = \"PUT\"");
        assert_eq!(
            read.read_whole().map(AdapterConfig::kind),
            Some(AdapterKind::Http)
        );
        let read = table("kind = \"mcp\"\nserver = \"s\"\npin = \"sha256:00\"");
        assert_eq!(
            read.read_whole().map(AdapterConfig::kind),
            Some(AdapterKind::Mcp)
        );
    }

    #[test]
    fn the_tagged_enum_reads_the_same_tables_directly() {
        let config: AdapterConfig = toml::from_str("kind = \"http\"\nurl = \"http://x\"").unwrap();
        assert_eq!(config.kind(), AdapterKind::Http);
        let err = toml::from_str::<AdapterConfig>("kind = \"http\"\nprogram = \"p\"").unwrap_err();
        assert!(err.message().contains("unknown field `program`"), "{err}");
    }

    #[test]
    fn every_problem_of_a_table_is_kept_each_at_its_field() {
        let found =
            problems("kind = \"http\"\nurl = 7\nprogram = \"p\"\nagent = \"a\"\nstatus_ur = \"x\"");
        assert_eq!(
            found,
            [
                (
                    "agent".to_owned(),
                    "is not a setting of an http adapter but of agent; remove it".to_owned()
                ),
                (
                    "program".to_owned(),
                    "is not a setting of an http adapter but of command; remove it".to_owned()
                ),
                (
                    "status_ur".to_owned(),
                    "is not a field of an http adapter; it takes url, method, headers, status_url, max_result_bytes".to_owned()
                ),
                (
                    "url".to_owned(),
                    "invalid type: integer `7`, expected a string".to_owned()
                ),
            ]
        );
    }

    #[test]
    fn kind_is_required_and_named() {
        assert_eq!(
            problems("url = \"http://x\""),
            [(
                "kind".to_owned(),
                "is required: http, command, agent or mcp".to_owned()
            )]
        );
        assert_eq!(
            problems("kind = \"htp\""),
            [(
                "kind".to_owned(),
                "must be http, command, agent or mcp, but it is `htp`".to_owned()
            )]
        );
        assert_eq!(
            problems("kind = \"command\"\nprogram = \"p\"\nstatus_url = \"http://x\"")[0].1,
            "is not allowed on a command adapter: a command has no endpoint to look a call up by key"
        );
    }

    #[test]
    fn the_field_lists_match_the_structs() {
        // serde names a struct's fields in its unknown-field error: the
        // hand-written lists must say the same, or a field would be
        // refused as foreign (or a foreign one reach serde's wording).
        fn serde_fields<T: serde::de::DeserializeOwned>() -> String {
            let err = serde_json::from_value::<T>(serde_json::json!({ "zz_unknown": 1 }))
                .err()
                .map(|err| err.to_string())
                .unwrap_or_default();
            err.split("expected one of ")
                .nth(1)
                .unwrap_or_default()
                .to_owned()
        }
        let listed = |kind: AdapterKind| {
            kind.fields()
                .iter()
                .map(|f| format!("`{f}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        assert_eq!(
            serde_fields::<HttpAdapterConfig>(),
            listed(AdapterKind::Http)
        );
        assert_eq!(
            serde_fields::<CommandAdapterConfig>(),
            listed(AdapterKind::Command)
        );
        assert_eq!(
            serde_fields::<AgentAdapterConfig>(),
            listed(AdapterKind::Agent)
        );
        assert_eq!(serde_fields::<McpAdapterConfig>(), listed(AdapterKind::Mcp));
    }
}
