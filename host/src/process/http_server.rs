//! The host's HTTP endpoints: the probes `/healthz` and `/readyz`, open to
//! anyone who can connect (the kubelet), and the reports ([`REPORT_PATHS`]:
//! `/metrics`, `/plugins`, `/clusters`, `/shards`), served apart by
//! `metrics_server.rs` (HTTPS, to clients the API server authorizes).
//!
//! They read a [`HostStatus`] that the run loop keeps up to date, so
//! serving a request never waits on the loop, and a scrape sees the queues
//! and the cache as they are at that moment.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::Context;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use reconciler_contract::KindRef;

use crate::engine::QueueStats;
use crate::engine::journal::Journal;
use crate::engine::shadow_book::ShadowBook;
use crate::plugin::hot_reload::PluginStatus;
use crate::process::metrics::Metrics;

/// What the gauges are set from at each scrape: the engine's queues and
/// cache, once there is an engine.
type Sampler = Box<dyn Fn() -> (Vec<QueueStats>, Vec<(KindRef, usize)>) + Send + Sync>;

/// What the endpoints report, shared with the run loop.
#[derive(Default)]
pub struct HostStatus {
    pub metrics: Metrics,
    ready: AtomicBool,
    /// Why the host is not ready, while it is not.
    waiting_for: Mutex<String>,
    /// What the plugins directory serves: `/plugins` reads it, and Plugin
    /// resources' followers wait on it for a load's outcome.
    plugins: tokio::sync::watch::Sender<Vec<PluginStatus>>,
    sampler: OnceLock<Sampler>,
    /// Where `/clusters` reads the member clusters from; set once.
    clusters: OnceLock<ClustersSource>,
    /// Where `/shards` reads the shard ring from (`run --sharding`); set once.
    shards: OnceLock<ShardsSource>,
    /// What candidates in shadow found, for every engine of the process:
    /// `/plugins/NAME/shadow` and the metrics read it.
    pub shadow: Arc<ShadowBook>,
    /// The last reconciles of each primary, for every engine of the
    /// process: `/objects/KIND/NAMESPACE/NAME` reads it.
    pub journal: Arc<Journal>,
}

type ShardsSource = Box<dyn Fn() -> crate::sharding::coordinator::ShardsStatus + Send + Sync>;

/// The member clusters as `/clusters` shows them.
type ClustersSource = Box<dyn Fn() -> Vec<crate::fleet::MemberStatus> + Send + Sync>;

impl HostStatus {
    pub fn new() -> Self {
        let status = Self::default();
        status.not_ready("starting");
        status
    }

    /// Ready: the plugins present at start serve from filled caches (or
    /// this replica is a standby, which has nothing to fill).
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::SeqCst);
    }

    pub fn not_ready(&self, why: &str) {
        *self.waiting_for.lock().unwrap_or_else(|e| e.into_inner()) = why.to_string();
        self.ready.store(false, Ordering::SeqCst);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    pub fn set_plugins(&self, plugins: Vec<PluginStatus>) {
        self.plugins.send_replace(plugins);
    }

    /// What the plugins directory serves, after every change.
    pub fn plugins_feed(&self) -> tokio::sync::watch::Receiver<Vec<PluginStatus>> {
        self.plugins.subscribe()
    }

    /// Where scrapes read queues and cache sizes from; set once.
    pub fn set_sampler(
        &self,
        sampler: impl Fn() -> (Vec<QueueStats>, Vec<(KindRef, usize)>) + Send + Sync + 'static,
    ) {
        let _ = self.sampler.set(Box::new(sampler));
    }

    /// Where `/clusters` reads the member clusters from; set once.
    pub fn set_clusters(
        &self,
        source: impl Fn() -> Vec<crate::fleet::MemberStatus> + Send + Sync + 'static,
    ) {
        let _ = self.clusters.set(Box::new(source));
    }

    /// Where `/shards` reads the shard ring from; set once.
    pub fn set_shards(
        &self,
        source: impl Fn() -> crate::sharding::coordinator::ShardsStatus + Send + Sync + 'static,
    ) {
        let _ = self.shards.set(Box::new(source));
    }

    fn metrics_text(&self) -> String {
        let (queues, cache) = self.sampler.get().map(|s| s()).unwrap_or_default();
        let clusters = self
            .clusters
            .get()
            .map(|source| source())
            .unwrap_or_default();
        self.metrics.set_shadow_counts(&self.shadow.counts());
        self.metrics.set_loop_counts(&self.journal.loops.counts());
        self.metrics.set_journal_usage(self.journal.usage());
        self.metrics
            .encode_with_clusters(&queues, &cache, &clusters)
    }
}

