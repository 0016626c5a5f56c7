//! A plugin built against `reconciler:plugin@0.2.2` exactly as released
//! (`wit/reconciler.wit` beside this crate is a frozen copy; never edit it):
//! the contract that added the `cluster` import, before 0.2.3 added the
//! `triggers` export.
//!
//! It uses wit-bindgen directly rather than the SDK, which follows the
//! current contract: this crate stands for every plugin compiled for 0.2.2,
//! and `tests/tests/contract_versions.rs` checks that the host still loads
//! it, tells it its cluster, and wakes it on every change.

wit_bindgen::generate!({
    path: "wit",
    world: "plugin",
});

use exports::reconciler::plugin::reconciler::{Guest, ReconcileRequest, ReconcileResponse};
use reconciler::plugin::types::{Hints, KindRef, PluginMetadata};

struct Legacy;

impl Guest for Legacy {
    fn metadata() -> PluginMetadata {
        PluginMetadata {
            name: "legacy-cluster".to_string(),
            version: "0.2.2".to_string(),
            primary: KindRef {
                group: "legacy.example.com".to_string(),
                version: "v1".to_string(),
                kind: "LegacyCluster".to_string(),
            },
            owns: vec![KindRef {
                group: "apps".to_string(),
                version: "v1".to_string(),
                kind: "Deployment".to_string(),
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

    /// A status naming the contract and the cluster the host says it
    /// reconciles in; it applies nothing.
    fn reconcile(_request: ReconcileRequest) -> Result<ReconcileResponse, String> {
        let cluster = reconciler::plugin::cluster::current().name;
        Ok(ReconcileResponse {
            apply: Vec::new(),
            delete: Vec::new(),
            status: Some(format!(r#"{{"contract":"0.2.2","cluster":"{cluster}"}}"#)),
            events: Vec::new(),
            requeue_after_ms: None,
            finalized: false,
        })
    }
}

export!(Legacy);
