//! Validation of a plugin's response, all of it, before anything is applied.
//!
//! The host trusts nothing a plugin returns: a response that would write an
//! undeclared kind, reach into another namespace, set a metadata field the
//! host or the API server owns, or carry metadata the API server would refuse
//! is refused whole, with a message that names the offending item. Checking
//! every object as the API server would, before applying the first, is what
//! keeps a response from being applied halfway. Only a [`ValidResponse`] can
//! reach the apply step, so a half-checked response cannot be applied by
//! mistake.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::memory_cache::{name_of, namespace_of};
use crate::{Event, ObjectRef, ReconcileResponse};
use crate::{KindRef, PluginMetadata};
use serde_json::{Map, Value};

use crate::names::{check_dns_label, check_kind, check_object_name};

mod host_owned_fields;
mod json_type;
mod object_metadata;

use host_owned_fields::refuse_host_owned;
use json_type::json_type;
use object_metadata::check_metadata;

/// A response that passed every rule. Objects carry their namespace (the
/// primary's where the plugin left it out).
#[derive(Clone, Debug, PartialEq)]
pub struct ValidResponse {
    pub apply: Vec<DesiredObject>,
    pub delete: Vec<ObjectRef>,
    pub status: Option<Map<String, Value>>,
    pub events: Vec<Event>,
    pub requeue_after: Option<Duration>,
    pub finalized: bool,
}

/// An object to apply, and whether the plugin owns it or only writes to it.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredObject {
    pub kind: KindRef,
    pub role: WriteRole,
    pub object: Value,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteRole {
    /// A child: gets the controller ownerReference, pruned when not returned.
    Owned,
    /// Patched with the plugin's field manager; never owned, never pruned.
    Written,
}

/// The first rule a response broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid response: {item}: {reason}")]
pub struct InvalidResponse {
    /// Which item, e.g. `apply[1] (apps/v1 Deployment web)` or `status`.
    pub item: String,
    pub reason: String,
}

/// Checks `response` for the plugin `metadata` reconciling a primary in
/// namespace `primary_ns` (`None` for a cluster-scoped primary).
pub fn validate_response(
    metadata: &PluginMetadata,
    primary_ns: Option<&str>,
    response: ReconcileResponse,
) -> Result<ValidResponse, InvalidResponse> {
    let mut seen = BTreeSet::new();
    let mut apply = Vec::with_capacity(response.apply.len());
    for (i, text) in response.apply.iter().enumerate() {
        let desired = check_object(metadata, primary_ns, i, text)?;
        let key = (
            desired.kind.clone(),
            namespace_of(&desired.object).map(str::to_string),
            name_of(&desired.object).unwrap_or_default().to_string(),
        );
        if !seen.insert(key) {
            return Err(InvalidResponse {
                item: describe(i, &desired.kind, &desired.object),
                reason: "the same object appears twice in apply".into(),
            });
        }
        apply.push(desired);
    }

    let mut delete = Vec::with_capacity(response.delete.len());
    for (i, mut r) in response.delete.into_iter().enumerate() {
        let item = format!("delete[{i}] ({} {} {})", r.api_version, r.kind, r.name);
        let kind = KindRef::from_api_version(&r.api_version, &r.kind);
        if !metadata.owns_kind(&kind) {
            return Err(InvalidResponse {
                item,
                reason: format!("{kind} is not a kind this plugin owns"),
            });
        }
        let fail = |reason: String| InvalidResponse {
            item: item.clone(),
            reason,
        };
        check_object_name(&kind, &r.name).map_err(|e| fail(format!("name {e}")))?;
        if let Some(ns) = &r.namespace {
            check_dns_label(ns).map_err(|e| fail(format!("namespace {e}")))?;
        }
        r.namespace = resolve_namespace(primary_ns, r.namespace.as_deref()).map_err(fail)?;
        delete.push(r);
    }

    let status = match response.status {
        None => None,
        Some(text) => match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(map)) => Some(map),
            Ok(other) => {
                return Err(InvalidResponse {
                    item: "status".into(),
                    reason: format!("must be a JSON object, got {}", json_type(&other)),
                });
            }
            Err(e) => {
                return Err(InvalidResponse {
                    item: "status".into(),
                    reason: format!("not valid JSON: {e}"),
                });
            }
        },
    };

    for (i, e) in response.events.iter().enumerate() {
        let item = format!("events[{i}]");
        if check_kind(&e.reason).is_err() || e.reason.len() > 128 {
            return Err(InvalidResponse {
                item,
                reason: format!(
                    "reason {:?} must be UpperCamelCase, at most 128 characters",
                    e.reason
                ),
            });
        }
        if e.message.len() > 1024 {
            return Err(InvalidResponse {
                item,
                reason: "message is over 1024 characters".into(),
            });
        }
    }

    Ok(ValidResponse {
        apply,
        delete,
        status,
        events: response.events,
        requeue_after: response.requeue_after_ms.map(Duration::from_millis),
        finalized: response.finalized,
    })
}

