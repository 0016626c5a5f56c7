//! A response whose metadata the host owns, or that the API server would
//! refuse, is refused whole before anything is applied: on the embedded
//! cluster, with the compiled hostile plugin returning a legal ConfigMap
//! first and the offending object second.
//!
//! `the_rules_agree_with_the_api_server` checks the rules themselves against
//! a real API server (server-side apply dry runs: nothing is stored). It is
//! skipped, passing with a SKIPPED line, unless `RECONCILER_E2E=1` and
//! `KUBECONFIG` are set:
//!
//! ```text
//! eval "$(../shared/kube/kube up)"
//! RECONCILER_E2E=1 cargo test -p reconciler-tests --test capability_metadata -- --nocapture
//! ```

use std::io::Write as _;
use std::time::Duration;

use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
};
use reconciler_host::cluster::ObjectKey;
use reconciler_host::engine::Outcome;
use reconciler_host::plugin::response_rules::validate_response;
use reconciler_sdk::contract::ReconcileResponse;
use reconciler_sdk::{EventType, KindRef, PluginMetadata};
use reconciler_tests::test_plugin;
use reconciler_tests::world::{World, key};
use serde_json::{Value, json};

const NS: &str = "default";

fn hostile(name: &str, mode: &str) -> Value {
    json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
        "metadata": {"name": name, "namespace": NS}, "spec": {"mode": mode}})
}

fn hostile_key(name: &str) -> ObjectKey {
    key("hostile.example.com", "v1", "Hostile", NS, name)
}

fn config_map_key(name: &str) -> ObjectKey {
    key("", "v1", "ConfigMap", NS, name)
}

fn service_account_key(name: &str) -> ObjectKey {
    key("", "v1", "ServiceAccount", NS, name)
}

/// The messages of the Warning Events recorded on Hostile `name`, each as
/// `reason: message`.
fn warnings_on(world: &World, name: &str) -> Vec<String> {
    world
        .events()
        .into_iter()
        .filter(|e| e.record.regarding.name == name && e.record.event_type == EventType::Warning)
        .map(|e| format!("{}: {}", e.record.reason, e.record.message))
        .collect()
}

