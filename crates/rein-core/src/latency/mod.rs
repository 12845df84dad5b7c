//! Observed latency: streaming histograms of tool and model calls, the
//! profile they give, the allowance factor, and the degradation watch.
//!
//! # Why
//!
//! Every budget decision rests on a latency number: a call's allowance is
//! its p99 × a factor, a read needs its median left before it starts, a
//! retry is worth it only if one more median fits (seed 000, "Start from
//! the latency distribution"). Declared numbers are guesses that are never
//! checked; `mode = "observe"` measures them instead, from real calls, in
//! a [`LatencyHistogram`] per [`LatencySubject`] (a tool, a model, a
//! model's time per output token).
//!
//! | type | concept |
//! | --- | --- |
//! | [`LatencyHistogram`] | a streaming histogram (`hdrhistogram`), mergeable, with a versioned text form robust to corruption |
//! | [`LatencySubject`] | what a histogram measures, and its stored key |
//! | [`LatencyScale`] | a tool's argument-scale buckets (`latency.scale`): which [`ScaleBucket`] a call's size falls in |
//! | [`AllowanceFactor`] | p99 × factor = one attempt's allowance, in [1, 10] |
//! | [`plan_model`] | a model call's profile: the configured `model_latency` until `min_samples` calls were observed, then the observed one |
//! | [`DegradationWatch`] | p99 of the last window of samples above 2 × its baseline → [`Degraded`] |
//!
//! # Defaults
//!
//! | constant | value | why |
//! | --- | --- | --- |
//! | [`DEFAULT_ALLOWANCE_FACTOR`] | 2 | a factor of two of headroom for the long tail (seed 000, "Quantiles Are Not Guesswork") |
//! | [`DEGRADATION_FACTOR`] | 2 | "a p99 above twice the historical baseline usually means the downstream is degrading" |
//! | [`DEGRADATION_WINDOW`] | 20 samples | enough for a p99 that is not one outlier, few enough to notice within a busy minute |
//! | [`MAX_RECORDED`] | 1 h | a longer sample is recorded as 1 h (a call is never allowed that long in practice) |

mod constants;
mod factor;
mod histogram;
mod model;
mod scale;
mod subject;
mod watch;

pub use constants::{
    DEFAULT_ALLOWANCE_FACTOR, DEGRADATION_FACTOR, DEGRADATION_WINDOW, HISTOGRAM_FORMAT_VERSION,
    MAX_ALLOWANCE_FACTOR, MAX_ENCODED_BUCKETS, MAX_RECORDED, MIN_ALLOWANCE_FACTOR,
};
pub use factor::AllowanceFactor;
pub use histogram::{HistogramError, LatencyHistogram};
pub use model::{ModelLatencySource, ModelPlan, plan_model};
pub use scale::{LatencyScale, MAX_SCALE_BUCKETS, ScaleBucket, ScaleError};
pub use subject::LatencySubject;
pub use watch::{DegradationWatch, Degraded};
