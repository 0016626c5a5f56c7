//! The Secret sources: Secrets in the host's namespace labelled
//! `reconciler-host.io/cluster`, and Cluster API's `<cluster>-kubeconfig`
//! Secrets. What they hold is input, not configuration: a Secret that
//! does not describe a usable member is named in a warning and left out.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use kube::Api;
use kube::runtime::watcher;
use tokio::sync::mpsc;

use super::described::{Described, SourceKind, valid_member_name};
use super::local::LOCAL;
use crate::cluster::kubernetes::relist_watch::{Change, relist_watch};
use crate::fleet::member::Identity;
use crate::fleet::selection::CLUSTER_LABEL;

/// The label that makes a Secret a member's kubeconfig.
pub const SECRET_LABEL: &str = CLUSTER_LABEL;
/// The label Cluster API puts on the Secrets it maintains.
pub const CAPI_CLUSTER_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// Follows the kubeconfig Secrets of one kind of source.
pub(super) async fn follow_secrets(
    api: Api<Secret>,
    kind: SourceKind,
    tx: mpsc::UnboundedSender<(SourceKind, Vec<Described>)>,
) {
    let label = match kind {
        SourceKind::ClusterApi => CAPI_CLUSTER_LABEL,
        _ => SECRET_LABEL,
    };
    let config = watcher::Config::default().labels(label);
    // By Secret name: two Secrets may claim one member, and the
    // engagements decide which keeps it.
    let mut members: BTreeMap<String, Described> = BTreeMap::new();
    let report = |members: &BTreeMap<String, Described>| {
        let _ = tx.send((kind, members.values().cloned().collect()));
    };
    let warn = |e: &watcher::Error| {
        tracing::warn!("cannot watch cluster kubeconfig Secrets ({label}): {e}; retrying");
    };
    relist_watch(api, config, warn, |change| {
        match change {
            Change::Relisted(secrets) => {
                members = secrets
                    .iter()
                    .filter_map(|secret| {
                        let described = described_secret(secret, kind)?;
                        Some((secret.metadata.name.clone().unwrap_or_default(), described))
                    })
                    .collect();
            }
            Change::Applied(secret) => {
                // A Secret that stopped describing a member (its data gone)
                // is removed.
                let secret_name = secret.metadata.name.clone().unwrap_or_default();
                match described_secret(&secret, kind) {
                    Some(described) => members.insert(secret_name, described),
                    None => members.remove(&secret_name),
                };
            }
            Change::Deleted(secret) => {
                members.remove(&secret.metadata.name.clone().unwrap_or_default());
            }
        }
        report(&members);
    })
    .await;
}

fn secret_source(name: &str) -> String {
    format!("secret {name}")
}

