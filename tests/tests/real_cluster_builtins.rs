//! The embedded cluster's built-in controllers against kube-controller-
//! manager: the same examples (a PodSet's Deployment, a KubernetesCluster's
//! Job) on a real control plane and in `simulate`, and the objects the
//! controllers make compared by shape: the same labels, annotations,
//! ownerReferences and finalizers, the same status fields with the same
//! counts, reasons and messages. Names, uids, times and the
//! pod-template-hash (the real one hashes Go's printing of the template)
//! are compared by form only. So the embedded cluster cannot drift from a
//! real one unnoticed.
//!
//! Skipped (passing, with a SKIPPED line) unless `RECONCILER_E2E=1` and
//! `KUBECONFIG` are set:
//!
//! ```text
//! scripts/build-plugins
//! eval "$(../shared/kube/kube up)"
//! RECONCILER_E2E=1 cargo test -p reconciler-tests --test real_cluster_builtins -- --nocapture
//! ```
//!
//! No kubelet runs there: Pods stay Pending, so the embedded side starts
//! none either, and the test plays the kubelet's verdict on the Job's Pod.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, ensure};
use reconciler_host::cluster::embedded::builtins::BuiltinConfig;
use reconciler_host::process::simulate::{SimulationConfig, simulate};
use reconciler_sdk::KindRef;
use reconciler_tests::real_cluster::{Probe, RealCluster, Suite};
use reconciler_tests::{example_plugin, load, root};
use serde_json::{Value, json};

const SUITE: Suite = Suite {
    name: "real_cluster_builtins",
    host_binary: env!("CARGO_BIN_EXE_reconciler-host-under-test"),
};

const TIMEOUT: Duration = Duration::from_secs(90);
/// How long the embedded Job runs (the real one ends when the test says).
const JOB_DURATION: Duration = Duration::from_secs(30);

fn kind(group: &str, kind: &str) -> KindRef {
    let version = if group == "example.com" {
        "v1alpha1"
    } else {
        "v1"
    };
    KindRef::new(group, version, kind)
}

fn podset() -> Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": "example"}, "spec": {"size": 2}})
}

fn kubernetes_cluster() -> Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "KubernetesCluster",
        "metadata": {"name": "prod", "annotations": {"app.kubernetes.io/operation": "creating"}},
        "spec": {"masters": 3, "workers": 2, "version": "1.33"}})
}

/// The form of a value that differs between clusters by nature.
fn form(text: &str, hash: &str) -> String {
    let is_time = text.len() == 20 && text.ends_with('Z') && text.as_bytes().get(10) == Some(&b'T');
    let is_uid = text.len() == 36 && text.matches('-').count() == 4;
    if is_time {
        "<time>".into()
    } else if is_uid {
        "<uid>".into()
    } else if !hash.is_empty() {
        text.replace(hash, "<hash>")
    } else {
        text.into()
    }
}

/// Every leaf under `value` as `path=form`, arrays by index.
fn leaves(prefix: &str, value: &Value, hash: &str, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            if map.is_empty() {
                out.insert(format!("{prefix}={{}}"));
            }
            for (k, v) in map {
                leaves(&format!("{prefix}.{k}"), v, hash, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                leaves(&format!("{prefix}[{i}]"), v, hash, out);
            }
        }
        Value::String(s) => {
            out.insert(format!("{prefix}={}", form(s, hash)));
        }
        other => {
            out.insert(format!("{prefix}={other}"));
        }
    }
}

