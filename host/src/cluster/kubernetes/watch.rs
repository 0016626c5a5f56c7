//! Watching a kind: one consistent list, then every change, for as long as
//! the engine listens.
//!
//! kube's `watcher` does the protocol work (paged list, watch from the
//! list's resourceVersion, resuming from the last seen version when a watch
//! ends, re-listing after 410 Gone, bookmarks). What it does not do is tell
//! the engine what a re-list changed: after a gap, objects may have been
//! modified or deleted without a watch event. So the forwarding task keeps
//! the resourceVersion and metadata of every object it has reported and,
//! when a re-list completes, reports objects that changed and, as Deleted
//! (with that metadata), those that are gone. Errors after the first list
//! are retried with kube's default backoff; errors before it are returned to
//! the caller.

use reconciler_contract::object_meta::MetadataField;
use std::collections::{HashMap, HashSet};

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::api::{Api, ApiResource, DynamicObject, PartialObjectMeta};
use kube::runtime::watcher::{self, Event};
use reconciler_contract::KindRef;
use reconciler_contract::memory_cache::metadata_only;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::discovery::Resolved;
use super::errors;
use super::object_values::{meta_to_value, to_value, to_watched_value};
use super::watch_backoff::backed_off;
use crate::cluster::backend::take_carried_managers;
use crate::cluster::backend::{
    BackendError, ListedObject, WatchEvent, WatchEventType, WatchScope, WatchStream,
};

/// Namespace and name.
type Key = (Option<String>, String);

fn key_of(object: &Value) -> Key {
    let text = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    (
        text("/metadata/namespace"),
        text("/metadata/name").unwrap_or_default(),
    )
}

fn resource_version(object: &Value) -> Option<&str> {
    object
        .metadata_field("resourceVersion")
        .and_then(Value::as_str)
}

/// What the forwarder remembers of an object it reported: its version, to
/// stay quiet when a re-list shows it unchanged, and its apiVersion, kind and
/// metadata as JSON text, to report it Deleted when a re-list no longer shows
/// it. Not the object itself: the engine's cache holds that, and a second
/// `Value` tree per object nearly doubled the host's memory per object
/// (~30 KiB for a typical Pod, against ~0.5 KiB of metadata text; see
/// BENCHMARKS.md). The metadata is all the engine reads of a deleted object:
/// its key for the cache, and labels, annotations and ownerReferences to find
/// the primaries it concerns.
struct Seen {
    resource_version: Option<Box<str>>,
    last_metadata: ListedObject,
}

impl Seen {
    fn of(object: &Value) -> Self {
        Self {
            resource_version: resource_version(object).map(Into::into),
            last_metadata: ListedObject::new(&metadata_only(object)),
        }
    }

    /// The object as a Deleted event carries it after a re-list.
    fn tombstone(&self) -> Value {
        self.last_metadata.value()
    }
}

/// Turns watcher events into the engine's events.
#[derive(Default)]
struct Forwarder {
    /// Every object that exists, as last reported.
    known: HashMap<Key, Seen>,
    /// Keys listed so far in the re-list under way.
    relisted: Option<HashSet<Key>>,
    /// The first list, until it is complete and handed to the caller.
    initial: Option<Vec<ListedObject>>,
}

impl Forwarder {
    fn new() -> Self {
        Self {
            initial: Some(Vec::new()),
            ..Self::default()
        }
    }

    fn listing_first(&self) -> bool {
        self.initial.is_some()
    }

    /// How many objects the first list holds so far.
    fn listed_first(&self) -> usize {
        self.initial.as_ref().map_or(0, Vec::len)
    }

    /// Handles one watcher event; returns the events to send and, when the
    /// first list completes, that list.
    fn handle(&mut self, event: Event<Value>) -> (Vec<WatchEvent>, Option<Vec<ListedObject>>) {
        let mut out = Vec::new();
        match event {
            Event::Init => {
                if let Some(initial) = &mut self.initial {
                    // The first list restarted: start it over.
                    initial.clear();
                    self.known.clear();
                }
                self.relisted = Some(HashSet::new());
            }
            Event::InitApply(mut object) => {
                let key = key_of(&object);
                if let Some(relisted) = &mut self.relisted {
                    relisted.insert(key.clone());
                }
                if let Some(initial) = &mut self.initial {
                    // A first list's objects are causes of nothing.
                    take_carried_managers(&mut object);
                    self.known.insert(key, Seen::of(&object));
                    initial.push(ListedObject::new(&object));
                } else {
                    out.extend(self.upsert(key, object));
                }
            }
            Event::InitDone => {
                if let Some(listed) = self.relisted.take() {
                    let vanished: Vec<Key> = self
                        .known
                        .keys()
                        .filter(|k| !listed.contains(*k))
                        .cloned()
                        .collect();
                    for key in vanished {
                        if let Some(last) = self.known.remove(&key) {
                            out.push(WatchEvent::new(WatchEventType::Deleted, last.tombstone()));
                        }
                    }
                }
                return (out, self.initial.take());
            }
            Event::Apply(object) => {
                let key = key_of(&object);
                out.extend(self.upsert(key, object));
            }
            Event::Delete(object) => {
                self.known.remove(&key_of(&object));
                out.push(WatchEvent::carrying(WatchEventType::Deleted, object));
            }
        }
        (out, None)
    }

