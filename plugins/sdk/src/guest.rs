//! The Wasm side of the boundary: WIT bindings and the glue between them and
//! [`crate::Reconciler`]. Compiled only for `wasm32`; plugins reach it through
//! [`crate::export_plugin!`].

pub use wit_bindgen;

wit_bindgen::generate!({
    path: "../../wit",
    // Every SDK plugin exports admission and triggers: `settings` answers
    // none unless the plugin opts in (`Reconciler::admission`), `triggers`
    // what its metadata declares (`PluginMetadata::wake_on`; none: every
    // change wakes it).
    world: "plugin-with-admission-and-triggers",
    pub_export_macro: true,
    export_macro_name: "export_world",
    default_bindings_module: "reconciler_sdk::guest",
    runtime_path: "reconciler_sdk::guest::wit_bindgen::rt",
});

use exports::reconciler::plugin::admission as wit_admission;
use exports::reconciler::plugin::reconciler as wit;
use exports::reconciler::plugin::triggers as wit_triggers;
use reconciler::plugin::types as wit_types;

use crate::{HostApi, Reconciler};
use reconciler_contract::{
    AdmissionRequest, AdmissionSettings, FailurePolicy, Operation, UserInfo, Verdict,
};
use reconciler_contract::{Change, KindTrigger};
use reconciler_contract::{
    ClusterInfo, Event, EventType, Hints, KindRef, LogLevel, MapRule, ObjectRef, PluginMetadata,
    ReadKind, ReconcileRequest, ReconcileResponse,
};

/// Names the [`Reconciler`] a plugin exports; implemented by the macro.
pub trait GuestExports {
    type Reconciler: Reconciler;
}

impl<T: GuestExports> wit::Guest for T {
    fn metadata() -> wit_types::PluginMetadata {
        metadata_to_wit(T::Reconciler::metadata())
    }

    fn reconcile(request: wit::ReconcileRequest) -> Result<wit::ReconcileResponse, String> {
        let request = ReconcileRequest {
            primary: request.primary,
            children: request.children,
            deleting: request.deleting,
        };
        crate::dispatch::<T::Reconciler>(&request, &WitHost).map(response_to_wit)
    }
}

impl<T: GuestExports> wit_triggers::Guest for T {
    fn triggers() -> Vec<wit_triggers::KindTrigger> {
        T::Reconciler::metadata()
            .triggers
            .into_iter()
            .map(trigger_to_wit)
            .collect()
    }
}

fn trigger_to_wit(t: KindTrigger) -> wit_triggers::KindTrigger {
    wit_triggers::KindTrigger {
        kind: kind_to_wit(&t.kind),
        wake_on: t
            .wake_on
            .into_iter()
            .map(|change| match change {
                Change::Any => wit_triggers::Change::Any,
                Change::Generation => wit_triggers::Change::Generation,
                Change::Labels => wit_triggers::Change::Labels,
                Change::Annotations => wit_triggers::Change::Annotations,
                Change::Fields(paths) => wit_triggers::Change::Fields(paths),
            })
            .collect(),
    }
}

impl<T: GuestExports> wit_admission::Guest for T {
    fn settings() -> Option<wit_admission::AdmissionSettings> {
        T::Reconciler::admission().map(settings_to_wit)
    }

    fn validate(
        request: wit_admission::AdmissionRequest,
    ) -> Result<wit_admission::Verdict, String> {
        crate::admission::dispatch_validate::<T::Reconciler>(&request_from_wit(request))
            .map(verdict_to_wit)
    }

    fn apply_defaults(request: wit_admission::AdmissionRequest) -> Result<Option<String>, String> {
        crate::admission::dispatch_defaults::<T::Reconciler>(&request_from_wit(request))
    }
}

fn operation_to_wit(op: Operation) -> wit_admission::Operation {
    match op {
        Operation::Create => wit_admission::Operation::Create,
        Operation::Update => wit_admission::Operation::Update,
        Operation::Delete => wit_admission::Operation::Delete,
        Operation::Connect => wit_admission::Operation::Connect,
    }
}

fn settings_to_wit(s: AdmissionSettings) -> wit_admission::AdmissionSettings {
    wit_admission::AdmissionSettings {
        operations: s.operations.into_iter().map(operation_to_wit).collect(),
        mutating: s.mutating,
        failure_policy: match s.failure_policy {
            FailurePolicy::Fail => wit_admission::FailurePolicy::Fail,
            FailurePolicy::Ignore => wit_admission::FailurePolicy::Ignore,
        },
        timeout_ms: s.timeout_ms,
    }
}

