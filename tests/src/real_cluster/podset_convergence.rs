//! Whether every PodSet of a test's namespace has converged: the check
//! of the suites that kill, restart or shard hosts in the middle of a
//! burst and judge only by what the cluster holds afterwards.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result, ensure};
use kube::api::ListParams;
use reconciler_sdk::KindRef;
use serde_json::Value;

use super::{RealCluster, owner_references, uid_of};

/// The example PodSet kind.
pub fn podsets() -> KindRef {
    KindRef::new("example.com", "v1alpha1", "PodSet")
}

pub fn deployments() -> KindRef {
    KindRef::new("apps", "v1", "Deployment")
}

fn pods() -> KindRef {
    KindRef::new("", "v1", "Pod")
}

/// What keeps the test's PodSets from having converged (the first thing found and
/// how many PodSets it concerns), or `None` once every PodSet has exactly
/// its Deployment, controlled by it alone, of its size, and a status that
/// lists exactly its pods.
pub async fn problem(cx: &RealCluster, expected: usize) -> Result<Option<String>> {
    let list = async |kind: &KindRef| -> Result<Vec<Value>> {
        let listed = cx.api(kind).await?.list(&ListParams::default()).await?;
        listed
            .items
            .into_iter()
            .map(|o| serde_json::to_value(o).context("an object as JSON"))
            .collect()
    };
    let name_of = |o: &Value| o["metadata"]["name"].as_str().unwrap_or("").to_string();
    let podsets: BTreeMap<String, Value> = list(&podsets())
        .await?
        .into_iter()
        .map(|o| (name_of(&o), o))
        .collect();
    let deployments: BTreeMap<String, Value> = list(&deployments())
        .await?
        .into_iter()
        .map(|o| (name_of(&o), o))
        .collect();
    let mut pods_of: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for pod in list(&pods()).await? {
        if let Some(owner) = pod["metadata"]["labels"]["podset"].as_str() {
            pods_of
                .entry(owner.to_string())
                .or_default()
                .push(name_of(&pod));
        }
    }
    ensure!(
        podsets.len() == expected,
        "{} PodSets in the namespace, the test created {expected}",
        podsets.len()
    );
    // A Deployment of no PodSet is an orphan (or a duplicate under
    // another name); nothing but the host creates Deployments here.
    let strays: Vec<&String> = deployments
        .keys()
        .filter(|d| !podsets.contains_key(*d))
        .collect();
    ensure!(strays.is_empty(), "Deployments of no PodSet: {strays:?}");

    let mut problems: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (name, podset) in &podsets {
        let uid = uid_of(podset)?;
        let size = podset["spec"]["size"].as_i64().unwrap_or(-1);
        let Some(deployment) = deployments.get(name) else {
            problems
                .entry("no Deployment".to_string())
                .or_default()
                .push(name);
            continue;
        };
        let owners = owner_references(deployment)?;
        // The API server refuses two controllers; a second, non-controller
        // owner or a reference to an old uid would still be wrong.
        ensure!(
            owners.len() == 1
                && owners[0].controller == Some(true)
                && owners[0].kind == "PodSet"
                && owners[0].name == *name
                && owners[0].uid == uid,
            "Deployment {name} has the owner references {owners:?}, expected one controller \
             reference to PodSet {name} (uid {uid})"
        );
        if deployment["spec"]["replicas"].as_i64() != Some(size) {
            problems
                .entry("spec.replicas is not the PodSet's size".to_string())
                .or_default()
                .push(name);
            continue;
        }
        let mut pods = pods_of.get(name.as_str()).cloned().unwrap_or_default();
        pods.sort();
        if pods.len() != usize::try_from(size).unwrap_or(usize::MAX) {
            problems
                .entry("not (yet) as many pods as its size".to_string())
                .or_default()
                .push(name);
            continue;
        }
        let listed: Option<Vec<String>> =
            serde_json::from_value(podset["status"]["podNames"].clone()).ok();
        if listed.as_ref() != Some(&pods) {
            problems
                .entry("status.podNames is not the list of its pods".to_string())
                .or_default()
                .push(name);
        }
    }
    if problems.is_empty() {
        return Ok(None);
    }
    let seen: Vec<String> = problems
        .into_iter()
        .map(|(problem, names)| {
            format!(
                "{problem}: {} PodSets, such as {}",
                names.len(),
                names.iter().take(3).copied().collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    Ok(Some(seen.join("; ")))
}
