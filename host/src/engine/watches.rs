//! The watches an engine keeps, per kind: how each kind is watched (whole
//! or as metadata only, in which shard role), and the events they deliver
//! until the trigger takes them.
//!
//! A kind declared by several plugins is watched once, as metadata only
//! while every plugin declaring it reads it so; a plugin wanting whole
//! objects of such a kind has it watched again whole. Under sharding, a
//! kind whose role changes with a plugin is watched again with its new
//! selector, and only what changed since it was cached is reconciled.
//!
//! When the ring moves buckets, nothing is listed again but the buckets
//! that arrive: a kind keeps its watches, each stops taking the events of
//! the buckets that left (their objects leave the cache at once), and one
//! more watch, selecting the arriving buckets alone, lists them and
//! follows them. Each watch takes the events of the buckets it *covers*,
//! and no two cover the same bucket, so an object's changes come from one
//! watch, in order. Past [`MAX_WATCHES_PER_KIND`] watches of a kind, it is
//! watched again whole with the current selector (one full list).
//!
//! A watch's first list goes to the [`Trigger`] before its stream is kept
//! here, so nothing is missed between the two.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};

use reconciler_contract::selector::LabelSelector;
use reconciler_contract::{KindRef, PluginMetadata, Projection};
use tokio::sync::Notify;
use tokio::sync::mpsc::UnboundedReceiver;

use super::errors::EngineError;
use super::shard_labelling::ShardLabelling;
use super::shard_selection::{self, Buckets, ShardRole};
use super::shared::Shared;
use super::shared_cache::SharedCache;
use super::trigger::Trigger;
use crate::cluster::{
    ClusterBackend, ObjectKey, WatchEvent, WatchEventType, WatchScope, WatchStream,
};
use crate::plugin::LoadedPlugin;

/// The most watches one kind is followed by before it is watched again as
/// one (a full list): each ring change that brings buckets adds one.
pub const MAX_WATCHES_PER_KIND: usize = 6;

/// Which objects a watch's events are taken for, by their shard label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Coverage {
    /// Objects labelled with none of these buckets, unlabelled ones too.
    AllBut(BTreeSet<String>),
    /// Objects labelled with one of these buckets.
    Only(BTreeSet<String>),
}

impl Coverage {
    /// Every object.
    pub fn whole() -> Self {
        Coverage::AllBut(BTreeSet::new())
    }

    /// What a single watch of a kind in `role` (none: whole) covers, given
    /// `buckets`: as [`shard_selection::selector_of`] selects.
    pub fn of(role: Option<ShardRole>, buckets: &Buckets) -> Self {
        match role {
            Some(_) if buckets.others.is_empty() => Coverage::whole(),
            Some(ShardRole::Primary) => Coverage::AllBut(buckets.others.clone()),
            Some(ShardRole::Child) => Coverage::Only(buckets.mine.clone()),
            None => Coverage::whole(),
        }
    }

    /// Whether an object with shard label `label` is covered.
    pub fn covers(&self, label: Option<&str>) -> bool {
        match self {
            Coverage::AllBut(left_out) => label.is_none_or(|l| !left_out.contains(l)),
            Coverage::Only(buckets) => label.is_some_and(|l| buckets.contains(l)),
        }
    }

    /// Stops covering `buckets`.
    fn without(&mut self, buckets: &BTreeSet<String>) {
        match self {
            Coverage::AllBut(left_out) => left_out.extend(buckets.iter().cloned()),
            Coverage::Only(covered) => covered.retain(|b| !buckets.contains(b)),
        }
    }
}

/// How a kind is selected now: its shard role and the buckets this
/// replica owned when its watches last followed the ring.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Selection {
    role: Option<ShardRole>,
    mine: BTreeSet<String>,
}

/// One watch's events, and what of them is taken.
struct Stream {
    id: u64,
    kind: KindRef,
    coverage: Coverage,
    events: UnboundedReceiver<WatchEvent>,
}

