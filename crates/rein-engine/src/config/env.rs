//! `${NAME}` interpolation in the few values that differ per deployment:
//! adapter URLs, headers and command environments, and providers' base
//! URLs.
//!
//! # Why only there
//!
//! Those are the values that change between a laptop, CI and production
//! (ports, hosts, tokens in headers and in a command's variables), and
//! nothing else in a registry should:
//! a tool's class or schema that depends on the environment would make two
//! deployments of one config behave differently. Interpolation is therefore
//! limited to these fields, and an unset variable is an error, never an
//! empty string.
//!
//! Syntax: `${NAME}`, `NAME` being letters, digits and `_`, not starting with
//! a digit; `$${` writes a literal `${`. A `$` not followed by `{` is kept.

use std::ops::Range;
use std::path::Path;

use rein_core::redact::{Candidate, Secrets, env_secrets, header_secrets, url_secrets};
use rein_core::registry::{AdapterConfig, ConfigProblem, ConfigSource};

/// Looks an environment variable up; injected so tests need not mutate the
/// process environment.
pub type EnvLookup<'a> = dyn Fn(&str) -> Option<String> + 'a;

/// Why a value could not be interpolated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum InterpolationError {
    #[error("uses ${{{0}}}, but the environment variable {0} is not set")]
    Unset(String),
    #[error("has `${{` without a closing `}}`")]
    Unterminated,
    #[error("uses `${{{0}}}`, but `{0}` is not a variable name (letters, digits and _)")]
    BadName(String),
}

/// `text` with every `${NAME}` replaced by its value in `env`.
#[cfg(test)]
pub(super) fn interpolate(text: &str, env: &EnvLookup<'_>) -> Result<String, InterpolationError> {
    interpolate_marking(text, env).map(|(out, _)| out)
}

