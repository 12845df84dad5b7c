//! A resource group's limits shared by the nodes of a cluster: each live
//! node takes its part of the group's rate, burst and ceiling, so that
//! together they hold the group's limits rather than each holding all of
//! them.
//!
//! # Why divide, and not lease tokens one by one
//!
//! Several `rein serve` (or `rein run`) processes on one store reach the
//! same backend; a limit each process holds alone lets `n` processes send
//! `n` times the limit (seed 000, "Concurrency and Rate Limiting Across
//! Tools": the limit must hold where calls leave). Taking every token from
//! the store would make each call wait for a store round trip; instead
//! each node renews a *share lease* of the group in the store (see
//! `rein_store::ShareLease`), learns how many nodes hold one, and runs its
//! own bucket at `1/n` of the group. The store is touched once per renewal,
//! never per call.
//!
//! # Accuracy
//!
//! With `n` live nodes whose views agree (each has renewed since the last
//! join or leave), and `burst ≥ n` (`max_concurrency ≥ n`):
//!
//! - over any window `t` the cluster is granted at most
//!   `burst + rate × t` calls, exactly the bound of one bucket of the
//!   group (the parts of the bursts and of the rate sum to the whole:
//!   the remainders go to the first nodes by [`Members::rank`]);
//! - at most `max_concurrency` calls are in flight across the cluster.
//!
//! While views disagree — within one renewal interval `R` after a node
//! joins — the nodes that have not yet renewed still run at `1/(n-1)`: the
//! cluster rate is at most `rate × (1 + 1/n)` for at most `R`, and the
//! joiner's first burst (`burst / n`) comes on top. After a node leaves
//! without releasing its lease (a crash), the others keep their smaller
//! parts until its lease expires: the cluster runs *under* the limit for at
//! most the lease's time to live, never over. A node that shrinks its part
//! keeps its bucket's level in proportion (never refilled by the change)
//! and its calls in flight finish; a `burst` (or ceiling) below `n` gives
//! every node at least one, so the cluster may then hold up to `n`.

use std::num::{NonZeroU32, NonZeroU64};

use serde::Serialize;

use super::bucket::Rate;

/// This node's place among the nodes holding a live share lease of a
/// group: how many there are, and its rank among them (by node id), which
/// decides who gets the remainders of a division.
///
/// # Invariants
///
/// `rank < count`; [`Members::ALONE`] is the one node of a cluster of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Members {
    count: NonZeroU32,
    rank: u32,
}

impl Members {
    /// A node alone: it holds the whole of the group's limits.
    pub const ALONE: Members = Members {
        count: NonZeroU32::MIN,
        rank: 0,
    };

    /// `count` nodes of which this one has rank `rank`; `None` when
    /// `rank >= count`.
    pub fn new(count: NonZeroU32, rank: u32) -> Option<Members> {
        (rank < count.get()).then_some(Members { count, rank })
    }

    /// This node's place among the `holders` of live share leases (in any
    /// order). A holder list that does not name `node` (a lease just
    /// expired, or a store that failed to list it) counts `node` as the
    /// last one more: its part is never the whole by mistake.
    pub fn among<S: AsRef<str>>(holders: &[S], node: &str) -> Members {
        let others = holders
            .iter()
            .filter(|h| h.as_ref() != node)
            .map(AsRef::as_ref);
        let (mut count, mut rank) = (1u32, 0u32);
        for other in others {
            count = count.saturating_add(1);
            if other < node {
                rank = rank.saturating_add(1);
            }
        }
        Members {
            count: NonZeroU32::new(count).unwrap_or(NonZeroU32::MIN),
            rank: rank.min(count - 1),
        }
    }

    /// The number of live nodes (this one included).
    pub fn count(self) -> NonZeroU32 {
        self.count
    }

    /// This node's rank among them, from zero.
    pub fn rank(self) -> u32 {
        self.rank
    }

    /// This node's part of `total` whole units (a burst, a ceiling):
    /// `total / count`, plus one of the remainder for the first
    /// `total % count` ranks, so the parts sum to `total`; at least one
    /// (a bucket or a limit of zero would refuse everything forever).
    pub fn part(self, total: u64) -> u64 {
        let n = u64::from(self.count.get());
        let extra = u64::from(u64::from(self.rank) < total % n);
        (total / n + extra).max(1)
    }

    /// This node's part of `rate`: `rate / count`, exactly (the fraction's
    /// period grows `count` times).
    pub fn rate_part(self, rate: Rate) -> Rate {
        let tokens = NonZeroU64::new(rate.tokens()).unwrap_or(NonZeroU64::MIN);
        let per = rate.per().saturating_mul(self.count.get());
        Rate::new(tokens, per).unwrap_or(rate)
    }
}

impl Default for Members {
    fn default() -> Members {
        Members::ALONE
    }
}

/// A node's part of its group's limits, as
/// [`Governor::share_among`](super::Governor::share_among) applied it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Share {
    /// The nodes it was divided among.
    pub members: Members,
    /// The request bucket's rate and burst, when the group has one.
    pub requests: Option<(Rate, u64)>,
    /// The ceiling of calls in flight.
    pub max_concurrency: u32,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;

    fn members(count: u32, rank: u32) -> Members {
        Members::new(NonZeroU32::new(count).unwrap(), rank).unwrap()
    }

    #[test]
    fn among_ranks_by_node_id_and_counts_itself_once() {
        assert_eq!(Members::among(&["b", "a", "c"], "b"), members(3, 1));
        assert_eq!(Members::among(&["b"], "b"), Members::ALONE);
        assert_eq!(Members::among::<&str>(&[], "b"), Members::ALONE);
        // Not listed: one more, last.
        assert_eq!(Members::among(&["a", "c"], "b"), members(3, 1));
        assert_eq!(Members::among(&["b", "b"], "b"), Members::ALONE);
    }

    #[test]
    fn new_refuses_a_rank_outside_the_count() {
        assert!(Members::new(NonZeroU32::new(2).unwrap(), 2).is_none());
    }

    #[test]
    fn parts_of_a_burst_sum_to_it_with_the_remainder_to_the_first_ranks() {
        let parts: Vec<u64> = (0..3).map(|r| members(3, r).part(20)).collect();
        assert_eq!(parts, [7, 7, 6]);
        assert_eq!(members(4, 3).part(2), 1, "never zero");
    }

    #[test]
    fn rate_part_divides_exactly() {
        let rate = Rate::from_per_second("rate", 20.0).unwrap();
        let third = members(3, 0).rate_part(rate);
        assert_eq!(
            (third.tokens(), third.per()),
            (1, Duration::from_millis(150))
        );
        assert_eq!(Members::ALONE.rate_part(rate), rate);
    }

    proptest! {
        /// The parts of any total sum to it whenever it is at least the
        /// node count, and each is at least one.
        #[test]
        fn parts_sum_to_the_whole(total in 0u64..100_000, count in 1u32..64) {
            let sum: u64 = (0..count).map(|r| members(count, r).part(total)).sum();
            if total >= u64::from(count) {
                prop_assert_eq!(sum, total);
            } else {
                prop_assert_eq!(sum, u64::from(count));
            }
        }

        /// The rates of all parts add up to the whole rate.
        #[test]
        fn rate_parts_sum_to_the_whole(micro in 1u64..1_000_000_000, count in 1u32..64) {
            let rate = Rate::from_per_second("rate", micro as f64 / 1e3).unwrap();
            let part = members(count, 0).rate_part(rate);
            let sum = part.per_second() * f64::from(count);
            prop_assert!((sum - rate.per_second()).abs() <= rate.per_second() * 1e-9);
        }
    }
}