/// The watch streams and how each kind is watched.
#[derive(Default)]
pub struct Watches {
    /// Kinds watched, and whether as metadata only.
    watched: Mutex<BTreeMap<KindRef, bool>>,
    /// How each watched kind is selected.
    selected: Mutex<BTreeMap<KindRef, Selection>>,
    streams: Mutex<Vec<Stream>>,
    next_id: Mutex<u64>,
    /// Events taken off the streams while waiting for one (see
    /// [`Self::wait`]), ahead of those still in the channels, with the id
    /// of their stream.
    arrived: Mutex<Vec<(u64, WatchEvent)>>,
    /// Told when a watch is added or replaced, so a wait includes it.
    changed: Notify,
    /// Held by whoever changes which kinds are watched and how (see
    /// [`Rewiring`]).
    rewiring: tokio::sync::Mutex<()>,
}

/// The right to change how kinds are watched, held across a plugin's
/// whole addition (its kinds watched, then it served) and across a
/// reselect. Without it, a ring change arriving while a plugin's primary
/// kind is still listing would judge that kind by the plugins served so
/// far, without the one being added, and watch it again whole: a sharded
/// replica would list and hold every object of the kind.
pub struct Rewiring<'a> {
    _held: tokio::sync::MutexGuard<'a, ()>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Watches {
    /// Waits for the right to change how kinds are watched.
    pub async fn rewiring(&self) -> Rewiring<'_> {
        Rewiring {
            _held: self.rewiring.lock().await,
        }
    }

    /// Kinds watched so far, and whether as metadata only.
    pub fn watched_kinds(&self) -> BTreeMap<KindRef, bool> {
        lock(&self.watched).clone()
    }

    /// How `kind` is watched now: as metadata only or not, or not at all.
    pub fn watched_as(&self, kind: &KindRef) -> Option<bool> {
        lock(&self.watched).get(kind).copied()
    }

    /// Whether `kind` was last watched in shard `role`.
    fn selected_as(&self, kind: &KindRef, role: Option<ShardRole>) -> bool {
        lock(&self.selected)
            .get(kind)
            .is_some_and(|s| s.role == role)
    }

    /// How many watches follow `kind`.
    pub fn watches_of(&self, kind: &KindRef) -> usize {
        lock(&self.streams)
            .iter()
            .filter(|s| s.kind == *kind)
            .count()
    }

    /// Asks the backend to watch `kind` as `scope` says, marked as watched
    /// so while it lists; a refusal leaves it as it was (`watched_as`).
    pub async fn open<B: ClusterBackend>(
        &self,
        backend: &B,
        kind: &KindRef,
        scope: WatchScope,
        watched_as: Option<bool>,
    ) -> Result<WatchStream, EngineError> {
        lock(&self.watched).insert(kind.clone(), scope.metadata_only);
        match backend.watch(kind, &scope).await {
            Ok(stream) => Ok(stream),
            Err(source) => {
                let mut watched = lock(&self.watched);
                match watched_as {
                    Some(before) => watched.insert(kind.clone(), before),
                    None => watched.remove(kind),
                };
                Err(EngineError::Watch {
                    kind: kind.to_string(),
                    source,
                })
            }
        }
    }

    fn next_id(&self) -> u64 {
        let mut next = lock(&self.next_id);
        *next += 1;
        *next
    }

    /// Keeps the event stream of `kind`'s watch, covering `coverage`,
    /// replacing every earlier watch of it (whose tasks then stop).
    pub fn add_stream(
        &self,
        kind: KindRef,
        coverage: Coverage,
        events: UnboundedReceiver<WatchEvent>,
    ) {
        let id = self.next_id();
        let mut streams = lock(&self.streams);
        streams.retain(|s| s.kind != kind);
        streams.push(Stream {
            id,
            kind,
            coverage,
            events,
        });
        drop(streams);
        self.changed.notify_waiters();
    }

    /// Keeps one more event stream of `kind`, covering buckets no other
    /// watch of it covers.
    fn add_arrivals(
        &self,
        kind: KindRef,
        coverage: Coverage,
        events: UnboundedReceiver<WatchEvent>,
    ) {
        let id = self.next_id();
        lock(&self.streams).push(Stream {
            id,
            kind,
            coverage,
            events,
        });
        self.changed.notify_waiters();
    }

    /// Every watch of `kind` stops taking the events of `buckets`.
    fn narrow(&self, kind: &KindRef, buckets: &BTreeSet<String>) {
        for stream in lock(&self.streams).iter_mut().filter(|s| s.kind == *kind) {
            stream.coverage.without(buckets);
        }
    }

    fn select(&self, kind: &KindRef, selection: Selection) {
        lock(&self.selected).insert(kind.clone(), selection);
    }

    /// Every event delivered so far that its watch covers, those taken
    /// while waiting first. An event of an object its watch no longer
    /// covers (relabelled out of it, or of a bucket that left) is taken
    /// as the object's deletion when `cache` holds it as that watch
    /// covered it, and passed over otherwise: the watch covering it now
    /// tells of it.
    pub fn drain(&self, cache: &SharedCache) -> Vec<WatchEvent> {
        let arrived = std::mem::take(&mut *lock(&self.arrived));
        let mut streams = lock(&self.streams);
        let mut events = Vec::new();
        for (id, event) in arrived {
            if let Some(stream) = streams.iter().find(|s| s.id == id) {
                events.extend(taken(&stream.coverage, event, cache));
            }
            // Its watch was replaced: that watch's list and events tell
            // of everything it covered.
        }
        for stream in streams.iter_mut() {
            while let Ok(event) = stream.events.try_recv() {
                events.extend(taken(&stream.coverage, event, cache));
            }
        }
        events
    }

    /// Resolves as soon as an event is waiting for [`Self::drain`] (at once
    /// if one already is), or a watch was added. Cancel-safe: an event
    /// taken off its channel here is kept for the next drain.
    pub async fn wait(&self) {
        let changed = self.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        std::future::poll_fn(|cx| {
            if changed.as_mut().poll(cx).is_ready() {
                return std::task::Poll::Ready(());
            }
            if !lock(&self.arrived).is_empty() {
                return std::task::Poll::Ready(());
            }
            let mut streams = lock(&self.streams);
            // Every channel is polled, so each has this task's waker when
            // none has an event. A closed one (its watch replaced or ended)
            // is ready with nothing: passed over.
            for stream in streams.iter_mut() {
                if let std::task::Poll::Ready(Some(event)) = stream.events.poll_recv(cx) {
                    lock(&self.arrived).push((stream.id, event));
                    return std::task::Poll::Ready(());
                }
            }
            std::task::Poll::Pending
        })
        .await
    }
}

