//! Percentiles of latency samples.

use std::time::Duration;

/// The `q`-quantile (`0.0..=1.0`) of `samples` by nearest rank: the smallest
/// sample that at least a `q` share of all samples are at or below. Nearest
/// rank reports a time that was actually measured, never an interpolation.
/// `None` without samples.
pub fn percentile(samples: &[Duration], q: f64) -> Option<Duration> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(values: impl IntoIterator<Item = u64>) -> Vec<Duration> {
        values.into_iter().map(Duration::from_millis).collect()
    }

    #[test]
    fn p50_and_p95_of_a_hundred_samples_in_any_order() {
        let samples = ms((1..=100).rev());
        assert_eq!(percentile(&samples, 0.5), Some(Duration::from_millis(50)));
        assert_eq!(percentile(&samples, 0.95), Some(Duration::from_millis(95)));
        assert_eq!(percentile(&samples, 1.0), Some(Duration::from_millis(100)));
        assert_eq!(percentile(&samples, 0.0), Some(Duration::from_millis(1)));
    }

    #[test]
    fn small_sets_report_a_measured_sample() {
        // 50 single creates: p95 is the 48th smallest, not the largest.
        let samples = ms(1..=50);
        assert_eq!(percentile(&samples, 0.95), Some(Duration::from_millis(48)));
        assert_eq!(percentile(&ms([7]), 0.5), Some(Duration::from_millis(7)));
        assert_eq!(percentile(&ms([3, 9]), 0.5), Some(Duration::from_millis(3)));
    }

    #[test]
    fn no_samples_no_percentile() {
        assert_eq!(percentile(&[], 0.5), None);
    }
}
