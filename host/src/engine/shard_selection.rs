//! Server-side shard selection (`run --sharding`): every primary and every
//! child carries its primary's bucket as a label, and each replica asks
//! the API server for its own buckets alone, so the others' objects are
//! never sent to it, decoded or cached.
//!
//! Primaries are selected by `notin` the other replicas' buckets: a new
//! primary, not labelled yet, reaches every replica, and its owner labels
//! it at its first reconcile. Children are selected by `in` this replica's
//! buckets, as the host writes the label on every child it applies. A
//! kind that is a primary of one plugin and a child or a read of another
//! is watched whole, as are read objects: those are not the host's to
//! label. A bucket never changes for a primary, so when replicas come and
//! go only the selectors change, and nothing is relabelled.
//!
//! A kind that is the primary of one plugin and a child of another carries
//! no shard label at all: as a primary it would be labelled with its own
//! bucket, as a child with its parent's, and the two writers would undo
//! each other at every reconcile (and the API server's fence, which judges
//! a write by the label, would refuse one of them). It is watched whole,
//! and each engine tells its own keys by hashing them, as for any kind
//! watched whole; the label one of its roles left on it is taken off.
//!
//! Pods are the exception, when asked for (`--sharding-pod-labels`): the
//! host then also labels the pod templates of the workloads it applies, so
//! their Pods are born with their primary's bucket, and a plugin that owns
//! workloads has its Pod reads selected as children. Off by default:
//! turning it on or off changes each such template once, which rolls its
//! Pods, and a Pod no labelled template made (one created by hand) is then
//! no longer seen.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};

use reconciler_contract::selector::LabelSelector;
use reconciler_contract::{KindRef, PluginMetadata};

use super::work_queue::PrimaryKey;
use crate::cluster::LabelAt;

/// The label naming the bucket of an object's primary.
pub const SHARD_LABEL: &str = "reconciler-host.io/shard";

/// The field manager of the shard label on primaries: its own, so the
/// label never mixes with the plugin's fields or the user's.
pub const SHARD_FIELD_MANAGER: &str = "reconciler-host-shard";

/// A label value that is no bucket: selects nothing (`in ()` is not a
/// valid selector).
const NO_BUCKET: &str = "none";

/// The buckets this replica owns now, and the others' (every bucket is in
/// one of them once the ring has members).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Buckets {
    pub mine: BTreeSet<String>,
    pub others: BTreeSet<String>,
}

/// How a kind is watched under sharding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardRole {
    Primary,
    Child,
}

/// One engine's view of the shard label: the bucket of each of its
/// primaries, and the buckets its replica selects now (shared with the
/// coordinator, which changes them with the ring).
#[derive(Clone)]
pub struct ShardSelection {
    bucket_of: Arc<dyn Fn(&PrimaryKey) -> String + Send + Sync>,
    buckets: Arc<RwLock<Buckets>>,
    pods_follow: bool,
}

impl ShardSelection {
    pub fn new(
        bucket_of: Arc<dyn Fn(&PrimaryKey) -> String + Send + Sync>,
        buckets: Arc<RwLock<Buckets>>,
    ) -> Self {
        Self {
            bucket_of,
            buckets,
            pods_follow: false,
        }
    }

    /// Labels pod templates too, and selects the Pods plugins read that
    /// own workloads (the module's last paragraph).
    pub fn with_pods_following(mut self, pods_follow: bool) -> Self {
        self.pods_follow = pods_follow;
        self
    }

    /// Puts the shard label on a child the host applies: on the object,
    /// and on its pod template when Pods follow and `pods_too` (no plugin
    /// has Pods as its primary).
    pub fn label_child(&self, child: &mut serde_json::Value, bucket: &str, pods_too: bool) {
        label(child, bucket);
        if self.pods_follow
            && pods_too
            && let Some(template) = pod_template_mut(child)
        {
            label(template, bucket);
        }
    }

