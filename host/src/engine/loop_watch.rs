//! Reconcile loops, found by the host: a primary reconciled again and again,
//! each time writing a field back to the same value (someone else keeps
//! changing it: another controller, a person, an autoscaler) or sending a
//! value the API server stores otherwise (it normalizes `1000m` to `1`, so
//! the host finds it different at every reconcile and sends it again).
//!
//! A healthy reconcile that writes often writes new values (a status
//! listing pods as they come); a loop writes the same thing over and over.
//! So what is counted is one write, the same object, field and value, in
//! `repeats` reconciles within `window`. Each loop is reported once per
//! window per object: a Warning Event `ReconcileLoop` on the primary, a
//! count in `reconciler_reconcile_loops_total`, and the journal entry.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use foldhash::HashMap;

use super::cause::{Cause, Causes};
use super::decision_notes::{WriteResult, Written};

/// Reconciles writing the same thing, within the window, that make a loop.
pub const DEFAULT_REPEATS: usize = 5;
/// The window those reconciles fall in.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);

/// When a reconcile counts towards a loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoopRule {
    /// 0 turns loop detection off.
    pub repeats: usize,
    pub window: Duration,
}

impl Default for LoopRule {
    fn default() -> Self {
        Self {
            repeats: DEFAULT_REPEATS,
            window: DEFAULT_WINDOW,
        }
    }
}

/// One write as loops compare them: which object and field, and what was
/// written or sent.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Repeated {
    /// `Deployment d/web`.
    object: String,
    path: String,
    what: What,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum What {
    /// The write changed the field to this value.
    SetTo(String),
    /// The write was sent with this value and the API server holds another.
    NotAsSent { sent: String, stored: String },
}

/// A loop found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoopFound {
    /// What keeps happening, in words, for the Event and `explain`.
    pub message: String,
    /// First found in this window (an Event and a count are due).
    pub new: bool,
}

#[derive(Default)]
struct History {
    /// Each recent reconcile that wrote: when, and what (hashed: the words
    /// are needed only for a loop, and the reconcile completing it has
    /// them).
    reconciles: VecDeque<(i64, BTreeSet<u64>)>,
    /// Managers other than the plugin seen changing a field of an object
    /// (from the triggers' `managedFields`), by object and path.
    others: BTreeMap<(String, String), BTreeSet<String>>,
    /// The writes found looping, in words, by hash: a loop often repeats
    /// more than one write over different reconciles (a fight over a
    /// Deployment's replicas also flips the primary's status in the
    /// reconciles between), and the report names them all, whichever
    /// completed first.
    looping: BTreeMap<u64, Repeated>,
    /// When the current window's report was made, and what it named: a
    /// write found looping later in the window makes a new report.
    reported: Option<(i64, BTreeSet<u64>)>,
}

#[derive(Default)]
struct Inner {
    objects: HashMap<(String, String), History>,
    last_sweep: i64,
    /// Loops found, by plugin.
    counts: BTreeMap<String, u64>,
}

/// See the module documentation.
#[derive(Default)]
pub struct LoopWatch {
    rule: Mutex<LoopRule>,
    inner: Mutex<Inner>,
}

/// Managers remembered per field, so a loop with many writers stays small.
const MAX_OTHERS: usize = 4;
/// Looping writes remembered per object, for the same reason.
const MAX_LOOPING: usize = 8;

impl LoopWatch {
    pub fn set_rule(&self, rule: LoopRule) {
        *self.rule.lock().unwrap_or_else(|e| e.into_inner()) = rule;
        if rule.repeats == 0 {
            self.lock().objects.clear();
        }
    }

