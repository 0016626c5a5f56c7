//! Plugins as cluster resources: `kubectl apply` a Plugin
//! (`reconciler-host.io/v1alpha1`, cluster-scoped) and its source serves;
//! edit the source and it is upgraded in place; delete it and its
//! controller stops.
//!
//! Each Plugin has a follower ([`follower::Follower`]) that resolves its
//! source, verifies and pulls the digest, and serves it through a file of
//! [`ServedFiles`], so hot reload's rules (validate before swapping, calls
//! in flight finish on the old version, one plugin per primary kind) hold
//! for pulled plugins exactly as for files. The Plugin's status and Events
//! say what serves and why a newer version does not.
//!
//! Keys, keyless identities' trust root and pull secrets are read from the
//! host's own namespace: a Plugin is cluster-scoped, and letting it name
//! Secrets anywhere would let whoever may write Plugins read every Secret
//! the host can.

pub mod conditions;
pub mod follower;
pub mod from_objects;
pub mod spec;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::{WatchStreamExt as _, watcher};
use tokio::sync::{mpsc, watch};

use self::follower::{Access, Desired, Follower};
use self::spec::{PluginSpec, ValidSpec};
use crate::plugin::hot_reload::PluginStatus;
use crate::registry::served_files::ServedFiles;
use crate::registry::signatures::{KeylessIdentity, TrustRootFiles, TrustedKey};
use crate::registry::trust::{HostPolicy, Requirements};
use crate::registry::{
    ArtifactCache, Credentials, PluginReference, RegistryClient, RegistryOptions, TrustPolicy,
};

pub const GROUP: &str = "reconciler-host.io";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "Plugin";

/// The Plugin kind, for the dynamic API.
pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), "plugins")
}

/// What every follower shares.
pub struct Shared {
    pub client: kube::Client,
    pub api: Api<DynamicObject>,
    pub options: RegistryOptions,
    pub cache: ArtifactCache,
    pub served: Arc<ServedFiles>,
    /// Tells the plugins directory to rescan.
    pub reload: mpsc::UnboundedSender<()>,
    /// What the directory serves, after every sync.
    pub feed: watch::Receiver<Vec<PluginStatus>>,
    /// Where keys and pull secrets are read from.
    pub namespace: String,
    pub trust_root: Option<TrustRootFiles>,
    /// `--require-signatures`: what every Plugin and `--plugin` must be
    /// signed by, beside its own verification; `None` allows unsigned ones.
    pub required: Option<HostPolicy>,
    /// `--registry-allow`: the only registries sources may name.
    pub allowed_registries: Option<Vec<String>>,
    pub recorder: Recorder,
    pub load_timeout: Duration,
    /// Whether this replica writes Plugins' status and Events now (one of
    /// several sharding replicas does).
    pub writes_status: crate::support::duty_holder::DutyHolder,
}

impl Shared {
    /// The Plugins' API and an Event recorder on `client`; the rest as given.
    pub fn on(
        client: kube::Client,
        rest: impl FnOnce(Api<DynamicObject>, Recorder) -> Self,
    ) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "reconciler-host".into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        rest(Api::all_with(client, &api_resource()), recorder)
    }

    /// Whether `--registry-allow` lets sources name `spec`'s registry; why
    /// not, when it does not.
    fn registry_allowed(&self, spec: &ValidSpec) -> Result<(), String> {
        let Some(allowed) = &self.allowed_registries else {
            return Ok(());
        };
        let registry = spec.reference.registry();
        if allowed.iter().any(|a| a.eq_ignore_ascii_case(registry)) {
            return Ok(());
        }
        Err(format!(
            "{} is in registry {registry}, which the host does not pull from (--registry-allow {})",
            spec.reference,
            allowed.join(",")
        ))
    }

    /// The client, credentials and trust requirements a spec asks for.
    async fn access(
        &self,
        spec: &ValidSpec,
        fixed_policy: Option<&TrustPolicy>,
    ) -> Result<Access, String> {
        let options = spec.registry_options(&self.options);
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let config_maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut credentials = Credentials::default();
        for pull in &spec.raw.pull_secrets {
            let secret = secrets.get(&pull.name).await.map_err(|e| {
                format!(
                    "pull secret {}/{}: {}",
                    self.namespace,
                    pull.name,
                    api_error_text(&e)
                )
            })?;
            let data = secret.data.unwrap_or_default();
            let Some(bytes) = data
                .get(".dockerconfigjson")
                .or_else(|| data.get(".dockercfg"))
            else {
                return Err(format!(
                    "pull secret {}/{} has no .dockerconfigjson (create it with kubectl create secret docker-registry)",
                    self.namespace, pull.name
                ));
            };
            credentials
                .add_docker_config(
                    &format!("Secret {}/{}", self.namespace, pull.name),
                    &bytes.0,
                )
                .map_err(|e| e.to_string())?;
        }
        let mut policy = fixed_policy.cloned().unwrap_or_default();
        policy.trust_root = self.trust_root.clone();
        if let Some(verification) = &spec.raw.verification {
            for key in &verification.public_keys {
                let location = key.location();
                let (kind, data_key) = (location.kind, location.data_key);
                let name = format!("{kind} {}/{} key {data_key}", self.namespace, location.name);
                let pem = if kind == "Secret" {
                    secrets
                        .get(location.name)
                        .await
                        .map_err(|e| format!("{name}: {}", api_error_text(&e)))?
                        .data
                        .and_then(|d| d.get(data_key).map(|b| b.0.clone()))
                } else {
                    config_maps
                        .get(location.name)
                        .await
                        .map_err(|e| format!("{name}: {}", api_error_text(&e)))?
                        .data
                        .and_then(|d| d.get(data_key).map(|s| s.clone().into_bytes()))
                };
                let pem = pem.ok_or_else(|| format!("{name} does not exist"))?;
                policy
                    .keys
                    .push(TrustedKey::from_pem(name, &pem).map_err(|e| e.to_string())?);
            }
            policy.keyless = verification
                .keyless
                .iter()
                .map(|i| KeylessIdentity {
                    subject: i.subject.clone(),
                    issuer: i.issuer.clone(),
                })
                .collect();
            if !policy.keyless.is_empty() && self.trust_root.is_none() {
                return Err(
                    "spec.verification.keyless needs the host's --sigstore-trust-root (Fulcio certificates and Rekor keys as files); the host refuses to run it unchecked".into(),
                );
            }
        }
        let host = match &self.required {
            Some(required) => Some(required.load().map_err(|e| e.to_string())?),
            None => None,
        };
        let requirements = Requirements {
            host,
            own: (!policy.is_empty()).then_some(policy),
        };
        Ok((RegistryClient::new(options), credentials, requirements))
    }
}

