//! What a queue worker needs to pick fairly between tenants: per tenant,
//! its queued and running root runs and its oldest queued ones
//! ([`RunStore::tenant_backlogs`](crate::RunStore::tenant_backlogs)).

use rein_core::TenantId;

use crate::run::RunRecord;

/// One tenant's share of the run queue, as the store holds it now.
///
/// Only root runs count: a child run is part of its root's work, driven by
/// the process that drives the root.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TenantBacklog {
    /// The tenant.
    pub tenant: TenantId,
    /// Its root runs `queued`.
    pub queued: u64,
    /// Its root runs `running` (on any process sharing the store).
    pub running: u64,
    /// Its oldest queued root runs (`created_at_ms`, then run id), at most
    /// the number asked for.
    pub oldest: Vec<RunRecord>,
}

impl TenantBacklog {
    /// A tenant's backlog.
    pub fn new(tenant: TenantId, queued: u64, running: u64, oldest: Vec<RunRecord>) -> Self {
        TenantBacklog {
            tenant,
            queued,
            running,
            oldest,
        }
    }
}