fn template_hash(object: &Value) -> &str {
    object
        .pointer("/metadata/labels/pod-template-hash")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// What a controller decides about an object: its labels, annotations,
/// ownerReferences, finalizers, generateName and status, in normal form;
/// `hash` is the pod-template-hash its text may contain.
fn shape(object: &Value, hash: &str) -> BTreeSet<String> {
    // A Pod carries its ReplicaSet's hash in its name, which is random.
    let generated = object
        .pointer("/metadata/generateName")
        .and_then(Value::as_str);
    let mut out = BTreeSet::new();
    for field in [
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "generateName",
    ] {
        if let Some(value) = object.pointer(&format!("/metadata/{field}")) {
            leaves(&format!("metadata.{field}"), value, hash, &mut out);
        }
    }
    if let Some(prefix) = generated {
        let name = object["metadata"]["name"].as_str().unwrap_or("");
        let suffix = name.strip_prefix(prefix).unwrap_or("");
        out.insert(format!("metadata.name=generateName+{} chars", suffix.len()));
    }
    if let Some(status) = object.get("status") {
        leaves("status", status, hash, &mut out);
    }
    out
}

fn compare(what: &str, real: &Value, embedded: &Value) -> Result<()> {
    compare_with_hashes(
        what,
        (real, template_hash(real)),
        (embedded, template_hash(embedded)),
    )
}

/// [`compare`] for an object that mentions a ReplicaSet's hash without
/// carrying it as a label (a Deployment's status message).
fn compare_with_hashes(what: &str, real: (&Value, &str), embedded: (&Value, &str)) -> Result<()> {
    let (real, embedded) = (shape(real.0, real.1), shape(embedded.0, embedded.1));
    let only_real: Vec<&String> = real.difference(&embedded).collect();
    let only_embedded: Vec<&String> = embedded.difference(&real).collect();
    ensure!(
        only_real.is_empty() && only_embedded.is_empty(),
        "{what} differs between kube-controller-manager and the embedded cluster:\n  only real: {only_real:#?}\n  only embedded: {only_embedded:#?}"
    );
    Ok(())
}

/// The example objects in `simulate` with the built-ins on (Pods never
/// start, as without a kubelet), after `advance`.
async fn embedded(advance: Duration) -> Vec<Value> {
    let plugins = ["podset", "kubernetescluster"]
        .iter()
        .map(|p| Arc::new(load(&example_plugin(p))))
        .collect();
    let mut objects = reconciler_host::process::manifests::read_crds(&root().join("crds")).unwrap();
    objects.extend([podset(), kubernetes_cluster()]);
    let config = SimulationConfig {
        advance,
        builtins: Some(BuiltinConfig {
            pod_start_delay: Duration::from_secs(24 * 3600),
            job_duration: JOB_DURATION,
            failing_jobs: None,
        }),
        ..SimulationConfig::default()
    };
    let (report, _) = simulate(plugins, objects, &config).await.unwrap();
    assert!(report.unsettled.is_none(), "{:?}", report.unsettled);
    report.objects()
}

fn find<'a>(objects: &'a [Value], kind: &str, name_prefix: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| {
            o["kind"] == kind
                && o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(name_prefix))
        })
        .unwrap_or_else(|| panic!("no {kind} {name_prefix}* in the simulation"))
}

async fn wait_until(
    cx: &RealCluster,
    what: &str,
    kind: &KindRef,
    selector: &str,
    ready: impl Fn(&[Value]) -> bool,
) -> Result<Vec<Value>> {
    cx.wait_for(what, TIMEOUT, async || {
        let objects = cx.list(kind, selector).await?;
        Ok(if ready(&objects) {
            Probe::Ready(objects)
        } else {
            Probe::Pending(format!("{} object(s)", objects.len()))
        })
    })
    .await
}

