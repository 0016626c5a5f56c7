//! A mocked API server that keeps one Lease the way the API server would,
//! for the tests of leader election and of `run --leader-election`.
//!
//! The tests change the Lease behind the contender's back (another holder
//! renews, stops renewing, takes over, releases) and look at the writes it
//! made. Timestamps in the Lease are wall-clock ones: the crate compares
//! `renewTime` with the real time even when tokio's clock is paused.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Request, Response};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::client::Body;
use serde_json::{Value, json};

use crate::cluster::kubernetes::testing::failure;

pub(crate) const NAMESPACE: &str = "ns";
pub(crate) const NAME: &str = "reconciler-host";

/// A write to the Lease as the server saw it.
#[derive(Clone, Debug)]
pub(crate) struct Write {
    pub method: Method,
    pub content_type: String,
    pub query: String,
    pub body: Value,
}

impl Write {
    pub fn is_apply(&self) -> bool {
        self.content_type.starts_with("application/apply-patch")
    }
}

/// How the server answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Behaviour {
    Serve,
    /// Writes fail with 500 (reads still work).
    FailWrites,
    /// Requests are never answered.
    Hang,
    /// Every request is refused with 403.
    Forbid,
}

struct State {
    lease: Option<Value>,
    writes: Vec<Write>,
    others: Vec<String>,
    behaviour: Behaviour,
    resource_version: u64,
}

/// The server's side of the Lease `ns/reconciler-host`.
#[derive(Clone)]
pub(crate) struct LeaseServer(Arc<Mutex<State>>);

impl LeaseServer {
    /// A client whose requests this server answers, the Lease starting as
    /// `lease` (`None`: it does not exist).
    pub fn start(lease: Option<Value>) -> (kube::Client, Self) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let server = Self(Arc::new(Mutex::new(State {
            lease,
            writes: Vec::new(),
            others: Vec::new(),
            behaviour: Behaviour::Serve,
            resource_version: 1,
        })));
        let state = server.clone();
        tokio::spawn(async move {
            // Requests left unanswered stay here, so their clients wait.
            let mut hung = Vec::new();
            while let Some((request, send)) = handle.next_request().await {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await.unwrap_or_default();
                let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let answer = state.answer(&parts, body);
                let Some((status, body)) = answer else {
                    hung.push(send);
                    continue;
                };
                let response = Response::builder()
                    .status(status)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(Body::from(body.to_string().into_bytes()))
                    .expect("a response");
                send.send_response(response);
            }
        });
        (kube::Client::new(service, "default"), server)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn lease(&self) -> Option<Value> {
        self.state().lease.clone()
    }

    /// Replaces the Lease, as another replica (or an operator) would.
    pub fn set_lease(&self, lease: Option<Value>) {
        self.state().lease = lease;
    }

    pub fn holder(&self) -> Option<String> {
        let lease = self.lease()?;
        lease["spec"]["holderIdentity"].as_str().map(str::to_string)
    }

    pub fn writes(&self) -> Vec<Write> {
        self.state().writes.clone()
    }

    /// Requests about anything but the Lease, as `METHOD path`.
    pub fn others(&self) -> Vec<String> {
        self.state().others.clone()
    }

    pub fn behave(&self, behaviour: Behaviour) {
        self.state().behaviour = behaviour;
    }

    /// The answer to one request; `None` leaves it unanswered.
    fn answer(&self, parts: &http::request::Parts, body: Value) -> Option<(u16, Value)> {
        let mut state = self.state();
        let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases");
        let lease = format!("{leases}/{NAME}");
        let path = parts.uri.path();
        if path != lease && path != leases {
            state.others.push(format!("{} {path}", parts.method));
            return Some((404, failure(404, "NotFound", "not served by this mock")));
        }
        match state.behaviour {
            Behaviour::Hang => return None,
            Behaviour::Forbid => {
                return Some((
                    403,
                    failure(403, "Forbidden", "leases is forbidden: no RBAC rule"),
                ));
            }
            Behaviour::Serve | Behaviour::FailWrites => {}
        }
        if parts.method != Method::GET {
            state.writes.push(Write {
                method: parts.method.clone(),
                content_type: parts
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string(),
                query: parts.uri.query().unwrap_or_default().to_string(),
                body: body.clone(),
            });
            if state.behaviour == Behaviour::FailWrites {
                return Some((500, failure(500, "InternalError", "etcdserver: timeout")));
            }
        }
        let not_found = || {
            (
                404,
                failure(404, "NotFound", "leases \"reconciler-host\" not found"),
            )
        };
        Some(match (&parts.method, path == lease) {
            (&Method::GET, true) => state.lease.clone().map_or_else(not_found, |l| (200, l)),
            (&Method::POST, false) if state.lease.is_some() => (
                409,
                failure(
                    409,
                    "AlreadyExists",
                    "leases \"reconciler-host\" already exists",
                ),
            ),
            (&Method::POST, false) => {
                let mut created = body;
                created["metadata"]["namespace"] = json!(NAMESPACE);
                state.lease = Some(created);
                state.bump();
                (201, state.lease.clone().unwrap_or_default())
            }
            (&Method::PATCH, true) if state.lease.is_none() => not_found(),
            (&Method::PATCH, true) => {
                let lease = state.lease.as_mut().expect("checked above");
                if !lease["spec"].is_object() {
                    lease["spec"] = json!({});
                }
                if let (Some(spec), Some(patch)) =
                    (lease["spec"].as_object_mut(), body["spec"].as_object())
                {
                    for (field, value) in patch {
                        if value.is_null() {
                            spec.remove(field);
                        } else {
                            spec.insert(field.clone(), value.clone());
                        }
                    }
                }
                state.bump();
                (200, state.lease.clone().unwrap_or_default())
            }
            _ => (
                405,
                failure(405, "MethodNotAllowed", "not served by this mock"),
            ),
        })
    }
}

impl State {
    fn bump(&mut self) {
        self.resource_version += 1;
        let version = self.resource_version.to_string();
        if let Some(lease) = self.lease.as_mut() {
            lease["metadata"]["resourceVersion"] = json!(version);
        }
    }
}

/// A Lease held by `holder`, last renewed `ago` before now (wall clock),
/// for 15 s.
pub(crate) fn held_by(holder: &str, ago: Duration) -> Value {
    let renewed = Timestamp::now()
        .checked_sub(SignedDuration::try_from(ago).expect("a short duration"))
        .expect("a time after the epoch");
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "resourceVersion": "1"},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "acquireTime": MicroTime(renewed),
            "renewTime": MicroTime(renewed),
            "leaseTransitions": 3,
        },
    })
}

/// A Lease whose holder released it.
pub(crate) fn released() -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "resourceVersion": "1"},
        "spec": {"leaseTransitions": 3},
    })
}
