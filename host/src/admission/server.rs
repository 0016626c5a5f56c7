//! The HTTPS server of the admission webhooks: one path per plugin and
//! phase, `/admission/<plugin>/mutate` and `/admission/<plugin>/validate`.
//!
//! Guarantees:
//!   - a request never waits on a plugin past its admission deadline: each
//!     call runs under the sandbox's deadline, and the server adds its own
//!     bound around the blocking work, answered by the plugin's failure
//!     policy;
//!   - slow or hostile clients cannot keep the API server out: the TLS
//!     handshake, the headers and the body of a request must each arrive
//!     within [`ConnectionLimits::read_timeout`], and when every
//!     connection slot is taken a new connection closes the oldest one not
//!     in a plugin call ([`crate::support::connection_slots`], shared with the metrics endpoint in `tls_serving.rs`);
//!   - memory stays bounded whatever the bodies hold: a body is at most
//!     [`MAX_BODY_BYTES`]; bodies past [`SMALL_BODY_BYTES`] share a budget
//!     of bytes held at once ([`ServerLimits::large_body_budget`]), and a
//!     review is parsed on a blocking thread into its fields with the
//!     objects kept as text (a body of many small numbers does not grow
//!     tenfold as a parsed tree would);
//!   - the plugin set is read at each request: a hot reload answers the
//!     next request.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use axum::routing::post;
use futures::StreamExt;
use reconciler_contract::FailurePolicy;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::client_ca::ClientCa;
use super::live_cert::LiveCert;
use super::plugin_set::AdmissionPlugins;
use super::review::{decide, parse, response};
use crate::cluster::Clock;
use crate::plugin::{AdmissionDecision, AdmissionPhase};
use crate::support::tls_serving::{ConnectionLimits, ConnectionSlot};

/// Largest AdmissionReview accepted: an object and its old version, each
/// at most the API server's own limit of about 1.5 MiB, plus the envelope.
pub const MAX_BODY_BYTES: usize = 4 << 20;
/// Bodies up to this size are read without the large-body budget: the
/// API server's reviews are mostly a few KiB, and the connection limit
/// already bounds what small bodies can hold.
pub const SMALL_BODY_BYTES: usize = 64 << 10;

/// What the admission server lets its clients hold at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// Connections open at once (`--admission-max-connections`; when all
    /// are taken, a new one closes the oldest connection not in a call),
    /// and how long a client has for each of the TLS handshake, a request's
    /// headers and (here) its body (`--admission-read-timeout-secs`).
    pub connections: ConnectionLimits,
    /// Bytes of bodies larger than [`SMALL_BODY_BYTES`] held at once, read
    /// or being parsed and decided (`--admission-body-budget-mib`); a body
    /// that finds it spent waits, within its read deadline.
    pub large_body_budget: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            connections: ConnectionLimits::default(),
            // Four bodies of the largest size: with the objects kept as
            // text, their parsed form is about as large again.
            large_body_budget: 4 * MAX_BODY_BYTES,
        }
    }
}
/// Added to a plugin's admission deadline for the server's own bound: the
/// sandbox stops the call at the deadline; this only catches the host.
const DEADLINE_MARGIN: Duration = Duration::from_millis(500);

#[derive(Clone)]
struct Shared {
    plugins: Arc<AdmissionPlugins>,
    clock: Arc<dyn Clock>,
    calls: Arc<Semaphore>,
    large_bodies: Arc<Semaphore>,
    read_timeout: Duration,
}

/// The webhook endpoints as a router (plain HTTP), for serving and tests.
/// `calls` plugin calls run at once, one per instance the sandbox keeps for
/// admission ([`crate::plugin::Sandbox::admission_instances`]); more wait,
/// within their deadline.
pub fn router(plugins: Arc<AdmissionPlugins>, clock: Arc<dyn Clock>, calls: usize) -> Router {
    router_with(plugins, clock, calls, &ServerLimits::default())
}

fn router_with(
    plugins: Arc<AdmissionPlugins>,
    clock: Arc<dyn Clock>,
    calls: usize,
    limits: &ServerLimits,
) -> Router {
    let shared = Shared {
        plugins,
        clock,
        calls: Arc::new(Semaphore::new(calls.max(1))),
        large_bodies: Arc::new(Semaphore::new(limits.large_body_budget.max(MAX_BODY_BYTES))),
        read_timeout: limits.connections.read_timeout,
    };
    Router::new()
        .route("/admission/{plugin}/{phase}", post(admit))
        .route(super::shard_labels::PATH, post(label_shard))
        .with_state(shared)
}

/// Why a body was not read whole.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error("the request body is larger than {MAX_BODY_BYTES} bytes")]
    TooLarge,
    #[error("the request body did not arrive within {0:?}")]
    TooSlow(Duration),
    #[error("reading the request body failed: {0}")]
    Read(String),
}

impl BodyError {
    fn status(&self) -> StatusCode {
        match self {
            BodyError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::TooSlow(_) => StatusCode::REQUEST_TIMEOUT,
            BodyError::Read(_) => StatusCode::BAD_REQUEST,
        }
    }
}

