//! A mocked API server for the backend's tests: each test scripts the
//! responses and then checks the requests the backend made.

use std::time::Duration;

use http::{Request, Response};
use kube::client::Body;
use reconciler_contract::KindRef;
use serde_json::{Value, json};

use super::connection::KubernetesBackend;

pub(crate) type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

pub(crate) fn deployment_kind() -> KindRef {
    KindRef::new("apps", "v1", "Deployment")
}

pub(crate) fn podset_kind() -> KindRef {
    KindRef::new("demo.reconciler.dev", "v1", "PodSet")
}

/// A backend on a mocked API, with Deployment and PodSet already discovered.
pub(crate) fn backend() -> (KubernetesBackend, Handle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let backend =
        KubernetesBackend::with_reporting_instance(kube::Client::new(service, "default"), "pod-0");
    backend.remember_kind(deployment_kind(), "deployments", true);
    backend.remember_kind(podset_kind(), "podsets", true);
    (backend, handle)
}

/// One request as the server saw it.
#[derive(Debug)]
pub(crate) struct Seen {
    pub method: http::Method,
    pub path: String,
    pub query: String,
    pub content_type: Option<String>,
    pub accept: Option<String>,
    pub body: Value,
}

/// Answers the next request with `status` and a JSON `body`.
pub(crate) async fn respond(handle: &mut Handle, status: u16, body: Value) -> Seen {
    next(handle, |_| (status, body)).await
}

/// Answers the next request with whatever `answer` makes of it.
pub(crate) async fn next(handle: &mut Handle, answer: impl FnOnce(&Seen) -> (u16, Value)) -> Seen {
    next_raw(handle, |seen| {
        let (status, body) = answer(seen);
        (status, body.to_string())
    })
    .await
}

/// Answers the next request with a body given as text (a watch stream's
/// newline-separated events).
pub(crate) async fn next_raw(
    handle: &mut Handle,
    answer: impl FnOnce(&Seen) -> (u16, String),
) -> Seen {
    let (request, send) = tokio::time::timeout(Duration::from_secs(10), handle.next_request())
        .await
        .expect("the backend made no request in time")
        .expect("the client is gone");
    let (parts, body) = request.into_parts();
    let bytes = body.collect_bytes().await.expect("request body");
    let seen = Seen {
        method: parts.method,
        path: parts.uri.path().to_string(),
        query: parts.uri.query().unwrap_or_default().to_string(),
        content_type: parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        accept: parts
            .headers
            .get(http::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    };
    let (status, body) = answer(&seen);
    let response = Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.into_bytes()))
        .expect("response");
    send.send_response(response);
    seen
}

/// A Status body as the API server sends with a failure.
pub(crate) fn failure(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "code": code, "reason": reason, "message": message,
    })
}

/// A Deployment as stored, with managed fields.
pub(crate) fn stored_deployment(name: &str, resource_version: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {
            "name": name, "namespace": "default", "uid": format!("uid-{name}"),
            "resourceVersion": resource_version,
            "managedFields": [{"manager": "reconciler-host/podset", "operation": "Apply"}],
        },
        "spec": {"replicas": 2},
    })
}
