//! Admission for KubernetesClusters: the checks that can be made before an
//! object is stored, so a user hears about a mistake from kubectl instead of
//! from a condition later.
//!
//! - `spec.masters` cannot change on update (the reconcile-time check on
//!   `status.masters` stays, for objects admitted while the webhook was not
//!   registered). Setting it back to the value operations started with is
//!   always allowed, since that is what the reconcile-time refusal asks for.
//! - `spec.timeoutSeconds` must be 1 or more (the CRD's schema says so too;
//!   this catches a CRD installed without it).
//! - Defaulting fills an empty `spec.version` with [`DEFAULT_VERSION`].

use reconciler_sdk::{Admission, Error, Operation as AdmissionOperation, Verdict};
use serde_json::Value;

use crate::KubernetesCluster;

/// The Kubernetes version a cluster gets when its spec names none.
pub const DEFAULT_VERSION: &str = "1.33";

pub(crate) fn validate(request: &Admission<KubernetesCluster>) -> Result<Verdict, Error> {
    let Some(cluster) = &request.object else {
        return Ok(Verdict::allow());
    };
    let timeout = cluster.spec.timeout_seconds;
    if timeout < 1 {
        return Ok(Verdict::deny(format!(
            "spec.timeoutSeconds must be 1 or more, got {timeout}"
        )));
    }
    if request.operation == AdmissionOperation::Update
        && let Some(old) = &request.old_object
    {
        let (was, now) = (old.spec.masters, cluster.spec.masters);
        let started_with = old.status.as_ref().and_then(|s| s.masters);
        if was != now && started_with != Some(now) {
            return Ok(Verdict::deny(format!(
                "spec.masters cannot change after creation: it is {was}, the update asks for {now}; \
                 create a new KubernetesCluster for another control-plane size"
            )));
        }
    }
    Ok(Verdict::allow())
}

pub(crate) fn apply_defaults(object: &mut Value) -> Result<(), Error> {
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    let empty = spec
        .get("version")
        .is_none_or(|v| v.is_null() || v.as_str() == Some(""));
    if empty {
        spec.insert("version".to_string(), Value::from(DEFAULT_VERSION));
    }
    Ok(())
}
