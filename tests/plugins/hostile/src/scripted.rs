//! Returns whatever response the Hostile object's `spec.response` spells
//! out, item by item: the fuzz test uses it to hand the host arbitrary
//! responses through the real boundary.

use std::time::Duration;

use reconciler_sdk::{Context, Error, EventType, KindRef, Response};
use serde::Deserialize;
use serde_json::Value;

use crate::Hostile;

/// `spec.response`, in the contract's shape; every part optional.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Script {
    apply: Vec<Value>,
    delete: Vec<DeleteItem>,
    status: Option<Value>,
    /// A status nested this deep, built here so the primary carrying the
    /// script stays shallow.
    status_depth: Option<usize>,
    events: Vec<EventItem>,
    requeue_after_ms: Option<u64>,
    finalized: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeleteItem {
    api_version: String,
    kind: String,
    namespace: Option<String>,
    name: String,
}

#[derive(Deserialize)]
struct EventItem {
    warning: bool,
    reason: String,
    message: String,
}

/// The response for `mode`, if it is `scripted`.
pub(crate) fn attempt(
    mode: &str,
    hostile: &Hostile,
    ctx: &Context,
) -> Option<Result<Response, Error>> {
    let _ = ctx;
    (mode == "scripted").then(|| {
        let script: Script = hostile
            .spec
            .response
            .clone()
            .map(serde_json::from_value)
            .transpose()
            .map_err(|e| Error::msg(format!("spec.response: {e}")))?
            .unwrap_or_default();
        let mut response = Response::new();
        for object in &script.apply {
            response = response.apply(object)?;
        }
        for d in &script.delete {
            let kind = KindRef::from_api_version(&d.api_version, &d.kind);
            response = response.delete(&kind, d.namespace.as_deref(), &d.name);
        }
        if let Some(status) = &script.status {
            response = response.status(status)?;
        }
        if let Some(depth) = script.status_depth {
            let mut status = serde_json::json!({"leaf": true});
            for _ in 0..depth {
                status = serde_json::json!({ "n": status });
            }
            response = response.status(&status)?;
        }
        for e in &script.events {
            let event_type = if e.warning {
                EventType::Warning
            } else {
                EventType::Normal
            };
            response = response.event(event_type, &e.reason, e.message.clone());
        }
        if let Some(ms) = script.requeue_after_ms {
            response = response.requeue_after(Duration::from_millis(ms));
        }
        if script.finalized {
            response = response.finalized();
        }
        Ok(response)
    })
}
