//! `[mcp_servers.NAME]`: an MCP server whose tools rein calls through the
//! guarded call (`adapter = { kind = "mcp", server = "NAME" }`).
//!
//! | field | default | meaning |
//! | --- | --- | --- |
//! | `command` | — | stdio transport: the program to start (a bare name is looked up on `PATH`, a path with a `/` is relative to this file) |
//! | `args` | `[]` | its arguments, passed as they are (no shell) |
//! | `env` | `{}` | extra environment variables (`${ENV}` interpolated); a stdio server gets only these and a few of rein's own |
//! | `working_dir` | rein's own | its working directory, relative to this file |
//! | `url` | — | streamable HTTP transport: the server's endpoint (`${ENV}` interpolated) |
//! | `headers` | `{}` | extra HTTP headers (`${ENV}` interpolated); credentials among them are redacted wherever rein writes |
//! | `connect_timeout` | [`DEFAULT_MCP_CONNECT_TIMEOUT`] | (0, 5 min]: how long starting the server and the MCP handshake may take |
//! | `refresh` | [`DEFAULT_MCP_REFRESH`] | [1 s, 24 h]: the longest a listing of the server's tools is trusted; pinned tools are checked against a listing at most this old |
//!
//! Exactly one of `command` and `url` is set.
//!
//! # Why a table of servers beside the tools
//!
//! One MCP server offers many tools, and every tool an agent may call must
//! still have its own registry entry (class, key recipe, compensation,
//! resource group): rein never takes a server's own hints for safety. The
//! tools name their server; the server is started (or connected to) once
//! and shared by all of them. The field names are those MCP clients
//! already use (`command`, `args`, `env`, `url`, `headers`), so a server
//! entry copies over from a desktop assistant's config unchanged.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::check::{is_env_name, is_header_name, resolve_relative};

/// How long starting an MCP server and its handshake may take by default.
pub const DEFAULT_MCP_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest `connect_timeout`.
pub const MAX_MCP_CONNECT_TIMEOUT: Duration = Duration::from_secs(300);

/// How long a listing of a server's tools is trusted by default.
///
/// # Why a listing ages
///
/// A server that changes a tool's definition is supposed to say so
/// (`notifications/tools/list_changed`); one that does not (a "rug pull")
/// would otherwise be caught only when its connection is opened again.
/// Listed again once this old, at the next call, and by `rein serve`'s
/// discovery refresh, a changed definition is caught within it.
pub const DEFAULT_MCP_REFRESH: Duration = Duration::from_secs(600);

/// The shortest `refresh`.
pub const MIN_MCP_REFRESH: Duration = Duration::from_secs(1);

/// The longest `refresh`.
pub const MAX_MCP_REFRESH: Duration = Duration::from_secs(86_400);

/// `[mcp_servers.NAME]` as written.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct McpServerConfig {
    /// stdio: the program to start.
    pub command: Option<String>,
    /// stdio: its arguments.
    pub args: Vec<String>,
    /// stdio: extra environment variables.
    pub env: BTreeMap<String, String>,
    /// stdio: its working directory.
    pub working_dir: Option<PathBuf>,
    /// Streamable HTTP: the endpoint.
    pub url: Option<String>,
    /// Streamable HTTP: extra headers.
    pub headers: BTreeMap<String, String>,
    /// How long the start and handshake may take.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub connect_timeout: Option<Duration>,
    /// The longest a listing of its tools is trusted.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub refresh: Option<Duration>,
}

/// How rein reaches an MCP server.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum McpTransport {
    /// A child process speaking JSON-RPC on its stdin and stdout.
    Stdio {
        /// The program (a bare name, or a path resolved against the
        /// config file's directory).
        program: PathBuf,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment variables.
        env: BTreeMap<String, String>,
        /// Its working directory; `None` keeps rein's own.
        working_dir: Option<PathBuf>,
    },
    /// MCP's streamable HTTP transport.
    Http {
        /// The endpoint.
        url: String,
        /// Extra headers.
        headers: BTreeMap<String, String>,
    },
}

/// `[mcp_servers.NAME]`, checked.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub struct McpServerSpec {
    /// Its name in the config.
    pub name: String,
    /// How it is reached.
    pub transport: McpTransport,
    /// How long its start and handshake may take.
    pub connect_timeout: Duration,
    /// The longest a listing of its tools is trusted.
    pub refresh: Duration,
}

impl McpServerSpec {
    /// A server `name` reached through `transport`, with the default
    /// connect timeout: what an embedder (or a test) builds without a
    /// config file.
    pub fn new(name: impl Into<String>, transport: McpTransport) -> McpServerSpec {
        McpServerSpec {
            name: name.into(),
            transport,
            connect_timeout: DEFAULT_MCP_CONNECT_TIMEOUT,
            refresh: DEFAULT_MCP_REFRESH,
        }
    }