/// Follows `references` (`--plugin`) and, when `watch_resources` is
/// `Some(selector)`, the cluster's Plugins (those `selector` matches),
/// until the task is dropped.
pub async fn follow(
    shared: Arc<Shared>,
    references: Vec<PluginReference>,
    verify_keys: TrustPolicy,
    watch_resources: Option<Option<String>>,
) {
    let mut followers: BTreeMap<String, watch::Sender<Option<Desired>>> = BTreeMap::new();
    let mut tasks = tokio::task::JoinSet::new();
    for reference in references {
        let (tx, rx) = watch::channel(Some(Desired {
            generation: 0,
            spec: Ok(ValidSpec {
                reference: reference.clone(),
                interval: None,
                raw: PluginSpec {
                    source: reference.to_string(),
                    ..PluginSpec::default()
                },
            }),
            object: None,
            // With --require-signatures the host's policy, read afresh at
            // every attempt, is the one these references meet.
            policy: shared.required.is_none().then(|| verify_keys.clone()),
        }));
        let follower = Follower::new(
            shared.clone(),
            format!("ref-{}", reference.file_stem()),
            reference.to_string(),
        );
        tasks.spawn(follower.run(rx));
        // Never changes; kept so the follower's feed stays open.
        followers.insert(format!("\0{reference}"), tx);
    }
    let Some(selector) = watch_resources else {
        tasks.join_all().await;
        drop(followers);
        return;
    };
    let mut config = watcher::Config::default();
    if let Some(selector) = &selector {
        config = config.labels(selector);
    }
    let stream = watcher(shared.api.clone(), config).default_backoff();
    tokio::pin!(stream);
    let mut warned = false;
    let mut seen_in_relist: Option<Vec<String>> = None;
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(event) => {
                warned = false;
                event
            }
            Err(e) => {
                if !warned {
                    tracing::warn!(
                        "cannot watch Plugins ({e}); install the CRD (kubectl apply -f crds/plugin.yaml) and RBAC to manage plugins as resources; retrying"
                    );
                    warned = true;
                }
                continue;
            }
        };
        match event {
            watcher::Event::Init => seen_in_relist = Some(Vec::new()),
            watcher::Event::InitApply(object) | watcher::Event::Apply(object) => {
                let Some(name) = object.metadata.name.clone() else {
                    continue;
                };
                if let Some(seen) = &mut seen_in_relist {
                    seen.push(name.clone());
                }
                let desired = desired_of(&object);
                match followers.get(&name) {
                    Some(tx) => {
                        let same = tx.borrow().as_ref().is_some_and(|d| {
                            d.generation == desired.generation
                                && d.spec.as_ref().ok() == desired.spec.as_ref().ok()
                        });
                        if !same {
                            tracing::info!(
                                "Plugin {name} changed (generation {})",
                                desired.generation
                            );
                            let _ = tx.send(Some(desired));
                        }
                    }
                    None => {
                        tracing::info!("Plugin {name}: following its source");
                        let (tx, rx) = watch::channel(Some(desired));
                        let follower = Follower::new(
                            shared.clone(),
                            format!("plugin-{name}"),
                            format!("Plugin {name}"),
                        );
                        tasks.spawn(follower.run(rx));
                        followers.insert(name, tx);
                    }
                }
            }
            watcher::Event::InitDone => {
                // Plugins deleted while the watch was down.
                if let Some(seen) = seen_in_relist.take() {
                    let gone: Vec<String> = followers
                        .keys()
                        .filter(|n| !n.starts_with('\0') && !seen.contains(n))
                        .cloned()
                        .collect();
                    for name in gone {
                        if let Some(tx) = followers.remove(&name) {
                            let _ = tx.send(None);
                        }
                    }
                }
            }
            watcher::Event::Delete(object) => {
                if let Some(name) = &object.metadata.name
                    && let Some(tx) = followers.remove(name)
                {
                    tracing::info!("Plugin {name} deleted");
                    let _ = tx.send(None);
                }
            }
        }
    }
}

/// A kube error as one short line: the API server's own message for an
/// API error, not the whole status object.
pub(crate) fn api_error_text(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    }
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
    }
}
