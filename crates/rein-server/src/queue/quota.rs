//! Per-tenant API quotas (`[server.quotas]`): how fast a tenant may
//! submit, how many of its runs execute at once, how many wait queued.
//!
//! # Why
//!
//! One tenant's burst must not become every tenant's outage: without a
//! bound, 300 submissions of one tenant fill the queue and the run slots
//! ahead of everyone else's single run. Beyond a quota a submission gets
//! `429` problem+json (`type` …`/quota-exceeded`) with `Retry-After`, a
//! `WARN` log line and the `rein_quota_exceeded_total` counter.
//!
//! | quota | counted | `Retry-After` |
//! | --- | --- | --- |
//! | `submissions_per_sec` / `submission_burst` | a token bucket per tenant, in this process | when the bucket holds a token again, rounded up to whole seconds |
//! | `max_running` | the tenant's root runs `running` in the store (every process) and, exactly, this process's own | 1 s: a run's end cannot be foreseen |
//! | `max_queued` | the tenant's root runs `queued` in the store | 1 s |
//!
//! A queued submission is refused at `max_queued`, never at
//! `max_running`: it waits, and the queue worker passes a tenant over while
//! it is at `max_running` ([`crate::queue::fair`]). A sync submission is refused
//! at `max_running`.
//!
//! # Why no run event
//!
//! Events belong to runs, and a refused submission has none: it never
//! started, nothing of it is stored. What it leaves is the log line and the
//! counter (labelled by quota, not by tenant, so a tenant cannot grow the
//! metrics by its name).
//!
//! # Accuracy
//!
//! The rate is per process: behind a balancer spreading a tenant over `P`
//! processes it admits up to `P ×` the rate. The run caps read the store,
//! so they hold for all processes together, up to the admissions that race
//! between a check and the run's record: at most one per other process at
//! that moment. Within one process the running cap is exact (its own runs
//! are counted under a lock before they start).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::http::StatusCode;
use rein_core::governor::{Acquire, TokenBucket};
use rein_core::registry::{ServerQuotas, TenantQuota};
use rein_core::{Instant, TenantId};
use serde_json::json;

use crate::http::problem::Problem;

/// Which quota refused a submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quota {
    /// `submissions_per_sec` and `submission_burst`.
    SubmissionRate,
    /// `max_running`.
    MaxRunning,
    /// `max_queued`.
    MaxQueued,
}

impl Quota {
    /// The name the problem, the log and the counter use.
    pub fn as_str(self) -> &'static str {
        match self {
            Quota::SubmissionRate => "submission_rate",
            Quota::MaxRunning => "max_running",
            Quota::MaxQueued => "max_queued",
        }
    }

    const ALL: [Quota; 3] = [Quota::SubmissionRate, Quota::MaxRunning, Quota::MaxQueued];

    fn index(self) -> usize {
        match self {
            Quota::SubmissionRate => 0,
            Quota::MaxRunning => 1,
            Quota::MaxQueued => 2,
        }
    }
}

/// A submission over one of its tenant's quotas.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaExceeded {
    /// Whose.
    pub tenant: TenantId,
    /// Which.
    pub quota: Quota,
    /// The limit as configured (`2/s, burst 4`; `3`).
    pub limit: String,
    /// When a retry may pass.
    pub retry_after: Duration,
}

impl QuotaExceeded {
    /// Whole seconds for `Retry-After`, rounded up, at least 1.
    pub fn retry_after_secs(&self) -> u32 {
        let secs = self.retry_after.as_secs_f64().ceil();
        u32::try_from(secs as u64).unwrap_or(u32::MAX).max(1)
    }

    /// The 429 problem.
    pub fn problem(&self) -> Problem {
        let retry = self.retry_after_secs();
        let mut problem = Problem::new(
            StatusCode::TOO_MANY_REQUESTS,
            "quota-exceeded",
            "Quota exceeded",
            format!(
                "tenant `{}` is over its {} quota ({}); retry after {retry} s",
                self.tenant,
                self.quota.as_str(),
                self.limit
            ),
        )
        .with(json!({
            "tenant": self.tenant.as_str(),
            "quota": self.quota.as_str(),
            "limit": self.limit,
            "retry_after_s": retry,
        }));
        problem.retry_after = Some(retry);
        problem
    }
}

/// The quota state of one process: submission buckets, its own running
/// runs per tenant, refusal counters.
#[derive(Debug, Default)]
pub struct Quotas {
    buckets: Mutex<HashMap<TenantId, TokenBucket>>,
    running: Arc<Mutex<HashMap<TenantId, u32>>>,
    refused: [AtomicU64; 3],
}

/// Whether a tenant with `here` runs in this process and `store` in the
/// store may start one more.
fn allows(quota: &TenantQuota, here: u32, store: u64) -> bool {
    quota
        .max_running
        .is_none_or(|max| here < max.get() && store < u64::from(max.get()))
}

