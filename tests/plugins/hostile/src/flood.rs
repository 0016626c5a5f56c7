//! Responses that ask the host for too much: too many requests, requeues
//! too soon or too late, JSON nested too deep to read back.

use std::time::Duration;

use reconciler_sdk::{Context, Error, EventType, KindRef, Response};
use serde_json::{Value, json};

use crate::{Hostile, config_map};

/// The response for `mode`, if it is one of this module's.
///
/// - `event-flood`: 100,000 Events in one response (600 KB, under the
///   output cap);
/// - `apply-flood`: 501 ConfigMaps; `delete-flood`: 501 deletes;
/// - `nag`: the same Event on every reconcile, and a requeue in 1 s;
/// - `requeue-zero`: its ConfigMap, and a requeue after 0 ms, every time;
/// - `requeue-max`: its ConfigMap, and a requeue after `u64::MAX` ms;
/// - `deep-status`: a status nested 127 levels deep, the most serde_json
///   parses (inside the object it is 128: unreadable).
pub(crate) fn attempt(
    mode: &str,
    hostile: &Hostile,
    ctx: &Context,
) -> Option<Result<Response, Error>> {
    let _ = ctx;
    let name = hostile.name();
    let own = || Response::new().apply(&config_map(name, json!({})));
    match mode {
        "event-flood" => Some(own().map(|mut response| {
            for _ in 0..100_000 {
                response = response.event(EventType::Normal, "Flood", "x");
            }
            response
        })),
        "apply-flood" => Some((0..501).try_fold(Response::new(), |response, i| {
            response.apply(&config_map(&format!("{name}-{i}"), json!({})))
        })),
        "delete-flood" => Some(own().map(|response| {
            (0..501).fold(response, |response, i| {
                response.delete(
                    &KindRef::new("", "v1", "ConfigMap"),
                    None,
                    &format!("gone-{i}"),
                )
            })
        })),
        "nag" => Some(own().map(|response| {
            response
                .event(EventType::Normal, "Nagging", "still here")
                .requeue_after(Duration::from_secs(1))
        })),
        "requeue-zero" => Some(own().map(|response| response.requeue_after(Duration::ZERO))),
        "requeue-max" => Some(own().map(|response| response.requeue_after(Duration::MAX))),
        "deep-status" => Some(own().and_then(|response| {
            let mut status = json!({"bottom": true});
            for _ in 0..126 {
                status = json!({ "deeper": status });
            }
            response.status::<Value>(&status)
        })),
        _ => None,
    }
}