/// [`interpolate`], with the byte range of each substituted value in the
/// result: where a value lands (a URL's host or its path) decides whether
/// it is a secret ([`rein_core::redact::url_secrets`]).
pub(super) fn interpolate_marking(
    text: &str,
    env: &EnvLookup<'_>,
) -> Result<(String, Vec<Range<usize>>), InterpolationError> {
    let mut out = String::with_capacity(text.len());
    let mut ranges = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            let end = after.find('}').ok_or(InterpolationError::Unterminated)?;
            let name = &after[..end];
            if !is_name(name) {
                return Err(InterpolationError::BadName(name.to_owned()));
            }
            let value = env(name).ok_or_else(|| InterpolationError::Unset(name.to_owned()))?;
            ranges.push(out.len()..out.len() + value.len());
            out.push_str(&value);
            rest = &after[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok((out, ranges))
}

fn is_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The secrets found while loading a config, and the values too short to
/// be redacted (each a warning naming its field).
#[derive(Debug, Default)]
pub(super) struct FoundSecrets {
    pub(super) secrets: Secrets,
    pub(super) too_short: Vec<ConfigProblem>,
}

impl FoundSecrets {
    /// Notes `value`, a secret of `field` of `file`; one too short to be
    /// redacted is a warning (once per field and value).
    pub(super) fn note(&mut self, file: &Path, field: &str, value: &str) {
        self.note_candidate(
            file,
            field,
            &Candidate {
                value: value.to_owned(),
                warn_if_short: true,
            },
        );
    }

    fn note_candidate(&mut self, file: &Path, field: &str, candidate: &Candidate) {
        if let Err(short) = self.secrets.insert(&candidate.value) {
            let warning = ConfigProblem::new(file, field, format!("its secret {short}"));
            if candidate.warn_if_short && !self.too_short.contains(&warning) {
                self.too_short.push(warning);
            }
        }
    }
}

/// What a field holds, which decides which of its values are secrets
/// (see [`rein_core::redact`]).
#[derive(Debug, Clone, Copy)]
enum FieldKind<'n> {
    /// A URL: its userinfo, and `${VAR}`s in its path or query.
    Url,
    /// A header value: secret when the header is named for a credential.
    Header(&'n str),
    /// A command's environment variable: secret when it is named for one.
    Env(&'n str),
}

/// Interpolates the fields of `source` that allow it (URLs, headers and
/// command environments), reporting each value that cannot be
/// interpolated (and leaving it as written), and noting the secrets each
/// holds once interpolated — literal or from the environment alike — by
/// the rule of [`rein_core::redact`].
pub(super) fn interpolate_source(
    source: &mut ConfigSource,
    env: &EnvLookup<'_>,
    problems: &mut Vec<ConfigProblem>,
    found: &mut FoundSecrets,
) {
    let file = source.path.clone();
    let mut apply = |field: String, kind: FieldKind<'_>, value: &mut String| {
        let ranges = match interpolate_marking(value, env) {
            Ok((done, ranges)) => {
                *value = done;
                ranges
            }
            Err(err) => {
                problems.push(ConfigProblem::new(&file, field, err.to_string()));
                return;
            }
        };
        let candidates = match kind {
            FieldKind::Url => url_secrets(value, &ranges),
            FieldKind::Header(name) => header_secrets(name, value),
            FieldKind::Env(name) => env_secrets(name, value),
        };
        for candidate in &candidates {
            found.note_candidate(&file, &field, candidate);
        }
    };
    for (name, provider) in &mut source.config.providers {
        if let Some(url) = &mut provider.base_url {
            apply(format!("providers.{name}.base_url"), FieldKind::Url, url);
        }
    }
    for (name, tool) in &mut source.config.tools {
        let p = format!("tools.{name}.adapter");
        match tool
            .adapter
            .as_mut()
            .and_then(|table| table.config.as_mut())
        {
            Some(AdapterConfig::Http(http)) => {
                if let Some(url) = &mut http.url {
                    apply(format!("{p}.url"), FieldKind::Url, url);
                }
                if let Some(url) = &mut http.status_url {
                    apply(format!("{p}.status_url"), FieldKind::Url, url);
                }
                for (header, value) in &mut http.headers {
                    let field = format!("{p}.headers.{header}");
                    apply(field, FieldKind::Header(header), value);
                }
            }
            Some(AdapterConfig::Command(command)) => {
                for (var, value) in &mut command.env {
                    apply(format!("{p}.env.{var}"), FieldKind::Env(var), value);
                }
            }
            // No other kind has a field that reads the environment; what
            // could not be read is reported by the check.
            _ => {}
        }
    }
    for (name, server) in &mut source.config.mcp_servers {
        let p = format!("mcp_servers.{name}");
        if let Some(url) = &mut server.url {
            apply(format!("{p}.url"), FieldKind::Url, url);
        }
        for (header, value) in &mut server.headers {
            apply(
                format!("{p}.headers.{header}"),
                FieldKind::Header(header),
                value,
            );
        }
        for (var, value) in &mut server.env {
            apply(format!("{p}.env.{var}"), FieldKind::Env(var), value);
        }
    }
}

/// The process environment, for [`Loader::new`](super::Loader::new).
pub(super) fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Whether `problem` is about `file`'s `field`.
pub(super) fn same_place(problem: &ConfigProblem, file: &Path, field: &str) -> bool {
    problem.file == file && problem.field == field
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOST" => Some("http://127.0.0.1:8080".into()),
            "TOKEN" => Some("s3cret".into()),
            _ => None,
        }
    }

    #[test]
    fn interpolate_replaces_every_variable() {
        assert_eq!(
            interpolate("${HOST}/tools/x?t=${TOKEN}", &env).unwrap(),
            "http://127.0.0.1:8080/tools/x?t=s3cret"
        );
        assert_eq!(interpolate("plain", &env).unwrap(), "plain");
    }

    #[test]
    fn interpolate_keeps_lone_dollars_and_unescapes_double_dollar_brace() {
        assert_eq!(interpolate("a$b$", &env).unwrap(), "a$b$");
        assert_eq!(interpolate("$${HOST}", &env).unwrap(), "${HOST}");
    }

    #[test]
    fn interpolate_refuses_unset_unterminated_and_bad_names() {
        assert_eq!(
            interpolate("${NOPE}/x", &env).unwrap_err(),
            InterpolationError::Unset("NOPE".into())
        );
        assert_eq!(
            interpolate("${HOST", &env).unwrap_err(),
            InterpolationError::Unterminated
        );
        assert_eq!(
            interpolate("${1X}", &env).unwrap_err(),
            InterpolationError::BadName("1X".into())
        );
        assert_eq!(
            InterpolationError::Unset("NOPE".into()).to_string(),
            "uses ${NOPE}, but the environment variable NOPE is not set"
        );
    }

    /// The secrets and warnings of a config of one tool whose adapter is
    /// `adapter` (TOML) and one provider at `base_url`, with `vars`.
    fn secrets_of(adapter: &str, base_url: &str, vars: &[(&str, &str)]) -> FoundSecrets {
        let text = format!(
            "[providers.p]\nkind = \"openai\"\nbase_url = \"{base_url}\"\n\
             [tools.t]\nadapter = {{ {adapter} }}\n"
        );
        let mut parsed = super::super::parse::Parsed::default();
        super::super::parse::parse_file(Path::new("rein.toml"), &text, &mut parsed);
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        let lookup = |name: &str| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        };
        let mut found = FoundSecrets::default();
        let mut problems = Vec::new();
        for source in &mut parsed.sources {
            interpolate_source(source, &lookup, &mut problems, &mut found);
        }
        assert!(problems.is_empty(), "{problems:?}");
        found
    }

    #[test]
    fn hosts_ports_base_urls_and_plain_headers_are_not_secrets_nor_warned_about() {
        let found = secrets_of(
            r#"kind = "http", url = "http://${HOST}:${PORT}/x", headers = { Accept = "${ACCEPT}", "X-Env" = "${STAGE}" }"#,
            "${BASE}",
            &[
                ("HOST", "localhost"),
                ("PORT", "8080"),
                ("ACCEPT", "application/json"),
                ("STAGE", "production"),
                ("BASE", "https://api.openai.com/v1"),
            ],
        );
        assert!(found.secrets.is_empty(), "{:?}", found.secrets);
        assert!(found.too_short.is_empty(), "{:?}", found.too_short);
        let found = found_for_host("127.0.0.1");
        assert!(found.secrets.is_empty(), "{:?}", found.secrets);
    }

    fn found_for_host(host: &str) -> FoundSecrets {
        secrets_of(
            r#"kind = "http", url = "http://${HOST}/x""#,
            "http://127.0.0.1:9/v1",
            &[("HOST", host)],
        )
    }

    #[test]
    fn credential_headers_literal_or_not_path_tokens_and_command_env_are_secrets() {
        let found = secrets_of(
            r#"kind = "http", url = "http://h/bot${BOT}/send", headers = { Authorization = "Bearer literal-token-123", "X-Api-Key" = "${KEY}" }"#,
            "https://ops:pa55-word-1@llm.example/v1",
            &[("BOT", "123456:AAHdqTcvCH1vGW"), ("KEY", "key-from-env-77")],
        );
        for secret in [
            "123456:AAHdqTcvCH1vGW",
            "Bearer literal-token-123",
            "literal-token-123",
            "key-from-env-77",
            "pa55-word-1",
        ] {
            assert!(
                found.secrets.contains(secret),
                "{secret}: {:?}",
                found.secrets
            );
        }
        let found = secrets_of(
            r#"kind = "command", program = "tool", env = { API_TOKEN = "${TOKEN}", HOME = "${HOME_DIR}", SHORT_SECRET = "abc" }"#,
            "http://127.0.0.1:9/v1",
            &[
                ("TOKEN", "env-token-0001"),
                ("HOME_DIR", "/home/someone-long"),
            ],
        );
        assert!(found.secrets.contains("env-token-0001"));
        assert!(!found.secrets.contains("/home/someone-long"));
        assert_eq!(found.too_short.len(), 1, "{:?}", found.too_short);
        assert_eq!(found.too_short[0].field, "tools.t.adapter.env.SHORT_SECRET");
    }
}
