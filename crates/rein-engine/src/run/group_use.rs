//! [`GroupUse`]: what an operator sees of one concurrency governor of this
//! process — the capacity layer of a dashboard (limits against use).
//!
//! # Why a view
//!
//! A governor lives behind its group's lock and changes with every call;
//! a view is taken under the lock once per governor, so a page or an API
//! answer reads consistent figures per group without holding any lock.

use super::engine::Engine;

/// Whose gate a governor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum GateKind {
    /// A `[resource_groups.*]`: its tools' calls.
    ResourceGroup,
    /// A provider: every model call to it (`max_concurrency`,
    /// `tokens_per_minute`, its pause after a 429).
    Provider,
    /// One model of a provider: its calls, and its own pause after a 429.
    Model,
}

impl GateKind {
    /// The kind as an API names it.
    pub fn as_str(self) -> &'static str {
        match self {
            GateKind::ResourceGroup => "resource_group",
            GateKind::Provider => "provider",
            GateKind::Model => "model",
        }
    }
}

/// One governor (a resource group's, a provider's or a model's) as this
/// process knows it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupUse {
    /// Whose gate it is.
    pub kind: GateKind,
    /// The group or provider name, or the model as `provider/model`.
    pub name: String,
    /// The concurrency limit now: where adaptive concurrency stands between
    /// 1 and `ceiling` (`None`: no `max_concurrency`, not limited).
    pub limit: Option<u32>,
    /// This process's ceiling: the configured `max_concurrency`, or this
    /// node's part of it when the limit is shared with other nodes.
    pub ceiling: Option<u32>,
    /// Calls holding a slot now.
    pub in_flight: u32,
    /// Calls waiting for a slot (or for the group's rate) now.
    pub queued: usize,
}

impl Engine {
    /// Every governor this process has admitted a call to, resource groups
    /// first, then providers, then models, each by name. A group never
    /// called is not listed.
    pub fn group_uses(&self) -> Vec<GroupUse> {
        let prefix = super::model_chain::MODEL_GATE_PREFIX;
        let mut uses = self.shared.slots.uses();
        uses.extend(self.shared.provider_slots.uses().into_iter().map(|mut u| {
            // The provider's slots hold the models' cooldown gates too.
            match u.name.strip_prefix(prefix) {
                Some(model) => {
                    u.name = model.to_owned();
                    u.kind = GateKind::Model;
                }
                None => u.kind = GateKind::Provider,
            }
            u
        }));
        uses.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
        uses
    }
}
