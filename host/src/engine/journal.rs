//! The decision journal: for each primary, its last reconciles, what
//! queued each, which version of the plugin decided, what the host did
//! about it and how it ended, so `reconciler-host explain` can answer why
//! an object was reconciled and what changed, for every plugin in every
//! language, with no code in the plugin.
//!
//! Bounded twice: a few entries per object (the oldest go first), and a
//! budget of bytes over every object of the process, past which the
//! oldest entries anywhere go. An object found gone is forgotten with its
//! entries, as its queue state is.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};

use super::cause::Causes;
use super::record::{Outcome, ReconcileRecord};

/// Entries kept per object unless `--journal-entries` says otherwise.
pub const DEFAULT_ENTRIES_PER_OBJECT: usize = 16;
/// The budget over every object unless `--journal-max-mib` says otherwise.
pub const DEFAULT_MAX_MIB: usize = 8;

/// One object of one cluster, as the journal files it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Filed {
    cluster: String,
    kind: String,
    namespace: Option<String>,
    name: String,
}

/// One reconcile, as `explain` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// When it started, epoch milliseconds.
    pub at_millis: i64,
    pub cluster: String,
    pub plugin: String,
    pub version: String,
    /// The plugin's sha256.
    pub digest: String,
    /// What queued it, in words, the first few distinct causes.
    pub trigger: Vec<String>,
    /// How many more causes there were.
    pub more_triggers: usize,
    pub took_millis: i64,
    /// `applied`, `failed`, `gone`.
    pub outcome: String,
    /// What the host did to the cluster for the plugin, in words.
    pub changes: Vec<String>,
    /// The requeue it asked for (or the host set), in seconds.
    pub requeue_after_secs: Option<f64>,
    /// Why it failed, when it did.
    pub failure: Option<String>,
}

impl Entry {
    /// The entry of `record`, queued for `causes`, decided by `version`
    /// (`digest`), that took `took_millis`.
    pub fn of(
        record: &ReconcileRecord,
        causes: &Causes,
        version: &str,
        digest: &str,
        took_millis: i64,
    ) -> Self {
        let (changes, requeue_after_secs, failure) = match &record.outcome {
            Outcome::Applied {
                changes,
                requeue_after,
            } => (
                changes.iter().map(ToString::to_string).collect(),
                requeue_after.map(|d| d.as_secs_f64()),
                None,
            ),
            Outcome::Failed {
                reason,
                message,
                retry_in,
                ..
            } => (
                Vec::new(),
                Some(retry_in.as_secs_f64()),
                Some(format!("{reason}: {message}")),
            ),
            Outcome::Gone | Outcome::Unloaded => (Vec::new(), None, None),
        };
        Self {
            at_millis: record.at_millis,
            cluster: record.cluster.clone(),
            plugin: record.plugin.clone(),
            version: version.to_string(),
            digest: digest.to_string(),
            trigger: causes.first.iter().map(ToString::to_string).collect(),
            more_triggers: causes.more,
            took_millis,
            outcome: record.outcome.word().to_string(),
            changes,
            requeue_after_secs,
            failure,
        }
    }

    /// About how many bytes it holds: its text and a fixed overhead for its
    /// allocations, so the budget is close to what it costs in RSS (about
    /// 1.1 KB an entry in the 1,000-PodSet run, BENCHMARKS.md).
    fn size(&self) -> usize {
        let text: usize = [&self.cluster, &self.plugin, &self.version, &self.digest]
            .iter()
            .map(|s| s.len())
            .sum::<usize>()
            + self.trigger.iter().map(String::len).sum::<usize>()
            + self.changes.iter().map(String::len).sum::<usize>()
            + self.failure.as_ref().map_or(0, String::len);
        text + 640
    }
}

#[derive(Default)]
struct Inner {
    objects: HashMap<Filed, VecDeque<(u64, Entry)>>,
    /// Every entry kept, oldest first, for the budget.
    order: VecDeque<(u64, Filed)>,
    bytes: usize,
    /// How many entries `objects` holds, so no record walks them all.
    entries: usize,
    next: u64,
}

/// See the module documentation.
pub struct Journal {
    inner: Mutex<Inner>,
    per_object: AtomicUsize,
    max_bytes: AtomicUsize,
}

impl Default for Journal {
    fn default() -> Self {
        Self {
            inner: Mutex::default(),
            per_object: AtomicUsize::new(DEFAULT_ENTRIES_PER_OBJECT),
            max_bytes: AtomicUsize::new(DEFAULT_MAX_MIB << 20),
        }
    }
}

