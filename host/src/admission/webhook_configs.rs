//! The Validating- and MutatingWebhookConfigurations of the plugins that
//! serve admission, kept in step with the loaded set.
//!
//! Each plugin gets a configuration of each kind it needs, named
//! `<prefix>-<plugin>` and applied with server-side apply, so every replica
//! can apply the same one without conflict. A plugin that stops defaulting
//! loses its mutating configuration; a plugin that is removed (or stops
//! serving admission) loses both. Configurations are labelled with the
//! prefix, so a host never removes another host's.
//!
//! The webhook rules name the primary kind's resource (plural) and scope,
//! which come from discovery: a plugin whose kind is not served yet gets its
//! configurations at a later sync.
//!
//! How far they reach: never into kube-system or the host's own namespace
//! (a plugin whose primary is a built-in kind, such as a Deployment, would
//! otherwise intercept the host's own Deployment, and a Fail policy could
//! then keep the host from being repaired), and never into a namespace
//! labelled [`OPT_OUT_LABEL`]`=`[`OPT_OUT_VALUE`]. The label counts on
//! namespaces only: a namespace's labels are its owner's to set, but an
//! object's labels are whoever writes the object, so an object-level opt-out
//! would let any writer switch off the very checks meant for them (a
//! KubernetesCluster created with it could then change `spec.masters`).
//!
//! How long they live: as long as the installation. They are made at run
//! time, so `kubectl delete -k deploy/` does not list them; each is owned
//! (an ownerReference) by the host's Namespace, which the manifests install,
//! so deleting it has the garbage collector remove them. Without an owner,
//! a Fail policy would deny its kind forever once the host is gone.

use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::discovery::{self, Scope};
use reconciler_contract::{AdmissionSettings, KindRef};
use serde_json::{Value, json};

use super::shard_labels;
use crate::engine::shard_selection::SHARD_LABEL;
use crate::plugin::LoadedPlugin;
use std::collections::BTreeSet;

/// The field manager of the configurations.
pub const FIELD_MANAGER: &str = "reconciler-host-admission";
/// The label that says which host prefix made a configuration.
pub const PREFIX_LABEL: &str = "reconciler-host.io/webhook-prefix";
/// The label naming the plugin a configuration is for.
pub const PLUGIN_LABEL: &str = "reconciler-host.io/plugin";
/// Objects in a namespace with this label set to [`OPT_OUT_VALUE`] are never
/// sent to a plugin's admission. On an object itself it means nothing (see
/// the module's doc).
pub const OPT_OUT_LABEL: &str = "reconciler-host.io/admission";
pub const OPT_OUT_VALUE: &str = "disabled";
/// Namespaces no configuration reaches, whatever the options.
pub const ALWAYS_EXCLUDED: &[&str] = &["kube-system"];

/// The prefix of the configurations' names unless `--admission-webhook-prefix`
/// says otherwise.
pub const DEFAULT_WEBHOOK_PREFIX: &str = "reconciler-host";

/// The name of `plugin`'s configurations (one of each kind): what the host
/// applies, and what `reconciler-host rbac` grants by name.
pub fn configuration_name(prefix: &str, plugin: &str) -> String {
    format!("{prefix}-{plugin}")
}

/// Where the API server reaches the webhook server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WebhookEndpoint {
    /// A base URL, `https://127.0.0.1:8443` (outside the cluster, tests).
    Url(String),
    /// A Service in the cluster (the host as a pod).
    Service {
        namespace: String,
        name: String,
        port: u16,
    },
}

impl WebhookEndpoint {
    fn client_config(&self, path: &str, ca_bundle_pem: &str) -> Value {
        let ca = base64::engine::general_purpose::STANDARD.encode(ca_bundle_pem);
        match self {
            WebhookEndpoint::Url(base) => json!({
                "url": format!("{}{path}", base.trim_end_matches('/')),
                "caBundle": ca,
            }),
            WebhookEndpoint::Service {
                namespace,
                name,
                port,
            } => json!({
                "service": {"namespace": namespace, "name": name, "port": port, "path": path},
                "caBundle": ca,
            }),
        }
    }
}

