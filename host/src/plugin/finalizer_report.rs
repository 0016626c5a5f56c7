//! What a plugin host tells about the finalizers of a plugin's objects
//! when the plugin changes.
//!
//! A new version that renames or drops its finalizer, or a plugin that is
//! removed, leaves objects carrying a finalizer nobody will remove. The
//! host deals with them (the engine's `finalizer_handover`); the plugins
//! directory reports what it did on the reload's line
//! ([`FinalizerHandover`]) and, when a plugin goes, which objects still
//! wait and the kubectl command that releases each ([`FinalizerHold`],
//! [`holds_text`]). These are the words of that report, so they live
//! with the directory that prints them.

use std::collections::BTreeSet;
use std::fmt;

use reconciler_contract::memory_cache::{finalizers_of, is_deleting};
use serde_json::{Value, json};

use crate::cluster::ObjectKey;

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
pub(crate) mod tests {
    use reconciler_contract::KindRef;

    use super::*;

    /// A PodSet carrying `finalizers`, deleting or not (the engine's
    /// hand-over tests use it too).
    pub(crate) fn object(finalizers: &[&str], deleting: bool) -> Value {
        let mut o = json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
            "metadata": {"name": "web", "namespace": "team-a", "finalizers": finalizers}});
        if deleting {
            o["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        }
        o
    }

    pub(crate) fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
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
