//! Finalizers across plugin versions: what happens to objects that carry a
//! finalizer the plugin serving them no longer declares.
//!
//! The host adds a plugin's finalizer to its primaries and removes it only
//! when the plugin reports `finalized`. A new version that renames or drops
//! its finalizer, or a plugin that is removed, would leave objects whose
//! deletion (and their namespace's) waits for ever on a finalizer nobody
//! removes. So:
//!
//! 1. On reload, when the new version's finalizer differs from the old one's,
//!    the old one is *superseded*: the engine keeps it, per plugin, among the
//!    finalizers the plugin answers for.
//!    - A live object loses the superseded finalizer at once; its next
//!      reconcile adds the new one, if there is one
//!      ([`Handover::ReleaseLive`]).
//!    - A deleting object is *handed over* when the new version declares a
//!      finalizer: the new version reconciles it, and when it reports
//!      `finalized` the superseded finalizers go with its own
//!      ([`Handover::HandOver`]; the planner removes them).
//!    - A deleting object is released at once when the new version declares
//!      none (or serves another primary kind): no version will ever report
//!      its cleanup done ([`Handover::ReleaseDeleting`]).
//!
//!    Each object gets a Normal Event saying what happened and why
//!    ([`handover_event`]); the reload's log line says how many objects each
//!    case concerned ([`FinalizerHandover`]).
//! 2. On removal of a plugin nothing is removed (the plugin may come back),
//!    but the objects still carrying its finalizers are listed once, each with
//!    the kubectl command that releases it ([`FinalizerHold`]).
//!
//! Caveat: the superseded set lives in memory. A host restarted while a
//! handed-over object is still deleting no longer knows the old finalizer;
//! that object then waits like one of a removed plugin.

use std::collections::BTreeSet;
use std::fmt;

use reconciler_contract::memory_cache::{finalizers_of, is_deleting};
use serde_json::{Value, json};

use super::plan::has_finalizer;
use crate::cluster::ObjectKey;

/// What a reload does to one object carrying superseded finalizers (each
/// variant holds the ones it carries, sorted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Handover {
    /// A live object: they are removed now.
    ReleaseLive(Vec<String>),
    /// A deleting object no version will finalize: they are removed now.
    ReleaseDeleting(Vec<String>),
    /// A deleting object the new version finalizes: they are removed with
    /// its own finalizer when it reports `finalized`.
    HandOver(Vec<String>),
}

impl Handover {
    /// What a reload to a version declaring `successor` (`None`: no
    /// finalizer, or not serving this object's kind) does to `object`, if it
    /// carries any of `stale`.
    pub fn of(object: &Value, stale: &BTreeSet<String>, successor: Option<&str>) -> Option<Self> {
        let carried: Vec<String> = stale
            .iter()
            .filter(|f| has_finalizer(object, f))
            .cloned()
            .collect();
        if carried.is_empty() {
            return None;
        }
        Some(match (is_deleting(object), successor) {
            (false, _) => Handover::ReleaseLive(carried),
            (true, None) => Handover::ReleaseDeleting(carried),
            (true, Some(_)) => Handover::HandOver(carried),
        })
    }

    /// The finalizers to remove now.
    pub fn to_remove(&self) -> &[String] {
        match self {
            Handover::ReleaseLive(f) | Handover::ReleaseDeleting(f) => f,
            Handover::HandOver(_) => &[],
        }
    }
}