fn check_object(
    metadata: &PluginMetadata,
    primary_ns: Option<&str>,
    i: usize,
    text: &str,
) -> Result<DesiredObject, InvalidResponse> {
    let anonymous = |reason: String| InvalidResponse {
        item: format!("apply[{i}]"),
        reason,
    };
    let mut object: Value =
        serde_json::from_str(text).map_err(|e| anonymous(format!("not valid JSON: {e}")))?;
    if !object.is_object() {
        return Err(anonymous(format!(
            "must be a JSON object, got {}",
            json_type(&object)
        )));
    }
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let kind_name = object
        .get("kind")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let (Some(api_version), Some(kind_name)) = (api_version, kind_name) else {
        return Err(anonymous(
            "apiVersion and kind must be non-empty strings".into(),
        ));
    };
    let kind = KindRef::from_api_version(api_version, kind_name);
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        let got = object.get("metadata").map_or("nothing", json_type);
        return Err(anonymous(format!(
            "{kind}: metadata must be a JSON object, got {got}"
        )));
    };
    let name = match meta.get("name") {
        Some(Value::String(name)) if !name.is_empty() => name.clone(),
        Some(Value::Null) | None if meta.contains_key("generateName") => {
            return Err(anonymous(format!(
                "{kind} has metadata.generateName but no metadata.name: the host applies, compares and prunes objects by their name; set metadata.name"
            )));
        }
        Some(Value::String(_) | Value::Null) | None => {
            return Err(anonymous(format!("{kind} has no metadata.name")));
        }
        Some(other) => {
            return Err(anonymous(format!(
                "{kind}: metadata.name must be a string, got {}",
                json_type(other)
            )));
        }
    };
    let item = format!("apply[{i}] ({kind} {name})");
    let fail = |reason: String| InvalidResponse {
        item: item.clone(),
        reason,
    };
    let role = if metadata.owns_kind(&kind) {
        WriteRole::Owned
    } else if metadata.writes_kind(&kind) {
        WriteRole::Written
    } else {
        return Err(fail(format!("{kind} is not declared in owns or writes")));
    };
    refuse_host_owned(meta).map_err(fail)?;
    check_metadata(&kind, &name, meta).map_err(fail)?;
    let declared_ns = meta.get("namespace").and_then(Value::as_str);
    if let Some(ns) = resolve_namespace(primary_ns, declared_ns).map_err(fail)? {
        meta.insert("namespace".into(), Value::String(ns));
    }
    Ok(DesiredObject { kind, role, object })
}

/// A namespaced primary confines its plugin to its own namespace; an absent
/// namespace means the primary's.
fn resolve_namespace(
    primary_ns: Option<&str>,
    declared: Option<&str>,
) -> Result<Option<String>, String> {
    match (primary_ns, declared) {
        (Some(p), None) => Ok(Some(p.to_string())),
        (Some(p), Some(d)) if p == d => Ok(Some(p.to_string())),
        (Some(p), Some(d)) => Err(format!(
            "namespace {d:?} is not the primary's namespace {p:?}"
        )),
        (None, d) => Ok(d.map(str::to_string)),
    }
}

