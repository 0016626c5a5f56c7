//! Objects of any kind, as JSON, in the test's namespace.
//!
//! Tests speak in manifests (`serde_json::json!`), as a user would with
//! kubectl; kinds are found by discovery, so a kind served by a CRD a test
//! just installed works like a built-in one.

use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::discovery::{Scope, pinned_kind};
use reconciler_sdk::KindRef;
use reconciler_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::Value;

use super::poll::Probe;
use super::{RealCluster, TEST_MANAGER};

/// A kind just Established can still be missing from discovery, and its
/// objects answer 404, for a moment.
const SERVED_TIMEOUT: Duration = Duration::from_secs(30);

/// The test's field manager, for its own creates and patches.
fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(TEST_MANAGER.to_string()),
        ..PostParams::default()
    }
}

pub(crate) fn to_json(object: DynamicObject) -> Result<Value> {
    serde_json::to_value(object).context("turning an object of the API server into JSON")
}

/// Whether `error` is the API server answering with HTTP `code`.
pub fn is_api_error(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

/// `metadata.uid`, which every object read from the API server has.
pub fn uid_of(object: &Value) -> Result<String> {
    object
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .map(str::to_string)
        .with_context(|| format!("an object without metadata.uid: {object}"))
}

/// `metadata.ownerReferences`, each parsed; an entry that is not a valid
/// reference is an error naming it.
pub fn owner_references(object: &Value) -> Result<Vec<OwnerReference>> {
    let Some(refs) = object.pointer("/metadata/ownerReferences") else {
        return Ok(Vec::new());
    };
    serde_json::from_value(refs.clone())
        .with_context(|| format!("metadata.ownerReferences is not a list of references: {refs}"))
}

/// The reference with `controller: true`, if there is exactly one; an
/// error if there are several.
pub fn controller_of(object: &Value) -> Result<Option<OwnerReference>> {
    let mut controllers: Vec<OwnerReference> = owner_references(object)?
        .into_iter()
        .filter(|r| r.controller == Some(true))
        .collect();
    match controllers.len() {
        0 => Ok(None),
        1 => Ok(controllers.pop()),
        n => Err(anyhow!(
            "{n} controller references, the API server allows one: {controllers:?}"
        )),
    }
}

/// A reference to `owner` as a controller, as a manifest states it.
pub fn controller_reference(owner: &Value) -> Result<Value> {
    let field = |pointer: &str| {
        owner
            .pointer(pointer)
            .cloned()
            .with_context(|| format!("the owner has no {pointer}: {owner}"))
    };
    Ok(serde_json::json!({
        "apiVersion": field("/apiVersion")?,
        "kind": field("/kind")?,
        "name": field("/metadata/name")?,
        "uid": field("/metadata/uid")?,
        "controller": true,
    }))
}

impl RealCluster {
    /// The API of `kind`: within the test's namespace if it is namespaced.
    pub async fn api(&self, kind: &KindRef) -> Result<Api<DynamicObject>> {
        let (resource, namespaced) = self.resolve(kind).await?;
        Ok(if namespaced {
            Api::namespaced_with(self.client.clone(), &self.namespace, &resource)
        } else {
            Api::all_with(self.client.clone(), &resource)
        })
    }

    async fn resolve(&self, kind: &KindRef) -> Result<(ApiResource, bool)> {
        if let Some(found) = self.lock_kinds().get(kind) {
            return Ok(found.clone());
        }
        let gvk = GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
        let (resource, capabilities) = self
            .wait_for(
                &format!(
                    "the API server to serve {} {}",
                    kind.api_version(),
                    kind.kind
                ),
                SERVED_TIMEOUT,
                async || match pinned_kind(&self.client, &gvk).await {
                    Ok(found) => Ok(Probe::Ready(found)),
                    Err(e) => Ok(Probe::Pending(e.to_string())),
                },
            )
            .await?;
        let found = (resource, capabilities.scope == Scope::Namespaced);
        self.lock_kinds().insert(kind.clone(), found.clone());
        Ok(found)
    }

    /// Creates `object` (a manifest with apiVersion, kind and metadata.name
    /// or generateName) in the test's namespace; returns it as stored. A
    /// cluster-scoped object is deleted when the test ends.
    pub async fn create(&self, object: Value) -> Result<Value> {
        let kind = KindRef::of_object(&object)
            .with_context(|| format!("a manifest without apiVersion and kind: {object}"))?;
        let api = self.api(&kind).await?;
        let (_, namespaced) = self.resolve(&kind).await?;
        let body: DynamicObject = serde_json::from_value(object.clone())
            .with_context(|| format!("not an object manifest: {object}"))?;
        let what = format!(
            "{} {}",
            kind.kind,
            object["metadata"]["name"]
                .as_str()
                .unwrap_or("(generated name)")
        );
        let created = self
            .wait_for(
                &format!("the API server to accept {what}"),
                SERVED_TIMEOUT,
                async || match api.create(&post_params(), &body).await {
                    Ok(created) => Ok(Probe::Ready(created)),
                    Err(e) if is_api_error(&e, 404) => Ok(Probe::Pending(e.to_string())),
                    Err(e) => Err(e).with_context(|| format!("creating {what}")),
                },
            )
            .await?;
        self.step(format!("created {what}"));
        if !namespaced && let Some(name) = &created.metadata.name {
            self.delete_at_cleanup(kind, name);
        }
        to_json(created)
    }

    /// A fresh read of one object; `None` if there is none.
    pub async fn get(&self, kind: &KindRef, name: &str) -> Result<Option<Value>> {
        let found = self
            .api(kind)
            .await?
            .get_opt(name)
            .await
            .with_context(|| format!("reading {} {name}", kind.kind))?;
        found.map(to_json).transpose()
    }

    /// A fresh read of an object that must exist.
    pub async fn must_get(&self, kind: &KindRef, name: &str) -> Result<Value> {
        self.get(kind, name).await?.with_context(|| {
            format!(
                "{} {}/{name} does not exist (any more)",
                kind.kind, self.namespace
            )
        })
    }

    /// A JSON merge patch of one object, by the test's field manager.
    pub async fn merge_patch(&self, kind: &KindRef, name: &str, patch: Value) -> Result<Value> {
        let params = PatchParams {
            field_manager: Some(TEST_MANAGER.to_string()),
            ..PatchParams::default()
        };
        let patched = self
            .api(kind)
            .await?
            .patch(name, &params, &Patch::Merge(&patch))
            .await
            .with_context(|| format!("patching {} {name} with {patch}", kind.kind))?;
        to_json(patched)
    }

    /// A JSON merge patch of one object's status subresource, by the test's
    /// field manager: how a test plays a controller that is not there (the
    /// Job controller's verdict on a Job no kubelet runs).
    pub async fn merge_patch_status(
        &self,
        kind: &KindRef,
        name: &str,
        patch: Value,
    ) -> Result<Value> {
        let params = PatchParams {
            field_manager: Some(TEST_MANAGER.to_string()),
            ..PatchParams::default()
        };
        let patched = self
            .api(kind)
            .await?
            .patch_status(name, &params, &Patch::Merge(&patch))
            .await
            .with_context(|| format!("patching the status of {} {name} with {patch}", kind.kind))?;
        to_json(patched)
    }

    /// The objects of `kind` in the test's namespace (or all of them, for a
    /// cluster-scoped kind) matching `label_selector` (`""`: all), by name.
    pub async fn list(&self, kind: &KindRef, label_selector: &str) -> Result<Vec<Value>> {
        let listed = self
            .api(kind)
            .await?
            .list(&ListParams::default().labels(label_selector))
            .await
            .with_context(|| format!("listing {} with {label_selector:?}", kind.kind))?;
        let mut objects = listed
            .items
            .into_iter()
            .map(to_json)
            .collect::<Result<Vec<_>>>()?;
        objects.sort_by(|a, b| {
            a.pointer("/metadata/name")
                .and_then(Value::as_str)
                .cmp(&b.pointer("/metadata/name").and_then(Value::as_str))
        });
        Ok(objects)
    }

    /// Server-side apply of `object` by `manager`, without force; the API
    /// server's answer as it is, so a test can look at a refusal.
    pub async fn apply_as(
        &self,
        manager: &str,
        object: &Value,
    ) -> Result<Result<Value, kube::Error>> {
        let kind = KindRef::of_object(object)
            .with_context(|| format!("a manifest without apiVersion and kind: {object}"))?;
        let name = object["metadata"]["name"]
            .as_str()
            .with_context(|| format!("a manifest without metadata.name: {object}"))?;
        let api = self.api(&kind).await?;
        match api
            .patch(name, &PatchParams::apply(manager), &Patch::Apply(object))
            .await
        {
            Ok(stored) => Ok(Ok(to_json(stored)?)),
            Err(e) => Ok(Err(e)),
        }
    }

    /// A token of the service account `account` from the TokenRequest API,
    /// as the kubelet would mount into a Pod running as it.
    pub async fn service_account_token(&self, account: &str) -> Result<String> {
        let accounts = self.api(&KindRef::new("", "v1", "ServiceAccount")).await?;
        let request = serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        });
        let answer: Value = accounts
            .create_subresource("token", account, &PostParams::default(), &request)
            .await
            .with_context(|| format!("requesting a token of ServiceAccount {account}"))?;
        answer["status"]["token"]
            .as_str()
            .map(str::to_string)
            .with_context(|| format!("a TokenRequest answer without status.token: {answer}"))
    }

    /// Deletes one object; one that is already gone is no error.
    pub async fn delete(&self, kind: &KindRef, name: &str) -> Result<()> {
        match self
            .api(kind)
            .await?
            .delete(name, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_api_error(&e, 404) => Ok(()),
            Err(e) => Err(e).with_context(|| format!("deleting {} {name}", kind.kind)),
        }
    }
}