    /// Whether loops are looked for: the writes are noted only then.
    pub fn is_on(&self) -> bool {
        self.rule.lock().unwrap_or_else(|e| e.into_inner()).repeats > 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Loops found so far, by plugin.
    pub fn counts(&self) -> BTreeMap<String, u64> {
        self.lock().counts.clone()
    }

    /// Takes one reconcile of `plugin` (field manager `manager`) for the
    /// primary `object`, at `at` (epoch ms): what queued it and what it
    /// wrote. The loop it completes, if it does.
    pub fn observe(
        &self,
        plugin: &str,
        manager: &str,
        object: &str,
        at: i64,
        causes: &Causes,
        writes: &[Written],
    ) -> Option<LoopFound> {
        let rule = *self.rule.lock().unwrap_or_else(|e| e.into_inner());
        if rule.repeats == 0 {
            return None;
        }
        let window = i64::try_from(rule.window.as_millis()).unwrap_or(i64::MAX);
        let since = at.saturating_sub(window);
        let mut guard = self.lock();
        let inner = &mut *guard;
        if at - inner.last_sweep > window {
            inner.last_sweep = at;
            inner
                .objects
                .retain(|_, h| h.reconciles.back().is_some_and(|(t, _)| *t >= since));
        }
        let repeated = repeated_in(writes);
        let key = (plugin.to_string(), object.to_string());
        if repeated.is_empty() && !inner.objects.contains_key(&key) {
            return None;
        }
        let history = inner.objects.entry(key.clone()).or_default();
        while history.reconciles.front().is_some_and(|(t, _)| *t < since) {
            history.reconciles.pop_front();
        }
        note_others(history, causes, manager, &repeated);
        if repeated.is_empty() {
            if history.reconciles.is_empty() {
                inner.objects.remove(&key);
            }
            return None;
        }
        let hashes: BTreeSet<u64> = repeated.iter().map(hash_of).collect();
        history.reconciles.push_back((at, hashes));
        // Never more than a loop needs.
        while history.reconciles.len() > rule.repeats.max(1) * 4 {
            history.reconciles.pop_front();
        }
        // Writes that stopped repeating within the window are no loop now.
        history
            .looping
            .retain(|hash, _| made_by(&history.reconciles, *hash) >= rule.repeats);
        for r in &repeated {
            let hash = hash_of(r);
            if made_by(&history.reconciles, hash) >= rule.repeats
                && history.looping.len() < MAX_LOOPING
            {
                history.looping.entry(hash).or_insert_with(|| r.clone());
            }
        }
        let completed = repeated
            .iter()
            .any(|r| history.looping.contains_key(&hash_of(r)));
        if !completed {
            return None;
        }
        let times = history.reconciles.len();
        let named: BTreeSet<u64> = history.looping.keys().copied().collect();
        let same = named
            .iter()
            .map(|hash| made_by(&history.reconciles, *hash))
            .max()
            .unwrap_or(0);
        let message = describe(history, (times, same), rule.window);
        // One report per window, and another when a write not named yet
        // starts looping within it.
        let new = match &mut history.reported {
            Some((reported_at, before)) if *reported_at >= since => {
                let grown = !named.is_subset(before);
                before.extend(named);
                grown
            }
            _ => {
                history.reported = Some((at, named));
                *inner.counts.entry(plugin.to_string()).or_default() += 1;
                true
            }
        };
        Some(LoopFound { message, new })
    }
}

/// In how many of the recent reconciles the write hashed `hash` was made.
fn made_by(reconciles: &VecDeque<(i64, BTreeSet<u64>)>, hash: u64) -> usize {
    reconciles
        .iter()
        .filter(|(_, made)| made.contains(&hash))
        .count()
}

fn hash_of(repeated: &Repeated) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    repeated.hash(&mut hasher);
    hasher.finish()
}

/// What of `writes` a loop repeats: fields set, and fields the API server
/// holds otherwise than sent.
fn repeated_in(writes: &[Written]) -> BTreeSet<Repeated> {
    let mut repeated = BTreeSet::new();
    for written in writes {
        let object = written.object.to_string();
        match &written.result {
            WriteResult::Changed { fields, .. } => {
                for field in fields {
                    repeated.insert(Repeated {
                        object: object.clone(),
                        path: field.path.clone(),
                        what: What::SetTo(field.new.clone().unwrap_or_default()),
                    });
                }
            }
            WriteResult::Unchanged { not_as_sent, .. } => {
                for field in not_as_sent {
                    repeated.insert(Repeated {
                        object: object.clone(),
                        path: field.path.clone(),
                        what: What::NotAsSent {
                            sent: field.old.clone().unwrap_or_default(),
                            stored: field.new.clone().unwrap_or_else(|| "nothing".into()),
                        },
                    });
                }
            }
            _ => {}
        }
    }
    repeated
}

