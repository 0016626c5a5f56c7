//! Reaching out of the primary's namespace: cluster-scoped kinds, reads
//! of other namespaces.

use reconciler_sdk::{Context, Error, Response};
use serde_json::json;

use crate::{Hostile, config_map};

/// The response for `mode`, if it is one of this module's.
pub(crate) fn attempt(
    mode: &str,
    hostile: &Hostile,
    ctx: &Context,
) -> Option<Result<Response, Error>> {
    let _ = ctx;
    let name = hostile.name();
    match mode {
        // For the `cluster-primary` build: a cluster-scoped primary has no
        // namespace to lend its namespaced children, so a child that names
        // none is refused and one that names its namespace is applied.
        "scope-child-without-namespace" => {
            Some(Response::new().apply(&config_map(name, json!({}))))
        }
        "scope-child-in-default" => Some(Response::new().apply(&config_map(
            name,
            json!({"metadata": {"name": name, "namespace": "default"}}),
        ))),
        _ => None,
    }
}
