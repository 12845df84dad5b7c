//! Observed latency in the engine: every tool attempt and model call is
//! recorded in a streaming histogram, shared with every process on the
//! store, and planned with (issue 16 item 1).
//!
//! # Why
//!
//! A tool's allowance (p99 × factor) and the "does one more attempt fit"
//! test rest on its latency profile. Declared profiles are guesses; in
//! `mode = "observe"` the profile is measured here, from this process's
//! calls and those of every process that shares the store, and used once
//! it rests on `min_samples` (the conservative fallback until then).
//!
//! # What is recorded
//!
//! | subject | sample | counted when |
//! | --- | --- | --- |
//! | `tool:NAME` | one attempt, from sending to its outcome | it was sent and ended with a success or a failure from the target (timeouts included: a lower bound of the true latency, and leaving them out would hide a tool that degrades into timeouts); not a cancelled one, nor a refusal of rein's own (open arm, budget) |
//! | `tool_scale:NAME/BUCKET` | the same attempt, in the bucket of its measured argument | the tool has a `latency.scale` |
//! | `model:PROVIDER/MODEL` | one whole (unstreamed) answer | it answered |
//! | `model_per_token:PROVIDER/MODEL` | that answer's latency / its output tokens | it answered with at least one output token |
//! | `model:PROVIDER/MODEL` | one streamed answer, from sending to its last event | the stream ended with its answer |
//! | `model_first_token:PROVIDER/MODEL` | one streamed answer's first event | the stream ended with its answer |
//!
//! A streamed answer is recorded when its stream ends with the answer (a
//! stream cut or dropped midway is not an answer); its total is
//! normalised by its output tokens as a whole answer's is. Its total
//! includes the pace at which the caller read it: rein never buffers a
//! chunk, so a slow reader slows the stream — the latency its caller saw.
//!
//! # Model calls are planned with what was observed
//!
//! A model call's profile (the time a turn needs left before it is sent,
//! a retry's worth) is the agent's configured `model_latency` until
//! `min_samples` calls of its provider and model were observed
//! ([`EngineBuilder::model_latency_min_samples`], default 50), then the
//! observed `model:PROVIDER/MODEL` profile ([`plan_model`]).
//!
//! [`EngineBuilder::model_latency_min_samples`]: super::EngineBuilder::model_latency_min_samples
//!
//! # Argument-scale buckets
//!
//! A tool with a `latency.scale` (`arg`, ascending `buckets`) is measured
//! and planned per bucket of its call's argument size
//! ([`LatencyScale::bucket_of`]): a call's allowance follows its own
//! bucket's observed profile once that bucket has `min_samples`, and the
//! fallback until then (see [`LatencyBook::plan`] for why not the
//! tool-wide profile). Each bucket has its own degradation watch, so a
//! slowing of the large calls is seen even while the small ones are fine.
//! `tool_call_started` names the bucket (`latency_bucket`).
//!
//! # Shared through the store
//!
//! Each subject keeps the stored sum (as last read or written) plus what
//! this process recorded since its last flush (the delta). A flush adds
//! the deltas to the store in one write ([`Store::merge_latency`]) and
//! takes the sums back, so other processes' samples arrive with every
//! flush. Flushes happen at most every `flush_every` (default
//! [`DEFAULT_LATENCY_FLUSH`]) in the background, at the end of every run
//! and on [`Engine::flush_latency`] (a server's shutdown). The stored sums
//! are read once, before the first call of the engine. A store that
//! cannot be read or written is logged: the deltas are kept for the next
//! flush, and the process goes on with what it has.
//!
//! # Degradation
//!
//! Each subject has a [`DegradationWatch`]: the p99 of its last window of
//! samples above twice the baseline — the declared p99, or the observed
//! one when first trusted — emits `latency_degraded` in the run whose
//! sample closed the window (counted by `rein_latency_degraded_total`).
//!
//! [`Store::merge_latency`]: rein_store::Store::merge_latency

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rein_core::event::{BaselineSource, LatencyDegraded};
use rein_core::latency::{
    AllowanceFactor, DegradationWatch, LatencyHistogram, LatencyScale, LatencySubject, ModelPlan,
    ScaleBucket, plan_model,
};
use rein_core::registry::{DEFAULT_OBSERVE_MIN_SAMPLES, LatencySpec};
use rein_core::{Clock, Instant, LatencyProfile, ToolClass};
use rein_store::{LatencyRows, Store};
use serde_json::Value;
use tokio::sync::OnceCell;

