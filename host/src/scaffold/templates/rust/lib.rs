//! {{name}}: reconciles {{api_version}} {{kind}}.
{{#custom}}
//!
//! Reports the generation it has seen in `status.observedGeneration`. Add
//! the objects a {{kind}} should have with `Response::apply`, and declare
//! their kinds with `.owns(...)` in `metadata()`.
{{/custom}}
{{^custom}}
//!
//! Logs each {{kind}} and changes nothing. Declare what it creates with
//! `.owns(...)` in `metadata()` and return it with `Response::apply`.
{{/custom}}

{{#admission}}
use reconciler_sdk::{Admission, AdmissionSettings, FailurePolicy, Verdict};
{{/admission}}
{{#custom}}
use reconciler_sdk::{Context, Error, KindRef, Object, PluginMetadata, Reconciler, Response};
use serde::{Deserialize, Serialize};

/// What a {{kind}} asks for.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct {{kind}}Spec {
    /// How many of something to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i64>,
}

/// What the plugin reports.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct {{kind}}Status {
    pub observed_generation: i64,
}

pub type {{kind}} = Object<{{kind}}Spec, {{kind}}Status>;
{{/custom}}
{{^custom}}
use reconciler_sdk::{Context, Error, KindRef, PartialObject, PluginMetadata, Reconciler, Response};

/// A {{kind}} as the plugin reads it: its identifying metadata. Use the
/// k8s-openapi type (`reconciler_sdk::k8s_openapi::api::...`) to read more.
pub type {{kind}} = PartialObject;
{{/custom}}

pub struct {{kind}}s;

impl Reconciler for {{kind}}s {
    type Primary = {{kind}};

    fn metadata() -> PluginMetadata {
        PluginMetadata::new(
            "{{name}}",
            env!("CARGO_PKG_VERSION"),
            KindRef::new("{{group}}", "{{version}}", "{{kind}}"),
        )
    }

{{#custom}}
    fn reconcile(object: {{kind}}, _ctx: &Context) -> Result<Response, Error> {
        let status = {{kind}}Status {
            observed_generation: object.metadata.generation.unwrap_or_default(),
        };
        Response::new().status(&status)
    }
{{/custom}}
{{^custom}}
    fn reconcile(object: {{kind}}, ctx: &Context) -> Result<Response, Error> {
        ctx.info(&format!("reconciled {{kind}} {}", object.metadata.name));
        Ok(Response::new())
    }
{{/custom}}
{{#admission}}

    /// Validation and defaulting of creates and updates; a failed call
    /// denies (`FailurePolicy::Ignore` would admit instead).
    fn admission() -> Option<AdmissionSettings> {
        Some(AdmissionSettings::validating().mutating().failure_policy(FailurePolicy::Fail))
    }

{{#custom}}
    fn validate(request: &Admission<{{kind}}>) -> Result<Verdict, Error> {
        let size = request.object.as_ref().and_then(|o| o.spec.size);
        Ok(match size {
            Some(size) if size < 0 => Verdict::deny(format!("spec.size must be 0 or more, got {size}")),
            _ => Verdict::allow(),
        })
    }

    /// Sees the object before `validate` does; the host turns the change
    /// into a JSON patch.
    fn apply_defaults(object: &mut serde_json::Value, _request: &Admission<{{kind}}>) -> Result<(), Error> {
        if let Some(spec) = object.get_mut("spec").and_then(|s| s.as_object_mut()) {
            spec.entry("size").or_insert(serde_json::json!(1));
        }
        Ok(())
    }
{{/custom}}
{{^custom}}
    /// A stub: allows everything. Deny with `Verdict::deny(message)`.
    fn validate(_request: &Admission<{{kind}}>) -> Result<Verdict, Error> {
        Ok(Verdict::allow())
    }

    /// A stub: changes nothing. Change `object` and the host turns the
    /// change into a JSON patch.
    fn apply_defaults(_object: &mut serde_json::Value, _request: &Admission<{{kind}}>) -> Result<(), Error> {
        Ok(())
    }
{{/custom}}
{{/admission}}
}

reconciler_sdk::export_plugin!({{kind}}s);
