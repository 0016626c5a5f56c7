//! What every Plugin follower shares (the host's client, registry
//! options, cache, served files and trust settings), and the registry
//! access a Plugin's spec asks for, read from the host's own namespace.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DynamicObject};
use kube::runtime::events::{Recorder, Reporter};
use tokio::sync::{mpsc, watch};

use super::api_error::api_error_text;
use super::kind::api_resource;
use super::spec::ValidSpec;
use crate::plugin::hot_reload::PluginStatus;
use crate::registry::served_files::ServedFiles;
use crate::registry::signatures::{KeylessIdentity, TrustRootFiles, TrustedKey};
use crate::registry::trust::{HostPolicy, Requirements};
use crate::registry::{ArtifactCache, Credentials, RegistryClient, RegistryOptions, TrustPolicy};

/// Reads what a spec's access needs from the cluster: the registry client,
/// the pull credentials and the trust requirements.
pub(super) type Access = (RegistryClient, Credentials, Requirements);

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
    /// What candidates in shadow found: a Plugin's status reports its own.
    pub shadow: std::sync::Arc<crate::engine::shadow_book::ShadowBook>,
    /// Where a canary rollout gives its candidate a share of the primaries.
    pub candidates: std::sync::Arc<crate::plugin::candidates::Candidates>,
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
    pub(super) fn registry_allowed(&self, spec: &ValidSpec) -> Result<(), String> {
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
    pub(super) async fn access(
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
