//! Which primary objects a change concerns.
//!
//! A change to a primary concerns itself; to an owned child, its controller
//! owner of the primary kind; to an object of a read kind, whatever the
//! plugin's map rule names. The primary named is in the object's own
//! namespace when the primary kind is namespaced; when it is cluster-scoped
//! the primary has no namespace, wherever the object lies (an ownerReference
//! names no namespace).

use reconciler_contract::object_meta::MetadataField;
use reconciler_contract::{KindRef, MapRule, PluginMetadata};
use serde_json::Value;

use super::work_queue::PrimaryKey;
use crate::cluster::KindScope;

fn str_at<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object.pointer(pointer).and_then(Value::as_str)
}

/// The primaries of `metadata`'s plugin, whose primary kind has
/// `primary_scope`, that a change to `object` concerns.
pub fn primaries_for(
    metadata: &PluginMetadata,
    primary_scope: KindScope,
    object: &Value,
) -> Vec<PrimaryKey> {
    let Some(kind) = KindRef::of_object(object) else {
        return Vec::new();
    };
    let namespace = match primary_scope {
        KindScope::Namespaced => str_at(object, "/metadata/namespace").map(str::to_string),
        KindScope::Cluster => None,
    };
    let key = |name: &str| PrimaryKey {
        namespace: namespace.clone(),
        name: name.to_string(),
    };
    let mut keys = Vec::new();
    if kind == metadata.primary
        && let Some(name) = str_at(object, "/metadata/name")
    {
        keys.push(key(name));
    }
    if metadata.owns_kind(&kind) {
        keys.extend(controller_of(object, &metadata.primary).map(|name| key(&name)));
    }
    for read in metadata.reads.iter().filter(|r| r.kind == kind) {
        let name = match &read.maps_by {
            MapRule::Label(k) => object
                .metadata_field("labels")
                .and_then(|l| l.get(k))
                .and_then(Value::as_str),
            MapRule::Annotation(k) => object
                .metadata_field("annotations")
                .and_then(|a| a.get(k))
                .and_then(Value::as_str),
            MapRule::SameName => str_at(object, "/metadata/name"),
            MapRule::None => None,
        };
        keys.extend(name.filter(|n| !n.is_empty()).map(key));
    }
    keys
}

/// The name of the controller owner of `object` of kind `owner_kind`.
fn controller_of(object: &Value, owner_kind: &KindRef) -> Option<String> {
    let refs = object.metadata_field("ownerReferences")?.as_array()?;
    refs.iter()
        .find(|r| {
            let text = |field: &str| r.get(field).and_then(Value::as_str);
            r.get("controller").and_then(Value::as_bool) == Some(true)
                && text("apiVersion")
                    .zip(text("kind"))
                    .is_some_and(|(api_version, kind)| {
                        KindRef::from_api_version(api_version, kind).same_group_kind(owner_kind)
                    })
        })
        .and_then(|r| r.get("name")?.as_str().map(str::to_string))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn metadata() -> PluginMetadata {
        PluginMetadata::new(
            "podset",
            "1",
            KindRef::new("example.com", "v1alpha1", "PodSet"),
        )
        .owns(KindRef::new("apps", "v1", "Deployment"))
        .reads(
            KindRef::new("", "v1", "Pod"),
            MapRule::Label("podset".into()),
            true,
        )
        .reads(
            KindRef::new("", "v1", "ConfigMap"),
            MapRule::SameName,
            false,
        )
        .reads(KindRef::new("", "v1", "Secret"), MapRule::None, false)
    }

    fn names(object: Value) -> Vec<String> {
        primaries_for(&metadata(), KindScope::Namespaced, &object)
            .into_iter()
            .map(|k| k.to_string())
            .collect()
    }

    #[test]
    fn each_role_maps_to_its_primary() {
        assert_eq!(
            names(
                json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet", "metadata": {"name": "a", "namespace": "d"}})
            ),
            ["d/a"]
        );
        let owned = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "namespace": "d",
            "ownerReferences": [{"apiVersion": "example.com/v1alpha1", "kind": "PodSet", "name": "a", "uid": "u", "controller": true}]}});
        assert_eq!(names(owned), ["d/a"]);
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d", "labels": {"podset": "a"}}});
        assert_eq!(names(pod), ["d/a"]);
        assert_eq!(
            names(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "d"}})
            ),
            ["d/a"]
        );
        assert!(names(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a", "namespace": "d"}})).is_empty());
    }

    #[test]
    fn a_cluster_scoped_primarys_namespaced_children_and_reads_map_to_it() {
        let tenants =
            PluginMetadata::new("tenants", "1", KindRef::new("example.com", "v1", "Tenant"))
                .owns(KindRef::new("", "v1", "ConfigMap"))
                .reads(
                    KindRef::new("", "v1", "Secret"),
                    MapRule::Label("tenant".into()),
                    false,
                );
        let child = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "team-a",
            "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "Tenant", "name": "acme", "uid": "u", "controller": true}]}});
        let read = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "team-b",
            "labels": {"tenant": "acme"}}});
        let acme = PrimaryKey {
            namespace: None,
            name: "acme".into(),
        };
        for object in [child, read] {
            assert_eq!(
                primaries_for(&tenants, KindScope::Cluster, &object),
                std::slice::from_ref(&acme),
                "{object}"
            );
        }
    }

    #[test]
    fn a_child_maps_to_its_owner_whatever_version_the_reference_names() {
        // Made when the plugin served v1; it serves v1alpha1 of the same kind now.
        let owned = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "namespace": "d",
            "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "PodSet", "name": "a", "uid": "u", "controller": true}]}});
        assert_eq!(names(owned), ["d/a"]);
        let other_group = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "namespace": "d",
            "ownerReferences": [{"apiVersion": "other.com/v1alpha1", "kind": "PodSet", "name": "a", "uid": "u", "controller": true}]}});
        assert!(names(other_group).is_empty());
    }

    #[test]
    fn unrelated_objects_map_to_nothing() {
        let unlabelled =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d"}});
        assert!(names(unlabelled).is_empty());
        let not_controller = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "namespace": "d",
            "ownerReferences": [{"apiVersion": "example.com/v1alpha1", "kind": "PodSet", "name": "a", "uid": "u"}]}});
        assert!(names(not_controller).is_empty());
    }
}
