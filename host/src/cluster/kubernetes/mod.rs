//! The engine's cluster backend for a real Kubernetes API server.
//!
//! The engine only speaks `ClusterBackend`; this module is the one place that
//! knows about HTTP, discovery, server-side apply, watch resumption and the
//! API's error codes. Each job lives in its own module so it can be read and
//! tested alone against a mocked API:
//!
//! - `connection`: the client, resolved kinds, and how a request is addressed;
//! - `discovery`: kind -> served resource and scope, cached per kind;
//! - `watch`: list + watch with resume, re-list reconciliation and backoff;
//! - `apply`: server-side apply of objects and of their status;
//! - `finalizers`: race-free adding and removing of one finalizer;
//! - `events`: events.k8s.io/v1 Events;
//! - `credential_errors`: auth failures told without the credentials;
//! - `api_client`, `client_rate_limit`: the client every part of the host
//!   builds, with its timeouts, rate limit and credential-safe errors;
//! - `errors`: API failures -> `BackendError`, with RBAC-aware 403 messages;
//! - `object_values`: objects from the API as the engine keeps them;
//! - `relist_watch`: the host's own inputs (kubeconfig Secrets, Plugins)
//!   followed as whole relists and single changes.

pub mod api_client;
mod apply;
pub mod client_rate_limit;
mod connection;
pub mod credential_errors;
mod discovery;
mod errors;
mod events;
mod finalizers;
mod labels;
mod object_values;
pub mod relist_watch;
mod watch;
pub mod watch_backoff;
pub mod write_fence;

use kube::api::{DeleteParams, Preconditions, PropagationPolicy};
use reconciler_contract::KindRef;
use serde_json::Value;

pub use self::connection::KubernetesBackend;
use self::connection::request;
pub use self::errors::SHARD_FENCE_REFUSAL;
use self::object_values::to_value;
use crate::cluster::backend::{
    BackendError, ClusterBackend, EventRecord, EventRef, EventSeries, KindScope, LabelAt,
    ObjectKey, Propagation, WatchScope, WatchStream,
};

impl ClusterBackend for KubernetesBackend {
    async fn kind_scope(&self, kind: &KindRef) -> Result<KindScope, BackendError> {
        Ok(if self.resolve(kind).await?.namespaced {
            KindScope::Namespaced
        } else {
            KindScope::Cluster
        })
    }

    async fn watch(&self, kind: &KindRef, scope: &WatchScope) -> Result<WatchStream, BackendError> {
        let resolved = self.resolve(kind).await?;
        watch::start(self.client.clone(), kind.clone(), resolved, scope).await
    }

    #[tracing::instrument(name = "api_request", skip_all, fields(verb = "get", object = %key))]
    async fn get(&self, key: &ObjectKey) -> Result<Option<Value>, BackendError> {
        let resolved = self.resolve(&key.kind).await?;
        let api = self.api_for(&resolved, key)?;
        match api.get_opt(&key.name).await {
            Ok(found) => Ok(found.map(|o| to_value(o, &resolved.resource))),
            Err(e) => Err(errors::map(e, &request("get", &resolved, key, None))),
        }
    }

    #[tracing::instrument(name = "api_request", skip_all, fields(verb = "apply", object = %named(&object)))]
    async fn apply(
        &self,
        object: Value,
        field_manager: &str,
        force: bool,
    ) -> Result<Value, BackendError> {
        self.fence
            .check(format_args!("the apply of {}", named(&object)))?;
        apply::apply(self, object, field_manager, force).await
    }

    #[tracing::instrument(name = "api_request", skip_all, fields(verb = "apply status", object = %key))]
    async fn apply_status(
        &self,
        key: &ObjectKey,
        status: Value,
        field_manager: &str,
        resource_version: Option<&str>,
    ) -> Result<Value, BackendError> {
        self.fence
            .check(format_args!("the status apply of {key}"))?;
        apply::apply_status(self, key, status, field_manager, resource_version).await
    }

