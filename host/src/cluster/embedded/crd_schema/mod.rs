//! The structural schemas of the CRDs stored in the embedded cluster, and
//! what the API server does with them on every write of a custom resource.
//!
//! Why: a plugin tested in `dev` or `simulate`, and the objects a user
//! feeds them, must be refused what a real cluster refuses and stored as a
//! real cluster stores them, or a plugin that passes locally fails on its
//! first cluster. The order is the API server's for a server-side apply
//! (the only way the host writes): the applied fields are checked against
//! the schema ([`applied`]: undeclared fields and wrong kinds of values
//! refuse the write, status included); the merged object is pruned and
//! defaulted ([`prune_default`]); then validated ([`validate`]), and only
//! when that passes, by its CEL rules ([`cel_rules`]).
//!
//! Bounds versus a real API server: versions are not converted (each
//! version's schema governs objects applied as that version); list items
//! are not correlated with the old list for transition rules; CEL rules
//! using Kubernetes extension functions the interpreter lacks are skipped
//! with a warning; error lists may come in another order.

mod applied;
mod cel_rules;
mod compiled_rule;
mod field_errors;
mod prune_default;
mod schema;
mod validate;

use std::collections::BTreeMap;
use std::sync::Arc;

use reconciler_contract::KindRef;
use serde_json::Value;

pub use self::field_errors::FieldError;
pub use self::schema::Schema;

/// The line the API server adds when schema errors kept CEL rules from
/// running.
const RULES_NOT_CHECKED: &str = "Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";

/// The schemas of one CRD's versions, read and compiled before the CRD is
/// stored, to be learned once it is.
#[derive(Debug)]
pub struct CrdVersions {
    group: String,
    kind: String,
    versions: Vec<(String, Arc<Schema>)>,
}

impl CrdVersions {
    /// Reads every `spec.versions[].schema.openAPIV3Schema` of `crd`. A
    /// version without a schema is served unchecked; a schema that cannot
    /// be read or compiled refuses the CRD, naming where.
    pub fn of(crd: &Value, group: &str, kind: &str) -> Result<Self, String> {
        let mut versions = Vec::new();
        let listed = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for (i, version) in listed.iter().enumerate() {
            let Some(name) = version.get("name").and_then(Value::as_str) else {
                return Err(format!("spec.versions[{i}].name: Required value"));
            };
            if let Some(schema) = version.pointer("/schema/openAPIV3Schema") {
                let at = format!("spec.versions[{i}].schema.openAPIV3Schema");
                versions.push((name.to_string(), Arc::new(Schema::read(schema, &at)?)));
            }
        }
        Ok(Self {
            group: group.to_string(),
            kind: kind.to_string(),
            versions,
        })
    }
}

/// The schema of every version of every stored CRD.
#[derive(Clone, Debug, Default)]
pub struct CrdSchemas {
    /// (group, version, kind) -> schema.
    by_kind: BTreeMap<(String, String, String), Arc<Schema>>,
}

impl CrdSchemas {
    /// The schemas of a CRD just stored, replacing what it said before.
    pub fn learn(&mut self, crd: CrdVersions) {
        self.by_kind
            .retain(|(group, _, kind), _| !(*group == crd.group && *kind == crd.kind));
        for (version, schema) in crd.versions {
            self.by_kind
                .insert((crd.group.clone(), version, crd.kind.clone()), schema);
        }
    }

    /// The schema objects of `kind` are written under, if a CRD gives one.
    pub fn of(&self, kind: &KindRef) -> Option<Arc<Schema>> {
        self.by_kind
            .get(&(kind.group.clone(), kind.version.clone(), kind.kind.clone()))
            .cloned()
    }
}

/// Checks the fields of a server-side apply before they are merged. `what`
/// names the object (`default/web; example.com/v1, Kind=PodSet`).
pub fn check_applied(schema: &Schema, what: &str, applied: &Value) -> Result<(), String> {
    applied::check(schema, applied)
        .map_err(|e| format!("failed to create typed patch object ({what}): {e}"))?;
    let nulls = applied::refused_nulls(schema, applied);
    refusal(with_rules(schema, nulls, Vec::new))
}

/// Prunes, defaults and validates `object` (the merged result of a write)
/// in place; `old` is the stored object on an update. Returns the paths
/// pruned, or the API server's wording of every refused field.
pub fn admit(
    schema: &Schema,
    object: &mut Value,
    old: Option<&Value>,
) -> Result<Vec<String>, String> {
    let pruned = prune_and_default(schema, object);
    let errors = validate::validate(schema, object);
    let errors = with_rules(schema, errors, || cel_rules::check(schema, object, old));
    refusal(errors).map(|()| pruned)
}

