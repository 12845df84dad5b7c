//! `[server.quotas]`: what each tenant may ask of `rein serve`, and how the
//! server shares its run slots between tenants and between interactive and
//! batch work.
//!
//! # Why a module of its own
//!
//! The quotas are one concept with one check: the config as written
//! ([`ServerQuotasConfig`]), the validated settings the server runs on
//! ([`ServerQuotas`]) and [`validate`], which reports every value out of
//! range with its dotted field. The registry check only calls it.
//!
//! # Defaults
//!
//! | setting | default | accepted |
//! | --- | --- | --- |
//! | `submissions_per_sec` | none: submissions are not rate limited | [0.000001, 1e9] per second, per tenant |
//! | `submission_burst` | `submissions_per_sec` rounded up | ≥ 1; needs `submissions_per_sec` |
//! | `max_running` | none: no cap | ≥ 1 runs of one tenant executing at once (sync and queued, all servers on the store) |
//! | `max_queued` | none: no cap | ≥ 1 queued runs of one tenant waiting |
//! | `weight` | 1 | [0.001, 1000]: the tenant's share of queue picks |
//! | `run_slots` | none: sync runs are not held back, queued runs are bounded by `queue.workers` | 1..=100 000 runs this process executes at once |
//! | `interactive_reserve` | 1 | 0..`run_slots`: slots batch (queued) work never takes; needs `run_slots` |
//! | `batch_share` | 0.1 | [0.001, 0.5]: the share of contended slot grants batch keeps under an interactive flood; needs `run_slots` |
//!
//! `[server.quotas.tenants.ID]` sets `submissions_per_sec`,
//! `submission_burst`, `max_running`, `max_queued` and `weight` for one
//! tenant; what it leaves out is taken from `[server.quotas]`.

use std::collections::BTreeMap;
use std::num::NonZeroU32;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::governor::{
    BatchShare, DEFAULT_BATCH_SHARE, DEFAULT_TENANT_WEIGHT, MAX_CONCURRENCY_CEILING,
    MAX_RATE_PER_SEC, MAX_TENANT_WEIGHT, MIN_RATE_PER_SEC, MIN_TENANT_WEIGHT, Rate, TenantWeights,
};
use crate::ids::TenantId;

/// The slots batch work never takes when `run_slots` is set and
/// `interactive_reserve` is not.
pub const DEFAULT_INTERACTIVE_RESERVE: u32 = 1;

/// One tenant's quotas as written (`[server.quotas]` for every tenant,
/// `[server.quotas.tenants.ID]` for one).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct TenantQuotaConfig {
    /// Sustained submissions per second (the tenant's token bucket refill).
    pub submissions_per_sec: Option<f64>,
    /// The bucket's size: submissions accepted at once after a pause.
    pub submission_burst: Option<u32>,
    /// Runs of the tenant executing at once.
    pub max_running: Option<u32>,
    /// Queued runs of the tenant waiting for a worker.
    pub max_queued: Option<u32>,
    /// The tenant's weight in the fair queue.
    pub weight: Option<f64>,
    /// What all of the tenant's keys together may spend on models through
    /// the gateway; each limit replaces `[server.quotas.budget]`'s.
    pub budget: Option<super::key_budget::KeyBudgetConfig>,
}

/// `[server.quotas]` as written in config.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ServerQuotasConfig {
    /// Every tenant's sustained submissions per second.
    pub submissions_per_sec: Option<f64>,
    /// Every tenant's submission bucket size.
    pub submission_burst: Option<u32>,
    /// Every tenant's runs executing at once.
    pub max_running: Option<u32>,
    /// Every tenant's queued runs waiting.
    pub max_queued: Option<u32>,
    /// Every tenant's fair queue weight.
    pub weight: Option<f64>,
    /// What each tenant's keys together may spend on models through the
    /// gateway, per UTC day and month.
    pub budget: Option<super::key_budget::KeyBudgetConfig>,
    /// Per-tenant overrides, keyed by tenant id.
    pub tenants: BTreeMap<String, TenantQuotaConfig>,
    /// Runs this process executes at once, sync and queued together.
    pub run_slots: Option<u32>,
    /// Slots batch work never takes.
    pub interactive_reserve: Option<u32>,
    /// The share of contended grants batch keeps.
    pub batch_share: Option<f64>,
}