fn describe(i: usize, kind: &KindRef, object: &Value) -> String {
    format!(
        "apply[{i}] ({kind} {})",
        name_of(object).unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use crate::EventType;
    use crate::MapRule;
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
        .writes(KindRef::new("", "v1", "ConfigMap"))
    }

    const PRIMARY_NS: Option<&str> = Some("team");

    fn deployment(ns: Option<&str>) -> String {
        let mut d =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}});
        if let Some(ns) = ns {
            d["metadata"]["namespace"] = json!(ns);
        }
        d.to_string()
    }

    fn response(apply: Vec<String>) -> ReconcileResponse {
        ReconcileResponse {
            apply,
            ..Default::default()
        }
    }

    #[test]
    fn a_valid_response_gets_the_primary_namespace_and_roles() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "team"}});
        let mut r = response(vec![deployment(None), cm.to_string()]);
        r.status = Some(r#"{"podNames":[]}"#.into());
        r.events.push(Event {
            event_type: EventType::Normal,
            reason: "Created".into(),
            message: "ok".into(),
        });
        r.requeue_after_ms = Some(1500);
        let valid = validate_response(&metadata(), PRIMARY_NS, r).unwrap();
        assert_eq!(valid.apply[0].object["metadata"]["namespace"], "team");
        assert_eq!(valid.apply[0].role, WriteRole::Owned);
        assert_eq!(valid.apply[1].role, WriteRole::Written);
        assert_eq!(valid.requeue_after, Some(Duration::from_millis(1500)));
        assert_eq!(valid.status.unwrap()["podNames"], json!([]));
    }

    #[test]
    fn each_broken_rule_names_the_item() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}).to_string();
        let nameless =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {}}).to_string();
        let kindless = json!({"metadata": {"name": "x"}}).to_string();
        let mut cases: Vec<(ReconcileResponse, &str, &str)> = vec![
            (
                response(vec![pod]),
                "apply[0] (v1 Pod p)",
                "not declared in owns or writes",
            ),
            (
                response(vec![deployment(Some("other"))]),
                "apply[0] (apps/v1 Deployment web)",
                "not the primary's namespace",
            ),
            (response(vec![nameless]), "apply[0]", "no metadata.name"),
            (response(vec![kindless]), "apply[0]", "apiVersion and kind"),
            (
                response(vec!["[1,2]".into()]),
                "apply[0]",
                "must be a JSON object",
            ),
            (
                response(vec![deployment(None), deployment(Some("team"))]),
                "apply[1] (apps/v1 Deployment web)",
                "twice",
            ),
            (
                ReconcileResponse {
                    status: Some("[]".into()),
                    ..Default::default()
                },
                "status",
                "must be a JSON object, got an array",
            ),
            (
                ReconcileResponse {
                    delete: vec![ObjectRef {
                        api_version: "v1".into(),
                        kind: "Pod".into(),
                        namespace: None,
                        name: "p".into(),
                    }],
                    ..Default::default()
                },
                "delete[0] (v1 Pod p)",
                "not a kind this plugin owns",
            ),
            (
                ReconcileResponse {
                    events: vec![Event {
                        event_type: EventType::Warning,
                        reason: "not camel".into(),
                        message: String::new(),
                    }],
                    ..Default::default()
                },
                "events[0]",
                "UpperCamelCase",
            ),
        ];
        cases.extend(object_metadata_cases());
        for (r, item, reason) in cases {
            let err = validate_response(&metadata(), PRIMARY_NS, r).unwrap_err();
            assert_eq!(err.item, item, "{err}");
            assert!(err.reason.contains(reason), "{err}");
        }
    }

    /// A Deployment `web` with `metadata` merged into its own.
    fn deployment_with(metadata: Value) -> String {
        let mut d =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}});
        if let (Some(meta), Value::Object(extra)) = (d["metadata"].as_object_mut(), metadata) {
            meta.extend(extra);
        }
        d.to_string()
    }

    /// A written ConfigMap `cfg` with `metadata` merged into its own.
    fn config_map_with(metadata: Value) -> String {
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}});
        if let (Some(meta), Value::Object(extra)) = (cm["metadata"].as_object_mut(), metadata) {
            meta.extend(extra);
        }
        cm.to_string()
    }

    /// One case per rule on an object's metadata: the fields the host owns
    /// (on owned and written kinds alike) and the API server's rules.
    fn object_metadata_cases() -> Vec<(ReconcileResponse, &'static str, &'static str)> {
        let web = "apply[0] (apps/v1 Deployment web)";
        let cfg = "apply[0] (v1 ConfigMap cfg)";
        let stranger = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "victim",
            "uid": "3f1c2b8e-0000-4000-8000-000000000001"}]);
        vec![
            (
                response(vec![config_map_with(json!({"ownerReferences": stranger}))]),
                cfg,
                "metadata.ownerReferences is set by the host (the controller reference of owned kinds); a plugin may not set it",
            ),
            (
                response(vec![deployment_with(json!({"ownerReferences": []}))]),
                web,
                "metadata.ownerReferences is set by the host",
            ),
            (
                response(vec![deployment_with(json!({"finalizers": ["example.com/stuck"]}))]),
                web,
                "metadata.finalizers is set by the host",
            ),
            (
                response(vec![config_map_with(json!({"uid": "3f1c2b8e"}))]),
                cfg,
                "metadata.uid is set by the API server",
            ),
            (
                response(vec![deployment_with(json!({"resourceVersion": "42"}))]),
                web,
                "metadata.resourceVersion is set by the API server",
            ),
            (
                response(vec![deployment_with(json!({"managedFields": []}))]),
                web,
                "metadata.managedFields is kept by the API server",
            ),
            (
                response(vec![deployment_with(json!({"deletionTimestamp": "2020-01-01T00:00:00Z"}))]),
                web,
                "metadata.deletionTimestamp is set by the API server",
            ),
            (
                response(vec![deployment_with(json!({"deletionGracePeriodSeconds": 0}))]),
                web,
                "metadata.deletionGracePeriodSeconds is set by the API server",
            ),
            (
                response(vec![deployment_with(json!({"generation": 7}))]),
                web,
                "metadata.generation is set by the API server",
            ),
            (
                response(vec![deployment_with(json!({"creationTimestamp": "2020-01-01T00:00:00Z"}))]),
                web,
                "metadata.creationTimestamp is set by the API server",
            ),
            (
                response(vec![deployment_with(json!({"selfLink": "/apis/apps/v1/x"}))]),
                web,
                "metadata.selfLink is set by the API server",
            ),
            (
                response(vec![
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": "web"}).to_string(),
                ]),
                "apply[0]",
                "apps/v1 Deployment: metadata must be a JSON object, got a string",
            ),
            (
                response(vec![
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": 7}}).to_string(),
                ]),
                "apply[0]",
                "metadata.name must be a string, got a number",
            ),
            (
                response(vec![
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"generateName": "web-"}}).to_string(),
                ]),
                "apply[0]",
                "has metadata.generateName but no metadata.name",
            ),
            (
                response(vec![deployment_with(json!({"generateName": "web-"}))]),
                web,
                "metadata.generateName is not supported",
            ),
            (
                response(vec![deployment_with(json!({"name": "Web"}))]),
                "apply[0] (apps/v1 Deployment Web)",
                "metadata.name \"Web\" must be lowercase",
            ),
            (
                response(vec![deployment_with(json!({"namespace": 5}))]),
                web,
                "metadata.namespace must be a string, got a number",
            ),
            (
                response(vec![deployment_with(json!({"labels": {"tier": 3}}))]),
                web,
                "metadata.labels[\"tier\"] must be a string, got a number",
            ),
            (
                response(vec![deployment_with(json!({"labels": {"bad key!": "x"}}))]),
                web,
                "metadata.labels key \"bad key!\"",
            ),
            (
                response(vec![deployment_with(json!({"labels": {"tier": "-x"}}))]),
                web,
                "metadata.labels[\"tier\"] value \"-x\"",
            ),
            (
                response(vec![config_map_with(json!({"annotations": {"bad key!": "x"}}))]),
                cfg,
                "metadata.annotations key \"bad key!\"",
            ),
            (
                response(vec![config_map_with(json!({"annotations": {"a": "x".repeat(256 * 1024)}}))]),
                cfg,
                "metadata.annotations hold 262145 bytes",
            ),
            (
                ReconcileResponse {
                    delete: vec![ObjectRef {
                        api_version: "apps/v1".into(),
                        kind: "Deployment".into(),
                        namespace: None,
                        name: "Web".into(),
                    }],
                    ..Default::default()
                },
                "delete[0] (apps/v1 Deployment Web)",
                "name \"Web\" must be lowercase",
            ),
        ]
    }

    #[test]
    fn a_broken_second_object_refuses_the_whole_response_naming_it() {
        let legal = deployment(None);
        let numeric_label = config_map_with(json!({"labels": {"tier": 3}}));
        let err = validate_response(
            &metadata(),
            PRIMARY_NS,
            response(vec![legal, numeric_label]),
        )
        .expect_err("nothing of the response may pass");
        assert_eq!(err.item, "apply[1] (v1 ConfigMap cfg)");
        assert_eq!(
            err.to_string(),
            "invalid response: apply[1] (v1 ConfigMap cfg): metadata.labels[\"tier\"] must be a string, got a number (quote it: \"3\")"
        );
    }

    #[test]
    fn null_host_owned_fields_are_dropped_so_the_host_sets_its_own() {
        let sent = deployment_with(json!({"ownerReferences": null, "finalizers": null,
            "labels": {"app": "web", "empty": null}, "annotations": null}));
        let valid = validate_response(&metadata(), PRIMARY_NS, response(vec![sent])).unwrap();
        assert_eq!(
            valid.apply[0].object["metadata"],
            json!({"name": "web", "namespace": "team", "labels": {"app": "web", "empty": ""}})
        );
    }

    #[test]
    fn what_the_api_server_accepts_is_not_refused() {
        let rbac = PluginMetadata::new("access", "1", KindRef::new("example.com", "v1", "Access"))
            .owns(KindRef::new("rbac.authorization.k8s.io", "v1", "Role"));
        let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "system:Reader_1",
                "labels": {"empty": "", "long": "a".repeat(63), "example.com/tier": "A_b.c-D"},
                "annotations": {"Example.COM/note": "x".repeat(1000)}}});
        let valid = validate_response(&rbac, PRIMARY_NS, response(vec![role.to_string()])).unwrap();
        assert_eq!(valid.apply[0].object["metadata"]["name"], "system:Reader_1");
    }
}
