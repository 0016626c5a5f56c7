//! The checks the API server makes of every object, of what the store
//! relies on: apiVersion and kind, a DNS name and namespace, labels,
//! annotations, finalizers and ownerReferences, with the API server's
//! wording.
//!
//! Why only these: built-in kinds are stored without their schemas (see
//! the module documentation of [`super`]), so what is checked is what the
//! store itself depends on, for every kind alike.

use reconciler_contract::object_meta::MetadataField;
use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::errors::StoreError;
use crate::cluster::backend::ObjectKey;

/// Checks what the store relies on and returns the object's key. Errors name
/// the offending field.
pub(super) fn validate_object(object: &Value) -> Result<ObjectKey, StoreError> {
    let fail = |message: String| StoreError::Invalid {
        key: describe(object),
        message,
    };
    if !object.is_object() {
        return Err(fail("an object must be a JSON object".into()));
    }
    let api_version = non_empty_str(object.get("apiVersion"))
        .ok_or_else(|| fail("apiVersion must be a non-empty string".into()))?;
    if !valid_api_version(api_version) {
        return Err(fail(format!(
            "apiVersion {api_version:?} must be `version` or `group/version`"
        )));
    }
    non_empty_str(object.get("kind"))
        .ok_or_else(|| fail("kind must be a non-empty string".into()))?;
    let meta = object
        .get("metadata")
        .and_then(Value::as_object)
        .ok_or_else(|| fail("metadata must be a JSON object".into()))?;
    let name = non_empty_str(meta.get("name"))
        .ok_or_else(|| fail("metadata.name must be a non-empty string".into()))?;
    if !is_dns1123_subdomain(name) {
        return Err(fail(format!(
            "metadata.name {name:?} must be a DNS-1123 subdomain: at most 253 lowercase letters, digits, '-' and '.', each dot-separated part starting and ending with a letter or digit"
        )));
    }
    match meta.get("namespace") {
        None | Some(Value::Null) => {}
        Some(Value::String(ns)) if is_dns1123_label(ns) => {}
        Some(other) => {
            return Err(fail(format!(
                "metadata.namespace {other} must be a DNS-1123 label: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"
            )));
        }
    }
    validate_metadata_fields(meta).map_err(fail)?;
    ObjectKey::of(object)
        .ok_or_else(|| fail("apiVersion, kind and metadata.name are required".into()))
}

fn validate_metadata_fields(meta: &Map<String, Value>) -> Result<(), String> {
    for field in ["labels", "annotations"] {
        match meta.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) if map.values().all(|v| v.is_string() || v.is_null()) => {}
            Some(_) => return Err(format!("metadata.{field} must map keys to strings")),
        }
    }
    match meta.get("finalizers") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) if items.iter().all(|f| non_empty_str(Some(f)).is_some()) => {}
        Some(_) => return Err("metadata.finalizers must be a list of non-empty strings".into()),
    }
    match meta.get("ownerReferences") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Array(refs)) => {
            refs.iter()
                .enumerate()
                .try_for_each(|(i, r)| validate_owner_ref(i, r))?;
            let mut uids = BTreeSet::new();
            match refs
                .iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str))
                .find(|uid| !uids.insert(*uid))
            {
                Some(uid) => Err(format!(
                    "metadata.ownerReferences: duplicate entries for key [uid={uid:?}]"
                )),
                None => Ok(()),
            }
        }
        Some(_) => Err("metadata.ownerReferences must be a list".into()),
    }
}

/// At most one ownerReference may say `controller: true`; the message is
/// the API server's.
pub(super) fn check_single_controller(object: &Value) -> Result<(), String> {
    let refs = object
        .metadata_field("ownerReferences")
        .and_then(Value::as_array);
    let controllers: Vec<String> = refs
        .into_iter()
        .flatten()
        .filter(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .map(|r| {
            let field = |f: &str| r.get(f).and_then(Value::as_str).unwrap_or("").to_string();
            format!("{}/{}", field("kind"), field("name"))
        })
        .collect();
    match controllers.as_slice() {
        [] | [_] => Ok(()),
        [first, rest @ ..] => Err(format!(
            "metadata.ownerReferences: Invalid value: {controllers:?}: Only one reference can have Controller set to true. Found \"true\" in references for {first} and {}",
            rest.join(" and ")
        )),
    }
}

fn validate_owner_ref(index: usize, reference: &Value) -> Result<(), String> {
    for field in ["apiVersion", "kind", "name", "uid"] {
        if non_empty_str(reference.get(field)).is_none() {
            return Err(format!(
                "metadata.ownerReferences[{index}].{field} must be a non-empty string"
            ));
        }
    }
    Ok(())
}

fn non_empty_str(value: Option<&Value>) -> Option<&str> {
    value.and_then(Value::as_str).filter(|s| !s.is_empty())
}

pub(super) fn valid_api_version(api_version: &str) -> bool {
    let mut parts = api_version.split('/');
    let valid = parts
        .by_ref()
        .take(2)
        .all(|p| !p.is_empty() && !p.contains(char::is_whitespace));
    valid && parts.next().is_none()
}

/// A best-effort name for an object that may not be valid, for errors.
fn describe(object: &Value) -> String {
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("object");
    let name = object
        .metadata_field("name")
        .and_then(Value::as_str)
        .unwrap_or("(unnamed)");
    match object.metadata_field("namespace").and_then(Value::as_str) {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// Lowercase letters, digits and '-', starting and ending alphanumeric.
fn is_dns1123_label_part(part: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let (Some(first), Some(last)) = (part.chars().next(), part.chars().last()) else {
        return false;
    };
    alnum(first) && alnum(last) && part.chars().all(|c| alnum(c) || c == '-')
}

pub(super) fn is_dns1123_label(name: &str) -> bool {
    name.len() <= 63 && is_dns1123_label_part(name)
}

pub(super) fn is_dns1123_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns1123_label_part)
}