/// A tenant's submission rate: a token bucket of `burst` refilled at
/// `rate`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SubmissionRate {
    /// The refill.
    pub rate: Rate,
    /// The bucket's size.
    pub burst: u32,
}

/// One tenant's validated quotas.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct TenantQuota {
    /// The submission bucket; `None`: not rate limited.
    pub submissions: Option<SubmissionRate>,
    /// Runs executing at once; `None`: no cap.
    pub max_running: Option<NonZeroU32>,
    /// Queued runs waiting; `None`: no cap.
    pub max_queued: Option<NonZeroU32>,
    /// The fair queue weight.
    pub weight: f64,
    /// What the tenant's keys together may spend through the gateway.
    pub budget: super::key_budget::KeyBudget,
}

impl Default for TenantQuota {
    fn default() -> Self {
        TenantQuota {
            submissions: None,
            max_running: None,
            max_queued: None,
            weight: DEFAULT_TENANT_WEIGHT,
            budget: super::key_budget::KeyBudget::default(),
        }
    }
}

/// How a process shares its run slots: at most `total` runs at once,
/// `interactive_reserve` of them never given to batch work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunSlots {
    /// Runs executing at once in this process.
    pub total: NonZeroU32,
    /// Slots only interactive (sync) runs take; below `total`.
    pub interactive_reserve: u32,
    /// What batch keeps of contended grants.
    pub batch_share: BatchShare,
}

/// The validated `[server.quotas]`.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct ServerQuotas {
    /// Every tenant's quotas unless named.
    pub default: TenantQuota,
    /// Named tenants' quotas (the defaults filled in).
    pub tenants: BTreeMap<TenantId, TenantQuota>,
    /// The run slots; `None`: sync runs are not held back.
    pub run_slots: Option<RunSlots>,
}

impl ServerQuotas {
    /// `tenant`'s quotas.
    pub fn of(&self, tenant: &TenantId) -> &TenantQuota {
        self.tenants.get(tenant).unwrap_or(&self.default)
    }

    /// The tenants' fair queue weights.
    pub fn weights(&self) -> TenantWeights {
        let mut weights = TenantWeights::default();
        if self.default.weight != DEFAULT_TENANT_WEIGHT || !self.tenants.is_empty() {
            let config = crate::governor::QuotaConfig {
                default_weight: self.default.weight,
                weights: self
                    .tenants
                    .iter()
                    .map(|(t, q)| (t.clone(), q.weight))
                    .collect(),
                ..crate::governor::QuotaConfig::default()
            };
            // Validated already; on the impossible error every tenant
            // weighs the same.
            weights = TenantWeights::new(&config).unwrap_or_default();
        }
        weights
    }

    /// Whether any quota is set (so the server needs to count anything).
    pub fn is_unlimited(&self) -> bool {
        let none = |q: &TenantQuota| {
            q.submissions.is_none() && q.max_running.is_none() && q.max_queued.is_none()
        };
        none(&self.default) && self.tenants.values().all(none)
    }
}

/// A value [`validate`] refused: its dotted field and what is wrong.
pub(super) type Refused = (String, String);

