//! What shadow runs found, per plugin: how many reconciles the candidate
//! agreed with, decided differently, failed or had to skip, and the last
//! objects it decided differently for, with the differences.
//!
//! One book serves the whole process (every member cluster's engine writes
//! to it), so `/plugins/NAME/shadow`, the metrics and a Plugin's status all
//! tell the same story. The counts are the current candidate's: a new
//! candidate digest starts them at zero, since what an earlier candidate
//! did says nothing about this one.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use super::shadow_threads::ShadowThreads;
use crate::decision_diff::Difference;
use crate::decision_diff::report::line;

/// Differing objects kept per plugin.
pub const RECENT_DIFFERENCES: usize = 50;
/// At most one `CandidateDiffers` Event per plugin in this long.
pub const EVENT_INTERVAL: Duration = Duration::from_secs(60);
/// Shadow calls at once, all plugins together, unless the host is told.
pub const DEFAULT_SHADOW_SLOTS: usize = 2;
/// How long a shadow run waits for a slot before it is shed.
pub const SLOT_WAIT: Duration = Duration::from_secs(10);
/// Shadow runs that may wait for a slot at once; one more is shed at once.
pub const MAX_WAITING: usize = 256;
/// How long serving calls must have paused before a shadow call starts:
/// shadow work runs in the gaps between serving work, not between two
/// serving calls of a burst.
pub const SERVING_PAUSE: Duration = Duration::from_millis(50);

/// How one shadow reconcile ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShadowOutcome {
    /// The candidate decided exactly as the serving version.
    Agreed,
    /// It decided something else.
    Differed,
    /// Its call failed, or its answer broke a rule the serving version's
    /// would have been held to.
    Failed,
    /// Not run: the host was under pressure (no shadow slot free, serving
    /// calls waiting for an instance, or guest memory short).
    Shed,
}

/// The counts of the current candidate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ShadowCounts {
    pub agreed: u64,
    pub differed: u64,
    pub failed: u64,
    pub shed: u64,
}

impl ShadowCounts {
    fn add(&mut self, outcome: ShadowOutcome) {
        let count = match outcome {
            ShadowOutcome::Agreed => &mut self.agreed,
            ShadowOutcome::Differed => &mut self.differed,
            ShadowOutcome::Failed => &mut self.failed,
            ShadowOutcome::Shed => &mut self.shed,
        };
        *count += 1;
    }
}

/// One object the candidate decided differently for, or failed on.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShadowDifference {
    /// `Kind namespace/name`.
    pub object: String,
    pub cluster: String,
    /// When it was seen (RFC 3339).
    pub at: String,
    /// `differed` or `failed`.
    pub outcome: &'static str,
    pub differences: Vec<Difference>,
}

/// Reconciles a canary candidate decided and wrote for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DecidedCounts {
    pub reconciled: u64,
    pub failed: u64,
}

/// Samples kept per plugin for a canary's gate, newest last.
pub const GATE_SAMPLES: usize = 20_000;

/// One reconcile, as a canary's gate judges it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Sample {
    /// The candidate decided and wrote: whether it failed, and how long the
    /// reconcile took.
    Decided { failed: bool, millis: u64 },
    /// The candidate ran in shadow beside the serving version.
    Shadow(ShadowOutcome),
}

/// What a candidate did since a moment: what a canary step is judged by.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GateWindow {
    /// Reconciles the candidate decided, and how many of them failed.
    pub decided: u64,
    pub failed: u64,
    /// The 99th percentile of those reconciles' durations.
    pub p99: Option<Duration>,
    /// Shadow reconciles on the serving version's primaries that were
    /// compared, and how many of them differed.
    pub compared: u64,
    pub differed: u64,
}

/// A plugin's shadow: which candidate, its counts and its last differences.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginShadow {
    pub plugin: String,
    pub candidate_version: String,
    pub candidate_sha256: String,
    pub counts: ShadowCounts,
    /// What it decided for itself (canary).
    pub decided: DecidedCounts,
    /// Newest first; one entry per object.
    pub differing: VecDeque<ShadowDifference>,
    #[serde(skip)]
    last_event_millis: Option<i64>,
    #[serde(skip)]
    samples: VecDeque<(i64, Sample)>,
}