/// Reads `body` whole, within `deadline`: past [`SMALL_BODY_BYTES`], each
/// further chunk first takes its size from `budget`, and what it took is
/// held (the returned permit) until the request is answered.
async fn read_body(
    body: Body,
    budget: &Arc<Semaphore>,
    deadline: Duration,
) -> Result<(Bytes, Option<OwnedSemaphorePermit>), BodyError> {
    let reading = async {
        let mut stream = body.into_data_stream();
        let mut bytes = Vec::new();
        let mut held: Option<OwnedSemaphorePermit> = None;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| BodyError::Read(e.to_string()))?;
            let total = bytes.len() + chunk.len();
            if total > MAX_BODY_BYTES {
                return Err(BodyError::TooLarge);
            }
            let beyond_small = total.saturating_sub(SMALL_BODY_BYTES)
                - bytes.len().saturating_sub(SMALL_BODY_BYTES);
            if beyond_small > 0 {
                // Never more than the budget's size (MAX_BODY_BYTES at
                // least), so one body can always get through.
                let permit = budget
                    .clone()
                    .acquire_many_owned(beyond_small as u32)
                    .await
                    .map_err(|e| BodyError::Read(e.to_string()))?;
                match held.as_mut() {
                    Some(held) => held.merge(permit),
                    None => held = Some(permit),
                }
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok((Bytes::from(bytes), held))
    };
    tokio::time::timeout(deadline, reading)
        .await
        .map_err(|_| BodyError::TooSlow(deadline))?
}

async fn admit(
    State(shared): State<Shared>,
    Path((plugin_name, phase)): Path<(String, String)>,
    slot: Option<axum::Extension<ConnectionSlot>>,
    body: Body,
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
    let (body, _held) = match read_body(body, &shared.large_bodies, shared.read_timeout).await {
        Ok(read) => read,
        Err(e) => return (e.status(), e.to_string()).into_response(),
    };
    // From here the request is the server's to answer, within the plugin's
    // deadline: its connection is not closed to make room for another.
    let _in_call = slot.map(|axum::Extension(ConnectionSlot(slot))| slot.in_call());
    // Parsing a large body is CPU work: off the async workers.
    let parsed = tokio::task::spawn_blocking(move || parse(&body)).await;
    let request = match parsed {
        Ok(Ok(request)) => request,
        Ok(Err(e)) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
        Err(e) => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("parsing the review failed: {e}"),
            )
                .into_response();
        }
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
        let permit = calls.acquire_owned().await.ok()?;
        tokio::task::spawn_blocking(move || {
            // The permit goes with the call, not with the wait for it: when
            // the deadline below gives up on the answer, the call still
            // holds its instance until the sandbox stops it, and a permit
            // released early would let more calls run than have instances.
            let _permit = permit;
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

/// Labels a new primary with its shard ([`super::shard_labels`]): no
/// plugin call, so no call slot; a review that cannot be read is answered
/// as any other.
async fn label_shard(State(shared): State<Shared>, body: Body) -> Response {
    let Some(labels) = shared.plugins.shard_labels().cloned() else {
        return (
            StatusCode::NOT_FOUND,
            "this host does not label shards: it runs without --sharding",
        )
            .into_response();
    };
    let (body, _held) = match read_body(body, &shared.large_bodies, shared.read_timeout).await {
        Ok(read) => read,
        Err(e) => return (e.status(), e.to_string()).into_response(),
    };
    let size = body.len();
    let answer =
        move || parse(&body).map(|request| response(&request.uid, &labels.decide(&request)));
    // A usual review (a new object's few KiB) is answered on the worker: a
    // hop to a blocking thread would cost more than the parse.
    let answered = if size <= SMALL_BODY_BYTES {
        Ok(answer())
    } else {
        tokio::task::spawn_blocking(answer).await
    };
    match answered {
        Ok(Ok(review)) => Json(review).into_response(),
        Ok(Err(e)) => (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("labelling the review failed: {e}"),
        )
            .into_response(),
    }
}

/// A failure of the host itself, answered by the plugin's policy.
fn host_failure(policy: FailurePolicy, why: &str) -> AdmissionDecision {
    AdmissionDecision::failed(policy, format!("reconciler-host admission: {why}"))
}

/// Serves the webhook endpoints over HTTPS on `addr` until the process
/// ends, presenting whatever certificate `cert` holds at each handshake;
/// returns the bound address (port 0 picks one).
pub async fn serve(
    addr: SocketAddr,
    cert: Arc<LiveCert>,
    plugins: Arc<AdmissionPlugins>,
    clock: Arc<dyn Clock>,
    calls: usize,
) -> anyhow::Result<SocketAddr> {
    serve_with(
        addr,
        cert,
        plugins,
        clock,
        calls,
        ServerLimits::default(),
        None,
    )
    .await
}

/// [`serve`] with limits other than the defaults, and with `callers` only
/// to clients presenting a certificate one of its CAs signed (the API
/// server's, `--admission-client-ca`); others fail the TLS handshake.
pub async fn serve_with(
    addr: SocketAddr,
    cert: Arc<LiveCert>,
    plugins: Arc<AdmissionPlugins>,
    clock: Arc<dyn Clock>,
    calls: usize,
    limits: ServerLimits,
    callers: Option<&ClientCa>,
) -> anyhow::Result<SocketAddr> {
    let tls = cert.server_config(callers);
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen for admission on {addr}"))?;
    let bound = listener.local_addr()?;
    let labels_shards = plugins.shard_labels().is_some();
    let router = router_with(plugins, clock, calls, &limits);
    crate::support::tls_serving::spawn(listener, tls, router, limits.connections, "admission");
    tracing::info!(
        "serving admission webhooks on https://{bound}/admission/<plugin>/{{mutate,validate}}{} to {}",
        if labels_shards {
            format!(" and https://{bound}{}", super::shard_labels::PATH)
        } else {
            String::new()
        },
        match callers {
            Some(callers) => format!(
                "clients with a certificate signed by {}",
                callers.describe()
            ),
            None => "any client (no --admission-client-ca)".to_string(),
        }
    );
    Ok(bound)
}