    /// Added for a new object, Modified for a changed one, nothing when a
    /// re-list shows an object at the version already reported.
    fn upsert(&mut self, key: Key, object: Value) -> Option<WatchEvent> {
        let event_type = match self.known.get(&key) {
            None => WatchEventType::Added,
            Some(old)
                if old.resource_version.is_some()
                    && old.resource_version.as_deref() == resource_version(&object) =>
            {
                return None;
            }
            Some(_) => WatchEventType::Modified,
        };
        let event = WatchEvent::carrying(event_type, object);
        self.known.insert(key, Seen::of(&event.object));
        Some(event)
    }
}

/// What a failed list or watch asked for, for error messages.
struct Target {
    group: String,
    resource: String,
    kind: String,
    namespace: Option<String>,
}

impl Target {
    fn map(&self, error: watcher::Error) -> BackendError {
        let (verb, kube_error) = match error {
            watcher::Error::InitialListFailed(e) => ("list", e),
            watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => ("watch", e),
            watcher::Error::WatchError(status) => {
                return errors::from_status(status.code, &status.message, &self.request("watch"));
            }
            watcher::Error::NoResourceVersion => {
                return BackendError::Invalid {
                    key: self.kind.clone(),
                    message: "the list has no resourceVersion: is watch supported?".into(),
                };
            }
        };
        errors::map(kube_error, &self.request(verb))
    }

    fn request(&self, verb: &'static str) -> errors::Request<'_> {
        errors::Request {
            verb,
            group: &self.group,
            resource: self.resource.clone(),
            namespace: self.namespace.as_deref(),
            target: self.kind.clone(),
        }
    }
}

/// Lists `kind` within `scope` and starts forwarding its changes: one
/// watcher per namespace of the scope (or one for the whole cluster), all
/// feeding the same stream.
pub(crate) async fn start(
    client: kube::Client,
    kind: KindRef,
    resolved: Resolved,
    scope: &WatchScope,
) -> Result<WatchStream, BackendError> {
    let namespaces: Vec<Option<&str>> = if resolved.namespaced && !scope.namespaces.is_empty() {
        scope
            .namespaces
            .iter()
            .map(|ns| Some(ns.as_str()))
            .collect()
    } else {
        vec![None]
    };
    let (events, receiver) = mpsc::unbounded_channel();
    let mut lists = Vec::new();
    for namespace in namespaces {
        let target = Target {
            group: kind.group.clone(),
            resource: resolved.resource.plural.clone(),
            kind: format!("{} {}", kind.api_version(), kind.kind),
            namespace: namespace.map(str::to_string),
        };
        let stream = watcher_events(&client, &resolved.resource, namespace, scope);
        let (ready, first_list) = oneshot::channel();
        tokio::spawn(forward(
            stream,
            target,
            scope.max_objects,
            events.clone(),
            ready,
        ));
        lists.push(first_list);
    }
    let mut initial = Vec::new();
    for first_list in lists {
        match first_list.await {
            Ok(Ok(objects)) => initial.extend(objects),
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(BackendError::Transient(
                    "the watch ended before its first list".into(),
                ));
            }
        }
    }
    Ok(WatchStream {
        initial,
        events: receiver,
    })
}

/// Objects per list request: kube's default is 500, as client-go's.
pub(crate) const LIST_PAGE: u32 = 100;

type Ready = oneshot::Sender<Result<Vec<ListedObject>, BackendError>>;
type Events = BoxStream<'static, Result<Event<Value>, watcher::Error>>;

