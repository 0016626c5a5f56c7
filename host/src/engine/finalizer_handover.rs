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
//!    case concerned ([`FinalizerHandover`], reported by the plugins
//!    directory, which defines it).
//! 2. On removal of a plugin nothing is removed (the plugin may come back),
//!    but the objects still carrying its finalizers are listed once, each with
//!    the kubectl command that releases it ([`FinalizerHold`]).
//!
//! Caveat: the superseded set lives in memory. A host restarted while a
//! handed-over object is still deleting no longer knows the old finalizer;
//! that object then waits like one of a removed plugin.

use std::collections::BTreeSet;

use reconciler_contract::memory_cache::is_deleting;
use reconciler_contract::{EventType, PluginMetadata};
use serde_json::Value;

use super::controllers::Controller;
use super::plan::{has_finalizer, uid_of};
use super::shared::Shared;
use crate::cluster::{BackendError, ClusterBackend, EventRecord, ObjectKey};
use crate::plugin::finalizer_report::{FinalizerHandover, FinalizerHold};

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

impl Handover {
    /// Counts this object in the reload's `summary`.
    pub fn tally(&self, summary: &mut FinalizerHandover) {
        match self {
            Handover::ReleaseLive(_) => summary.released_live += 1,
            Handover::ReleaseDeleting(_) => summary.released_deleting += 1,
            Handover::HandOver(_) => summary.handed_over += 1,
        }
    }
}

/// What a reload from `before` to `after` makes of the finalizers a plugin
/// answers for.
#[derive(Debug, PartialEq, Eq)]
pub struct Superseding {
    /// The finalizers stale for objects of the old primary kind.
    pub stale: BTreeSet<String>,
    /// The one that now finalizes them, if any.
    pub successor: Option<String>,
    /// Whether the finalizer changed at all: nothing is handed over if not.
    pub changed: bool,
}

/// Adds the old version's finalizer to the `superseded` ones the plugin
/// answers for (the new version's own is never among them), and says what
/// is stale for the old primary kind.
pub fn supersede(
    superseded: &mut BTreeSet<String>,
    before: &PluginMetadata,
    after: &PluginMetadata,
) -> Superseding {
    let same_primary = before.primary.same_group_kind(&after.primary);
    let changed =
        before.finalizer.is_some() && (before.finalizer != after.finalizer || !same_primary);
    superseded.extend(before.finalizer.iter().cloned());
    let mut stale = superseded.clone();
    if let Some(current) = &after.finalizer {
        superseded.remove(current);
        if same_primary {
            stale.remove(current);
        }
    }
    Superseding {
        stale,
        successor: after.finalizer.clone().filter(|_| same_primary),
        changed,
    }
}

/// Deals with the objects of the version `before` that carry a finalizer
/// `after` no longer declares: live ones lose it, deleting ones are handed
/// over to `after` (or released, when it will never finalize them), each
/// with an Event. `None` when the finalizer did not change.
pub async fn hand_over<B: ClusterBackend>(
    shared: &Shared<B>,
    controller: &Controller,
    before: &PluginMetadata,
    after: &PluginMetadata,
) -> Option<FinalizerHandover> {
    let superseding = supersede(&mut controller.state().superseded_finalizers, before, after);
    if !superseding.changed {
        return None;
    }
    let mut summary = FinalizerHandover {
        version: after.version.clone(),
        old: superseding.stale.iter().cloned().collect(),
        new: superseding.successor.clone(),
        ..FinalizerHandover::default()
    };
    for object in shared.cache.list(&before.primary) {
        if shared.scope.selectors.admits(&before.name, &object) {
            hand_over_object(shared, after, &object, &superseding, &mut summary).await;
        }
    }
    Some(summary)
}

