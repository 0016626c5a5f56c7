//! A CRD's structural schema governs the embedded cluster as it governs the
//! API server: the same writes of `Widget`s (tests/parity/widget-crd.yaml:
//! types, required fields, enums, bounds, formats, int-or-string, a set,
//! preserved unknown fields, nested defaults, CEL rules with a message, a
//! fieldPath and a transition rule, a status) are stored or refused alike,
//! refusals naming the same fields, stored objects equal field for field.
//!
//! The writes run on the embedded cluster always, checked against the
//! verdicts written here, and on the cluster of `KUBECONFIG` when
//! `RECONCILER_E2E=1`, where the same verdicts must hold and the two runs
//! must agree on every stored spec and status (otherwise that half prints
//! `schema_parity: SKIPPED ...` and passes). On a real cluster it works in
//! a namespace `schema-parity-<n>`, deleted at the end.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use reconciler_host::cluster::embedded::EmbeddedCluster;
use reconciler_host::cluster::kubernetes::KubernetesBackend;
use reconciler_host::cluster::{BackendError, ClusterBackend, ObjectKey, Propagation, RealClock};
use reconciler_sdk::KindRef;
use serde_json::{Value, json};

const CRD: &str = include_str!("../parity/widget-crd.yaml");

fn widget_kind() -> KindRef {
    KindRef::new("parity.example.com", "v1", "Widget")
}

/// One write of a case: a spec applied as a user applies a file, or a
/// status applied as a plugin writes one.
enum Write {
    Spec(Value),
    Status(Value),
}

/// What a write should do: be stored, or be refused naming these fields
/// (`<nil>` is the API server's line for CEL rules left UNCHECKED).
enum Verdict {
    Stored,
    Refused(&'static [&'static str]),
}

struct Case {
    name: &'static str,
    writes: Vec<(Write, Verdict)>,
}

/// The API server's line for CEL rules left unchecked by schema errors.
const UNCHECKED: &str = "<nil>";

fn cases() -> Vec<Case> {
    use Verdict::{Refused, Stored};
    use Write::{Spec, Status};
    vec![
        Case {
            name: "defaults",
            writes: vec![(Spec(json!({"size": 1})), Stored)],
        },
        Case {
            name: "unknown-field",
            writes: vec![(
                Spec(json!({"size": 3, "color": "blue", "shade": "dark"})),
                Refused(&["spec.shade"]),
            )],
        },
        Case {
            name: "wrong-type",
            writes: vec![(Spec(json!({"size": "three"})), Refused(&["spec.size"]))],
        },
        Case {
            name: "bounds",
            writes: vec![(
                Spec(json!({"size": 11, "name": "a", "port": 1.5})),
                Refused(&["spec.port", "spec.size", "spec.name", UNCHECKED]),
            )],
        },
        Case {
            name: "everything-wrong",
            writes: vec![(
                Spec(
                    json!({"size": 1, "ratio": 0, "color": "pink", "name": "ABCDEFGHIJ",
                    "tags": ["a", "b", "c", "d"], "labels": {"x": "toolong"},
                    "when": "never", "port": true}),
                ),
                Refused(&[
                    "spec.when",
                    "spec.port",
                    "spec.ratio",
                    "spec.tags",
                    "spec.name",
                    "spec.labels.x",
                    "spec.color",
                    UNCHECKED,
                ]),
            )],
        },
        Case {
            name: "required",
            writes: vec![(Spec(json!({})), Refused(&["spec.size", UNCHECKED]))],
        },
        Case {
            name: "null",
            writes: vec![(
                Spec(json!({"size": null})),
                Refused(&["spec.size", UNCHECKED]),
            )],
        },
        Case {
            name: "pattern",
            writes: vec![(
                Spec(json!({"size": 1, "name": "ab1"})),
                Refused(&["spec.name"]),
            )],
        },
        Case {
            name: "cel-message",
            writes: vec![
                (Spec(json!({"size": 7})), Refused(&["spec"])),
                (Spec(json!({"size": 7, "color": "blue"})), Stored),
            ],
        },
        Case {
            name: "cel-field-path",
            writes: vec![(
                Spec(json!({"size": 1, "tags": ["t-a", "b"]})),
                Refused(&["spec.tags"]),
            )],
        },
        Case {
            name: "transition",
            writes: vec![
                (Spec(json!({"size": 1, "name": "abc"})), Stored),
                (
                    Spec(json!({"size": 1, "name": "abd"})),
                    Refused(&["spec.name"]),
                ),
                (Spec(json!({"size": 2, "name": "abc"})), Stored),
            ],
        },
        Case {
            name: "preserved-and-int-or-string",
            writes: vec![(
                Spec(
                    json!({"size": 2, "free": {"any": {"thing": 1}}, "port": "80",
                    "tags": ["t-a"]}),
                ),
                Stored,
            )],
        },
        Case {
            name: "nested-default",
            writes: vec![(Spec(json!({"size": 1, "limits": {}})), Stored)],
        },
        Case {
            name: "set-duplicates",
            writes: vec![(
                Spec(json!({"size": 1, "tags": ["t-a", "t-a"]})),
                Refused(&["spec.tags"]),
            )],
        },
        Case {
            name: "formats",
            writes: vec![(
                Spec(json!({"size": 1, "when": "2024-01-01T00:00:00Z", "ratio": 0.5})),
                Stored,
            )],
        },
        Case {
            name: "status",
            writes: vec![
                (Spec(json!({"size": 1})), Stored),
                (Status(json!({"phase": "Ready", "podNames": ["a"]})), Stored),
                (
                    Status(json!({"phase": "Ready", "extra": 1})),
                    Refused(&["status.extra"]),
                ),
                // A status update is validated from the status down: the
                // API server names `phase`, not `status.phase`.
                (Status(json!({"phase": "Gone"})), Refused(&["phase"])),
            ],
        },
    ]
}

