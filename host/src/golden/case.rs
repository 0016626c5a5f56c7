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

use reconciler_contract::{Event, ObjectRef};
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Case {
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub now: Option<String>,
    pub primary: Value,
    #[serde(default)]
    pub objects: Vec<Value>,
    pub expect: Expectation,
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