    /// A stdio server: `program` started with `args`.
    pub fn stdio(
        name: impl Into<String>,
        program: impl Into<PathBuf>,
        args: impl IntoIterator<Item = impl Into<String>>,
    ) -> McpServerSpec {
        McpServerSpec::new(
            name,
            McpTransport::Stdio {
                program: program.into(),
                args: args.into_iter().map(Into::into).collect(),
                env: BTreeMap::new(),
                working_dir: None,
            },
        )
    }

    /// A streamable HTTP server at `url`.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> McpServerSpec {
        McpServerSpec::new(
            name,
            McpTransport::Http {
                url: url.into(),
                headers: BTreeMap::new(),
            },
        )
    }
}

/// Checks `[mcp_servers.NAME]` of `file`: the spec, or every problem as
/// `(field, message)` (the caller places them in their file).
pub(super) fn check_mcp_server(
    file: &Path,
    name: &str,
    c: &McpServerConfig,
) -> Result<McpServerSpec, Vec<(String, String)>> {
    let p = format!("mcp_servers.{name}");
    let mut problems: Vec<(String, String)> = Vec::new();
    let mut report =
        |field: &str, message: String| problems.push((format!("{p}.{field}"), message));
    let stdio_fields = [
        (!c.args.is_empty(), "args"),
        (!c.env.is_empty(), "env"),
        (c.working_dir.is_some(), "working_dir"),
    ];
    let transport = match (c.command.as_deref(), c.url.as_deref()) {
        (Some(_), Some(_)) => {
            report(
                "url",
                "is set beside `command`: a server is either started (`command`) or reached over HTTP (`url`), not both".to_owned(),
            );
            None
        }
        (None, None) => {
            report(
                "command",
                "or `url` is required: the program that starts the server (stdio), or its streamable HTTP endpoint".to_owned(),
            );
            None
        }
        (Some(command), None) => {
            if !c.headers.is_empty() {
                report(
                    "headers",
                    "is a setting of an HTTP server (`url`); a stdio server takes `env`".to_owned(),
                );
            }
            let program = if command.trim().is_empty() {
                report("command", "must not be empty".to_owned());
                None
            } else if command.contains('\0') {
                report("command", "must not contain a NUL byte".to_owned());
                None
            } else if command.contains('/') {
                Some(resolve_relative(file, Path::new(command)))
            } else {
                Some(PathBuf::from(command))
            };
            for (i, arg) in c.args.iter().enumerate() {
                if arg.contains('\0') {
                    report(
                        &format!("args[{i}]"),
                        "must not contain a NUL byte".to_owned(),
                    );
                }
            }
            for (var, value) in &c.env {
                if !is_env_name(var) {
                    report(
                        &format!("env.{var}"),
                        "must be the name of an environment variable (letters, digits, _)"
                            .to_owned(),
                    );
                } else if value.contains('\0') {
                    report(
                        &format!("env.{var}"),
                        "must not contain a NUL byte".to_owned(),
                    );
                }
            }
            let working_dir = match &c.working_dir {
                Some(dir) if dir.as_os_str().is_empty() => {
                    report(
                        "working_dir",
                        "must not be empty; leave it out to keep rein's own".to_owned(),
                    );
                    None
                }
                Some(dir) => Some(resolve_relative(file, dir)),
                None => None,
            };
            program.map(|program| McpTransport::Stdio {
                program,
                args: c.args.clone(),
                env: c.env.clone(),
                working_dir,
            })
        }
        (None, Some(url)) => {
            for (set, field) in stdio_fields {
                if set {
                    report(
                        field,
                        "is a setting of a stdio server (`command`); an HTTP server takes `headers`"
                            .to_owned(),
                    );
                }
            }
            for (header, value) in &c.headers {
                if !is_header_name(header) {
                    report(
                        &format!("headers.{header}"),
                        "is not a valid HTTP header name".to_owned(),
                    );
                } else if value.contains(['\r', '\n']) {
                    report(
                        &format!("headers.{header}"),
                        "must not contain line breaks".to_owned(),
                    );
                }
            }
            match valid_url(url.trim()) {
                Ok(()) => Some(McpTransport::Http {
                    url: url.trim().to_owned(),
                    headers: c.headers.clone(),
                }),
                Err(why) => {
                    report("url", why);
                    None
                }
            }
        }
    };
    let connect_timeout = match c.connect_timeout {
        None => DEFAULT_MCP_CONNECT_TIMEOUT,
        Some(t) if t.is_zero() || t > MAX_MCP_CONNECT_TIMEOUT => {
            report(
                "connect_timeout",
                format!(
                    "must be in (0, {}s], but it is {}ms",
                    MAX_MCP_CONNECT_TIMEOUT.as_secs(),
                    t.as_millis()
                ),
            );
            DEFAULT_MCP_CONNECT_TIMEOUT
        }
        Some(t) => t,
    };
    let refresh = match c.refresh {
        None => DEFAULT_MCP_REFRESH,
        Some(t) if !(MIN_MCP_REFRESH..=MAX_MCP_REFRESH).contains(&t) => {
            report(
                "refresh",
                format!(
                    "must be in [{}s, {}h], but it is {}ms",
                    MIN_MCP_REFRESH.as_secs(),
                    MAX_MCP_REFRESH.as_secs() / 3_600,
                    t.as_millis()
                ),
            );
            DEFAULT_MCP_REFRESH
        }
        Some(t) => t,
    };
    match transport {
        Some(transport) if problems.is_empty() => Ok(McpServerSpec {
            name: name.to_owned(),
            transport,
            connect_timeout,
            refresh,
        }),
        _ => Err(problems),
    }
}

