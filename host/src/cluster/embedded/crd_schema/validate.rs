//! The OpenAPI value validations of a structural schema, worded as the API
//! server words them, so an error seen in `dev` reads as it will on a
//! cluster. As there, a value failing its type is not checked further, and
//! a string, number or list reports its first failing bound only.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::field_errors::{FieldError, join};
use super::schema::Schema;

/// Every value validation `object` fails under `root`. The root's
/// apiVersion, kind and metadata are the store's to validate.
pub fn validate(root: &Schema, object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Value::Object(fields) = object {
        let mut body = fields.clone();
        for name in ["apiVersion", "kind", "metadata"] {
            body.remove(name);
        }
        object_checks(root, &body, "", &mut errors);
    }
    errors
}

/// Every value validation `value` fails under `schema`, paths starting
/// at the value itself.
pub fn validate_value(schema: &Schema, value: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    value_checks(schema, value, "", &mut errors);
    errors
}

fn value_checks(schema: &Schema, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let mut fail = |detail: String| {
        errors.push(FieldError {
            path: path.to_string(),
            detail,
        })
    };
    if value.is_null() {
        if !schema.nullable
            && let Some(type_name) = type_label(schema)
        {
            fail(format!(
                "Invalid value: \"null\": {path} in body must be of type {type_name}: \"null\""
            ));
        }
        return;
    }
    if let Some(expected) = type_label(schema)
        && !has_type(schema, value)
    {
        let got = json_type(value);
        fail(format!(
            "Invalid value: \"{got}\": {path} in body must be of type {expected}: \"{got}\""
        ));
        return;
    }
    if let (Some(format), Value::String(text)) = (schema.format.as_deref(), value)
        && !format_holds(format, text)
    {
        fail(format!(
            "Invalid value: {value}: {path} in body must be of type {format}: {value}"
        ));
        return;
    }
    if let Some(allowed) = &schema.allowed
        && !allowed.contains(value)
    {
        let listed: Vec<String> = allowed.iter().map(Value::to_string).collect();
        fail(format!(
            "Unsupported value: {value}: supported values: {}",
            listed.join(", ")
        ));
    }
    match value {
        Value::Number(n) => {
            if let Some(detail) = number_bound(schema, n.as_f64().unwrap_or(0.0), value, path) {
                fail(detail);
            }
        }
        Value::String(text) => {
            if let Some(detail) = string_bound(schema, text, value, path) {
                fail(detail);
            }
        }
        Value::Array(items) => {
            if let Some(detail) = items_bound(schema, items.len(), path) {
                fail(detail);
            }
            if schema.unique_items || schema.list_type.as_deref() == Some("set") {
                let mut seen = BTreeSet::new();
                for (i, item) in items.iter().enumerate() {
                    if !seen.insert(item.to_string()) {
                        errors.push(FieldError {
                            path: format!("{path}[{i}]"),
                            detail: format!("Duplicate value: {item}"),
                        });
                    }
                }
            }
            if let Some(item_schema) = &schema.items {
                for (i, item) in items.iter().enumerate() {
                    value_checks(item_schema, item, &format!("{path}[{i}]"), errors);
                }
            }
        }
        Value::Object(fields) => object_checks(schema, fields, path, errors),
        _ => {}
    }
    combinators(schema, value, path, errors);
}

fn object_checks(
    schema: &Schema,
    fields: &Map<String, Value>,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    for name in &schema.required {
        if !fields.contains_key(name) {
            errors.push(FieldError {
                path: join(path, name),
                detail: "Required value".into(),
            });
        }
    }
    let count = fields.len() as u64;
    if let Some(max) = schema.max_properties
        && count > max
    {
        errors.push(FieldError {
            path: path.to_string(),
            detail: format!("Too many: {count}: must have at most {max} items"),
        });
    }
    if let Some(min) = schema.min_properties
        && count < min
    {
        errors.push(FieldError {
            path: path.to_string(),
            detail: format!(
                "Invalid value: {count}: {path} in body should have at least {min} properties"
            ),
        });
    }
    for (name, field) in fields {
        let at = join(path, name);
        if let Some(child) = schema.field(name) {
            value_checks(child, field, &at, errors);
        }
    }
}

