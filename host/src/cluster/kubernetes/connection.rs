//! The backend's hold on one API server: the client, the kinds it has
//! resolved, what its Events report as, and how a request on an object is
//! addressed and named in errors.
//!
//! Why a module: each job of the backend (watch, apply, finalizers, events)
//! lives in its own module and works through this; the `ClusterBackend`
//! implementation in [`super`] only hands calls to them.

use std::sync::Arc;

use kube::api::{Api, ApiResource, DynamicObject};
use kube::discovery::Scope;
use reconciler_contract::KindRef;

use super::discovery::{KindCache, Resolved};
use super::errors;
use super::write_fence::WriteFence;
use crate::cluster::backend::{BackendError, ObjectKey};

/// A `ClusterBackend` that drives a Kubernetes API server through `kube`.
#[derive(Clone)]
pub struct KubernetesBackend {
    pub(super) client: kube::Client,
    kinds: Arc<KindCache>,
    /// `reportingInstance` of recorded Events: which replica reported.
    pub(super) reporting_instance: String,
    /// Asked immediately before every write.
    pub(super) fence: WriteFence,
}

impl KubernetesBackend {
    /// A backend using `client`. Events name the pod (`POD_NAME`, else
    /// `HOSTNAME`) as their reporting instance.
    pub fn new(client: kube::Client) -> Self {
        let instance = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| "reconciler-host".to_string());
        Self::with_reporting_instance(client, instance)
    }

    pub fn with_reporting_instance(client: kube::Client, instance: impl Into<String>) -> Self {
        let mut instance: String = instance.into();
        // The API limits reportingInstance to 128 characters.
        truncate_at_char(&mut instance, 128);
        Self {
            client,
            kinds: Arc::default(),
            reporting_instance: instance,
            fence: WriteFence::default(),
        }
    }

    /// This backend with its writes checked by `fence` before they leave.
    pub fn with_fence(mut self, fence: WriteFence) -> Self {
        self.fence = fence;
        self
    }

    /// Tells the backend how `kind` is served, sparing a discovery request.
    pub fn remember_kind(&self, kind: KindRef, plural: &str, namespaced: bool) {
        let gvk = kube::api::GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
        let scope = if namespaced {
            Scope::Namespaced
        } else {
            Scope::Cluster
        };
        self.kinds.insert(kind, resource, scope);
    }

    pub(super) async fn resolve(&self, kind: &KindRef) -> Result<Resolved, BackendError> {
        self.kinds.resolve(&self.client, kind).await
    }

    /// The API for one object of a resolved kind.
    pub(super) fn api_for(
        &self,
        resolved: &Resolved,
        key: &ObjectKey,
    ) -> Result<Api<DynamicObject>, BackendError> {
        match (resolved.namespaced, key.namespace.as_deref()) {
            (true, Some(ns)) => Ok(Api::namespaced_with(
                self.client.clone(),
                ns,
                &resolved.resource,
            )),
            (true, None) => Err(BackendError::Invalid {
                key: key.to_string(),
                message: format!("{} is namespaced but no namespace was given", key.kind.kind),
            }),
            (false, _) => Ok(Api::all_with(self.client.clone(), &resolved.resource)),
        }
    }
}

/// Describes a request on `key` for error messages.
pub(super) fn request<'a>(
    verb: &'static str,
    resolved: &Resolved,
    key: &'a ObjectKey,
    subresource: Option<&str>,
) -> errors::Request<'a> {
    let mut resource = resolved.resource.plural.clone();
    if let Some(sub) = subresource {
        resource = format!("{resource}/{sub}");
    }
    errors::Request {
        verb,
        group: &key.kind.group,
        resource,
        namespace: if resolved.namespaced {
            key.namespace.as_deref()
        } else {
            None
        },
        target: key.to_string(),
    }
}

/// Cuts `s` to at most `max` bytes, at a character boundary.
pub(super) fn truncate_at_char(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}
