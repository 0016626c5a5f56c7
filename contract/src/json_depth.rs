//! How deeply a JSON text nests, measured without parsing it.
//!
//! serde_json refuses to parse a value nested in 128 or more arrays and
//! objects (its recursion limit, which keeps a parse from overflowing the
//! stack). JSON the host keeps must stay readable by the same parser, so
//! nesting is checked where JSON comes in: the cache refuses an object it
//! could not read back, and the host refuses a plugin's response whose
//! objects would end up nested past that limit once stored (a status sits
//! one level deeper inside its object than in the response).

/// The deepest nesting serde_json reads with its default recursion limit.
pub const READABLE_DEPTH: usize = 127;

/// How many arrays and objects the most deeply nested value of `text` is
/// inside (`1` for `{"a":1}`, `0` for `"text"`). Brackets inside strings do
/// not count. Linear, with no recursion, so any input is safe to measure;
/// malformed JSON gets a number too, and fails its parse later.
pub fn nesting_depth(text: &str) -> usize {
    let mut depth = 0usize;
    let mut deepest = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for byte in text.bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// [`nesting_depth`] of a parsed value: the same count, without its text.
/// Recursive, so for values that came from a parse (which bounds them).
pub fn value_depth(value: &serde_json::Value) -> usize {
    use serde_json::Value;
    match value {
        Value::Array(items) => 1 + items.iter().map(value_depth).max().unwrap_or(0),
        Value::Object(members) => 1 + members.values().map(value_depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Why a value nested `depth` levels deep cannot be kept as JSON text;
/// `None` when it reads back.
pub fn unreadable_at(depth: usize) -> Option<String> {
    (depth > READABLE_DEPTH).then(|| {
        format!(
            "it is nested {depth} levels deep, more than the {READABLE_DEPTH} levels JSON can be read back with"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `{"a":{"a":...{}}}`, `levels` objects deep.
    fn nested(levels: usize) -> String {
        "{\"a\":".repeat(levels.saturating_sub(1)) + "{}" + &"}".repeat(levels.saturating_sub(1))
    }

    #[test]
    fn depth_counts_arrays_and_objects_but_not_brackets_in_strings() {
        assert_eq!(nesting_depth("\"x\""), 0);
        assert_eq!(nesting_depth("{\"a\":1}"), 1);
        assert_eq!(nesting_depth("{\"a\":[1,{\"b\":[]}],\"c\":{}}"), 4);
        assert_eq!(nesting_depth(r#"{"a":"[[[{{{\"]]]"}"#), 1);
        assert_eq!(nesting_depth(&nested(300)), 300);
    }

    #[test]
    fn the_readable_depth_is_serde_jsons_own_limit() {
        let parse = |levels| serde_json::from_str::<serde_json::Value>(&nested(levels));
        assert!(parse(READABLE_DEPTH).is_ok());
        let too_deep = parse(READABLE_DEPTH + 1).unwrap_err();
        assert!(
            too_deep.to_string().contains("recursion limit"),
            "{too_deep}"
        );
    }
}
