//! The HTTPS server of the admission webhooks: one path per plugin and
//! phase, `/admission/<plugin>/mutate` and `/admission/<plugin>/validate`.
//!
//! Guarantees:
//!   - a request never waits on a plugin past its admission deadline: each
//!     call runs under the sandbox's deadline, and the server adds its own
//!     bound around the blocking work, answered by the plugin's failure
//!     policy;
//!   - bodies are bounded ([`MAX_BODY_BYTES`]), TLS handshakes and request
//!     headers must arrive within [`HANDSHAKE_TIMEOUT`], and connections
//!     (`tls_serving.rs`) and calls in flight are capped, so slow or many
//!     clients cannot exhaust the host;
//!   - the plugin set is read at each request: a hot reload answers the
//!     next request.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use axum::routing::post;
use reconciler_contract::FailurePolicy;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::plugin_set::AdmissionPlugins;
use super::review::{decide, parse, response};
use super::serving_cert::ServingCert;
use crate::cluster::Clock;
use crate::plugin::{AdmissionDecision, AdmissionPhase};

/// Largest AdmissionReview accepted: an object and its old version, each
/// at most the API server's own limit of about 1.5 MiB, plus the envelope.
pub const MAX_BODY_BYTES: usize = 4 << 20;
pub use crate::tls_serving::HANDSHAKE_TIMEOUT;
/// Added to a plugin's admission deadline for the server's own bound: the
/// sandbox stops the call at the deadline; this only catches the host.
const DEADLINE_MARGIN: Duration = Duration::from_millis(500);

#[derive(Clone)]
struct Shared {
    plugins: Arc<AdmissionPlugins>,
    clock: Arc<dyn Clock>,
    calls: Arc<Semaphore>,
}

/// The webhook endpoints as a router (plain HTTP), for serving and tests.
/// `calls` plugin calls run at once, one per instance the sandbox keeps for
/// admission ([`crate::plugin::Sandbox::admission_instances`]); more wait,
/// within their deadline.
pub fn router(plugins: Arc<AdmissionPlugins>, clock: Arc<dyn Clock>, calls: usize) -> Router {
    let shared = Shared {
        plugins,
        clock,
        calls: Arc::new(Semaphore::new(calls.max(1))),
    };
    Router::new()
        .route("/admission/{plugin}/{phase}", post(admit))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(shared)
}

async fn admit(
    State(shared): State<Shared>,
    Path((plugin_name, phase)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let phase = match phase.as_str() {
        "mutate" => AdmissionPhase::Mutate,
        "validate" => AdmissionPhase::Validate,
        other => {
            return (
                StatusCode::NOT_FOUND,
                format!("no admission phase {other:?}: use mutate or validate"),
            )
                .into_response();
        }
    };
    let request = match parse(&body) {
        Ok(request) => request,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let plugin = shared.plugins.get(&plugin_name);
    let (deadline, policy) = match &plugin {
        Some(p) => (
            p.admission_limits().timeout + DEADLINE_MARGIN,
            p.admission()
                .map(|s| s.failure_policy)
                .unwrap_or(FailurePolicy::Fail),
        ),
        None => (DEADLINE_MARGIN, FailurePolicy::Fail),
    };
    let uid = request.uid.clone();
    let now = shared.clock.now_millis();
    let calls = shared.calls.clone();
    let work = async move {
        let _permit = calls.acquire_owned().await.ok()?;
        tokio::task::spawn_blocking(move || {
            decide(&request, plugin.as_deref(), &plugin_name, phase, now)
        })
        .await
        .ok()
    };
    let decision = match tokio::time::timeout(deadline, work).await {
        Ok(Some(decision)) => decision,
        Ok(None) | Err(_) => host_failure(policy, "the host could not answer in time (busy)"),
    };
    Json(response(&uid, &decision)).into_response()
}

/// A failure of the host itself, answered by the plugin's policy.
fn host_failure(policy: FailurePolicy, why: &str) -> AdmissionDecision {
    AdmissionDecision::failed(policy, format!("reconciler-host admission: {why}"))
}

/// Serves the webhook endpoints over HTTPS on `addr` until the process
/// ends; returns the bound address (port 0 picks one).
pub async fn serve(
    addr: SocketAddr,
    cert: &ServingCert,
    plugins: Arc<AdmissionPlugins>,
    clock: Arc<dyn Clock>,
    calls: usize,
) -> anyhow::Result<SocketAddr> {
    let tls = cert.server_config()?;
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen for admission on {addr}"))?;
    let bound = listener.local_addr()?;
    crate::tls_serving::spawn(listener, tls, router(plugins, clock, calls), "admission");
    tracing::info!(
        "serving admission webhooks on https://{bound}/admission/<plugin>/{{mutate,validate}}"
    );
    Ok(bound)
}
