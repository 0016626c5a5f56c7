//! The conformance probe (tests/conformance/README.md): a plugin that makes
//! the host calls its primary's `spec.calls` name, reports what each
//! returned in `status.results`, and answers with what `spec.respond`
//! holds. The same probe exists in Python and JavaScript; run by the host
//! and by each SDK's harness over the same cases, it shows the harnesses
//! keep the host's rules.

use reconciler_sdk::{
    Context, Error, EventType, Hints, KindRef, MapRule, Object, PluginMetadata, Reconciler,
    Response,
};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Default, Deserialize)]
pub struct ProbeSpec {
    #[serde(default)]
    pub calls: Vec<Value>,
    #[serde(default)]
    pub respond: Respond,
}

#[derive(Debug, Default, Deserialize)]
pub struct Respond {
    #[serde(default)]
    pub apply: Vec<Value>,
    #[serde(default)]
    pub delete: Vec<Value>,
    #[serde(default)]
    pub events: Vec<Value>,
}

pub type Probe = Object<ProbeSpec>;

pub struct Probes;

/// `v1/Pod` or `apps/v1/Deployment`.
fn kind_of(text: &str) -> KindRef {
    let (api_version, kind) = text.rsplit_once('/').unwrap_or(("", text));
    KindRef::from_api_version(api_version, kind)
}

/// Objects as `namespace/name` (`name` when cluster-scoped), when the call
/// asks for `names: true`; else the objects themselves.
fn shown(call: &Value, objects: Vec<Value>) -> Value {
    if call.get("names").and_then(Value::as_bool) != Some(true) {
        return Value::from(objects);
    }
    objects
        .iter()
        .map(|o| {
            let meta = |key| o["metadata"][key].as_str().unwrap_or_default();
            match meta("namespace") {
                "" => Value::from(meta("name")),
                ns => Value::from(format!("{ns}/{}", meta("name"))),
            }
        })
        .collect()
}

fn text<'a>(call: &'a Value, key: &str) -> Option<&'a str> {
    call.get(key).and_then(Value::as_str)
}

/// What a cache call returned, or that the host refused it.
fn outcome(result: Result<Value, Error>) -> Result<Value, Error> {
    match result {
        Ok(v) => Ok(v),
        Err(Error::Host(_)) => Ok(json!({"refused": true})),
        Err(e) => Err(e),
    }
}

impl Reconciler for Probes {
    type Primary = Probe;

    fn metadata() -> PluginMetadata {
        let core = |kind| KindRef::new("", "v1", kind);
        PluginMetadata::new(
            "conformance-probe",
            "0.1.0",
            KindRef::new("conformance.reconciler-host.io", "v1", "Probe"),
        )
        .owns(core("ConfigMap"))
        .writes(core("Service"))
        .reads_in_namespace(core("Pod"), MapRule::Label("probe".into()), true)
        .reads(core("Secret"), MapRule::None, false)
        .reads(core("Namespace"), MapRule::None, false)
        .hints(Hints {
            max_events: Some(2),
            max_applies: Some(3),
            max_deletes: Some(2),
            ..Hints::default()
        })
    }

    fn reconcile(probe: Probe, ctx: &Context) -> Result<Response, Error> {
        let mut results = Vec::with_capacity(probe.spec.calls.len());
        for call in &probe.spec.calls {
            let result = if let Some(get) = call.get("get") {
                let kind = kind_of(text(get, "kind").unwrap_or_default());
                outcome(
                    ctx.get_as::<Value>(
                        &kind,
                        text(get, "namespace"),
                        text(get, "name").unwrap_or_default(),
                    )
                    .map(|o| o.unwrap_or(Value::Null)),
                )?
            } else if let Some(list) = call.get("list") {
                let kind = kind_of(text(list, "kind").unwrap_or_default());
                let selector = text(list, "selector").unwrap_or_default();
                outcome(
                    ctx.list_as::<Value>(&kind, text(list, "namespace"), selector)
                        .map(|objects| shown(list, objects)),
                )?
            } else if let Some(children) = call.get("children") {
                let kind = kind_of(text(children, "kind").unwrap_or_default());
                shown(children, ctx.children_of_kind::<Value>(&kind)?)
            } else if call.get("now").is_some() {
                json!(ctx.now().as_millisecond())
            } else if call.get("cluster").is_some() {
                let cluster = ctx.cluster();
                json!({"name": cluster.name, "labels": cluster.labels})
            } else if call.get("deleting").is_some() {
                json!(ctx.deleting())
            } else {
                return Err(Error::msg(format!("unknown call {call}")));
            };
            results.push(result);
        }
        let mut response = Response::new().status(&json!({ "results": results }))?;
        let respond = &probe.spec.respond;
        for object in &respond.apply {
            response = response.apply(object)?;
        }
        for d in &respond.delete {
            let kind = kind_of(text(d, "kind").unwrap_or_default());
            response = response.delete(
                &kind,
                text(d, "namespace"),
                text(d, "name").unwrap_or_default(),
            );
        }
        for e in &respond.events {
            let kind = match text(e, "type") {
                Some("Warning") => EventType::Warning,
                _ => EventType::Normal,
            };
            response = response.event(
                kind,
                text(e, "reason").unwrap_or_default(),
                text(e, "message").unwrap_or_default(),
            );
        }
        Ok(response)
    }
}

reconciler_sdk::export_plugin!(Probes);
