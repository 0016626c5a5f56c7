//! The PodSet kind (crds/podset.yaml) as a typed kube resource, shared by the
//! native controller and the driver.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::NamespaceResourceScope;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "example.com";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "PodSet";
pub const API_VERSION: &str = "example.com/v1alpha1";

/// The label that maps a Pod back to its PodSet, as podset's `PODSET_LABEL`.
pub const PODSET_LABEL: &str = "podset";

/// The CRD the bench installs: the repository's own.
pub const CRD_YAML: &str = include_str!("../../../crds/podset.yaml");

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSet {
    /// Sent on create: the API server refuses a custom object without them.
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: PodSetSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodSetStatus>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct PodSetSpec {
    pub size: i32,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSetStatus {
    #[serde(default)]
    pub pod_names: Vec<String>,
}

impl PodSet {
    pub fn new(name: &str, size: i32) -> Self {
        PodSet {
            api_version: API_VERSION.to_string(),
            kind: KIND.to_string(),
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            spec: PodSetSpec { size },
            status: None,
        }
    }

    /// How many names `status.podNames` holds (0 without a status).
    pub fn pod_name_count(&self) -> usize {
        self.status.as_ref().map_or(0, |s| s.pod_names.len())
    }
}

/// Written by hand rather than derived: kube's `CustomResource` derive needs a
/// kube feature the rest of the workspace does not build with.
impl kube::Resource for PodSet {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "podsets".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