/// What one write did, as a user sees it: the stored spec and status, or
/// the fields the refusal names.
#[derive(Debug, PartialEq)]
enum Outcome {
    Stored { spec: Value, status: Value },
    Refused(BTreeSet<String>),
}

/// The fields an error names: each path right before one of the API
/// server's field error words.
fn refused_fields(error: &BackendError) -> BTreeSet<String> {
    let pattern = regex::Regex::new(
        r"([A-Za-z<.][A-Za-z0-9_.\[\]<>-]*): (?:Invalid value|Required value|Unsupported value|Too long|Too many|Duplicate value|Forbidden|field not declared in schema|expected |duplicate entries)",
    )
    .unwrap();
    pattern
        .captures_iter(&error.to_string())
        .map(|c| c[1].trim_start_matches('.').to_string())
        .collect()
}

async fn run_cases<B: ClusterBackend>(backend: &B, ns: &str) -> Vec<(String, Outcome)> {
    let mut outcomes = Vec::new();
    for case in cases() {
        let name = format!("w-{}", case.name);
        let key = ObjectKey::new(widget_kind(), Some(ns), &name);
        for (i, (write, _)) in case.writes.iter().enumerate() {
            let result = match write {
                Write::Spec(spec) => {
                    let object = json!({"apiVersion": "parity.example.com/v1", "kind": "Widget",
                        "metadata": {"name": name, "namespace": ns}, "spec": spec});
                    backend.apply(object, "kubectl", true).await
                }
                Write::Status(status) => {
                    backend
                        .apply_status(&key, status.clone(), "widget-plugin", None)
                        .await
                }
            };
            let outcome = match result {
                Ok(_) => {
                    let stored = backend.get(&key).await.unwrap().expect("stored");
                    Outcome::Stored {
                        spec: stored["spec"].clone(),
                        status: stored.get("status").cloned().unwrap_or(Value::Null),
                    }
                }
                Err(e) => Outcome::Refused(refused_fields(&e)),
            };
            outcomes.push((format!("{} write {}", case.name, i + 1), outcome));
        }
    }
    outcomes
}

/// Checks every outcome against the verdict written in [`cases`].
fn assert_verdicts(outcomes: &[(String, Outcome)]) {
    let verdicts = cases()
        .into_iter()
        .flat_map(|c| c.writes.into_iter().map(|(_, verdict)| verdict));
    for ((write, outcome), verdict) in outcomes.iter().zip(verdicts) {
        match (verdict, outcome) {
            (Verdict::Stored, Outcome::Stored { .. }) => {}
            (Verdict::Refused(fields), Outcome::Refused(named)) => {
                let expected: BTreeSet<String> = fields.iter().map(|f| f.to_string()).collect();
                assert_eq!(named, &expected, "{write}: the refusal names other fields");
            }
            (_, outcome) => panic!("{write}: unexpected outcome {outcome:?}"),
        }
    }
}

