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

use serde::Deserialize;

use crate::config::Ratio;

/// The `service.name` of rein's traces unless `service_name` names another.
pub const DEFAULT_SERVICE_NAME: &str = "rein";

/// The path OTLP/HTTP receivers take traces on, appended to an
/// `otlp_endpoint` that does not already end with it.
pub const OTLP_TRACES_PATH: &str = "/v1/traces";

/// `[telemetry]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
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
    use super::*;

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
