//! Server-side apply of whole objects and of their status subresource.
//!
//! Apply is how the engine writes: it sends the fields a plugin wants and
//! the API server merges them by field manager, so two controllers can own
//! different fields of one object. Status goes through `/status` because
//! most kinds ignore `.status` in a write to the main resource.

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use super::connection::{KubernetesBackend, request};
use super::errors;
use super::object_values::to_value;
use crate::cluster::backend::{BackendError, ObjectKey};

pub(crate) async fn apply(
    backend: &KubernetesBackend,
    mut object: Value,
    field_manager: &str,
    force: bool,
) -> Result<Value, BackendError> {
    let key = ObjectKey::of(&object).ok_or_else(|| BackendError::Invalid {
        key: "object".into(),
        message: "an applied object needs apiVersion, kind and metadata.name".into(),
    })?;
    let resolved = backend.resolve(&key.kind).await?;
    let api = backend.api_for(&resolved, &key)?;
    // The server owns managedFields; an apply must not send them.
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    let mut params = PatchParams::apply(field_manager);
    if force {
        params = params.force();
    }
    match api.patch(&key.name, &params, &Patch::Apply(&object)).await {
        Ok(stored) => Ok(to_value(stored, &resolved.resource)),
        Err(e) => Err(errors::map(e, &request("patch", &resolved, &key, None))),
    }
}

pub(crate) async fn apply_status(
    backend: &KubernetesBackend,
    key: &ObjectKey,
    status: Value,
    field_manager: &str,
    resource_version: Option<&str>,
) -> Result<Value, BackendError> {
    let resolved = backend.resolve(&key.kind).await?;
    let api = backend.api_for(&resolved, key)?;
    let mut metadata = json!({ "name": key.name });
    // The API server checks a resourceVersion in an apply body (409 when
    // the object moved on) but ignores a uid there.
    if let Some(rv) = resource_version {
        metadata["resourceVersion"] = json!(rv);
    }
    if resolved.namespaced
        && let Some(ns) = &key.namespace
    {
        metadata["namespace"] = json!(ns);
    }
    let body = json!({
        "apiVersion": key.kind.api_version(),
        "kind": key.kind.kind,
        "metadata": metadata,
        "status": status,
    });
    // The plugin is the only writer of its status fields: take them over.
    let params = PatchParams::apply(field_manager).force();
    match api
        .patch_status(&key.name, &params, &Patch::Apply(&body))
        .await
    {
        Ok(stored) => Ok(to_value(stored, &resolved.resource)),
        Err(e) => Err(errors::map(
            e,
            &request("patch", &resolved, key, Some("status")),
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{self, failure, respond, stored_deployment};
    use crate::cluster::backend::{BackendError, ClusterBackend, ObjectKey};

    fn desired() -> serde_json::Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "default",
                "ownerReferences": [{
                    "apiVersion": "demo.reconciler.dev/v1", "kind": "PodSet", "name": "web",
                    "uid": "uid-podset", "controller": true, "blockOwnerDeletion": true,
                }],
            },
            "spec": {"replicas": 2},
        })
    }

    #[tokio::test]
    async fn podset_reconcile_applies_deployment_then_status() {
        let (backend, mut api) = testing::backend();
        let server = tokio::spawn(async move {
            let apply = respond(&mut api, 200, stored_deployment("web", "7")).await;
            let mut podset = json!({
                "apiVersion": "demo.reconciler.dev/v1", "kind": "PodSet",
                "metadata": {"name": "web", "namespace": "default", "resourceVersion": "8"},
                "status": {"readyReplicas": 2},
            });
            let status = respond(&mut api, 200, podset.take()).await;
            (apply, status)
        });

        let stored = backend
            .apply(desired(), "reconciler-host/podset", true)
            .await
            .expect("apply");
        assert_eq!(stored["metadata"]["resourceVersion"], "7");
        assert!(stored["metadata"].get("managedFields").is_none());

        let key = ObjectKey::new(testing::podset_kind(), Some("default"), "web");
        backend
            .apply_status(
                &key,
                json!({"readyReplicas": 2}),
                "reconciler-host/podset",
                None,
            )
            .await
            .expect("apply status");

        let (apply, status) = server.await.unwrap();
        assert_eq!(apply.method, http::Method::PATCH);
        assert_eq!(
            apply.path,
            "/apis/apps/v1/namespaces/default/deployments/web"
        );
        assert_eq!(
            apply.content_type.as_deref(),
            Some("application/apply-patch+yaml")
        );
        let mut query: Vec<&str> = apply.query.split('&').filter(|p| !p.is_empty()).collect();
        query.sort_unstable();
        assert_eq!(
            query,
            ["fieldManager=reconciler-host%2Fpodset", "force=true"]
        );
        assert_eq!(
            apply.body["metadata"]["ownerReferences"][0]["uid"],
            "uid-podset"
        );
        assert_eq!(apply.body["spec"]["replicas"], 2);

        assert_eq!(status.method, http::Method::PATCH);
        assert_eq!(
            status.path,
            "/apis/demo.reconciler.dev/v1/namespaces/default/podsets/web/status"
        );
        assert_eq!(
            status.content_type.as_deref(),
            Some("application/apply-patch+yaml")
        );
        assert!(status.query.contains("force=true"));
        assert_eq!(status.body["status"], json!({"readyReplicas": 2}));
        assert_eq!(status.body["kind"], "PodSet");
        assert_eq!(status.body["metadata"]["namespace"], "default");
    }

    #[tokio::test]
    async fn apply_failures_map_to_error_kinds() {
        let (backend, mut api) = testing::backend();
        let server = tokio::spawn(async move {
            respond(
                &mut api,
                409,
                failure(409, "Conflict", "field .spec.replicas owned by kubectl"),
            )
            .await;
            respond(
                &mut api,
                403,
                failure(403, "Forbidden", "deployments.apps \"web\" is forbidden"),
            )
            .await;
            respond(&mut api, 500, failure(500, "InternalError", "etcd timeout")).await;
            respond(
                &mut api,
                422,
                failure(422, "Invalid", "spec.replicas: must be >= 0"),
            )
            .await;
        });

        let conflict = backend
            .apply(desired(), "reconciler-host/podset", false)
            .await;
        assert!(
            matches!(conflict, Err(BackendError::Conflict { .. })),
            "{conflict:?}"
        );

        let forbidden = backend
            .apply(desired(), "reconciler-host/podset", true)
            .await;
        let Err(BackendError::Forbidden { message }) = forbidden else {
            panic!("expected Forbidden, got {forbidden:?}");
        };
        for part in ["\"patch\"", "\"deployments\"", "\"apps\"", "\"default\""] {
            assert!(message.contains(part), "{message} does not name {part}");
        }

        let server_error = backend
            .apply(desired(), "reconciler-host/podset", true)
            .await;
        assert!(
            matches!(server_error, Err(BackendError::Transient(_))),
            "{server_error:?}"
        );

        let invalid = backend
            .apply(desired(), "reconciler-host/podset", true)
            .await;
        assert!(
            matches!(invalid, Err(BackendError::Invalid { .. })),
            "{invalid:?}"
        );
        server.await.unwrap();
    }
}