impl Journal {
    /// Keeps `per_object` entries per object within `max_bytes` in all;
    /// either 0 turns it off (and forgets what it kept).
    pub fn set_limits(&self, per_object: usize, max_bytes: usize) {
        self.per_object.store(per_object, Ordering::Relaxed);
        self.max_bytes.store(max_bytes, Ordering::Relaxed);
        if per_object == 0 || max_bytes == 0 {
            *self.lock() = Inner::default();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn is_on(&self) -> (usize, usize) {
        (
            self.per_object.load(Ordering::Relaxed),
            self.max_bytes.load(Ordering::Relaxed),
        )
    }

    /// Files `entry` for the object of `record`; an object found gone is
    /// forgotten instead.
    pub fn record(&self, record: &ReconcileRecord, entry: Entry) {
        let (per_object, max_bytes) = self.is_on();
        if per_object == 0 || max_bytes == 0 {
            return;
        }
        let filed = Filed {
            cluster: record.cluster.clone(),
            kind: record.kind.clone(),
            namespace: record.object.namespace.clone(),
            name: record.object.name.clone(),
        };
        let mut inner = self.lock();
        if record.outcome == Outcome::Gone {
            if let Some(gone) = inner.objects.remove(&filed) {
                inner.bytes -= gone.iter().map(|(_, e)| e.size()).sum::<usize>();
                inner.entries -= gone.len();
            }
            return;
        }
        let seq = inner.next;
        inner.next += 1;
        inner.bytes += entry.size();
        inner.entries += 1;
        inner.order.push_back((seq, filed.clone()));
        let kept = inner.objects.entry(filed).or_default();
        kept.push_back((seq, entry));
        let (mut dropped, mut dropped_bytes) = (0, 0);
        while kept.len() > per_object {
            if let Some((_, old)) = kept.pop_front() {
                dropped += 1;
                dropped_bytes += old.size();
            }
        }
        inner.bytes -= dropped_bytes;
        inner.entries -= dropped;
        while inner.bytes > max_bytes {
            let Some((seq, filed)) = inner.order.pop_front() else {
                break;
            };
            let Some(kept) = inner.objects.get_mut(&filed) else {
                continue;
            };
            if kept.front().is_some_and(|(first, _)| *first == seq) {
                let (_, old) = kept.pop_front().expect("checked");
                if kept.is_empty() {
                    inner.objects.remove(&filed);
                }
                inner.bytes -= old.size();
                inner.entries -= 1;
            }
        }
        // Entries dropped per object leave their place in `order` behind:
        // cleared once it holds far more places than entries.
        if inner.order.len() > 4 * inner.entries + 1024 {
            let Inner { objects, order, .. } = &mut *inner;
            order.retain(|(seq, filed)| {
                objects
                    .get(filed)
                    .is_some_and(|kept| kept.iter().any(|(s, _)| s == seq))
            });
        }
    }

    /// The entries of the object `kind` `namespace`/`name` (kind by its
    /// name, any case), newest first, over every cluster or only
    /// `cluster`.
    pub fn entries(
        &self,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        cluster: Option<&str>,
    ) -> Vec<Entry> {
        let inner = self.lock();
        let mut entries: Vec<(u64, Entry)> = inner
            .objects
            .iter()
            .filter(|(filed, _)| {
                filed.kind.eq_ignore_ascii_case(kind)
                    && filed.namespace.as_deref() == namespace
                    && filed.name == name
                    && cluster.is_none_or(|c| c == filed.cluster)
            })
            .flat_map(|(_, kept)| kept.iter().cloned())
            .collect();
        entries.sort_by_key(|e| std::cmp::Reverse(e.0));
        entries.into_iter().map(|(_, e)| e).collect()
    }

    /// About how many bytes the entries hold, and how many there are.
    pub fn usage(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.bytes, inner.entries)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::engine::cause::Cause;
    use crate::engine::record::Change;
    use crate::engine::work_queue::PrimaryKey;

    fn record(name: &str, at: i64, outcome: Outcome) -> ReconcileRecord {
        ReconcileRecord {
            at_millis: at,
            cluster: "local".into(),
            plugin: "podset".into(),
            kind: "PodSet".into(),
            object: PrimaryKey::new(Some("default"), name),
            outcome,
        }
    }

    fn applied() -> Outcome {
        Outcome::Applied {
            changes: vec![Change::StatusUpdated],
            requeue_after: Some(Duration::from_secs(30)),
        }
    }

    fn entry(record: &ReconcileRecord) -> Entry {
        let mut causes = Causes::default();
        causes.add(Cause::Requeue);
        Entry::of(record, &causes, "0.1.0", "abc", 3)
    }

    fn file(journal: &Journal, name: &str, at: i64, outcome: Outcome) {
        let record = record(name, at, outcome);
        journal.record(&record, entry(&record));
    }

    #[test]
    fn an_object_keeps_its_last_entries_newest_first_and_is_forgotten_when_gone() {
        let journal = Journal::default();
        journal.set_limits(3, 1 << 20);
        for at in 0..5 {
            file(&journal, "web", at, applied());
        }
        file(&journal, "db", 9, applied());
        let web = journal.entries("podset", Some("default"), "web", None);
        let at: Vec<i64> = web.iter().map(|e| e.at_millis).collect();
        assert_eq!(at, [4, 3, 2]);
        assert_eq!(web[0].trigger, ["requeue"]);
        assert_eq!(web[0].changes, ["status updated"]);
        assert_eq!(web[0].requeue_after_secs, Some(30.0));
        assert!(
            journal
                .entries("PodSet", Some("default"), "web", Some("other"))
                .is_empty()
        );
        file(&journal, "web", 5, Outcome::Gone);
        assert!(
            journal
                .entries("PodSet", Some("default"), "web", None)
                .is_empty()
        );
        assert_eq!(journal.usage().1, 1, "db's entry alone");
    }

    #[test]
    fn past_the_budget_the_oldest_entries_anywhere_go() {
        let journal = Journal::default();
        let one = entry(&record("x", 0, applied())).size();
        journal.set_limits(16, one * 10);
        for i in 0..30 {
            file(&journal, &format!("o-{i}"), i, applied());
        }
        let (bytes, entries) = journal.usage();
        assert!(bytes <= one * 10 + 64, "{bytes} bytes");
        assert_eq!(entries, 10);
        assert!(
            journal
                .entries("PodSet", Some("default"), "o-0", None)
                .is_empty()
        );
        assert_eq!(
            journal
                .entries("PodSet", Some("default"), "o-29", None)
                .len(),
            1
        );
        journal.set_limits(0, 1 << 20);
        file(&journal, "o-99", 99, applied());
        assert_eq!(journal.usage(), (0, 0), "off: nothing kept");
    }
}
