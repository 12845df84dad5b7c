//! Queued work: the workers that drive queued runs, which run starts next
//! (fair shares, the tenant floor), run slots and per-tenant quotas, and
//! the admission of a submission past them.

pub mod admit;
pub mod fair;
pub mod floor;
pub mod quota;
pub mod slots;
pub mod worker;
