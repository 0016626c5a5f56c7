//! Traces (`--otlp-endpoint`): the reconcile spans, with the guest call and
//! each API request under them, sent to an OpenTelemetry collector by OTLP
//! over HTTP (protobuf).
//!
//! Built on the `tracing` spans the host logs with, so a span is written
//! once and serves both. Only the host's own spans go out (not those of
//! the crates it uses), at info level whatever `RUST_LOG` says, so logs can
//! be quiet while traces are complete. Off unless an endpoint is given (or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` set): nothing is built, no thread runs.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{SpanExporter, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

/// The standard variable naming the collector, read when no endpoint is
/// given on the command line.
pub const ENDPOINT_VARIABLE: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// Where traces go and how many reconciles are traced.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceConfig {
    /// The collector's OTLP/HTTP base URL (`/v1/traces` is added), or the
    /// full URL of its traces path.
    pub endpoint: String,
    /// The share of reconciles traced, from 0 to 1.
    pub sample_ratio: f64,
}

impl TraceConfig {
    /// The configuration `--otlp-endpoint` (or else the standard variable)
    /// and `--otlp-sample-ratio` make: `None` when neither names an
    /// endpoint.
    pub fn from_args(endpoint: Option<&str>, sample_ratio: f64) -> Option<Self> {
        let endpoint = match endpoint {
            Some(endpoint) => endpoint.to_string(),
            None => std::env::var(ENDPOINT_VARIABLE).ok()?,
        };
        let endpoint = endpoint.trim();
        if endpoint.is_empty() {
            return None;
        }
        Some(Self {
            endpoint: traces_url(endpoint),
            sample_ratio: sample_ratio.clamp(0.0, 1.0),
        })
    }
}

/// The collector's traces URL: a base URL (as OTEL_EXPORTER_OTLP_ENDPOINT
/// names one) gets `/v1/traces`; a URL that already ends so is kept.
fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_string()
    } else {
        format!("{base}/v1/traces")
    }
}

/// The exporter of a running host; [`Self::shutdown`] sends what is left.
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// Builds the exporter: call it before any async runtime starts (its
    /// HTTP client is a blocking one, on the exporter's own thread).
    pub fn start(config: &TraceConfig) -> anyhow::Result<Self> {
        let exporter = SpanExporter::builder()
            .with_http()
            .with_endpoint(&config.endpoint)
            .with_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| anyhow::anyhow!("traces to {}: {e}", config.endpoint))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                config.sample_ratio,
            ))))
            .with_resource(
                Resource::builder()
                    .with_service_name("reconciler-host")
                    .build(),
            )
            .build();
        Ok(Self { provider })
    }

    /// The layer that turns the host's spans into exported ones.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        let tracer = self.provider.tracer("reconciler-host");
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(
                Targets::new()
                    .with_target("reconciler_host", tracing::Level::INFO)
                    .with_target("reconciler-host", tracing::Level::INFO),
            )
    }

    /// Sends the spans still waiting, and stops the exporter's thread.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            eprintln!("warning: traces not all sent at exit: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_is_the_collectors_base_url_or_its_traces_url() {
        let config = TraceConfig::from_args(Some("http://127.0.0.1:4318"), 0.5).unwrap();
        assert_eq!(config.endpoint, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(config.sample_ratio, 0.5);
        let full = TraceConfig::from_args(Some("http://c:4318/v1/traces/"), 3.0).unwrap();
        assert_eq!(full.endpoint, "http://c:4318/v1/traces");
        assert_eq!(full.sample_ratio, 1.0, "a ratio above 1 traces all");
        assert_eq!(TraceConfig::from_args(Some("  "), 1.0), None);
    }
}
