//! The cache's answers: what it holds, lists, finds and refuses.

use serde_json::json;

use super::*;
use crate::json_depth::READABLE_DEPTH;

fn pod(ns: &str, name: &str, app: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": ns, "name": name, "labels": {"app": app}}})
}

/// Three `app=web` Pods over namespaces a and b, one `app=db` in a.
fn web_and_db_pods() -> MemoryCache {
    let mut cache = MemoryCache::new();
    for p in [
        pod("a", "z", "web"),
        pod("a", "b", "web"),
        pod("b", "c", "web"),
        pod("a", "d", "db"),
    ] {
        cache.insert(p).unwrap();
    }
    cache
}

#[test]
fn list_filters_by_kind_namespace_and_selector_in_name_order() {
    let cache = web_and_db_pods();
    let kind = KindRef::new("", "v1", "Pod");
    let web = LabelSelector::parse("app=web").unwrap();
    let everything = LabelSelector::everything();
    let names: Vec<_> = cache
        .list(&kind, Some("a"), &web)
        .filter_map(|o| name_of(&o).map(str::to_string))
        .collect();
    assert_eq!(names, ["b", "z"]);
    let all: Vec<_> = cache
        .list(&kind, None, &everything)
        .filter_map(|o| name_of(&o).map(str::to_string))
        .collect();
    assert_eq!(all, ["b", "d", "z", "c"]);
    assert!(cache.get(&kind, Some("b"), "c").is_some());
    assert!(cache.get(&kind, Some("a"), "c").is_none());
}

/// A lookup by borrowed parts must order keys exactly as the map does,
/// or it would miss objects the map holds.
#[test]
fn borrowed_keys_order_as_owned_keys_and_find_every_entry() {
    let kinds = [
        KindRef::new("", "v1", "Pod"),
        KindRef::new("apps", "v1", "Deployment"),
        KindRef::new("apps", "v1beta1", "Deployment"),
        KindRef::new("", "v1", "Namespace"),
    ];
    let mut keys: Vec<EntryKey> = Vec::new();
    for kind in &kinds {
        for namespace in [None, Some(""), Some("a"), Some("a-b"), Some("b")] {
            for name in ["", "x", "x.y", "y"] {
                keys.push((
                    kind.clone(),
                    namespace.map(str::to_string),
                    name.to_string(),
                ));
            }
        }
    }
    let mut by_owned = keys.clone();
    by_owned.sort();
    let mut by_parts = keys.clone();
    by_parts.sort_by(|a, b| Ord::cmp(a as &dyn EntryKeyParts, b as &dyn EntryKeyParts));
    assert_eq!(by_owned, by_parts);

    let mut cache = MemoryCache::new();
    for (kind, namespace, name) in keys.iter().filter(|k| !k.2.is_empty()) {
        let mut object = json!({"apiVersion": kind.api_version(), "kind": kind.kind,
            "metadata": {"name": name}});
        if let Some(ns) = namespace {
            object["metadata"]["namespace"] = json!(ns);
        }
        cache.insert(object).unwrap();
    }
    for (kind, namespace, name) in keys.iter().filter(|k| !k.2.is_empty()) {
        let found = cache.get(kind, namespace.as_deref(), name).unwrap();
        assert_eq!(found["metadata"]["name"], json!(name));
        assert_eq!(namespace_of(&found), namespace.as_deref());
    }
    assert!(cache.get(&kinds[0], Some("c"), "x").is_none());
    assert!(cache.remove(&kinds[1], Some("a"), "x.y"));
    assert!(!cache.remove(&kinds[1], Some("a"), "x.y"));
    assert!(cache.get(&kinds[1], Some("a"), "x.y").is_none());
}

