//! `bench-cluster native-controller`: the baseline of the comparison, a PodSet
//! controller written directly against kube-rs, doing what the podset plugin
//! (plugins/podset/src/lib.rs) does under the host.
//!
//! It is built the way `Controller::run` is built: kube-runtime's `applier`
//! fed by `trigger_self`, `trigger_owners` and `trigger_with`, each reconcile
//! spawned on the runtime, the default `Config` (no bound on concurrent
//! reconciles, no debounce). The `Controller` builder itself would watch the
//! Deployments and Pods but keep no store of them for the reconcile to read
//! (its methods that take a reflected stream instead sit behind kube's
//! unstable features, and enabling a kube feature in one workspace member
//! changes how every member that uses kube is built), so the reconcile would
//! have to list Pods from the API server on every call.
//!
//! Like podset under the host: PodSets and Deployments are watched and cached
//! whole, Pods as metadata only and mapped back by their `podset` label; a
//! reconcile server-side applies the Deployment (forced), writes
//! `status.podNames` through the status subresource, and records a `Created`
//! Event when no Deployment existed (`Scaled` when its size changed).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt, stream};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Config, trigger_owners, trigger_self, trigger_with};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, applier, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

use crate::podset::{API_VERSION, KIND, PODSET_LABEL, PodSet};

/// The field manager of its applies, in the host's style (`reconciler-host/<plugin>`).
pub const FIELD_MANAGER: &str = "bench-native/podset";

struct Ctx {
    client: Client,
    deployments: Store<Deployment>,
    pods: Store<PartialObjectMeta<Pod>>,
    recorder: Recorder,
}

#[derive(Debug)]
enum ReconcileError {
    Kube(kube::Error),
    NegativeSize(i32),
    CacheGone,
    Panicked(String),
}

impl std::fmt::Display for ReconcileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReconcileError::Kube(e) => write!(f, "{e}"),
            ReconcileError::NegativeSize(size) => {
                write!(f, "spec.size must be 0 or more, got {size}")
            }
            ReconcileError::CacheGone => write!(f, "a watch ended; restart the controller"),
            ReconcileError::Panicked(e) => write!(f, "the reconcile task failed: {e}"),
        }
    }
}

impl std::error::Error for ReconcileError {}

impl From<kube::Error> for ReconcileError {
    fn from(e: kube::Error) -> Self {
        ReconcileError::Kube(e)
    }
}

/// Runs until the process is killed (the driver kills it after a side).
pub async fn run() -> anyhow::Result<()> {
    let client = Client::try_default().await?;
    let config = watcher::Config::default();
    let (podsets, podset_writer) = reflector::store::<PodSet>();
    let (deployments, deployment_writer) = reflector::store::<Deployment>();
    let (pods, pod_writer) = reflector::store::<PartialObjectMeta<Pod>>();

    let triggers = stream::select_all([
        trigger_self(
            watcher(Api::<PodSet>::all(client.clone()), config.clone())
                .default_backoff()
                .reflect(podset_writer)
                .applied_objects(),
            (),
        )
        .boxed(),
        trigger_owners(
            watcher(Api::<Deployment>::all(client.clone()), config.clone())
                .default_backoff()
                .reflect(deployment_writer)
                .touched_objects(),
            (),
            (),
        )
        .boxed(),
        trigger_with(
            // Metadata-only: kube sends metadata requests for `PartialObjectMeta`.
            watcher(Api::<PartialObjectMeta<Pod>>::all(client.clone()), config)
                .default_backoff()
                .reflect(pod_writer)
                .touched_objects(),
            podset_of_pod,
        )
        .boxed(),
    ]);

    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: FIELD_MANAGER.into(),
            instance: None,
        },
    );
    let ctx = Arc::new(Ctx {
        client,
        deployments,
        pods,
        recorder,
    });
    eprintln!("native-controller: watching PodSets, Deployments and Pods");
    applier(
        // Spawned, as `Controller::run` does, so reconciles use every core.
        |podset, ctx| {
            tokio::spawn(reconcile(podset, ctx)).map(|joined| {
                joined.unwrap_or_else(|e| Err(ReconcileError::Panicked(e.to_string())))
            })
        },
        error_policy,
        ctx,
        podsets,
        triggers,
        Config::default(),
    )
    .for_each(|result| {
        if let Err(e) = result {
            eprintln!("native-controller: {e}");
        }
        futures::future::ready(())
    })
    .await;
    Ok(())
}

