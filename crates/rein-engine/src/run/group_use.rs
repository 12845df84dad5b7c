//! [`GroupUse`]: what an operator sees of one concurrency governor of this
//! process — the capacity layer of a dashboard (limits against use).
//!
//! # Why a view
//!
//! A governor lives behind its group's lock and changes with every call;
//! a view is taken under the lock once per governor, so a page or an API
//! answer reads consistent figures per group without holding any lock.

use super::engine::Engine;

/// One governor (a resource group's or a provider's) as this process
/// knows it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupUse {
    /// Whether it is a provider's gate; else a `[resource_groups.*]`.
    pub provider: bool,
    /// The group or provider name.
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
    /// first, then providers, each by name. A group never called is not
    /// listed.
    pub fn group_uses(&self) -> Vec<GroupUse> {
        let mut uses = self.shared.slots.uses(false);
        uses.extend(self.shared.provider_slots.uses(true));
        uses
    }
}
