use super::RetryPolicy;

/// One unit of retry allowance, in millionths, so that deposits of a 20%
/// ratio stay exact integers.
const UNIT: u64 = 1_000_000;

/// The share of requests to one target that may be retries, token-bucket
/// style.
///
/// # Why
///
/// Per-call attempt ceilings do not stop a storm: when a target degrades,
/// every caller retries at once and multiplies its load. A retry budget caps
/// retries at a fraction of requests (seed 000, "Backoff and the Retry
/// Budget"): every request [`deposit`](RetryBudget::deposit)s `ratio` of a
/// retry, every retry [`withdraw`](RetryBudget::withdraw)s a whole one, and
/// when the balance is below one the caller fails fast and degrades.
///
/// Invariant: retries ≤ `budget_initial` + `ratio` × requests, and the
/// balance never exceeds `budget_max` (a long healthy spell cannot bank an
/// unbounded storm). Counting is by request, not time, so the budget is
/// deterministic and needs no clock. One budget per target (tool, provider
/// or resource group); the engine owns them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryBudget {
    balance: u64,
    deposit: u64,
    max: u64,
}

impl RetryBudget {
    /// A fresh budget holding `budget_initial` retries.
    pub fn new(policy: &RetryPolicy) -> Self {
        RetryBudget {
            balance: u64::from(policy.budget_initial) * UNIT,
            // Rounded down, so retries never exceed the configured share.
            deposit: (policy.budget_ratio.get() * UNIT as f64).floor() as u64,
            max: u64::from(policy.budget_max) * UNIT,
        }
    }

    /// Credits one original request (not a retry).
    pub fn deposit(&mut self) {
        self.balance = self.balance.saturating_add(self.deposit).min(self.max);
    }

    /// Takes one retry if the balance allows it.
    pub fn withdraw(&mut self) -> bool {
        if self.balance >= UNIT {
            self.balance -= UNIT;
            true
        } else {
            false
        }
    }

    /// Whole retries currently available.
    pub fn available(&self) -> u64 {
        self.balance / UNIT
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::RetryConfig;

    fn budget(ratio: f64, initial: u32, max: u32) -> RetryBudget {
        let policy = RetryPolicy::try_from(RetryConfig {
            budget_ratio: ratio,
            budget_initial: initial,
            budget_max: max,
            ..RetryConfig::default()
        })
        .unwrap();
        RetryBudget::new(&policy)
    }

    #[test]
    fn withdraw_when_balance_is_spent_refuses() {
        let mut b = budget(0.2, 2, 20);
        assert!(b.withdraw());
        assert!(b.withdraw());
        assert!(!b.withdraw());
    }

    #[test]
    fn five_requests_at_twenty_percent_earn_one_retry() {
        let mut b = budget(0.2, 0, 20);
        for _ in 0..4 {
            b.deposit();
        }
        assert!(!b.withdraw());
        b.deposit();
        assert!(b.withdraw());
        assert!(!b.withdraw());
    }

    #[test]
    fn balance_never_exceeds_the_maximum() {
        let mut b = budget(1.0, 0, 3);
        for _ in 0..100 {
            b.deposit();
        }
        assert_eq!(b.available(), 3);
    }

    #[test]
    fn zero_ratio_allows_only_the_initial_retries() {
        let mut b = budget(0.0, 1, 20);
        for _ in 0..1000 {
            b.deposit();
        }
        assert!(b.withdraw());
        assert!(!b.withdraw());
    }
}
