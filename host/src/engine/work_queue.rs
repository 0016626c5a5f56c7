//! A plugin's queue of primary objects to reconcile.
//!
//! Keyed by namespace/name, so many events about one object collapse into one
//! reconcile. Each key has the time it becomes ready (now, after a requeue
//! delay, or after a backoff); an object is never handed out twice at once.
//! Ordering is deterministic (ready time, then key), which is what makes
//! `simulate` reproducible.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

/// A primary object: namespace (empty for cluster-scoped) and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PrimaryKey {
    pub namespace: Option<String>,
    pub name: String,
}

impl std::fmt::Display for PrimaryKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// Exponential backoff per object: `base * 2^(failures-1)`, capped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffPolicy {
    pub base: Duration,
    pub cap: Duration,
}

impl Default for BackoffPolicy {
    /// 1 s doubling to 5 min: quick to retry a blip, slow enough not to hammer
    /// an API server (or a log) with a plugin that keeps failing.
    fn default() -> Self {
        Self {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(300),
        }
    }
}

impl BackoffPolicy {
    pub fn delay(&self, failures: u32) -> Duration {
        let exp = failures.saturating_sub(1).min(30);
        self.base.saturating_mul(1u32 << exp).min(self.cap)
    }
}

#[derive(Debug, Default)]
pub struct WorkQueue {
    /// When each waiting key becomes ready (epoch millis).
    ready_at: HashMap<PrimaryKey, i64>,
    /// The same, ordered for picking.
    order: BTreeSet<(i64, PrimaryKey)>,
    in_flight: BTreeSet<PrimaryKey>,
    /// Keys that changed while in flight: run again right after.
    dirty: BTreeMap<PrimaryKey, i64>,
    failures: HashMap<PrimaryKey, u32>,
}

impl WorkQueue {
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedules `key` at `at`, or earlier if it is already scheduled sooner.
    pub fn add(&mut self, key: PrimaryKey, at: i64) {
        if self.in_flight.contains(&key) {
            let when = self.dirty.entry(key).or_insert(at);
            *when = (*when).min(at);
            return;
        }
        match self.ready_at.get(&key) {
            Some(&existing) if existing <= at => {}
            Some(&existing) => {
                self.order.remove(&(existing, key.clone()));
                self.order.insert((at, key.clone()));
                self.ready_at.insert(key, at);
            }
            None => {
                self.order.insert((at, key.clone()));
                self.ready_at.insert(key, at);
            }
        }
    }

    /// The earliest key ready at `now`, marked in flight.
    pub fn pop_ready(&mut self, now: i64) -> Option<PrimaryKey> {
        let (at, key) = self.order.first().cloned()?;
        if at > now {
            return None;
        }
        self.order.remove(&(at, key.clone()));
        self.ready_at.remove(&key);
        self.in_flight.insert(key.clone());
        Some(key)
    }

    /// When the next waiting key becomes ready.
    pub fn next_ready_at(&self) -> Option<i64> {
        self.order.first().map(|(at, _)| *at)
    }

    /// Finishes a reconcile of `key`. `requeue_at` schedules it again (a
    /// requested requeue or a backoff); a change seen while it ran schedules
    /// it at once.
    pub fn done(&mut self, key: &PrimaryKey, requeue_at: Option<i64>) {
        self.in_flight.remove(key);
        if let Some(at) = self.dirty.remove(key) {
            self.add(key.clone(), at);
        }
        if let Some(at) = requeue_at {
            self.add(key.clone(), at);
        }
    }

    /// Records a failure; returns how many in a row.
    pub fn fail(&mut self, key: &PrimaryKey) -> u32 {
        let n = self.failures.entry(key.clone()).or_insert(0);
        *n += 1;
        *n
    }

    /// Resets the backoff of `key` after a success.
    pub fn succeed(&mut self, key: &PrimaryKey) {
        self.failures.remove(key);
    }

    /// Forgets `key` entirely (its object is gone).
    pub fn forget(&mut self, key: &PrimaryKey) {
        if let Some(at) = self.ready_at.remove(key) {
            self.order.remove(&(at, key.clone()));
        }
        self.failures.remove(key);
        self.dirty.remove(key);
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Keys waiting (ready or not), not counting those in flight.
    pub fn depth(&self) -> usize {
        self.order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> PrimaryKey {
        PrimaryKey {
            namespace: Some("d".into()),
            name: name.into(),
        }
    }

    #[test]
    fn events_about_one_object_collapse_into_one_reconcile() {
        let mut q = WorkQueue::new();
        q.add(key("a"), 0);
        q.add(key("a"), 0);
        q.add(key("b"), 0);
        assert_eq!(q.pop_ready(0), Some(key("a")));
        assert_eq!(q.pop_ready(0), Some(key("b")));
        assert_eq!(q.pop_ready(0), None);
    }

    #[test]
    fn an_object_in_flight_is_not_handed_out_again_but_runs_after() {
        let mut q = WorkQueue::new();
        q.add(key("a"), 0);
        assert_eq!(q.pop_ready(0), Some(key("a")));
        q.add(key("a"), 0);
        assert_eq!(q.pop_ready(0), None, "in flight");
        q.done(&key("a"), None);
        assert_eq!(q.pop_ready(0), Some(key("a")), "the change seen meanwhile");
    }

    #[test]
    fn delayed_keys_wait_for_their_time_and_earlier_wins() {
        let mut q = WorkQueue::new();
        q.add(key("a"), 100);
        assert_eq!(q.pop_ready(50), None);
        assert_eq!(q.next_ready_at(), Some(100));
        q.add(key("a"), 10);
        assert_eq!(q.pop_ready(50), Some(key("a")));
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = BackoffPolicy::default();
        let delays: Vec<u64> = (1..=10).map(|n| p.delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]);
    }
}