/// The probes as a router, for serving and for tests.
pub fn probes(status: Arc<HostStatus>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(status)
}

/// The paths [`reports`] serves. A reader needs `get` on each of them as a
/// non-resource URL (`deploy/metrics-reader.yaml` grants them all): a path
/// added here and not there answers that reader 403.
pub const REPORT_PATHS: [&str; 4] = ["/metrics", "/plugins", "/clusters", "/shards"];

/// The report of one plugin's candidate in shadow, below `/plugins`
/// (granted as `/plugins/*`).
pub const SHADOW_PATH: &str = "/plugins/{name}/shadow";

/// One object's journal (granted as `/objects/*`); a cluster-scoped
/// object's has no namespace part.
pub const OBJECT_PATHS: [&str; 2] = [
    "/objects/{kind}/{namespace}/{name}",
    "/objects/{kind}/{name}",
];

/// The reports ([`REPORT_PATHS`]) as a router, without access control:
/// whoever serves it decides who may read them.
pub fn reports(status: Arc<HostStatus>) -> Router {
    let [metrics_path, plugins_path, clusters_path, shards_path] = REPORT_PATHS;
    journal_routes()
        .route(plugins_path, get(plugins))
        .route(SHADOW_PATH, get(shadow))
        .route(clusters_path, get(clusters))
        .route(shards_path, get(shards))
        .route(metrics_path, get(metrics))
        .with_state(status)
}

/// The journal's paths ([`OBJECT_PATHS`]) alone: what `dev` serves.
pub fn journal(status: Arc<HostStatus>) -> Router {
    journal_routes().with_state(status)
}

fn journal_routes() -> Router<Arc<HostStatus>> {
    let [namespaced, cluster_scoped] = OBJECT_PATHS;
    Router::new()
        .route(namespaced, get(object_journal))
        .route(cluster_scoped, get(cluster_scoped_journal))
}

async fn readyz(State(status): State<Arc<HostStatus>>) -> Response {
    if status.is_ready() {
        "ok\n".into_response()
    } else {
        let why = status
            .waiting_for
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        )
            .into_response()
    }
}

async fn plugins(State(status): State<Arc<HostStatus>>) -> Json<Vec<PluginStatus>> {
    Json(status.plugins.borrow().clone())
}

/// What plugin `name`'s candidate in shadow found: its counts and the last
/// objects it decided differently for, newest first, with the differences.
async fn shadow(State(status): State<Arc<HostStatus>>, Path(name): Path<String>) -> Response {
    match status.shadow.of(&name) {
        Some(shadow) => Json(shadow).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            format!(
                "no candidate of plugin {name} has run in shadow: put one beside it as {name}.candidate.wasm, or give its Plugin spec.rollout (mode: shadow)\n"
            ),
        )
            .into_response(),
    }
}

/// Which cluster's object `/objects/...` asks for: `?cluster=NAME`, or all.
/// `?as=case`: the last reconcile's inputs as a golden case instead.
#[derive(serde::Deserialize)]
struct OfCluster {
    cluster: Option<String>,
    #[serde(rename = "as")]
    as_what: Option<String>,
}

/// The journal of one namespaced object: its last reconciles, newest first.
async fn object_journal(
    State(status): State<Arc<HostStatus>>,
    Path((kind, namespace, name)): Path<(String, String, String)>,
    Query(of): Query<OfCluster>,
) -> Response {
    journal_of(&status, &kind, Some(&namespace), &name, &of)
}

/// The journal of one cluster-scoped object.
async fn cluster_scoped_journal(
    State(status): State<Arc<HostStatus>>,
    Path((kind, name)): Path<(String, String)>,
    Query(of): Query<OfCluster>,
) -> Response {
    journal_of(&status, &kind, None, &name, &of)
}

