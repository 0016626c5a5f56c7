//! `x-kubernetes-validations`: CEL rules evaluated with `self` bound to the
//! value at their node and, for transition rules, `oldSelf` to the value
//! the stored object had there.
//!
//! Why through `cel-interpreter`: CEL's semantics (macros, null handling,
//! errors) are a language of their own; a hand-written evaluator would
//! accept rules the API server refuses and the reverse. Rules using a
//! Kubernetes extension the interpreter lacks (`quantity`, `isSorted`, ...)
//! are skipped with a warning naming the rule rather than refusing every
//! object: the embedded cluster must not be stricter than a real one.

use std::collections::{BTreeSet, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use cel_interpreter::objects::{Key, Map as CelMap};
use cel_interpreter::{Context, ExecutionError, Program, Value as CelValue};
use serde_json::Value;

use super::compiled_rule::{CompiledRule, RuleSpec};
use super::field_errors::{FieldError, join};
use super::schema::Schema;
use crate::support::panic_guard::panic_message;

impl CompiledRule {
    /// Parses a rule. The parser panics on some malformed input; that is
    /// the rule's error, never the host's crash.
    pub fn compile(spec: RuleSpec) -> Result<Self, String> {
        let parsed = std::panic::catch_unwind(|| Program::compile(&spec.rule))
            .map_err(|payload| format!("the CEL parser failed: {}", panic_message(&*payload)))?;
        let program = parsed.map_err(|e| e.to_string())?;
        let transition = program.references().has_variable("oldSelf");
        Ok(Self {
            spec,
            program,
            transition,
        })
    }
}

/// Rules already warned about as not evaluable here, so the warning is
/// logged once per rule rather than once per write.
static WARNED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Every rule under `root` that `object` breaks; `old` is the stored
/// object on an update.
pub fn check(root: &Schema, object: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let context = Context::default();
    let mut errors = Vec::new();
    walk(&context, root, object, old, "", &mut errors);
    errors
}

fn walk(
    context: &Context,
    schema: &Schema,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    match value {
        Value::Object(fields) => {
            for (name, field) in fields {
                if let Some(child) = schema.field(name) {
                    let before = old.and_then(|o| o.get(name));
                    walk(context, child, field, before, &join(path, name), errors);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = &schema.items {
                // List items are not correlated with the old list, so
                // their transition rules do not run.
                for (i, item) in items.iter().enumerate() {
                    walk(
                        context,
                        item_schema,
                        item,
                        None,
                        &format!("{path}[{i}]"),
                        errors,
                    );
                }
            }
        }
        _ => {}
    }
    run_rules(context, schema, value, old, path, errors);
}

fn run_rules(
    context: &Context,
    schema: &Schema,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    if value.is_null() {
        return;
    }
    for rule in &schema.rules {
        if rule.transition && old.is_none() {
            continue;
        }
        let mut scope = context.new_inner_scope();
        scope.add_variable_from_value("self", to_cel(value));
        if let Some(old) = old {
            scope.add_variable_from_value("oldSelf", to_cel(old));
        }
        // Evaluation runs under the store's lock: a panic in the
        // interpreter refuses the write instead of taking the process.
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| rule.program.execute(&scope)))
            .map_err(|payload| panic_message(&*payload));
        let failure = match result {
            Err(panic) => format!(
                "the CEL interpreter failed ({panic}) evaluating rule: {}",
                rule.spec.rule
            ),
            Ok(result) => match result {
                Ok(CelValue::Bool(true)) => continue,
                Ok(CelValue::Bool(false)) => rule
                    .spec
                    .message
                    .clone()
                    .unwrap_or_else(|| format!("failed rule: {}", rule.spec.rule)),
                Ok(other) => format!(
                    "rule did not evaluate to a bool: {:?} evaluating rule: {}",
                    other.type_of(),
                    rule.spec.rule
                ),
                Err(ExecutionError::UndeclaredReference(name))
                    if name.as_str() != "self" && name.as_str() != "oldSelf" =>
                {
                    warn_unsupported(&rule.spec.rule, &name);
                    continue;
                }
                Err(e) => format!("{e} evaluating rule: {}", rule.spec.rule),
            },
        };
        let at = match &rule.spec.field_path {
            Some(field_path) => join(path, field_path.trim_start_matches('.')),
            None => path.to_string(),
        };
        let detail = match rule.spec.reason.as_deref() {
            Some("FieldValueForbidden") => format!("Forbidden: {failure}"),
            Some("FieldValueRequired") => format!("Required value: {failure}"),
            Some("FieldValueDuplicate") => format!("Duplicate value: {failure}"),
            _ => format!("Invalid value: \"{}\": {failure}", type_word(schema)),
        };
        errors.push(FieldError { path: at, detail });
    }
}

fn warn_unsupported(rule: &str, name: &str) {
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if warned.insert(rule.to_string()) {
        tracing::warn!(
            rule,
            function = name,
            "the embedded cluster cannot evaluate this x-kubernetes-validations rule ({name} is a Kubernetes CEL extension it lacks): it is not checked here, only on a real cluster"
        );
    }
}

fn type_word(schema: &Schema) -> &str {
    if schema.int_or_string {
        return "integer,string";
    }
    schema.type_name.as_deref().unwrap_or("object")
}

/// A JSON value as CEL sees it: integers as `int`, not `uint`, as the API
/// server types integer fields.
fn to_cel(value: &Value) -> CelValue {
    match value {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => CelValue::Int(i),
            None => CelValue::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => CelValue::String(Arc::new(s.clone())),
        Value::Array(items) => CelValue::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(fields) => {
            let map: HashMap<Key, CelValue> = fields
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v)))
                .collect();
            CelValue::Map(CelMap { map: Arc::new(map) })
        }
    }
}
