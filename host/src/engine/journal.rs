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

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use foldhash::{HashMap, HashSet};
use serde::{Deserialize, Serialize};

use super::case_inputs::CaseInputs;
use super::cause::Causes;
use super::decision_notes::Notes;
use super::loop_watch::LoopWatch;
use super::record::{Outcome, ReconcileRecord};

/// Entries kept per object unless `--journal-entries` says otherwise.
pub const DEFAULT_ENTRIES_PER_OBJECT: usize = 16;
/// The budget over every object unless `--journal-max-mib` says otherwise.
pub const DEFAULT_MAX_MIB: usize = 1;
/// The budget of last inputs (`explain --as-case`) unless
/// `--journal-cases-mib` says otherwise.
pub const DEFAULT_CASES_MIB: usize = 1;

/// How much the journal keeps; any 0 turns its part off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalLimits {
    /// Entries kept per object.
    pub entries: usize,
    /// Bytes of entries over every object.
    pub max_bytes: usize,
    /// Bytes of last inputs (one case per object) over every object.
    pub case_bytes: usize,
}

impl Default for JournalLimits {
    fn default() -> Self {
        Self {
            entries: DEFAULT_ENTRIES_PER_OBJECT,
            max_bytes: DEFAULT_MAX_MIB << 20,
            case_bytes: DEFAULT_CASES_MIB << 20,
        }
    }
}

/// What the journal holds, as its budgets count it (`/metrics`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub entry_bytes: usize,
    pub entries: usize,
    pub case_bytes: usize,
}

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
    /// These four are the same for every entry of a plugin version, so the
    /// journal keeps one copy of each.
    pub cluster: Arc<str>,
    pub plugin: Arc<str>,
    pub version: Arc<str>,
    /// The plugin's sha256.
    pub digest: Arc<str>,
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
    /// The reads the plugin made through the cache, and how many objects
    /// each returned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reads: Vec<String>,
    /// Each write and what the API server did with it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writes: Vec<String>,
    /// The loop this reconcile completed, when it did (`ReconcileLoop`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconcile_loop: Option<String>,
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
        notes: Option<&Notes>,
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
            cluster: record.cluster.as_str().into(),
            plugin: record.plugin.as_str().into(),
            version: version.into(),
            digest: digest.into(),
            trigger: causes.first.iter().map(ToString::to_string).collect(),
            more_triggers: causes.more,
            took_millis,
            outcome: record.outcome.word().to_string(),
            changes,
            requeue_after_secs,
            failure,
            reads: notes.map_or_else(Vec::new, |n| {
                n.reads.iter().map(ToString::to_string).collect()
            }),
            writes: notes.map_or_else(Vec::new, |n| {
                n.writes.iter().map(ToString::to_string).collect()
            }),
            reconcile_loop: None,
        }
    }

    /// About how many bytes it holds, counted as the allocator gives them:
    /// each string's chunk, its slot in its object's deque (which grows
    /// by doubling) and its place in the journal's order. Counted so, the
    /// budget is close to what the journal costs in RSS (BENCHMARKS.md).
    fn size(&self) -> usize {
        let strings = |v: &Vec<String>| {
            allocated(v.capacity() * std::mem::size_of::<String>())
                + v.iter().map(|s| allocated(s.capacity())).sum::<usize>()
        };
        let optional = |s: &Option<String>| s.as_ref().map_or(0, |s| allocated(s.capacity()));
        let slots = std::mem::size_of::<(u64, Entry)>() * 3 / 2
            + 2 * std::mem::size_of::<(u64, Arc<Filed>)>();
        slots
            + allocated(self.outcome.capacity())
            + strings(&self.trigger)
            + strings(&self.changes)
            + strings(&self.reads)
            + strings(&self.writes)
            + optional(&self.failure)
            + optional(&self.reconcile_loop)
    }
}

/// What the allocator takes for a request of `n` bytes: glibc's chunk,
/// the request and an 8-byte header rounded up to 16, at least 32; nothing
/// for nothing asked.
fn allocated(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        (n + 8).div_ceil(16).max(2) * 16
    }
}

impl Filed {
    /// Whether this is `kind` (by its name, any case) `namespace`/`name`,
    /// of `cluster` or of any.
    fn is(&self, kind: &str, namespace: Option<&str>, name: &str, cluster: Option<&str>) -> bool {
        self.kind.eq_ignore_ascii_case(kind)
            && self.namespace.as_deref() == namespace
            && self.name == name
            && cluster.is_none_or(|c| c == self.cluster)
    }
}