/// Everything the configurations are made from, beyond the plugins.
#[derive(Clone, Debug)]
pub struct WebhookSetup {
    /// Names the configurations `<prefix>-<plugin>`.
    pub prefix: String,
    pub endpoint: WebhookEndpoint,
    pub ca_bundle_pem: String,
    /// The namespaces the host serves (`run --namespace`); empty: all. The
    /// API server then calls the webhooks only for objects in them.
    pub namespaces: Vec<String>,
    /// Namespaces the webhooks never reach, on top of
    /// [`ALWAYS_EXCLUDED`]: the host's own, and those of
    /// `--admission-exclude-namespace`.
    pub excluded_namespaces: Vec<String>,
    /// The Namespace whose deletion removes the configurations (the
    /// host's); none: they are left for whoever removes the host.
    pub owner_namespace: Option<String>,
}

/// The object a configuration is owned by: its deletion removes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigOwner {
    pub name: String,
    pub uid: String,
}

/// The API server's webhook timeout for a plugin: its admission deadline,
/// rounded up to whole seconds, plus one for the network, at most 30.
fn timeout_seconds(settings: &AdmissionSettings) -> u32 {
    let ms = settings
        .timeout_ms
        .unwrap_or(AdmissionSettings::DEFAULT_TIMEOUT_MS);
    (ms.div_ceil(1000) + 1).min(30)
}

/// Objects in `namespaces` only (all when empty), never in `excluded` or
/// [`ALWAYS_EXCLUDED`], nor in a namespace that opted out (ignored for
/// cluster-scoped kinds).
fn namespace_selector(namespaces: &[String], excluded: &[String]) -> Value {
    let mut never: Vec<&str> = ALWAYS_EXCLUDED.to_vec();
    for namespace in excluded {
        if !never.contains(&namespace.as_str()) {
            never.push(namespace);
        }
    }
    let mut expressions = vec![
        json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": never}),
        opted_out(),
    ];
    if !namespaces.is_empty() {
        expressions.insert(
            0,
            json!({"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}),
        );
    }
    json!({"matchExpressions": expressions})
}

/// Matches namespaces that do not carry the opt-out label (NotIn matches a
/// missing label too).
fn opted_out() -> Value {
    json!({"key": OPT_OUT_LABEL, "operator": "NotIn", "values": [OPT_OUT_VALUE]})
}

/// The configurations of one plugin: the validating one, and the mutating
/// one when the plugin defaults.
pub fn configurations(
    plugin: &LoadedPlugin,
    settings: &AdmissionSettings,
    plural: &str,
    namespaced: bool,
    setup: &WebhookSetup,
    owner: Option<&ConfigOwner>,
) -> (Value, Option<Value>) {
    let name = configuration_name(&setup.prefix, plugin.name());
    let primary: &KindRef = &plugin.metadata().primary;
    let operations: Vec<String> = settings
        .effective_operations()
        .iter()
        .map(ToString::to_string)
        .collect();
    let rules = json!([{
        "apiGroups": [primary.group],
        "apiVersions": [primary.version],
        "operations": operations,
        "resources": [plural],
        "scope": if namespaced { "Namespaced" } else { "Cluster" },
    }]);
    let mut metadata = json!({
        "name": name,
        "labels": {
            "app.kubernetes.io/managed-by": "reconciler-host",
            PREFIX_LABEL: setup.prefix,
            PLUGIN_LABEL: plugin.name(),
        },
    });
    if let Some(owner) = owner {
        // Not a controller, and not blocking the owner's deletion: the
        // Namespace goes first, the configurations after it.
        metadata["ownerReferences"] = json!([{
            "apiVersion": "v1", "kind": "Namespace", "name": owner.name, "uid": owner.uid,
        }]);
    }
    let webhook = |phase: &str| {
        json!({
            "name": format!("{phase}.{}.reconciler-host.io", plugin.name()),
            "clientConfig": setup.endpoint.client_config(
                &format!("/admission/{}/{phase}", plugin.name()),
                &setup.ca_bundle_pem,
            ),
            "rules": rules,
            "failurePolicy": settings.failure_policy.to_string(),
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "matchPolicy": "Equivalent",
            "timeoutSeconds": timeout_seconds(settings),
            "namespaceSelector": namespace_selector(&setup.namespaces, &setup.excluded_namespaces),
        })
    };
    let validating = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": metadata,
        "webhooks": [webhook("validate")],
    });
    let mutating = settings.mutating.then(|| {
        let mut hook = webhook("mutate");
        hook["reinvocationPolicy"] = json!("Never");
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": metadata,
            "webhooks": [hook],
        })
    });
    (validating, mutating)
}

