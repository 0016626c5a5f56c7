//! Secret values kept out of recorded cases. A plugin that reads Secrets
//! would otherwise have their contents written in plain text to wherever
//! `--record` points, and from there into test fixtures and repositories.
//! The keys stay, so a replayed case still shows which entries the plugin
//! saw; each value becomes the text [`REDACTED`] (base64-encoded in `data`,
//! so a typed plugin still decodes it).

use serde_json::Value;

/// What every Secret value reads as in a recorded case.
pub const REDACTED: &str = "redacted";
/// [`REDACTED`] in base64, as `data` holds it.
const REDACTED_BASE64: &str = "cmVkYWN0ZWQ=";

/// Replaces the values of `data` and `stringData` if `object` is a core
/// Secret; any other object is left as it is.
pub fn redact_secret(object: &mut Value) {
    let is_secret = object.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && object.get("kind").and_then(Value::as_str) == Some("Secret");
    if !is_secret {
        return;
    }
    for (field, redacted) in [("data", REDACTED_BASE64), ("stringData", REDACTED)] {
        if let Some(values) = object.get_mut(field).and_then(Value::as_object_mut) {
            for value in values.values_mut() {
                *value = Value::String(redacted.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn secret_values_are_replaced_and_keys_kept() {
        let mut secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db"}, "data": {"password": "aHVudGVyMg=="},
            "stringData": {"token": "hunter2"}});
        redact_secret(&mut secret);
        assert_eq!(secret["data"], json!({"password": REDACTED_BASE64}));
        assert_eq!(secret["stringData"], json!({"token": "redacted"}));
        assert_eq!(secret["metadata"]["name"], "db");
    }

    #[test]
    fn other_kinds_keep_their_data() {
        let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "db"}, "data": {"password": "plain"}});
        let mut redacted = config_map.clone();
        redact_secret(&mut redacted);
        assert_eq!(redacted, config_map);
    }
}