use super::binding::ToolBinding;
use super::emitter::unix_ms;

/// How often at most the engine adds its recorded samples to the store in
/// the background (besides at every run's end).
pub const DEFAULT_LATENCY_FLUSH: Duration = Duration::from_secs(10);

/// How the engine plans one tool's latency: its spec and its allowance
/// factor, as the registry says ([`EngineBuilder::registry`] sets them).
///
/// [`EngineBuilder::registry`]: super::EngineBuilder::registry
#[derive(Debug, Clone, PartialEq)]
pub struct ToolLatency {
    /// Declared, or observed with its fallback and `min_samples`.
    pub spec: LatencySpec,
    /// One attempt's allowance is p99 × this.
    pub factor: AllowanceFactor,
    /// The argument-scale buckets its calls are measured and planned in
    /// (`latency.scale`); `None`: one profile for every call.
    pub scale: Option<LatencyScale>,
}

/// The profile a call is planned with, and its factor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Plan {
    /// The profile in force now.
    pub(crate) profile: LatencyProfile,
    /// The allowance factor.
    pub(crate) factor: AllowanceFactor,
    /// The argument-scale bucket the call was planned in, when the tool
    /// declares a scale.
    pub(crate) bucket: Option<ScaleBucket>,
}

impl Plan {
    /// One attempt's allowance: p99 × factor, capped by what remains.
    pub(crate) fn allowance(&self, remaining: Duration) -> Duration {
        self.factor.apply(self.profile.p99()).min(remaining)
    }

    /// The time a call needs left before it is sent. A call with side
    /// effects needs its full allowance: started without it, it may time
    /// out after sending and leave an effect in doubt. A read needs at
    /// least its median.
    pub(crate) fn need(&self, class: ToolClass) -> Duration {
        if class.has_side_effect() {
            self.factor.apply(self.profile.p99())
        } else {
            self.profile.p50()
        }
    }
}

/// One subject's histograms.
#[derive(Debug, Default)]
struct Entry {
    /// The stored sum as last read or written, plus `delta`.
    total: LatencyHistogram,
    /// Recorded here since the last flush.
    delta: LatencyHistogram,
    watch: DegradationWatch,
}

#[derive(Debug)]
struct State {
    entries: HashMap<String, Entry>,
    flushed_at: Option<Instant>,
}

/// The observed latency of one engine: see the module docs.
pub(crate) struct LatencyBook {
    tools: BTreeMap<String, ToolLatency>,
    /// Calls of a model observed before its profile replaces the
    /// configured one.
    model_min_samples: u64,
    flush_every: Duration,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    loaded: OnceCell<()>,
    /// Set while a background flush runs, so calls start no other.
    flushing: AtomicBool,
    /// Held by a flush from taking the deltas to taking the sums in, so
    /// that an older sum never replaces a newer one.
    flush_lock: tokio::sync::Mutex<()>,
}

/// Clears the flushing flag even if the flush is dropped.
struct Flushing<'a>(&'a AtomicBool);

impl Drop for Flushing<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl LatencyBook {
    pub(crate) fn new(
        tools: BTreeMap<String, ToolLatency>,
        flush_every: Duration,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        // The first background flush waits a whole interval: a process
        // that makes a few calls writes once, at its run's end.
        let state = State {
            entries: HashMap::new(),
            flushed_at: Some(clock.now()),
        };
        LatencyBook {
            tools,
            model_min_samples: DEFAULT_OBSERVE_MIN_SAMPLES,
            flush_every,
            store,
            clock,
            state: Mutex::new(state),
            loaded: OnceCell::new(),
            flushing: AtomicBool::new(false),
            flush_lock: tokio::sync::Mutex::new(()),
        }
    }

