//! Pruning and defaulting of a custom resource before it is validated and
//! stored, in the API server's order: undeclared fields go (unless the
//! schema preserves them), then `default`s fill what is missing, inner
//! ones after outer ones, so a defaulted object gets its own defaults.

use serde_json::{Map, Value};

use super::field_errors::join;
use super::schema::Schema;

/// Drops every field of `object` its schema does not declare or preserve,
/// and returns their paths. The root keeps apiVersion, kind and metadata.
pub fn prune(root: &Schema, object: &mut Value) -> Vec<String> {
    let mut pruned = Vec::new();
    if let Value::Object(fields) = object {
        prune_fields(root, fields, "", &mut pruned, true);
    }
    pruned
}

fn prune_value(schema: &Schema, value: &mut Value, path: &str, pruned: &mut Vec<String>) {
    match value {
        Value::Object(fields) => {
            prune_fields(schema, fields, path, pruned, schema.embedded_resource)
        }
        Value::Array(items) => {
            if let Some(item_schema) = &schema.items {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_value(item_schema, item, &format!("{path}[{i}]"), pruned);
                }
            }
        }
        _ => {}
    }
}

fn prune_fields(
    schema: &Schema,
    fields: &mut Map<String, Value>,
    path: &str,
    pruned: &mut Vec<String>,
    has_metadata: bool,
) {
    let keep_all = schema.keeps_unknown_fields();
    fields.retain(|name, _| {
        let keep = keep_all
            || schema.properties.contains_key(name)
            || (has_metadata && matches!(name.as_str(), "apiVersion" | "kind" | "metadata"));
        if !keep {
            pruned.push(join(path, name));
        }
        keep
    });
    for (name, field) in fields.iter_mut() {
        if let Some(child) = schema.field(name) {
            prune_value(child, field, &join(path, name), pruned);
        }
    }
}

/// Fills in every missing field that has a `default`, and replaces a null
/// by the default of a field that is not nullable.
pub fn apply_defaults(schema: &Schema, value: &mut Value) {
    match value {
        Value::Object(fields) => {
            for (name, child) in &schema.properties {
                let Some(default) = &child.default else {
                    continue;
                };
                match fields.get(name) {
                    None => {
                        fields.insert(name.clone(), default.clone());
                    }
                    Some(Value::Null) if !child.nullable => {
                        fields.insert(name.clone(), default.clone());
                    }
                    Some(_) => {}
                }
            }
            for (name, field) in fields.iter_mut() {
                if let Some(child) = schema.field(name) {
                    apply_defaults(child, field);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = &schema.items {
                items
                    .iter_mut()
                    .for_each(|item| apply_defaults(item_schema, item));
            }
        }
        _ => {}
    }
}
