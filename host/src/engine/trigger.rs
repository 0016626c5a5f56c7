//! The first stage: from a watch event to the cache and the queues.
//!
//! Every event goes into the one cache, then to each plugin it concerns
//! ([`event_mapping`](super::event_mapping) says which primaries), within
//! the plugin's selector. A change of a primary itself queues it at once;
//! one of a child or a read object waits for the coalescing window, so a
//! burst of such changes (a ReplicaSet creating its Pods) is one reconcile
//! and one status write. An object the cluster deleted takes with it what
//! the engine remembered about it.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use reconciler_contract::KindRef;
use reconciler_contract::memory_cache::resource_version_of;
use reconciler_contract::triggers;

use super::cause::{Cause, ChangedFields};
use super::controllers::Controller;
use super::event_mapping;
use super::field_diff;
use super::scope::PrimarySelectors;
use super::shared::Shared;
use super::shared_cache::SharedCache;
use super::work_queue::{PrimaryKey, WorkQueue};
use crate::cluster::{ClusterBackend, ListedObject, ObjectKey, WatchEvent, WatchEventType};

/// How the trigger queues what a change concerns.
#[derive(Clone, Copy, Debug, Default)]
pub struct Trigger {
    /// How long a change of a child or read object waits for others before
    /// its primary is reconciled; zero: at once.
    coalesce: Duration,
}

impl Trigger {
    pub fn new(coalesce: Duration) -> Self {
        Self { coalesce }
    }

    /// Queues `key` after a change seen at `now`: at once when it is of the
    /// primary itself (or nothing is coalesced), otherwise at the end of the
    /// window, with every other change that comes in it.
    pub fn enqueue(
        &self,
        queue: &mut WorkQueue,
        key: PrimaryKey,
        of_primary: bool,
        now: i64,
        cause: Cause,
    ) {
        let window = i64::try_from(self.coalesce.as_millis()).unwrap_or(i64::MAX);
        if of_primary || window == 0 {
            queue.add(key, now, cause);
        } else {
            queue.add_coalesced(key, now.saturating_add(window), cause);
        }
    }

    /// Takes one watch event into the cache and the queues. Returns the key
    /// of the object it deletes, for [`forget_objects`].
    pub fn observe<B: ClusterBackend>(
        &self,
        shared: &Shared<B>,
        event: &WatchEvent,
        now: i64,
    ) -> Option<ObjectKey> {
        let kind = KindRef::of_object(&event.object);
        let controllers = shared.controllers.all();
        let before = held_before(shared, &controllers, event, kind.as_ref());
        let replaced = shared.cache.observe(event);
        // The text it replaced, not parsed unless a cause is made: the
        // journal tells which fields a change changed.
        let journal_before = replaced.filter(|_| {
            before.is_none()
                && event.event_type == WatchEventType::Modified
                && shared.journal.is_on()
        });
        // Made once, for the first plugin that queues something.
        let mut cause = None;
        for (name, c) in controllers {
            let plugin = c.plugin();
            let primary = &plugin.metadata().primary;
            let of_primary = kind.as_ref() == Some(primary);
            let filtered = kind.as_ref().and_then(|k| plugin.metadata().trigger_of(k));
            if let (Some(changes), Some(before)) = (filtered, &before)
                && !triggers::wakes(changes, before, &event.object)
            {
                continue;
            }
            let keys = event_mapping::primaries_for(
                plugin.metadata(),
                shared.kind_scopes.scope_of(primary),
                &event.object,
            );
            let selectors = &shared.scope.selectors;
            let keys: Vec<PrimaryKey> = keys
                .into_iter()
                .filter(|key| in_scope(selectors, &shared.cache, &name, primary, key))
                .collect();
            if !keys.is_empty() {
                let cause = cause.get_or_insert_with(|| {
                    let parsed = journal_before
                        .as_deref()
                        .and_then(|text| serde_json::from_str(text).ok());
                    let before = before.as_ref().or(parsed.as_ref());
                    cause_of(event, kind.as_ref(), before, shared.journal.is_on())
                });
                let mut state = c.state();
                for key in keys {
                    self.enqueue(&mut state.queue, key, of_primary, now, cause.clone());
                }
            }
        }
        match event.event_type {
            WatchEventType::Deleted => ObjectKey::of(&event.object),
            _ => None,
        }
    }

