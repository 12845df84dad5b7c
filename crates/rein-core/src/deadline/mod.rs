//! One deadline and one triple budget per run, inherited by every call and
//! child, never reset.
//!
//! # Why
//!
//! What rein manages is a deadline — an absolute moment — not a timeout
//! length. A timeout passed down layer by layer multiplies with nesting depth
//! and retries (twenty layers of three seconds hang for an hour); a deadline
//! decays correctly however deep the call goes. Three rules are hard-coded
//! here (seed 000, "Three Rules That Must Be Hard-Coded"):
//!
//! 1. **A budget cannot be reset.** No method extends a [`Deadline`] or lowers
//!    what a [`Budget`] has used; a retry reuses the same deadline.
//! 2. **If the budget is insufficient, do not start.** [`Deadline::check`] and
//!    [`Budget::check`] refuse work that cannot finish in what is left.
//! 3. **The remainder crosses process boundaries** in the
//!    [`DEADLINE_HEADER`] (`Rein-Deadline-Ms`).
//!
//! Children get their share in one of three shapes:
//!
//! | shape | child gets | method |
//! | --- | --- | --- |
//! | serial chain | everything left (rolled forward; a fast stage leaves more for the next) | [`Budget::serial`] |
//! | parallel fan-out | the remainder divided by weight, each optionally capped; the total never exceeds the remainder | [`Budget::parallel`] |
//! | nested agent | ratio × remainder, capped; consumption written back | [`Budget::nested`] |
//!
//! Every share is *reserved* in the parent until the child's [`Grant`] is
//! settled with what the child actually used, so parent and child can never
//! both believe the same tokens or money are still there.

mod absolute;
mod budget;
mod header;
mod split;
pub(crate) mod wire;

pub use absolute::{Deadline, DeadlineExceeded};
pub use budget::{
    Budget, BudgetConfig, BudgetLimits, ChildCaps, Cost, DEFAULT_MAX_STEPS, DEFAULT_MAX_TOKENS,
    DEFAULT_WALL_CLOCK, Dimension, Exhausted, Grant, Need, Remaining, Usage,
};
pub use header::{DEADLINE_HEADER, HeaderError};
