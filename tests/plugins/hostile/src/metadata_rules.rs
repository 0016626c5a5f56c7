//! Responses that set fields the host owns, or metadata the API server
//! would refuse. Each misbehaving mode returns a legal ConfigMap first and the
//! offending object second, so a host that applied item by item would leave
//! the first behind.

use reconciler_sdk::{Context, Error, Response};
use serde_json::{Value, json};

use crate::{Hostile, config_map};

/// A uid no object in any test cluster has: an ownerReference to it dangles,
/// and the garbage collector deletes what carries it.
const STRANGER_UID: &str = "3f1c2b8e-0000-4000-8000-00000000dead";

/// The response for `mode`, if it is one of this module's.
pub(crate) fn attempt(
    mode: &str,
    hostile: &Hostile,
    ctx: &Context,
) -> Option<Result<Response, Error>> {
    let _ = ctx;
    let name = hostile.name();
    let second = format!("{name}-2");
    let offending = match mode {
        // The ServiceAccount is a written kind: never owned by the host, so
        // a dangling reference would hand it to the garbage collector.
        "owner-reference-via-writes" => json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": name, "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                "name": "stranger", "uid": STRANGER_UID}]}
        }),
        "set-finalizers" => config_map(
            &second,
            json!({"metadata": {"name": second, "finalizers": ["hostile.example.com/stuck"]}}),
        ),
        "set-uid" => config_map(
            &second,
            json!({"metadata": {"name": second, "uid": STRANGER_UID}}),
        ),
        "set-resource-version" => config_map(
            &second,
            json!({"metadata": {"name": second, "resourceVersion": "1"}}),
        ),
        "numeric-label-second" => config_map(
            &second,
            json!({"metadata": {"name": second, "labels": {"tier": 3}}}),
        ),
        "bad-annotation-key" => config_map(
            &second,
            json!({"metadata": {"name": second, "annotations": {"bad key!": "x"}}}),
        ),
        // One byte over the API server's 256 KiB for keys and values.
        "huge-annotations" => config_map(
            &second,
            json!({"metadata": {"name": second, "annotations": {"a": "x".repeat(256 * 1024)}}}),
        ),
        "generate-name" => config_map(
            &second,
            json!({"metadata": {"name": second, "generateName": "hostile-"}}),
        ),
        // Legal: null is absent, and the host still sets its controller
        // reference.
        "null-owner-references" => {
            return Some(Response::new().apply(&config_map(
                name,
                json!({"metadata": {"name": name, "ownerReferences": Value::Null}}),
            )));
        }
        _ => return None,
    };
    Some(
        Response::new()
            .apply(&config_map(name, json!({})))
            .and_then(|r| r.apply(&offending)),
    )
}