    /// Takes watch events delivered by `now` into the cache and the queues.
    pub fn take_events<B: ClusterBackend>(
        &self,
        shared: &Shared<B>,
        events: &[WatchEvent],
        now: i64,
    ) {
        let gone: HashSet<ObjectKey> = events
            .iter()
            .filter_map(|event| self.observe(shared, event, now))
            .collect();
        forget_objects(shared, &gone);
    }

    /// Takes a watch's first list into the cache. After a re-watch, cached
    /// objects missing from the list are gone; with `keep_current`, those
    /// listed at the version cached are not changes.
    pub fn take_list<B: ClusterBackend>(
        &self,
        shared: &Shared<B>,
        kind: &KindRef,
        list: Vec<ListedObject>,
        rewatch: bool,
        keep_current: bool,
    ) {
        let now = shared.now();
        let mut listed = BTreeSet::new();
        // One object parsed at a time: the list stays text until cached.
        for object in list {
            let event = object.into_event();
            if rewatch && let Some(key) = ObjectKey::of(&event.object) {
                // Unchanged since it was cached: nothing to reconcile. A
                // re-watch for a new shard selector lists every object this
                // replica kept, and reconciling them all would be a storm.
                let version = resource_version_of(&event.object);
                let unchanged = keep_current
                    && version.is_some()
                    && shared
                        .cache
                        .get(&key)
                        .is_some_and(|cached| resource_version_of(&cached) == version);
                listed.insert(key);
                if unchanged {
                    continue;
                }
            }
            self.observe(shared, &event, now);
        }
        if rewatch {
            let mut gone = HashSet::new();
            for object in shared.cache.list(kind) {
                if ObjectKey::of(&object).is_some_and(|k| !listed.contains(&k)) {
                    let event = WatchEvent::new(WatchEventType::Deleted, object);
                    gone.extend(self.observe(shared, &event, now));
                }
            }
            forget_objects(shared, &gone);
        }
    }

    /// Takes out of the cache every object of `kind` labelled with one of
    /// `buckets`, which left this replica: as if deleted, without a list.
    pub fn take_departed<B: ClusterBackend>(
        &self,
        shared: &Shared<B>,
        kind: &KindRef,
        buckets: &BTreeSet<String>,
    ) {
        let now = shared.now();
        let mut gone = HashSet::new();
        for object in shared.cache.list(kind) {
            let label = crate::engine::shard_selection::label_of(&object);
            if label.is_some_and(|l| buckets.contains(l)) {
                let event = WatchEvent::new(WatchEventType::Deleted, object);
                gone.extend(self.observe(shared, &event, now));
            }
        }
        forget_objects(shared, &gone);
    }
}

/// The cause a watch event gives the primaries it queues.
fn cause_of(
    event: &WatchEvent,
    kind: Option<&KindRef>,
    before: Option<&serde_json::Value>,
    with_fields: bool,
) -> Cause {
    let metadata = &event.object["metadata"];
    let fields =
        match (before, event.event_type) {
            (Some(before), WatchEventType::Modified) if with_fields => Some(Box::new(
                changed_fields(before, &event.object, event.managed_fields()),
            )),
            _ => None,
        };
    let name = metadata["name"].as_str().unwrap_or("(unnamed)");
    let object = match metadata["namespace"].as_str() {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_string(),
    };
    Cause::Event {
        kind: kind.map_or_else(|| "(no kind)".to_string(), |k| k.kind.clone()),
        object,
        change: event.event_type,
        fields,
    }
}

/// What changed from `before` to `after`, with the managers of those
/// fields in `managed_fields` (`after`'s, which the watch carried beside
/// it; the cache never holds them).
fn changed_fields(
    before: &serde_json::Value,
    after: &serde_json::Value,
    managed_fields: Option<&str>,
) -> ChangedFields {
    let (fields, more) = field_diff::diff(before, after);
    let kind = after["kind"].as_str().unwrap_or_default();
    let fields = field_diff::redacted(kind, fields);
    let paths: Vec<&str> = fields.iter().map(|f| f.path.as_str()).collect();
    let by = match managed_fields {
        Some(text) if !paths.is_empty() => field_diff::managers_of(text, &paths),
        _ => Vec::new(),
    };
    ChangedFields { fields, more, by }
}

