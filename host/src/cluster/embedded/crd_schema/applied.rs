//! The check a server-side apply's fields pass before they are merged.
//!
//! Why: the API server turns an apply into a typed patch first, and refuses
//! it outright when a field is not declared or a value is not the kind the
//! schema says (a string for a number, a map for a list), with no pruning:
//! what a plugin writes with an undeclared field, status included, fails
//! on a real cluster, so it fails here. Bounds, enums and formats are
//! checked later on the merged object ([`super::validate`]).

use std::collections::BTreeSet;

use serde_json::Value;

use super::field_errors::{FieldError, join};
use super::schema::Schema;
use super::validate::type_label;

/// The first field of `applied` the schema does not accept, as the API
/// server words it (`.spec.color: field not declared in schema`).
pub fn check(root: &Schema, applied: &Value) -> Result<(), String> {
    let Value::Object(fields) = applied else {
        return Err(". : expected map".into());
    };
    for (name, value) in fields {
        if matches!(name.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        match root.field(name) {
            Some(schema) => check_value(schema, value, &format!(".{name}"))?,
            None if root.keeps_unknown_fields() => {}
            None => return Err(format!(".{name}: field not declared in schema")),
        }
    }
    Ok(())
}

fn check_value(schema: &Schema, value: &Value, path: &str) -> Result<(), String> {
    if value.is_null() {
        // A null is the absence of a value to a typed patch; the merged
        // object's validation decides whether it may stay.
        return Ok(());
    }
    if schema.int_or_string {
        return match value {
            Value::Object(_) | Value::Array(_) => {
                Err(format!("{path}: expected scalar, got {}", kind_of(value)))
            }
            _ => Ok(()),
        };
    }
    match schema.type_name.as_deref() {
        Some("integer" | "number") if !value.is_number() => Err(format!(
            "{path}: expected numeric (int or float), got {}",
            kind_of(value)
        )),
        Some("string") if !value.is_string() => {
            Err(format!("{path}: expected string, got {}", shown(value)))
        }
        Some("boolean") if !value.is_boolean() => {
            Err(format!("{path}: expected boolean, got {}", shown(value)))
        }
        Some("array") => match value {
            Value::Array(items) => check_items(schema, items, path),
            other => Err(format!("{path}: expected list, got {}", shown(other))),
        },
        Some("object") => match value {
            Value::Object(fields) => {
                for (name, field) in fields {
                    let at = format!("{path}.{name}");
                    match schema.field(name) {
                        Some(child) => check_value(child, field, &at)?,
                        None if schema.keeps_unknown_fields()
                            || schema.declares_implicitly(name) => {}
                        None => return Err(format!("{at}: field not declared in schema")),
                    }
                }
                Ok(())
            }
            other => Err(format!("{path}: expected map, got {}", shown(other))),
        },
        _ => Ok(()),
    }
}

fn check_items(schema: &Schema, items: &[Value], path: &str) -> Result<(), String> {
    if schema.list_type.as_deref() == Some("set") {
        let mut seen = BTreeSet::new();
        for item in items {
            let text = item.to_string();
            if !seen.insert(text.clone()) {
                return Err(format!("{path}: duplicate entries for key [={text}]"));
            }
        }
    }
    if let Some(item_schema) = &schema.items {
        for (i, item) in items.iter().enumerate() {
            check_value(item_schema, item, &format!("{path}[{i}]"))?;
        }
    }
    Ok(())
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "map",
    }
}

/// A value in an error, short: the API server shows the value it got.
fn shown(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 60 {
        format!(
            "{} ({}…)",
            kind_of(value),
            text.chars().take(40).collect::<String>()
        )
    } else {
        text
    }
}

/// The nulls of `applied` its schema refuses. Merging drops a null (it
/// removes the field), while the API server keeps it in the object it
/// validates and refuses it there unless the field is nullable or has a
/// default to take its place; these are those refusals, found before the
/// merge would hide them.
pub fn refused_nulls(root: &Schema, applied: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Value::Object(fields) = applied {
        for (name, value) in fields {
            if let Some(schema) = root.properties.get(name) {
                find_nulls(schema, value, name, &mut errors);
            }
        }
    }
    errors
}

fn find_nulls(schema: &Schema, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    match value {
        Value::Null => {
            if !schema.nullable
                && schema.default.is_none()
                && let Some(type_name) = type_label(schema)
            {
                errors.push(FieldError {
                    path: path.to_string(),
                    detail: format!(
                        "Invalid value: \"null\": {path} in body must be of type {type_name}: \"null\""
                    ),
                });
            }
        }
        Value::Object(fields) => {
            for (name, field) in fields {
                if let Some(child) = schema.field(name) {
                    find_nulls(child, field, &join(path, name), errors);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = &schema.items {
                for (i, item) in items.iter().enumerate() {
                    find_nulls(item_schema, item, &format!("{path}[{i}]"), errors);
                }
            }
        }
        _ => {}
    }
}