/// The Event (reason, message) recorded on an object for `handover` by
/// `plugin` at `version`, which declares `successor`.
pub fn handover_event(
    handover: &Handover,
    plugin: &str,
    version: &str,
    successor: Option<&str>,
) -> (&'static str, String) {
    match (handover, successor) {
        (Handover::ReleaseLive(old), Some(new)) => (
            "FinalizerReplaced",
            format!(
                "plugin {plugin} {version} declares finalizer {new} instead of {}: removed {} from this object; its next reconcile adds {new}",
                old.join(", "),
                old.join(", ")
            ),
        ),
        (Handover::ReleaseLive(old), None) => (
            "FinalizerRemoved",
            format!(
                "plugin {plugin} {version} declares no finalizer for this object: removed {}, which an earlier version added",
                old.join(", ")
            ),
        ),
        (Handover::ReleaseDeleting(old), _) => (
            "FinalizerRemoved",
            format!(
                "plugin {plugin} {version} declares no finalizer for this object: removed {} so its deletion can finish (no cleanup runs for it)",
                old.join(", ")
            ),
        ),
        (Handover::HandOver(old), new) => (
            "FinalizerHandedOver",
            format!(
                "plugin {plugin} {version} finalizes this object in place of the version that added {}: {} is removed once {plugin} reports its cleanup done{}",
                old.join(", "),
                old.join(", "),
                new.map(|n| format!(" (its own finalizer is {n})"))
                    .unwrap_or_default()
            ),
        ),
    }
}

/// What a reload did about superseded finalizers, for its log line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FinalizerHandover {
    /// The version now serving.
    pub version: String,
    /// Finalizers no longer declared, sorted.
    pub old: Vec<String>,
    /// The new version's finalizer, when it serves the same primary kind.
    pub new: Option<String>,
    /// Live objects the old finalizers were removed from.
    pub released_live: usize,
    /// Deleting objects released at once.
    pub released_deleting: usize,
    /// Deleting objects the new version now finalizes.
    pub handed_over: usize,
    /// Objects whose finalizer could not be removed, and why (with the
    /// command that releases each by hand).
    pub failed: Vec<(ObjectKey, String)>,
}

impl FinalizerHandover {
    pub fn count(&mut self, handover: &Handover) {
        match handover {
            Handover::ReleaseLive(_) => self.released_live += 1,
            Handover::ReleaseDeleting(_) => self.released_deleting += 1,
            Handover::HandOver(_) => self.handed_over += 1,
        }
    }
}

impl fmt::Display for FinalizerHandover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let old = self.old.join(", ");
        match &self.new {
            Some(new) => write!(
                f,
                "finalizer {old} -> {new}: removed from {} live object(s), {} deleting object(s) wait for {} to finalize them",
                self.released_live, self.handed_over, self.version
            )?,
            None => write!(
                f,
                "finalizer {old} dropped: released {} object(s) ({} live, {} deleting)",
                self.released_live + self.released_deleting,
                self.released_live,
                self.released_deleting
            )?,
        }
        if !self.failed.is_empty() {
            let failed: Vec<String> = self
                .failed
                .iter()
                .map(|(key, why)| format!("{key}: {why}"))
                .collect();
            write!(
                f,
                "; could not release {} object(s): {}",
                self.failed.len(),
                failed.join("; ")
            )?;
        }
        Ok(())
    }
}

/// An object that still carries finalizers of a plugin no longer served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinalizerHold {
    pub key: ObjectKey,
    pub deleting: bool,
    /// Every finalizer on the object, in order.
    pub finalizers: Vec<String>,
    /// The plugin's among them.
    pub held_by: Vec<String>,
}

impl FinalizerHold {
    /// The hold of `object`, if it carries any of `ours`.
    pub fn of(object: &Value, ours: &BTreeSet<String>) -> Option<Self> {
        let key = ObjectKey::of(object)?;
        let finalizers: Vec<String> = finalizers_of(object)
            .into_iter()
            .map(str::to_string)
            .collect();
        let held_by: Vec<String> = finalizers
            .iter()
            .filter(|f| ours.contains(*f))
            .cloned()
            .collect();
        (!held_by.is_empty()).then(|| Self {
            key,
            deleting: is_deleting(object),
            finalizers,
            held_by,
        })
    }