fn podset_of_pod(pod: PartialObjectMeta<Pod>) -> Option<ObjectRef<PodSet>> {
    let podset = pod.labels().get(PODSET_LABEL)?;
    Some(ObjectRef::new(podset).within(pod.metadata.namespace.as_deref()?))
}

fn error_policy(podset: Arc<PodSet>, error: &ReconcileError, _: Arc<Ctx>) -> Action {
    eprintln!(
        "native-controller: PodSet {}/{}: {error}",
        podset.namespace().unwrap_or_default(),
        podset.name_any()
    );
    Action::requeue(Duration::from_secs(5))
}

async fn reconcile(podset: Arc<PodSet>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let (Some(name), Some(namespace)) = (
        podset.metadata.name.as_deref(),
        podset.metadata.namespace.as_deref(),
    ) else {
        return Ok(Action::await_change());
    };
    if podset.metadata.deletion_timestamp.is_some() {
        // The Deployment is garbage-collected through its ownerReference.
        return Ok(Action::await_change());
    }
    let size = podset.spec.size;
    if size < 0 {
        return Err(ReconcileError::NegativeSize(size));
    }
    // As the host does before a plugin's first reconcile: decide only on
    // filled caches.
    ctx.deployments
        .wait_until_ready()
        .await
        .map_err(|_| ReconcileError::CacheGone)?;
    ctx.pods
        .wait_until_ready()
        .await
        .map_err(|_| ReconcileError::CacheGone)?;

    let labels = pod_labels(name);
    let mut pod_names: Vec<String> = ctx
        .pods
        .state()
        .iter()
        .filter(|pod| {
            pod.metadata.namespace.as_deref() == Some(namespace)
                && labels.iter().all(|(k, v)| pod.labels().get(k) == Some(v))
        })
        .map(|pod| pod.name_any())
        .collect();
    pod_names.sort();
    let observed = ctx
        .deployments
        .get(&ObjectRef::new(name).within(namespace))
        .map(|d| d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1));

    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut wanted = deployment(name, namespace, size, labels);
    wanted.metadata.owner_references = podset.controller_owner_ref(&()).map(|o| vec![o]);
    Api::<Deployment>::namespaced(ctx.client.clone(), namespace)
        .patch(name, &params, &Patch::Apply(&wanted))
        .await?;
    let status = json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "status": { "podNames": pod_names },
    });
    Api::<PodSet>::namespaced(ctx.client.clone(), namespace)
        .patch_status(name, &params, &Patch::Apply(&status))
        .await?;

    let event = match observed {
        None => Some(("Created", format!("Deployment {name} with {size} replicas"))),
        Some(replicas) if replicas != size => Some((
            "Scaled",
            format!("Deployment {name} from {replicas} to {size} replicas"),
        )),
        Some(_) => None,
    };
    if let Some((reason, note)) = event {
        let event = Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(note),
            action: "Reconcile".into(),
            secondary: None,
        };
        ctx.recorder
            .publish(&event, &podset.object_ref(&()))
            .await?;
    }
    Ok(Action::await_change())
}

fn pod_labels(podset: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app".to_string(), "podset".to_string()),
        (PODSET_LABEL.to_string(), podset.to_string()),
    ])
}

/// The Deployment podset asks for, field for field.
fn deployment(
    name: &str,
    namespace: &str,
    size: i32,
    labels: BTreeMap<String, String>,
) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
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