/// Runs Hostile `h` in `mode` beside a ServiceAccount `h` that exists
/// already (the plugin's written kind), and checks that every reconcile is
/// refused with `expected` in its message, that a Warning Event on the
/// Hostile says so, and that nothing of the response reached the cluster.
async fn refused_whole(mode: &str, expected: &str) {
    let name = "h";
    let mut world = World::new(&[&test_plugin("hostile")]).await;
    let account = world.apply(json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": NS, "labels": {"owner": "someone-else"}}}));
    world.apply(hostile(name, mode));
    // Long enough for the first failure and a few retries.
    let records = world.settle_for(Duration::from_secs(10)).await;

    let failures: Vec<&str> = records
        .iter()
        .filter(|r| r.object.name == name)
        .map(|r| match &r.outcome {
            Outcome::Failed {
                reason, message, ..
            } => {
                assert_eq!(reason, "InvalidResponse", "{mode}: {message}");
                message.as_str()
            }
            other => panic!("{mode}: every reconcile must be refused, got {other:?}"),
        })
        .collect();
    assert!(
        failures.len() >= 2,
        "{mode}: refused and retried: {failures:?}"
    );
    for message in &failures {
        assert!(message.contains(expected), "{mode}: {message}");
    }
    let warnings = warnings_on(&world, name);
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("InvalidResponse: ") && w.contains(expected)),
        "{mode}: a Warning Event names the item: {warnings:?}"
    );

    for cm in [name.to_string(), format!("{name}-2")] {
        assert_eq!(
            world.get(&config_map_key(&cm)).await,
            None,
            "{mode}: nothing of the response is applied, not even the legal first item"
        );
    }
    assert_eq!(
        world.get(&service_account_key(name)).await.as_ref(),
        Some(&account),
        "{mode}: the ServiceAccount is untouched"
    );
    assert!(
        world.get(&hostile_key(name)).await.is_some(),
        "{mode}: the primary is still there"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_reference_through_a_written_kind_is_refused() {
    refused_whole(
        "owner-reference-via-writes",
        "apply[1] (v1 ServiceAccount h): metadata.ownerReferences is set by the host (the controller reference of owned kinds); a plugin may not set it",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizers_on_a_child_are_refused() {
    refused_whole(
        "set-finalizers",
        "apply[1] (v1 ConfigMap h-2): metadata.finalizers is set by the host",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_uid_is_refused() {
    refused_whole(
        "set-uid",
        "apply[1] (v1 ConfigMap h-2): metadata.uid is set by the API server",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_version_is_refused() {
    refused_whole(
        "set-resource-version",
        "apply[1] (v1 ConfigMap h-2): metadata.resourceVersion is set by the API server",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_numeric_label_value_in_the_second_object_applies_nothing() {
    refused_whole(
        "numeric-label-second",
        "apply[1] (v1 ConfigMap h-2): metadata.labels[\"tier\"] must be a string, got a number",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_annotation_key_is_refused() {
    refused_whole(
        "bad-annotation-key",
        "apply[1] (v1 ConfigMap h-2): metadata.annotations key \"bad key!\"",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotations_over_256_kib_are_refused() {
    refused_whole(
        "huge-annotations",
        "apply[1] (v1 ConfigMap h-2): metadata.annotations hold 262145 bytes (keys and values), over the API server's limit of 262144",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_name_is_refused() {
    refused_whole(
        "generate-name",
        "apply[1] (v1 ConfigMap h-2): metadata.generateName is not supported",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn null_owner_references_still_get_the_controller_reference() {
    let mut world = World::new(&[&test_plugin("hostile")]).await;
    world.apply(hostile("h", "null-owner-references"));
    let records = world.settle().await;
    assert!(
        records
            .iter()
            .all(|r| !matches!(r.outcome, Outcome::Failed { .. })),
        "null counts as absent: {records:?}"
    );
    let uid = world.get(&hostile_key("h")).await.expect("the primary")["metadata"]["uid"].clone();
    let cm = world
        .get(&config_map_key("h"))
        .await
        .expect("the ConfigMap is applied");
    let refs = &cm["metadata"]["ownerReferences"];
    assert_eq!(
        refs.as_array().map(Vec::len),
        Some(1),
        "exactly the host's controller reference: {refs}"
    );
    assert_eq!(
        (&refs[0]["kind"], &refs[0]["uid"], &refs[0]["controller"]),
        (&json!("Hostile"), &uid, &json!(true)),
        "{refs}"
    );
    // And the controller reference works: the ConfigMap goes with its owner.
    world.apply(
        json!({"apiVersion": "hostile.example.com/v1", "kind": "Hostile",
        "metadata": {"name": "h", "namespace": NS,
            "annotations": {"hostile.example.com/cleanup-done": "true"}},
        "spec": {"mode": "null-owner-references"}}),
    );
    world.delete(&hostile_key("h"));
    world.settle_for(Duration::from_secs(10)).await;
    assert_eq!(world.get(&hostile_key("h")).await, None);
    assert_eq!(
        world.get(&config_map_key("h")).await,
        None,
        "garbage-collected with its owner"
    );
}

/// A kind the agreement cases use, with what the API server needs to know.
#[derive(Clone, Copy)]
struct Kind {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
}

const CONFIG_MAP: Kind = Kind {
    group: "",
    version: "v1",
    kind: "ConfigMap",
    plural: "configmaps",
    namespaced: true,
};
const SERVICE: Kind = Kind {
    group: "",
    version: "v1",
    kind: "Service",
    plural: "services",
    namespaced: true,
};
const NAMESPACE: Kind = Kind {
    group: "",
    version: "v1",
    kind: "Namespace",
    plural: "namespaces",
    namespaced: false,
};
const STATEFUL_SET: Kind = Kind {
    group: "apps",
    version: "v1",
    kind: "StatefulSet",
    plural: "statefulsets",
    namespaced: true,
};
const CRON_JOB: Kind = Kind {
    group: "batch",
    version: "v1",
    kind: "CronJob",
    plural: "cronjobs",
    namespaced: true,
};
const JOB: Kind = Kind {
    group: "batch",
    version: "v1",
    kind: "Job",
    plural: "jobs",
    namespaced: true,
};
const ROLE: Kind = Kind {
    group: "rbac.authorization.k8s.io",
    version: "v1",
    kind: "Role",
    plural: "roles",
    namespaced: true,
};

impl Kind {
    fn kind_ref(self) -> KindRef {
        KindRef::new(self.group, self.version, self.kind)
    }

    /// A minimal object of this kind the API server accepts, named `name`,
    /// with `metadata` merged into its metadata.
    fn object(self, name: &str, metadata: Value) -> Value {
        let pod = |restart: &str| {
            json!({"metadata": {"labels": {"app": "check"}},
                "spec": {"restartPolicy": restart, "containers": [{"name": "c", "image": "busybox:1.36"}]}})
        };
        let mut object = match self.kind {
            "Service" => json!({"spec": {"ports": [{"port": 80}]}}),
            "StatefulSet" => json!({"spec": {"serviceName": "check",
                "selector": {"matchLabels": {"app": "check"}}, "template": pod("Always")}}),
            "CronJob" => json!({"spec": {"schedule": "0 0 * * *",
                "jobTemplate": {"spec": {"template": pod("Never")}}}}),
            "Job" => json!({"spec": {"template": pod("Never")}}),
            "Role" => json!({"rules": []}),
            _ => json!({}),
        };
        let api_version = if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        };
        object["apiVersion"] = json!(api_version);
        object["kind"] = json!(self.kind);
        object["metadata"] = json!({"name": name});
        if let (Some(meta), Value::Object(extra)) = (object["metadata"].as_object_mut(), metadata) {
            meta.extend(extra);
        }
        object
    }
}

/// What the host and the API server each make of an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    BothAccept,
    BothRefuse,
    /// The API server stores it, and that is why the host refuses it: a
    /// field the host owns, or a name the host could not follow.
    OnlyTheHostRefuses,
}

fn agreement_cases() -> Vec<(&'static str, Kind, String, Value, Expect)> {
    use Expect::*;
    let cm = |label: &'static str, metadata: Value, expect: Expect| {
        (label, CONFIG_MAP, "check".to_string(), metadata, expect)
    };
    let named = |label: &'static str, kind: Kind, name: &str, expect: Expect| {
        (label, kind, name.to_string(), json!({}), expect)
    };
    let annotation_bytes = |n: usize| json!({"annotations": {"a": "x".repeat(n - 1)}});
    vec![
        cm(
            "an empty label value",
            json!({"labels": {"tier": ""}}),
            BothAccept,
        ),
        cm(
            "a 63-character label value",
            json!({"labels": {"tier": "a".repeat(63)}}),
            BothAccept,
        ),
        cm(
            "a null label value",
            json!({"labels": {"tier": null}}),
            BothAccept,
        ),
        cm(
            "a prefixed label key and a value with '_' and '.'",
            json!({"labels": {"example.com/tier": "A_b.c-D"}}),
            BothAccept,
        ),
        cm(
            "an annotation key with an upper-case prefix",
            json!({"annotations": {"Example.COM/Note": "z"}}),
            BothAccept,
        ),
        cm(
            "annotations of exactly 256 KiB",
            annotation_bytes(262_144),
            BothAccept,
        ),
        cm(
            "a numeric label value",
            json!({"labels": {"tier": 3}}),
            BothRefuse,
        ),
        cm(
            "a boolean annotation value",
            json!({"annotations": {"a": true}}),
            BothRefuse,
        ),
        cm("labels as a list", json!({"labels": ["tier"]}), BothRefuse),
        cm(
            "a 64-character label value",
            json!({"labels": {"tier": "a".repeat(64)}}),
            BothRefuse,
        ),
        cm(
            "a label value starting with '-'",
            json!({"labels": {"tier": "-x"}}),
            BothRefuse,
        ),
        cm(
            "a label key with a space",
            json!({"labels": {"bad key!": "x"}}),
            BothRefuse,
        ),
        cm(
            "a label key with an upper-case prefix",
            json!({"labels": {"Example.com/tier": "x"}}),
            BothRefuse,
        ),
        cm(
            "a label key with two slashes",
            json!({"labels": {"a/b/c": "x"}}),
            BothRefuse,
        ),
        cm(
            "an annotation key with a space",
            json!({"annotations": {"bad key!": "x"}}),
            BothRefuse,
        ),
        cm(
            "annotations one byte over 256 KiB",
            annotation_bytes(262_145),
            BothRefuse,
        ),
        cm("a numeric namespace", json!({"namespace": 5}), BothRefuse),
        named("a dotted ConfigMap name", CONFIG_MAP, "a.b", BothAccept),
        named(
            "an upper-case ConfigMap name",
            CONFIG_MAP,
            "Upper",
            BothRefuse,
        ),
        named("a Service name", SERVICE, "web-1", BothAccept),
        named(
            "a Service name starting with a digit",
            SERVICE,
            "1web",
            BothRefuse,
        ),
        named("a dotted Service name", SERVICE, "a.b", BothRefuse),
        named(
            "a Namespace name starting with a digit",
            NAMESPACE,
            "1check",
            BothAccept,
        ),
        named("a dotted Namespace name", NAMESPACE, "a.b", BothRefuse),
        named(
            "a StatefulSet name starting with a digit",
            STATEFUL_SET,
            "1abc",
            BothAccept,
        ),
        named("a dotted StatefulSet name", STATEFUL_SET, "a.b", BothRefuse),
        named(
            "a 52-character CronJob name",
            CRON_JOB,
            &"c".repeat(52),
            BothAccept,
        ),
        named(
            "a 53-character CronJob name",
            CRON_JOB,
            &"c".repeat(53),
            BothRefuse,
        ),
        named("a 63-character Job name", JOB, &"j".repeat(63), BothAccept),
        named("a 64-character Job name", JOB, &"j".repeat(64), BothRefuse),
        named(
            "a Role name with ':' and capitals",
            ROLE,
            "system:Check_x",
            BothAccept,
        ),
        cm(
            "a dangling ownerReference",
            json!({"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "stranger",
                "uid": "3f1c2b8e-0000-4000-8000-00000000dead"}]}),
            OnlyTheHostRefuses,
        ),
        cm(
            "finalizers",
            json!({"finalizers": ["example.com/stuck"]}),
            OnlyTheHostRefuses,
        ),
        cm("a generation", json!({"generation": 7}), OnlyTheHostRefuses),
        cm(
            "a deletionTimestamp",
            json!({"deletionTimestamp": "2020-01-01T00:00:00Z"}),
            OnlyTheHostRefuses,
        ),
        cm(
            "a generateName",
            json!({"generateName": "check-"}),
            OnlyTheHostRefuses,
        ),
    ]
}

/// The host's verdict: `Err` with its message when it refuses.
fn host_verdict(kind: Kind, object: &Value) -> Result<(), String> {
    let metadata = PluginMetadata::new("check", "1", KindRef::new("example.com", "v1", "Check"))
        .owns(kind.kind_ref());
    let primary_namespace = kind.namespaced.then_some("default");
    let response = ReconcileResponse {
        apply: vec![object.to_string()],
        ..Default::default()
    };
    validate_response(&metadata, primary_namespace, response)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// The API server's verdict on a server-side apply of `object`, as a dry run.
async fn server_verdict(
    client: &Client,
    namespace: &str,
    kind: Kind,
    name: &str,
    object: &Value,
) -> Result<(), String> {
    let gvk = GroupVersionKind::gvk(kind.group, kind.version, kind.kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, kind.plural);
    let api: Api<DynamicObject> = if kind.namespaced {
        Api::namespaced_with(client.clone(), namespace, &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    };
    // Forced, so an object of the same name that exists already cannot
    // answer with a conflict instead of a verdict.
    let params = PatchParams::apply("reconciler-host-metadata-check")
        .force()
        .dry_run();
    match api.patch(name, &params, &Patch::Apply(object)).await {
        Ok(_) => Ok(()),
        // Validation answers 422; a value of the wrong JSON type fails the
        // conversion to the typed object, which the API server answers 500.
        Err(kube::Error::Api(status)) if matches!(status.code, 400 | 422 | 500) => {
            Err(format!("{} {}", status.code, status.message))
        }
        Err(e) => panic!("cannot ask the API server about {name}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rules_agree_with_the_api_server() {
    let mut missing = Vec::new();
    if std::env::var_os("RECONCILER_E2E").is_none_or(|v| v != "1") {
        missing.push("RECONCILER_E2E is not \"1\"");
    }
    if std::env::var_os("KUBECONFIG").is_none_or(|v| v.is_empty()) {
        missing.push("KUBECONFIG is not set");
    }
    if !missing.is_empty() {
        // Straight to stderr: the harness would capture `eprintln!`.
        let _ = writeln!(
            std::io::stderr(),
            "capability_metadata: SKIPPED the_rules_agree_with_the_api_server: {}. To run it: \
             RECONCILER_E2E=1 KUBECONFIG=<kubeconfig> cargo test -p reconciler-tests --test capability_metadata",
            missing.join(" and ")
        );
        return;
    }
    let client = Client::try_default()
        .await
        .expect("a client from KUBECONFIG");
    // A namespace of its own, so that no object of the same name is there
    // to turn an apply into an update that fails for other reasons.
    let namespaces: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("", "v1", "Namespace"),
            "namespaces",
        ),
    );
    let namespace = format!("capability-metadata-{}", std::process::id());
    namespaces
        .patch(
            &namespace,
            &PatchParams::apply("reconciler-host-metadata-check"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": namespace,
                    "labels": {"app.kubernetes.io/created-by": "reconciler-host-e2e-test"}}})),
        )
        .await
        .expect("create the test namespace");
    let mut disagreements = Vec::new();
    for (label, kind, name, metadata, expect) in agreement_cases() {
        let object = kind.object(&name, metadata);
        let host = host_verdict(kind, &object);
        let server = server_verdict(&client, &namespace, kind, &name, &object).await;
        let got = match (&host, &server) {
            (Ok(()), Ok(())) => Expect::BothAccept,
            (Err(_), Err(_)) => Expect::BothRefuse,
            (Err(_), Ok(())) => Expect::OnlyTheHostRefuses,
            (Ok(()), Err(_)) => {
                disagreements.push(format!(
                    "{label}: the host accepts what the API server refuses: {server:?}"
                ));
                continue;
            }
        };
        if got != expect {
            disagreements.push(format!(
                "{label}: expected {expect:?}, got {got:?} (host: {host:?}; API server: {server:?})"
            ));
        }
    }
    if let Err(e) = namespaces
        .delete(&namespace, &DeleteParams::default())
        .await
    {
        let _ = writeln!(
            std::io::stderr(),
            "namespace {namespace} is left behind: {e}"
        );
    }
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
}