/// kube's watcher of one namespace (or all), its objects already turned
/// into the engine's JSON. Metadata-only watches ask the server for
/// `PartialObjectMetadata`, so full objects never cross the wire.
fn watcher_events(
    client: &kube::Client,
    resource: &ApiResource,
    namespace: Option<&str>,
    scope: &WatchScope,
) -> Events {
    // Bookmarks are on by default; kube also reconnects a watch that stays
    // silent past the server's timeout plus a margin, so a dead connection
    // cannot leave a zombie watch.
    //
    // Lists come in pages of LIST_PAGE: each page is decoded whole before
    // its objects are handed on, and that transient, not the cache, set
    // the peak memory of a host with a thousand Pods (BENCHMARKS.md).
    let mut config = watcher::Config::default()
        .any_semantic()
        .page_size(LIST_PAGE);
    if let Some(labels) = &scope.labels {
        config = config.labels(&labels.to_string());
    }
    let resource = resource.clone();
    if scope.metadata_only {
        let api: Api<PartialObjectMeta<DynamicObject>> = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        backed_off(watcher::watcher(api, config))
            .map(move |r| r.map(|e| convert(e, |o| meta_to_value(o, &resource))))
            .boxed()
    } else {
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        backed_off(watcher::watcher(api, config))
            .map(move |r| r.map(|e| convert_watched(e, &resource)))
            .boxed()
    }
}

async fn forward(
    stream: Events,
    target: Target,
    max_objects: Option<usize>,
    events: mpsc::UnboundedSender<WatchEvent>,
    ready: Ready,
) {
    let mut stream = stream;
    let mut forwarder = Forwarder::new();
    let mut ready = Some(ready);
    loop {
        let item = tokio::select! {
            () = events.closed() => return,
            item = stream.next() => item,
        };
        match item {
            Some(Ok(event)) => {
                let (out, initial) = forwarder.handle(event);
                // Given up page by page, before a list too large is held.
                if let Some(max) = max_objects
                    && forwarder.listed_first() > max
                {
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(Err(BackendError::OverBudget {
                            kind: target.kind.clone(),
                            max,
                        }));
                    }
                    return;
                }
                if let Some(initial) = initial
                    && let Some(ready) = ready.take()
                    && ready.send(Ok(initial)).is_err()
                {
                    return;
                }
                for event in out {
                    if events.send(event).is_err() {
                        return;
                    }
                }
            }
            Some(Err(error)) => {
                let error = target.map(error);
                if forwarder.listing_first() {
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(Err(error));
                    }
                    return;
                }
                tracing::warn!(kind = %target.kind, namespace = target.namespace.as_deref().unwrap_or(""), %error, "watch failed; retrying with backoff");
            }
            None => return,
        }
    }
}

/// [`convert`] for full objects: a watch's own changes carry their
/// `managedFields` to their events; a list's pages, read in bursts, do not.
fn convert_watched(event: Event<DynamicObject>, resource: &ApiResource) -> Event<Value> {
    match event {
        Event::Apply(o) => Event::Apply(to_watched_value(o, resource)),
        other => convert(other, |o| to_value(o, resource)),
    }
}

