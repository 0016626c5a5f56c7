//! The admission webhook server over HTTPS, with compiled plugins: what the
//! API server sends and what it gets back, and the webhook configurations
//! the host would register.

use std::net::SocketAddr;
use std::sync::Arc;

use base64::Engine as _;
use reconciler_host::admission::client_ca::ClientCa;
use reconciler_host::admission::live_cert::LiveCert;
use reconciler_host::admission::plugin_set::AdmissionPlugins;
use reconciler_host::admission::server::{ServerLimits, serve, serve_with};
use reconciler_host::admission::serving_cert::ServingCert;
use reconciler_host::admission::webhook_configs::{WebhookEndpoint, WebhookSetup, configurations};
use reconciler_host::cluster::VirtualClock;
use reconciler_host::plugin::sandbox::DEFAULT_ADMISSION_INSTANCES;
use reconciler_host::plugin::{LoadedPlugin, ReconcileInput, Sandbox, SandboxConfig};
use reconciler_sdk::memory_cache::MemoryCache;
use reconciler_tests::{
    example_plugin, https_client, load, test_compile_cache_dir, test_limits, test_plugin,
};
use serde_json::{Value, json};

struct Webhook {
    addr: SocketAddr,
    cert: ServingCert,
    plugins: Arc<AdmissionPlugins>,
}

async fn start(plugins: &[&str]) -> Webhook {
    let loaded = plugins.iter().map(|p| load(&plugin_path(p)));
    start_serving(loaded, DEFAULT_ADMISSION_INSTANCES as usize).await
}

/// Serves `plugins` with `calls` admission calls at once.
async fn start_serving(plugins: impl IntoIterator<Item = LoadedPlugin>, calls: usize) -> Webhook {
    let set = Arc::new(AdmissionPlugins::new());
    set.replace(plugins.into_iter().map(Arc::new));
    let cert = ServingCert::generate(&["127.0.0.1".to_string()]).unwrap();
    let addr = serve(
        "127.0.0.1:0".parse().unwrap(),
        LiveCert::new(&cert).unwrap(),
        set.clone(),
        Arc::new(VirtualClock::at(0)),
        calls,
    )
    .await
    .unwrap();
    Webhook {
        addr,
        cert,
        plugins: set,
    }
}

fn plugin_path(name: &str) -> std::path::PathBuf {
    match name {
        "kubernetescluster" | "podset" => example_plugin(name),
        other => test_plugin(other),
    }
}

/// POSTs `body` over HTTPS, trusting only the webhook's CA bundle, and
/// returns the status code and body.
async fn post(webhook: &Webhook, path: &str, body: &str) -> (u16, String) {
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    https_client::send(webhook.addr, &webhook.cert.ca_bundle_pem, &request)
        .await
        .expect("the webhook answers over HTTPS")
}

fn review(operation: &str, kind: (&str, &str, &str), object: Value, old: Option<Value>) -> String {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "3f2a", "kind": {"group": kind.0, "version": kind.1, "kind": kind.2},
            "resource": {"group": kind.0, "version": kind.1, "resource": "whatever"},
            "name": object["metadata"]["name"], "namespace": "default", "operation": operation,
            "userInfo": {"username": "alice"}, "object": object, "oldObject": old, "dryRun": false}})
    .to_string()
}

const CLUSTER_KIND: (&str, &str, &str) = ("example.com", "v1alpha1", "KubernetesCluster");
const HOSTILE_KIND: (&str, &str, &str) = ("hostile.example.com", "v1", "Hostile");

fn cluster(masters: i64, version: Option<&str>) -> Value {
    let mut spec = json!({"masters": masters, "workers": 2, "timeoutSeconds": 600});
    if let Some(v) = version {
        spec["version"] = json!(v);
    }
    json!({"apiVersion": "example.com/v1alpha1", "kind": "KubernetesCluster",
        "metadata": {"name": "prod", "namespace": "default"}, "spec": spec})
}

fn answer(body: &str) -> Value {
    let review: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(review["kind"], "AdmissionReview");
    assert_eq!(review["response"]["uid"], "3f2a", "the uid is echoed");
    review["response"].clone()
}