/// `event` as the engine takes it from a watch covering `coverage`.
fn taken(coverage: &Coverage, event: WatchEvent, cache: &SharedCache) -> Option<WatchEvent> {
    if coverage.covers(shard_selection::label_of(&event.object)) {
        return Some(event);
    }
    if event.event_type == WatchEventType::Deleted {
        return None;
    }
    let held = cache.get(&ObjectKey::of(&event.object)?)?;
    coverage
        .covers(shard_selection::label_of(&held))
        .then(|| WatchEvent::new(WatchEventType::Deleted, held))
}

/// Whether `plugin` alone would have `kind` watched as metadata only: it
/// reads it so, and so does every other plugin declaring it.
pub fn wants_metadata_only<'a>(
    kind: &KindRef,
    plugin: &PluginMetadata,
    others: impl IntoIterator<Item = &'a PluginMetadata>,
) -> bool {
    plugin.projection_of(kind) == Projection::MetadataOnly
        && others.into_iter().all(|other| {
            other.name == plugin.name
                || !other.declares(kind)
                || other.projection_of(kind) == Projection::MetadataOnly
        })
}

/// How a kind watched `watched_as` is watched once a plugin wanting
/// `metadata_only` declares it: whole objects serve everyone, metadata
/// serves metadata.
pub fn watch_as(metadata_only: bool, watched_as: Option<bool>) -> bool {
    match watched_as {
        Some(meta) => meta && metadata_only,
        None => metadata_only,
    }
}

/// What watching kinds touches beside the watches: the cache and plugins
/// (through the trigger, which takes each first list) and the shard
/// selection.
pub struct Wiring<'a, B: ClusterBackend> {
    pub shared: &'a Shared<B>,
    pub watches: &'a Watches,
    pub trigger: &'a Trigger,
    pub shards: Option<&'a ShardLabelling>,
}

