//! The watches an engine keeps, one per kind: how each kind is watched
//! (whole or as metadata only, with which shard selector), and the events
//! they deliver until the trigger takes them.
//!
//! A kind declared by several plugins is watched once, as metadata only
//! while every plugin declaring it reads it so; a plugin wanting whole
//! objects of such a kind has it watched again whole. Under sharding, a
//! kind whose role changes with a plugin, or whose selector changes with
//! the ring, is watched again with its new selector, and only what changed
//! since it was cached is reconciled. A watch's first list goes to the
//! [`Trigger`] before its stream is kept here, so nothing is missed
//! between the two.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use reconciler_contract::selector::LabelSelector;
use reconciler_contract::{KindRef, PluginMetadata, Projection};
use tokio::sync::Notify;
use tokio::sync::mpsc::UnboundedReceiver;

use super::errors::EngineError;
use super::shard_labelling::ShardLabelling;
use super::shared::Shared;
use super::trigger::Trigger;
use crate::cluster::{ClusterBackend, WatchEvent, WatchScope, WatchStream};
use crate::plugin::LoadedPlugin;

/// The watch streams and how each kind is watched.
#[derive(Default)]
pub struct Watches {
    /// Kinds watched, and whether as metadata only.
    watched: Mutex<BTreeMap<KindRef, bool>>,
    /// The label selector each watched kind was last watched with.
    selected: Mutex<BTreeMap<KindRef, Option<LabelSelector>>>,
    streams: Mutex<Vec<(KindRef, UnboundedReceiver<WatchEvent>)>>,
    /// Events taken off the streams while waiting for one (see
    /// [`Self::wait`]), ahead of those still in the channels.
    arrived: Mutex<Vec<WatchEvent>>,
    /// Told when a watch is added or replaced, so a wait includes it.
    changed: Notify,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Watches {
    /// Kinds watched so far, and whether as metadata only.
    pub fn watched_kinds(&self) -> BTreeMap<KindRef, bool> {
        lock(&self.watched).clone()
    }

    /// How `kind` is watched now: as metadata only or not, or not at all.
    pub fn watched_as(&self, kind: &KindRef) -> Option<bool> {
        lock(&self.watched).get(kind).copied()
    }

    /// Whether `kind` was last watched with `labels`.
    pub fn selected_with(&self, kind: &KindRef, labels: &Option<LabelSelector>) -> bool {
        lock(&self.selected).get(kind) == Some(labels)
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
        let labels = scope.labels.clone();
        match backend.watch(kind, &scope).await {
            Ok(stream) => {
                lock(&self.selected).insert(kind.clone(), labels);
                Ok(stream)
            }
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

    /// Keeps the event stream of `kind`'s watch, replacing the one of an
    /// earlier watch of it (whose task then stops).
    pub fn add_stream(&self, kind: KindRef, events: UnboundedReceiver<WatchEvent>) {
        let mut streams = lock(&self.streams);
        streams.retain(|(k, _)| *k != kind);
        streams.push((kind, events));
        drop(streams);
        self.changed.notify_waiters();
    }

    /// Every event delivered so far, those taken while waiting first.
    pub fn drain(&self) -> Vec<WatchEvent> {
        let mut events = std::mem::take(&mut *lock(&self.arrived));
        let mut streams = lock(&self.streams);
        for (_, rx) in streams.iter_mut() {
            while let Ok(event) = rx.try_recv() {
                events.push(event);
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
            for (_, rx) in streams.iter_mut() {
                if let std::task::Poll::Ready(Some(event)) = rx.poll_recv(cx) {
                    lock(&self.arrived).push(event);
                    return std::task::Poll::Ready(());
                }
            }
            std::task::Poll::Pending
        })
        .await
    }
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
    /// as it now must be.
    pub async fn watch_kinds(&self, plugin: &LoadedPlugin) -> Result<(), EngineError> {
        let metadata = plugin.metadata();
        for kind in metadata.declared_kinds() {
            let served = self.shared.controllers.plugins();
            let others = served.iter().map(|p| p.metadata());
            let metadata_only = wants_metadata_only(kind, metadata, others);
            let labels = self.selector(kind, Some(metadata));
            let watched_as = self.watches.watched_as(kind);
            let metadata_only = watch_as(metadata_only, watched_as);
            if watched_as == Some(metadata_only) && self.watches.selected_with(kind, &labels) {
                continue;
            }
            self.watch_kind(kind, metadata_only, labels, watched_as)
                .await?;
        }
        Ok(())
    }

    /// Watches again, with the buckets this replica owns now, every kind
    /// selected by the shard label: objects that left its buckets leave
    /// the cache, those that came in are listed into it. Kinds already
    /// watched with the current selector are left alone, so this is cheap
    /// to call after every ring change, and retries what failed before.
    pub async fn reselect(&self) -> Result<(), EngineError> {
        if self.shards.is_none() {
            return Ok(());
        }
        for (kind, metadata_only) in self.watches.watched_kinds() {
            let labels = self.selector(&kind, None);
            if self.watches.selected_with(&kind, &labels) {
                continue;
            }
            self.watch_kind(&kind, metadata_only, labels, Some(metadata_only))
                .await?;
        }
        Ok(())
    }

    /// The shard selector `kind` is watched with now, `adding` counted
    /// among the plugins serving it.
    fn selector(&self, kind: &KindRef, adding: Option<&PluginMetadata>) -> Option<LabelSelector> {
        let shards = self.shards?;
        let served = self.shared.controllers.plugins();
        shards.selector(kind, served.iter().map(|p| p.metadata()), adding)
    }

    /// Watches `kind` (again, when `watched_as` says how it was watched so
    /// far) with `labels`, taking the list into the cache.
    async fn watch_kind(
        &self,
        kind: &KindRef,
        metadata_only: bool,
        labels: Option<LabelSelector>,
        watched_as: Option<bool>,
    ) -> Result<(), EngineError> {
        let scope = WatchScope {
            namespaces: self.shared.scope.namespaces.clone(),
            metadata_only,
            labels,
            max_objects: self.shared.cache.budget(),
        };
        let backend = &*self.shared.backend;
        let stream = self.watches.open(backend, kind, scope, watched_as).await?;
        // Re-watched as it was (only its selector changed): cached objects
        // at the listed version are current.
        let keep_current = watched_as == Some(metadata_only);
        let rewatch = watched_as.is_some();
        self.trigger
            .take_list(self.shared, kind, stream.initial, rewatch, keep_current);
        self.watches.add_stream(kind.clone(), stream.events);
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
    use crate::cluster::WatchEventType;

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
        watches.add_stream(pod(), rx);
        tx.send(event("a")).unwrap();
        tx.send(event("b")).unwrap();
        tokio::time::timeout(Duration::from_secs(5), watches.wait())
            .await
            .expect("an event is waiting");
        let names: Vec<String> = watches
            .drain()
            .iter()
            .map(|e| e.object["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["a", "b"], "in order, none lost");
        assert!(watches.drain().is_empty());
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
        watches.add_stream(pod(), old_rx);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken by the new watch")
            .unwrap();
        let (new_tx, new_rx) = unbounded_channel();
        watches.add_stream(pod(), new_rx);
        assert!(
            old_tx.send(event("old")).is_err(),
            "the old stream is dropped"
        );
        new_tx.send(event("new")).unwrap();
        assert_eq!(watches.drain().len(), 1);
    }
}