fn stored<'a>(outcomes: &'a [(String, Outcome)], write: &str) -> &'a Value {
    match outcomes.iter().find(|(w, _)| w == write) {
        Some((_, Outcome::Stored { spec, .. })) => spec,
        other => panic!("{write} was not stored: {other:?}"),
    }
}

async fn embedded_outcomes() -> Vec<(String, Outcome)> {
    let cluster = EmbeddedCluster::new(Arc::new(RealClock));
    let crd: Value = serde_yaml_ng::from_str(CRD).unwrap();
    cluster.apply_as_user(crd).unwrap();
    run_cases(&cluster, "parity").await
}

#[tokio::test]
async fn the_embedded_cluster_checks_custom_resources_against_their_schema() {
    let outcomes = embedded_outcomes().await;
    assert_verdicts(&outcomes);
    assert_eq!(
        stored(&outcomes, "defaults write 1"),
        &json!({"size": 1, "color": "red", "enabled": true, "limits": {"cpu": 1, "memory": 64}}),
        "defaults fill missing fields, and a defaulted object gets its own defaults"
    );
    assert_eq!(
        stored(&outcomes, "nested-default write 1")["limits"],
        json!({"memory": 64}),
        "a given object is not replaced by its default, but gets its fields' defaults"
    );
    assert_eq!(
        stored(&outcomes, "preserved-and-int-or-string write 1")["free"],
        json!({"any": {"thing": 1}})
    );
}

#[tokio::test]
async fn a_schema_with_a_rule_that_does_not_compile_is_refused_with_its_crd() {
    let cluster = EmbeddedCluster::new(Arc::new(RealClock));
    let mut crd: Value = serde_yaml_ng::from_str(CRD).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"]
        [0]["rule"] = json!("self.size <=");
    let err = cluster.apply_as_user(crd).unwrap_err().to_string();
    assert!(
        err.contains("x-kubernetes-validations[0].rule") && err.contains("compilation failed"),
        "{err}"
    );
    // Not learned: Widgets are not checked against a schema never stored.
    let widget = json!({"apiVersion": "parity.example.com/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default"}, "spec": {"anything": true}});
    cluster.apply_as_user(widget).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_api_server_stores_and_refuses_the_same() {
    let why = match (std::env::var("RECONCILER_E2E"), std::env::var("KUBECONFIG")) {
        (Ok(e2e), Ok(config)) if e2e == "1" && !config.is_empty() => None,
        _ => Some("RECONCILER_E2E=1 and KUBECONFIG are not both set"),
    };
    if let Some(why) = why {
        let _ = writeln!(
            std::io::stderr(),
            "schema_parity: SKIPPED a_real_api_server_stores_and_refuses_the_same: {why}. To run it: \
             RECONCILER_E2E=1 KUBECONFIG=~/.kube/config cargo test -p reconciler-tests --test schema_parity"
        );
        return;
    }
    let client = kube::Client::try_default()
        .await
        .expect("a Kubernetes client from KUBECONFIG");
    let backend = KubernetesBackend::new(client);
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    let ns = format!("schema-parity-{millis}");
    let ns_key = ObjectKey::new(KindRef::new("", "v1", "Namespace"), None, &ns);
    backend
        .apply(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns,
                "labels": {"app.kubernetes.io/created-by": "reconciler-host-e2e-test"}}}),
            "test",
            true,
        )
        .await
        .expect("create the test namespace");
    let crd: Value = serde_yaml_ng::from_str(CRD).unwrap();
    backend
        .apply(crd, "test", true)
        .await
        .expect("install the Widget CRD");
    // The kind is served once the CRD is established.
    let probe = ObjectKey::new(widget_kind(), Some(&ns), "probe");
    let mut served = false;
    for _ in 0..60 {
        if backend.get(&probe).await.is_ok() {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(served, "the Widget CRD was not served within 30 s");

    let real = run_cases(&backend, &ns).await;
    let _ = backend.delete(&ns_key, Propagation::Background, None).await;
    assert_verdicts(&real);
    let embedded = embedded_outcomes().await;
    for ((write, real), (_, embedded)) in real.iter().zip(&embedded) {
        assert_eq!(
            embedded, real,
            "{write}: the embedded cluster (left) and the API server (right) differ"
        );
    }
}
