//! A plugin's queue of primary objects to reconcile.
//!
//! Keyed by namespace/name, so many events about one object collapse into one
//! reconcile. A key may be scheduled at several times: now (a change), later
//! (a requested requeue, a backoff). A reconcile consumes every time that is
//! due, and leaves later ones in place, so a requeue the plugin asked for
//! still fires even if a change made the object run earlier. An object is
//! never handed out twice at once; a change seen while it runs makes it run
//! again right after. Ordering is deterministic (time, then key), which is
//! what makes `simulate` reproducible. Each time a key is scheduled says
//! why ([`Cause`]); the reconcile that consumes the time is told.
//!
//! Keys a shard ring handed over ([`Cause::RingMove`]) wait in a lane of
//! their own, taken only when nothing else is due: a replica gaining a
//! third of a large ring reconciles each arrival once, and a change to an
//! object it already served must not queue behind all of them. A change
//! of an arrival while it waits moves it to the common lane.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use super::cause::{Cause, Causes};

/// A primary object: namespace (empty for cluster-scoped) and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PrimaryKey {
    pub namespace: Option<String>,
    pub name: String,
}

impl PrimaryKey {
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        Self {
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        }
    }
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
    /// Every (time, key) a key is scheduled at, epoch millis, but those of
    /// `arrivals`.
    order: BTreeSet<(i64, PrimaryKey)>,
    /// The (time, key) a key is scheduled at only because the ring handed
    /// it here: taken when nothing in `order` is due.
    arrivals: BTreeSet<(i64, PrimaryKey)>,
    /// The same entries by key, so taking or dropping one key's times costs
    /// as many steps as it has times, not a walk over the whole queue (a
    /// host starting on 10,000 objects queues them all at once).
    times: HashMap<PrimaryKey, BTreeSet<i64>>,
    in_flight: BTreeSet<PrimaryKey>,
    failures: HashMap<PrimaryKey, u32>,
    /// Requeues asked for below the floor, in a row (see `requeue`).
    too_soon: HashMap<PrimaryKey, u32>,
    /// Why each key is scheduled, by the time it is scheduled at.
    causes: HashMap<PrimaryKey, Vec<(i64, Cause)>>,
    /// The causes of the times a key in flight consumed, until its
    /// reconcile takes them ([`Self::take_causes`]).
    taken: HashMap<PrimaryKey, Causes>,
    /// How long each key in flight waited past its due time, until its
    /// reconcile takes it ([`Self::take_wait`]).
    waited: HashMap<PrimaryKey, i64>,
}

impl WorkQueue {
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedules `key` at `at` (in addition to any time it already has),
    /// because of `cause`.
    pub fn add(&mut self, key: PrimaryKey, at: i64, cause: Cause) {
        let arrival = cause == Cause::RingMove;
        let causes = self.causes.entry(key.clone()).or_default();
        // A key changed again and again before it runs keeps each distinct
        // cause once (and at most a few of them: see `Causes`).
        if !causes.iter().any(|(t, c)| *t == at && *c == cause) && causes.len() < 16 {
            causes.push((at, cause));
        }
        if self.times.entry(key.clone()).or_default().insert(at) {
            if arrival {
                self.arrivals.insert((at, key));
            } else {
                self.order.insert((at, key));
            }
        } else if !arrival && self.arrivals.remove(&(at, key.clone())) {
            self.order.insert((at, key));
        }
    }

    /// Removes the times of `key` up to `until` (all with `None`).
    /// Schedules `key` at `at` unless it is already due by then: every
    /// change within a window is seen by the one reconcile at its end.
    pub fn add_coalesced(&mut self, key: PrimaryKey, at: i64, cause: Cause) {
        let due_by_then = self
            .times
            .get(&key)
            .and_then(|times| times.first())
            .copied()
            .filter(|first| *first <= at);
        match due_by_then {
            // Told to the reconcile at that earlier time.
            Some(first) => self.add(key, first, cause),
            None => self.add(key, at, cause),
        }
    }

    fn take_times(&mut self, key: &PrimaryKey, until: Option<i64>) {
        let Some(times) = self.times.get_mut(key) else {
            return;
        };
        let later = match until {
            Some(until) if until < i64::MAX => times.split_off(&(until + 1)),
            _ => BTreeSet::new(),
        };
        let due = std::mem::replace(times, later);
        if times.is_empty() {
            self.times.remove(key);
        }
        for at in due {
            let entry = (at, key.clone());
            if !self.order.remove(&entry) {
                self.arrivals.remove(&entry);
            }
        }
        if let Some(causes) = self.causes.get_mut(key) {
            let (consumed, kept): (Vec<_>, Vec<_>) = std::mem::take(causes)
                .into_iter()
                .partition(|(at, _)| until.is_none_or(|until| *at <= until));
            *causes = kept;
            if causes.is_empty() {
                self.causes.remove(key);
            }
            if until.is_some() {
                let taken = self.taken.entry(key.clone()).or_default();
                for (_, cause) in consumed {
                    taken.add(cause);
                }
            }
        }
    }

