//! Deletes and applies of objects this primary does not control: a
//! stranger's, a sibling primary's, an orphan.

use reconciler_sdk::{Context, Error, KindRef, Response};
use serde_json::json;

use crate::{Hostile, config_map};

/// The response for `mode`, if it is one of this module's.
///
/// - `delete-stranger`: keeps its own ConfigMap and asks to delete the
///   ConfigMaps named in `spec.targets`, which it does not control;
/// - `adopt`: applies the ConfigMap named by `spec.targets[0]` (someone
///   else's, or one with no controller) with `data.k: "99"`.
pub(crate) fn attempt(
    mode: &str,
    hostile: &Hostile,
    ctx: &Context,
) -> Option<Result<Response, Error>> {
    let _ = ctx;
    let own = config_map(hostile.name(), json!({}));
    let targets = &hostile.spec.targets;
    match mode {
        "delete-stranger" => Some((|| {
            let mut response = Response::new().apply(&own)?;
            for target in targets {
                response = response.delete(&KindRef::new("", "v1", "ConfigMap"), None, target);
            }
            Ok(response)
        })()),
        "adopt" => Some((|| {
            let target = targets
                .first()
                .ok_or_else(|| Error::msg("mode adopt needs spec.targets[0]"))?;
            Response::new()
                .apply(&own)?
                .apply(&config_map(target, json!({"data": {"k": "99"}})))
        })()),
        _ => None,
    }
}