#[derive(Default)]
struct Inner {
    /// Each object's name is allocated once, shared by its places in
    /// `order` and `cases`.
    objects: HashMap<Arc<Filed>, VecDeque<(u64, Entry)>>,
    /// Every entry kept, oldest first, for the budget.
    order: VecDeque<(u64, Arc<Filed>)>,
    bytes: usize,
    /// How many entries `objects` holds, so no record walks them all.
    entries: usize,
    next: u64,
    /// The last inputs of each object.
    cases: HashMap<Arc<Filed>, (u64, CaseInputs)>,
    /// Every case kept, oldest first, for their budget.
    case_order: VecDeque<(u64, Arc<Filed>)>,
    case_bytes: usize,
    /// One copy of each cluster, plugin, version and digest the entries
    /// name: a few per plugin version, never many.
    names: HashSet<Arc<str>>,
}

/// One object's last inputs, as `explain --as-case` writes them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kept {
    pub plugin: String,
    /// The case file's name, without `.yaml`.
    pub name: String,
    /// The case, as JSON.
    pub case: String,
}

impl Inner {
    /// `name`, as the one copy the journal keeps.
    fn shared(&mut self, name: &Arc<str>) -> Arc<str> {
        if let Some(kept) = self.names.get(name) {
            return kept.clone();
        }
        self.names.insert(name.clone());
        name.clone()
    }

    /// Keeps `kept` as the last inputs of `filed`, within `budget` bytes
    /// over every object, the oldest going first. Inputs larger than the
    /// whole budget are not kept.
    fn keep_case(&mut self, seq: u64, filed: Arc<Filed>, kept: CaseInputs, budget: usize) {
        if let Some((_, old)) = self.cases.remove(&filed) {
            self.case_bytes -= old.size();
        }
        if kept.size() > budget {
            return;
        }
        self.case_bytes += kept.size();
        self.case_order.push_back((seq, filed.clone()));
        self.cases.insert(filed, (seq, kept));
        while self.case_bytes > budget {
            let Some((seq, filed)) = self.case_order.pop_front() else {
                break;
            };
            if self.cases.get(&filed).is_some_and(|(s, _)| *s == seq)
                && let Some((_, old)) = self.cases.remove(&filed)
            {
                self.case_bytes -= old.size();
            }
        }
        if self.case_order.len() > 4 * self.cases.len() + 1024 {
            let cases = &self.cases;
            self.case_order
                .retain(|(seq, filed)| cases.get(filed).is_some_and(|(s, _)| s == seq));
        }
    }
}

/// See the module documentation.
pub struct Journal {
    /// Loops are found whether or not the journal keeps entries.
    pub loops: LoopWatch,
    inner: Mutex<Inner>,
    per_object: AtomicUsize,
    max_bytes: AtomicUsize,
    case_bytes: AtomicUsize,
}

impl Default for Journal {
    fn default() -> Self {
        let limits = JournalLimits::default();
        Self {
            loops: LoopWatch::default(),
            inner: Mutex::default(),
            per_object: AtomicUsize::new(limits.entries),
            max_bytes: AtomicUsize::new(limits.max_bytes),
            case_bytes: AtomicUsize::new(limits.case_bytes),
        }
    }
}

impl Journal {
    /// Keeps what `limits` says; a 0 turns its part off (and forgets what
    /// it kept): entries or bytes off turn the whole journal off.
    pub fn set_limits(&self, limits: JournalLimits) {
        self.per_object.store(limits.entries, Ordering::Relaxed);
        self.max_bytes.store(limits.max_bytes, Ordering::Relaxed);
        self.case_bytes.store(limits.case_bytes, Ordering::Relaxed);
        let mut inner = self.lock();
        if limits.entries == 0 || limits.max_bytes == 0 {
            *inner = Inner::default();
        } else if limits.case_bytes == 0 {
            inner.cases.clear();
            inner.case_order.clear();
            inner.case_bytes = 0;
        }
    }

    /// Whether it keeps each object's last inputs (`explain --as-case`):
    /// making them is skipped when not.
    pub fn keeps_cases(&self) -> bool {
        self.is_on() && self.case_bytes.load(Ordering::Relaxed) > 0
    }