fn request_from_wit(r: wit_admission::AdmissionRequest) -> AdmissionRequest {
    AdmissionRequest {
        operation: match r.operation {
            wit_admission::Operation::Create => Operation::Create,
            wit_admission::Operation::Update => Operation::Update,
            wit_admission::Operation::Delete => Operation::Delete,
            wit_admission::Operation::Connect => Operation::Connect,
        },
        object: r.object,
        old_object: r.old_object,
        user_info: UserInfo {
            username: r.user_info.username,
            uid: r.user_info.uid,
            groups: r.user_info.groups,
            extra: r.user_info.extra.into_iter().collect(),
        },
        dry_run: r.dry_run,
    }
}

fn verdict_to_wit(v: Verdict) -> wit_admission::Verdict {
    wit_admission::Verdict {
        allowed: v.allowed,
        message: v.message,
        warnings: v.warnings,
    }
}

/// [`HostApi`] backed by the WIT imports.
struct WitHost;

impl HostApi for WitHost {
    fn get(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, String> {
        reconciler::plugin::cache::get(&kind_to_wit(kind), namespace, name)
    }

    fn list(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        selector: &str,
    ) -> Result<Vec<String>, String> {
        reconciler::plugin::cache::list(&kind_to_wit(kind), namespace, selector)
    }

    fn now_millis(&self) -> i64 {
        reconciler::plugin::clock::now()
    }

    fn cluster(&self) -> ClusterInfo {
        let info = reconciler::plugin::cluster::current();
        ClusterInfo {
            name: info.name,
            labels: info.labels.into_iter().collect(),
        }
    }

    fn log(&self, level: LogLevel, message: &str, fields: &[(String, String)]) {
        use reconciler::plugin::log::Level;
        let level = match level {
            LogLevel::Trace => Level::Trace,
            LogLevel::Debug => Level::Debug,
            LogLevel::Info => Level::Info,
            LogLevel::Warn => Level::Warn,
            LogLevel::Error => Level::Error,
        };
        reconciler::plugin::log::log(level, message, fields);
    }
}

fn kind_to_wit(kind: &KindRef) -> wit_types::KindRef {
    wit_types::KindRef {
        group: kind.group.clone(),
        version: kind.version.clone(),
        kind: kind.kind.clone(),
    }
}

fn metadata_to_wit(m: PluginMetadata) -> wit_types::PluginMetadata {
    let kinds = |ks: &[KindRef]| ks.iter().map(kind_to_wit).collect();
    let Hints {
        max_concurrent_reconciles,
        memory_limit_mib,
        timeout_ms,
        max_output_kib,
        max_events,
        max_applies,
        max_deletes,
    } = m.hints;
    wit_types::PluginMetadata {
        name: m.name,
        version: m.version,
        primary: kind_to_wit(&m.primary),
        owns: kinds(&m.owns),
        reads: m
            .reads
            .iter()
            .map(
                |ReadKind {
                     kind,
                     maps_by,
                     metadata_only,
                     same_namespace,
                 }| wit_types::ReadKind {
                    kind: kind_to_wit(kind),
                    maps_by: match maps_by {
                        MapRule::Label(k) => wit_types::MapRule::Label(k.clone()),
                        MapRule::Annotation(k) => wit_types::MapRule::Annotation(k.clone()),
                        MapRule::SameName => wit_types::MapRule::SameName,
                        MapRule::None => wit_types::MapRule::None,
                    },
                    metadata_only: *metadata_only,
                    same_namespace: *same_namespace,
                },
            )
            .collect(),
        writes: kinds(&m.writes),
        finalizer: m.finalizer,
        hints: wit_types::Hints {
            max_concurrent_reconciles,
            memory_limit_mib,
            timeout_ms,
            max_output_kib,
            max_events,
            max_applies,
            max_deletes,
        },
    }
}

fn response_to_wit(r: ReconcileResponse) -> wit::ReconcileResponse {
    wit::ReconcileResponse {
        apply: r.apply,
        delete: r
            .delete
            .into_iter()
            .map(
                |ObjectRef {
                     api_version,
                     kind,
                     namespace,
                     name,
                 }| wit::ObjectRef {
                    api_version,
                    kind,
                    namespace,
                    name,
                },
            )
            .collect(),
        status: r.status,
        events: r
            .events
            .into_iter()
            .map(
                |Event {
                     event_type,
                     reason,
                     message,
                 }| wit::Event {
                    event_type: match event_type {
                        EventType::Normal => wit::EventType::Normal,
                        EventType::Warning => wit::EventType::Warning,
                    },
                    reason,
                    message,
                },
            )
            .collect(),
        requeue_after_ms: r.requeue_after_ms,
        finalized: r.finalized,
    }
}