    /// Trusts a model's observed latency from `n` calls on.
    pub(crate) fn with_model_min_samples(mut self, n: u64) -> Self {
        self.model_min_samples = n;
        self
    }

    /// The profile a call of `provider`'s `model` is planned with now: its
    /// observed call latency once `min_samples` calls exist, `configured`
    /// until then.
    pub(crate) fn plan_model(
        &self,
        provider: &str,
        model: &str,
        configured: LatencyProfile,
    ) -> ModelPlan {
        let key = LatencySubject::Model {
            provider: provider.to_owned(),
            model: model.to_owned(),
        }
        .key();
        let state = self.state();
        plan_model(
            configured,
            state.entries.get(&key).map(|e| &e.total),
            self.model_min_samples,
        )
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the stored sums, once per engine (later calls return at once).
    pub(crate) async fn load(&self) {
        self.loaded
            .get_or_init(|| async {
                match self.store.latency_histograms().await {
                    Ok(rows) => self.absorb(rows, false),
                    Err(e) => {
                        tracing::warn!("cannot read the observed latency; starting without it: {e}")
                    }
                }
            })
            .await;
    }

    /// Takes stored sums in: each becomes its subject's total, plus the
    /// delta recorded since (`with_delta`; a first read has none).
    fn absorb(&self, rows: LatencyRows, with_delta: bool) {
        for corrupt in &rows.corrupt {
            tracing::warn!(
                subject = %corrupt.subject,
                "a stored latency histogram cannot be read; it is left out (the next flush replaces it): {}",
                corrupt.reason
            );
        }
        let mut state = self.state();
        for record in rows.records {
            let entry = state.entries.entry(record.subject).or_default();
            let mut total = record.histogram;
            if with_delta {
                total.merge(&entry.delta);
            } else {
                total.merge(&entry.total);
            }
            entry.total = total;
        }
    }

    /// The plan of a call to `tool` with `args` now: its declared
    /// profile, or its observed one once it rests on `min_samples` (the
    /// fallback before).
    ///
    /// A tool with a `latency.scale` is planned in the bucket of `args`:
    /// with that bucket's observed profile once the bucket alone has
    /// `min_samples`, else with the fallback — never with the tool-wide
    /// profile. The tool-wide p99 is a mixture dominated by the common
    /// size: a rare large call planned with it would be cut off, which is
    /// the very error the buckets exist to avoid; the fallback errs on the
    /// long side instead. `args` of `None` (a plan for no call in
    /// particular: the last turn's fastest tool, a lookup by key) plans
    /// with the tool-wide profile.
    pub(crate) fn plan(&self, tool: &ToolBinding, args: Option<&Value>) -> Plan {
        let Some(config) = self.tools.get(&tool.name) else {
            return Plan {
                profile: tool.latency,
                factor: AllowanceFactor::default(),
                bucket: None,
            };
        };
        let bucket = config
            .scale
            .as_ref()
            .zip(args)
            .map(|(scale, args)| scale.bucket_of(args));
        let profile = match config.spec {
            LatencySpec::Observe { .. } => {
                let key = match bucket {
                    Some(bucket) => LatencySubject::ToolScale {
                        tool: tool.name.clone(),
                        bucket,
                    },
                    None => LatencySubject::tool(&tool.name),
                }
                .key();
                let observed = self
                    .state()
                    .entries
                    .get(&key)
                    .and_then(|e| e.total.profile());
                config.spec.profile(observed.as_ref())
            }
            spec => spec.profile(None),
        };
        Plan {
            profile,
            factor: config.factor,
            bucket,
        }
    }

    /// Records one sample of `tool` called with `args`; a degradation it
    /// reveals, if any.
    ///
    /// A tool with a `latency.scale` is recorded twice: in the bucket of
    /// `args` (watched for degradation: a bucket's baseline is its own)
    /// and tool-wide (not watched: one event per cause).
    pub(crate) fn record_tool(
        self: &Arc<Self>,
        tool: &ToolBinding,
        args: &Value,
        latency: Duration,
    ) -> Option<LatencyDegraded> {
        let config = self.tools.get(&tool.name);
        let baseline = match config.map(|c| c.spec) {
            Some(LatencySpec::Observe { min_samples, .. }) => Baseline::ObservedAfter(min_samples),
            Some(spec) => Baseline::Declared(spec.profile(None).p99()),
            None => Baseline::Declared(tool.latency.p99()),
        };
        let tool_wide = LatencySubject::tool(&tool.name);
        let degraded = match config.and_then(|c| c.scale.as_ref()) {
            Some(scale) => {
                let bucket = LatencySubject::ToolScale {
                    tool: tool.name.clone(),
                    bucket: scale.bucket_of(args),
                };
                self.record(&tool_wide, latency, Baseline::Unwatched);
                self.record(&bucket, latency, baseline)
            }
            None => self.record(&tool_wide, latency, baseline),
        };
        self.flush_if_due();
        degraded
    }

    /// Records one whole model answer of `output_tokens`; a degradation of
    /// the model's call latency it reveals, if any (its baseline is the
    /// observed p99 once `min_samples` calls exist).
    pub(crate) fn record_model(
        self: &Arc<Self>,
        provider: &str,
        model: &str,
        latency: Duration,
        output_tokens: u64,
    ) -> Option<LatencyDegraded> {
        let (provider, model) = (provider.to_owned(), model.to_owned());
        let call = LatencySubject::Model {
            provider: provider.clone(),
            model: model.clone(),
        };
        let degraded = self.record(
            &call,
            latency,
            Baseline::ObservedAfter(self.model_min_samples),
        );
        if output_tokens > 0 {
            let per_token = LatencySubject::ModelPerToken { provider, model };
            let nanos = latency.as_nanos() / u128::from(output_tokens);
            let each = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
            // Watched through the call latency only: one event per cause.
            self.record(&per_token, each, Baseline::Unwatched);
        }
        self.flush_if_due();
        degraded
    }

    /// Records one streamed answer: its time to the first event, and its
    /// whole latency as [`record_model`](Self::record_model) does.
    pub(crate) fn record_stream(
        self: &Arc<Self>,
        provider: &str,
        model: &str,
        (first_event, latency): (Duration, Duration),
        output_tokens: u64,
    ) -> Option<LatencyDegraded> {
        let first = LatencySubject::ModelFirstToken {
            provider: provider.to_owned(),
            model: model.to_owned(),
        };
        // Watched through the call latency only: one event per cause.
        self.record(&first, first_event, Baseline::Unwatched);
        self.record_model(provider, model, latency, output_tokens)
    }

    fn record(
        &self,
        subject: &LatencySubject,
        latency: Duration,
        baseline: Baseline,
    ) -> Option<LatencyDegraded> {
        let key = subject.key();
        let mut state = self.state();
        let entry = state.entries.entry(key.clone()).or_default();
        entry.total.record(latency);
        entry.delta.record(latency);
        let source = match baseline {
            Baseline::Declared(p99) => {
                entry.watch.set_baseline_once(p99);
                BaselineSource::Declared
            }
            Baseline::ObservedAfter(min_samples) => {
                if entry.watch.baseline().is_none()
                    && entry.total.samples() >= min_samples
                    && let Some(profile) = entry.total.profile()
                {
                    entry.watch.set_baseline_once(profile.p99());
                }
                BaselineSource::Observed
            }
            Baseline::Unwatched => return None,
        };
        let degraded = entry.watch.on_sample(latency)?;
        Some(LatencyDegraded {
            subject: key,
            p99: degraded.p99,
            baseline: degraded.baseline,
            baseline_source: source,
            samples: degraded.samples,
        })
    }

    /// Starts a background flush when the last one is older than
    /// `flush_every` and none runs.
    fn flush_if_due(self: &Arc<Self>) {
        let now = self.clock.now();
        let due = self
            .state()
            .flushed_at
            .is_none_or(|at| now.saturating_duration_since(at) >= self.flush_every);
        if !due || self.flushing.swap(true, Ordering::AcqRel) {
            return;
        }
        self.state().flushed_at = Some(now);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.flushing.store(false, Ordering::Release);
            return;
        };
        let book = self.clone();
        runtime.spawn(async move {
            let _flag = Flushing(&book.flushing);
            book.flush_now().await;
        });
    }

