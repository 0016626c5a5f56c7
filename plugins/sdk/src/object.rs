//! Typed objects for kinds that k8s-openapi does not know: your own CRDs.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use reconciler_contract::KindRef;

/// A custom resource with your own spec and status types. Without a status
/// type the status is kept as plain JSON, so an object that has one (written
/// by this plugin or anyone else) still parses.
///
/// ```
/// use reconciler_sdk::Object;
/// #[derive(serde::Serialize, serde::Deserialize, Default)]
/// struct PodSetSpec { size: i32 }
/// type PodSet = Object<PodSetSpec>; // status left untyped (any JSON)
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Object<Spec, Status = serde_json::Value> {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Spec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
}

impl<Spec, Status> Object<Spec, Status> {
    pub fn kind_ref(&self) -> KindRef {
        KindRef::from_api_version(&self.api_version, &self.kind)
    }

    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    pub fn namespace(&self) -> Option<&str> {
        self.metadata.namespace.as_deref()
    }
}

/// Only the identifying metadata of an object: parse list results into this
/// when names, labels or annotations are all you need. Everything else (spec,
/// status, managedFields, ownerReferences, timestamps) is skipped unbuilt,
/// which for Pods makes parsing several times cheaper than a full
/// `ObjectMeta`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartialObject {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: PartialMeta,
}

/// The parts of `metadata` that identify and classify an object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartialMeta {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
}

impl PartialObject {
    pub fn name(&self) -> &str {
        &self.metadata.name
    }
}