/// Forgets what the engine remembered about objects the cluster deleted:
/// what it last applied to them, and their Event series. A child the
/// garbage collector takes with its primary is never pruned or deleted by
/// the host, so this is the only place it is forgotten; a primary's queue
/// state goes when its reconcile finds it gone.
pub fn forget_objects<B: ClusterBackend>(shared: &Shared<B>, gone: &HashSet<ObjectKey>) {
    if gone.is_empty() {
        return;
    }
    shared.controllers.forget_applied(gone);
    shared.events.forget_objects(gone);
}

/// The object as the cache held it before `event`, when some plugin's
/// trigger filter needs to compare it with the event's: `None` for a
/// deletion and for an object not held before (both always wake), and
/// when no plugin filters changes of the event's kind (nothing is parsed).
fn held_before<B: ClusterBackend>(
    shared: &Shared<B>,
    controllers: &[(String, Arc<Controller>)],
    event: &WatchEvent,
    kind: Option<&KindRef>,
) -> Option<serde_json::Value> {
    if event.event_type == WatchEventType::Deleted {
        return None;
    }
    let kind = kind?;
    let filtered = controllers
        .iter()
        .any(|(_, c)| c.plugin().metadata().trigger_of(kind).is_some());
    if !filtered {
        return None;
    }
    let json = shared.cache.json_of(&ObjectKey::of(&event.object)?)?;
    serde_json::from_str(&json).ok()
}

/// Whether `plugin` reconciles the primary `key` names: it is cached and
/// matches the plugin's selector. A primary no longer cached passes, so its
/// reconcile can find it gone.
pub fn in_scope(
    selectors: &PrimarySelectors,
    cache: &SharedCache,
    plugin: &str,
    primary: &KindRef,
    key: &PrimaryKey,
) -> bool {
    // Without a selector, nothing to read: this runs for every watch event.
    let Some(selector) = selectors.for_plugin(plugin) else {
        return true;
    };
    let key = ObjectKey::new(primary.clone(), key.namespace.as_deref(), &key.name);
    cache
        .get(&key)
        .is_none_or(|object| selector.matches_object(&object))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn key(name: &str) -> PrimaryKey {
        PrimaryKey::new(Some("default"), name)
    }

    #[test]
    fn a_primary_change_is_queued_at_once_and_a_child_change_at_the_end_of_the_window() {
        let trigger = Trigger::new(Duration::from_millis(500));
        let mut queue = WorkQueue::new();
        trigger.enqueue(
            &mut queue,
            key("child-changed"),
            false,
            1_000,
            Cause::Requeue,
        );
        assert_eq!(queue.next_ready_at(), Some(1_500));
        // More changes in the window ride on the one reconcile at its end.
        trigger.enqueue(
            &mut queue,
            key("child-changed"),
            false,
            1_200,
            Cause::Requeue,
        );
        assert_eq!(queue.pop_ready(1_499), None);
        assert_eq!(queue.pop_ready(1_500), Some(key("child-changed")));
        assert_eq!(queue.next_ready_at(), None, "one reconcile for the burst");

        trigger.enqueue(
            &mut queue,
            key("primary-changed"),
            true,
            2_000,
            Cause::Requeue,
        );
        assert_eq!(queue.pop_ready(2_000), Some(key("primary-changed")));
    }

    #[test]
    fn without_a_window_every_change_is_queued_at_once() {
        let trigger = Trigger::default();
        let mut queue = WorkQueue::new();
        trigger.enqueue(&mut queue, key("web"), false, 1_000, Cause::Requeue);
        assert_eq!(queue.pop_ready(1_000), Some(key("web")));
    }

    #[test]
    fn a_primary_outside_the_plugins_selector_is_not_its_to_reconcile_unless_it_is_gone() {
        let podset = KindRef::new("example.com", "v1", "PodSet");
        let cache = SharedCache::new();
        for (name, tier) in [("web", "front"), ("db", "back")] {
            cache.observe(&WatchEvent::new(
                WatchEventType::Added,
                json!({"apiVersion": "example.com/v1", "kind": "PodSet",
                    "metadata": {"name": name, "namespace": "default", "labels": {"tier": tier}}}),
            ));
        }
        let selectors = PrimarySelectors::parse(["podset:tier=front"]).unwrap();
        let admits =
            |plugin: &str, name: &str| in_scope(&selectors, &cache, plugin, &podset, &key(name));
        assert!(admits("podset", "web"));
        assert!(!admits("podset", "db"));
        assert!(
            admits("podset", "deleted-since"),
            "its reconcile finds it gone"
        );
        assert!(admits("other", "db"), "no selector of its own");
    }
}