fn convert<K>(event: Event<K>, value: impl Fn(K) -> Value) -> Event<Value> {
    match event {
        Event::Apply(o) => Event::Apply(value(o)),
        Event::Delete(o) => Event::Delete(value(o)),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(value(o)),
        Event::InitDone => Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::{Value, json};

    use super::super::testing::{self, Handle, next_raw, respond};
    use crate::cluster::backend::{ClusterBackend, WatchEvent, WatchEventType, WatchScope};
    /// Where a watch carries managedFields to the event: never left in it.
    const CARRIED_MANAGED_FIELDS_KEY: &str = "__reconcilerHostManagedFields";

    /// A Deployment as a list item: no apiVersion or kind.
    fn item(name: &str, rv: &str) -> Value {
        json!({
            "metadata": {
                "name": name, "namespace": "default", "resourceVersion": rv,
                "managedFields": [{"manager": "kubectl"}],
            },
            "spec": {"replicas": 1},
        })
    }

    fn list(rv: &str, items: &[Value]) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "DeploymentList",
            "metadata": {"resourceVersion": rv}, "items": items,
        })
    }

    /// A watch response: one JSON event a line, then the stream ends.
    async fn watch_events(api: &mut Handle, events: &[(&str, Value)]) -> testing::Seen {
        let body: String = events
            .iter()
            .map(|(kind, object)| {
                let mut object = object.clone();
                object["apiVersion"] = json!("apps/v1");
                object["kind"] = json!("Deployment");
                format!("{}\n", json!({"type": kind, "object": object}))
            })
            .collect();
        next_raw(api, |_| (200, body)).await
    }

    async fn recv(stream: &mut crate::cluster::backend::WatchStream) -> WatchEvent {
        tokio::time::timeout(Duration::from_secs(20), stream.events.recv())
            .await
            .expect("an event in time")
            .expect("the watch is running")
    }

    fn summary(event: &WatchEvent) -> (WatchEventType, String, String) {
        let text = |p: &str| {
            event
                .object
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        (
            event.event_type,
            text("/metadata/name"),
            text("/metadata/resourceVersion"),
        )
    }

    #[tokio::test]
    async fn watch_lists_then_resumes_after_the_stream_ends() {
        let (backend, mut api) = testing::backend();
        let server = tokio::spawn(async move {
            let list = respond(&mut api, 200, list("10", &[item("a", "9")])).await;
            let first = watch_events(&mut api, &[("ADDED", item("b", "11"))]).await;
            // The first watch ended; the second resumes where it stopped.
            let second = watch_events(
                &mut api,
                &[("MODIFIED", item("a", "12")), ("DELETED", item("b", "13"))],
            )
            .await;
            (list, first, second, api)
        });

        let mut stream = backend
            .watch(&testing::deployment_kind(), &WatchScope::default())
            .await
            .expect("watch");
        assert_eq!(stream.initial.len(), 1);
        let a = &stream.initial[0].value();
        assert_eq!(a["kind"], "Deployment");
        assert_eq!(a["apiVersion"], "apps/v1");
        assert!(a["metadata"].get("managedFields").is_none());

        let mut got = Vec::new();
        for _ in 0..3 {
            let event = recv(&mut stream).await;
            // The journal's: who manages what, beside the slimmed object.
            assert!(event.object["metadata"].get("managedFields").is_none());
            assert!(event.object.get(CARRIED_MANAGED_FIELDS_KEY).is_none());
            // A deletion is told with no fields, so it carries none.
            let carried = (event.event_type != WatchEventType::Deleted)
                .then_some(r#"[{"manager":"kubectl"}]"#);
            assert_eq!(event.managed_fields(), carried);
            got.push(summary(&event));
        }
        let s = |t, n: &str, rv: &str| (t, n.to_string(), rv.to_string());
        assert_eq!(
            got,
            vec![
                s(WatchEventType::Added, "b", "11"),
                s(WatchEventType::Modified, "a", "12"),
                s(WatchEventType::Deleted, "b", "13"),
            ]
        );

        let (list, first, second, _api) = server.await.unwrap();
        assert_eq!(list.path, "/apis/apps/v1/deployments");
        assert!(!list.query.contains("watch=true"));
        assert!(first.query.contains("watch=true"));
        assert!(first.query.contains("resourceVersion=10"));
        assert!(first.query.contains("allowWatchBookmarks=true"));
        assert!(second.query.contains("watch=true"));
        assert!(
            second.query.contains("resourceVersion=11"),
            "{}",
            second.query
        );
    }

    #[tokio::test]
    async fn relist_after_gone_reports_changes_and_vanished_objects() {
        let (backend, mut api) = testing::backend();
        let server = tokio::spawn(async move {
            respond(
                &mut api,
                200,
                list("2", &[item("a", "1"), item("b", "2"), item("c", "2")]),
            )
            .await;
            let gone = json!({
                "type": "ERROR",
                "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "code": 410, "reason": "Expired", "message": "too old"},
            });
            next_raw(&mut api, |_| (200, format!("{gone}\n"))).await;
            // The re-list: a changed, b gone, c unchanged, d new.
            let relist = respond(
                &mut api,
                200,
                list("6", &[item("a", "5"), item("c", "2"), item("d", "6")]),
            )
            .await;
            watch_events(&mut api, &[("MODIFIED", item("d", "7"))]).await;
            (relist, api)
        });

        let mut stream = backend
            .watch(&testing::deployment_kind(), &WatchScope::default())
            .await
            .expect("watch");
        assert_eq!(stream.initial.len(), 3);
        let mut events = Vec::new();
        for _ in 0..4 {
            events.push(recv(&mut stream).await);
        }
        // What vanished in the gap is reported with its last metadata.
        let gone = &events[2].object;
        assert_eq!(gone["kind"], "Deployment");
        assert_eq!(gone["apiVersion"], "apps/v1");
        assert_eq!(gone["metadata"]["namespace"], "default");
        let got: Vec<_> = events.iter().map(summary).collect();
        let s = |t, n: &str, rv: &str| (t, n.to_string(), rv.to_string());
        assert_eq!(
            got,
            vec![
                s(WatchEventType::Modified, "a", "5"),
                s(WatchEventType::Added, "d", "6"),
                s(WatchEventType::Deleted, "b", "2"),
                s(WatchEventType::Modified, "d", "7"),
            ]
        );
        let (relist, _api) = server.await.unwrap();
        assert!(!relist.query.contains("watch=true"));
    }

    #[tokio::test]
    async fn a_first_list_past_the_budget_is_given_up_before_its_next_page() {
        let (backend, mut api) = testing::backend();
        let server = tokio::spawn(async move {
            let mut page = list("5", &[item("a", "1"), item("b", "2"), item("c", "3")]);
            page["metadata"]["continue"] = json!("more");
            respond(&mut api, 200, page).await;
            api
        });
        let scope = WatchScope {
            max_objects: Some(2),
            ..WatchScope::default()
        };
        let result = backend.watch(&testing::deployment_kind(), &scope).await;
        let Err(crate::cluster::backend::BackendError::OverBudget { kind, max }) = result else {
            panic!("expected OverBudget");
        };
        assert_eq!((kind.as_str(), max), ("apps/v1 Deployment", 2));
        let mut api = server.await.unwrap();
        // The next page was never asked for.
        let next = tokio::time::timeout(Duration::from_millis(300), api.next_request()).await;
        assert!(!matches!(next, Ok(Some(_))), "a second page was requested");
    }

    #[tokio::test]
    async fn forbidden_first_list_is_returned() {
        let (backend, mut api) = testing::backend();
        let server = tokio::spawn(async move {
            respond(&mut api, 403, testing::failure(403, "Forbidden", "no")).await;
        });
        let result = backend
            .watch(&testing::deployment_kind(), &WatchScope::default())
            .await;
        let Err(crate::cluster::backend::BackendError::Forbidden { message }) = result else {
            panic!("expected Forbidden");
        };
        assert!(
            message.contains("\"list\"") && message.contains("\"deployments\""),
            "{message}"
        );
        assert!(message.contains("cluster-wide"), "{message}");
        server.await.unwrap();
    }

    #[tokio::test]
    async fn namespaced_scope_lists_each_namespace() {
        let (backend, mut api) = testing::backend();
        let server = tokio::spawn(async move {
            let mut paths = Vec::new();
            for _ in 0..2 {
                let seen = testing::next(&mut api, |seen| {
                    let name = if seen.path.contains("/namespaces/a/") {
                        "in-a"
                    } else {
                        "in-b"
                    };
                    (200, list("5", &[item(name, "4")]))
                })
                .await;
                paths.push(seen.path);
            }
            paths.sort();
            (paths, api)
        });
        let scope = WatchScope {
            namespaces: ["a".to_string(), "b".to_string()].into(),
            metadata_only: false,
            labels: None,
            max_objects: None,
        };
        let stream = backend
            .watch(&testing::deployment_kind(), &scope)
            .await
            .expect("watch");
        let mut names: Vec<String> = stream
            .initial
            .iter()
            .map(|o| o.value()["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        names.sort();
        assert_eq!(names, ["in-a", "in-b"]);
        let (paths, _api) = server.await.unwrap();
        assert_eq!(
            paths,
            [
                "/apis/apps/v1/namespaces/a/deployments",
                "/apis/apps/v1/namespaces/b/deployments"
            ]
        );
    }

    #[tokio::test]
    async fn metadata_only_scope_asks_for_metadata_and_keeps_the_kind() {
        let (backend, mut api) = testing::backend();
        let server = tokio::spawn(async move {
            let mut pod = item("p", "3");
            pod["metadata"]["annotations"] = json!({
                "kubectl.kubernetes.io/last-applied-configuration": "{}", "keep": "me"});
            let mut meta_list = list("3", &[pod]);
            meta_list["kind"] = json!("PartialObjectMetadataList");
            meta_list["apiVersion"] = json!("meta.k8s.io/v1");
            let seen = respond(&mut api, 200, meta_list).await;
            (seen, api)
        });
        let scope = WatchScope {
            namespaces: Default::default(),
            metadata_only: true,
            labels: None,
            max_objects: None,
        };
        let stream = backend
            .watch(&testing::deployment_kind(), &scope)
            .await
            .expect("watch");
        let (seen, _api) = server.await.unwrap();
        let accept = seen.accept.unwrap_or_default();
        assert!(accept.contains("as=PartialObjectMetadataList"), "{accept}");
        let object = &stream.initial[0].value();
        assert_eq!(object["apiVersion"], "apps/v1");
        assert_eq!(object["kind"], "Deployment");
        assert!(object.get("spec").is_none());
        let meta = &object["metadata"];
        assert!(meta.get("managedFields").is_none());
        assert_eq!(meta["annotations"], json!({"keep": "me"}));
    }
}
