//! The host's `workqueue_queue_duration_seconds` histogram, as scraped:
//! how long objects waited in the queue past their due time. Its buckets
//! have an edge at exactly 1 s, so "p99 wait within a second" is read
//! without interpolation.

/// Cumulative bucket counts by upper edge (seconds), and the total, summed
/// over every plugin (and replica, once added up).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueWaits {
    /// (le, cumulative count), ascending by le; `+Inf` is the total.
    buckets: Vec<(f64, u64)>,
    pub count: u64,
}

impl QueueWaits {
    /// Takes one line of /metrics (name with labels, value), if it is of
    /// the histogram.
    pub fn add_line(&mut self, name: &str, value: u64) {
        if let Some(labels) = name.strip_prefix("workqueue_queue_duration_seconds_bucket{") {
            let Some(le) = labels
                .split(',')
                .find_map(|l| l.strip_prefix("le=\""))
                .and_then(|l| l.split('"').next())
                .and_then(|l| l.parse::<f64>().ok())
            else {
                return;
            };
            if le.is_infinite() {
                return;
            }
            self.add_bucket(le, value);
        } else if name.starts_with("workqueue_queue_duration_seconds_count{") {
            self.count += value;
        }
    }

    fn add_bucket(&mut self, le: f64, value: u64) {
        match self.buckets.iter_mut().find(|(l, _)| *l == le) {
            Some((_, n)) => *n += value,
            None => {
                self.buckets.push((le, value));
                self.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            }
        }
    }

    /// Both added up (replicas of one side).
    pub fn add(&mut self, other: &QueueWaits) {
        for (le, n) in &other.buckets {
            self.add_bucket(*le, *n);
        }
        self.count += other.count;
    }

    /// What was observed since `before` (an earlier scrape of the same
    /// processes).
    pub fn since(&self, before: &QueueWaits) -> QueueWaits {
        let earlier = |le: f64| {
            before
                .buckets
                .iter()
                .find(|(l, _)| *l == le)
                .map_or(0, |(_, n)| *n)
        };
        QueueWaits {
            buckets: self
                .buckets
                .iter()
                .map(|(le, n)| (*le, n.saturating_sub(earlier(*le))))
                .collect(),
            count: self.count.saturating_sub(before.count),
        }
    }

    /// The share of waits at most `le` seconds (an edge of the buckets);
    /// None without waits or without that edge.
    pub fn share_within(&self, le: f64) -> Option<f64> {
        let (_, n) = self.buckets.iter().find(|(l, _)| *l == le)?;
        (self.count > 0).then(|| *n as f64 / self.count as f64)
    }

    /// The least bucket edge at or under which a share `q` of the waits
    /// fell: the quantile, rounded up to an edge (None past the last edge
    /// or without waits).
    pub fn quantile_edge(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let needed = (q * self.count as f64).ceil() as u64;
        self.buckets
            .iter()
            .find(|(_, n)| *n >= needed)
            .map(|(le, _)| *le)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scraped(lines: &[(&str, u64)]) -> QueueWaits {
        let mut w = QueueWaits::default();
        for (name, value) in lines {
            w.add_line(name, *value);
        }
        w
    }

    const B: &str = "workqueue_queue_duration_seconds_bucket{le=\"";
    const L: &str = "\",name=\"podset\",controller=\"podset\"}";

    #[test]
    fn waits_since_an_earlier_scrape_give_the_share_within_a_second_and_the_p99_edge() {
        let at = |le: &str| format!("{B}{le}{L}");
        let before = scraped(&[
            (&at("0.5"), 10),
            (&at("1.0"), 10),
            (&at("2.0"), 10),
            (&at("+Inf"), 10),
            (
                "workqueue_queue_duration_seconds_count{name=\"podset\",controller=\"podset\"}",
                10,
            ),
        ]);
        let after = scraped(&[
            (&at("0.5"), 900),
            (&at("1.0"), 1000),
            (&at("2.0"), 1010),
            (&at("+Inf"), 1010),
            (
                "workqueue_queue_duration_seconds_count{name=\"podset\",controller=\"podset\"}",
                1010,
            ),
        ]);
        let step = after.since(&before);
        assert_eq!(step.count, 1000);
        assert_eq!(step.share_within(1.0), Some(0.99));
        assert_eq!(step.quantile_edge(0.99), Some(1.0));
        assert_eq!(step.quantile_edge(0.999), Some(2.0));
        assert_eq!(step.quantile_edge(0.5), Some(0.5));
        assert_eq!(QueueWaits::default().share_within(1.0), None);
    }

    #[test]
    fn replicas_add_up_by_edge() {
        let at = |le: &str| format!("{B}{le}{L}");
        let mut a = scraped(&[
            (&at("1.0"), 3),
            ("workqueue_queue_duration_seconds_count{x}", 4),
        ]);
        let b = scraped(&[
            (&at("1.0"), 5),
            ("workqueue_queue_duration_seconds_count{x}", 5),
        ]);
        a.add(&b);
        assert_eq!(a.count, 9);
        assert_eq!(a.share_within(1.0), Some(8.0 / 9.0));
        // Other metrics are not taken.
        a.add_line(
            "controller_runtime_reconcile_time_seconds_bucket{le=\"1.0\"}",
            100,
        );
        assert_eq!(a.share_within(1.0), Some(8.0 / 9.0));
    }
}