/// The member a Secret describes, if it holds a kubeconfig under a valid
/// member name; otherwise a warning naming the Secret says what is wrong.
fn described_secret(secret: &Secret, kind: SourceKind) -> Option<Described> {
    let secret_name = secret.metadata.name.clone().unwrap_or_default();
    let labels: BTreeMap<String, String> = secret.metadata.labels.clone().unwrap_or_default();
    let name = match kind {
        SourceKind::ClusterApi => {
            let cluster = labels.get(CAPI_CLUSTER_LABEL)?;
            // Cluster API labels several Secrets of a cluster; the
            // kubeconfig is `<cluster>-kubeconfig`.
            if secret_name != format!("{cluster}-kubeconfig") {
                return None;
            }
            cluster.clone()
        }
        _ => labels.get(SECRET_LABEL)?.clone(),
    };
    if let Err(why) = valid_member_name(&name) {
        tracing::warn!("Secret {secret_name} names cluster {name:?}, which is not usable: {why}");
        return None;
    }
    // `local` means the cluster the host runs in, whether or not it is
    // served: `--plugin-clusters` and sharding rely on it.
    if name == LOCAL {
        tracing::warn!(
            "Secret {secret_name} names cluster {LOCAL}, which is reserved for the cluster the host runs in: it is not used"
        );
        return None;
    }
    let data = secret.data.as_ref();
    let bytes = data
        .and_then(|d| d.get("kubeconfig").or_else(|| d.get("value")))
        .map(|b| b.0.clone());
    let Some(bytes) = bytes else {
        tracing::warn!(
            "Secret {secret_name} names cluster {name} but holds no kubeconfig (key `kubeconfig`, or `value`)"
        );
        return None;
    };
    let Ok(kubeconfig) = String::from_utf8(bytes) else {
        tracing::warn!("Secret {secret_name}: its kubeconfig is not UTF-8 text");
        return None;
    };
    let mut member_labels = labels;
    member_labels.insert(CLUSTER_LABEL.into(), name.clone());
    let created = secret
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    Some(Described {
        identity: Identity {
            name,
            labels: member_labels,
            source: secret_source(&secret_name),
            server: String::new(),
        },
        kubeconfig: Some(kubeconfig),
        secret: Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Secret".into()),
            name: secret.metadata.name.clone(),
            namespace: secret.metadata.namespace.clone(),
            uid: secret.metadata.uid.clone(),
            ..ObjectReference::default()
        }),
        // RFC 3339 times of one precision sort as text.
        order: format!("{created} {secret_name}"),
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;
    use kube::api::ObjectMeta;

    use super::*;

    fn secret(name: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("hub".into()),
                uid: Some(format!("uid-{name}")),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Secret::default()
        }
    }

    #[test]
    fn a_labelled_secret_names_its_member_and_carries_its_labels() {
        let s = secret(
            "member-east",
            &[(SECRET_LABEL, "east"), ("env", "prod")],
            &[("kubeconfig", "apiVersion: v1")],
        );
        let d = described_secret(&s, SourceKind::Secrets).unwrap();
        assert_eq!(d.identity.name, "east");
        assert_eq!(d.identity.labels["env"], "prod");
        assert_eq!(d.identity.labels[CLUSTER_LABEL], "east");
        assert_eq!(d.identity.source, "secret member-east");
        assert_eq!(d.kubeconfig.as_deref(), Some("apiVersion: v1"));
        assert_eq!(d.secret.unwrap().uid.as_deref(), Some("uid-member-east"));
        // Cluster API's key works too.
        let s = secret("m", &[(SECRET_LABEL, "west")], &[("value", "kc")]);
        assert_eq!(
            described_secret(&s, SourceKind::Secrets)
                .unwrap()
                .kubeconfig
                .as_deref(),
            Some("kc")
        );
    }

    #[test]
    fn secrets_without_a_usable_name_or_kubeconfig_describe_no_member() {
        let no_data = secret("m", &[(SECRET_LABEL, "east")], &[]);
        assert!(described_secret(&no_data, SourceKind::Secrets).is_none());
        let reserved = secret("m", &[(SECRET_LABEL, LOCAL)], &[("kubeconfig", "x")]);
        assert!(described_secret(&reserved, SourceKind::Secrets).is_none());
        let bad_name = secret("m", &[(SECRET_LABEL, "-east")], &[("kubeconfig", "x")]);
        assert!(described_secret(&bad_name, SourceKind::Secrets).is_none());
        // Cluster API labels several Secrets of a cluster: only
        // `<cluster>-kubeconfig` is its kubeconfig.
        let ca = secret(
            "prod-ca",
            &[(CAPI_CLUSTER_LABEL, "prod")],
            &[("value", "x")],
        );
        assert!(described_secret(&ca, SourceKind::ClusterApi).is_none());
        let kubeconfig = secret(
            "prod-kubeconfig",
            &[(CAPI_CLUSTER_LABEL, "prod")],
            &[("value", "x")],
        );
        let d = described_secret(&kubeconfig, SourceKind::ClusterApi).unwrap();
        assert_eq!(d.identity.name, "prod");
    }
}
