//! Admission of objects that do not come through an API server: `dev` and
//! `simulate` read them from files and run them past the plugin that
//! serves admission for their kind before storing them, so a denied object
//! is reported and never stored, as it would be on a cluster.

use std::sync::Arc;

use reconciler_contract::{AdmissionRequest, KindRef, Operation, UserInfo};
use serde_json::Value;

use crate::plugin::LoadedPlugin;

/// Who the requests of objects from files come from.
pub const FILES_USER: &str = "reconciler-host:files";

/// What admission made of one object.
#[derive(Debug, Clone, PartialEq)]
pub enum GateOutcome {
    /// No loaded plugin serves admission for the object's kind.
    NotCovered,
    /// Store it: the object as defaulting left it.
    Admitted {
        plugin: String,
        object: Value,
        /// Defaulting changed it.
        patched: bool,
        warnings: Vec<String>,
    },
    /// Do not store it.
    Denied {
        plugin: String,
        message: String,
        warnings: Vec<String>,
    },
}

impl GateOutcome {
    /// A line for the user about an object, or none when there is nothing
    /// to say (not covered, or admitted unchanged without warnings).
    pub fn report(&self, key: &str) -> Option<String> {
        let warnings = |w: &[String]| {
            w.iter()
                .map(|w| format!("; warning: {w}"))
                .collect::<String>()
        };
        match self {
            GateOutcome::NotCovered => None,
            GateOutcome::Admitted {
                plugin,
                patched,
                warnings: w,
                ..
            } if *patched || !w.is_empty() => Some(format!(
                "admitted {key} by {plugin}{}{}",
                if *patched { " (defaulted)" } else { "" },
                warnings(w)
            )),
            GateOutcome::Admitted { .. } => None,
            GateOutcome::Denied {
                plugin,
                message,
                warnings: w,
            } => Some(format!(
                "denied {key} by {plugin}: {message}{} (not stored)",
                warnings(w)
            )),
        }
    }
}

/// A write of `object` past admission: an update of `stored` when the
/// cluster holds it, else a create.
pub fn admit_write(
    plugins: &[Arc<LoadedPlugin>],
    object: &Value,
    stored: Option<&Value>,
    now_millis: i64,
) -> GateOutcome {
    let operation = match stored {
        Some(_) => Operation::Update,
        None => Operation::Create,
    };
    admit_object(plugins, operation, Some(object), stored, now_millis)
}

/// Runs `operation` on `object` (create, update) or `old` (delete) past the
/// plugin serving admission for its kind.
pub fn admit_object(
    plugins: &[Arc<LoadedPlugin>],
    operation: Operation,
    object: Option<&Value>,
    old: Option<&Value>,
    now_millis: i64,
) -> GateOutcome {
    let Some(subject) = object.or(old) else {
        return GateOutcome::NotCovered;
    };
    let Some(kind) = KindRef::of_object(subject) else {
        return GateOutcome::NotCovered;
    };
    let Some(plugin) = plugins
        .iter()
        .find(|p| p.metadata().primary == kind && p.admission().is_some())
    else {
        return GateOutcome::NotCovered;
    };
    let name = |p: &str| {
        subject
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let key = format!("{}/{}", name("/metadata/namespace"), name("/metadata/name"));
    let request = AdmissionRequest {
        operation,
        object: object.map(Value::to_string),
        old_object: old.map(Value::to_string),
        user_info: UserInfo {
            username: FILES_USER.to_string(),
            ..UserInfo::default()
        },
        dry_run: false,
    };
    let decision = plugin.admit(request, &key, now_millis);
    if !decision.allowed {
        return GateOutcome::Denied {
            plugin: plugin.name().to_string(),
            message: decision.message.unwrap_or_default(),
            warnings: decision.warnings,
        };
    }
    let mut admitted = object.cloned().unwrap_or(Value::Null);
    let patched = !decision.patch.is_empty();
    if patched {
        let applied = serde_json::from_value::<json_patch::Patch>(Value::Array(decision.patch))
            .map_err(|e| e.to_string())
            .and_then(|p| json_patch::patch(&mut admitted, &p).map_err(|e| e.to_string()));
        if let Err(e) = applied {
            // The host computed the patch from this very object: failing to
            // apply it is a host bug, and the object is not stored.
            return GateOutcome::Denied {
                plugin: plugin.name().to_string(),
                message: format!("the defaulting patch does not apply: {e}"),
                warnings: decision.warnings,
            };
        }
    }
    GateOutcome::Admitted {
        plugin: plugin.name().to_string(),
        object: admitted,
        patched,
        warnings: decision.warnings,
    }
}
