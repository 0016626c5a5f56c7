//! Adding and removing one finalizer without touching anyone else's.
//!
//! Several controllers may hold finalizers on one object and edit the list
//! at the same time. A plain merge patch replaces the whole list, so both
//! operations use JSON patches guarded by `test` ops: the patch applies only
//! if the list (or the entry at the index we remove) is what we read. When
//! the guard fails the object changed under us: read it again and retry.

use kube::api::{Patch, PatchParams};
use reconciler_contract::memory_cache::finalizers_of;
use serde_json::{Value, json};

use super::connection::{KubernetesBackend, request};
use super::errors;
use super::object_values::to_value;
use crate::cluster::backend::{BackendError, ObjectKey};

/// How often a patch whose guard failed is retried with a fresh read.
const ATTEMPTS: usize = 5;

fn finalizers(object: &Value) -> Vec<String> {
    finalizers_of(object)
        .into_iter()
        .map(str::to_string)
        .collect()
}

/// The patch adding `finalizer` to an object whose list is `current`.
fn add_patch(current: &[String], finalizer: &str) -> Value {
    if current.is_empty() {
        // No list yet: create it, unless someone else created one meanwhile.
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]},
        ])
    } else {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": current},
            {"op": "add", "path": "/metadata/finalizers/-", "value": finalizer},
        ])
    }
}

/// The patch removing the entry at `index`, only if it is still `finalizer`.
fn remove_patch(index: usize, finalizer: &str) -> Value {
    let path = format!("/metadata/finalizers/{index}");
    json!([
        {"op": "test", "path": path, "value": finalizer},
        {"op": "remove", "path": path},
    ])
}

pub(crate) async fn add(
    backend: &KubernetesBackend,
    key: &ObjectKey,
    finalizer: &str,
) -> Result<Value, BackendError> {
    edit(backend, key, |current| {
        (!current.iter().any(|f| f == finalizer)).then(|| add_patch(current, finalizer))
    })
    .await?
    .ok_or_else(|| BackendError::NotFound {
        key: key.to_string(),
    })
}

pub(crate) async fn remove(
    backend: &KubernetesBackend,
    key: &ObjectKey,
    finalizer: &str,
) -> Result<(), BackendError> {
    // An object that is gone has no finalizer left to remove.
    edit(backend, key, |current| {
        current
            .iter()
            .position(|f| f == finalizer)
            .map(|index| remove_patch(index, finalizer))
    })
    .await
    .map(|_| ())
}

