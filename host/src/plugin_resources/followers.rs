//! One follower per Plugin and per `--plugin` reference: started when a
//! Plugin appears, told when its spec changes, stopped when it goes.
//!
//! The cluster's Plugins are followed with
//! [`relist_watch`](crate::cluster::kubernetes::relist_watch): a relist
//! after a break in the watch also stops the followers of Plugins deleted
//! meanwhile. References never change and are never stopped.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::DynamicObject;
use kube::runtime::watcher;
use tokio::sync::watch;

use super::canary::CanaryRecord;
use super::follower::{Desired, Follower};
use super::kind::{GROUP, KIND, VERSION};
use super::shared::Shared;
use super::spec::{PluginSpec, RolloutMode, ValidSpec};
use crate::cluster::kubernetes::relist_watch::{Change, relist_watch};
use crate::registry::{PluginReference, TrustPolicy};

/// Follows `references` (`--plugin`) and, when `watch_resources` is
/// `Some(selector)`, the cluster's Plugins (those `selector` matches),
/// until the task is dropped.
pub async fn follow(
    shared: Arc<Shared>,
    references: Vec<PluginReference>,
    verify_keys: TrustPolicy,
    watch_resources: Option<Option<String>>,
) {
    let mut followers = Followers {
        shared: shared.clone(),
        by_name: BTreeMap::new(),
        candidates: BTreeMap::new(),
        tasks: tokio::task::JoinSet::new(),
    };
    for reference in references {
        followers.follow_reference(reference, &verify_keys);
    }
    let Some(selector) = watch_resources else {
        let Followers {
            by_name,
            candidates,
            tasks,
            ..
        } = followers;
        drop(candidates);
        tasks.join_all().await;
        drop(by_name);
        return;
    };
    let mut config = watcher::Config::default();
    if let Some(selector) = &selector {
        config = config.labels(selector);
    }
    let warn = |e: &watcher::Error| {
        tracing::warn!(
            "cannot watch Plugins ({e}); install the CRD (kubectl apply -f crds/plugin.yaml) and RBAC to manage plugins as resources; retrying"
        );
    };
    relist_watch(shared.api.clone(), config, warn, |change| match change {
        Change::Relisted(objects) => followers.relisted(&objects),
        Change::Applied(object) => followers.applied(&object),
        Change::Deleted(object) => followers.deleted(&object),
    })
    .await;
}

/// The running followers and what each was last told.
struct Followers {
    shared: Arc<Shared>,
    /// By Plugin name; a `--plugin` reference's key starts with `\0`, which
    /// no Plugin's name does.
    by_name: BTreeMap<String, watch::Sender<Option<Desired>>>,
    /// The followers of Plugins' `spec.rollout.candidate`, by Plugin name.
    candidates: BTreeMap<String, watch::Sender<Option<Desired>>>,
    tasks: tokio::task::JoinSet<()>,
}

impl Followers {
    fn follow_reference(&mut self, reference: PluginReference, verify_keys: &TrustPolicy) {
        let (tx, rx) = watch::channel(Some(Desired {
            generation: 0,
            spec: Ok(ValidSpec {
                reference: reference.clone(),
                interval: None,
                rollout: None,
                raw: PluginSpec {
                    source: reference.to_string(),
                    ..PluginSpec::default()
                },
            }),
            object: None,
            canary: None,
            observed_canary: None,
            // With --require-signatures the host's policy, read afresh at
            // every attempt, is the one these references meet.
            policy: self.shared.required.is_none().then(|| verify_keys.clone()),
        }));
        let follower = Follower::new(
            self.shared.clone(),
            format!("ref-{}", reference.file_stem()),
            reference.to_string(),
        );
        self.tasks.spawn(follower.run(rx));
        // Never changes; kept so the follower's feed stays open.
        self.by_name.insert(format!("\0{reference}"), tx);
    }

    /// Every Plugin there is: each is followed as if applied, and those
    /// deleted while the watch was down are stopped.
    fn relisted(&mut self, objects: &[DynamicObject]) {
        let mut seen = Vec::new();
        for object in objects {
            if let Some(name) = &object.metadata.name {
                seen.push(name.clone());
                self.applied(object);
            }
        }
        let gone: Vec<String> = self
            .by_name
            .keys()
            .filter(|n| !n.starts_with('\0') && !seen.contains(n))
            .cloned()
            .collect();
        for name in gone {
            if let Some(tx) = self.by_name.remove(&name) {
                let _ = tx.send(None);
            }
            self.follow_candidate(&name, None);
        }
    }