    /// Adds every delta to the store and takes the sums back. On failure
    /// the deltas are kept for the next flush.
    pub(crate) async fn flush_now(&self) {
        // The stored sums are read before any is written back: reading
        // them after would count this process's deltas twice.
        self.load().await;
        let _serial = self.flush_lock.lock().await;
        let deltas: Vec<(String, LatencyHistogram)> = {
            let mut state = self.state();
            state.flushed_at = Some(self.clock.now());
            state
                .entries
                .iter_mut()
                .filter(|(_, e)| !e.delta.is_empty())
                .map(|(k, e)| (k.clone(), std::mem::take(&mut e.delta)))
                .collect()
        };
        if deltas.is_empty() {
            return;
        }
        let now_ms = unix_ms(self.clock.system_now());
        match self.store.merge_latency(&deltas, now_ms).await {
            Ok(rows) => self.absorb(rows, true),
            Err(e) => {
                tracing::warn!(
                    "cannot add the observed latency to the store; keeping it for the next flush: {e}"
                );
                let mut state = self.state();
                for (key, delta) in deltas {
                    state.entries.entry(key).or_default().delta.merge(&delta);
                }
            }
        }
    }
}

/// What a sample's degradation is measured against.
enum Baseline {
    /// A declared p99.
    Declared(Duration),
    /// The observed p99 once `min_samples` exist.
    ObservedAfter(u64),
    /// Recorded, never watched.
    Unwatched,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use rein_core::Timestamp;