/// [`admit`] for a write of the status subresource: the whole object is
/// pruned and defaulted, only its status is validated, and errors name
/// fields from the status down (`phase`, not `status.phase`), as the API
/// server validates a status update.
pub fn admit_status(
    schema: &Schema,
    object: &mut Value,
    old: Option<&Value>,
) -> Result<Vec<String>, String> {
    let pruned = prune_and_default(schema, object);
    let (Some(status_schema), Some(status)) =
        (schema.properties.get("status"), object.get("status"))
    else {
        return Ok(pruned);
    };
    let old_status = old.and_then(|o| o.get("status"));
    let errors = validate::validate_value(status_schema, status);
    let errors = with_rules(status_schema, errors, || {
        cel_rules::check(status_schema, status, old_status)
    });
    refusal(errors).map(|()| pruned)
}

/// The API server's first steps on a written object, whatever part of it
/// is then validated: undeclared fields pruned, then defaults filled in.
/// Returns the paths pruned.
fn prune_and_default(schema: &Schema, object: &mut Value) -> Vec<String> {
    let pruned = prune_default::prune(schema, object);
    prune_default::apply_defaults(schema, object);
    pruned
}

/// Adds what the CEL rules say to the schema's errors, unless one of those
/// keeps the rules from running, which is then said instead.
fn with_rules(
    schema: &Schema,
    mut errors: Vec<FieldError>,
    rules: impl FnOnce() -> Vec<FieldError>,
) -> Vec<FieldError> {
    if errors.iter().any(FieldError::blocks_rules) {
        if has_rules(schema) {
            errors.push(FieldError {
                path: String::new(),
                detail: RULES_NOT_CHECKED.into(),
            });
        }
    } else {
        errors.extend(rules());
    }
    errors
}

/// The API server's wording of a list of field errors.
fn refusal(errors: Vec<FieldError>) -> Result<(), String> {
    match errors.as_slice() {
        [] => Ok(()),
        [one] => Err(one.to_string()),
        many => Err(format!(
            "[{}]",
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn has_rules(schema: &Schema) -> bool {
    use self::schema::AdditionalProperties;
    !schema.rules.is_empty()
        || schema.properties.values().any(has_rules)
        || schema.items.as_deref().is_some_and(has_rules)
        || matches!(&schema.additional_properties, Some(AdditionalProperties::Schema(s)) if has_rules(s))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema(spec: Value) -> Schema {
        let root = json!({"type": "object", "properties": {"spec": spec}});
        Schema::read(&root, "openAPIV3Schema").unwrap()
    }

    #[test]
    fn a_rule_using_an_extension_the_interpreter_lacks_is_skipped_not_refusing() {
        let schema = schema(json!({"type": "object",
            "properties": {"name": {"type": "string"}},
            "x-kubernetes-validations": [
                {"rule": "self.name.lowerAscii() == self.name"},
                {"rule": "self.name != 'forbidden'", "message": "that name is taken"}]}));
        let mut object = json!({"spec": {"name": "MiXeD"}});
        assert!(admit(&schema, &mut object, None).is_ok());
        let mut taken = json!({"spec": {"name": "forbidden"}});
        assert_eq!(
            admit(&schema, &mut taken, None).unwrap_err(),
            "spec: Invalid value: \"object\": that name is taken"
        );
    }

    #[test]
    fn a_transition_rule_runs_only_on_updates_of_a_value_that_was_there() {
        let schema = schema(json!({"type": "object",
            "properties": {"zone": {"type": "string",
                "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "zone is immutable"}]}}}));
        let old = json!({"spec": {"zone": "a"}});
        assert!(admit(&schema, &mut old.clone(), None).is_ok());
        assert!(admit(&schema, &mut json!({"spec": {"zone": "a"}}), Some(&old)).is_ok());
        assert_eq!(
            admit(&schema, &mut json!({"spec": {"zone": "b"}}), Some(&old)).unwrap_err(),
            "spec.zone: Invalid value: \"string\": zone is immutable"
        );
        let unset = json!({"spec": {}});
        assert!(admit(&schema, &mut json!({"spec": {"zone": "b"}}), Some(&unset)).is_ok());
    }

    #[test]
    fn fields_stored_before_the_schema_declared_them_are_pruned_and_named() {
        let schema = schema(json!({"type": "object", "properties": {"size": {"type": "integer"}}}));
        let mut object = json!({"apiVersion": "example.com/v1", "kind": "PodSet",
            "metadata": {"name": "a"}, "spec": {"size": 1, "color": "blue"}, "extra": true});
        let pruned = admit(&schema, &mut object, None).unwrap();
        assert_eq!(pruned, ["extra", "spec.color"]);
        assert_eq!(object["spec"], json!({"size": 1}));
        assert_eq!(object["metadata"], json!({"name": "a"}));
    }
}