/// The rule sending new objects of `kind` to the shard label webhook.
fn shard_rule(kind: &KindRef, plural: &str, namespaced: bool) -> Value {
    json!({
        "apiGroups": [kind.group],
        "apiVersions": [kind.version],
        "operations": ["CREATE"],
        "resources": [plural],
        "scope": if namespaced { "Namespaced" } else { "Cluster" },
    })
}

/// The configuration labelling new primaries with their shard: never in
/// the way of a create (Ignore, a short timeout), and only for objects
/// that come without the label.
fn shard_label_configuration(
    name: &str,
    rules: Vec<Value>,
    setup: &WebhookSetup,
    owner: Option<&ConfigOwner>,
) -> Value {
    let mut metadata = json!({
        "name": name,
        "labels": {
            "app.kubernetes.io/managed-by": "reconciler-host",
            PREFIX_LABEL: setup.prefix,
        },
    });
    if let Some(owner) = owner {
        metadata["ownerReferences"] = json!([{
            "apiVersion": "v1", "kind": "Namespace", "name": owner.name, "uid": owner.uid,
        }]);
    }
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": metadata,
        "webhooks": [{
            "name": "shard-labels.reconciler-host.io",
            "clientConfig": setup.endpoint.client_config(shard_labels::PATH, &setup.ca_bundle_pem),
            "rules": rules,
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "matchPolicy": "Equivalent",
            "timeoutSeconds": SHARD_LABEL_TIMEOUT_SECONDS,
            "reinvocationPolicy": "Never",
            "namespaceSelector": namespace_selector(&setup.namespaces, &setup.excluded_namespaces),
            "objectSelector": {"matchExpressions": [
                {"key": SHARD_LABEL, "operator": "DoesNotExist"},
            ]},
        }],
    })
}

/// The API server waits this long for a shard label before creating the
/// object without one: the label is a saving, not worth holding a create.
const SHARD_LABEL_TIMEOUT_SECONDS: u32 = 2;

/// What one [`sync`] did: a line per change or skipped plugin, and a line
/// per request that failed.
#[derive(Debug, Default)]
pub struct SyncReport {
    pub changes: Vec<String>,
    pub errors: Vec<String>,
}

/// Applies the configurations of `plugins` and removes this prefix's
/// configurations of plugins no longer among them. A plugin whose kind
/// cannot be resolved is skipped and named.
///
/// A failed request never stops the others: a configuration that could not
/// be applied keeps its current version (it is still wanted, so it is not
/// removed as stale), and the configurations of plugins that are gone are
/// removed even when applying another one failed. Otherwise one plugin
/// whose configuration the API server refuses would keep a removed
/// plugin's webhook (and its failure policy) in force.
pub async fn sync(
    client: &kube::Client,
    plugins: &[std::sync::Arc<LoadedPlugin>],
    setup: &WebhookSetup,
) -> SyncReport {
    sync_with_shard_labels(client, plugins, &BTreeSet::new(), setup).await
}

/// [`sync`], and under sharding the configuration that labels new
/// primaries of `shard_kinds` ([`shard_labels`]); removed when there are
/// none.
pub async fn sync_with_shard_labels(
    client: &kube::Client,
    plugins: &[std::sync::Arc<LoadedPlugin>],
    shard_kinds: &BTreeSet<KindRef>,
    setup: &WebhookSetup,
) -> SyncReport {
    let mut report = SyncReport::default();
    // Without the owner, applying would strip the ownerReference this field
    // manager set: the configurations are then left as they are (and not
    // removed as stale) until the owner can be read.
    let owner = match config_owner(client, setup).await {
        Ok(owner) => owner,
        Err(e) => {
            report.errors.push(e);
            None
        }
    };
    let mut run = SyncRun {
        client,
        setup,
        validating: Api::all(client.clone()),
        mutating: Api::all(client.clone()),
        params: PatchParams::apply(FIELD_MANAGER).force(),
        owner_missing: setup.owner_namespace.is_some() && owner.is_none(),
        owner,
        report,
        wanted_validating: Vec::new(),
        wanted_mutating: Vec::new(),
    };
    for plugin in plugins {
        run.apply_plugin(plugin).await;
    }
    if !shard_kinds.is_empty() {
        run.apply_shard_labels(shard_kinds).await;
    }
    let mine = ListParams::default().labels(&format!("{PREFIX_LABEL}={}", setup.prefix));
    let mut report = run.report;
    remove_stale(&run.validating, &mine, &run.wanted_validating, &mut report).await;
    remove_stale(&run.mutating, &mine, &run.wanted_mutating, &mut report).await;
    report
}

