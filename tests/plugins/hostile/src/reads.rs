//! Reads confined to the primary's namespace: the plugin declares Pods a
//! same-namespace read kind, then reads them in its own namespace and
//! tries another.

use reconciler_sdk::{Context, Error, KindRef, PartialObject, Response};
use serde_json::json;

use crate::Hostile;

/// The response for `mode`, if it is one of this module's.
pub(crate) fn attempt(
    mode: &str,
    hostile: &Hostile,
    ctx: &Context,
) -> Option<Result<Response, Error>> {
    let namespace = match mode {
        // No namespace: for a same-namespace kind, the primary's.
        "read-own-namespace" => None,
        "read-other-namespace" => Some("kube-system"),
        _ => return None,
    };
    let _ = hostile;
    Some(pod_names(ctx, namespace))
}

/// Reports the names of the Pods it could read in `namespace`.
fn pod_names(ctx: &Context, namespace: Option<&str>) -> Result<Response, Error> {
    let pods: Vec<PartialObject> = ctx.list_as(&KindRef::new("", "v1", "Pod"), namespace, "")?;
    let names: Vec<&str> = pods.iter().map(|p| p.name()).collect();
    Response::new().status(&json!({ "pods": names }))
}
