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

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};

use reconciler_contract::selector::LabelSelector;
use reconciler_contract::{KindRef, PluginMetadata};

use super::work_queue::PrimaryKey;

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
}

impl ShardSelection {
    pub fn new(
        bucket_of: Arc<dyn Fn(&PrimaryKey) -> String + Send + Sync>,
        buckets: Arc<RwLock<Buckets>>,
    ) -> Self {
        Self { bucket_of, buckets }
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

    /// The selector a kind of `role` is watched with now; `None` while this
    /// replica owns every bucket (or the ring is empty).
    pub fn selector(&self, role: ShardRole) -> Option<LabelSelector> {
        let buckets = self.buckets.read().unwrap_or_else(|e| e.into_inner());
        if buckets.others.is_empty() {
            return None;
        }
        let list = |set: &BTreeSet<String>| set.iter().cloned().collect::<Vec<_>>().join(",");
        let text = match role {
            ShardRole::Primary => format!("{SHARD_LABEL} notin ({})", list(&buckets.others)),
            ShardRole::Child if buckets.mine.is_empty() => {
                format!("{SHARD_LABEL} in ({NO_BUCKET})")
            }
            ShardRole::Child => format!("{SHARD_LABEL} in ({})", list(&buckets.mine)),
        };
        match LabelSelector::parse(&text) {
            Ok(selector) => Some(selector),
            Err(e) => {
                // Bucket values are three hex digits: this cannot happen,
                // and watching whole is correct, only dearer.
                tracing::error!("shard selector not built, watching whole: {e}");
                None
            }
        }
    }
}

/// How `kind` is selected, given every plugin serving it: as a primary
/// when it is the primary of each plugin declaring it, as a child when it
/// is a child of each; otherwise (a read of any, or both roles) whole.
pub fn role_of<'a>(
    kind: &KindRef,
    plugins: impl IntoIterator<Item = &'a PluginMetadata>,
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
            _ => return None,
        };
        if role.is_some_and(|r| r != this) {
            return None;
        }
        role = Some(this);
    }
    role
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

/// What the host applies, as [`SHARD_FIELD_MANAGER`], to label a primary:
/// its identity and the label, nothing else.
pub fn labelled_primary(primary: &serde_json::Value, bucket: &str) -> serde_json::Value {
    let field = |pointer: &str| primary.pointer(pointer).cloned();
    let mut metadata = serde_json::Map::new();
    for name in ["name", "namespace"] {
        if let Some(value) = field(&format!("/metadata/{name}")) {
            metadata.insert(name.to_string(), value);
        }
    }
    let mut object = serde_json::json!({
        "apiVersion": field("/apiVersion"),
        "kind": field("/kind"),
        "metadata": metadata,
    });
    label(&mut object, bucket);
    object
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
        assert_eq!(role_of(&kind("Child"), [&a, &b]), Some(ShardRole::Child));
        assert_eq!(role_of(&kind("C"), [&a, &c]), Some(ShardRole::Primary));
        // A primary of a, read by b: b must see all of them.
        assert_eq!(role_of(&kind("A"), [&a]), Some(ShardRole::Primary));
        assert_eq!(role_of(&kind("A"), [&a, &b]), None);
        // A primary of one and a child of another: two buckets would apply.
        let d = PluginMetadata::new("d", "1", kind("D")).owns(kind("C"));
        assert_eq!(role_of(&kind("C"), [&c, &d]), None);
        assert_eq!(role_of(&kind("Unknown"), [&a]), None);
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
