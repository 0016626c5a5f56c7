//! How a refusal names the kind of JSON value it got: "a number", "an
//! array".
//!
//! Why a module of its own: the checks of a response and of its objects'
//! metadata word refusals alike, and neither should import the other for it.

use serde_json::Value;

pub(super) fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