#[test]
fn names_are_those_a_list_with_the_same_selector_gives() {
    let mut cache = web_and_db_pods();
    cache
        .insert(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "a", "name": "web"}}))
        .unwrap();
    let kind = KindRef::new("", "v1", "Pod");
    for selector in ["app=web", "app!=web", "app in (db)", ""] {
        let selector = LabelSelector::parse(selector).unwrap();
        let listed: Vec<(Option<String>, String)> = cache
            .list(&kind, None, &selector)
            .map(|o| {
                (
                    namespace_of(&o).map(str::to_string),
                    name_of(&o).unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(cache.names(&kind, &selector), listed);
    }
    let web = LabelSelector::parse("app=web").unwrap();
    let n = |ns: &str, name: &str| (Some(ns.to_string()), name.to_string());
    assert_eq!(
        cache.names(&kind, &web),
        [n("a", "b"), n("a", "z"), n("b", "c")]
    );
}

#[test]
fn a_bounded_list_stops_once_its_text_passes_the_maximum() {
    let mut cache = MemoryCache::new();
    for name in ["a", "b", "c"] {
        cache.insert(pod("ns", name, "web")).unwrap();
    }
    let kind = KindRef::new("", "v1", "Pod");
    let one = cache
        .get_json(&kind, Some("ns"), "a", Projection::Full)
        .unwrap()
        .len();
    let two = cache
        .list_json_within(&kind, None, "", Projection::Full, 2 * one)
        .unwrap_err();
    assert_eq!(
        two,
        ListJsonError::TooLarge {
            listed: 2,
            max_bytes: 2 * one
        }
    );
    let all = cache
        .list_json_within(&kind, None, "app=web", Projection::Full, 3 * one)
        .unwrap();
    assert_eq!(
        all,
        cache
            .list_json(&kind, None, "app=web", Projection::Full)
            .unwrap()
    );
    assert!(matches!(
        cache.list_json_within(&kind, None, "app in (", Projection::Full, 1),
        Err(ListJsonError::Selector(_))
    ));
}

#[test]
fn a_list_by_label_follows_relabels_and_removals() {
    let mut cache = MemoryCache::new();
    let kind = KindRef::new("", "v1", "Pod");
    for i in 0..200 {
        cache.insert(pod("a", &format!("p{i:03}"), "web")).unwrap();
    }
    cache.insert(pod("b", "other-ns", "db")).unwrap();
    cache.insert(pod("a", "p007", "db")).unwrap();
    cache.insert(pod("a", "p100", "db")).unwrap();
    cache.remove(&kind, Some("a"), "p100");
    let names = |selector: &str, ns: Option<&str>| -> Vec<String> {
        let selector = LabelSelector::parse(selector).unwrap();
        cache
            .list(&kind, ns, &selector)
            .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names("app=db", Some("a")), ["p007"]);
    assert_eq!(names("app in (db)", None), ["p007", "other-ns"]);
    assert_eq!(names("app=web", Some("a")).len(), 198);
    assert!(!names("app=web", Some("a")).contains(&"p007".to_string()));
    assert_eq!(names("app=db,app!=db", None), Vec::<String>::new());
    assert_eq!(names("app=nothing", None), Vec::<String>::new());
}

/// The label index is read as one range per label and namespace: the
/// names that sort right next to them (a namespace or a value that
/// begins with the same letters) stay outside it.
#[test]
fn a_list_by_label_keeps_to_its_namespace_and_value_beside_their_neighbours() {
    let mut cache = MemoryCache::new();
    let kind = KindRef::new("", "v1", "Pod");
    for ns in ["a", "a-b", "ab", "b"] {
        for app in ["web", "web2", "we"] {
            cache.insert(pod(ns, &format!("{app}-1"), app)).unwrap();
            cache.insert(pod(ns, &format!("{app}-2"), app)).unwrap();
        }
    }
    let listed = |selector: &str, ns: Option<&str>| -> Vec<String> {
        let selector = LabelSelector::parse(selector).unwrap();
        cache
            .list(&kind, ns, &selector)
            .map(|p| format!("{}/{}", namespace_of(&p).unwrap(), name_of(&p).unwrap()))
            .collect()
    };
    assert_eq!(listed("app=web", Some("a")), ["a/web-1", "a/web-2"]);
    assert_eq!(listed("app=we", Some("ab")), ["ab/we-1", "ab/we-2"]);
    assert_eq!(
        listed("app=web", None),
        [
            "a/web-1",
            "a/web-2",
            "a-b/web-1",
            "a-b/web-2",
            "ab/web-1",
            "ab/web-2",
            "b/web-1",
            "b/web-2"
        ]
    );
    assert_eq!(listed("app=web", Some("c")), Vec::<String>::new());
    // Resumed after an object, as the next page of a list is.
    let after = |ns: Option<&str>, cursor: (&str, &str)| -> Vec<String> {
        let cursor = ListCursor {
            namespace: Some(cursor.0.to_string()),
            name: cursor.1.to_string(),
        };
        cache
            .with_label(&kind, "app=web", ns, Some(&cursor))
            .map(|((_, ns, name), _)| format!("{}/{name}", ns.as_deref().unwrap()))
            .collect()
    };
    assert_eq!(after(Some("a"), ("a", "web-1")), ["a/web-2"]);
    assert_eq!(after(Some("a"), ("a", "web-2")), Vec::<String>::new());
    assert_eq!(
        after(None, ("a-b", "web-2")),
        ["ab/web-1", "ab/web-2", "b/web-1", "b/web-2"]
    );
    // A cursor from past the namespace: nothing after it, and no panic.
    assert_eq!(after(Some("a"), ("b", "web-1")), Vec::<String>::new());
}

#[test]
fn the_held_version_is_told_by_resource_version_and_relists_keep_labels() {
    let mut cache = MemoryCache::new();
    let kind = KindRef::new("", "v1", "Pod");
    let mut v5 = pod("a", "p", "web");
    v5["metadata"]["resourceVersion"] = json!("5");
    assert!(!cache.holds_version(&v5), "nothing held yet");
    cache.insert(v5.clone()).unwrap();
    assert!(cache.holds_version(&v5));
    let mut v6 = v5.clone();
    v6["metadata"]["resourceVersion"] = json!("6");
    v6["status"] = json!({"phase": "Running"});
    assert!(!cache.holds_version(&v6), "a newer version is not held");
    // Same labels, new content: still listed by its label, as v6.
    cache.insert(v6.clone()).unwrap();
    let web = LabelSelector::parse("app=web").unwrap();
    let listed: Vec<Value> = cache.list(&kind, Some("a"), &web).collect();
    assert_eq!(listed, [v6.clone()]);
    assert!(!cache.holds_version(&v5), "the old version is gone");
    // The same version whole after metadata only (a watch widened).
    let mut whole = pod("a", "r", "web");
    whole["metadata"]["resourceVersion"] = json!("9");
    whole["spec"] = json!({"containers": [{"image": "busybox"}]});
    cache.insert(metadata_only(&whole)).unwrap();
    assert!(cache.holds_version(&metadata_only(&whole)));
    assert!(!cache.holds_version(&whole), "held as metadata only");
    cache.insert(whole.clone()).unwrap();
    assert!(cache.holds_version(&whole));
    assert!(!cache.holds_version(&metadata_only(&whole)), "held whole");
    // Without a resourceVersion nothing tells versions apart.
    let bare = pod("a", "q", "web");
    cache.insert(bare.clone()).unwrap();
    assert!(!cache.holds_version(&bare));
}

#[test]
fn metadata_only_text_is_the_projection_written_out() {
    let objects = [
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p",
            "managedFields": [{"manager": "m"}], "labels": {"a": "b"}}, "spec": {"x": 1}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
        json!({"kind": "Pod", "spec": {}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": "odd"}),
        json!({"metadata": {"managedFields": []}}),
    ];
    for object in objects {
        assert_eq!(
            metadata_only_json(&object),
            metadata_only(&object).to_string(),
            "{object}"
        );
    }
}

#[test]
fn insert_replaces_the_same_object_and_refuses_nameless_ones() {
    let mut cache = MemoryCache::new();
    cache.insert(pod("a", "p", "web")).unwrap();
    cache.insert(pod("a", "p", "db")).unwrap();
    assert_eq!(cache.len(), 1);
    let err = cache
        .insert(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}}))
        .unwrap_err();
    assert!(err.to_string().contains("metadata.name"), "{err}");
}