/// An owed shadow run: paid when dropped.
pub struct Paid<'a>(&'a ShadowBook);

impl Drop for Paid<'_> {
    fn drop(&mut self) {
        self.0.paid();
    }
}

/// The candidate a result is about.
pub struct CandidateId<'a> {
    pub plugin: &'a str,
    pub version: &'a str,
    pub sha256: &'a str,
}

/// Every plugin's shadow, and the slots shadow calls run in.
pub struct ShadowBook {
    by_plugin: Mutex<BTreeMap<String, PluginShadow>>,
    slots: Arc<Semaphore>,
    /// Shadow runs owed: counted from the serving reconcile that leaves
    /// one until it has run (or was shed).
    pending: AtomicUsize,
    /// Shadow runs waiting for a slot now.
    waiting: AtomicUsize,
    /// Told a line per shadow run (`dev` and `simulate` print them).
    tap: Mutex<Option<mpsc::UnboundedSender<String>>>,
    /// How long serving calls must have paused before a shadow call starts.
    pause: Duration,
    /// Where shadow calls run: one low-priority thread per slot.
    threads: ShadowThreads,
}

impl Default for ShadowBook {
    fn default() -> Self {
        Self::new(DEFAULT_SHADOW_SLOTS)
    }
}

impl ShadowBook {
    /// A book whose shadow calls run at most `slots` at once.
    pub fn new(slots: usize) -> Self {
        Self {
            by_plugin: Mutex::default(),
            slots: Arc::new(Semaphore::new(slots.max(1))),
            pending: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            tap: Mutex::default(),
            pause: SERVING_PAUSE,
            threads: ShadowThreads::new(slots.max(1)),
        }
    }

    /// This book with shadow calls starting after serving calls paused
    /// for `pause` (zero: as soon as none runs; `simulate`, where none
    /// runs beside a shadow call, uses it).
    pub fn pausing(mut self, pause: Duration) -> Self {
        self.pause = pause;
        self
    }

    /// How long serving calls must have paused before a shadow call starts.
    pub fn pause(&self) -> Duration {
        self.pause
    }

    /// The low-priority threads shadow calls run on.
    pub fn threads(&self) -> &ShadowThreads {
        &self.threads
    }

