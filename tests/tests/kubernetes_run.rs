//! `run` with the compiled podset plugin against a mocked Kubernetes API:
//! the requests a reconcile makes, how failures of the API are retried and
//! reported, a watch that ends and is resumed, and a shutdown that lets the
//! reconcile in flight finish.
//!
//! The mock answers discovery, lists and watches by path; writes are
//! handed to the test, which answers each one as the scenario needs.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response};
use kube::client::Body;
use reconciler_host::engine::ServeScope;
use reconciler_host::process::metrics_server::{MetricsAccess, MetricsServing};
use reconciler_host::process::run::{RunConfig, run};
use reconciler_tests::{example_plugin, sandbox};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;
type Reply = tower_test::mock::SendResponse<Response<Body>>;

/// One request as the mock saw it.
struct Seen {
    method: Method,
    path: String,
    query: String,
    body: Value,
}

impl Seen {
    fn describe(&self) -> String {
        format!("{} {}?{}", self.method, self.path, self.query)
    }
}

fn reply(send: Reply, status: u16, body: &Value) {
    let response = Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string().into_bytes()))
        .expect("a response");
    send.send_response(response);
}

fn failure(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "code": code, "reason": reason, "message": message})
}

fn resource_list(group_version: &str, resources: Value) -> Value {
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
           "resources": resources})
}

fn podset(size: i64, resource_version: &str) -> Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
           "metadata": {"name": "web", "namespace": "default", "uid": "uid-web",
                        "resourceVersion": resource_version, "generation": 1},
           "spec": {"size": size}})
}

fn pod(name: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                        "resourceVersion": "5",
                        "labels": {"app": "podset", "podset": "web"}}})
}

fn list(kind: &str, resource_version: &str, items: Vec<Value>) -> Value {
    json!({"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": resource_version},
           "items": items})
}

/// Serves discovery and lists itself; parks watches (the test ends them);
/// passes every write to the test.
struct FakeApi {
    writes: mpsc::UnboundedReceiver<(Seen, Reply)>,
    watches: mpsc::UnboundedReceiver<(Seen, Reply)>,
}

impl FakeApi {
    fn start(mut handle: Handle) -> Self {
        let (writes_tx, writes) = mpsc::unbounded_channel();
        let (watches_tx, watches) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await.unwrap_or_default();
                let seen = Seen {
                    method: parts.method,
                    path: parts.uri.path().to_string(),
                    query: parts.uri.query().unwrap_or_default().to_string(),
                    body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                };
                if seen.method != Method::GET {
                    let _ = writes_tx.send((seen, send));
                    continue;
                }
                if seen.query.contains("watch=true") {
                    let _ = watches_tx.send((seen, send));
                    continue;
                }
                let (status, body) = match seen.path.as_str() {
                    "/apis/example.com/v1alpha1" => (
                        200,
                        resource_list(
                            "example.com/v1alpha1",
                            json!([
                                {"name": "podsets", "singularName": "podset", "namespaced": true,
                                 "kind": "PodSet", "verbs": ["get", "list", "watch", "patch"]},
                                {"name": "podsets/status", "singularName": "", "namespaced": true,
                                 "kind": "PodSet", "verbs": ["get", "patch"]},
                            ]),
                        ),
                    ),
                    "/apis/apps/v1" => (
                        200,
                        resource_list(
                            "apps/v1",
                            json!([{"name": "deployments", "singularName": "deployment",
                                    "namespaced": true, "kind": "Deployment",
                                    "verbs": ["get", "list", "watch", "patch"]}]),
                        ),
                    ),
                    "/api/v1" => (
                        200,
                        resource_list(
                            "v1",
                            json!([{"name": "pods", "singularName": "pod", "namespaced": true,
                                    "kind": "Pod", "verbs": ["get", "list", "watch"]}]),
                        ),
                    ),
                    "/apis/example.com/v1alpha1/podsets" => {
                        (200, list("PodSetList", "10", vec![podset(2, "10")]))
                    }
                    "/apis/apps/v1/deployments" => (200, list("DeploymentList", "10", vec![])),
                    "/api/v1/pods" => (
                        200,
                        list(
                            "PartialObjectMetadataList",
                            "10",
                            vec![pod("web-a"), pod("web-b")],
                        ),
                    ),
                    _ => (404, failure(404, "NotFound", "not served by the mock")),
                };
                reply(send, status, &body);
            }
        });
        Self { writes, watches }
    }

    /// The next write, skipping Events (returned through `events`).
    async fn next_write(&mut self, events: &mut Vec<Value>) -> (Seen, Reply) {
        self.next_write_or_event(events, true).await
    }

    async fn next_write_or_event(
        &mut self,
        events: &mut Vec<Value>,
        skip_events: bool,
    ) -> (Seen, Reply) {
        loop {
            let (seen, send) = tokio::time::timeout(Duration::from_secs(30), self.writes.recv())
                .await
                .expect("a write in time")
                .expect("the mock is running");
            if skip_events && is_event(&seen) {
                events.push(seen.body.clone());
                reply(send, 201, &seen.body);
                continue;
            }
            return (seen, send);
        }
    }

    /// The next watch request on `path`, skipping (and parking) others.
    async fn next_watch(&mut self, path: &str, parked: &mut Vec<Reply>) -> (Seen, Reply) {
        loop {
            let (seen, send) = tokio::time::timeout(Duration::from_secs(30), self.watches.recv())
                .await
                .expect("a watch in time")
                .expect("the mock is running");
            if seen.path == path {
                return (seen, send);
            }
            parked.push(send);
        }
    }
}