#[test]
fn the_built_ins_make_what_kube_controller_manager_makes() {
    SUITE.run(
        "the_built_ins_make_what_kube_controller_manager_makes",
        async |cx| {
            let runtime_embedded_pending = embedded(Duration::ZERO).await;
            let runtime_embedded_done = embedded(JOB_DURATION + Duration::from_secs(1)).await;
            for crd in ["podset.yaml", "kubernetescluster.yaml"] {
                cx.install_crds(&root().join("crds").join(crd)).await?;
            }
            cx.start_host(&[
                example_plugin("podset"),
                example_plugin("kubernetescluster"),
            ])?;
            cx.create(podset()).await?;
            cx.create(kubernetes_cluster()).await?;

            // Deployment -> ReplicaSet -> Pods, all Pending.
            let deployment = &wait_until(
                cx,
                "the Deployment's status to count 2 unavailable replicas",
                &kind("apps", "Deployment"),
                "",
                |d| {
                    d.first().is_some_and(|d| {
                        d["status"]["unavailableReplicas"] == 2
                            && d["status"]["conditions"][1]["reason"] == "ReplicaSetUpdated"
                    })
                },
            )
            .await?[0];
            let replica_set = &wait_until(
                cx,
                "the ReplicaSet's status to count 2 replicas",
                &kind("apps", "ReplicaSet"),
                "",
                |rs| rs.first().is_some_and(|rs| rs["status"]["replicas"] == 2),
            )
            .await?[0];
            let embedded_replica_set = find(&runtime_embedded_pending, "ReplicaSet", "example-");
            compare("the ReplicaSet", replica_set, embedded_replica_set)?;
            compare_with_hashes(
                "the Deployment",
                (deployment, template_hash(replica_set)),
                (
                    find(&runtime_embedded_pending, "Deployment", "example"),
                    template_hash(embedded_replica_set),
                ),
            )?;
            let pods = wait_until(
                cx,
                "the ReplicaSet's 2 Pods",
                &kind("", "Pod"),
                "podset=example",
                |pods| pods.len() == 2,
            )
            .await?;
            compare(
                "a ReplicaSet's Pod",
                &pods[0],
                find(&runtime_embedded_pending, "Pod", "example-"),
            )?;

            // Job -> Pod, running; then its Pod succeeds.
            let job = &wait_until(
                cx,
                "Job prod-creating-1 to count its active Pod",
                &kind("batch", "Job"),
                "",
                |jobs| jobs.first().is_some_and(|j| j["status"]["active"] == 1),
            )
            .await?[0];
            compare(
                "a running Job",
                job,
                find(&runtime_embedded_pending, "Job", "prod-creating-1"),
            )?;
            let job_pod = wait_until(
                cx,
                "the Job's Pod",
                &kind("", "Pod"),
                "job-name=prod-creating-1",
                |pods| pods.len() == 1,
            )
            .await?
            .remove(0);
            let embedded_job_pod = find(&runtime_embedded_pending, "Pod", "prod-creating-1-");
            let metadata_only = |pod: &Value| json!({"metadata": pod["metadata"]});
            compare(
                "a running Job's Pod",
                &metadata_only(&job_pod),
                &metadata_only(embedded_job_pod),
            )?;

            let pod_name = job_pod["metadata"]["name"].as_str().unwrap_or("");
            cx.merge_patch_status(
                &kind("", "Pod"),
                pod_name,
                json!({"status": {"phase": "Succeeded"}}),
            )
            .await?;
            let job = &wait_until(
                cx,
                "Job prod-creating-1 to complete",
                &kind("batch", "Job"),
                "",
                |jobs| jobs.first().is_some_and(|j| j["status"]["succeeded"] == 1),
            )
            .await?[0];
            compare(
                "a completed Job",
                job,
                find(&runtime_embedded_done, "Job", "prod-creating-1"),
            )?;
            let job_pod = wait_until(
                cx,
                "the Job's Pod to lose the tracking finalizer",
                &kind("", "Pod"),
                "job-name=prod-creating-1",
                |pods| pods.len() == 1 && pods[0]["metadata"].get("finalizers").is_none(),
            )
            .await?
            .remove(0);
            compare(
                "a completed Job's Pod",
                &metadata_only(&job_pod),
                &metadata_only(find(&runtime_embedded_done, "Pod", "prod-creating-1-")),
            )?;
            cx.step("the Deployment, ReplicaSet, Pods and Job have the same shapes");
            Ok(())
        },
    );
}