    /// A line per shadow run from now on, as `dev` prints them.
    pub fn tap(&self) -> mpsc::UnboundedReceiver<String> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.tap.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
        rx
    }

    /// A shadow run is owed (its serving reconcile just finished).
    pub fn owe(&self) {
        self.pending.fetch_add(1, Ordering::SeqCst);
    }

    /// An owed shadow run, paid when the returned guard goes.
    pub fn owed_run(&self) -> Paid<'_> {
        Paid(self)
    }

    /// An owed shadow run is over.
    fn paid(&self) {
        let _ = self
            .pending
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }

    /// Shadow runs owed now: a loop that waits to settle waits for these.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::SeqCst)
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, PluginShadow>> {
        self.by_plugin.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A shadow slot if one is free now.
    pub fn try_slot(&self) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().try_acquire_owned().ok()
    }

    /// A shadow slot within [`SLOT_WAIT`]; `None` (the run is shed) when
    /// none frees in time or [`MAX_WAITING`] runs wait already, so a burst
    /// is compared as far as the slots allow and never piles up.
    pub async fn slot(&self) -> Option<OwnedSemaphorePermit> {
        if let Some(slot) = self.try_slot() {
            return Some(slot);
        }
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= MAX_WAITING {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        let slot = tokio::time::timeout(SLOT_WAIT, self.slots.clone().acquire_owned()).await;
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        slot.ok()?.ok()
    }

    /// Counts `outcome` for `candidate`, keeping `difference` (for a
    /// differing or failing reconcile) as the newest of its object's.
    /// Returns whether a `CandidateDiffers` Event is due at `now_millis`.
    pub fn record(
        &self,
        candidate: &CandidateId<'_>,
        object: &str,
        outcome: ShadowOutcome,
        difference: Option<ShadowDifference>,
        now_millis: i64,
    ) -> bool {
        self.tell(candidate, object, outcome, difference.as_ref());
        let mut book = self.lock();
        let shadow = book
            .entry(candidate.plugin.to_string())
            .or_insert_with(|| PluginShadow::new(candidate));
        if shadow.candidate_sha256 != candidate.sha256 {
            *shadow = PluginShadow::new(candidate);
        }
        shadow.counts.add(outcome);
        shadow.sample(now_millis, Sample::Shadow(outcome));
        let Some(difference) = difference else {
            return false;
        };
        shadow.differing.retain(|d| d.object != difference.object);
        shadow.differing.push_front(difference);
        shadow.differing.truncate(RECENT_DIFFERENCES);
        let due = outcome == ShadowOutcome::Differed
            && shadow
                .last_event_millis
                .is_none_or(|at| now_millis - at >= EVENT_INTERVAL.as_millis() as i64);
        if due {
            shadow.last_event_millis = Some(now_millis);
        }
        due
    }

    fn tell(
        &self,
        candidate: &CandidateId<'_>,
        object: &str,
        outcome: ShadowOutcome,
        difference: Option<&ShadowDifference>,
    ) {
        let tap = self.tap.lock().unwrap_or_else(|e| e.into_inner());
        let Some(tx) = tap.as_ref() else {
            return;
        };
        let what = match (outcome, difference) {
            (ShadowOutcome::Agreed, _) => "agreed".to_string(),
            (ShadowOutcome::Shed, _) => "shed (the host was busy)".to_string(),
            (_, Some(d)) => {
                let lines: Vec<String> = d.differences.iter().map(line).collect();
                format!("{}: {}", d.outcome, lines.join("; "))
            }
            (_, None) => format!("{outcome:?}"),
        };
        let _ = tx.send(format!(
            "shadow {} {} {object}: {what}",
            candidate.plugin, candidate.version
        ));
    }

    /// Counts a reconcile `candidate` decided and wrote for (canary):
    /// whether it failed and how long it took.
    pub fn record_decided(
        &self,
        candidate: &CandidateId<'_>,
        failed: bool,
        took: Duration,
        now_millis: i64,
    ) {
        let mut book = self.lock();
        let shadow = book
            .entry(candidate.plugin.to_string())
            .or_insert_with(|| PluginShadow::new(candidate));
        if shadow.candidate_sha256 != candidate.sha256 {
            *shadow = PluginShadow::new(candidate);
        }
        shadow.decided.reconciled += 1;
        shadow.decided.failed += u64::from(failed);
        let millis = took.as_millis().try_into().unwrap_or(u64::MAX);
        shadow.sample(now_millis, Sample::Decided { failed, millis });
    }

    /// What the candidate `sha256` of plugin `name` did from `since_millis`
    /// on (empty when another candidate, or none, ran).
    pub fn window(&self, name: &str, sha256: &str, since_millis: i64) -> GateWindow {
        let book = self.lock();
        let Some(shadow) = book.get(name).filter(|s| s.candidate_sha256 == sha256) else {
            return GateWindow::default();
        };
        let mut window = GateWindow::default();
        let mut durations = Vec::new();
        for (_, sample) in shadow.samples.iter().filter(|(at, _)| *at >= since_millis) {
            match *sample {
                Sample::Decided { failed, millis } => {
                    window.decided += 1;
                    window.failed += u64::from(failed);
                    durations.push(millis);
                }
                Sample::Shadow(ShadowOutcome::Shed) => {}
                Sample::Shadow(outcome) => {
                    window.compared += 1;
                    window.differed += u64::from(outcome != ShadowOutcome::Agreed);
                }
            }
        }
        durations.sort_unstable();
        window.p99 = (!durations.is_empty()).then(|| {
            let at = (durations.len() * 99).div_ceil(100).saturating_sub(1);
            Duration::from_millis(durations[at])
        });
        window
    }

    /// Plugin `name`'s shadow, if a candidate of it ran.
    pub fn of(&self, name: &str) -> Option<PluginShadow> {
        self.lock().get(name).cloned()
    }

    /// Every plugin's counts, with the candidate they are of.
    pub fn counts(&self) -> Vec<(String, String, ShadowCounts)> {
        self.lock()
            .values()
            .map(|s| (s.plugin.clone(), s.candidate_sha256.clone(), s.counts))
            .collect()
    }
}