/// Reads the object, asks `plan` for a guarded patch (none: nothing to do)
/// and sends it, re-reading when the guard fails. Returns the object as
/// stored afterwards; `Ok(None)`: no such object.
async fn edit(
    backend: &KubernetesBackend,
    key: &ObjectKey,
    plan: impl Fn(&[String]) -> Option<Value>,
) -> Result<Option<Value>, BackendError> {
    let resolved = backend.resolve(&key.kind).await?;
    let api = backend.api_for(&resolved, key)?;
    let mut last_error = None;
    for _ in 0..ATTEMPTS {
        let object = match api.get_opt(&key.name).await {
            Ok(Some(object)) => to_value(object, &resolved.resource),
            Ok(None) => return Ok(None),
            Err(e) => return Err(errors::map(e, &request("get", &resolved, key, None))),
        };
        let Some(patch) = plan(&finalizers(&object)) else {
            return Ok(Some(object));
        };
        let patch = serde_json::from_value(patch).expect("a well-formed JSON patch");
        match api
            .patch(
                &key.name,
                &PatchParams::default(),
                &Patch::<()>::Json(patch),
            )
            .await
        {
            Ok(stored) => return Ok(Some(to_value(stored, &resolved.resource))),
            // The guard failed (422), or the object changed (409): read again.
            Err(e) if matches!(errors::code(&e), Some(409 | 422)) => {
                last_error = Some(errors::map(e, &request("patch", &resolved, key, None)));
            }
            Err(e) if errors::code(&e) == Some(404) => return Ok(None),
            Err(e) => return Err(errors::map(e, &request("patch", &resolved, key, None))),
        }
    }
    Err(match last_error {
        Some(BackendError::Invalid { key, message } | BackendError::Conflict { key, message }) => {
            BackendError::Conflict {
                key,
                message: format!("finalizers kept changing: {message}"),
            }
        }
        Some(other) => other,
        None => BackendError::Transient(format!("{key}: finalizer update did not settle")),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::testing::{self, failure, respond, stored_deployment};
    use crate::cluster::backend::{ClusterBackend, ObjectKey};

    fn with_finalizers(list: &[&str]) -> Value {
        let mut object = stored_deployment("web", "5");
        object["metadata"]["finalizers"] = json!(list);
        object
    }

    fn key() -> ObjectKey {
        ObjectKey::new(testing::deployment_kind(), Some("default"), "web")
    }

    #[tokio::test]
    async fn remove_tests_the_entry_before_removing_it_and_retries() {
        let (backend, mut api) = testing::backend();
        let server = tokio::spawn(async move {
            respond(
                &mut api,
                200,
                with_finalizers(&["other.io/x", "podset.demo/cleanup"]),
            )
            .await;
            // Another controller removed its entry in between: the guard fails.
            let first = respond(
                &mut api,
                422,
                failure(422, "Invalid", "test operation failed"),
            )
            .await;
            let reread = respond(&mut api, 200, with_finalizers(&["podset.demo/cleanup"])).await;
            let second = respond(&mut api, 200, with_finalizers(&[])).await;
            (first, reread, second)
        });
        backend
            .remove_finalizer(&key(), "podset.demo/cleanup")
            .await
            .expect("removed");
        let (first, reread, second) = server.await.unwrap();
        assert_eq!(first.method, http::Method::PATCH);
        assert_eq!(
            first.content_type.as_deref(),
            Some("application/json-patch+json")
        );
        assert_eq!(
            first.body,
            json!([
                {"op": "test", "path": "/metadata/finalizers/1", "value": "podset.demo/cleanup"},
                {"op": "remove", "path": "/metadata/finalizers/1"},
            ])
        );
        assert_eq!(reread.method, http::Method::GET);
        assert_eq!(
            second.body,
            json!([
                {"op": "test", "path": "/metadata/finalizers/0", "value": "podset.demo/cleanup"},
                {"op": "remove", "path": "/metadata/finalizers/0"},
            ])
        );
    }

    #[tokio::test]
    async fn remove_of_absent_finalizer_or_object_sends_no_patch() {
        let (backend, mut api) = testing::backend();
        let server = tokio::spawn(async move {
            respond(&mut api, 200, with_finalizers(&["other.io/x"])).await;
            respond(&mut api, 404, failure(404, "NotFound", "gone")).await;
        });
        backend
            .remove_finalizer(&key(), "podset.demo/cleanup")
            .await
            .unwrap();
        backend
            .remove_finalizer(&key(), "podset.demo/cleanup")
            .await
            .unwrap();
        server.await.unwrap();
    }

    #[tokio::test]
    async fn add_appends_only_when_missing() {
        let (backend, mut api) = testing::backend();
        let server = tokio::spawn(async move {
            respond(&mut api, 200, with_finalizers(&["other.io/x"])).await;
            let patch = respond(&mut api, 200, with_finalizers(&["other.io/x", "p/c"])).await;
            respond(&mut api, 200, with_finalizers(&["other.io/x", "p/c"])).await;
            patch
        });
        backend.add_finalizer(&key(), "p/c").await.unwrap();
        // Already there: a read and no patch.
        backend.add_finalizer(&key(), "p/c").await.unwrap();
        let patch = server.await.unwrap();
        assert_eq!(
            patch.body,
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["other.io/x"]},
                {"op": "add", "path": "/metadata/finalizers/-", "value": "p/c"},
            ])
        );
    }
}
