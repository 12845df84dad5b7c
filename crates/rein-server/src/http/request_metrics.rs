//! The server's own metrics, in the engine's registry: a histogram of API
//! requests, and the connection and drain values read at each scrape.
//!
//! # Why by route template and status class
//!
//! The route is the template (`/v1/runs/{id}`), never the raw path, and the
//! status its class (`2xx`): a client cannot grow the number of series, and
//! a 404 storm is one series, not one per path.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{Method, StatusCode};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;

use crate::lifecycle::connections::Connections;
use crate::lifecycle::drain::Drain;

/// Seconds an API request may take to its answer's head: 1 ms to a minute
/// (a sync run's request lasts as long as its run).
const REQUEST_BUCKETS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// One request's labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    route: String,
    method: String,
    status: String,
}

fn request_histogram() -> Histogram {
    Histogram::new(REQUEST_BUCKETS)
}

/// The API request histogram.
#[derive(Debug, Clone)]
pub struct RequestMetrics {
    requests: Family<RequestLabels, Histogram, fn() -> Histogram>,
}

impl RequestMetrics {
    /// The request histogram, registered in `metrics` with the connection
    /// and drain collectors: once per process (its [`crate::AppState`]).
    pub fn register(
        metrics: &rein_engine::metrics::Metrics,
        connections: &Arc<Connections>,
        drain: &Arc<Drain>,
    ) -> Self {
        let requests: Family<RequestLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(request_histogram);
        metrics.register(
            "rein_http_request_duration_seconds",
            "How long API requests took to their answer's head, by route template, method and status class (a stream goes on after it)",
            requests.clone(),
        );
        metrics.register_collector(Box::new(connections.clone()));
        metrics.register_collector(Box::new(DrainCollector(drain.clone())));
        RequestMetrics { requests }
    }

    /// Observes one request to `route` answered `status` after `elapsed`.
    pub fn observe(&self, route: &str, method: &Method, status: StatusCode, elapsed: Duration) {
        self.requests
            .get_or_create(&RequestLabels {
                route: route.to_owned(),
                method: method_label(method).to_owned(),
                status: format!("{}xx", status.as_u16() / 100),
            })
            .observe(elapsed.as_secs_f64());
    }
}

/// The method's label: the standard ones by name, any other as `other`
/// (a client may send any token as a method).
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        _ => "other",
    }
}

/// Encodes one unlabelled value.
pub(crate) fn encode_one(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    metric: &impl EncodeMetric,
) -> Result<(), std::fmt::Error> {
    let e = encoder.encode_descriptor(name, help, None, metric.metric_type())?;
    metric.encode(e)
}

/// A counter's value, for [`encode_one`].
pub(crate) fn counter(value: u64) -> ConstCounter<u64> {
    ConstCounter::new(value)
}

/// A gauge's value, for [`encode_one`].
pub(crate) fn gauge(value: u64) -> ConstGauge<i64> {
    ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX))
}

/// The drain's admitted work, read at each scrape.
#[derive(Debug)]
struct DrainCollector(Arc<Drain>);

impl Collector for DrainCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        encode_one(
            &mut encoder,
            "rein_work_admitted",
            "Requests and queue work admitted and not finished yet (a drain waits for them)",
            &gauge(u64::try_from(self.0.admitted()).unwrap_or(u64::MAX)),
        )
    }
}
