//! The golden case file format.
//!
//! A case is YAML a Kubernetes user recognises: the primary object and the
//! objects the cache holds as `kubectl get -o yaml` prints them, and the
//! response the plugin must give. Owned children are found among `objects`
//! the way the host finds them (a controller ownerReference to the primary).
//!
//! ```yaml
//! description: a new PodSet gets a Deployment of its size
//! now: 2024-01-01T00:00:00Z        # optional; the plugin's clock
//! cluster: {name: east, labels: {env: prod}}  # optional; `local` if absent
//! primary: {apiVersion: example.com/v1alpha1, kind: PodSet, ...}
//! objects: [...]                   # optional
//! expect:                          # every key is checked; absent means none
//!   apply: [...]
//!   delete: [...]
//!   status: {...}
//!   events: [{type: Normal, reason: Created, message: ...}]
//!   requeueAfter: 1m
//!   finalized: true
//!   error: spec.size must be     # instead of the above: the call must fail
//! ```
//!
//! An admission case has `admission` (the request) instead of `primary` and
//! `objects`, and expects a verdict and a patch: see `admission_case.rs`.
//! A change case has `change` (an object's old and new state) and expects
//! whether it wakes the primary: see `change_case.rs`.

use reconciler_contract::{ClusterInfo, Event, ObjectRef};

use super::admission_case::AdmissionCase;
use super::change_case::ChangeCase;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Case {
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub now: Option<String>,
    /// The cluster the plugin is told it runs in; `local` when absent.
    #[serde(default)]
    pub cluster: Option<ClusterInfo>,
    /// The object to reconcile; absent in an admission case.
    #[serde(default)]
    pub primary: Option<Value>,
    /// The admission request of an admission case.
    #[serde(default)]
    pub admission: Option<AdmissionCase>,
    /// The old and new object of a change case.
    #[serde(default)]
    pub change: Option<ChangeCase>,
    #[serde(default)]
    pub objects: Vec<Value>,
    /// An [`Expectation`], or for an admission case an
    /// [`super::admission_case::AdmissionExpectation`].
    pub expect: Value,
}

/// The response a case expects, in the shape the runner also prints the
/// actual response in, so a mismatch is a line diff of two such documents.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Expectation {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apply: Vec<Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delete: Vec<ObjectRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Event>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue_after: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub finalized: bool,
    /// A substring of the error the reconcile must fail with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