#[tokio::test]
async fn a_change_of_masters_is_denied_and_a_missing_version_defaulted_over_https() {
    let webhook = start(&["kubernetescluster"]).await;
    let (code, body) = post(
        &webhook,
        "/admission/kubernetescluster/validate",
        &review(
            "UPDATE",
            CLUSTER_KIND,
            cluster(5, Some("1.33")),
            Some(cluster(3, Some("1.33"))),
        ),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let response = answer(&body);
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"].as_str().unwrap().starts_with(
            "spec.masters cannot change after creation: it is 3, the update asks for 5"
        ),
        "{response}"
    );

    let (_, body) = post(
        &webhook,
        "/admission/kubernetescluster/mutate",
        &review("CREATE", CLUSTER_KIND, cluster(3, None), None),
    )
    .await;
    let response = answer(&body);
    assert_eq!(response["allowed"], true);
    assert_eq!(response["patchType"], "JSONPatch");
    let patch = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().unwrap())
        .unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&patch).unwrap(),
        json!([{"op": "add", "path": "/spec/version", "value": "1.33"}])
    );
}

/// With --admission-client-ca, the webhook port serves only callers whose
/// certificate that CA signed (the API server's): a pod connecting without
/// one, or with one from another CA, is refused at the TLS handshake and
/// gets no answer (so it cannot hold an admission call), while the API
/// server's call is answered by the plugin.
#[tokio::test]
async fn only_callers_with_a_certificate_from_the_client_ca_are_served() {
    let (ca_pem, api_server) =
        https_client::ClientIdentity::signed_by_new_ca("kube-apiserver").unwrap();
    let (_, stranger) = https_client::ClientIdentity::signed_by_new_ca("a pod").unwrap();
    let callers = ClientCa::from_pem(ca_pem.as_bytes(), std::path::Path::new("client-ca.crt"))
        .expect("a CA the host accepts");
    let set = Arc::new(AdmissionPlugins::new());
    set.replace([Arc::new(load(&plugin_path("kubernetescluster")))]);
    let cert = ServingCert::generate(&["127.0.0.1".to_string()]).unwrap();
    let addr = serve_with(
        "127.0.0.1:0".parse().unwrap(),
        LiveCert::new(&cert).unwrap(),
        set,
        Arc::new(VirtualClock::at(0)),
        DEFAULT_ADMISSION_INSTANCES as usize,
        ServerLimits::default(),
        Some(&callers),
    )
    .await
    .unwrap();
    let body = review(
        "UPDATE",
        CLUSTER_KIND,
        cluster(5, Some("1.33")),
        Some(cluster(3, Some("1.33"))),
    );
    let request = format!(
        "POST /admission/kubernetescluster/validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );

    for (who, identity) in [("no certificate", None), ("another CA's", Some(&stranger))] {
        let refused = https_client::send_as(addr, &cert.ca_bundle_pem, identity, &request).await;
        let error = match refused {
            Ok((code, body)) => panic!("a client with {who} was answered: {code} {body}"),
            Err(e) => format!("{e:#}"),
        };
        assert!(
            error.contains("alert"),
            "a client with {who} should be refused by a TLS alert: {error}"
        );
    }

    let (code, body) =
        https_client::send_as(addr, &cert.ca_bundle_pem, Some(&api_server), &request)
            .await
            .expect("the API server's certificate is accepted");
    assert_eq!(code, 200, "{body}");
    let response = answer(&body);
    assert_eq!(
        response["allowed"], false,
        "the plugin answered: {response}"
    );
}

#[tokio::test]
async fn a_plugin_gets_only_its_own_kind_and_a_removed_plugin_is_refused() {
    let webhook = start(&["kubernetescluster", "hostile"]).await;
    let hostile = json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
        "metadata": {"name": "h", "namespace": "default"}, "spec": {"mode": "ok"}});
    let (_, body) = post(
        &webhook,
        "/admission/kubernetescluster/validate",
        &review("CREATE", HOSTILE_KIND, hostile, None),
    )
    .await;
    let response = answer(&body);
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("serves admission only for its primary kind"),
        "{response}"
    );

    // A reload without the plugin: its path answers at once that it is gone.
    webhook
        .plugins
        .replace([Arc::new(load(&test_plugin("hostile")))]);
    let (_, body) = post(
        &webhook,
        "/admission/kubernetescluster/validate",
        &review(
            "UPDATE",
            CLUSTER_KIND,
            cluster(3, Some("1.33")),
            Some(cluster(3, Some("1.33"))),
        ),
    )
    .await;
    let response = answer(&body);
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("serves no plugin named kubernetescluster"),
        "{response}"
    );
}

