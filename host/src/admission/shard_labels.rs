//! Shard labels given at creation (`run --sharding` with admission): a
//! mutating webhook puts a new primary's bucket on it before it is stored,
//! so its first event already reaches its owner alone, and no replica
//! writes the label afterwards.
//!
//! The label is a saving, never a condition: the webhook's failure policy
//! is Ignore and its timeout short, so a host that is down or slow never
//! blocks a create, and the owner's label write at its first reconcile
//! stays the fallback. It is also the only way for an object whose name
//! the API server generates (`generateName`): it has no name yet when it
//! is admitted, and a bucket is a hash of the name.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};

use reconciler_contract::{KindRef, Operation, PluginMetadata};
use serde_json::{Value, json};

use super::review::ReviewRequest;
use crate::engine::shard_selection::{SHARD_LABEL, ShardRole, role_of};
use crate::engine::work_queue::PrimaryKey;
use crate::plugin::{AdmissionDecision, LoadedPlugin};

/// Where the API server sends the reviews.
pub const PATH: &str = "/shard-labels";

/// The name of the MutatingWebhookConfiguration: with a dot, which no
/// plugin name has, so it never meets a plugin's `<prefix>-<plugin>`.
pub fn configuration_name(prefix: &str) -> String {
    format!("{prefix}.shard-labels")
}

/// The bucket of a primary of the host's own cluster.
pub type BucketOf = Arc<dyn Fn(&PrimaryKey) -> String + Send + Sync>;

/// What the webhook labels and how.
pub struct ShardLabels {
    bucket_of: BucketOf,
    pods_follow: bool,
    /// The kinds watched as primaries (selected by the label): those of
    /// the plugins served now.
    kinds: RwLock<BTreeSet<KindRef>>,
}

impl ShardLabels {
    pub fn new(bucket_of: BucketOf, pods_follow: bool) -> Self {
        Self {
            bucket_of,
            pods_follow,
            kinds: RwLock::default(),
        }
    }

    /// Takes the primary kinds of `plugins` (every plugin served, not only
    /// those serving admission); says whether they changed.
    pub fn update(&self, plugins: &[Arc<LoadedPlugin>]) -> bool {
        let metadata: Vec<_> = plugins.iter().map(|p| p.metadata()).collect();
        let kinds = primary_kinds(&metadata, self.pods_follow);
        let mut current = self.kinds.write().unwrap_or_else(|e| e.into_inner());
        let changed = *current != kinds;
        *current = kinds;
        changed
    }

    /// The kinds labelled at creation now.
    pub fn kinds(&self) -> BTreeSet<KindRef> {
        self.kinds.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The answer to a review: always allowed, with the label added when
    /// the object is a new primary without one.
    pub fn decide(&self, request: &ReviewRequest) -> AdmissionDecision {
        let admitted = |patch: Vec<Value>| AdmissionDecision {
            allowed: true,
            message: None,
            warnings: Vec::new(),
            patch,
            failure: None,
        };
        let kind = KindRef::new(
            &request.kind.group,
            &request.kind.version,
            &request.kind.kind,
        );
        let labelled_kind = self
            .kinds
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&kind);
        if request.operation != Operation::Create || !labelled_kind {
            return admitted(Vec::new());
        }
        // Its name and labels alone: the rest is skipped unparsed.
        let Some(object) = request
            .object
            .as_ref()
            .and_then(|o| serde_json::from_str::<NewObject>(o.get()).ok())
        else {
            return admitted(Vec::new());
        };
        let name = request
            .name
            .as_deref()
            .filter(|n| !n.is_empty())
            .or(object.metadata.name.as_deref())
            .filter(|n| !n.is_empty());
        let Some(name) = name else {
            // generateName: the owner labels it at its first reconcile.
            return admitted(Vec::new());
        };
        let labels = object.metadata.labels.as_ref();
        if labels.is_some_and(|l| l.get(SHARD_LABEL).is_some()) {
            // A label set by whoever creates it: a wrong one reaches a
            // replica that relabels it (`Engine::relabel_strays`).
            return admitted(Vec::new());
        }
        let bucket = (self.bucket_of)(&PrimaryKey {
            namespace: request.namespace.clone().filter(|n| !n.is_empty()),
            name: name.to_string(),
        });
        let operation = match labels {
            Some(Value::Object(_)) => json!({
                "op": "add",
                "path": format!("/metadata/labels/{}", SHARD_LABEL.replace('~', "~0").replace('/', "~1")),
                "value": bucket,
            }),
            _ => json!({"op": "add", "path": "/metadata/labels", "value": {SHARD_LABEL: bucket}}),
        };
        admitted(vec![operation])
    }
}