/// `allOf`, `anyOf`, `oneOf` and `not`: in a structural schema they only
/// add value validations to the node they sit on.
fn combinators(schema: &Schema, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    let passes = |branch: &Schema| {
        let mut found = Vec::new();
        value_checks(branch, value, path, &mut found);
        found.is_empty()
    };
    for branch in &schema.all_of {
        value_checks(branch, value, path, errors);
    }
    let mut fail = |detail: String| {
        errors.push(FieldError {
            path: path.to_string(),
            detail,
        })
    };
    if !schema.any_of.is_empty() && !schema.any_of.iter().any(passes) {
        fail(format!(
            "Invalid value: {value}: {path} in body must validate at least one schema (anyOf)"
        ));
    }
    if !schema.one_of.is_empty() && schema.one_of.iter().filter(|b| passes(b)).count() != 1 {
        fail(format!(
            "Invalid value: {value}: {path} in body must validate one and only one schema (oneOf)"
        ));
    }
    if let Some(not) = &schema.not
        && passes(not)
    {
        fail(format!(
            "Invalid value: {value}: {path} in body must not validate the schema (not)"
        ));
    }
}

fn number_bound(schema: &Schema, n: f64, value: &Value, path: &str) -> Option<String> {
    if let Some(max) = schema.maximum {
        if schema.exclusive_maximum && n >= max {
            return Some(format!(
                "Invalid value: {value}: {path} in body should be less than {max}"
            ));
        }
        if n > max {
            return Some(format!(
                "Invalid value: {value}: {path} in body should be less than or equal to {max}"
            ));
        }
    }
    if let Some(min) = schema.minimum {
        if schema.exclusive_minimum && n <= min {
            return Some(format!(
                "Invalid value: {value}: {path} in body should be greater than {min}"
            ));
        }
        if n < min {
            return Some(format!(
                "Invalid value: {value}: {path} in body should be greater than or equal to {min}"
            ));
        }
    }
    None
}

fn string_bound(schema: &Schema, text: &str, value: &Value, path: &str) -> Option<String> {
    let length = text.chars().count() as u64;
    if let Some(max) = schema.max_length
        && length > max
    {
        return Some(format!("Too long: may not be longer than {max}"));
    }
    if let Some(min) = schema.min_length
        && length < min
    {
        return Some(format!(
            "Invalid value: {value}: {path} in body should be at least {min} chars long"
        ));
    }
    if let (Some(pattern), Some(regex)) = (&schema.pattern, &schema.compiled_pattern)
        && !regex.is_match(text)
    {
        return Some(format!(
            "Invalid value: {value}: {path} in body should match '{pattern}'"
        ));
    }
    None
}

fn items_bound(schema: &Schema, count: usize, path: &str) -> Option<String> {
    let count = count as u64;
    if let Some(max) = schema.max_items
        && count > max
    {
        return Some(format!("Too many: {count}: must have at most {max} items"));
    }
    if let Some(min) = schema.min_items
        && count < min
    {
        return Some(format!(
            "Invalid value: {count}: {path} in body should have at least {min} items"
        ));
    }
    None
}

/// The type a value must have, as the error names it; `None` when any is
/// accepted.
pub fn type_label(schema: &Schema) -> Option<&str> {
    if schema.int_or_string {
        return Some("integer,string");
    }
    schema.type_name.as_deref().filter(|t| !t.is_empty())
}

fn has_type(schema: &Schema, value: &Value) -> bool {
    if schema.int_or_string {
        return is_integer(value) || value.is_string();
    }
    match schema.type_name.as_deref() {
        Some("integer") => is_integer(value),
        Some("number") => value.is_number(),
        Some("string") => value.is_string(),
        Some("boolean") => value.is_boolean(),
        Some("array") => value.is_array(),
        Some("object") => value.is_object(),
        _ => true,
    }
}

fn is_integer(value: &Value) -> bool {
    value.is_i64() || value.is_u64()
}

/// The JSON type of a value as the API server names it in errors.
pub fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The formats the API server checks; others (int32, int64, double...)
/// constrain nothing in a CRD.
fn format_holds(format: &str, text: &str) -> bool {
    match format {
        "date-time" | "datetime" => chrono::DateTime::parse_from_rfc3339(text).is_ok(),
        "date" => chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").is_ok(),
        "uuid" => uuid::Uuid::parse_str(text).is_ok(),
        "byte" => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .is_ok()
        }
        "ipv4" => text.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => text.parse::<std::net::Ipv6Addr>().is_ok(),
        "hostname" => is_hostname(text),
        _ => true,
    }
}

fn is_hostname(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 255
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}