    /// How `kind` is selected, given every plugin serving it: see
    /// [`role_of`].
    pub fn role_of<'a>(
        &self,
        kind: &KindRef,
        plugins: impl IntoIterator<Item = &'a PluginMetadata>,
    ) -> Option<ShardRole> {
        role_of(kind, plugins, self.pods_follow)
    }

    /// Whether `kind` is labelled in no role: see [`has_two_roles`].
    pub fn has_two_roles<'a>(
        &self,
        kind: &KindRef,
        plugins: impl IntoIterator<Item = &'a PluginMetadata>,
    ) -> bool {
        has_two_roles(kind, plugins, self.pods_follow)
    }

    /// The shard label value of `key`'s objects.
    pub fn bucket_of(&self, key: &PrimaryKey) -> String {
        (self.bucket_of)(key)
    }

    /// Whether `bucket` is one of this replica's now.
    pub fn is_mine(&self, bucket: &str) -> bool {
        self.buckets
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .mine
            .contains(bucket)
    }

    /// The buckets this replica owns now, and the others'.
    pub fn buckets(&self) -> Buckets {
        self.buckets
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The selector a kind of `role` is watched with now; `None` while this
    /// replica owns every bucket (or the ring is empty).
    pub fn selector(&self, role: ShardRole) -> Option<LabelSelector> {
        selector_of(role, &self.buckets())
    }
}

/// The selector a kind of `role` is watched with, given `buckets`; `None`
/// while this replica owns every bucket (or the ring is empty).
pub fn selector_of(role: ShardRole, buckets: &Buckets) -> Option<LabelSelector> {
    if buckets.others.is_empty() {
        return None;
    }
    let text = match role {
        ShardRole::Primary => format!("{SHARD_LABEL} notin ({})", list(&buckets.others)),
        ShardRole::Child if buckets.mine.is_empty() => {
            format!("{SHARD_LABEL} in ({NO_BUCKET})")
        }
        ShardRole::Child => format!("{SHARD_LABEL} in ({})", list(&buckets.mine)),
    };
    parsed(&text)
}

/// The selector of objects labelled with one of `buckets` (not empty).
pub fn selector_in(buckets: &BTreeSet<String>) -> Option<LabelSelector> {
    parsed(&format!("{SHARD_LABEL} in ({})", list(buckets)))
}

fn list(set: &BTreeSet<String>) -> String {
    set.iter().cloned().collect::<Vec<_>>().join(",")
}

fn parsed(text: &str) -> Option<LabelSelector> {
    match LabelSelector::parse(text) {
        Ok(selector) => Some(selector),
        Err(e) => {
            // Bucket values are three hex digits: this cannot happen,
            // and watching whole is correct, only dearer.
            tracing::error!("shard selector not built, watching whole: {e}");
            None
        }
    }
}

/// How `kind` is selected, given every plugin serving it: as a primary
/// when it is the primary of each plugin declaring it, as a child when it
/// is a child of each; otherwise (a read of any, or both roles) whole.
/// When `pods_follow`, a Pod read by a plugin that owns a workload kind
/// counts as its child: its Pods carry the label their templates got.
pub fn role_of<'a>(
    kind: &KindRef,
    plugins: impl IntoIterator<Item = &'a PluginMetadata>,
    pods_follow: bool,
) -> Option<ShardRole> {
    let mut role = None;
    for metadata in plugins {
        let is_primary = metadata.primary == *kind;
        let is_child = metadata.owns_kind(kind);
        let is_read = metadata.reads.iter().any(|r| r.kind == *kind);
        let this = match (is_primary, is_child, is_read) {
            (false, false, false) => continue,
            (true, false, false) => ShardRole::Primary,
            (false, true, false) => ShardRole::Child,
            (false, false, true)
                if pods_follow && is_pod(kind) && metadata.owns.iter().any(is_workload) =>
            {
                ShardRole::Child
            }
            _ => return None,
        };
        if role.is_some_and(|r| r != this) {
            return None;
        }
        role = Some(this);
    }
    role
}

