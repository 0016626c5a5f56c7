//! What a requeue a plugin asks for becomes.
//!
//! `requeue-after-ms` is the plugin's to choose, so both ends are bounded:
//! - Below [`RequeuePolicy::floor`] it is a rate-limited requeue, as
//!   controller-runtime treats `Requeue: true`: per object, the floor,
//!   doubling with every such requeue in a row up to the backoff's cap, and
//!   back to the floor once a reconcile of the object asks for no requeue or
//!   for one at or above the floor. A plugin asking for 0 every time was
//!   reconciled thousands of times a second and never let `dev
//!   --until-settled` finish; now it costs a handful of calls a minute.
//! - Above [`RequeuePolicy::max`] it is the maximum: a time past what the
//!   clock can hold (`u64::MAX` ms) overflowed, and nothing is lost by
//!   asking again a day later.

use std::time::Duration;

use super::work_queue::{BackoffPolicy, PrimaryKey, WorkQueue};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequeuePolicy {
    /// The shortest requeue taken as asked. One second: a plugin polling
    /// something faster than that should be watching it instead, and every
    /// reconcile costs a fresh instance.
    pub floor: Duration,
    /// Rate-limited requeues: `floor` doubling up to 5 minutes, the same
    /// curve as failures.
    pub backoff: BackoffPolicy,
    /// The longest requeue. A day: longer than any schedule needs between
    /// looks, short enough to be far from overflowing.
    pub max: Duration,
}

impl Default for RequeuePolicy {
    fn default() -> Self {
        let floor = Duration::from_secs(1);
        Self {
            floor,
            backoff: BackoffPolicy {
                base: floor,
                cap: Duration::from_secs(300),
            },
            max: Duration::from_secs(24 * 3600),
        }
    }
}

/// A requeue as scheduled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requeue {
    /// As asked (or clamped to the maximum).
    After(Duration),
    /// Below the floor: the `in_a_row`th such requeue of the object.
    RateLimited { delay: Duration, in_a_row: u32 },
}

impl Requeue {
    pub fn delay(&self) -> Duration {
        match self {
            Requeue::After(d) | Requeue::RateLimited { delay: d, .. } => *d,
        }
    }
}

impl RequeuePolicy {
    /// Whether a requeue after `asked` is rate-limited.
    pub fn is_too_soon(&self, asked: Duration) -> bool {
        asked < self.floor
    }

    /// The requeue for `asked`, the `in_a_row`th rate-limited one in a row
    /// when it is too soon.
    pub fn schedule(&self, asked: Duration, in_a_row: u32) -> Requeue {
        if self.is_too_soon(asked) {
            Requeue::RateLimited {
                delay: self.backoff.delay(in_a_row).max(self.floor),
                in_a_row,
            }
        } else {
            Requeue::After(asked.min(self.max))
        }
    }
}

impl RequeuePolicy {
    /// The requeue of `key` after a reconcile that asked for `asked`, with
    /// the queue's count of requeues too soon in a row kept up to date.
    pub fn next(
        &self,
        asked: Option<Duration>,
        queue: &mut WorkQueue,
        key: &PrimaryKey,
    ) -> Option<Requeue> {
        match asked {
            Some(asked) if self.is_too_soon(asked) => {
                Some(self.schedule(asked, queue.requeue_too_soon(key)))
            }
            asked => {
                queue.requeue_in_time(key);
                asked.map(|asked| self.schedule(asked, 0))
            }
        }
    }
}

/// `now` plus `delay` in epoch millis, saturating rather than wrapping.
pub fn at(now_millis: i64, delay: Duration) -> i64 {
    now_millis.saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requeues_below_the_floor_back_off_per_object() {
        let p = RequeuePolicy::default();
        let delays: Vec<u64> = (1..=10)
            .map(|n| p.schedule(Duration::ZERO, n).delay().as_secs())
            .collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]);
        assert_eq!(
            p.schedule(Duration::from_millis(999), 1),
            Requeue::RateLimited {
                delay: Duration::from_secs(1),
                in_a_row: 1
            }
        );
    }

    #[test]
    fn requeues_from_the_floor_to_the_max_are_as_asked_and_longer_ones_clamped() {
        let p = RequeuePolicy::default();
        for asked in [Duration::from_secs(1), Duration::from_secs(3600)] {
            assert_eq!(p.schedule(asked, 0), Requeue::After(asked));
        }
        let forever = Duration::from_millis(u64::MAX);
        assert_eq!(p.schedule(forever, 0), Requeue::After(p.max));
        assert_eq!(p.max, Duration::from_secs(86_400));
    }

    #[test]
    fn the_backoff_of_an_object_resets_when_it_asks_in_time_or_not_at_all() {
        let p = RequeuePolicy::default();
        let mut queue = WorkQueue::new();
        let key = PrimaryKey {
            namespace: None,
            name: "a".into(),
        };
        let mut soon = || p.next(Some(Duration::ZERO), &mut queue, &key);
        let delays: Vec<Option<Duration>> = (0..3).map(|_| soon().map(|r| r.delay())).collect();
        let secs = |n| Some(Duration::from_secs(n));
        assert_eq!(delays, [secs(1), secs(2), secs(4)]);
        assert_eq!(p.next(None, &mut queue, &key), None);
        assert_eq!(
            p.next(Some(Duration::ZERO), &mut queue, &key)
                .map(|r| r.delay()),
            secs(1)
        );
        assert_eq!(
            p.next(Some(Duration::from_secs(5)), &mut queue, &key),
            Some(Requeue::After(Duration::from_secs(5)))
        );
        assert_eq!(
            p.next(Some(Duration::ZERO), &mut queue, &key)
                .map(|r| r.delay()),
            secs(1)
        );
    }

    #[test]
    fn times_saturate_instead_of_overflowing() {
        assert_eq!(at(1_000, Duration::from_millis(u64::MAX)), i64::MAX);
        assert_eq!(at(i64::MAX - 1, Duration::from_secs(1)), i64::MAX);
        assert_eq!(at(1_000, Duration::from_secs(1)), 2_000);
    }
}
