//! Resolves a kind to the resource the API server serves it under.
//!
//! Plugins name kinds (`apps/v1 Deployment`); the REST API wants resources
//! (`/apis/apps/v1/namespaces/x/deployments`) and whether they are
//! namespaced. Both come from discovery, which is a round trip per group
//! version, so answers are cached per kind for the life of the backend.
//! Misses are not cached: a CRD installed later is found on the next call.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::api::{ApiResource, GroupVersionKind};
use kube::discovery::{self, Scope};
use reconciler_contract::KindRef;

use super::errors;
use crate::cluster::backend::BackendError;

/// What the backend needs to know about a served kind.
#[derive(Clone, Debug)]
pub(crate) struct Resolved {
    pub resource: ApiResource,
    pub namespaced: bool,
}

#[derive(Default)]
pub(crate) struct KindCache {
    kinds: Mutex<HashMap<KindRef, Resolved>>,
}

impl KindCache {
    /// Records a kind without asking the server.
    pub fn insert(&self, kind: KindRef, resource: ApiResource, scope: Scope) {
        let resolved = Resolved {
            resource,
            namespaced: matches!(scope, Scope::Namespaced),
        };
        self.lock().insert(kind, resolved);
    }

    /// The resource for `kind`, asking the server when it is not cached yet.
    pub async fn resolve(
        &self,
        client: &kube::Client,
        kind: &KindRef,
    ) -> Result<Resolved, BackendError> {
        if let Some(hit) = self.lock().get(kind) {
            return Ok(hit.clone());
        }
        let gvk = GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
        let unknown = || BackendError::UnknownKind {
            kind: format!("{} {}", kind.api_version(), kind.kind),
        };
        let (resource, caps) = match discovery::pinned_kind(client, &gvk).await {
            Ok(found) => found,
            // The group version is not served at all.
            Err(e) if errors::code(&e) == Some(404) => return Err(unknown()),
            Err(kube::Error::Discovery(_)) => return Err(unknown()),
            Err(e) => {
                let request = errors::Request {
                    verb: "get",
                    group: &kind.group,
                    resource: "(discovery)".into(),
                    namespace: None,
                    target: format!("discovery of {}", kind.api_version()),
                };
                return Err(errors::map(e, &request));
            }
        };
        self.insert(kind.clone(), resource.clone(), caps.scope.clone());
        Ok(self.lock().get(kind).cloned().expect("just inserted"))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<KindRef, Resolved>> {
        // The map is never left half-updated, so a poisoned lock is still usable.
        self.kinds.lock().unwrap_or_else(|e| e.into_inner())
    }
}
