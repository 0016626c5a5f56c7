//! One label set on (or taken off) an object that exists, at the version
//! it was read.
//!
//! A merge patch, not an apply: a server-side apply creates an object that
//! is not there (the API server accepts a resourceVersion in the body of
//! such a create), so an apply of a label could bring back an object
//! deleted since it was read. A patch of a missing object is NotFound, and
//! a patch naming a resourceVersion is refused (Conflict) once the object
//! has moved past it.

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use super::connection::{KubernetesBackend, request};
use super::errors;
use super::object_values::to_value;
use crate::cluster::backend::{BackendError, LabelAt, ObjectKey};

pub(crate) async fn set(
    backend: &KubernetesBackend,
    key: &ObjectKey,
    label: LabelAt<'_>,
) -> Result<Value, BackendError> {
    let resolved = backend.resolve(&key.kind).await?;
    let api = backend.api_for(&resolved, key)?;
    let patch = json!({"metadata": {
        "resourceVersion": label.resource_version,
        "labels": {label.name: label.value},
    }});
    let params = PatchParams {
        field_manager: Some(label.field_manager.to_string()),
        ..PatchParams::default()
    };
    match api.patch(&key.name, &params, &Patch::Merge(&patch)).await {
        Ok(stored) => Ok(to_value(stored, &resolved.resource)),
        Err(e) if errors::code(&e) == Some(404) => Err(BackendError::NotFound {
            key: key.to_string(),
        }),
        Err(e) => Err(errors::map(e, &request("patch", &resolved, key, None))),
    }
}