/// One run of a tenant counted as running in this process, until dropped.
#[derive(Debug)]
pub struct Running {
    tenant: TenantId,
    counts: Arc<Mutex<HashMap<TenantId, u32>>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = counts.get_mut(&self.tenant) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.tenant);
            }
        }
    }
}

impl Quotas {
    /// Takes one submission from `tenant`'s bucket at `now`.
    ///
    /// # Errors
    ///
    /// [`Quota::SubmissionRate`], with the time until the bucket holds a
    /// token again, when it is empty.
    pub fn submit(
        &self,
        config: &ServerQuotas,
        tenant: &TenantId,
        now: Instant,
    ) -> Result<(), QuotaExceeded> {
        let Some(rate) = config.of(tenant).submissions else {
            return Ok(());
        };
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let bucket = match buckets.get_mut(tenant) {
            Some(bucket) => bucket,
            None => {
                // Validated by the config check: a burst of at least 1.
                let Ok(fresh) = TokenBucket::new(rate.rate, u64::from(rate.burst)) else {
                    return Ok(());
                };
                buckets.entry(tenant.clone()).or_insert(fresh)
            }
        };
        match bucket.try_acquire(1, now) {
            Acquire::Granted => Ok(()),
            Acquire::Wait { until } => Err(self.refuse(QuotaExceeded {
                tenant: tenant.clone(),
                quota: Quota::SubmissionRate,
                limit: format!("{}, burst {}", rate.rate, rate.burst),
                retry_after: until.saturating_duration_since(now),
            })),
            // A burst of at least one always holds one token.
            Acquire::Rejected { .. } => Ok(()),
        }
    }

    /// Counts one more run of `tenant` in this process, unless that would
    /// make its runs more than `max_running`: `store_running` of them
    /// (every process's, from the store) or this process's own.
    ///
    /// # Errors
    ///
    /// [`Quota::MaxRunning`], counted and logged.
    pub fn start(
        &self,
        quota: &TenantQuota,
        tenant: &TenantId,
        store_running: u64,
    ) -> Result<Running, QuotaExceeded> {
        self.start_quietly(quota, tenant, store_running)
            .ok_or_else(|| {
                self.refuse(QuotaExceeded {
                    tenant: tenant.clone(),
                    quota: Quota::MaxRunning,
                    limit: quota.max_running.map_or(0, |m| m.get()).to_string(),
                    retry_after: Duration::from_secs(1),
                })
            })
    }

    /// [`Quotas::start`] for a queue worker: `None` at the cap, which is no
    /// refusal (the run stays queued).
    pub fn start_quietly(
        &self,
        quota: &TenantQuota,
        tenant: &TenantId,
        store_running: u64,
    ) -> Option<Running> {
        let mut counts = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if !allows(
            quota,
            counts.get(tenant).copied().unwrap_or(0),
            store_running,
        ) {
            return None;
        }
        *counts.entry(tenant.clone()).or_insert(0) += 1;
        Some(Running {
            tenant: tenant.clone(),
            counts: self.running.clone(),
        })
    }

    /// Whether [`Quotas::start_quietly`] would count one more run now.
    pub fn may_start(&self, quota: &TenantQuota, tenant: &TenantId, store_running: u64) -> bool {
        allows(quota, self.running_here(tenant), store_running)
    }

    /// This process's runs of `tenant` counted by [`Quotas::start`].
    pub fn running_here(&self, tenant: &TenantId) -> u32 {
        let counts = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        counts.get(tenant).copied().unwrap_or(0)
    }

    /// Whether `tenant`, with `store_queued` runs queued, may queue one
    /// more.
    ///
    /// # Errors
    ///
    /// [`Quota::MaxQueued`].
    pub fn enqueue(
        &self,
        quota: &TenantQuota,
        tenant: &TenantId,
        store_queued: u64,
    ) -> Result<(), QuotaExceeded> {
        match quota.max_queued {
            Some(max) if store_queued >= u64::from(max.get()) => Err(self.refuse(QuotaExceeded {
                tenant: tenant.clone(),
                quota: Quota::MaxQueued,
                limit: max.to_string(),
                retry_after: Duration::from_secs(1),
            })),
            _ => Ok(()),
        }
    }

    /// Submissions refused by `quota` so far.
    pub fn refused(&self, quota: Quota) -> u64 {
        self.refused[quota.index()].load(Ordering::Acquire)
    }

    /// Counts and logs a refusal.
    fn refuse(&self, e: QuotaExceeded) -> QuotaExceeded {
        self.refused[e.quota.index()].fetch_add(1, Ordering::AcqRel);
        tracing::warn!(
            tenant = %e.tenant,
            quota = e.quota.as_str(),
            limit = %e.limit,
            retry_after_ms = u64::try_from(e.retry_after.as_millis()).unwrap_or(u64::MAX),
            "quota_exceeded: submission refused with 429"
        );
        e
    }
}

/// The quota label of `rein_quota_exceeded_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct QuotaLabel {
    quota: &'static str,
}

