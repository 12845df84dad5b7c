//! `[telemetry]`: where traces go.

use std::path::Path;

use super::Checker;
use crate::config::Ratio;
use crate::registry::telemetry::{DEFAULT_SERVICE_NAME, TelemetryConfig, TelemetrySpec};

impl<'a> Checker<'a> {
    /// `[telemetry]`: `None` (and reported) when a field is wrong.
    pub(super) fn telemetry(&mut self, file: &Path, c: &TelemetryConfig) -> Option<TelemetrySpec> {
        let url = match &c.otlp_endpoint {
            None => {
                self.report(
                    file,
                    "telemetry.otlp_endpoint",
                    "is required: the OTLP/HTTP collector traces are sent to, e.g. \"http://127.0.0.1:4318\"",
                );
                None
            }
            Some(url) => self.url(file, "telemetry.otlp_endpoint", url),
        };
        let service_name = match &c.service_name {
            None => Some(DEFAULT_SERVICE_NAME.to_owned()),
            Some(name) if name.trim().is_empty() => {
                self.report(file, "telemetry.service_name", "must not be empty");
                None
            }
            Some(name) => Some(name.clone()),
        };
        let sample_ratio = match c.sample_ratio {
            None => Some(Ratio::ONE),
            Some(r) => match Ratio::new("sample_ratio", r) {
                Ok(r) => Some(r),
                Err(err) => {
                    self.config_error(file, "telemetry", &err);
                    None
                }
            },
        };
        Some(TelemetrySpec {
            traces_url: crate::registry::telemetry::traces_url(&url?),
            service_name: service_name?,
            sample_ratio: sample_ratio?,
        })
    }
}