/// Validates `c` (the table at `server.quotas`), returning the settings with
/// every refused value replaced by its default, and what was refused.
pub(super) fn validate(c: &ServerQuotasConfig) -> (ServerQuotas, Vec<Refused>) {
    let mut refused = Vec::new();
    let p = "server.quotas";
    let own = TenantQuotaConfig {
        submissions_per_sec: c.submissions_per_sec,
        submission_burst: c.submission_burst,
        max_running: c.max_running,
        max_queued: c.max_queued,
        weight: c.weight,
        budget: c.budget.clone(),
    };
    let default = tenant_quota(p, &own, &TenantQuota::default(), &mut refused);
    let mut tenants = BTreeMap::new();
    for (name, config) in &c.tenants {
        let field = format!("{p}.tenants.{name}");
        match TenantId::new(name) {
            Ok(tenant) => {
                let quota = tenant_quota(&field, config, &default, &mut refused);
                tenants.insert(tenant, quota);
            }
            Err(e) => refused.push((field, format!("is not a tenant id: {e}"))),
        }
    }
    let run_slots = run_slots(p, c, &mut refused);
    (
        ServerQuotas {
            default,
            tenants,
            run_slots,
        },
        refused,
    )
}

/// The tenant every request acts for when no `[[server.api_keys]]` are
/// configured (loopback only).
pub const KEYLESS_TENANT: &str = "default";

/// The tenant overrides no request can act for: with keys, a tenant no key
/// maps to; without, any tenant but [`KEYLESS_TENANT`]. Such an override
/// would be accepted and never applied.
pub(super) fn unreachable_tenants(
    quotas: &ServerQuotas,
    key_tenants: &[&TenantId],
) -> Vec<Refused> {
    let reachable = |t: &TenantId| {
        if key_tenants.is_empty() {
            t.as_str() == KEYLESS_TENANT
        } else {
            key_tenants.contains(&t)
        }
    };
    let known = if key_tenants.is_empty() {
        format!("without [[server.api_keys]] every request is tenant `{KEYLESS_TENANT}`")
    } else {
        let names: Vec<&str> = key_tenants.iter().map(|t| t.as_str()).collect();
        format!("keys exist for: {}", names.join(", "))
    };
    quotas
        .tenants
        .keys()
        .filter(|t| !reachable(t))
        .map(|t| {
            (
                format!("server.quotas.tenants.{t}"),
                format!(
                    "has no effect: no [[server.api_keys]] entry acts for tenant `{t}` ({known})"
                ),
            )
        })
        .collect()
}

fn tenant_quota(
    p: &str,
    c: &TenantQuotaConfig,
    inherited: &TenantQuota,
    refused: &mut Vec<Refused>,
) -> TenantQuota {
    let mut q = *inherited;
    if let Some(budget) = &c.budget {
        match budget.validate(&format!("{p}.budget"), inherited.budget) {
            Ok(budget) => q.budget = budget,
            Err(problems) => refused.extend(problems),
        }
    }
    match (c.submissions_per_sec, c.submission_burst) {
        (None, None) => {}
        (None, Some(burst)) => match (inherited.submissions, NonZeroU32::new(burst)) {
            (Some(rate), Some(_)) => {
                q.submissions = Some(SubmissionRate {
                    rate: rate.rate,
                    burst,
                });
            }
            (_, None) => refused.push((
                format!("{p}.submission_burst"),
                "must be at least 1, but it is 0".to_owned(),
            )),
            (None, Some(_)) => refused.push((
                format!("{p}.submission_burst"),
                "needs submissions_per_sec: a bucket that never refills limits nothing useful"
                    .to_owned(),
            )),
        },
        (Some(per_sec), burst) => {
            let field = format!("{p}.submissions_per_sec");
            if !(per_sec.is_finite() && (MIN_RATE_PER_SEC..=MAX_RATE_PER_SEC).contains(&per_sec)) {
                refused.push((
                    field,
                    format!("must be a rate in [0.000001, 1e9] per second, but it is {per_sec}"),
                ));
            } else {
                match Rate::from_per_second("submissions_per_sec", per_sec) {
                    Ok(rate) => {
                        let burst = burst.unwrap_or(per_sec.ceil().clamp(1.0, 1e9) as u32);
                        if burst == 0 {
                            refused.push((
                                format!("{p}.submission_burst"),
                                "must be at least 1, but it is 0".to_owned(),
                            ));
                        } else {
                            q.submissions = Some(SubmissionRate { rate, burst });
                        }
                    }
                    Err(e) => refused.push((field, e.to_string())),
                }
            }
        }
    }
    for (name, value, slot) in [
        ("max_running", c.max_running, &mut q.max_running),
        ("max_queued", c.max_queued, &mut q.max_queued),
    ] {
        if let Some(n) = value {
            match NonZeroU32::new(n) {
                Some(n) => *slot = Some(n),
                None => refused.push((
                    format!("{p}.{name}"),
                    "must be at least 1 (leave it out for no cap), but it is 0".to_owned(),
                )),
            }
        }
    }
    if let Some(w) = c.weight {
        if w.is_finite() && (MIN_TENANT_WEIGHT..=MAX_TENANT_WEIGHT).contains(&w) {
            q.weight = w;
        } else {
            refused.push((
                format!("{p}.weight"),
                format!("must be a weight in [0.001, 1000], but it is {w}"),
            ));
        }
    }
    q
}