    /// Why `key`, handed out by [`Self::pop_ready`], is reconciled now.
    pub fn take_causes(&mut self, key: &PrimaryKey) -> Causes {
        self.taken.remove(key).unwrap_or_default()
    }

    /// The earliest due time in `lane` of a key not in flight.
    fn first_due<'a>(
        &self,
        lane: &'a BTreeSet<(i64, PrimaryKey)>,
    ) -> Option<&'a (i64, PrimaryKey)> {
        lane.iter().find(|(_, k)| !self.in_flight.contains(k))
    }

    /// The earliest key ready at `now`, marked in flight: of the common
    /// lane, else of the arrivals. Every time of that key up to `now` is
    /// consumed; later ones stay.
    pub fn pop_ready(&mut self, now: i64) -> Option<PrimaryKey> {
        let ready = |entry: Option<&(i64, PrimaryKey)>| entry.filter(|(at, _)| *at <= now).cloned();
        let (due, key) =
            ready(self.first_due(&self.order)).or_else(|| ready(self.first_due(&self.arrivals)))?;
        // From the earliest of the times this pop consumes: the one waited
        // on longest, whichever lane it was in.
        let first = self
            .times
            .get(&key)
            .and_then(|times| times.first())
            .copied()
            .unwrap_or(due);
        self.take_times(&key, Some(now));
        self.waited
            .insert(key.clone(), now.saturating_sub(first).max(0));
        self.in_flight.insert(key.clone());
        Some(key)
    }

    /// How long `key`, handed out by [`Self::pop_ready`], waited past the
    /// time it was due (controller-runtime's queue duration): behind other
    /// keys, or behind a reconcile of itself still running.
    pub fn take_wait(&mut self, key: &PrimaryKey) -> Option<i64> {
        self.waited.remove(key)
    }

    /// When the next key not in flight becomes ready.
    pub fn next_ready_at(&self) -> Option<i64> {
        let first = |lane| self.first_due(lane).map(|(at, _)| *at);
        match (first(&self.order), first(&self.arrivals)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Finishes a reconcile of `key`; `requeue_at` schedules it again (a
    /// requested requeue or a backoff), because of its cause.
    pub fn done(&mut self, key: &PrimaryKey, requeue_at: Option<(i64, Cause)>) {
        self.in_flight.remove(key);
        self.taken.remove(key);
        self.waited.remove(key);
        if let Some((at, cause)) = requeue_at {
            self.add(key.clone(), at, cause);
        }
    }

    /// Records a failure; returns how many in a row.
    pub fn fail(&mut self, key: &PrimaryKey) -> u32 {
        let n = self.failures.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }

    /// Resets the backoff of `key` after a success.
    pub fn succeed(&mut self, key: &PrimaryKey) {
        self.failures.remove(key);
    }

    /// Records a requeue asked for too soon; returns how many in a row.
    pub fn requeue_too_soon(&mut self, key: &PrimaryKey) -> u32 {
        let n = self.too_soon.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }

    /// Resets the requeue backoff of `key`: a reconcile asked for no
    /// requeue, or for one that is not too soon.
    pub fn requeue_in_time(&mut self, key: &PrimaryKey) {
        self.too_soon.remove(key);
    }

    /// Forgets `key` entirely (its object is gone).
    pub fn forget(&mut self, key: &PrimaryKey) {
        self.take_times(key, None);
        self.taken.remove(key);
        self.waited.remove(key);
        self.failures.remove(key);
        self.too_soon.remove(key);
    }

    /// How many objects the queue remembers anything about: scheduled,
    /// in flight, or with failures or too-soon requeues counted.
    pub fn remembered(&self) -> usize {
        let mut keys: BTreeSet<&PrimaryKey> = self.times.keys().collect();
        keys.extend(&self.in_flight);
        keys.extend(self.failures.keys());
        keys.extend(self.too_soon.keys());
        keys.len()
    }

    /// Whether `key` is being reconciled now.
    pub fn is_in_flight(&self, key: &PrimaryKey) -> bool {
        self.in_flight.contains(key)
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    pub fn in_flight_keys(&self) -> Vec<PrimaryKey> {
        self.in_flight.iter().cloned().collect()
    }

    /// Distinct keys waiting, not counting those in flight.
    pub fn depth(&self) -> usize {
        let scheduled_in_flight = self
            .in_flight
            .iter()
            .filter(|k| self.times.contains_key(*k))
            .count();
        self.times.len() - scheduled_in_flight
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
        q.add(key("a"), 0, Cause::PluginLoaded);
        q.add(key("a"), 0, Cause::PluginLoaded);
        q.add(key("b"), 0, Cause::PluginLoaded);
        assert_eq!(q.depth(), 2);
        assert_eq!(q.pop_ready(0), Some(key("a")));
        assert_eq!(q.pop_ready(0), Some(key("b")));
        assert_eq!(q.pop_ready(0), None);
    }

    #[test]
    fn a_change_is_taken_before_the_arrivals_the_ring_handed_over_earlier() {
        let mut q = WorkQueue::new();
        for name in ["a", "b", "c"] {
            q.add(key(name), 0, Cause::RingMove);
        }
        q.add(key("z"), 5, Cause::Requeue);
        assert_eq!(q.next_ready_at(), Some(0));
        assert_eq!(q.pop_ready(1), Some(key("a")), "nothing else due yet");
        assert_eq!(q.pop_ready(5), Some(key("z")), "the change before b and c");
        // An arrival that changes while it waits goes with the changes.
        q.add(key("c"), 0, Cause::PluginLoaded);
        assert_eq!(q.pop_ready(5), Some(key("c")));
        assert_eq!(q.pop_ready(5), Some(key("b")));
        assert_eq!(q.pop_ready(5), None);
        assert_eq!(q.depth(), 0);
        // A later change of an arrival takes its earlier arrival time too.
        q.add(key("d"), 0, Cause::RingMove);
        q.add(key("d"), 7, Cause::Requeue);
        assert_eq!(q.pop_ready(7), Some(key("d")));
        q.done(&key("d"), None);
        assert_eq!(q.next_ready_at(), None);
    }

    #[test]
    fn a_key_waits_from_its_earliest_due_time_until_it_is_handed_out() {
        let mut q = WorkQueue::new();
        q.add(key("a"), 100, Cause::PluginLoaded);
        q.add(key("a"), 250, Cause::Requeue);
        q.add(key("b"), 900, Cause::PluginLoaded);
        assert_eq!(q.pop_ready(400), Some(key("a")));
        assert_eq!(q.take_wait(&key("a")), Some(300), "from 100, not 250");
        assert_eq!(q.take_wait(&key("a")), None, "taken once");
        // Due again while in flight: the wait runs on until it is handed
        // out after the reconcile in flight is done.
        q.add(key("a"), 500, Cause::PluginLoaded);
        assert_eq!(q.pop_ready(700), None);
        q.done(&key("a"), None);
        assert_eq!(q.pop_ready(800), Some(key("a")));
        assert_eq!(q.take_wait(&key("a")), Some(300));
        assert_eq!(q.pop_ready(900), Some(key("b")));
        assert_eq!(q.take_wait(&key("b")), Some(0), "handed out when due");
        // A key done or forgotten before its reconcile took the wait
        // leaves nothing behind.
        q.done(&key("b"), None);
        assert_eq!(q.take_wait(&key("b")), None);
    }

    #[test]
    fn an_object_in_flight_is_not_handed_out_again_but_runs_after() {
        let mut q = WorkQueue::new();
        q.add(key("a"), 0, Cause::PluginLoaded);
        assert_eq!(q.pop_ready(0), Some(key("a")));
        q.add(key("a"), 0, Cause::PluginLoaded);
        assert_eq!(q.pop_ready(0), None, "in flight");
        q.done(&key("a"), None);
        assert_eq!(q.pop_ready(0), Some(key("a")), "the change seen meanwhile");
    }

    #[test]
    fn a_requested_requeue_survives_an_earlier_reconcile() {
        let mut q = WorkQueue::new();
        q.add(key("a"), 0, Cause::PluginLoaded);
        assert_eq!(q.pop_ready(0), Some(key("a")));
        q.done(&key("a"), Some((60_000, Cause::Requeue)));
        // A change makes it run at once; the requeue a minute later stays.
        q.add(key("a"), 10, Cause::PluginLoaded);
        assert_eq!(q.pop_ready(10), Some(key("a")));
        q.done(&key("a"), None);
        assert_eq!(q.pop_ready(59_999), None);
        assert_eq!(q.next_ready_at(), Some(60_000));
        assert_eq!(q.pop_ready(60_000), Some(key("a")));
    }

    #[test]
    fn requeues_too_soon_count_in_a_row_until_one_is_in_time() {
        let mut q = WorkQueue::new();
        assert_eq!(q.requeue_too_soon(&key("a")), 1);
        assert_eq!(q.requeue_too_soon(&key("a")), 2);
        assert_eq!(q.requeue_too_soon(&key("b")), 1);
        q.requeue_in_time(&key("a"));
        assert_eq!(q.requeue_too_soon(&key("a")), 1);
        q.forget(&key("b"));
        assert_eq!(q.requeue_too_soon(&key("b")), 1);
    }

    #[test]
    fn changes_within_a_window_are_one_reconcile_at_its_end() {
        let mut q = WorkQueue::new();
        q.add_coalesced(key("a"), 100, Cause::Requeue);
        q.add_coalesced(key("a"), 130, Cause::Requeue);
        assert_eq!(q.pop_ready(99), None, "not before the window ends");
        assert_eq!(q.pop_ready(130), Some(key("a")));
        q.done(&key("a"), None);
        assert_eq!(q.pop_ready(10_000), None, "one reconcile for both");
        // A change of the primary itself is due now: the window adds nothing.
        q.add(key("b"), 5, Cause::PluginLoaded);
        q.add_coalesced(key("b"), 105, Cause::Requeue);
        assert_eq!(q.pop_ready(5), Some(key("b")));
        q.done(&key("b"), None);
        assert_eq!(q.next_ready_at(), None);
    }

    #[test]
    fn forgetting_drops_every_time_of_a_key() {
        let mut q = WorkQueue::new();
        q.add(key("a"), 5, Cause::PluginLoaded);
        q.add(key("a"), 500, Cause::PluginLoaded);
        q.forget(&key("a"));
        assert_eq!(q.next_ready_at(), None);
    }

    #[test]
    fn depth_counts_waiting_keys_once_and_not_those_in_flight() {
        let mut q = WorkQueue::new();
        q.add(key("a"), 0, Cause::PluginLoaded);
        q.add(key("a"), 100, Cause::PluginLoaded);
        q.add(key("b"), 0, Cause::PluginLoaded);
        q.add(key("c"), 50, Cause::PluginLoaded);
        assert_eq!(q.depth(), 3);
        assert_eq!(q.pop_ready(0), Some(key("a")));
        // a's later time waits, but a is in flight.
        assert_eq!(q.depth(), 2);
        q.add(key("a"), 0, Cause::PluginLoaded);
        assert_eq!(q.depth(), 2);
        q.done(&key("a"), None);
        assert_eq!(q.depth(), 3);
        q.forget(&key("c"));
        assert_eq!(q.depth(), 2);
        assert_eq!(q.pop_ready(0), Some(key("a")));
        assert_eq!(q.pop_ready(0), Some(key("b")));
        assert_eq!(q.pop_ready(99), None);
        q.done(&key("a"), None);
        assert_eq!(q.pop_ready(100), Some(key("a")));
        assert_eq!(q.depth(), 0);
    }

    /// Each reconcile is told the causes of the times it consumed; a later
    /// time keeps its own for the reconcile that takes it.
    #[test]
    fn a_reconcile_is_told_why_its_key_was_queued() {
        let changed = |name: &str| Cause::Event {
            kind: "Pod".into(),
            object: format!("d/{name}"),
            change: crate::cluster::WatchEventType::Modified,
            fields: None,
        };
        let mut q = WorkQueue::new();
        q.add(key("a"), 0, Cause::PluginLoaded);
        q.add_coalesced(key("a"), 100, changed("p1"));
        q.add(key("a"), 500, Cause::Requeue);
        assert_eq!(q.pop_ready(0), Some(key("a")));
        // The change rode on the reconcile already due at 0.
        assert_eq!(
            q.take_causes(&key("a")).to_string(),
            "plugin loaded; Pod d/p1 changed"
        );
        q.done(&key("a"), None);
        assert_eq!(q.pop_ready(500), Some(key("a")));
        assert_eq!(q.take_causes(&key("a")).to_string(), "requeue");
        q.done(&key("a"), Some((1_000, Cause::Retry)));
        q.forget(&key("a"));
        assert!(q.take_causes(&key("a")).is_empty());
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = BackoffPolicy::default();
        let delays: Vec<u64> = (1..=10).map(|n| p.delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]);
    }
}
