//! Recording Events without flooding the API server, as client-go's
//! recorder does.
//!
//! Every Event the host records goes through here: those a plugin's
//! response carries and the host's own Warning on every failed attempt.
//! Three rules turn occurrences into requests:
//!
//! 1. **Aggregation.** The same Event (object, type, reason, message and
//!    reporting controller) happening again within [`EventPolicy::window`]
//!    of its last occurrence is not a new Event: the first one's series
//!    count grows (events.k8s.io's `series: {count, lastObservedTime}`, a
//!    PATCH). A failing object retried for a day is one Event `x 300`.
//! 2. **Series writes are coalesced.** The first repeat is written at once
//!    (the Event shows it repeats); later ones at most once per
//!    [`EventPolicy::series_refresh`], the count catching up with every
//!    occurrence since. [`EventRecorder::flush`] writes counts that are
//!    behind: the engine's loop calls it now and then, and `simulate` at
//!    its end.
//! 3. **A rate limit per object** (and reporting controller): a token
//!    bucket of [`EventPolicy::burst`] writes, refilled one every
//!    [`EventPolicy::refill`], client-go's spam filter. Without a token, a
//!    new Event is dropped (logged once per run of drops) and a repeat is
//!    counted in memory for a later write.
//!
//! Guarantees: no more than `burst` writes per object in any short span,
//! then one per `refill`; a repeating Event costs a write per
//! `series_refresh` at most, so repeats never starve new Events of their
//! object. Caveats: state is per host process (a restart starts new
//! series); memory is bounded by [`EventPolicy::max_series`] series (the
//! least recently seen are forgotten first, with any count not yet
//! written) and as many buckets.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use reconciler_contract::EventType;

use crate::cluster::{BackendError, ClusterBackend, EventRecord, EventRef, EventSeries, ObjectKey};

/// How Events are aggregated and rate-limited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventPolicy {
    /// How long after its last occurrence an Event's series continues.
    /// client-go aggregates within 10 minutes.
    pub window: Duration,
    /// How often a series' count is written at most, after its first
    /// repeat. 30 s keeps `kubectl get events` near the truth for two
    /// writes a minute per repeating Event.
    pub series_refresh: Duration,
    /// Writes (new Events and series updates) an object may have at once.
    pub burst: u32,
    /// One more write per this long, up to `burst`.
    pub refill: Duration,
    /// Series remembered at most.
    pub max_series: usize,
}

impl Default for EventPolicy {
    /// client-go's values where it has one: a burst of 25 per object, then
    /// one every 5 minutes; series within 10 minutes; 4096 remembered.
    fn default() -> Self {
        Self {
            window: Duration::from_secs(600),
            series_refresh: Duration::from_secs(30),
            burst: 25,
            refill: Duration::from_secs(300),
            max_series: 4096,
        }
    }
}

/// What became of one occurrence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// A new Event was written.
    Created,
    /// An earlier Event's series was written with this count.
    Counted(u32),
    /// Counted in memory, for a later write of the series.
    Deferred(u32),
    /// Rate-limited: not written.
    Dropped,
}

/// The object, who reports, and what: occurrences that are the same Event.
/// Ordered, so a flush takes its objects' last writes in the same order
/// every run (`simulate` prints the same output for the same input).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct SeriesKey {
    regarding: ObjectKey,
    regarding_uid: Option<String>,
    event_type: EventType,
    reason: String,
    message: String,
    reporting_controller: String,
}

impl SeriesKey {
    fn of(event: &EventRecord) -> Self {
        Self {
            regarding: event.regarding.clone(),
            regarding_uid: event.regarding_uid.clone(),
            event_type: event.event_type,
            reason: event.reason.clone(),
            message: event.message.clone(),
            reporting_controller: event.reporting_controller.clone(),
        }
    }

    fn bucket(&self) -> BucketKey {
        (self.regarding.clone(), self.reporting_controller.clone())
    }
}