fn is_event(seen: &Seen) -> bool {
    seen.method == Method::POST && seen.path.starts_with("/apis/events.k8s.io/v1/")
}

fn panic_unless_event(seen: &Seen) {
    assert!(is_event(seen), "expected an Event, got {}", seen.describe());
}

/// A loopback address with a port nobody listens on.
fn free_port() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// GET over a plain socket: status code and body.
async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let code = answer[9..12].parse().unwrap();
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    (code, body.to_string())
}

fn stored_deployment(replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "namespace": "default", "uid": "uid-dep",
                        "resourceVersion": "20"},
           "spec": {"replicas": replicas}})
}

fn assert_deployment_apply(seen: &Seen, replicas: i64) {
    assert_eq!(seen.method, Method::PATCH, "{}", seen.describe());
    assert_eq!(
        seen.path,
        "/apis/apps/v1/namespaces/default/deployments/web"
    );
    assert!(
        seen.query.contains("fieldManager=reconciler-host%2Fpodset")
            && seen.query.contains("force=true"),
        "{}",
        seen.query
    );
    assert_eq!(seen.body["spec"]["replicas"], replicas);
    let owner = &seen.body["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "PodSet");
    assert_eq!(owner["uid"], "uid-web");
    assert_eq!(owner["controller"], true);
}

fn warning_notes(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "Warning")
        .map(|e| e["note"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn podset_reconcile_against_a_mocked_api() {
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(example_plugin("podset"), plugins.path().join("podset.wasm")).unwrap();
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let mut api = FakeApi::start(handle);
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let http = free_port();
    let metrics = free_port();
    let config = RunConfig {
        plugins_dir: plugins.path().to_path_buf(),
        pulled: reconciler_host::process::run::PulledConfig::none(),
        scope: ServeScope::default(),
        install_crds: None,
        shutdown_timeout: Duration::from_secs(10),
        retry_every: Duration::from_secs(30),
        http_listen: Some(http),
        // Plain: the mocked API server reviews no tokens.
        metrics: Some(MetricsServing {
            listen: metrics,
            access: MetricsAccess::Open,
        }),
        leader_election: None,
        record: None,
        coalesce: std::time::Duration::ZERO,
        journal: reconciler_host::engine::journal::JournalLimits::default(),
        loops: reconciler_host::engine::loop_watch::LoopRule::default(),
        admission: None,
        clusters: reconciler_host::fleet::ClustersConfig::local_only(),
        sharding: None,
    };
    let host = tokio::spawn(run(Arc::clone(sandbox()), client, config, async move {
        let _ = stop_rx.await;
        "test"
    }));
    let mut events = Vec::new();
    let mut parked = Vec::new();

    // The first apply is refused with a conflict; it is retried and goes through.
    let (seen, send) = api.next_write(&mut events).await;
    assert_deployment_apply(&seen, 2);
    reply(
        send,
        409,
        &failure(409, "Conflict", "the object has been modified"),
    );
    let (seen, send) = api.next_write(&mut events).await;
    assert_deployment_apply(&seen, 2);
    reply(send, 200, &stored_deployment(2));
    assert_eq!(
        warning_notes(&events).len(),
        1,
        "one Warning Event for the conflict"
    );
    assert!(warning_notes(&events)[0].contains("conflict"), "{events:?}");

    // The endpoints show the plugin, readiness and what happened so far.
    let (code, ready) = http_get(http, "/readyz").await;
    assert_eq!((code, ready.as_str()), (200, "ok\n"));
    let (_, plugins) = http_get(metrics, "/plugins").await;
    let plugins: Value = serde_json::from_str(&plugins).unwrap();
    assert_eq!(plugins[0]["name"], "podset");
    assert_eq!(
        plugins[0]["kinds"]["primary"],
        "example.com/v1alpha1 PodSet"
    );
    let (_, metrics) = http_get(metrics, "/metrics").await;
    for line in [
        "controller_runtime_reconcile_total{controller=\"podset\",result=\"error\"} 1",
        "reconciler_host_plugin_loads_total{plugin=\"podset\"} 1",
        "reconciler_host_cache_objects{group=\"\",version=\"v1\",kind=\"Pod\"} 2",
    ] {
        assert!(metrics.contains(line), "{line} missing from\n{metrics}");
    }

    // Status through the status subresource, with the pods the cache holds.
    let (seen, send) = api.next_write(&mut events).await;
    assert_eq!(seen.method, Method::PATCH);
    assert_eq!(
        seen.path,
        "/apis/example.com/v1alpha1/namespaces/default/podsets/web/status"
    );
    assert!(
        seen.query.contains("fieldManager=reconciler-host%2Fpodset"),
        "{}",
        seen.query
    );
    assert_eq!(seen.body["status"]["podNames"], json!(["web-a", "web-b"]));
    let mut with_status = podset(2, "11");
    with_status["status"] = seen.body["status"].clone();
    reply(send, 200, &with_status);

    // The PodSet watch delivers a scale to 3, then ends; the host watches
    // again from the last version it saw.
    let (first, send) = api
        .next_watch("/apis/example.com/v1alpha1/podsets", &mut parked)
        .await;
    assert!(
        first.query.contains("resourceVersion=10"),
        "{}",
        first.query
    );
    let mut scaled = podset(3, "12");
    // A spec change moves the generation, as the API server moves it
    // (podset wakes on its PodSet's generation, not on every change).
    scaled["metadata"]["generation"] = json!(2);
    scaled["status"] = with_status["status"].clone();
    let body = format!("{}\n", json!({"type": "MODIFIED", "object": scaled}));
    send.send_response(Response::new(Body::from(body.into_bytes())));
    let (resumed, _keep_open) = api
        .next_watch("/apis/example.com/v1alpha1/podsets", &mut parked)
        .await;
    assert!(
        resumed.query.contains("resourceVersion=12"),
        "{}",
        resumed.query
    );

    // The scale is refused by RBAC, then by a server error; both are
    // reported as Warning Events on the PodSet and retried.
    let (seen, send) = api.next_write(&mut events).await;
    assert_deployment_apply(&seen, 3);
    reply(
        send,
        403,
        &failure(403, "Forbidden", "deployments.apps \"web\" is forbidden"),
    );
    let (seen, send) = api.next_write(&mut events).await;
    assert_deployment_apply(&seen, 3);
    reply(send, 500, &failure(500, "InternalError", "etcd is unhappy"));
    // Shutdown while the next attempt is in flight: it finishes first.
    let (seen, send) = api.next_write(&mut events).await;
    assert_deployment_apply(&seen, 3);
    let notes = warning_notes(&events);
    assert_eq!(notes.len(), 3, "{notes:?}");
    assert!(
        notes[1].contains("\"patch\"")
            && notes[1].contains("\"deployments\"")
            && notes[1].contains("\"apps\""),
        "the 403 names the missing rule: {}",
        notes[1]
    );
    assert!(notes[2].contains("500"), "{}", notes[2]);

    stop_tx.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!host.is_finished(), "run waits for the reconcile in flight");
    reply(send, 200, &stored_deployment(3));
    // The pods did not change, so the status is not written again; the
    // reconcile ends with its Event.
    let (seen, send) = api.next_write_or_event(&mut events, false).await;
    panic_unless_event(&seen);
    events.push(seen.body.clone());
    reply(send, 201, &seen.body);
    let stopped = tokio::time::timeout(Duration::from_secs(10), host)
        .await
        .expect("run stops once the reconcile in flight is done")
        .unwrap();
    assert!(stopped.is_ok(), "{stopped:?}");
    // The mock never echoes the Deployment through its watch, so the plugin
    // still sees none and reports creating it, now with 3 replicas.
    let last = events.last().unwrap();
    assert_eq!(last["type"], "Normal");
    assert_eq!(last["note"], "Deployment web with 3 replicas");
    assert_eq!(last["reportingController"], "reconciler-host/podset");
    assert_eq!(last["regarding"]["uid"], "uid-web");
}