fn run_slots(p: &str, c: &ServerQuotasConfig, refused: &mut Vec<Refused>) -> Option<RunSlots> {
    let Some(total) = c.run_slots else {
        for (name, set) in [
            ("interactive_reserve", c.interactive_reserve.is_some()),
            ("batch_share", c.batch_share.is_some()),
        ] {
            if set {
                refused.push((
                    format!("{p}.{name}"),
                    "has no effect without server.quotas.run_slots: without slots nothing is \
                     shared between interactive and batch runs"
                        .to_owned(),
                ));
            }
        }
        return None;
    };
    let Some(total) = NonZeroU32::new(total).filter(|n| n.get() <= MAX_CONCURRENCY_CEILING) else {
        refused.push((
            format!("{p}.run_slots"),
            format!("must be between 1 and {MAX_CONCURRENCY_CEILING}, but it is {total}"),
        ));
        return None;
    };
    let reserve = c
        .interactive_reserve
        .unwrap_or(DEFAULT_INTERACTIVE_RESERVE.min(total.get() - 1));
    let reserve = if reserve >= total.get() {
        refused.push((
            format!("{p}.interactive_reserve"),
            format!(
                "must be less than server.quotas.run_slots ({total}), or batch runs could never \
                 start, but it is {reserve}"
            ),
        ));
        0
    } else {
        reserve
    };
    let field = "server.quotas.batch_share";
    let batch_share = match BatchShare::new(field, c.batch_share.unwrap_or(DEFAULT_BATCH_SHARE)) {
        Ok(share) => share,
        Err(e) => {
            refused.push((field.to_owned(), e.to_string()));
            BatchShare::default()
        }
    };
    Some(RunSlots {
        total,
        interactive_reserve: reserve,
        batch_share,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deadline::Cost;

    fn parse(text: &str) -> ServerQuotasConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn nothing_set_is_unlimited() {
        let (q, refused) = validate(&ServerQuotasConfig::default());
        assert!(refused.is_empty());
        assert!(q.is_unlimited());
        assert_eq!(q.run_slots, None);
    }

    #[test]
    fn tenants_inherit_what_they_leave_out() {
        let (q, refused) = validate(&parse(
            "submissions_per_sec = 2.0\nmax_running = 3\n[tenants.acme]\nmax_running = 9\nweight = 2.5\n",
        ));
        assert!(refused.is_empty(), "{refused:?}");
        let acme = q.of(&TenantId::new("acme").unwrap());
        assert_eq!(acme.max_running.map(NonZeroU32::get), Some(9));
        assert_eq!(acme.submissions.map(|s| s.burst), Some(2));
        assert_eq!(acme.weight, 2.5);
        let other = q.of(&TenantId::new("other").unwrap());
        assert_eq!(other.max_running.map(NonZeroU32::get), Some(3));
        assert_eq!(
            q.weights().milli(&TenantId::new("acme").unwrap()),
            2500,
            "weights reach the fair queue"
        );
    }

    #[test]
    fn tenant_budgets_inherit_limit_by_limit() {
        let (q, refused) = validate(&parse(
            "[budget]\ntokens_per_day = 100\ncost_usd_per_month = 5.0\n\
             [tenants.acme.budget]\ntokens_per_day = 50\ntokens_per_month = 1000\n\
             cost_usd_per_day = 1.0\n\
             [tenants.bad.budget]\ntokens_per_month = 0\n",
        ));
        let acme = q.of(&TenantId::new("acme").unwrap()).budget;
        assert_eq!(acme.tokens_per_day, Some(50));
        assert_eq!(acme.tokens_per_month, Some(1000));
        assert_eq!(acme.cost_per_day, Some(Cost::from_micros(1_000_000)));
        assert_eq!(
            acme.cost_per_month,
            Some(Cost::from_micros(5_000_000)),
            "inherited"
        );
        let other = q.of(&TenantId::new("other").unwrap()).budget;
        assert_eq!(other.tokens_per_day, Some(100));
        assert_eq!(other.tokens_per_month, None);
        let fields: Vec<&str> = refused.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            ["server.quotas.tenants.bad.budget.tokens_per_month"]
        );
    }

    #[test]
    fn every_bad_value_is_named_by_its_field() {
        let (_, refused) = validate(&parse(
            "submissions_per_sec = 0.0\nmax_queued = 0\nweight = 5000.0\ninteractive_reserve = 1\n\
             [tenants.acme]\nsubmission_burst = 0\nmax_running = 0\n",
        ));
        let fields: Vec<&str> = refused.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            [
                "server.quotas.submissions_per_sec",
                "server.quotas.max_queued",
                "server.quotas.weight",
                "server.quotas.tenants.acme.submission_burst",
                "server.quotas.tenants.acme.max_running",
                "server.quotas.interactive_reserve",
            ],
            "{refused:?}"
        );
    }

    #[test]
    fn a_reserve_must_leave_batch_a_slot() {
        let (q, refused) = validate(&parse("run_slots = 2\ninteractive_reserve = 2\n"));
        assert_eq!(refused[0].0, "server.quotas.interactive_reserve");
        assert_eq!(q.run_slots.map(|s| s.interactive_reserve), Some(0));
        let (q, refused) = validate(&parse("run_slots = 1\n"));
        assert!(refused.is_empty());
        assert_eq!(
            q.run_slots.map(|s| s.interactive_reserve),
            Some(0),
            "one slot: the default reserve cannot take it"
        );
        let (_, refused) = validate(&parse("run_slots = 4\nbatch_share = 0.9\n"));
        assert_eq!(refused[0].0, "server.quotas.batch_share");
    }

    #[test]
    fn an_override_no_request_can_use_is_refused() {
        let (q, _) = validate(&parse(
            "[tenants.acme]\nweight = 2.0\n[tenants.default]\nweight = 2.0\n",
        ));
        let acme = TenantId::new("acme").unwrap();
        let refused = unreachable_tenants(&q, &[]);
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].0, "server.quotas.tenants.acme");
        let refused = unreachable_tenants(&q, &[&acme]);
        assert_eq!(refused[0].0, "server.quotas.tenants.default");
        assert!(refused[0].1.contains("keys exist for: acme"));
    }

    #[test]
    fn a_burst_alone_needs_a_rate() {
        let (_, refused) = validate(&parse("submission_burst = 4\n"));
        assert_eq!(refused[0].0, "server.quotas.submission_burst");
        assert!(refused[0].1.contains("needs submissions_per_sec"));
    }
}