fn journal_of(
    status: &HostStatus,
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    of: &OfCluster,
) -> Response {
    let cluster = of.cluster.as_deref();
    let object = match namespace {
        Some(namespace) => format!("{kind} {namespace}/{name}"),
        None => format!("{kind} {name}"),
    };
    match of.as_what.as_deref() {
        None => {}
        Some("case") => {
            return match status.journal.case(kind, namespace, name, cluster) {
                Some(kept) => Json(kept).into_response(),
                None => (
                    StatusCode::NOT_FOUND,
                    format!(
                        "no inputs of {object} kept: not reconciled by this host, forgotten (deleted, or past --journal-cases-mib), or --journal-cases-mib 0\n"
                    ),
                )
                    .into_response(),
            };
        }
        Some(other) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("?as={other}: the only other form is ?as=case\n"),
            )
                .into_response();
        }
    }
    let entries = status.journal.entries(kind, namespace, name, cluster);
    if entries.is_empty() {
        return (
            StatusCode::NOT_FOUND,
            format!(
                "no reconcile of {object} in the journal: not reconciled by this host (another replica's, or outside its scope), forgotten (deleted, or past --journal-max-mib), or the journal is off\n"
            ),
        )
            .into_response();
    }
    Json(entries).into_response()
}

/// Each member cluster: name, source, server, labels, engaged since,
/// ready, last error and when, objects cached, plugins running and waiting.
async fn clusters(State(status): State<Arc<HostStatus>>) -> Json<Vec<crate::fleet::MemberStatus>> {
    Json(
        status
            .clusters
            .get()
            .map(|source| source())
            .unwrap_or_default(),
    )
}

/// The shard ring as this replica sees it: members and what each settled
/// on, this replica's share, keys arriving and leaving, moves so far.
async fn shards(State(status): State<Arc<HostStatus>>) -> Response {
    match status.shards.get() {
        Some(source) => Json(source()).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            "not sharded: this host runs without --sharding\n",
        )
            .into_response(),
    }
}

async fn metrics(State(status): State<Arc<HostStatus>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        status.metrics_text(),
    )
        .into_response()
}

/// Listens on `addr` and serves the probes until the process ends.
/// Binding happens before this returns, so a taken port is an error at
/// start, not a log line later. Returns the address bound (port 0 picks one).
pub async fn serve(addr: SocketAddr, status: Arc<HostStatus>) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!(
            "cannot listen on {addr} for /healthz and /readyz (choose another with --http-listen)"
        )
    })?;
    let bound = serve_plain(listener, probes(status))?;
    tracing::info!("serving /healthz and /readyz on http://{bound}");
    Ok(bound)
}