#[test]
fn an_object_too_deep_to_read_back_is_refused_not_stored() {
    let mut cache = MemoryCache::new();
    let mut deep = json!({});
    // With the object and its `status`, READABLE_DEPTH + 1 levels.
    for _ in 0..READABLE_DEPTH - 1 {
        deep = json!({ "a": deep });
    }
    let mut object = pod("a", "p", "web");
    object["status"] = deep;
    let err = cache.insert(object).unwrap_err();
    assert!(err.to_string().contains("nested 128 levels deep"), "{err}");
    assert!(
        cache
            .get(&KindRef::new("", "v1", "Pod"), Some("a"), "p")
            .is_none()
    );
}

#[test]
fn children_are_found_by_controller_owner_reference() {
    let owner = json!({"apiVersion": "x/v1", "kind": "Set", "metadata": {"namespace": "a", "name": "s", "uid": "u1"}});
    let owned = |name: &str, uid: &str, controller: bool| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"namespace": "a", "name": name,
            "ownerReferences": [{"apiVersion": "x/v1", "kind": "Set", "name": "s", "uid": uid, "controller": controller}]}})
    };
    let mut cache = MemoryCache::new();
    cache.insert(owned("mine", "u1", true)).unwrap();
    cache.insert(owned("old-owner", "u0", true)).unwrap();
    cache.insert(owned("not-controller", "u1", false)).unwrap();
    let owns = [KindRef::new("apps", "v1", "Deployment")];
    let names: Vec<_> = cache
        .children_of(&owner, &owns)
        .filter_map(|o| name_of(&o).map(str::to_string))
        .collect();
    assert_eq!(names, ["mine"]);
}
