//! The webhook configurations' sync when the API server refuses a write: a
//! fault a real API server does not produce on demand, so a mocked one
//! answers here. The sync itself is proven on a real API server in
//! `admission_real_cluster`.

use std::sync::{Arc, Mutex};

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use reconciler_host::admission::webhook_configs::{WebhookEndpoint, WebhookSetup, sync};
use reconciler_tests::{example_plugin, load};
use serde_json::{Value, json};

const PREFIX: &str = "faults";

fn reply(status: StatusCode, body: Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap()
}

fn metadata_list(names: &[&str]) -> Value {
    json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadataList",
        "metadata": {"resourceVersion": "1"},
        "items": names.iter().map(|n| json!({
            "apiVersion": "meta.k8s.io/v1",
            "kind": "PartialObjectMetadata",
            "metadata": {"name": n, "labels": {"reconciler-host.io/webhook-prefix": PREFIX}},
        })).collect::<Vec<_>>(),
    })
}

/// A server that serves discovery of the KubernetesCluster kind, refuses
/// every apply with 500, lists one configuration of a served plugin and
/// one of a removed plugin per kind, and records the deletes it gets.
fn server() -> (kube::Client, Arc<Mutex<Vec<String>>>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let deletes = Arc::new(Mutex::new(Vec::new()));
    let seen = deletes.clone();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let path = request.uri().path().to_string();
            let response = match (request.method().clone(), path.as_str()) {
                (Method::GET, "/apis/example.com/v1alpha1") => reply(
                    StatusCode::OK,
                    json!({"kind": "APIResourceList", "apiVersion": "v1",
                        "groupVersion": "example.com/v1alpha1",
                        "resources": [{"name": "kubernetesclusters",
                            "singularName": "kubernetescluster", "namespaced": true,
                            "kind": "KubernetesCluster",
                            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]}),
                ),
                (Method::PATCH, _) => reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "message": "etcd is having a bad day", "reason": "InternalError", "code": 500}),
                ),
                (Method::GET, p) if p.ends_with("webhookconfigurations") => reply(
                    StatusCode::OK,
                    metadata_list(&["faults-kubernetescluster", "faults-removed"]),
                ),
                (Method::DELETE, p) => {
                    seen.lock().unwrap().push(p.to_string());
                    reply(
                        StatusCode::OK,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200}),
                    )
                }
                (method, p) => reply(
                    StatusCode::NOT_FOUND,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "message": format!("{method} {p} is not mocked"), "reason": "NotFound", "code": 404}),
                ),
            };
            send.send_response(response);
        }
    });
    (kube::Client::new(service, "default"), deletes)
}

#[tokio::test]
async fn a_refused_apply_neither_stops_stale_removal_nor_removes_its_own_configuration() {
    let (client, deletes) = server();
    let plugin = Arc::new(load(&example_plugin("kubernetescluster")));
    let setup = WebhookSetup {
        prefix: PREFIX.into(),
        endpoint: WebhookEndpoint::Url("https://127.0.0.1:8443".into()),
        ca_bundle_pem: String::new(),
        namespaces: Vec::new(),
        excluded_namespaces: Vec::new(),
        owner_namespace: None,
    };

    let report = sync(&client, &[plugin], &setup).await;

    // The removed plugin's configurations go, of both kinds, although
    // applying the served plugin's failed first.
    let deletes = deletes.lock().unwrap().clone();
    assert_eq!(
        deletes,
        [
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/faults-removed",
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/faults-removed",
        ],
        "{report:?}"
    );
    // The served plugin keeps what it has: a failed apply is no reason to
    // drop its webhook.
    assert_eq!(report.errors.len(), 2, "{report:?}");
    for error in &report.errors {
        assert!(
            error.contains("faults-kubernetescluster")
                && error.contains("plugin kubernetescluster")
                && error.contains("bad day"),
            "{error}"
        );
    }
    assert_eq!(
        report.changes,
        [
            "removed ValidatingWebhookConfiguration faults-removed",
            "removed MutatingWebhookConfiguration faults-removed",
        ]
    );
}