#[tokio::test]
async fn trapping_and_looping_plugins_get_their_failure_policy_and_garbage_is_refused() {
    let webhook = start(&["hostile"]).await;
    for mode in ["admit-trap", "admit-loop"] {
        let object = json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
            "metadata": {"name": "h", "namespace": "default"}, "spec": {"mode": mode}});
        let (_, body) = post(
            &webhook,
            "/admission/hostile/validate",
            &review("CREATE", HOSTILE_KIND, object, None),
        )
        .await;
        let response = answer(&body);
        assert_eq!(response["allowed"], false, "{mode}: {response}");
        assert!(
            response["status"]["message"]
                .as_str()
                .unwrap()
                .contains("failure policy Fail"),
            "{mode}: {response}"
        );
    }
    webhook
        .plugins
        .replace([Arc::new(load(&test_plugin("hostile-admission-ignore")))]);
    let object = json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
        "metadata": {"name": "h", "namespace": "default"}, "spec": {"mode": "admit-trap"}});
    let (_, body) = post(
        &webhook,
        "/admission/hostile/validate",
        &review("CREATE", HOSTILE_KIND, object, None),
    )
    .await;
    assert_eq!(answer(&body)["allowed"], true, "Ignore admits");

    let (code, _) = post(&webhook, "/admission/hostile/validate", "{not json").await;
    assert_eq!(code, 400);
}

/// The token a defaulting plugin drew for the request `uid`: the value of
/// its patch's `/spec/token`.
async fn drawn_token(webhook: &Webhook, uid: &str) -> Value {
    let object = json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
        "metadata": {"name": "", "generateName": "h-", "namespace": "default"},
        "spec": {"mode": "admit-token"}});
    let mut review: Value = serde_json::from_str(&review("CREATE", HOSTILE_KIND, object, None))
        .expect("the review is JSON");
    review["request"]["uid"] = json!(uid);
    let (code, body) = post(webhook, "/admission/hostile/mutate", &review.to_string()).await;
    assert_eq!(code, 200, "{body}");
    let response: Value = serde_json::from_str(&body).expect("an AdmissionReview");
    assert_eq!(response["response"]["uid"], uid, "the uid is echoed");
    let patch = base64::engine::general_purpose::STANDARD
        .decode(response["response"]["patch"].as_str().expect("a patch"))
        .expect("base64");
    let ops: Vec<Value> = serde_json::from_slice(&patch).expect("a JSON patch");
    ops.into_iter()
        .find(|op| op["path"] == "/spec/token")
        .map(|op| op["value"].clone())
        .unwrap_or_else(|| panic!("no token in the patch: {response}"))
}

/// Two creates of objects that look alike (a generated name: no name, no
/// uid yet) are two requests: a defaulting plugin drawing a token or a
/// name suffix gives each its own, and the API server calling again for
/// the same request gets the same one.
#[tokio::test]
async fn each_admission_request_draws_its_own_randomness() {
    let webhook = start(&["hostile"]).await;
    let first = drawn_token(&webhook, "request-1").await;
    let second = drawn_token(&webhook, "request-2").await;
    assert_ne!(first, second, "two requests drew the same token");
    assert_eq!(
        drawn_token(&webhook, "request-1").await,
        first,
        "the same request draws the same token again"
    );
}