impl prometheus_client::collector::Collector for Quotas {
    /// The refusal counters, read at each scrape.
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        let mut family = encoder.encode_descriptor(
            "rein_quota_exceeded",
            "Submissions refused with 429 because their tenant was over a [server.quotas] quota",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for quota in Quota::ALL {
            let labels = QuotaLabel {
                quota: quota.as_str(),
            };
            crate::http::request_metrics::counter(self.refused(quota))
                .encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys for the tenants the tests name in overrides (a tenant no key
    /// acts for is refused).
    const KEYS: &str = concat!(
        "[[server.api_keys]]\ntenant = \"gold\"\nsha256 = \"",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\n",
        "[[server.api_keys]]\ntenant = \"base\"\nsha256 = \"",
        "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\"\n",
    );

    fn quotas(text: &str) -> ServerQuotas {
        let file: rein_core::registry::ConfigFile =
            toml::from_str(&format!("{KEYS}[server.quotas]\n{text}")).unwrap();
        let registry = rein_core::registry::check(
            &[rein_core::registry::ConfigSource::new("rein.toml", file)],
            &|_| Vec::new(),
        )
        .unwrap();
        registry.server().quotas.clone()
    }

    fn tenant(name: &str) -> TenantId {
        TenantId::new(name).unwrap()
    }

    fn at(ms: u64) -> Instant {
        Instant::from_origin(Duration::from_millis(ms))
    }

    #[test]
    fn the_bucket_refuses_past_its_burst_with_the_time_to_its_next_token() {
        let config = quotas("submissions_per_sec = 0.5\nsubmission_burst = 2\n");
        let q = Quotas::default();
        let acme = tenant("acme");
        assert!(q.submit(&config, &acme, at(0)).is_ok());
        assert!(q.submit(&config, &acme, at(0)).is_ok());
        let refused = q.submit(&config, &acme, at(500)).unwrap_err();
        assert_eq!(refused.quota, Quota::SubmissionRate);
        // One token every 2 s, the bucket emptied at 0: 1.5 s from 0.5 s.
        assert_eq!(refused.retry_after, Duration::from_millis(1500));
        assert_eq!(refused.retry_after_secs(), 2);
        assert_eq!(q.refused(Quota::SubmissionRate), 1);
        // Another tenant has its own bucket.
        assert!(q.submit(&config, &tenant("other"), at(500)).is_ok());
        // And the token is there when Retry-After said.
        assert!(q.submit(&config, &acme, at(2000)).is_ok());
    }

    #[test]
    fn a_tenant_override_has_its_own_rate() {
        let config = quotas(
            "submissions_per_sec = 1.0\nsubmission_burst = 1\n[server.quotas.tenants.gold]\nsubmission_burst = 3\n",
        );
        let q = Quotas::default();
        for _ in 0..3 {
            assert!(q.submit(&config, &tenant("gold"), at(0)).is_ok());
        }
        assert!(q.submit(&config, &tenant("gold"), at(0)).is_err());
        assert!(q.submit(&config, &tenant("base"), at(0)).is_ok());
        assert!(q.submit(&config, &tenant("base"), at(0)).is_err());
    }

    #[test]
    fn without_a_rate_nothing_is_refused() {
        let config = quotas("");
        let q = Quotas::default();
        for _ in 0..1000 {
            assert!(q.submit(&config, &tenant("acme"), at(0)).is_ok());
        }
    }

    #[test]
    fn the_running_cap_counts_this_process_exactly_and_the_store_too() {
        let config = quotas("max_running = 2\n");
        let q = Quotas::default();
        let acme = tenant("acme");
        let quota = config.of(&acme);
        let one = q.start(quota, &acme, 0).unwrap();
        let _two = q.start(quota, &acme, 0).unwrap();
        assert_eq!(
            q.start(quota, &acme, 0).unwrap_err().quota,
            Quota::MaxRunning,
            "two here already, whatever the store says"
        );
        drop(one);
        assert_eq!(q.running_here(&acme), 1);
        assert!(
            q.start(quota, &acme, 2).is_err(),
            "two running elsewhere fill the cap"
        );
        assert!(q.start(quota, &acme, 1).is_ok());
        assert_eq!(q.refused(Quota::MaxRunning), 2);
    }

    #[test]
    fn the_queued_cap_reads_the_stores_count() {
        let config = quotas("max_queued = 3\n");
        let q = Arc::new(Quotas::default());
        let metrics = rein_engine::metrics::Metrics::default();
        metrics.register_collector(Box::new(q.clone()));
        let acme = tenant("acme");
        assert!(q.enqueue(config.of(&acme), &acme, 2).is_ok());
        let refused = q.enqueue(config.of(&acme), &acme, 3).unwrap_err();
        assert_eq!(refused.quota, Quota::MaxQueued);
        let problem = refused.problem();
        assert_eq!(problem.status, 429);
        assert_eq!(problem.retry_after, Some(1));
        assert!(
            metrics
                .render()
                .contains("rein_quota_exceeded_total{quota=\"max_queued\"} 1")
        );
    }
}