/// Hands over one object, if it carries a stale finalizer, counting it in
/// `summary` (or its failure, with how to release it by hand).
async fn hand_over_object<B: ClusterBackend>(
    shared: &Shared<B>,
    after: &PluginMetadata,
    object: &Value,
    superseding: &Superseding,
    summary: &mut FinalizerHandover,
) {
    let successor = superseding.successor.as_deref();
    let (Some(key), Some(handover)) = (
        ObjectKey::of(object),
        Handover::of(object, &superseding.stale, successor),
    ) else {
        return;
    };
    if let Err(e) = release(&*shared.backend, &key, &handover).await {
        // Reloading the same file again does nothing: say how to release
        // it by hand.
        let releasing: BTreeSet<String> = handover.to_remove().iter().cloned().collect();
        let why = match FinalizerHold::of(object, &releasing) {
            Some(hold) => format!("{e} (release it with: {})", hold.release_command()),
            None => e.to_string(),
        };
        tracing::warn!(plugin = %after.name, object = %key, "cannot remove the finalizer of an earlier version: {why}");
        summary.failed.push((key, why));
        return;
    }
    handover.tally(summary);
    let (reason, message) = handover_event(&handover, &after.name, &after.version, successor);
    let record = EventRecord {
        regarding: key,
        regarding_uid: uid_of(object),
        event_type: EventType::Normal,
        reason: reason.to_string(),
        message,
        reporting_controller: after.field_manager(),
    };
    // Through the recorder, like every Event the host makes.
    if let Err(e) = shared.record_event(record).await {
        tracing::warn!("cannot record event {reason}: {e}");
    }
}

/// Removes the finalizers `handover` releases now.
async fn release<B: ClusterBackend>(
    backend: &B,
    key: &ObjectKey,
    handover: &Handover,
) -> Result<(), BackendError> {
    for finalizer in handover.to_remove() {
        backend.remove_finalizer(key, finalizer).await?;
    }
    Ok(())
}

/// The objects still carrying a finalizer the plugin `name` (served by
/// `controller`) answers for, its own and superseded ones, each with what
/// releases it: what to tell a user about before the plugin is removed.
pub fn holds<B: ClusterBackend>(
    shared: &Shared<B>,
    name: &str,
    controller: &Controller,
) -> Vec<FinalizerHold> {
    let plugin = controller.plugin();
    let metadata = plugin.metadata();
    let mut ours = controller.state().superseded_finalizers.clone();
    ours.extend(metadata.finalizer.iter().cloned());
    if ours.is_empty() {
        return Vec::new();
    }
    shared
        .cache
        .list(&metadata.primary)
        .iter()
        .filter(|object| shared.scope.selectors.admits(name, object))
        .filter_map(|object| FinalizerHold::of(object, &ours))
        .collect()
}

#[cfg(test)]
mod tests {
    use reconciler_contract::KindRef;

    use super::*;
    use crate::cluster::ObjectKey;
    use crate::plugin::finalizer_report::tests::{object, set};

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
        Handover::ReleaseLive(vec![]).tally(&mut summary);
        Handover::ReleaseLive(vec![]).tally(&mut summary);
        Handover::HandOver(vec![]).tally(&mut summary);
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

    fn version(finalizer: Option<&str>, primary: &str) -> PluginMetadata {
        let mut metadata = PluginMetadata::new(
            "podset",
            "2",
            KindRef::new("example.com", primary, "PodSet"),
        );
        metadata.finalizer = finalizer.map(str::to_string);
        metadata
    }

    #[test]
    fn a_renamed_finalizer_is_superseded_and_handed_to_the_new_one() {
        let mut superseded = BTreeSet::new();
        let old = version(Some("example.com/cleanup"), "v1");
        let renamed = version(Some("example.com/cleanup-v2"), "v1");
        let superseding = supersede(&mut superseded, &old, &renamed);
        assert_eq!(
            superseding,
            Superseding {
                stale: set(&["example.com/cleanup"]),
                successor: Some("example.com/cleanup-v2".into()),
                changed: true,
            }
        );
        assert_eq!(superseded, set(&["example.com/cleanup"]));
        // Back to the first name: the plugin's own is never superseded.
        let back = supersede(&mut superseded, &renamed, &old);
        assert_eq!(superseded, set(&["example.com/cleanup-v2"]));
        assert_eq!(back.stale, set(&["example.com/cleanup-v2"]));
    }

    #[test]
    fn an_unchanged_finalizer_changes_nothing_and_another_primary_kind_has_no_successor() {
        let mut superseded = BTreeSet::new();
        let same = version(Some("example.com/cleanup"), "v1");
        assert!(!supersede(&mut superseded, &same, &same).changed);
        assert!(superseded.is_empty(), "its own finalizer");
        let elsewhere = PluginMetadata {
            primary: KindRef::new("other.example.com", "v1", "Pool"),
            ..same.clone()
        };
        let moved = supersede(&mut superseded, &same, &elsewhere);
        assert!(moved.changed);
        assert_eq!(moved.successor, None);
        assert_eq!(moved.stale, set(&["example.com/cleanup"]));
    }
}