/// Serves `router` over plain HTTP on `listener` until the process ends.
pub(crate) fn serve_plain(
    listener: tokio::net::TcpListener,
    router: Router,
) -> anyhow::Result<SocketAddr> {
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!("the HTTP endpoints on {bound} stopped: {e}");
        }
    });
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tower::ServiceExt;

    use super::*;

    async fn get_text(status: &Arc<HostStatus>, path: &str) -> (StatusCode, String) {
        let router = match path {
            "/healthz" | "/readyz" => probes(status.clone()),
            _ => reports(status.clone()),
        };
        let response = router
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let code = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (code, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn readiness_follows_the_host_and_says_why_not() {
        let status = Arc::new(HostStatus::new());
        assert_eq!(get_text(&status, "/healthz").await.0, StatusCode::OK);
        let (code, text) = get_text(&status, "/readyz").await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(text, "not ready: starting\n");
        status.set_ready();
        assert_eq!(get_text(&status, "/readyz").await.0, StatusCode::OK);
        status.not_ready("waiting for leadership");
        let (code, text) = get_text(&status, "/readyz").await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(text.contains("leadership"));
    }

    #[tokio::test]
    async fn shards_shows_the_ring_and_metrics_count_its_keys_and_moves() {
        use crate::sharding::coordinator::{ShardMember, ShardsStatus};
        let status = Arc::new(HostStatus::new());
        let (code, text) = get_text(&status, "/shards").await;
        assert_eq!(code, StatusCode::NOT_FOUND);
        assert!(text.contains("--sharding"), "{text}");

        let shards = ShardsStatus {
            ring: "podsets".into(),
            identity: "replica-a_1".into(),
            live: true,
            version: "v2".into(),
            settled: false,
            members: vec![
                ShardMember {
                    identity: "replica-a_1".into(),
                    settled: Some("v2".into()),
                    writer: Some("system:serviceaccount:ops:host/pod-a".into()),
                    buckets: 520,
                },
                ShardMember {
                    identity: "replica-b_2".into(),
                    settled: Some("v1".into()),
                    writer: None,
                    buckets: 504,
                },
            ],
            keys_owned: 7,
            keys_arriving: 3,
            keys_leaving: 1,
            moved_in_total: 10,
            moved_out_total: 4,
            rebalances_total: 2,
            ..ShardsStatus::default()
        };
        status.metrics.shards(&shards);
        let published = shards.clone();
        status.set_shards(move || published.clone());
        let (code, text) = get_text(&status, "/shards").await;
        assert_eq!(code, StatusCode::OK);
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json["keysOwned"], 7);
        assert_eq!(json["members"][1]["settled"], "v1");
        assert_eq!(
            json["members"][0]["writer"],
            "system:serviceaccount:ops:host/pod-a"
        );
        assert_eq!(json["settled"], false);
        assert_eq!(json["assignment"], "bounded-load");
        assert_eq!(json["members"][1]["buckets"], 504);

        let (_, metrics) = get_text(&status, "/metrics").await;
        for line in [
            "reconciler_host_shard_replicas 2",
            "reconciler_host_shard_keys{state=\"owned\"} 7",
            "reconciler_host_shard_keys{state=\"arriving\"} 3",
            "reconciler_host_shard_keys_moved_total{direction=\"in\"} 10",
            "reconciler_host_shard_rebalances_total 2",
        ] {
            assert!(metrics.contains(line), "{line} in\n{metrics}");
        }
        // Counters follow the totals without counting twice.
        status.metrics.shards(&ShardsStatus {
            moved_in_total: 12,
            ..shards
        });
        let (_, metrics) = get_text(&status, "/metrics").await;
        assert!(metrics.contains("reconciler_host_shard_keys_moved_total{direction=\"in\"} 12"));
    }

    #[tokio::test]
    async fn plugins_and_metrics_report_what_the_loop_published() {
        let status = Arc::new(HostStatus::new());
        status.set_plugins(vec![PluginStatus {
            file: "plugins/podset.wasm".into(),
            name: Some("podset".into()),
            version: Some("0.1.0".into()),
            sha256: Some("ab12".into()),
            kinds: None,
            loaded_at: Some("2026-01-01T00:00:00Z".into()),
            last_reload_error: None,
            waiting_for_kinds: false,
            waiting_for_serving: false,
            candidate_for: None,
        }]);
        status.set_sampler(|| {
            (
                vec![QueueStats {
                    plugin: "podset".into(),
                    depth: 3,
                    in_flight: 0,
                    concurrency: 4,
                }],
                vec![],
            )
        });
        let (code, text) = get_text(&status, "/plugins").await;
        assert_eq!(code, StatusCode::OK);
        let plugins: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(plugins[0]["name"], "podset");
        assert_eq!(plugins[0]["sha256"], "ab12");
        assert_eq!(plugins[0]["lastReloadError"], serde_json::Value::Null);
        let (_, text) = get_text(&status, "/metrics").await;
        assert!(
            text.contains("workqueue_depth{name=\"podset\",controller=\"podset\"} 3"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn an_objects_journal_is_served_newest_first_and_a_missing_one_says_why() {
        use crate::engine::case_inputs::CaseInputs;
        use crate::engine::cause::{Cause, Causes};
        use crate::engine::journal::Entry;
        use crate::engine::record::{Outcome, ReconcileRecord};
        use crate::engine::work_queue::PrimaryKey;
        let status = Arc::new(HostStatus::new());
        let (code, text) = get_text(&status, "/objects/PodSet/default/web").await;
        assert_eq!(code, StatusCode::NOT_FOUND);
        assert!(text.contains("--journal-max-mib"), "{text}");
        for (at, cluster) in [(1, "local"), (2, "east")] {
            let record = ReconcileRecord {
                at_millis: at,
                cluster: cluster.into(),
                plugin: "podset".into(),
                kind: "PodSet".into(),
                object: PrimaryKey::new(Some("default"), "web"),
                outcome: Outcome::Gone,
                waited_millis: 0,
            };
            let record = ReconcileRecord {
                outcome: Outcome::Applied {
                    changes: Vec::new(),
                    requeue_after: None,
                },
                ..record
            };
            let mut causes = Causes::default();
            causes.add(Cause::PluginLoaded);
            let entry = Entry::of(&record, &causes, "0.1.0", "abc", 2, None);
            let primary = serde_json::json!({"apiVersion": "example.com/v1", "kind": "PodSet",
                "metadata": {"name": "web", "namespace": "default"}});
            let case = CaseInputs::answered_nothing("podset", &primary, cluster);
            status.journal.record(&record, entry, Some(case));
        }
        let (code, text) = get_text(&status, "/objects/podset/default/web?as=case").await;
        assert_eq!(code, StatusCode::OK);
        let kept: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(kept["plugin"], "podset");
        assert_eq!(kept["name"], "east-default-web", "the newest");
        let (_, text) =
            get_text(&status, "/objects/podset/default/web?as=case&cluster=local").await;
        assert!(text.contains("\"name\":\"default-web\""), "{text}");
        let (code, text) = get_text(&status, "/objects/podset/default/web?as=yaml").await;
        assert_eq!(code, StatusCode::BAD_REQUEST);
        assert!(text.contains("?as=case"), "{text}");
        let (code, text) = get_text(&status, "/objects/podset/default/db?as=case").await;
        assert_eq!(code, StatusCode::NOT_FOUND);
        assert!(text.contains("--journal-cases-mib"), "{text}");
        let (code, text) = get_text(&status, "/objects/podset/default/web").await;
        assert_eq!(code, StatusCode::OK);
        let entries: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(entries[0]["cluster"], "east");
        assert_eq!(entries[1]["trigger"][0], "plugin loaded");
        let (_, text) = get_text(&status, "/objects/PodSet/default/web?cluster=local").await;
        let entries: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(entries.as_array().map(Vec::len), Some(1));
    }

    #[tokio::test]
    async fn a_candidates_shadow_is_reported_under_its_plugin_and_in_the_metrics() {
        use crate::engine::shadow_book::{CandidateId, ShadowDifference, ShadowOutcome};
        let status = Arc::new(HostStatus::new());
        let (code, text) = get_text(&status, "/plugins/podset/shadow").await;
        assert_eq!(code, StatusCode::NOT_FOUND);
        assert!(text.contains("podset.candidate.wasm"), "{text}");
        let id = CandidateId {
            plugin: "podset",
            version: "0.2.0",
            sha256: "0123456789abcdef",
        };
        let object = "PodSet default/web";
        let differing = ShadowDifference {
            object: object.into(),
            cluster: "local".into(),
            at: "2026-01-01T00:00:00Z".into(),
            outcome: "differed",
            differences: vec![crate::decision_diff::Difference::Requeue {
                serving: None,
                candidate: Some("30s".into()),
            }],
        };
        status
            .shadow
            .record(&id, object, ShadowOutcome::Differed, Some(differing), 0);
        status
            .shadow
            .record(&id, object, ShadowOutcome::Agreed, None, 1);
        let (code, text) = get_text(&status, "/plugins/podset/shadow").await;
        assert_eq!(code, StatusCode::OK);
        let shadow: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(shadow["candidateVersion"], "0.2.0");
        assert_eq!(shadow["counts"]["differed"], 1);
        assert_eq!(shadow["counts"]["agreed"], 1);
        assert_eq!(shadow["differing"][0]["object"], object);
        assert_eq!(shadow["differing"][0]["differences"][0]["in"], "requeue");
        let (_, text) = get_text(&status, "/metrics").await;
        assert!(
            text.contains(
                "reconciler_host_shadow_reconciles{plugin=\"podset\",candidate=\"0123456789ab\",outcome=\"differed\"} 1"
            ),
            "{text}"
        );
    }

    #[tokio::test]
    async fn the_open_port_serves_probes_and_no_reports() {
        let status = Arc::new(HostStatus::new());
        for path in REPORT_PATHS {
            let response = probes(status.clone())
                .oneshot(Request::get(path).body(Body::empty()).unwrap())
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        }
    }

    #[tokio::test]
    async fn serve_answers_on_a_real_socket_and_a_taken_port_is_an_error() {
        let status = Arc::new(HostStatus::new());
        let addr = serve("127.0.0.1:0".parse().unwrap(), status.clone())
            .await
            .unwrap();
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("ok\n"), "{answer}");

        let err = serve(addr, status).await.unwrap_err();
        assert!(err.to_string().contains("--http-listen"), "{err:#}");
    }
}