/// The Namespace the configurations are owned by, as `setup` names it;
/// why it cannot be read, for the report.
async fn config_owner(
    client: &kube::Client,
    setup: &WebhookSetup,
) -> Result<Option<ConfigOwner>, String> {
    let Some(name) = &setup.owner_namespace else {
        return Ok(None);
    };
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match namespaces.get_opt(name).await {
        Ok(Some(found)) => match found.metadata.uid {
            Some(uid) => Ok(Some(ConfigOwner {
                name: name.clone(),
                uid,
            })),
            None => Err(format!("Namespace {name} has no uid yet")),
        },
        Ok(None) => Err(format!(
            "Namespace {name}, which owns the webhook configurations, does not exist: set POD_NAMESPACE to the host's namespace"
        )),
        Err(e) => Err(format!(
            "cannot read Namespace {name}, which owns the webhook configurations (the host's ClusterRole needs get on namespaces): {e}"
        )),
    }
}

/// One sync under way: what it applies with, what it has found wanted so
/// far (never removed as stale), and its report.
struct SyncRun<'a> {
    client: &'a kube::Client,
    setup: &'a WebhookSetup,
    validating: Api<ValidatingWebhookConfiguration>,
    mutating: Api<MutatingWebhookConfiguration>,
    params: PatchParams,
    owner: Option<ConfigOwner>,
    /// The owner is named but could not be read: nothing is applied, and
    /// what would be is kept.
    owner_missing: bool,
    report: SyncReport,
    wanted_validating: Vec<String>,
    wanted_mutating: Vec<String>,
}

impl SyncRun<'_> {
    /// Applies `plugin`'s configurations, if it serves admission and its
    /// kind is served.
    async fn apply_plugin(&mut self, plugin: &LoadedPlugin) {
        let Some(settings) = plugin.admission() else {
            return;
        };
        let primary = &plugin.metadata().primary;
        let gvk = kube::api::GroupVersionKind::gvk(&primary.group, &primary.version, &primary.kind);
        let (resource, caps) = match discovery::pinned_kind(self.client, &gvk).await {
            Ok(found) => found,
            Err(e) => {
                self.report.changes.push(format!(
                    "admission of plugin {} not registered yet: its kind {primary} is not served ({e})",
                    plugin.name()
                ));
                return;
            }
        };
        let namespaced = matches!(caps.scope, Scope::Namespaced);
        let name = configuration_name(&self.setup.prefix, plugin.name());
        if self.owner_missing {
            self.wanted_validating.push(name.clone());
            self.wanted_mutating.push(name);
            return;
        }
        let (v, m) = configurations(
            plugin,
            settings,
            &resource.plural,
            namespaced,
            self.setup,
            self.owner.as_ref(),
        );
        if let Err(e) = self
            .validating
            .patch(&name, &self.params, &Patch::Apply(&v))
            .await
        {
            self.report.errors.push(format!(
                "cannot apply ValidatingWebhookConfiguration {name} of plugin {}: {e}",
                plugin.name()
            ));
        }
        self.wanted_validating.push(name.clone());
        if let Some(m) = m {
            if let Err(e) = self
                .mutating
                .patch(&name, &self.params, &Patch::Apply(&m))
                .await
            {
                self.report.errors.push(format!(
                    "cannot apply MutatingWebhookConfiguration {name} of plugin {}: {e}",
                    plugin.name()
                ));
            }
            self.wanted_mutating.push(name.clone());
        }
    }

    /// Applies the configuration labelling new primaries of `shard_kinds`
    /// with their shard, for those of the kinds that are served.
    async fn apply_shard_labels(&mut self, shard_kinds: &BTreeSet<KindRef>) {
        let name = shard_labels::configuration_name(&self.setup.prefix);
        let mut rules = Vec::new();
        for kind in shard_kinds {
            let gvk = kube::api::GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind);
            match discovery::pinned_kind(self.client, &gvk).await {
                Ok((resource, caps)) => rules.push(shard_rule(
                    kind,
                    &resource.plural,
                    matches!(caps.scope, Scope::Namespaced),
                )),
                Err(e) => self.report.changes.push(format!(
                    "new {kind} not labelled with their shard yet: the kind is not served ({e})"
                )),
            }
        }
        let wanted = !rules.is_empty() || self.owner_missing;
        if !rules.is_empty() && !self.owner_missing {
            let config = shard_label_configuration(&name, rules, self.setup, self.owner.as_ref());
            if let Err(e) = self
                .mutating
                .patch(&name, &self.params, &Patch::Apply(&config))
                .await
            {
                self.report.errors.push(format!(
                    "cannot apply MutatingWebhookConfiguration {name}, which labels new primaries with their shard (their owners label them instead): {e}"
                ));
            }
        }
        if wanted {
            self.wanted_mutating.push(name);
        }
    }
}

