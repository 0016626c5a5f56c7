//! Traces (`--otlp-endpoint`, here through OTEL_EXPORTER_OTLP_ENDPOINT)
//! against a real API server, received by an OTLP/HTTP receiver on
//! loopback that decodes what the host sends as the OpenTelemetry protocol
//! defines it (opentelemetry-proto's messages). A PodSet converges; its
//! reconciles are spans named `reconcile` carrying the plugin, its digest,
//! the cluster, the object, what triggered it and the outcome, each with
//! the plugin call and the API requests it made as child spans.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message as _;
use reconciler_tests::example_plugin;
use reconciler_tests::real_cluster::podset_convergence::{podsets, problem};
use reconciler_tests::real_cluster::{Probe, RealCluster, Suite};
use serde_json::json;

const SUITE: Suite = Suite {
    name: "traces_real_cluster",
    host_binary: env!("CARGO_BIN_EXE_reconciler-host-under-test"),
};

/// One span as received: its ids, name and string attributes.
#[derive(Clone, Debug)]
struct Received {
    trace: Vec<u8>,
    id: Vec<u8>,
    parent: Vec<u8>,
    name: String,
    attributes: BTreeMap<String, String>,
}

/// Serves POST /v1/traces on a loopback port; every span it decodes goes
/// into the returned list.
async fn receiver() -> Result<(String, Arc<Mutex<Vec<Received>>>)> {
    let spans: Arc<Mutex<Vec<Received>>> = Arc::default();
    let kept = spans.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(async move |body: Bytes| {
            let Ok(request) = ExportTraceServiceRequest::decode(body) else {
                return axum::http::StatusCode::BAD_REQUEST;
            };
            let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
            for span in request
                .resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .flat_map(|s| &s.spans)
            {
                let attributes = span
                    .attributes
                    .iter()
                    .filter_map(|a| match a.value.as_ref()?.value.as_ref()? {
                        AnyValue::StringValue(s) => Some((a.key.clone(), s.clone())),
                        _ => None,
                    })
                    .collect();
                kept.push(Received {
                    trace: span.trace_id.clone(),
                    id: span.span_id.clone(),
                    parent: span.parent_span_id.clone(),
                    name: span.name.clone(),
                    attributes,
                });
            }
            axum::http::StatusCode::OK
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((format!("http://{address}"), spans))
}

#[test]
fn a_reconcile_is_a_span_with_the_plugin_call_and_its_api_requests_under_it() {
    SUITE.run(
        "a_reconcile_is_a_span_with_the_plugin_call_and_its_api_requests_under_it",
        async |cx| traced(cx).await,
    );
}

async fn traced(cx: &mut RealCluster) -> Result<()> {
    cx.install_crds(&reconciler_tests::root().join("crds/podset.yaml"))
        .await?;
    let (endpoint, spans) = receiver().await?;
    cx.start_host_with_env(
        &[example_plugin("podset")],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            // Sent every half second rather than every five.
            ("OTEL_BSP_SCHEDULE_DELAY", "500"),
        ],
    )?;
    cx.create(
        json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet",
        "metadata": {"name": "traced"}, "spec": {"size": 2}}),
    )
    .await?;
    cx.wait_for(
        "PodSet traced to converge",
        Duration::from_secs(120),
        async || {
            Ok(match problem(cx, 1).await? {
                Some(problem) => Probe::Pending(problem),
                None => Probe::Ready(()),
            })
        },
    )
    .await?;
    let object = format!("{}/traced", cx.namespace);
    let (reconcile, children) = cx
        .wait_for(
            "a reconcile span of PodSet traced that applied, with its children",
            Duration::from_secs(60),
            async || {
                let spans = spans.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let applied = spans.iter().find(|s| {
                    s.name == "reconcile"
                        && s.attributes.get("object_name").map(String::as_str) == Some("traced")
                        && s.attributes.get("outcome").map(String::as_str) == Some("applied")
                        && spans.iter().any(|c| {
                            c.parent == s.id
                                && c.name == "api_request"
                                && c.attributes.get("verb").map(String::as_str) == Some("apply")
                        })
                });
                Ok(match applied {
                    Some(span) => {
                        let children: Vec<Received> = spans
                            .iter()
                            .filter(|c| c.parent == span.id && c.trace == span.trace)
                            .cloned()
                            .collect();
                        Probe::Ready((span.clone(), children))
                    }
                    None => Probe::Pending(format!("{} spans received", spans.len())),
                })
            },
        )
        .await?;
    let attribute = |name: &str| reconcile.attributes.get(name).cloned().unwrap_or_default();
    cx.step(format!(
        "reconcile span: {:?}; children: {:?}",
        reconcile.attributes,
        children
            .iter()
            .map(|c| format!(
                "{} {}",
                c.name,
                c.attributes.get("verb").cloned().unwrap_or_default()
            ))
            .collect::<Vec<_>>()
    ));
    ensure!(attribute("plugin") == "podset", "{reconcile:?}");
    ensure!(attribute("kind") == "PodSet", "{reconcile:?}");
    ensure!(attribute("namespace") == cx.namespace, "{reconcile:?}");
    ensure!(attribute("cluster") == "local", "{reconcile:?}");
    // Its first reconcile was queued by the PodSet's creation (or the
    // plugin's first list of it); later ones by changes of its children.
    let trigger = attribute("trigger");
    ensure!(
        trigger.contains("PodSet")
            || trigger.contains("Deployment")
            || trigger.contains("Pod ")
            || trigger == "plugin loaded",
        "the trigger attribute names what queued the reconcile: {trigger:?}"
    );
    // A change of the PodSet's spec is a reconcile that says so.
    cx.merge_patch(&podsets(), "traced", json!({"spec": {"size": 3}}))
        .await?;
    let wanted = format!("PodSet {object} changed");
    let triggers = cx
        .wait_for(
            "a reconcile triggered by the PodSet's change",
            Duration::from_secs(60),
            async || {
                let triggers: Vec<String> = spans
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .filter(|s| s.name == "reconcile")
                    .filter_map(|s| s.attributes.get("trigger").cloned())
                    .collect();
                Ok(if triggers.iter().any(|t| t.contains(&wanted)) {
                    Probe::Ready(triggers)
                } else {
                    Probe::Pending(format!("triggers so far: {triggers:?}"))
                })
            },
        )
        .await?;
    cx.step(format!("the reconciles' triggers: {triggers:?}"));
    let digest = attribute("digest");
    ensure!(
        digest.len() == 12 && digest.chars().all(|c| c.is_ascii_hexdigit()),
        "the digest attribute is the plugin's sha256, shortened: {digest:?}"
    );
    ensure!(
        children.iter().any(|c| c.name == "plugin_call"
            && c.attributes.get("plugin").map(String::as_str) == Some("podset")),
        "no plugin_call span under the reconcile: {children:?}"
    );
    let applied = children
        .iter()
        .find(|c| c.attributes.get("verb").map(String::as_str) == Some("apply"))
        .context("an apply under the reconcile")?;
    ensure!(
        applied
            .attributes
            .get("object")
            .is_some_and(|o| o.contains(&object)),
        "the apply names the Deployment {object}: {applied:?}"
    );
    Ok(())
}