impl<B: ClusterBackend> Wiring<'_, B> {
    /// Watches every kind `plugin` declares that is not watched yet, or not
    /// as it now must be; `plugin` is to be served (or shadowed) before
    /// `_rewiring` is let go.
    pub async fn watch_kinds(
        &self,
        plugin: &LoadedPlugin,
        _rewiring: &Rewiring<'_>,
    ) -> Result<(), EngineError> {
        let metadata = plugin.metadata();
        for kind in metadata.declared_kinds() {
            let served = self.shared.controllers.plugins();
            let others = served.iter().map(|p| p.metadata());
            let metadata_only = wants_metadata_only(kind, metadata, others);
            let role = self.role(kind, Some(metadata));
            let watched_as = self.watches.watched_as(kind);
            let metadata_only = watch_as(metadata_only, watched_as);
            if watched_as == Some(metadata_only) && self.watches.selected_as(kind, role) {
                self.follow_buckets(kind, metadata_only).await?;
                continue;
            }
            self.watch_kind(kind, metadata_only, role, watched_as)
                .await?;
        }
        Ok(())
    }

    /// Follows the buckets this replica owns now with every kind selected
    /// by the shard label: objects that left its buckets leave the cache,
    /// those that came in are listed into it (see the module's second
    /// paragraph). Kinds that already follow them are left alone, so this
    /// is cheap to call after every ring change, and retries what failed
    /// before.
    pub async fn reselect(&self) -> Result<(), EngineError> {
        if self.shards.is_none() {
            return Ok(());
        }
        let _rewiring = self.watches.rewiring().await;
        for (kind, metadata_only) in self.watches.watched_kinds() {
            let role = self.role(&kind, None);
            if self.watches.selected_as(&kind, role) {
                self.follow_buckets(&kind, metadata_only).await?;
            } else {
                self.watch_kind(&kind, metadata_only, role, Some(metadata_only))
                    .await?;
            }
        }
        Ok(())
    }

    /// How `kind` is selected by the shard label, `adding` counted among
    /// the plugins serving it; `None`: whole.
    fn role(&self, kind: &KindRef, adding: Option<&PluginMetadata>) -> Option<ShardRole> {
        let shards = self.shards?;
        let served = self.shared.controllers.plugins();
        shards.role(kind, served.iter().map(|p| p.metadata()), adding)
    }

    fn scope(&self, metadata_only: bool, labels: Option<LabelSelector>) -> WatchScope {
        WatchScope {
            namespaces: self.shared.scope.namespaces.clone(),
            metadata_only,
            labels,
            max_objects: self.shared.cache.budget(),
        }
    }

    /// Watches `kind` (again, when `watched_as` says how it was watched so
    /// far) in shard `role` with one watch, taking the list into the
    /// cache.
    async fn watch_kind(
        &self,
        kind: &KindRef,
        metadata_only: bool,
        role: Option<ShardRole>,
        watched_as: Option<bool>,
    ) -> Result<(), EngineError> {
        let buckets = self.shards.map(ShardLabelling::buckets).unwrap_or_default();
        let labels = role.and_then(|role| shard_selection::selector_of(role, &buckets));
        let scope = self.scope(metadata_only, labels);
        let backend = &*self.shared.backend;
        let stream = self.watches.open(backend, kind, scope, watched_as).await?;
        // Re-watched as it was (only its selector changed): cached objects
        // at the listed version are current.
        let keep_current = watched_as == Some(metadata_only);
        let rewatch = watched_as.is_some();
        self.trigger
            .take_list(self.shared, kind, stream.initial, rewatch, keep_current);
        let coverage = Coverage::of(role, &buckets);
        self.watches
            .add_stream(kind.clone(), coverage, stream.events);
        self.watches.select(
            kind,
            Selection {
                role,
                mine: buckets.mine,
            },
        );
        Ok(())
    }

    /// Follows the ring's move of buckets with `kind`'s watches, selected
    /// as they were: the buckets that left are no longer taken from them
    /// and their objects leave the cache; the buckets that came are
    /// listed and followed by one more watch. Past
    /// [`MAX_WATCHES_PER_KIND`], watched again as one.
    async fn follow_buckets(&self, kind: &KindRef, metadata_only: bool) -> Result<(), EngineError> {
        let Some(shards) = self.shards else {
            return Ok(());
        };
        let Some(selection) = lock(&self.watches.selected).get(kind).cloned() else {
            return Ok(());
        };
        if selection.role.is_none() {
            return Ok(());
        }
        let buckets = shards.buckets();
        let left: BTreeSet<String> = selection.mine.difference(&buckets.mine).cloned().collect();
        let came: BTreeSet<String> = buckets.mine.difference(&selection.mine).cloned().collect();
        if left.is_empty() && came.is_empty() {
            return Ok(());
        }
        if !came.is_empty() && self.watches.watches_of(kind) >= MAX_WATCHES_PER_KIND {
            return self
                .watch_kind(kind, metadata_only, selection.role, Some(metadata_only))
                .await;
        }
        if !left.is_empty() {
            self.watches.narrow(kind, &left);
            self.trigger.take_departed(self.shared, kind, &left);
            let mine = selection.mine.difference(&left).cloned().collect();
            self.watches.select(
                kind,
                Selection {
                    role: selection.role,
                    mine,
                },
            );
        }
        if came.is_empty() {
            return Ok(());
        }
        let scope = self.scope(metadata_only, shard_selection::selector_in(&came));
        let backend = &*self.shared.backend;
        let stream = self
            .watches
            .open(backend, kind, scope, Some(metadata_only))
            .await?;
        self.trigger
            .take_list(self.shared, kind, stream.initial, false, false);
        self.watches
            .add_arrivals(kind.clone(), Coverage::Only(came), stream.events);
        self.watches.select(
            kind,
            Selection {
                role: selection.role,
                mine: buckets.mine,
            },
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use reconciler_contract::MapRule;
    use serde_json::json;
    use tokio::sync::mpsc::unbounded_channel;

    use super::*;

    fn pod() -> KindRef {
        KindRef::new("", "v1", "Pod")
    }

    fn reader(name: &str, metadata_only: bool) -> PluginMetadata {
        PluginMetadata::new(name, "1", KindRef::new("example.com", "v1", name)).reads(
            pod(),
            MapRule::None,
            metadata_only,
        )
    }

    fn event(name: &str) -> WatchEvent {
        WatchEvent::new(
            WatchEventType::Added,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}}),
        )
    }

    #[test]
    fn a_kind_is_watched_as_metadata_only_while_every_plugin_declaring_it_reads_it_so() {
        let slim = reader("slim", true);
        let other_slim = reader("other", true);
        let whole = reader("whole", false);
        let unrelated = PluginMetadata::new("x", "1", KindRef::new("example.com", "v1", "X"));
        assert!(wants_metadata_only(
            &pod(),
            &slim,
            [&other_slim, &unrelated, &slim]
        ));
        assert!(!wants_metadata_only(&pod(), &slim, [&other_slim, &whole]));
        assert!(!wants_metadata_only(&pod(), &whole, [&slim]));

        assert!(watch_as(true, None));
        assert!(watch_as(true, Some(true)));
        assert!(!watch_as(true, Some(false)), "whole objects serve everyone");
        assert!(
            !watch_as(false, Some(true)),
            "a whole reader has it re-watched"
        );
    }

    #[tokio::test]
    async fn an_event_taken_while_waiting_is_kept_for_the_next_drain() {
        let watches = Watches::default();
        let (tx, rx) = unbounded_channel();
        watches.add_stream(pod(), Coverage::whole(), rx);
        tx.send(event("a")).unwrap();
        tx.send(event("b")).unwrap();
        tokio::time::timeout(Duration::from_secs(5), watches.wait())
            .await
            .expect("an event is waiting");
        let names: Vec<String> = watches
            .drain(&SharedCache::new())
            .iter()
            .map(|e| e.object["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["a", "b"], "in order, none lost");
        assert!(watches.drain(&SharedCache::new()).is_empty());
    }

    #[tokio::test]
    async fn a_wait_wakes_when_a_watch_is_added_and_a_rewatch_replaces_the_old_stream() {
        let watches = Arc::new(Watches::default());
        let waiting = tokio::spawn({
            let watches = watches.clone();
            async move { watches.wait().await }
        });
        tokio::task::yield_now().await;
        let (old_tx, old_rx) = unbounded_channel();
        watches.add_stream(pod(), Coverage::whole(), old_rx);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken by the new watch")
            .unwrap();
        let (new_tx, new_rx) = unbounded_channel();
        watches.add_stream(pod(), Coverage::whole(), new_rx);
        assert!(
            old_tx.send(event("old")).is_err(),
            "the old stream is dropped"
        );
        new_tx.send(event("new")).unwrap();
        assert_eq!(watches.drain(&SharedCache::new()).len(), 1);
    }

    fn labelled(name: &str, bucket: Option<&str>, event_type: WatchEventType) -> WatchEvent {
        let mut object = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "resourceVersion": "1"}});
        if let Some(bucket) = bucket {
            shard_selection::label(&mut object, bucket);
        }
        WatchEvent::new(event_type, object)
    }

    fn set(buckets: &[&str]) -> BTreeSet<String> {
        buckets.iter().map(|b| b.to_string()).collect()
    }

    #[test]
    fn a_single_watch_covers_what_its_selector_selects() {
        let buckets = Buckets {
            mine: set(&["001", "002"]),
            others: set(&["003"]),
        };
        let primary = Coverage::of(Some(ShardRole::Primary), &buckets);
        assert!(primary.covers(Some("001")) && primary.covers(None));
        assert!(!primary.covers(Some("003")));
        let child = Coverage::of(Some(ShardRole::Child), &buckets);
        assert!(child.covers(Some("002")) && !child.covers(None) && !child.covers(Some("003")));
        let alone = Buckets {
            mine: set(&["001", "002", "003"]),
            others: BTreeSet::new(),
        };
        assert_eq!(
            Coverage::of(Some(ShardRole::Child), &alone),
            Coverage::whole()
        );
        assert_eq!(Coverage::of(None, &buckets), Coverage::whole());
    }

    /// Two watches of one kind: the first covered 001 and 002, then 002
    /// left and 003 came with a watch of its own. Each object is taken from
    /// the watch that covers it: the first one's events of 002 (whose
    /// objects left the cache with it) and 003 are passed over, and an
    /// object it held that was relabelled into 003 leaves the cache.
    #[tokio::test]
    async fn each_object_is_taken_from_the_one_watch_covering_it() {
        let watches = Watches::default();
        let cache = SharedCache::new();
        let (first, first_rx) = unbounded_channel();
        let (arrivals, arrivals_rx) = unbounded_channel();
        watches.add_stream(pod(), Coverage::Only(set(&["001", "002"])), first_rx);
        // Cached while 002 was still this replica's.
        cache.observe(&labelled("relabelled", Some("001"), WatchEventType::Added));
        watches.narrow(&pod(), &set(&["002"]));
        watches.add_arrivals(pod(), Coverage::Only(set(&["003"])), arrivals_rx);
        assert_eq!(watches.watches_of(&pod()), 2);

        first
            .send(labelled("kept", Some("001"), WatchEventType::Modified))
            .unwrap();
        first
            .send(labelled("moved", Some("002"), WatchEventType::Modified))
            .unwrap();
        first
            .send(labelled("came", Some("003"), WatchEventType::Modified))
            .unwrap();
        first
            .send(labelled(
                "relabelled",
                Some("003"),
                WatchEventType::Modified,
            ))
            .unwrap();
        arrivals
            .send(labelled("came", Some("003"), WatchEventType::Added))
            .unwrap();
        let taken: Vec<(String, WatchEventType)> = watches
            .drain(&cache)
            .into_iter()
            .map(|e| {
                let name = e.object["metadata"]["name"].as_str().unwrap().to_string();
                (name, e.event_type)
            })
            .collect();
        assert_eq!(
            taken,
            [
                ("kept".to_string(), WatchEventType::Modified),
                ("relabelled".to_string(), WatchEventType::Deleted),
                ("came".to_string(), WatchEventType::Added),
            ]
        );
    }
}