/// Deletes this prefix's configurations of `api`'s kind not in `wanted`;
/// each failure is reported and the others are still tried. RBAC generated
/// for the plugins now served names only theirs, so one left by a plugin
/// since removed is named with the command that removes it.
async fn remove_stale<K>(
    api: &Api<K>,
    mine: &ListParams,
    wanted: &[String],
    report: &mut SyncReport,
) where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let kind = K::kind(&());
    let listed = match api.list_metadata(mine).await {
        Ok(listed) => listed,
        Err(e) => {
            report
                .errors
                .push(format!("cannot list the {kind}s to remove stale ones: {e}"));
            return;
        }
    };
    for stale in listed.items {
        let Some(name) = stale.metadata.name else {
            continue;
        };
        if wanted.contains(&name) {
            continue;
        }
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => report.changes.push(format!("removed {kind} {name}")),
            Err(e) => report.errors.push(format!(
                "cannot remove {kind} {name} of a plugin no longer served ({e}); remove it with `kubectl delete {} {name}`",
                kind.to_lowercase()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shard label webhook must never stand in a create's way, nor
    /// touch what it does not label.
    #[test]
    fn the_shard_label_configuration_cannot_block_a_create() {
        let setup = WebhookSetup {
            prefix: "rh".into(),
            endpoint: WebhookEndpoint::Url("https://127.0.0.1:8443".into()),
            ca_bundle_pem: "pem".into(),
            namespaces: Vec::new(),
            excluded_namespaces: vec!["reconciler-host".into()],
            owner_namespace: None,
        };
        let kind = KindRef::new("example.com", "v1alpha1", "PodSet");
        let config = shard_label_configuration(
            &shard_labels::configuration_name("rh"),
            vec![shard_rule(&kind, "podsets", true)],
            &setup,
            None,
        );
        assert_eq!(config["metadata"]["name"], "rh.shard-labels");
        let hook = &config["webhooks"][0];
        assert_eq!(hook["failurePolicy"], "Ignore");
        assert!(hook["timeoutSeconds"].as_u64().unwrap() <= 2);
        assert_eq!(hook["rules"][0]["operations"], json!(["CREATE"]));
        assert_eq!(hook["rules"][0]["resources"], json!(["podsets"]));
        assert_eq!(
            hook["clientConfig"]["url"],
            "https://127.0.0.1:8443/shard-labels"
        );
        let objects = hook["objectSelector"]["matchExpressions"]
            .as_array()
            .unwrap();
        assert!(objects.contains(&json!({"key": SHARD_LABEL, "operator": "DoesNotExist"})));
        let namespaces = hook["namespaceSelector"].to_string();
        assert!(namespaces.contains("kube-system") && namespaces.contains("reconciler-host"));
    }
}