/// Whether the host would give `kind` two shard labels: the primary's own
/// bucket as some plugin's primary, and its parent's as some plugin's
/// child (a Pod counts as one when Pods follow their templates and a
/// plugin owns workloads). Such a kind carries none (the module's
/// documentation says why).
pub fn has_two_roles<'a>(
    kind: &KindRef,
    plugins: impl IntoIterator<Item = &'a PluginMetadata>,
    pods_follow: bool,
) -> bool {
    let (mut primary, mut child) = (false, false);
    for metadata in plugins {
        primary |= metadata.primary == *kind;
        child |= metadata.owns_kind(kind)
            || (pods_follow && is_pod(kind) && metadata.owns.iter().any(is_workload));
    }
    primary && child
}

/// The Pod kind.
pub fn pod_kind() -> KindRef {
    KindRef::new("", "v1", "Pod")
}

fn is_pod(kind: &KindRef) -> bool {
    kind.group.is_empty() && kind.version == "v1" && kind.kind == "Pod"
}

/// Where a workload kind keeps the template its Pods are made from.
fn pod_template_pointer(group: &str, kind: &str) -> Option<&'static str> {
    match (group, kind) {
        ("apps", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet") | ("batch", "Job") => {
            Some("/spec/template")
        }
        ("batch", "CronJob") => Some("/spec/jobTemplate/spec/template"),
        _ => None,
    }
}

fn is_workload(kind: &KindRef) -> bool {
    pod_template_pointer(&kind.group, &kind.kind).is_some()
}

/// The pod template of a workload object, when it has one already: the
/// host adds a label to what the plugin applies, never a template of its
/// own.
fn pod_template_mut(object: &mut serde_json::Value) -> Option<&mut serde_json::Value> {
    let api_version = object.get("apiVersion")?.as_str()?;
    let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
    let pointer = pod_template_pointer(group, object.get("kind")?.as_str()?)?;
    object.pointer_mut(pointer).filter(|t| t.is_object())
}

/// Puts the shard label of `bucket` on `object`.
pub fn label(object: &mut serde_json::Value, bucket: &str) {
    let Some(object) = object.as_object_mut() else {
        return;
    };
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| serde_json::json!({}));
    let Some(metadata) = metadata.as_object_mut() else {
        return;
    };
    let labels = metadata
        .entry("labels")
        .or_insert_with(|| serde_json::json!({}));
    if let Some(labels) = labels.as_object_mut() {
        labels.insert(SHARD_LABEL.to_string(), bucket.into());
    }
}

/// The shard label of `bucket` (none: taken off), set by [`SHARD_FIELD_MANAGER`] on the
/// version of `primary` that was read: never on a newer one, and never on
/// one deleted since, which an apply of the label would bring back
/// ([`ClusterBackend::set_label`](crate::cluster::ClusterBackend::set_label)).
/// `None` for an object without a resourceVersion (never stored).
pub fn primary_label<'a>(
    primary: &'a serde_json::Value,
    bucket: Option<&'a str>,
) -> Option<LabelAt<'a>> {
    Some(LabelAt {
        name: SHARD_LABEL,
        value: bucket,
        resource_version: primary
            .pointer("/metadata/resourceVersion")
            .and_then(serde_json::Value::as_str)?,
        field_manager: SHARD_FIELD_MANAGER,
    })
}

