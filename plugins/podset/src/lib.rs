//! The PodSet operator of the classic kubebuilder tutorial, as a plugin.
//!
//! A PodSet asks for `spec.size` busybox pods. The plugin answers with one
//! owned Deployment of that many replicas and reports the names of the pods
//! that carry its labels in `status.podNames`. Pods are read through the
//! host's cache (metadata only, mapped back by the `podset` label), so a pod
//! appearing or vanishing updates the status. On a host serving several
//! clusters, `status.cluster` names the member cluster the PodSet is in, so
//! statuses gathered from a fleet say where each came from.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use reconciler_sdk::{
    Change, Context, Error, EventType, KindRef, MapRule, Object, PartialObject, PluginMetadata,
    Reconciler, Response, contract::LOCAL_CLUSTER,
};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PodSetSpec {
    /// How many pods to run.
    pub size: i32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSetStatus {
    /// Names of the pods carrying this PodSet's labels, sorted.
    pub pod_names: Vec<String>,
    /// The member cluster, when not the host's own (`local`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
}

pub type PodSet = Object<PodSetSpec, PodSetStatus>;

/// The label that maps a Pod back to its PodSet.
pub const PODSET_LABEL: &str = "podset";

pub struct PodSets;

/// The one field of an observed Deployment this plugin looks at: parsing only
/// it keeps both the reconcile and the compiled plugin small.
#[derive(Deserialize)]
struct ObservedDeployment {
    #[serde(default)]
    spec: ReplicasOnly,
}

#[derive(Default, Deserialize)]
struct ReplicasOnly {
    replicas: Option<i32>,
}

impl Reconciler for PodSets {
    type Primary = PodSet;

    fn metadata() -> PluginMetadata {
        PluginMetadata::new(
            "podset",
            VERSION,
            KindRef::new("example.com", "v1alpha1", "PodSet"),
        )
        .owns(KindRef::of::<Deployment>())
        .reads_in_namespace(
            KindRef::of::<Pod>(),
            MapRule::Label(PODSET_LABEL.into()),
            true,
        )
        // What the decision reads: the PodSet's spec, the Deployment's
        // spec (to put back a size changed by hand), the Pods' names and
        // labels. Status updates of either (the Deployment controller's,
        // our own status writes) change none of it.
        .wake_on(
            KindRef::new("example.com", "v1alpha1", "PodSet"),
            [Change::Generation],
        )
        .wake_on(KindRef::of::<Deployment>(), [Change::Generation])
        .wake_on(KindRef::of::<Pod>(), [Change::Labels])
    }

    fn reconcile(podset: PodSet, ctx: &Context) -> Result<Response, Error> {
        if ctx.deleting() {
            // The Deployment is garbage-collected through its ownerReference.
            return Ok(Response::new());
        }
        let name = podset.name();
        let namespace = podset.namespace();
        let size = podset.spec.size;
        if size < 0 {
            return Err(Error::msg(format!(
                "spec.size must be 0 or more, got {size}"
            )));
        }

        let labels = pod_labels(name);
        let selector = labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut pod_names: Vec<String> = ctx
            .list_as::<PartialObject>(&KindRef::of::<Pod>(), namespace, &selector)?
            .into_iter()
            .map(|pod| pod.name().to_string())
            .collect();
        pod_names.sort();

        let mut response = Response::new().apply(&deployment(name, namespace, size, labels))?;
        let observed: Option<i32> = ctx
            .children_of_kind::<ObservedDeployment>(&KindRef::of::<Deployment>())?
            .first()
            .map(|d| d.spec.replicas.unwrap_or(1));
        match observed {
            None => {
                response = response.event(
                    EventType::Normal,
                    "Created",
                    format!("Deployment {name} with {size} replicas"),
                )
            }
            Some(replicas) if replicas != size => {
                response = response.event(
                    EventType::Normal,
                    "Scaled",
                    format!("Deployment {name} from {replicas} to {size} replicas"),
                )
            }
            Some(_) => {}
        }
        let cluster = Some(ctx.cluster().name).filter(|name| name != LOCAL_CLUSTER);
        response.status(&PodSetStatus { pod_names, cluster })
    }
}

reconciler_sdk::export_plugin!(PodSets);

fn pod_labels(podset: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app".to_string(), "podset".to_string()),
        (PODSET_LABEL.to_string(), podset.to_string()),
    ])
}

fn deployment(
    name: &str,
    namespace: Option<&str>,
    size: i32,
    labels: BTreeMap<String, String>,
) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: namespace.map(str::to_string),
            labels: Some(labels.clone()),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(size),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    annotations: template_annotations(),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "busybox".into(),
                        image: Some("busybox:1.36".into()),
                        command: Some(vec!["sleep".into(), "3600".into()]),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The version `metadata()` reports.
#[cfg(not(feature = "test-v2"))]
const VERSION: &str = env!("CARGO_PKG_VERSION");

#[cfg(not(feature = "test-v2"))]
fn template_annotations() -> Option<BTreeMap<String, String>> {
    None
}

/// A second version for the hot-reload tests (`--features test-v2`, built by
/// scripts/build-plugins to target/test-plugins/podset-v2.wasm): it reports
/// 0.2.0 and marks each Deployment's pod template, so a test sees which
/// version last applied it.
#[cfg(feature = "test-v2")]
const VERSION: &str = "0.2.0";

/// The pod template annotation of the test-v2 build.
#[cfg(feature = "test-v2")]
pub const TEST_V2_ANNOTATION: &str = "podset.example.com/build";

#[cfg(feature = "test-v2")]
fn template_annotations() -> Option<BTreeMap<String, String>> {
    Some(BTreeMap::from([(
        TEST_V2_ANNOTATION.to_string(),
        "test-v2".to_string(),
    )]))
}