    /// A Plugin was created or changed: its follower is started, or told
    /// when its generation or spec differs from what it follows.
    fn applied(&mut self, object: &DynamicObject) {
        let Some(name) = object.metadata.name.clone() else {
            return;
        };
        let desired = desired_of(object);
        self.follow_candidate(&name, candidate_of(&desired));
        match self.by_name.get(&name) {
            Some(tx) => {
                let generation = desired.generation;
                if tell_if_changed(tx, desired) {
                    tracing::info!("Plugin {name} changed (generation {generation})");
                }
            }
            None => {
                tracing::info!("Plugin {name}: following its source");
                let (tx, rx) = watch::channel(Some(desired));
                let follower = Follower::new(
                    self.shared.clone(),
                    format!("plugin-{name}"),
                    format!("Plugin {name}"),
                );
                self.tasks.spawn(follower.run(rx));
                self.by_name.insert(name, tx);
            }
        }
    }

    fn deleted(&mut self, object: &DynamicObject) {
        if let Some(name) = &object.metadata.name
            && let Some(tx) = self.by_name.remove(name)
        {
            tracing::info!("Plugin {name} deleted");
            let _ = tx.send(None);
        }
        if let Some(name) = &object.metadata.name {
            self.follow_candidate(name, None);
        }
    }

    /// Follows Plugin `name`'s candidate as `desired` says: started, told
    /// of a change, or stopped (`None`: no rollout, or the Plugin is gone).
    fn follow_candidate(&mut self, name: &str, desired: Option<Desired>) {
        match (self.candidates.get(name), desired) {
            (Some(tx), Some(desired)) => {
                tell_if_changed(tx, desired);
            }
            (Some(_), None) => {
                if let Some(tx) = self.candidates.remove(name) {
                    let _ = tx.send(None);
                }
            }
            (None, Some(desired)) => {
                tracing::info!("Plugin {name}: following its candidate (spec.rollout)");
                let (tx, rx) = watch::channel(Some(desired));
                let follower = Follower::candidate(
                    self.shared.clone(),
                    format!("plugin-{name}.candidate"),
                    format!("Plugin {name} candidate"),
                );
                self.tasks.spawn(follower.run(rx));
                self.candidates.insert(name.to_string(), tx);
            }
            (None, None) => {}
        }
    }
}

/// Tells a follower `desired` when its generation, spec or rollout plan
/// differs from what it follows; whether it did. The rollout's observed
/// state is kept current either way, without waking the follower.
fn tell_if_changed(tx: &watch::Sender<Option<Desired>>, desired: Desired) -> bool {
    let same = tx.borrow().as_ref().is_some_and(|d| {
        d.generation == desired.generation
            && d.spec.as_ref().ok() == desired.spec.as_ref().ok()
            && d.canary == desired.canary
    });
    match same {
        true => {
            tx.send_if_modified(|held| {
                if let Some(held) = held {
                    held.observed_canary = desired.observed_canary;
                }
                false
            });
        }
        false => {
            let _ = tx.send(Some(desired));
        }
    }
    !same
}

/// What a Plugin's candidate follower follows: its `spec.rollout`, with the
/// spec's trust and access, and the canary's plan when it is one; `None`
/// without a rollout or a valid spec.
fn candidate_of(desired: &Desired) -> Option<Desired> {
    let valid = desired.spec.as_ref().ok()?;
    let spec = valid.candidate()?;
    let canary = match valid.rollout.as_ref().map(|r| &r.mode) {
        Some(RolloutMode::Canary(plan)) => Some(plan.clone()),
        _ => None,
    };
    Some(Desired {
        spec: Ok(spec),
        canary,
        ..desired.clone()
    })
}

fn desired_of(object: &DynamicObject) -> Desired {
    let spec = object
        .data
        .get("spec")
        .cloned()
        .ok_or_else(|| "the Plugin has no spec".to_string())
        .and_then(|v| serde_json::from_value::<PluginSpec>(v).map_err(|e| format!("spec: {e}")))
        .and_then(PluginSpec::validate);
    Desired {
        generation: object.metadata.generation.unwrap_or(0),
        spec,
        object: Some(ObjectReference {
            api_version: Some(format!("{GROUP}/{VERSION}")),
            kind: Some(KIND.into()),
            name: object.metadata.name.clone(),
            uid: object.metadata.uid.clone(),
            resource_version: object.metadata.resource_version.clone(),
            ..ObjectReference::default()
        }),
        policy: None,
        canary: None,
        observed_canary: object.data.get("status").and_then(CanaryRecord::of_status),
    }
}