    use rein_core::ManualClock;
    use rein_store_sqlite::SqliteStore;

    use super::*;
    use crate::run::fixture;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn observe(min_samples: u64) -> ToolLatency {
        ToolLatency {
            spec: LatencySpec::Observe {
                fallback: LatencyProfile::new(ms(5_000), ms(5_000), ms(5_000), 0).unwrap(),
                min_samples,
            },
            factor: AllowanceFactor::new(1.5).unwrap(),
            scale: None,
        }
    }

    fn book(store: &Arc<dyn Store>, tool: ToolLatency) -> Arc<LatencyBook> {
        let tools = BTreeMap::from([(fixture::READ.to_owned(), tool)]);
        Arc::new(LatencyBook::new(
            tools,
            Duration::from_secs(3_600),
            store.clone(),
            Arc::new(ManualClock::new()),
        ))
    }

    fn sqlite(dir: &tempfile::TempDir) -> Arc<dyn Store> {
        Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap())
    }

    #[tokio::test]
    async fn observe_plans_with_the_fallback_until_min_samples_then_with_what_it_saw() {
        let dir = tempfile::tempdir().unwrap();
        let book = book(&sqlite(&dir), observe(3));
        let read = fixture::agent().tools[fixture::READ].clone();
        book.load().await;
        for _ in 0..2 {
            assert_eq!(book.plan(&read, None).profile.p99(), ms(5_000));
            assert!(book.record_tool(&read, &Value::Null, ms(200)).is_none());
        }
        assert_eq!(
            book.plan(&read, None).allowance(Duration::MAX),
            ms(7_500),
            "5 s × 1.5"
        );
        book.record_tool(&read, &Value::Null, ms(200));
        let plan = book.plan(&read, None);
        assert_eq!(plan.profile.samples(), 3);
        assert!(
            (ms(200)..=ms(202)).contains(&plan.profile.p99()),
            "{plan:?}"
        );
        assert!((ms(300)..=ms(303)).contains(&plan.allowance(Duration::MAX)));
        assert_eq!(plan.allowance(ms(100)), ms(100), "capped by what remains");
        assert_eq!(plan.need(ToolClass::Read), plan.profile.p50());
    }

    #[tokio::test]
    async fn a_declared_tool_is_recorded_but_planned_as_declared() {
        let dir = tempfile::tempdir().unwrap();
        let declared = LatencyProfile::new(ms(10), ms(100), ms(250), 0).unwrap();
        let book = book(
            &sqlite(&dir),
            ToolLatency {
                spec: LatencySpec::Declared(declared),
                factor: AllowanceFactor::default(),
                scale: None,
            },
        );
        let read = fixture::agent().tools[fixture::READ].clone();
        let mut degraded = None;
        for _ in 0..rein_core::latency::DEGRADATION_WINDOW {
            degraded = degraded.or(book.record_tool(&read, &Value::Null, ms(600)));
        }
        assert_eq!(book.plan(&read, None).profile, declared);
        let degraded = degraded.expect("600 ms is above twice the declared 250 ms");
        assert_eq!(degraded.baseline, ms(250));
        assert_eq!(degraded.baseline_source, BaselineSource::Declared);
    }

    #[tokio::test]
    async fn two_books_on_one_store_sum_their_samples_once_each() {
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite(&dir);
        let read = fixture::agent().tools[fixture::READ].clone();
        let (one, two) = (book(&store, observe(1)), book(&store, observe(1)));
        one.load().await;
        two.load().await;
        one.record_tool(&read, &Value::Null, ms(100));
        one.record_tool(&read, &Value::Null, ms(100));
        two.record_tool(&read, &Value::Null, ms(300));
        one.flush_now().await;
        two.flush_now().await;
        // A flush with nothing new changes nothing; a second flush of one
        // takes the other's samples in.
        two.flush_now().await;
        one.record_tool(&read, &Value::Null, ms(100));
        one.flush_now().await;
        assert_eq!(one.plan(&read, None).profile.samples(), 4, "2 + 1 + 1");
        assert_eq!(
            two.plan(&read, None).profile.samples(),
            3,
            "not yet the last one"
        );
        let rows = store.latency_histograms().await.unwrap();
        assert_eq!(rows.records[0].histogram.samples(), 4);
        // A fresh book (a new process) starts from the sum.
        let three = book(&store, observe(1));
        three.load().await;
        assert_eq!(three.plan(&read, None).profile.samples(), 4);
    }

    #[tokio::test]
    async fn a_corrupt_stored_row_is_left_out_and_the_next_flush_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite(&dir);
        store
            .merge_latency(
                &[("tool:get_order".into(), LatencyHistogram::new())],
                Timestamp::from_millis(1),
            )
            .await
            .unwrap();
        let conn = rusqlite::Connection::open(dir.path().join("rein.db")).unwrap();
        conn.execute(
            "INSERT INTO latency_histograms VALUES ('tool:get_order', 'garbage', 9, 1)",
            [],
        )
        .unwrap();
        let read = fixture::agent().tools[fixture::READ].clone();
        let book = book(&store, observe(1));
        book.load().await;
        assert_eq!(
            book.plan(&read, None).profile.p99(),
            ms(5_000),
            "nothing trusted from it"
        );
        book.record_tool(&read, &Value::Null, ms(40));
        book.flush_now().await;
        let rows = store.latency_histograms().await.unwrap();
        assert!(rows.corrupt.is_empty(), "{rows:?}");
        assert_eq!(rows.records[0].histogram.samples(), 1);
        assert_eq!(book.plan(&read, None).profile.samples(), 1);
    }
}