/// What the webhook reads of the object under review.
#[derive(serde::Deserialize)]
struct NewObject {
    #[serde(default)]
    metadata: NewMetadata,
}

#[derive(Default, serde::Deserialize)]
struct NewMetadata {
    #[serde(default)]
    name: Option<String>,
    /// Kept as a value: `null` and an object patch differently.
    #[serde(default)]
    labels: Option<Value>,
}

/// The primary kinds of `plugins` that are selected as primaries: those no
/// plugin also reads or owns (they are watched whole, unlabelled).
fn primary_kinds(plugins: &[&PluginMetadata], pods_follow: bool) -> BTreeSet<KindRef> {
    plugins
        .iter()
        .map(|m| &m.primary)
        .filter(|kind| {
            role_of(kind, plugins.iter().copied(), pods_follow) == Some(ShardRole::Primary)
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::review::parse;

    fn labels() -> ShardLabels {
        let labels = ShardLabels::new(
            Arc::new(|key: &PrimaryKey| {
                format!("{}-{}", key.namespace.as_deref().unwrap_or("-"), key.name)
            }),
            false,
        );
        labels.kinds.write().unwrap().insert(podset());
        labels
    }

    fn podset() -> KindRef {
        KindRef::new("example.com", "v1alpha1", "PodSet")
    }

    fn review(operation: &str, kind: &str, object: Value) -> ReviewRequest {
        let body = json!({"request": {
            "uid": "u", "operation": operation, "namespace": "team",
            "kind": {"group": "example.com", "version": "v1alpha1", "kind": kind},
            "object": object,
        }});
        parse(body.to_string().as_bytes()).unwrap()
    }

    /// The object as the API server stores it after the patch.
    fn patched(object: &Value, decision: &AdmissionDecision) -> Value {
        let patch: json_patch::Patch =
            serde_json::from_value(Value::Array(decision.patch.clone())).unwrap();
        let mut object = object.clone();
        json_patch::patch(&mut object, &patch).unwrap();
        object
    }

    #[test]
    fn a_new_primary_gets_its_bucket_with_or_without_labels_of_its_own() {
        let labels = labels();
        for object in [
            json!({"metadata": {"name": "web"}}),
            json!({"metadata": {"name": "web", "labels": {"app": "web"}}}),
        ] {
            let decision = labels.decide(&review("CREATE", "PodSet", object.clone()));
            assert!(decision.allowed);
            let stored = patched(&object, &decision);
            assert_eq!(stored["metadata"]["labels"][SHARD_LABEL], "team-web");
            if object["metadata"]["labels"]["app"] == "web" {
                assert_eq!(stored["metadata"]["labels"]["app"], "web");
            }
        }
    }

    #[test]
    fn nothing_else_is_changed_and_nothing_is_refused() {
        let labels = labels();
        let unchanged = |request: ReviewRequest| {
            let decision = labels.decide(&request);
            assert!(
                decision.allowed && decision.patch.is_empty(),
                "{decision:?}"
            );
        };
        unchanged(review(
            "UPDATE",
            "PodSet",
            json!({"metadata": {"name": "web"}}),
        ));
        unchanged(review(
            "CREATE",
            "Other",
            json!({"metadata": {"name": "web"}}),
        ));
        unchanged(review(
            "CREATE",
            "PodSet",
            json!({"metadata": {"generateName": "web-"}}),
        ));
        unchanged(review(
            "CREATE",
            "PodSet",
            json!({"metadata": {"name": "web", "labels": {SHARD_LABEL: "00a"}}}),
        ));
    }

    #[test]
    fn only_kinds_selected_as_primaries_are_labelled() {
        let labels = labels();
        let deployment = KindRef::new("apps", "v1", "Deployment");
        let owner = PluginMetadata::new("owner", "1", podset()).owns(deployment.clone());
        // A primary another plugin reads must reach every replica whole.
        let reader = PluginMetadata::new("reader", "1", deployment).reads(
            podset(),
            reconciler_contract::MapRule::None,
            false,
        );
        let kinds = |plugins: &[&PluginMetadata]| primary_kinds(plugins, labels.pods_follow);
        assert_eq!(kinds(&[&owner]), BTreeSet::from([podset()]));
        assert!(!kinds(&[&owner, &reader]).contains(&podset()));
    }
}
