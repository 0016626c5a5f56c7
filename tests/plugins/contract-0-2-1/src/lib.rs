//! A plugin built against `reconciler:plugin@0.2.1` exactly as released
//! (`wit/reconciler.wit` beside this crate is a frozen copy; never edit it):
//! the contract that added admission, before 0.2.2 added the `cluster`
//! import.
//!
//! It uses wit-bindgen directly rather than the SDK, which follows the
//! current contract: this crate stands for every plugin compiled for 0.2.1,
//! and `tests/tests/contract_versions.rs` checks that the host still loads
//! it, reconciles with it, and serves its admission.

wit_bindgen::generate!({
    path: "wit",
    world: "plugin-with-admission",
});

use exports::reconciler::plugin::admission::{
    AdmissionRequest, AdmissionSettings, FailurePolicy, Guest as Admission, Verdict,
};
use exports::reconciler::plugin::reconciler::{Guest, ReconcileRequest, ReconcileResponse};
use reconciler::plugin::types::{Hints, KindRef, PluginMetadata};

struct Legacy;

impl Guest for Legacy {
    fn metadata() -> PluginMetadata {
        PluginMetadata {
            name: "legacy-admission".to_string(),
            version: "0.2.1".to_string(),
            primary: KindRef {
                group: "legacy.example.com".to_string(),
                version: "v1".to_string(),
                kind: "LegacyAdmission".to_string(),
            },
            owns: vec![KindRef {
                group: String::new(),
                version: "v1".to_string(),
                kind: "ConfigMap".to_string(),
            }],
            reads: Vec::new(),
            writes: Vec::new(),
            finalizer: None,
            hints: Hints {
                max_concurrent_reconciles: None,
                memory_limit_mib: None,
                timeout_ms: None,
                max_output_kib: None,
                max_events: None,
                max_applies: None,
                max_deletes: None,
            },
        }
    }

    /// One ConfigMap named after the primary, and a status saying which
    /// contract built the plugin.
    fn reconcile(request: ReconcileRequest) -> Result<ReconcileResponse, String> {
        let name = name_of(&request.primary).ok_or("the primary has no metadata.name")?;
        Ok(ReconcileResponse {
            apply: vec![format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}},"data":{{"contract":"0.2.1"}}}}"#
            )],
            delete: Vec::new(),
            status: Some(r#"{"contract":"0.2.1"}"#.to_string()),
            events: Vec::new(),
            requeue_after_ms: None,
            finalized: false,
        })
    }
}

/// Denies a `LegacyAdmission` named `forbidden`; admits the rest.
impl Admission for Legacy {
    fn settings() -> Option<AdmissionSettings> {
        Some(AdmissionSettings {
            operations: Vec::new(),
            mutating: false,
            failure_policy: FailurePolicy::Fail,
            timeout_ms: None,
        })
    }

    fn validate(request: AdmissionRequest) -> Result<Verdict, String> {
        let name = request.object.as_deref().and_then(name_of).unwrap_or("");
        Ok(Verdict {
            allowed: name != "forbidden",
            message: (name == "forbidden").then(|| "built for 0.2.1: forbidden".to_string()),
            warnings: Vec::new(),
        })
    }

    fn apply_defaults(_: AdmissionRequest) -> Result<Option<String>, String> {
        Ok(None)
    }
}

/// `metadata.name` of a JSON object, without a JSON library: names are
/// DNS-1123, so they never need unescaping.
fn name_of(object: &str) -> Option<&str> {
    let metadata = &object[object.find("\"metadata\"")?..];
    let after = &metadata[metadata.find("\"name\"")? + "\"name\"".len()..];
    let start = after.find('"')? + 1;
    let len = after[start..].find('"')?;
    Some(&after[start..start + len])
}

export!(Legacy);
