//! Bounded label values for tenants and agents.
//!
//! # Why bounds
//!
//! Every distinct label value is a time series the scraper stores for
//! good. Tools, providers and models come from the config, so their
//! number is bounded by it; tenants and agents are the two labels an
//! operator may have many of. Their values are limited to a configured
//! set (`[server.metrics_labels]`), or, without one, to the first
//! [`DEFAULT_MAX_VALUES`] seen; every other value is counted under
//! [`OTHER`], so nothing goes uncounted and nothing grows without end.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Mutex, PoisonError};

/// The label value every tenant or agent beyond the bounds is counted as.
pub const OTHER: &str = "other";

/// The label value of a tenant or agent an event has none of (a gateway
/// call has no agent).
pub const NONE: &str = "none";

/// How many distinct tenants (and, apart, agents) get a label value of
/// their own when no set is configured.
pub const DEFAULT_MAX_VALUES: usize = 50;

/// Which tenant and agent values get a label of their own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelBounds {
    /// The tenants named; `None`: the first `max_values` seen.
    pub tenants: Option<BTreeSet<String>>,
    /// The agents named; `None`: the first `max_values` seen.
    pub agents: Option<BTreeSet<String>>,
    /// The most distinct values of each label, named or not (a named set
    /// is never larger: the config refuses one that is).
    pub max_values: usize,
}

impl Default for LabelBounds {
    fn default() -> Self {
        LabelBounds {
            tenants: None,
            agents: None,
            max_values: DEFAULT_MAX_VALUES,
        }
    }
}

impl From<&rein_core::registry::MetricsLabels> for LabelBounds {
    /// The bounds `[server.metrics_labels]` sets.
    fn from(c: &rein_core::registry::MetricsLabels) -> Self {
        LabelBounds {
            tenants: c
                .tenants
                .as_ref()
                .map(|t| t.iter().map(|t| t.as_str().to_owned()).collect()),
            agents: c.agents.as_ref().map(|a| a.iter().cloned().collect()),
            max_values: usize::try_from(c.max_values).unwrap_or(DEFAULT_MAX_VALUES),
        }
    }
}

/// One label's bound, with the values it admitted so far.
#[derive(Debug, Default)]
struct Bound {
    named: Option<BTreeSet<String>>,
    max: usize,
    seen: HashSet<String>,
}

impl Bound {
    fn new(named: Option<BTreeSet<String>>, max: usize) -> Self {
        Bound {
            named,
            max,
            seen: HashSet::new(),
        }
    }

    /// The value `value` is counted under when it has its own: named, or
    /// admitted before; `None` when it has not been counted apart (never
    /// seen, or past `max` as `other`). Admits nothing.
    fn own(&self, value: &str) -> Option<String> {
        let admitted = match &self.named {
            Some(named) => named.contains(value),
            None => self.seen.contains(value),
        };
        admitted.then(|| value.to_owned())
    }

    fn value(&mut self, value: &str) -> String {
        if value == NONE {
            return NONE.to_owned();
        }
        let admitted = match &self.named {
            Some(named) => named.contains(value),
            None if self.seen.contains(value) => true,
            None if self.seen.len() < self.max => {
                self.seen.insert(value.to_owned());
                true
            }
            None => false,
        };
        if admitted {
            value.to_owned()
        } else {
            OTHER.to_owned()
        }
    }
}

/// The tenant and agent bounds of one process's metrics.
///
/// A refused call's tool name is the model's text (it may name a tool
/// that does not exist), so it is bounded the same way, by
/// `max_values`.
#[derive(Debug)]
pub(super) struct Bounds {
    inner: Mutex<(Bound, Bound)>,
    refused_tools: Mutex<Bound>,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds::new(LabelBounds::default())
    }
}

impl Bounds {
    pub(super) fn new(bounds: LabelBounds) -> Self {
        Bounds {
            inner: Mutex::new((
                Bound::new(bounds.tenants, bounds.max_values),
                Bound::new(bounds.agents, bounds.max_values),
            )),
            refused_tools: Mutex::new(Bound::new(None, bounds.max_values)),
        }
    }

    /// The label value a refused call's tool is counted under.
    pub(super) fn refused_tool(&self, tool: &str) -> String {
        self.refused_tools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .value(tool)
    }

    /// The tenant label value `tenant` is counted under when it has its
    /// own (never `other`), without admitting it: what a reader of the
    /// counters asks, which must not take a value a tenant's calls need.
    pub(super) fn own_tenant(&self, tenant: &str) -> Option<String> {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .0
            .own(tenant)
    }

    /// The label values `tenant` and `agent` are counted under.
    pub(super) fn scope(&self, tenant: &str, agent: &str) -> Scope {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        Scope {
            tenant: inner.0.value(tenant),
            agent: inner.1.value(agent),
        }
    }
}

/// Whose events an emitter counts: the tenant and agent label values of a
/// run (or a gateway call), already bounded ([`crate::metrics::Metrics::scope`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// The tenant label's value.
    pub tenant: String,
    /// The agent label's value.
    pub agent: String,
}

impl Default for Scope {
    fn default() -> Self {
        Scope {
            tenant: NONE.to_owned(),
            agent: NONE.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_values_keep_their_label_and_every_other_is_other() {
        let bounds = Bounds::new(LabelBounds {
            tenants: Some(["acme".to_owned()].into()),
            agents: None,
            max_values: 2,
        });
        assert_eq!(bounds.scope("acme", "a").tenant, "acme");
        assert_eq!(bounds.scope("globex", "b").tenant, OTHER);
        // Unnamed agents: the first two seen, then `other`.
        assert_eq!(bounds.scope("acme", "c").agent, OTHER);
        assert_eq!(bounds.scope("acme", "a").agent, "a");
        assert_eq!(bounds.scope("acme", NONE).agent, NONE);
        // A model's invented tool names cannot grow the series either.
        assert_eq!(bounds.refused_tool("t1"), "t1");
        assert_eq!(bounds.refused_tool("t2"), "t2");
        assert_eq!(bounds.refused_tool("t3"), OTHER);
    }

    #[test]
    fn a_reader_learns_a_tenants_own_label_without_taking_one() {
        let bounds = Bounds::new(LabelBounds {
            tenants: None,
            agents: None,
            max_values: 1,
        });
        // Asked before any call: no label of its own, and none taken.
        assert_eq!(bounds.own_tenant("acme"), None);
        assert_eq!(bounds.scope("globex", NONE).tenant, "globex");
        assert_eq!(bounds.own_tenant("globex"), Some("globex".to_owned()));
        // acme's calls come past the bound: counted as `other`, which is
        // several tenants', so it has no label of its own.
        assert_eq!(bounds.scope("acme", NONE).tenant, OTHER);
        assert_eq!(bounds.own_tenant("acme"), None);
        let named = Bounds::new(LabelBounds {
            tenants: Some(["acme".to_owned()].into()),
            agents: None,
            max_values: 1,
        });
        assert_eq!(named.own_tenant("acme"), Some("acme".to_owned()));
        assert_eq!(named.own_tenant("globex"), None);
    }
}
