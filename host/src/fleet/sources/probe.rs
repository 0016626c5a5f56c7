//! A member's health probe, built by its source: the source knows where
//! to say that the member stopped (or started again) answering.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::ObjectReference;

use super::announcer::Announcer;
use crate::fleet::member::Probe;
use crate::plugin_resources::api_error_text;

/// Asks the API server its version: what a member's health probe does.
/// A member whose probe fails or answers again after failing says so on
/// its source Secret (Unreachable, Reachable), once per change.
pub(super) fn probe_of(
    client: kube::Client,
    announcer: Announcer,
    secret: Option<ObjectReference>,
    name: &str,
) -> Probe {
    let reachable = Arc::new(AtomicBool::new(true));
    let name = name.to_string();
    Arc::new(move || {
        let (client, announcer, secret, reachable, name) = (
            client.clone(),
            announcer.clone(),
            secret.clone(),
            reachable.clone(),
            name.clone(),
        );
        Box::pin(async move {
            let result = match client.apiserver_version().await {
                // Any answer, an error status included, is a server that answers.
                Ok(_) | Err(kube::Error::Api(_)) => Ok(()),
                Err(e) => Err(api_error_text(&e)),
            };
            let now = result.is_ok();
            if reachable.swap(now, Ordering::SeqCst) != now {
                let (warning, reason, note) = match &result {
                    Ok(()) => (
                        false,
                        "Reachable",
                        format!("cluster {name} answers again: its reconciles resume"),
                    ),
                    Err(why) => (
                        true,
                        "Unreachable",
                        format!(
                            "cluster {name} does not answer; its reconciles wait until it does: {why}"
                        ),
                    ),
                };
                announcer.announce(secret.as_ref(), warning, reason, note);
            }
            result
        })
    })
}
