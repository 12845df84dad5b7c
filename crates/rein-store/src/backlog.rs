//! What a queue worker needs to pick fairly between tenants: per tenant,
//! its running root runs and its oldest queued ones
//! ([`RunStore::queue_heads`](crate::RunStore::queue_heads)), and what a
//! tenant's caps are checked against: its queued and running root runs
//! counted ([`RunStore::tenant_backlogs`](crate::RunStore::tenant_backlogs)).

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

/// One tenant's head of the run queue, as a queue worker picks from it
/// ([`RunStore::queue_heads`](crate::RunStore::queue_heads)): its running
/// root runs and its oldest queued ones, not how many it has queued, so
/// reading it costs the tenants and the runs in flight, not the backlog.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct QueueHead {
    /// The tenant.
    pub tenant: TenantId,
    /// Its root runs `running` (on any process sharing the store).
    pub running: u64,
    /// Its oldest queued root runs (`created_at_ms`, then run id), at most
    /// the number asked for; never empty when at least one was asked for.
    pub oldest: Vec<RunRecord>,
}

impl QueueHead {
    /// A tenant's head of the queue.
    pub fn new(tenant: TenantId, running: u64, oldest: Vec<RunRecord>) -> Self {
        QueueHead {
            tenant,
            running,
            oldest,
        }
    }
}