    #[tracing::instrument(name = "api_request", skip_all, fields(verb = "delete", object = %key))]
    async fn delete(
        &self,
        key: &ObjectKey,
        propagation: Propagation,
        uid: Option<&str>,
    ) -> Result<(), BackendError> {
        let resolved = self.resolve(&key.kind).await?;
        let api = self.api_for(&resolved, key)?;
        self.fence.check(format_args!("the delete of {key}"))?;
        let params = DeleteParams {
            propagation_policy: Some(match propagation {
                Propagation::Background => PropagationPolicy::Background,
                Propagation::Foreground => PropagationPolicy::Foreground,
                Propagation::Orphan => PropagationPolicy::Orphan,
            }),
            preconditions: uid.map(|uid| Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&key.name, &params).await {
            Ok(_) => Ok(()),
            Err(e) if errors::code(&e) == Some(404) => Ok(()),
            // The uid precondition failed: the object meant is gone, and
            // another has its name.
            Err(e) if uid.is_some() && errors::code(&e) == Some(409) => Ok(()),
            Err(e) => Err(errors::map(e, &request("delete", &resolved, key, None))),
        }
    }

    #[tracing::instrument(name = "api_request", skip_all, fields(verb = "label", object = %key))]
    async fn set_label(&self, key: &ObjectKey, label: LabelAt<'_>) -> Result<Value, BackendError> {
        self.fence
            .check(format_args!("the label {} of {key}", label.name))?;
        labels::set(self, key, label).await
    }

    #[tracing::instrument(name = "api_request", skip_all, fields(verb = "add finalizer", object = %key))]
    async fn add_finalizer(&self, key: &ObjectKey, finalizer: &str) -> Result<Value, BackendError> {
        self.fence
            .check(format_args!("adding finalizer {finalizer} to {key}"))?;
        finalizers::add(self, key, finalizer).await
    }

    #[tracing::instrument(name = "api_request", skip_all, fields(verb = "remove finalizer", object = %key))]
    async fn remove_finalizer(&self, key: &ObjectKey, finalizer: &str) -> Result<(), BackendError> {
        self.fence
            .check(format_args!("removing finalizer {finalizer} from {key}"))?;
        finalizers::remove(self, key, finalizer).await
    }

    #[tracing::instrument(name = "api_request", skip_all, fields(verb = "create Event", object = %event.regarding))]
    async fn record_event(&self, event: EventRecord) -> Result<EventRef, BackendError> {
        self.fence.check(format_args!(
            "the Event {} on {}",
            event.reason, event.regarding
        ))?;
        events::record(self, event).await
    }

    #[tracing::instrument(name = "api_request", skip_all, fields(verb = "update Event"))]
    async fn update_event_series(
        &self,
        event: &EventRef,
        series: EventSeries,
    ) -> Result<(), BackendError> {
        self.fence.check("a count of a repeated Event")?;
        events::update_series(self, event, series).await
    }
}

/// `Kind namespace/name` of an object about to be written.
fn named(object: &Value) -> String {
    let metadata = &object["metadata"];
    let name = metadata["name"].as_str().unwrap_or("(unnamed)");
    let kind = object["kind"].as_str().unwrap_or("(no kind)");
    match metadata["namespace"].as_str() {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::testing::{self, failure, respond};
    use crate::cluster::backend::{BackendError, ClusterBackend, ObjectKey, Propagation};
    use reconciler_contract::KindRef;

    #[tokio::test]
    async fn unknown_kind_is_found_by_discovery() {
        let (backend, mut api) = testing::backend();
        let server = tokio::spawn(async move {
            let served = json!({
                "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "example.com/v1",
                "resources": [{"name": "widgets", "singularName": "widget", "namespaced": true,
                               "kind": "Widget", "verbs": ["get", "patch"]}],
            });
            let discovery = respond(&mut api, 200, served).await;
            let get = respond(&mut api, 404, failure(404, "NotFound", "nope")).await;
            // A group version the server does not serve.
            respond(&mut api, 404, failure(404, "NotFound", "")).await;
            (discovery, get)
        });
        let widget = ObjectKey::new(KindRef::new("example.com", "v1", "Widget"), Some("ns"), "w");
        assert_eq!(backend.get(&widget).await, Ok(None));
        let gadget = KindRef::new("example.com", "v2", "Gadget");
        let err = backend.get(&ObjectKey::new(gadget, Some("ns"), "g")).await;
        assert!(
            matches!(err, Err(BackendError::UnknownKind { .. })),
            "{err:?}"
        );
        let (discovery, get) = server.await.unwrap();
        assert_eq!(discovery.path, "/apis/example.com/v1");
        assert_eq!(get.path, "/apis/example.com/v1/namespaces/ns/widgets/w");
    }

    #[tokio::test]
    async fn delete_sends_propagation_and_ignores_missing() {
        let (backend, mut api) = testing::backend();
        let server = tokio::spawn(async move {
            let first = respond(&mut api, 200, testing::stored_deployment("web", "3")).await;
            respond(&mut api, 404, failure(404, "NotFound", "gone")).await;
            respond(&mut api, 503, failure(503, "ServiceUnavailable", "later")).await;
            first
        });
        let key = ObjectKey::new(testing::deployment_kind(), Some("default"), "web");
        backend
            .delete(&key, Propagation::Foreground, Some("uid-web"))
            .await
            .unwrap();
        backend
            .delete(&key, Propagation::Background, None)
            .await
            .unwrap();
        let err = backend.delete(&key, Propagation::Orphan, None).await;
        assert!(matches!(err, Err(BackendError::Transient(_))), "{err:?}");
        let first = server.await.unwrap();
        assert_eq!(first.method, http::Method::DELETE);
        assert_eq!(first.body["propagationPolicy"], "Foreground");
        assert_eq!(first.body["preconditions"]["uid"], "uid-web");
    }

    #[tokio::test]
    async fn cluster_scoped_kinds_use_cluster_paths() {
        let (backend, mut api) = testing::backend();
        backend.remember_kind(KindRef::new("", "v1", "Namespace"), "namespaces", false);
        let server = tokio::spawn(async move {
            let stored = json!({"apiVersion": "v1", "kind": "Namespace",
                                "metadata": {"name": "team", "resourceVersion": "1"}});
            respond(&mut api, 200, stored).await
        });
        let namespace =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}});
        backend
            .apply(namespace, "reconciler-host/tenants", false)
            .await
            .unwrap();
        let seen = server.await.unwrap();
        assert_eq!(seen.path, "/api/v1/namespaces/team");
        assert!(!seen.query.contains("force"));
    }

    /// A request the server never answers ends at the client's request
    /// timeout (the layer `run` puts on its client) as a transient error that
    /// says so, instead of holding the reconcile forever.
    #[tokio::test(start_paused = true)]
    async fn an_unanswered_request_is_a_transient_error_naming_the_timeout() {
        use std::time::Duration;

        let (service, mut api) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let service = tower::ServiceBuilder::new()
            .layer(tower::timeout::TimeoutLayer::new(Duration::from_secs(60)))
            .service(service);
        let backend = super::KubernetesBackend::with_reporting_instance(
            kube::Client::new(service, "default"),
            "pod-0",
        );
        backend.remember_kind(testing::deployment_kind(), "deployments", true);
        let server = tokio::spawn(async move {
            // Take the request and hold on to it without answering.
            let (request, pending) = api.next_request().await.expect("a request");
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(pending);
            request.uri().path().to_string()
        });

        let deployment = testing::stored_deployment("web", "1");
        let started = tokio::time::Instant::now();
        let err = backend
            .apply(deployment, "reconciler-host/podset", true)
            .await
            .expect_err("nothing answered");
        let BackendError::Transient(message) = &err else {
            panic!("expected a transient error, got {err:?}");
        };
        assert!(
            message.contains("did not answer within the request timeout")
                && message.contains("Deployment default/web"),
            "{message}"
        );
        assert_eq!(started.elapsed(), Duration::from_secs(60));
        server.abort();
    }
}
