//! `[telemetry]`: where rein sends its traces, and under which name.
//!
//! Off unless a file has the table: a config without it exports nothing
//! and starts no exporter. With it, every run (and gateway call) is a
//! trace sent over OTLP/HTTP to `otlp_endpoint` (see rein-engine's
//! `telemetry` module for the spans).
//!
//! | field | default | range |
//! | --- | --- | --- |
//! | `otlp_endpoint` | required | an absolute `http`/`https` URL: the collector's base (`/v1/traces` is appended) or its full traces path |
//! | `service_name` | [`DEFAULT_SERVICE_NAME`] | non-empty |
//! | `sample_ratio` | 1.0 | `[0, 1]`: the share of traces kept, decided once per trace |

use schemars::JsonSchema;
use serde::Deserialize;

use crate::config::Ratio;

/// The `service.name` of rein's traces unless `service_name` names another.
pub const DEFAULT_SERVICE_NAME: &str = "rein";

/// The path OTLP/HTTP receivers take traces on, appended to an
/// `otlp_endpoint` that does not already end with it.
pub const OTLP_TRACES_PATH: &str = "/v1/traces";

/// `[telemetry]` as written.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct TelemetryConfig {
    /// The OTLP/HTTP collector: its base URL, or its full traces URL.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` resource attribute of every span.
    pub service_name: Option<String>,
    /// The share of traces kept (`[0, 1]`).
    pub sample_ratio: Option<f64>,
}

/// `[telemetry]`, checked.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TelemetrySpec {
    /// Where spans are posted: the traces URL (ends with
    /// [`OTLP_TRACES_PATH`]).
    pub traces_url: String,
    /// The `service.name` of every span.
    pub service_name: String,
    /// The share of traces kept.
    pub sample_ratio: Ratio,
}

impl TelemetrySpec {
    /// Spans of service `service_name` posted to `traces_url` as given,
    /// every trace kept (for hosts that build the engine without a config
    /// file: tests, benches).
    pub fn new(traces_url: impl Into<String>, service_name: impl Into<String>) -> TelemetrySpec {
        TelemetrySpec {
            traces_url: traces_url.into(),
            service_name: service_name.into(),
            sample_ratio: Ratio::ONE,
        }
    }
}

/// The traces URL of an `otlp_endpoint` that passed the URL check: the
/// endpoint itself when it already names the traces path, else the path
/// appended to it.
pub(super) fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    if base.ends_with(OTLP_TRACES_PATH) {
        base.to_owned()
    } else {
        format!("{base}{OTLP_TRACES_PATH}")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::registry::{ConfigFile, ConfigProblem, ConfigSource, Registry, check};

    fn build(files: &[(&str, &str)]) -> Result<Registry, Vec<ConfigProblem>> {
        let sources: Vec<_> = files
            .iter()
            .map(|(p, t)| ConfigSource::new(*p, toml::from_str::<ConfigFile>(t).unwrap()))
            .collect();
        check(&sources, &|_| Vec::new())
    }

    fn problem(text: &str) -> (String, String, String) {
        let problems = build(&[("conf/telemetry.toml", text)]).unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        let p = &problems[0];
        (
            p.file.display().to_string(),
            p.field.clone(),
            p.message.clone(),
        )
    }

    #[test]
    fn without_the_table_traces_are_off_and_with_it_defaults_apply() {
        assert_eq!(build(&[("a.toml", "")]).unwrap().telemetry(), None);
        let registry = build(&[(
            "a.toml",
            "[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\n",
        )])
        .unwrap();
        let spec = registry.telemetry().unwrap();
        assert_eq!(spec.traces_url, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(spec.service_name, DEFAULT_SERVICE_NAME);
        assert_eq!(spec.sample_ratio, Ratio::ONE);
    }

    #[test]
    fn a_bad_endpoint_names_the_file_and_field() {
        let (file, field, message) = problem("[telemetry]\notlp_endpoint = \"collector:4318\"\n");
        assert_eq!(file, "conf/telemetry.toml");
        assert_eq!(field, "telemetry.otlp_endpoint");
        assert!(message.contains("absolute http or https URL"), "{message}");
        let (_, field, message) = problem("[telemetry]\nservice_name = \"x\"\n");
        assert_eq!(field, "telemetry.otlp_endpoint");
        assert!(message.starts_with("is required"), "{message}");
    }

    #[test]
    fn an_empty_service_name_and_a_ratio_outside_zero_one_are_refused() {
        let (_, field, _) =
            problem("[telemetry]\notlp_endpoint = \"http://c:4318\"\nservice_name = \" \"\n");
        assert_eq!(field, "telemetry.service_name");
        let (_, field, message) =
            problem("[telemetry]\notlp_endpoint = \"http://c:4318\"\nsample_ratio = 1.5\n");
        assert_eq!(field, "telemetry.sample_ratio");
        assert!(message.contains("[0, 1]"), "{message}");
    }

    #[test]
    fn only_one_file_may_hold_the_table() {
        let t = "[telemetry]\notlp_endpoint = \"http://c:4318\"\n";
        let problems = build(&[("a.toml", t), ("b.toml", t)]).unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].field, "telemetry");
        assert!(
            problems[0]
                .message
                .contains("only one file may hold [telemetry]")
        );
    }

    #[test]
    fn a_base_endpoint_gets_the_traces_path_and_a_full_one_is_kept() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/"),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://c.example/otlp/v1/traces"),
            "https://c.example/otlp/v1/traces"
        );
    }
}