/// Remembers who else changed the fields this reconcile wrote, from the
/// watch events that queued it: only those can be a fight, and an object's
/// other fields (a Deployment's status, which its controller keeps
/// changing) would fill the history for nothing.
fn note_others(
    history: &mut History,
    causes: &Causes,
    manager: &str,
    written: &BTreeSet<Repeated>,
) {
    for cause in &causes.first {
        let Cause::Event {
            kind,
            object,
            fields: Some(fields),
            ..
        } = cause
        else {
            continue;
        };
        let others: Vec<&String> = fields
            .by
            .iter()
            .filter(|by| by.split(" (").next() != Some(manager))
            .collect();
        if others.is_empty() {
            continue;
        }
        let changed = format!("{kind} {object}");
        for field in &fields.fields {
            let wrote = written
                .iter()
                .any(|w| w.object == changed && w.path == field.path);
            if !wrote {
                continue;
            }
            let known = history
                .others
                .entry((changed.clone(), field.path.clone()))
                .or_default();
            for other in &others {
                if known.len() < MAX_OTHERS {
                    known.insert((*other).clone());
                }
            }
        }
        while history.others.len() > 16 {
            history.others.pop_first();
        }
    }
}

/// The loop in words: fights first (a writer other than the plugin is
/// known: the cause), then the writes the API server keeps otherwise, then
/// the rest (often a consequence: a status that flips as the fight goes).
fn describe(history: &History, (times, same): (usize, usize), window: Duration) -> String {
    let by_of = |r: &Repeated| {
        history
            .others
            .get(&(r.object.clone(), r.path.clone()))
            .map(|m| m.iter().cloned().collect::<Vec<_>>().join(", "))
    };
    let mut looping: Vec<(u8, &Repeated, Option<String>)> = history
        .looping
        .values()
        .map(|r| {
            let by = by_of(r);
            let rank = match (&r.what, &by) {
                (What::SetTo(_), Some(_)) => 0,
                (What::NotAsSent { .. }, _) => 1,
                (What::SetTo(_), None) => 2,
            };
            (rank, r, by)
        })
        .collect();
    looping.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let parts: Vec<String> = looping
        .iter()
        .take(3)
        .map(|(_, r, by)| match (&r.what, by) {
            (What::SetTo(value), Some(by)) => format!(
                "{} {} set to {value} each time, and changed back each time by {by}: two writers fight over this field",
                r.object, r.path
            ),
            (What::SetTo(value), None) => format!(
                "{} {} set to {value} each time: something else keeps changing it",
                r.object, r.path
            ),
            (What::NotAsSent { sent, stored }, _) => format!(
                "{} {} sent as {sent} each time, and the API server keeps it as {stored}: it normalizes the value, so the host finds it different and sends it again; write it as the API server stores it",
                r.object, r.path
            ),
        })
        .collect();
    format!(
        "{times} reconciles wrote in the last {}s, {same} of them the same: {}",
        window.as_secs(),
        parts.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use reconciler_contract::KindRef;

    use super::*;
    use crate::cluster::{ObjectKey, WatchEventType};
    use crate::engine::cause::ChangedFields;
    use crate::engine::field_diff::FieldChange;

    fn deployment() -> ObjectKey {
        ObjectKey::new(KindRef::new("apps", "v1", "Deployment"), Some("d"), "web")
    }

    fn field(path: &str, old: &str, new: &str) -> FieldChange {
        FieldChange {
            path: path.into(),
            old: Some(old.into()),
            new: Some(new.into()),
        }
    }

    fn set(path: &str, old: &str, new: &str) -> Written {
        Written {
            verb: "apply",
            object: deployment(),
            result: WriteResult::Changed {
                fields: vec![field(path, old, new)],
                more: 0,
            },
        }
    }

    fn fought() -> Causes {
        let mut causes = Causes::default();
        causes.add(Cause::Event {
            kind: "Deployment".into(),
            object: "d/web".into(),
            change: WatchEventType::Modified,
            fields: Some(Box::new(ChangedFields {
                fields: vec![field(".spec.replicas", "3", "5")],
                more: 0,
                by: vec!["fighter (Update)".into(), "podset (Apply)".into()],
            })),
        });
        causes
    }

    fn watch() -> LoopWatch {
        let watch = LoopWatch::default();
        watch.set_rule(LoopRule {
            repeats: 3,
            window: Duration::from_secs(10),
        });
        watch
    }

    /// The plugin sets the Deployment's replicas back to 3 at `at`, after
    /// `fighter` changed them.
    fn scaled_back(watch: &LoopWatch, at: i64) -> Option<LoopFound> {
        watch.observe(
            "podset",
            "podset",
            "PodSet d/web",
            at,
            &fought(),
            &[set(".spec.replicas", "5", "3")],
        )
    }

    #[test]
    fn a_field_set_back_to_the_same_value_again_and_again_is_a_loop_naming_the_other_writer() {
        let watch = watch();
        let observe = |at| scaled_back(&watch, at);
        assert_eq!(observe(0), None);
        assert_eq!(observe(1_000), None);
        let found = observe(2_000).expect("the third time is a loop");
        assert!(found.new);
        assert!(
            found.message.contains(
                "Deployment d/web .spec.replicas set to 3 each time, and changed back each time by fighter (Update)"
            ),
            "{}",
            found.message
        );
        assert!(!found.message.contains("podset (Apply)"), "not itself");
        assert!(!observe(3_000).unwrap().new, "reported once per window");
        assert_eq!(watch.counts()["podset"], 1);
        // Past the window, the old reconciles no longer count.
        assert_eq!(observe(60_000), None);
    }

    #[test]
    fn a_fight_found_after_its_echo_in_the_status_makes_a_new_report_that_names_it_first() {
        // As on a real cluster with the pods' controller running: the
        // reconciles that scale the Deployment back alternate with ones that
        // only write the status, which flips between the pods of both sizes,
        // and the status may reach the threshold first.
        let watch = watch();
        let status = |at| {
            let pods = Written {
                verb: "apply status",
                object: ObjectKey::new(
                    KindRef::new("example.com", "v1alpha1", "PodSet"),
                    Some("d"),
                    "web",
                ),
                result: WriteResult::Changed {
                    fields: vec![field(".status.podNames", "[a,b,c]", "[a]")],
                    more: 0,
                },
            };
            watch.observe(
                "podset",
                "podset",
                "PodSet d/web",
                at,
                &Causes::default(),
                &[pods],
            )
        };
        let scale = |at| scaled_back(&watch, at);
        assert_eq!(status(0), None);
        assert_eq!(status(100), None);
        assert_eq!(scale(200), None);
        let echo = status(300).expect("the status repeats first");
        assert!(echo.new);
        assert!(!echo.message.contains(".spec.replicas"), "{}", echo.message);
        assert_eq!(scale(400), None, "two of three");
        let fight = scale(500).expect("then the fight");
        assert!(fight.new, "a write not named yet makes a new report");
        let (first, second) = fight
            .message
            .split_once("; ")
            .unwrap_or_else(|| panic!("both named: {}", fight.message));
        assert!(
            first.contains("Deployment d/web .spec.replicas set to 3 each time, and changed back each time by fighter (Update)"),
            "the fight first: {}",
            fight.message
        );
        assert!(
            second.contains("PodSet d/web .status.podNames set to [a]"),
            "{second}"
        );
        assert!(!status(600).unwrap().new, "nothing new to name");
        assert_eq!(watch.counts()["podset"], 1, "one loop");
    }

    #[test]
    fn new_values_each_time_are_no_loop_and_a_value_the_server_normalizes_is() {
        let watch = watch();
        for (i, at) in (0..6).zip((0..).step_by(500)) {
            let written = set(".status.pods", &i.to_string(), &(i + 1).to_string());
            assert_eq!(
                watch.observe(
                    "podset",
                    "podset",
                    "PodSet d/web",
                    at,
                    &Causes::default(),
                    &[written]
                ),
                None,
                "a status listing pods as they come"
            );
        }
        let normalized = Written {
            verb: "apply status",
            object: deployment(),
            result: WriteResult::Unchanged {
                not_as_sent: vec![field(".status.ratio", "1.0", "1")],
                more: 0,
            },
        };
        let found = (0..3)
            .filter_map(|i| {
                watch.observe(
                    "x",
                    "x",
                    "X d/a",
                    i * 100,
                    &Causes::default(),
                    std::slice::from_ref(&normalized),
                )
            })
            .next()
            .expect("a loop");
        assert!(
            found
                .message
                .contains("sent as 1.0 each time, and the API server keeps it as 1"),
            "{}",
            found.message
        );
        let off = LoopWatch::default();
        off.set_rule(LoopRule {
            repeats: 0,
            window: Duration::from_secs(10),
        });
        assert_eq!(
            off.observe(
                "x",
                "x",
                "X d/a",
                0,
                &Causes::default(),
                std::slice::from_ref(&normalized)
            ),
            None
        );
    }
}
