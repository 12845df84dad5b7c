//! Dividing an amount by weight without ever handing out more than it.

use crate::config::Weight;

/// Divides `total` by `weights`, capping each share at `cap`; the shares
/// never sum above `total`.
///
/// Floating-point division can round a share up by one unit, so any excess
/// is taken back from the largest shares afterwards: the sum invariant holds
/// exactly, not approximately.
pub(crate) fn split(total: u64, weights: &[Weight], cap: Option<u64>) -> Vec<u64> {
    // Scale by the largest weight first: two weights of 1e308 would sum to
    // infinity and give every branch nothing.
    let largest = weights.iter().map(|w| w.get()).fold(0.0_f64, f64::max);
    let scaled = |w: &Weight| {
        if largest > 0.0 {
            w.get() / largest
        } else {
            0.0
        }
    };
    let sum: f64 = weights.iter().map(scaled).sum();
    let mut shares: Vec<u64> = weights
        .iter()
        .map(|w| {
            let exact = (total as f64) * (scaled(w) / sum);
            let share = if exact.is_finite() {
                exact.floor()
            } else {
                0.0
            };
            let share = (share as u64).min(total);
            cap.map_or(share, |c| share.min(c))
        })
        .collect();
    let mut handed: u128 = shares.iter().map(|&s| u128::from(s)).sum();
    while handed > u128::from(total) {
        let excess = handed - u128::from(total);
        let Some(largest) = shares.iter_mut().max() else {
            break;
        };
        let take = u64::try_from(excess).unwrap_or(u64::MAX).min(*largest);
        *largest -= take;
        handed -= u128::from(take);
    }
    shares
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(values: &[f64]) -> Vec<Weight> {
        values
            .iter()
            .map(|&v| Weight::new("w", v).unwrap())
            .collect()
    }

    #[test]
    fn split_divides_by_weight() {
        assert_eq!(split(100, &w(&[1.0, 3.0]), None), vec![25, 75]);
        assert_eq!(split(10, &w(&[1.0, 1.0, 1.0]), None), vec![3, 3, 3]);
    }

    #[test]
    fn split_applies_the_cap_to_each_share() {
        assert_eq!(split(100, &w(&[1.0, 1.0]), Some(20)), vec![20, 20]);
    }

    #[test]
    fn split_never_exceeds_the_total_at_the_edges_of_f64_precision() {
        let shares = split(u64::MAX, &w(&[1.0, 1e-300, 1.0]), None);
        let total: u128 = shares.iter().map(|&s| u128::from(s)).sum();
        assert!(total <= u128::from(u64::MAX));
    }

    #[test]
    fn split_with_huge_weights_still_divides() {
        assert_eq!(split(100, &w(&[1e308, 1e308]), None), vec![50, 50]);
    }

    #[test]
    fn split_of_nothing_is_nothing() {
        assert_eq!(split(0, &w(&[1.0, 2.0]), None), vec![0, 0]);
        assert!(split(5, &[], None).is_empty());
    }
}