/// Admission calls that run to their deadline, arriving faster than one
/// instance can answer them: the server gives up waiting on many, and each
/// call it gave up on still holds its instance until the sandbox stops it.
/// Admission must never run more calls than it has instances for, or the
/// pool runs dry: its own calls and the reconciles beside it (within their
/// share) fail to instantiate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_calls_given_up_on_keep_their_instance_until_they_end() {
    // Two instances for reconciles and loading, one for admission calls,
    // one for admission's loading.
    let sandbox = Arc::new(
        Sandbox::new(SandboxConfig {
            limits: test_limits(),
            compile_cache: Some(test_compile_cache_dir()),
            max_instances: 2,
            admission_instances: 1,
            ..SandboxConfig::default()
        })
        .expect("a sandbox of four instances"),
    );
    let hostile = sandbox.load(&test_plugin("hostile")).expect("load hostile");
    let reconciling = sandbox.load(&test_plugin("hostile")).expect("load hostile");
    let webhook = Arc::new(start_serving([hostile], sandbox.admission_instances()).await);

    // Reconciles one at a time (the engine's share of this sandbox) for as
    // long as the flood lasts.
    let flooding = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let reconciles = std::thread::spawn({
        let flooding = flooding.clone();
        move || {
            let mut failures = Vec::new();
            let mut done = 0;
            while flooding.load(std::sync::atomic::Ordering::Relaxed) {
                let primary = json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
                    "metadata": {"name": "calm", "namespace": "default", "uid": "u-calm"},
                    "spec": {"mode": ""}});
                let cache = MemoryCache::new();
                let request = cache.request_for(&primary, &reconciling.metadata().owns);
                let answer = reconciling.reconcile(ReconcileInput {
                    request,
                    primary_namespace: Some("default".into()),
                    object: "default/calm".into(),
                    reader: Arc::new(cache),
                    now_millis: 0,
                    cluster: Default::default(),
                });
                if let Err(e) = answer {
                    failures.push(e.to_string());
                }
                done += 1;
            }
            (done, failures)
        }
    });

    let mut requests = Vec::new();
    for i in 0..100 {
        let webhook = webhook.clone();
        requests.push(tokio::spawn(async move {
            let object = json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
                "metadata": {"name": format!("h-{i}"), "namespace": "default"},
                "spec": {"mode": "admit-loop"}});
            let (_, body) = post(
                &webhook,
                "/admission/hostile/validate",
                &review("CREATE", HOSTILE_KIND, object, None),
            )
            .await;
            answer(&body)
        }));
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let mut answers = Vec::new();
    for request in requests {
        answers.push(request.await.expect("the request task"));
    }
    flooding.store(false, std::sync::atomic::Ordering::Relaxed);
    let (done, failures) = reconciles.join().expect("the reconcile thread");

    for response in &answers {
        assert_eq!(response["allowed"], false, "{response}");
        let message = response["status"]["message"].as_str().unwrap_or_default();
        assert!(
            !message.contains("instantiate"),
            "an admission call found no instance: {message}"
        );
    }
    assert!(done > 0, "no reconcile ran during the flood");
    assert!(
        failures.is_empty(),
        "{} of {done} reconciles failed during the flood, first: {}",
        failures.len(),
        failures[0]
    );
}

#[test]
fn the_configurations_name_the_kind_the_endpoint_and_the_policy() {
    let plugin = load(&example_plugin("kubernetescluster"));
    let settings = plugin.admission().unwrap().clone();
    let setup = WebhookSetup {
        prefix: "reconciler-host".into(),
        endpoint: WebhookEndpoint::Service {
            namespace: "reconciler-system".into(),
            name: "reconciler-host".into(),
            port: 8443,
        },
        ca_bundle_pem: "PEM".into(),
        namespaces: vec!["team-a".into()],
        excluded_namespaces: vec!["reconciler-system".into()],
        owner_namespace: Some("reconciler-system".into()),
    };
    let (validating, mutating) =
        configurations(&plugin, &settings, "kubernetesclusters", true, &setup, None);
    let hook = &validating["webhooks"][0];
    assert_eq!(
        validating["metadata"]["name"],
        "reconciler-host-kubernetescluster"
    );
    assert_eq!(hook["failurePolicy"], "Fail");
    assert_eq!(hook["sideEffects"], "None");
    assert_eq!(hook["timeoutSeconds"], 3);
    assert_eq!(
        hook["rules"],
        json!([{"apiGroups": ["example.com"], "apiVersions": ["v1alpha1"],
            "operations": ["CREATE", "UPDATE"], "resources": ["kubernetesclusters"], "scope": "Namespaced"}])
    );
    assert_eq!(
        hook["clientConfig"]["service"],
        json!({"namespace": "reconciler-system", "name": "reconciler-host", "port": 8443,
            "path": "/admission/kubernetescluster/validate"})
    );
    assert_eq!(hook["clientConfig"]["caBundle"], "UEVN");
    assert_eq!(
        hook["namespaceSelector"],
        json!({"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a"]},
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "reconciler-system"]},
            {"key": "reconciler-host.io/admission", "operator": "NotIn", "values": ["disabled"]},
        ]}),
        "called only for the namespaces the host serves, never kube-system, the host's own or one that opted out"
    );
    assert_eq!(
        hook.get("objectSelector"),
        None,
        "an object's own labels are its writer's: none of them may keep it from admission"
    );
    let mutating = mutating.expect("kubernetescluster defaults");
    assert_eq!(
        mutating["webhooks"][0]["clientConfig"]["service"]["path"],
        "/admission/kubernetescluster/mutate"
    );

    let url = WebhookSetup {
        endpoint: WebhookEndpoint::Url("https://127.0.0.1:9443".into()),
        ..setup
    };
    let (validating, _) =
        configurations(&plugin, &settings, "kubernetesclusters", true, &url, None);
    assert_eq!(
        validating["webhooks"][0]["clientConfig"]["url"],
        "https://127.0.0.1:9443/admission/kubernetescluster/validate"
    );
}