fn valid_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    let authority = rest.map(|rest| rest.split(['/', '?', '#']).next().unwrap_or_default());
    match authority {
        Some(authority) if !authority.is_empty() && !url.contains(char::is_whitespace) => Ok(()),
        _ => Err(format!(
            "must be an absolute http or https URL with a host, e.g. \"http://127.0.0.1:3001/mcp\", but it is `{url}`"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `fields` as an inline table, checked; the fields of its problems.
    fn checked(fields: &str) -> Result<McpServerSpec, Vec<String>> {
        #[derive(Deserialize)]
        struct Wrapper {
            v: McpServerConfig,
        }
        let c = toml::from_str::<Wrapper>(&format!("v = {{ {fields} }}"))
            .map_err(|e| vec![e.to_string()])?
            .v;
        check_mcp_server(Path::new("/etc/rein/rein.toml"), "docs", &c)
            .map_err(|problems| problems.into_iter().map(|(field, _)| field).collect())
    }

    #[test]
    fn a_stdio_server_resolves_a_relative_program_against_its_file() {
        let spec = checked(
            r#"command = "./bin/server", args = ["stdio"], env = { TOKEN = "x" }, connect_timeout = "5s""#,
        )
        .unwrap();
        assert_eq!(
            spec.transport,
            McpTransport::Stdio {
                program: PathBuf::from("/etc/rein/./bin/server"),
                args: vec!["stdio".into()],
                env: BTreeMap::from([("TOKEN".into(), "x".into())]),
                working_dir: None,
            }
        );
        assert_eq!(spec.connect_timeout, Duration::from_secs(5));
        assert_eq!(spec.refresh, DEFAULT_MCP_REFRESH);
        let bare = checked(r#"command = "npx""#).unwrap();
        assert!(
            matches!(bare.transport, McpTransport::Stdio { program, .. } if program == Path::new("npx"))
        );
    }

    #[test]
    fn a_listing_is_trusted_for_its_refresh_within_bounds() {
        let spec = checked(r#"command = "npx", refresh = "30s""#).unwrap();
        assert_eq!(spec.refresh, Duration::from_secs(30));
        for bad in ["0s", "500ms", "25h"] {
            let problems = checked(&format!(r#"command = "npx", refresh = "{bad}""#)).unwrap_err();
            assert_eq!(problems, ["mcp_servers.docs.refresh"], "{bad}");
        }
    }

    #[test]
    fn an_http_server_needs_an_absolute_url() {
        let spec = checked(
            r#"url = "http://127.0.0.1:3001/mcp", headers = { Authorization = "Bearer x" }"#,
        )
        .unwrap();
        assert!(matches!(spec.transport, McpTransport::Http { .. }));
        assert_eq!(
            checked(r#"url = "127.0.0.1:3001/mcp""#).unwrap_err(),
            ["mcp_servers.docs.url"]
        );
    }

    #[test]
    fn exactly_one_transport_and_no_foreign_fields() {
        assert_eq!(checked("").unwrap_err(), ["mcp_servers.docs.command"]);
        assert_eq!(
            checked(r#"command = "x", url = "http://h/mcp""#).unwrap_err(),
            ["mcp_servers.docs.url"]
        );
        assert_eq!(
            checked(r#"url = "http://h/mcp", args = ["a"], env = { A = "b" }"#).unwrap_err(),
            ["mcp_servers.docs.args", "mcp_servers.docs.env"]
        );
        assert_eq!(
            checked(r#"command = "x", headers = { A = "b" }"#).unwrap_err(),
            ["mcp_servers.docs.headers"]
        );
        assert_eq!(
            checked(r#"command = "x", connect_timeout = "10min""#).unwrap_err(),
            ["mcp_servers.docs.connect_timeout"]
        );
        assert_eq!(
            checked(r#"command = "x", env = { "1BAD" = "b" }"#).unwrap_err(),
            ["mcp_servers.docs.env.1BAD"]
        );
    }
}
