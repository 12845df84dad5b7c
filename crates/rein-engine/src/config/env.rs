//! `${NAME}` interpolation in the few values that differ per deployment:
//! adapter URLs and headers, and providers' base URLs.
//!
//! # Why only there
//!
//! Those are the values that change between a laptop, CI and production
//! (ports, hosts, tokens in headers), and nothing else in a registry should:
//! a tool's class or schema that depends on the environment would make two
//! deployments of one config behave differently. Interpolation is therefore
//! limited to these fields, and an unset variable is an error, never an
//! empty string.
//!
//! Syntax: `${NAME}`, `NAME` being letters, digits and `_`, not starting with
//! a digit; `$${` writes a literal `${`. A `$` not followed by `{` is kept.

use std::path::Path;

use rein_core::redact::{Secrets, is_origin};
use rein_core::registry::{ConfigProblem, ConfigSource};

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
    interpolate_noting(text, env, &mut Vec::new())
}

/// [`interpolate`], pushing each substituted value to `values`: the
/// secrets a config holds are the values it took from the environment.
pub(super) fn interpolate_noting(
    text: &str,
    env: &EnvLookup<'_>,
    values: &mut Vec<String>,
) -> Result<String, InterpolationError> {
    let mut out = String::with_capacity(text.len());
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
            out.push_str(&value);
            values.push(value);
            rest = &after[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
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
    /// Notes `value`, taken from the environment for `field` of `file`.
    pub(super) fn note(&mut self, file: &Path, field: &str, value: &str) {
        if let Err(short) = self.secrets.insert(value) {
            self.too_short.push(ConfigProblem::new(
                file,
                field,
                format!("its secret {short}"),
            ));
        }
    }
}

/// Interpolates the fields of `source` that allow it, reporting each value
/// that cannot be interpolated (and leaving it as written), and noting
/// every value taken from the environment as a secret — but a whole URL
/// origin in a URL field ([`rein_core::redact::is_origin`]).
pub(super) fn interpolate_source(
    source: &mut ConfigSource,
    env: &EnvLookup<'_>,
    problems: &mut Vec<ConfigProblem>,
    found: &mut FoundSecrets,
) {
    let file = source.path.clone();
    let mut apply = |field: String, value: &mut String| {
        let mut values = Vec::new();
        match interpolate_noting(value, env, &mut values) {
            Ok(done) => *value = done,
            Err(err) => problems.push(ConfigProblem::new(&file, field.clone(), err.to_string())),
        }
        let is_url = !field.contains(".headers.");
        for v in values {
            if !(is_url && is_origin(&v)) {
                found.note(&file, &field, &v);
            }
        }
    };
    for (name, provider) in &mut source.config.providers {
        if let Some(url) = &mut provider.base_url {
            apply(format!("providers.{name}.base_url"), url);
        }
    }
    for (name, tool) in &mut source.config.tools {
        let Some(adapter) = &mut tool.adapter else {
            continue;
        };
        let p = format!("tools.{name}.adapter");
        if let Some(url) = &mut adapter.url {
            apply(format!("{p}.url"), url);
        }
        if let Some(url) = &mut adapter.status_url {
            apply(format!("{p}.status_url"), url);
        }
        for (header, value) in &mut adapter.headers {
            apply(format!("{p}.headers.{header}"), value);
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
}