    /// The kubectl command that removes the plugin's finalizers from the
    /// object: a JSON patch whose `test` operations make it fail, removing
    /// nothing, if the list changed since this was printed (so another
    /// controller's finalizer is never removed by mistake).
    pub fn release_command(&self) -> String {
        let mut operations = Vec::new();
        // From the end, so each index still points where it did.
        for (index, finalizer) in self.finalizers.iter().enumerate().rev() {
            if self.held_by.contains(finalizer) {
                let path = format!("/metadata/finalizers/{index}");
                operations.push(json!({"op": "test", "path": path, "value": finalizer}));
                operations.push(json!({"op": "remove", "path": path}));
            }
        }
        let kind = &self.key.kind;
        let resource = if kind.group.is_empty() {
            kind.kind.to_lowercase()
        } else {
            format!(
                "{}.{}.{}",
                kind.kind.to_lowercase(),
                kind.version,
                kind.group
            )
        };
        let namespace = self
            .key
            .namespace
            .as_ref()
            .map(|ns| format!(" -n {ns}"))
            .unwrap_or_default();
        format!(
            "kubectl patch {resource} {}{namespace} --type=json -p '{}'",
            self.key.name,
            Value::Array(operations)
        )
    }
}

/// The lines that tell a user which objects a removed plugin's finalizers
/// still hold, and how to release each; empty when none.
pub fn holds_text(plugin: &str, holds: &[FinalizerHold]) -> String {
    if holds.is_empty() {
        return String::new();
    }
    let finalizers: BTreeSet<&str> = holds
        .iter()
        .flat_map(|h| h.held_by.iter().map(String::as_str))
        .collect();
    let mut text = format!(
        "{} object(s) still carry the finalizer {} of plugin {plugin}; nothing removes it until a plugin serving them is loaded again. Deleting them (or their namespace) waits until then, or until you release them:",
        holds.len(),
        finalizers.into_iter().collect::<Vec<_>>().join(", "),
    );
    for hold in holds {
        let state = if hold.deleting { " (deleting)" } else { "" };
        text.push_str(&format!(
            "\n  {}{state}: {}",
            hold.key,
            hold.release_command()
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use reconciler_contract::KindRef;

    use super::*;

    fn object(finalizers: &[&str], deleting: bool) -> Value {
        let mut o = json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
            "metadata": {"name": "web", "namespace": "team-a", "finalizers": finalizers}});
        if deleting {
            o["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        }
        o
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_live_object_loses_a_superseded_finalizer_and_a_deleting_one_is_handed_over() {
        let stale = set(&["example.com/cleanup"]);
        let new = Some("example.com/cleanup-v2");
        let live = object(&["other.io/keep", "example.com/cleanup"], false);
        assert_eq!(
            Handover::of(&live, &stale, new),
            Some(Handover::ReleaseLive(vec!["example.com/cleanup".into()]))
        );
        let deleting = object(&["example.com/cleanup"], true);
        let handed = Handover::of(&deleting, &stale, new).unwrap();
        assert_eq!(
            handed,
            Handover::HandOver(vec!["example.com/cleanup".into()])
        );
        assert!(
            handed.to_remove().is_empty(),
            "removed only when the new version says finalized"
        );
        assert_eq!(
            Handover::of(&object(&["other.io/keep"], true), &stale, new),
            None,
            "an object without it is left alone"
        );
    }

    #[test]
    fn without_a_successor_a_deleting_object_is_released_at_once() {
        let stale = set(&["example.com/cleanup"]);
        let deleting = object(&["example.com/cleanup"], true);
        let handover = Handover::of(&deleting, &stale, None).unwrap();
        assert_eq!(handover.to_remove(), ["example.com/cleanup".to_string()]);
        let (reason, message) = handover_event(&handover, "podset", "0.3.0", None);
        assert_eq!(reason, "FinalizerRemoved");
        assert!(
            message.contains("podset 0.3.0 declares no finalizer")
                && message.contains("removed example.com/cleanup"),
            "{message}"
        );
    }

    #[test]
    fn each_event_names_the_old_and_new_finalizer_and_the_version() {
        let old = vec!["example.com/cleanup".to_string()];
        let new = Some("example.com/cleanup-v2");
        for (handover, expected_reason) in [
            (Handover::ReleaseLive(old.clone()), "FinalizerReplaced"),
            (Handover::HandOver(old.clone()), "FinalizerHandedOver"),
        ] {
            let (reason, message) = handover_event(&handover, "podset", "0.2.0", new);
            assert_eq!(reason, expected_reason);
            assert!(
                message.contains("example.com/cleanup-v2")
                    && message.contains("example.com/cleanup ")
                    && message.contains("podset 0.2.0"),
                "{message}"
            );
        }
    }

    #[test]
    fn the_summary_counts_each_case() {
        let mut summary = FinalizerHandover {
            version: "0.2.0".into(),
            old: vec!["example.com/cleanup".into()],
            new: Some("example.com/cleanup-v2".into()),
            ..FinalizerHandover::default()
        };
        summary.count(&Handover::ReleaseLive(vec![]));
        summary.count(&Handover::ReleaseLive(vec![]));
        summary.count(&Handover::HandOver(vec![]));
        assert_eq!(
            summary.to_string(),
            "finalizer example.com/cleanup -> example.com/cleanup-v2: removed from 2 live object(s), 1 deleting object(s) wait for 0.2.0 to finalize them"
        );
        summary.new = None;
        assert_eq!(
            summary.to_string(),
            "finalizer example.com/cleanup dropped: released 2 object(s) (2 live, 0 deleting)"
        );
        summary.failed.push((
            ObjectKey::new(
                KindRef::new("example.com", "v1alpha1", "PodSet"),
                Some("team-a"),
                "web",
            ),
            "forbidden (release it with: kubectl patch ...)".into(),
        ));
        assert!(
            summary.to_string().ends_with(
                "; could not release 1 object(s): PodSet team-a/web: forbidden (release it with: kubectl patch ...)"
            ),
            "{summary}"
        );
    }

    #[test]
    fn the_release_command_removes_only_the_plugins_finalizers_guarded_by_tests() {
        let ours = set(&["example.com/cleanup", "example.com/old"]);
        let o = object(
            &["example.com/old", "other.io/keep", "example.com/cleanup"],
            true,
        );
        let hold = FinalizerHold::of(&o, &ours).unwrap();
        assert!(hold.deleting);
        assert_eq!(
            hold.release_command(),
            r#"kubectl patch podset.v1alpha1.example.com web -n team-a --type=json -p '[{"op":"test","path":"/metadata/finalizers/2","value":"example.com/cleanup"},{"op":"remove","path":"/metadata/finalizers/2"},{"op":"test","path":"/metadata/finalizers/0","value":"example.com/old"},{"op":"remove","path":"/metadata/finalizers/0"}]'"#
        );
        assert_eq!(
            FinalizerHold::of(&object(&["other.io/keep"], false), &ours),
            None
        );
    }

    #[test]
    fn core_and_cluster_scoped_kinds_are_named_as_kubectl_knows_them() {
        let hold = FinalizerHold {
            key: ObjectKey::new(KindRef::new("", "v1", "Namespace"), None, "team-a"),
            deleting: false,
            finalizers: vec!["example.com/x".into()],
            held_by: vec!["example.com/x".into()],
        };
        assert!(
            hold.release_command()
                .starts_with("kubectl patch namespace team-a --type=json -p '[{"),
            "{}",
            hold.release_command()
        );
    }

    #[test]
    fn the_holds_text_lists_each_object_with_its_command() {
        let ours = set(&["example.com/cleanup"]);
        let holds: Vec<FinalizerHold> = [
            object(&["example.com/cleanup"], true),
            object(&["example.com/cleanup"], false),
        ]
        .iter()
        .filter_map(|o| FinalizerHold::of(o, &ours))
        .collect();
        let text = holds_text("podset", &holds);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].starts_with(
                "2 object(s) still carry the finalizer example.com/cleanup of plugin podset"
            ),
            "{text}"
        );
        assert!(
            lines[1].starts_with("  PodSet team-a/web (deleting): kubectl patch"),
            "{text}"
        );
        assert!(holds_text("podset", &[]).is_empty());
    }
}
