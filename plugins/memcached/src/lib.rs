//! The Memcached operator of the operator-sdk tutorial, as a plugin.
//!
//! A Memcached asks for `spec.size` memcached servers. The plugin answers
//! with one owned Deployment of that many replicas and reports the names of
//! the pods carrying its labels in `status.nodes`. Pods are read through the
//! host's cache (metadata only, mapped back by the `memcached` label), so a
//! pod appearing or vanishing updates the status.
//!
//! Right after it creates or resizes the Deployment, the plugin asks to be
//! reconciled again a minute later: pods come and go while a Deployment
//! rolls, and the requeue makes sure `status.nodes` catches up even if a pod
//! event is missed.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, ContainerPort, Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use reconciler_sdk::{
    Change, Context, Error, EventType, KindRef, MapRule, Object, PartialObject, PluginMetadata,
    Reconciler, Response,
};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemcachedSpec {
    /// How many memcached servers to run.
    pub size: i32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemcachedStatus {
    /// Names of the pods carrying this Memcached's labels, sorted.
    pub nodes: Vec<String>,
}

pub type Memcached = Object<MemcachedSpec, MemcachedStatus>;

/// The label that maps a Pod back to its Memcached.
pub const MEMCACHED_LABEL: &str = "memcached";

/// The image and arguments of the tutorial.
pub const IMAGE: &str = "memcached:1.6-alpine";
pub const ARGS: [&str; 4] = ["-m=64", "-o", "modern", "-v"];
pub const PORT: i32 = 11211;

/// How long to wait before looking again after the Deployment changed size.
pub const RESIZE_REQUEUE: Duration = Duration::from_secs(60);

pub struct Memcacheds;

/// The one field of an observed Deployment this plugin looks at.
#[derive(Deserialize)]
struct ObservedDeployment {
    #[serde(default)]
    spec: ReplicasOnly,
}

#[derive(Default, Deserialize)]
struct ReplicasOnly {
    replicas: Option<i32>,
}

impl Reconciler for Memcacheds {
    type Primary = Memcached;

    fn metadata() -> PluginMetadata {
        PluginMetadata::new(
            "memcached",
            env!("CARGO_PKG_VERSION"),
            KindRef::new("example.com", "v1alpha1", "Memcached"),
        )
        .owns(KindRef::of::<Deployment>())
        .reads_in_namespace(
            KindRef::of::<Pod>(),
            MapRule::Label(MEMCACHED_LABEL.into()),
            true,
        )
        // The decision reads the Memcached's spec, the Deployment's
        // replicas and the Pods' names and labels: status updates wake
        // nothing.
        .wake_on(
            KindRef::new("example.com", "v1alpha1", "Memcached"),
            [Change::Generation],
        )
        .wake_on(KindRef::of::<Deployment>(), [Change::Generation])
        .wake_on(KindRef::of::<Pod>(), [Change::Labels])
    }

    fn reconcile(memcached: Memcached, ctx: &Context) -> Result<Response, Error> {
        if ctx.deleting() {
            // The Deployment is garbage-collected through its ownerReference.
            return Ok(Response::new());
        }
        let name = memcached.name();
        let namespace = memcached.namespace();
        let size = memcached.spec.size;
        if size < 0 {
            // The CRD's schema refuses this; say so clearly if it is missing.
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
        let mut nodes: Vec<String> = ctx
            .list_as::<PartialObject>(&KindRef::of::<Pod>(), namespace, &selector)?
            .into_iter()
            .map(|pod| pod.name().to_string())
            .collect();
        nodes.sort();

        let mut response = Response::new().apply(&deployment(name, namespace, size, labels))?;
        let observed: Option<i32> = ctx
            .children_of_kind::<ObservedDeployment>(&KindRef::of::<Deployment>())?
            .first()
            .map(|d| d.spec.replicas.unwrap_or(1));
        match observed {
            None => {
                response = response
                    .event(
                        EventType::Normal,
                        "Created",
                        format!("Deployment {name} with {size} replicas"),
                    )
                    .requeue_after(RESIZE_REQUEUE)
            }
            Some(replicas) if replicas != size => {
                response = response
                    .event(
                        EventType::Normal,
                        "Resized",
                        format!("Deployment {name} from {replicas} to {size} replicas"),
                    )
                    .requeue_after(RESIZE_REQUEUE)
            }
            Some(_) => {}
        }
        response.status(&MemcachedStatus { nodes })
    }
}

reconciler_sdk::export_plugin!(Memcacheds);

fn pod_labels(memcached: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "app.kubernetes.io/name".to_string(),
            "memcached".to_string(),
        ),
        (MEMCACHED_LABEL.to_string(), memcached.to_string()),
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
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "memcached".into(),
                        image: Some(IMAGE.into()),
                        args: Some(ARGS.iter().map(|a| a.to_string()).collect()),
                        ports: Some(vec![ContainerPort {
                            name: Some("memcached".into()),
                            container_port: PORT,
                            ..Default::default()
                        }]),
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