type BucketKey = (ObjectKey, String);

#[derive(Debug)]
struct Series {
    /// `None` while the first write is under way.
    event: Option<EventRef>,
    count: u32,
    last_observed_millis: i64,
    /// The count the cluster has, and when it was written.
    written_count: u32,
    written_at_millis: i64,
}

impl Series {
    fn behind(&self) -> bool {
        self.event.is_some() && self.count > self.written_count
    }
}

#[derive(Debug)]
struct Bucket {
    tokens: u32,
    refilled_at_millis: i64,
    last_used_millis: i64,
    /// Drops since the last write: the first of a run is logged.
    dropping: u64,
}

#[derive(Debug, Default)]
struct RecorderState {
    series: HashMap<SeriesKey, Series>,
    buckets: HashMap<BucketKey, Bucket>,
}

/// The request one occurrence needs.
enum Decision {
    Create,
    Update(EventRef, EventSeries),
    Defer(u32),
    Drop { first_of_run: bool },
}

/// Aggregates and rate-limits Events; one per engine.
#[derive(Debug, Default)]
pub struct EventRecorder {
    policy: EventPolicy,
    state: Mutex<RecorderState>,
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl EventRecorder {
    pub fn new(policy: EventPolicy) -> Self {
        Self {
            policy,
            state: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, RecorderState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one occurrence of `event` at `now_millis` through `backend`.
    pub async fn record<B: ClusterBackend>(
        &self,
        backend: &B,
        event: EventRecord,
        now_millis: i64,
    ) -> Result<Recorded, BackendError> {
        let key = SeriesKey::of(&event);
        match self.decide(&key, now_millis) {
            Decision::Create => self.create(backend, key, event, now_millis).await,
            Decision::Update(event_ref, series) => {
                match self
                    .update(backend, &key, &event_ref, series, now_millis)
                    .await
                {
                    Ok(()) => Ok(Recorded::Counted(series.count)),
                    // Expired on the server: this occurrence starts anew.
                    Err(BackendError::NotFound { .. }) => {
                        self.lock()
                            .series
                            .insert(key.clone(), Series::first(now_millis));
                        self.create(backend, key, event, now_millis).await
                    }
                    // The count stays in memory for a later write.
                    Err(e) => Err(e),
                }
            }
            Decision::Defer(count) => Ok(Recorded::Deferred(count)),
            Decision::Drop { first_of_run } => {
                if first_of_run {
                    tracing::warn!(
                        "Events about {} from {} are rate-limited (a burst of {}, then one every {} s): dropping {} {}: {}; later drops are logged at debug level",
                        event.regarding,
                        event.reporting_controller,
                        self.policy.burst,
                        self.policy.refill.as_secs(),
                        event.event_type,
                        event.reason,
                        event.message
                    );
                } else {
                    tracing::debug!(
                        "rate-limited: dropping Event {} {} about {}",
                        event.event_type,
                        event.reason,
                        event.regarding
                    );
                }
                Ok(Recorded::Dropped)
            }
        }
    }

    /// Forgets the series and rate limits of objects the cluster deleted:
    /// no Event about them can come (a namesake has another uid), and a
    /// host that sees objects come and go must not keep them all. A repeat
    /// counted in memory but not yet written goes with them: the Event
    /// stays as last written, about an object that is gone.
    pub fn forget_objects(&self, gone: &HashSet<ObjectKey>) {
        if gone.is_empty() {
            return;
        }
        let mut state = self.lock();
        let RecorderState { series, buckets } = &mut *state;
        series.retain(|key, _| !gone.contains(&key.regarding));
        buckets.retain(|(object, _), _| !gone.contains(object));
    }

    /// How many series and rate limits are remembered.
    pub fn remembered(&self) -> (usize, usize) {
        let state = self.lock();
        (state.series.len(), state.buckets.len())
    }

    /// Writes the count of every series the cluster shows behind, when its
    /// refresh interval has passed (every one with `all`, as at the end of
    /// a simulation) and its object has a write to spare; forgets series
    /// past their window. Returns how many were written.
    pub async fn flush<B: ClusterBackend>(&self, backend: &B, now_millis: i64, all: bool) -> usize {
        let refresh = millis(self.policy.series_refresh);
        let window = millis(self.policy.window);
        let due: Vec<(SeriesKey, EventRef, EventSeries)> = {
            let mut state = self.lock();
            let RecorderState { series, buckets } = &mut *state;
            let mut behind: Vec<(&SeriesKey, &Series)> = series
                .iter()
                .filter(|(_, s)| {
                    s.behind() && (all || now_millis.saturating_sub(s.written_at_millis) >= refresh)
                })
                .collect();
            behind.sort_by(|a, b| a.0.cmp(b.0));
            let mut due = Vec::new();
            for (key, s) in behind {
                if let Some(event) = &s.event
                    && self.take_token(buckets, key.bucket(), now_millis)
                {
                    let counted = EventSeries {
                        count: s.count,
                        last_observed_millis: s.last_observed_millis,
                    };
                    due.push((key.clone(), event.clone(), counted));
                }
            }
            // Past its window a series ends; one still behind waits for a
            // write (the rate limit), unless it must make room.
            series.retain(|key, s| {
                now_millis.saturating_sub(s.last_observed_millis) <= window
                    || (s.behind() && !due.iter().any(|(k, _, _)| k == key))
            });
            due
        };
        let mut written = 0;
        for (key, event, counted) in due {
            match self
                .update(backend, &key, &event, counted, now_millis)
                .await
            {
                Ok(()) => written += 1,
                Err(e) => tracing::debug!("cannot update the count of Event {}: {e}", event.name),
            }
        }
        written
    }

    async fn create<B: ClusterBackend>(
        &self,
        backend: &B,
        key: SeriesKey,
        event: EventRecord,
        now: i64,
    ) -> Result<Recorded, BackendError> {
        match backend.record_event(event).await {
            Ok(event_ref) => {
                if let Some(s) = self.lock().series.get_mut(&key) {
                    s.event = Some(event_ref);
                    s.written_count = s.written_count.max(1);
                    s.written_at_millis = now;
                }
                Ok(Recorded::Created)
            }
            Err(e) => {
                // Nothing to count on: the next occurrence tries again.
                self.lock().series.remove(&key);
                Err(e)
            }
        }
    }

    async fn update<B: ClusterBackend>(
        &self,
        backend: &B,
        key: &SeriesKey,
        event: &EventRef,
        counted: EventSeries,
        now: i64,
    ) -> Result<(), BackendError> {
        backend.update_event_series(event, counted).await?;
        if let Some(s) = self.lock().series.get_mut(key) {
            s.written_count = s.written_count.max(counted.count);
            s.written_at_millis = now;
        }
        Ok(())
    }

    /// What an occurrence of `key` at `now` needs, with the bookkeeping.
    fn decide(&self, key: &SeriesKey, now: i64) -> Decision {
        let window = millis(self.policy.window);
        let refresh = millis(self.policy.series_refresh);
        let mut state = self.lock();
        let RecorderState { series, buckets } = &mut *state;
        if let Some(s) = series.get_mut(key)
            && now.saturating_sub(s.last_observed_millis) <= window
        {
            s.count = s.count.saturating_add(1);
            s.last_observed_millis = now;
            // The first repeat at once, then once per refresh.
            let ripe = s.written_count == 1 || now.saturating_sub(s.written_at_millis) >= refresh;
            let (count, event) = (s.count, s.event.clone());
            return match event {
                Some(event) if ripe && self.take_token(buckets, key.bucket(), now) => {
                    Decision::Update(
                        event,
                        EventSeries {
                            count,
                            last_observed_millis: now,
                        },
                    )
                }
                _ => Decision::Defer(count),
            };
        }
        if !self.take_token(buckets, key.bucket(), now) {
            let bucket = buckets.get_mut(&key.bucket());
            let first_of_run = bucket.is_some_and(|b| {
                b.dropping += 1;
                b.dropping == 1
            });
            return Decision::Drop { first_of_run };
        }
        if series.len() >= self.policy.max_series {
            forget_least_recent(series, self.policy.max_series, |s| s.last_observed_millis);
        }
        if buckets.len() > self.policy.max_series {
            forget_full(buckets, &self.policy, now);
            forget_least_recent(buckets, self.policy.max_series, |b| b.last_used_millis);
        }
        series.insert(key.clone(), Series::first(now));
        Decision::Create
    }

    /// Takes a write from the object's bucket, if one is left.
    fn take_token(
        &self,
        buckets: &mut HashMap<BucketKey, Bucket>,
        key: BucketKey,
        now: i64,
    ) -> bool {
        let burst = self.policy.burst;
        let bucket = buckets.entry(key).or_insert(Bucket {
            tokens: burst,
            refilled_at_millis: now,
            last_used_millis: now,
            dropping: 0,
        });
        bucket.last_used_millis = now;
        refill(bucket, &self.policy, now);
        if bucket.tokens == 0 {
            return false;
        }
        bucket.tokens -= 1;
        bucket.dropping = 0;
        true
    }
}

impl Series {
    fn first(now: i64) -> Self {
        Series {
            event: None,
            count: 1,
            last_observed_millis: now,
            written_count: 0,
            written_at_millis: now,
        }
    }
}

/// Adds the tokens earned since the bucket was last refilled.
fn refill(bucket: &mut Bucket, policy: &EventPolicy, now: i64) {
    let every = millis(policy.refill).max(1);
    let earned = now.saturating_sub(bucket.refilled_at_millis) / every;
    if earned > 0 {
        let earned = u32::try_from(earned).unwrap_or(u32::MAX);
        bucket.tokens = bucket.tokens.saturating_add(earned).min(policy.burst);
        bucket.refilled_at_millis = bucket
            .refilled_at_millis
            .saturating_add(i64::from(earned).saturating_mul(every));
    }
    if bucket.tokens == policy.burst {
        // A full bucket earns nothing by waiting.
        bucket.refilled_at_millis = now;
    }
}

/// Forgets the least recently used entries, down to three quarters of
/// `max`, so this runs once per many new entries. (Entries used at the
/// cut-off time all go: a few more may.)
fn forget_least_recent<K, V>(map: &mut HashMap<K, V>, max: usize, used_at: impl Fn(&V) -> i64) {
    let keep = max - max / 4;
    if map.len() <= keep {
        return;
    }
    let mut used: Vec<i64> = map.values().map(&used_at).collect();
    used.sort_unstable();
    if let Some(&cutoff) = used.get(map.len() - keep) {
        map.retain(|_, v| used_at(v) > cutoff);
    }
}

/// Forgets buckets that are full again: a new one is the same.
fn forget_full(buckets: &mut HashMap<BucketKey, Bucket>, policy: &EventPolicy, now: i64) {
    buckets.retain(|_, b| {
        refill(b, policy, now);
        b.tokens < policy.burst
    });
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use reconciler_contract::KindRef;

    use super::*;
    use crate::cluster::VirtualClock;
    use crate::cluster::embedded::EmbeddedCluster;

    const MINUTE: i64 = 60_000;

    fn event(object: &str, message: &str) -> EventRecord {
        EventRecord {
            regarding: ObjectKey::new(KindRef::new("x.io", "v1", "Thing"), Some("d"), object),
            regarding_uid: Some(format!("uid-{object}")),
            event_type: EventType::Warning,
            reason: "Failed".into(),
            message: message.into(),
            reporting_controller: "reconciler-host/p".into(),
        }
    }

    fn cluster() -> EmbeddedCluster {
        EmbeddedCluster::new(Arc::new(VirtualClock::at(0)))
    }

    #[tokio::test]
    async fn the_same_event_within_the_window_is_one_event_whose_count_grows() {
        let cluster = cluster();
        let recorder = EventRecorder::default();
        let mut outcomes = Vec::new();
        for i in 0..4 {
            let at = i * MINUTE;
            outcomes.push(
                recorder
                    .record(&cluster, event("a", "boom"), at)
                    .await
                    .unwrap(),
            );
        }
        assert_eq!(
            outcomes,
            [
                Recorded::Created,
                Recorded::Counted(2),
                Recorded::Counted(3),
                Recorded::Counted(4)
            ]
        );
        let events = cluster.events();
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(
            events[0].series,
            Some(EventSeries {
                count: 4,
                last_observed_millis: 3 * MINUTE
            })
        );
    }

    #[tokio::test]
    async fn another_message_object_or_a_gap_past_the_window_is_a_new_event() {
        let cluster = cluster();
        let recorder = EventRecorder::default();
        recorder
            .record(&cluster, event("a", "boom"), 0)
            .await
            .unwrap();
        recorder
            .record(&cluster, event("a", "bang"), 0)
            .await
            .unwrap();
        recorder
            .record(&cluster, event("b", "boom"), 0)
            .await
            .unwrap();
        let later = 11 * MINUTE;
        assert_eq!(
            recorder
                .record(&cluster, event("a", "boom"), later)
                .await
                .unwrap(),
            Recorded::Created
        );
        let events = cluster.events();
        assert_eq!(events.len(), 4);
        assert!(events.iter().all(|e| e.series.is_none()), "{events:?}");
    }

    #[tokio::test]
    async fn past_the_burst_new_events_are_dropped_and_counts_deferred_until_a_token_is_earned() {
        let cluster = cluster();
        let recorder = EventRecorder::default();
        // 25 distinct Events use the burst.
        for i in 0..25 {
            let outcome = recorder
                .record(&cluster, event("a", &format!("m{i}")), 0)
                .await
                .unwrap();
            assert_eq!(outcome, Recorded::Created);
        }
        let dropped = recorder
            .record(&cluster, event("a", "m25"), 0)
            .await
            .unwrap();
        assert_eq!(dropped, Recorded::Dropped);
        // Another object has its own bucket.
        assert_eq!(
            recorder
                .record(&cluster, event("b", "m0"), 0)
                .await
                .unwrap(),
            Recorded::Created
        );
        // A repeat is counted but not written...
        assert_eq!(
            recorder
                .record(&cluster, event("a", "m0"), MINUTE)
                .await
                .unwrap(),
            Recorded::Deferred(2)
        );
        assert_eq!(cluster.events()[0].series, None);
        // ... until a token is earned, 5 minutes after the burst.
        assert_eq!(
            recorder
                .record(&cluster, event("a", "m0"), 5 * MINUTE)
                .await
                .unwrap(),
            Recorded::Counted(3)
        );
        assert_eq!(cluster.events()[0].series.map(|s| s.count), Some(3));
        assert_eq!(cluster.events().len(), 26);
    }

    #[tokio::test]
    async fn an_event_repeating_every_second_for_an_hour_costs_a_few_dozen_writes() {
        let cluster = cluster();
        let recorder = EventRecorder::default();
        let mut writes = 0;
        for i in 0..3_600 {
            match recorder
                .record(&cluster, event("a", "boom"), i * 1_000)
                .await
                .unwrap()
            {
                Recorded::Created | Recorded::Counted(_) => writes += 1,
                Recorded::Deferred(_) => {}
                Recorded::Dropped => panic!("a repeat is never dropped"),
            }
        }
        // The burst, then one write every 5 minutes.
        assert!(writes <= 25 + 3_600 / 300, "{writes} writes");
        let count = || cluster.events()[0].series.map(|s| s.count);
        assert!(count() < Some(3_600));
        // A flush once a write is earned brings the count up to date.
        let later = 3_600 * 1_000 + 5 * MINUTE;
        assert_eq!(recorder.flush(&cluster, later, true).await, 1);
        assert_eq!(count(), Some(3_600));
        assert_eq!(cluster.events().len(), 1);
    }

    #[tokio::test]
    async fn repeats_are_coalesced_and_never_starve_new_events_of_their_object() {
        let cluster = cluster();
        let recorder = EventRecorder::default();
        let mut outcomes = Vec::new();
        for i in 0..600 {
            outcomes.push(
                recorder
                    .record(&cluster, event("a", "nag"), i * 1_000)
                    .await
                    .unwrap(),
            );
        }
        assert_eq!(
            outcomes[..3],
            [
                Recorded::Created,
                Recorded::Counted(2),
                Recorded::Deferred(3)
            ]
        );
        assert_eq!(
            outcomes[31],
            Recorded::Counted(32),
            "30 s after the last write"
        );
        assert_eq!(
            recorder
                .record(&cluster, event("a", "new"), 600_000)
                .await
                .unwrap(),
            Recorded::Created
        );
        // Not yet due: nothing to flush; then due.
        assert_eq!(recorder.flush(&cluster, 600_000, false).await, 0);
        assert_eq!(recorder.flush(&cluster, 620_000, false).await, 1);
        assert_eq!(cluster.events()[0].series.map(|s| s.count), Some(600));
    }

    #[tokio::test]
    async fn the_series_and_limits_of_deleted_objects_are_forgotten() {
        let cluster = cluster();
        let recorder = EventRecorder::default();
        for (object, times) in [("a", 1), ("b", 1), ("c", 3)] {
            for i in 0..times {
                recorder
                    .record(&cluster, event(object, "boom"), i * 1000)
                    .await
                    .unwrap();
            }
        }
        assert_eq!(recorder.remembered(), (3, 3));
        let gone = |names: &[&str]| -> HashSet<ObjectKey> {
            names.iter().map(|n| event(n, "").regarding).collect()
        };
        recorder.forget_objects(&gone(&["a", "c"]));
        assert_eq!(recorder.remembered(), (1, 1));
        assert_eq!(
            recorder.flush(&cluster, 3 * MINUTE, true).await,
            0,
            "nothing left to write about c"
        );
        recorder.forget_objects(&gone(&["b"]));
        assert_eq!(recorder.remembered(), (0, 0));
    }

    #[tokio::test]
    async fn an_expired_event_is_recorded_anew() {
        let cluster = cluster();
        let recorder = EventRecorder::default();
        recorder
            .record(&cluster, event("a", "boom"), 0)
            .await
            .unwrap();
        let gone = EventRef {
            namespace: "d".into(),
            name: "elsewhere".into(),
        };
        // As if the server had expired it.
        for s in recorder.lock().series.values_mut() {
            s.event = Some(gone.clone());
        }
        assert_eq!(
            recorder
                .record(&cluster, event("a", "boom"), MINUTE)
                .await
                .unwrap(),
            Recorded::Created
        );
        assert_eq!(cluster.events().len(), 2);
    }

    #[test]
    fn memory_is_bounded() {
        let recorder = EventRecorder::new(EventPolicy {
            max_series: 100,
            ..EventPolicy::default()
        });
        for i in 0..1_000 {
            let key = SeriesKey::of(&event(&format!("o{i}"), "boom"));
            assert!(matches!(recorder.decide(&key, i), Decision::Create));
        }
        let state = recorder.lock();
        assert!(state.series.len() <= 100, "{}", state.series.len());
        assert!(state.buckets.len() <= 101, "{}", state.buckets.len());
    }
}