    /// The last inputs kept of the object `kind` `namespace`/`name`, of
    /// `cluster` or the newest over every cluster.
    pub fn case(
        &self,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        cluster: Option<&str>,
    ) -> Option<Kept> {
        let inner = self.lock();
        inner
            .cases
            .iter()
            .filter(|(filed, _)| filed.is(kind, namespace, name, cluster))
            .max_by_key(|(_, (seq, _))| *seq)
            .and_then(|(_, (_, kept))| {
                Some(Kept {
                    plugin: kept.plugin.clone(),
                    name: kept.name.clone(),
                    case: kept.case()?,
                })
            })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether it keeps anything: what is worked out only for it (which
    /// fields a change changed) is skipped when not.
    pub fn is_on(&self) -> bool {
        let (per_object, max_bytes) = self.limits();
        per_object > 0 && max_bytes > 0
    }

    fn limits(&self) -> (usize, usize) {
        (
            self.per_object.load(Ordering::Relaxed),
            self.max_bytes.load(Ordering::Relaxed),
        )
    }

    /// Files `entry` for the object of `record`, with its inputs as a case
    /// when given; an object found gone is forgotten instead.
    pub fn record(&self, record: &ReconcileRecord, mut entry: Entry, case: Option<CaseInputs>) {
        let (per_object, max_bytes) = self.limits();
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
        let filed = match inner.objects.get_key_value(&filed) {
            Some((shared, _)) => shared.clone(),
            None => Arc::new(filed),
        };
        if record.outcome == Outcome::Gone {
            if let Some(gone) = inner.objects.remove(&filed) {
                inner.bytes -= gone.iter().map(|(_, e)| e.size()).sum::<usize>();
                inner.entries -= gone.len();
            }
            if let Some((_, kept)) = inner.cases.remove(&filed) {
                inner.case_bytes -= kept.size();
            }
            return;
        }
        let seq = inner.next;
        inner.next += 1;
        for name in [
            &mut entry.cluster,
            &mut entry.plugin,
            &mut entry.version,
            &mut entry.digest,
        ] {
            *name = inner.shared(name);
        }
        if let Some(case) = case {
            let budget = self.case_bytes.load(Ordering::Relaxed);
            inner.keep_case(seq, filed.clone(), case, budget);
        }
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
            .filter(|(filed, _)| filed.is(kind, namespace, name, cluster))
            .flat_map(|(_, kept)| kept.iter().cloned())
            .collect();
        entries.sort_by_key(|e| std::cmp::Reverse(e.0));
        entries.into_iter().map(|(_, e)| e).collect()
    }

    /// What it holds, as its budgets count it.
    pub fn usage(&self) -> Usage {
        let inner = self.lock();
        Usage {
            entry_bytes: inner.bytes,
            entries: inner.entries,
            case_bytes: inner.case_bytes,
        }
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
            waited_millis: 0,
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
        Entry::of(record, &causes, "0.1.0", "abc", 3, None)
    }

    fn file(journal: &Journal, name: &str, at: i64, outcome: Outcome) {
        let record = record(name, at, outcome);
        journal.record(&record, entry(&record), None);
    }

    #[test]
    fn an_object_keeps_its_last_entries_newest_first_and_is_forgotten_when_gone() {
        let journal = Journal::default();
        journal.set_limits(JournalLimits {
            entries: 3,
            max_bytes: 1 << 20,
            case_bytes: 1 << 20,
        });
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
        assert_eq!(journal.usage().entries, 1, "db's entry alone");
    }

    #[test]
    fn the_last_inputs_of_each_object_are_kept_within_their_budget() {
        let journal = Journal::default();
        let case = |name: &str, n: usize| {
            let primary = serde_json::json!({"apiVersion": "example.com/v1", "kind": "PodSet",
                "metadata": {"name": name, "namespace": "default", "labels": {"n": n.to_string()}}});
            Some(CaseInputs::answered_nothing("podset", &primary, "local"))
        };
        let one = case("a", 0).unwrap().size();
        journal.set_limits(JournalLimits {
            case_bytes: one * 3,
            ..JournalLimits::default()
        });
        for (i, name) in ["a", "a", "b", "c", "d"].iter().enumerate() {
            let record = record(name, i as i64, applied());
            journal.record(&record, entry(&record), case(name, i));
        }
        let kept = |name| journal.case("PodSet", Some("default"), name, None);
        assert!(kept("a").is_none(), "the oldest went past the budget");
        let b = kept("b").expect("b's inputs");
        assert_eq!(
            (b.plugin.as_str(), b.name.as_str()),
            ("podset", "default-b")
        );
        let written: serde_json::Value = serde_json::from_str(&b.case).unwrap();
        assert_eq!(written["primary"]["metadata"]["labels"]["n"], "2");
        assert_eq!(written["expect"]["error"], "asked to fail");
        assert!(kept("d").is_some());
        let gone = record("d", 9, Outcome::Gone);
        journal.record(&gone, entry(&gone), None);
        assert!(kept("d").is_none(), "forgotten with the object");
        journal.set_limits(JournalLimits {
            case_bytes: 0,
            ..JournalLimits::default()
        });
        assert!(!journal.keeps_cases());
        assert!(kept("b").is_none());
    }

    #[test]
    fn past_the_budget_the_oldest_entries_anywhere_go() {
        let journal = Journal::default();
        let one = entry(&record("x", 0, applied())).size();
        journal.set_limits(JournalLimits {
            entries: 16,
            max_bytes: one * 10,
            case_bytes: 0,
        });
        for i in 0..30 {
            file(&journal, &format!("o-{i}"), i, applied());
        }
        let Usage {
            entry_bytes: bytes,
            entries,
            ..
        } = journal.usage();
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
        journal.set_limits(JournalLimits {
            entries: 0,
            ..JournalLimits::default()
        });
        file(&journal, "o-99", 99, applied());
        assert_eq!(journal.usage(), Usage::default(), "off: nothing kept");
    }
}