impl PluginShadow {
    fn new(candidate: &CandidateId<'_>) -> Self {
        Self {
            plugin: candidate.plugin.to_string(),
            candidate_version: candidate.version.to_string(),
            candidate_sha256: candidate.sha256.to_string(),
            counts: ShadowCounts::default(),
            decided: DecidedCounts::default(),
            differing: VecDeque::new(),
            last_event_millis: None,
            samples: VecDeque::new(),
        }
    }

    fn sample(&mut self, at_millis: i64, sample: Sample) {
        if self.samples.len() == GATE_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back((at_millis, sample));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::clock::rfc3339;

    fn id<'a>(sha: &'a str) -> CandidateId<'a> {
        CandidateId {
            plugin: "podset",
            version: "0.3.0",
            sha256: sha,
        }
    }

    fn differing(object: &str) -> ShadowDifference {
        ShadowDifference {
            object: object.into(),
            cluster: "local".into(),
            at: rfc3339(0),
            outcome: "differed",
            differences: vec![Difference::Requeue {
                serving: None,
                candidate: Some("30s".into()),
            }],
        }
    }

    #[test]
    fn counts_belong_to_one_candidate_and_objects_are_kept_newest_first_once_each() {
        let book = ShadowBook::default();
        assert!(book.record(
            &id("a"),
            "o",
            ShadowOutcome::Differed,
            Some(differing("x")),
            0
        ));
        book.record(&id("a"), "o", ShadowOutcome::Agreed, None, 1);
        book.record(&id("a"), "o", ShadowOutcome::Shed, None, 2);
        book.record(
            &id("a"),
            "o",
            ShadowOutcome::Differed,
            Some(differing("y")),
            3,
        );
        book.record(
            &id("a"),
            "o",
            ShadowOutcome::Differed,
            Some(differing("x")),
            4,
        );
        let shadow = book.of("podset").unwrap();
        assert_eq!(
            shadow.counts,
            ShadowCounts {
                agreed: 1,
                differed: 3,
                failed: 0,
                shed: 1
            }
        );
        let objects: Vec<&str> = shadow.differing.iter().map(|d| d.object.as_str()).collect();
        assert_eq!(objects, ["x", "y"]);
        book.record(&id("b"), "o", ShadowOutcome::Failed, None, 5);
        let shadow = book.of("podset").unwrap();
        assert_eq!(shadow.candidate_sha256, "b");
        assert_eq!(shadow.counts.failed, 1);
        assert_eq!(shadow.counts.differed, 0);
        assert!(shadow.differing.is_empty());
    }

    #[test]
    fn at_most_fifty_objects_are_kept_and_events_are_rate_limited() {
        let book = ShadowBook::default();
        let mut announced = 0;
        for i in 0..120 {
            let at = i * 1000;
            if book.record(
                &id("a"),
                "o",
                ShadowOutcome::Differed,
                Some(differing(&format!("o{i}"))),
                at,
            ) {
                announced += 1;
            }
        }
        // 120 s of differences: at 0, 60 s.
        assert_eq!(announced, 2);
        let shadow = book.of("podset").unwrap();
        assert_eq!(shadow.differing.len(), RECENT_DIFFERENCES);
        assert_eq!(shadow.differing[0].object, "o119");
    }

    #[tokio::test(start_paused = true)]
    async fn a_shadow_run_waits_a_while_for_a_slot_then_is_shed() {
        let book = Arc::new(ShadowBook::new(1));
        let first = book.slot().await.expect("a free slot");
        // Freed within the wait: the next run gets it.
        let waiter = tokio::spawn({
            let book = book.clone();
            async move { book.slot().await.is_some() }
        });
        tokio::time::sleep(SLOT_WAIT / 2).await;
        drop(first);
        assert!(waiter.await.unwrap());
        // Held past the wait: shed.
        let held = book.slot().await.expect("free again");
        assert!(book.slot().await.is_none());
        drop(held);
    }
}