/// The shard label `object` carries.
pub fn label_of(object: &serde_json::Value) -> Option<&str> {
    object
        .pointer("/metadata/labels")
        .and_then(|labels| labels.get(SHARD_LABEL))
        .and_then(serde_json::Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reconciler_contract::MapRule;
    use serde_json::json;

    fn kind(k: &str) -> KindRef {
        KindRef::new("example.com", "v1", k)
    }

    fn selection(mine: &[&str], others: &[&str]) -> ShardSelection {
        let buckets = Buckets {
            mine: mine.iter().map(|s| s.to_string()).collect(),
            others: others.iter().map(|s| s.to_string()).collect(),
        };
        ShardSelection::new(
            Arc::new(|_: &PrimaryKey| "001".to_string()),
            Arc::new(RwLock::new(buckets)),
        )
    }

    fn labelled(bucket: Option<&str>) -> serde_json::Value {
        let mut object = json!({"metadata": {"name": "x", "labels": {"app": "web"}}});
        if let Some(bucket) = bucket {
            label(&mut object, bucket);
        }
        object
    }

    #[test]
    fn primaries_of_other_replicas_are_left_out_and_new_ones_come_to_all() {
        let s = selection(&["001", "002"], &["003"]);
        let primaries = s.selector(ShardRole::Primary).unwrap();
        assert!(primaries.matches_object(&labelled(Some("001"))));
        assert!(primaries.matches_object(&labelled(None)), "unlabelled");
        assert!(!primaries.matches_object(&labelled(Some("003"))));
        let children = s.selector(ShardRole::Child).unwrap();
        assert!(children.matches_object(&labelled(Some("002"))));
        assert!(!children.matches_object(&labelled(None)));
        assert!(!children.matches_object(&labelled(Some("003"))));
    }

    #[test]
    fn a_replica_owning_everything_or_nothing() {
        let all = selection(&["001", "002"], &[]);
        assert_eq!(all.selector(ShardRole::Primary), None);
        assert_eq!(all.selector(ShardRole::Child), None);
        let none = selection(&[], &["001"]);
        let children = none.selector(ShardRole::Child).unwrap();
        assert!(!children.matches_object(&labelled(Some("001"))));
        assert!(!children.matches_object(&labelled(None)));
    }

    #[test]
    fn a_kind_is_selected_only_in_one_role_for_every_plugin() {
        let a = PluginMetadata::new("a", "1", kind("A")).owns(kind("Child"));
        let b = PluginMetadata::new("b", "1", kind("B"))
            .owns(kind("Child"))
            .reads(kind("A"), MapRule::None, false);
        let c = PluginMetadata::new("c", "1", kind("C"));
        for pods_follow in [false, true] {
            let role = |k: &str, plugins: &[&PluginMetadata]| {
                role_of(&kind(k), plugins.iter().copied(), pods_follow)
            };
            assert_eq!(role("Child", &[&a, &b]), Some(ShardRole::Child));
            assert_eq!(role("C", &[&a, &c]), Some(ShardRole::Primary));
            // A primary of a, read by b: b must see all of them.
            assert_eq!(role("A", &[&a]), Some(ShardRole::Primary));
            assert_eq!(role("A", &[&a, &b]), None);
            // A primary of one and a child of another: two buckets would apply.
            let d = PluginMetadata::new("d", "1", kind("D")).owns(kind("C"));
            assert_eq!(role("C", &[&c, &d]), None);
            assert_eq!(role("Unknown", &[&a]), None);
        }
    }

    fn pod() -> KindRef {
        KindRef::new("", "v1", "Pod")
    }

    /// The yardsticks side by side: podset owns Deployments,
    /// rollout-schedules has them as its primary.
    #[test]
    fn a_primary_of_one_plugin_and_a_child_of_another_has_two_roles() {
        let deployment = KindRef::new("apps", "v1", "Deployment");
        let podset = PluginMetadata::new("podset", "1", kind("PodSet"))
            .owns(deployment.clone())
            .reads(pod(), MapRule::Label("podset".into()), true);
        let schedules = PluginMetadata::new("rollout-schedules", "1", deployment.clone())
            .owns(kind("RolloutSchedule"));
        let both = [&podset, &schedules];
        assert!(has_two_roles(&deployment, both, false));
        assert!(!has_two_roles(&deployment, [&podset], false));
        assert!(!has_two_roles(&deployment, [&schedules], false));
        assert!(!has_two_roles(&kind("PodSet"), both, false));
        assert!(!has_two_roles(&kind("RolloutSchedule"), both, false));
        // Pods made from labelled templates, and a plugin with Pods as its
        // primary: two roles only when Pods follow.
        let pods = PluginMetadata::new("pods", "1", pod());
        assert!(has_two_roles(&pod(), [&podset, &pods], true));
        assert!(!has_two_roles(&pod(), [&podset, &pods], false));
    }

    #[test]
    fn pods_read_by_a_workload_owner_follow_only_when_asked() {
        let deployment = KindRef::new("apps", "v1", "Deployment");
        let podset = PluginMetadata::new("podset", "1", kind("PodSet"))
            .owns(deployment.clone())
            .reads(pod(), MapRule::Label("podset".into()), true);
        assert_eq!(role_of(&pod(), [&podset], false), None);
        assert_eq!(role_of(&pod(), [&podset], true), Some(ShardRole::Child));
        // A plugin reading Pods without making them: it may read any Pod.
        let watcher =
            PluginMetadata::new("watcher", "1", kind("W")).reads(pod(), MapRule::None, true);
        assert_eq!(role_of(&pod(), [&watcher], true), None);
        assert_eq!(role_of(&pod(), [&podset, &watcher], true), None);
        // Only Pods: another read kind stays whole.
        let reads_config = PluginMetadata::new("c", "1", kind("C"))
            .owns(deployment)
            .reads(KindRef::new("", "v1", "ConfigMap"), MapRule::None, false);
        let config_map = KindRef::new("", "v1", "ConfigMap");
        assert_eq!(role_of(&config_map, [&reads_config], true), None);
    }

    #[test]
    fn pod_templates_are_labelled_only_when_pods_follow() {
        let deployment = || {
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web"},
                "spec": {"template": {"metadata": {"labels": {"app": "web"}}, "spec": {}}},
            })
        };
        let mut plain = deployment();
        selection(&["001"], &[]).label_child(&mut plain, "001", true);
        assert_eq!(label_of(&plain), Some("001"));
        assert_eq!(label_of(&plain["spec"]["template"]), None);

        let following = selection(&["001"], &[]).with_pods_following(true);
        let mut labelled = deployment();
        following.label_child(&mut labelled, "001", true);
        assert_eq!(label_of(&labelled["spec"]["template"]), Some("001"));
        assert_eq!(
            labelled["spec"]["template"]["metadata"]["labels"]["app"],
            "web"
        );

        let mut cron = json!({
            "apiVersion": "batch/v1", "kind": "CronJob",
            "spec": {"jobTemplate": {"spec": {"template": {"spec": {}}}}},
        });
        following.label_child(&mut cron, "00f", true);
        assert_eq!(
            label_of(&cron["spec"]["jobTemplate"]["spec"]["template"]),
            Some("00f")
        );
        // No template in what the plugin applies: none is made up; and a
        // kind without Pods is labelled on itself alone.
        let mut partial =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": 2}});
        following.label_child(&mut partial, "001", true);
        assert_eq!(partial["spec"], json!({"replicas": 2}));
        let mut service = json!({"apiVersion": "v1", "kind": "Service", "spec": {"template": {}}});
        following.label_child(&mut service, "001", true);
        assert_eq!(label_of(&service["spec"]["template"]), None);
    }

    #[test]
    fn a_primary_is_labelled_at_the_version_it_was_read() {
        let primary = json!({"metadata": {"name": "web", "resourceVersion": "42"}});
        let label = primary_label(&primary, Some("00a")).unwrap();
        assert_eq!(
            (label.name, label.value, label.resource_version),
            (SHARD_LABEL, Some("00a"), "42")
        );
        assert!(primary_label(&json!({"metadata": {"name": "new"}}), Some("00a")).is_none());
    }

    #[test]
    fn the_label_is_set_over_anything_a_plugin_put_there() {
        let mut object = json!({"metadata": {"labels": {SHARD_LABEL: "fff"}}});
        label(&mut object, "00a");
        assert_eq!(label_of(&object), Some("00a"));
        let mut bare = json!({"kind": "Deployment"});
        label(&mut bare, "00b");
        assert_eq!(label_of(&bare), Some("00b"));
    }
}
