//! Prometheus metrics of a running host.
//!
//! Where controller-runtime exports a metric for the same thing, this one
//! has its name and labels, with the plugin as `controller` (and as the
//! work queue's `name`), so the dashboards and alerts people already run
//! for Go operators work unchanged. What only this host has (plugin loads,
//! sandbox traps, the shared cache) is under `reconciler_host_`.

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};
use reconciler_contract::KindRef;

use crate::engine::{Outcome, QueueStats, ReconcileRecord};
use crate::plugin::hot_reload::ReloadEvent;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: String,
    result: &'static str,
}

/// controller-runtime labels its work queues by `name` and `controller`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    name: String,
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    group: String,
    version: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShadowLabels {
    plugin: String,
    /// The candidate's content hash, first 12 hex digits.
    candidate: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FileLabels {
    file: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabels {
    cluster: String,
}

/// A reconcile's result in one member cluster.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterResultLabels {
    cluster: String,
    controller: String,
    result: &'static str,
}

/// Keys of this replica by state: owned (reconciled here), arriving
/// (waiting for their old owner), leaving (given up, still reconciling).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardKeyLabels {
    state: &'static str,
}

/// Keys that moved to this replica (`in`) or away from it (`out`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardMoveLabels {
    direction: &'static str,
}

/// controller-runtime's reconcile time buckets, in seconds.
const RECONCILE_BUCKETS: [f64; 20] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0,
    10.0, 30.0, 60.0,
];

fn reconcile_histogram() -> Histogram {
    Histogram::new(RECONCILE_BUCKETS)
}

/// Registers `metric` under `name` and hands it back to be kept.
fn registered<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

/// What controller-runtime exports, under its names and labels.
struct ControllerRuntime {
    reconcile_total: Family<ResultLabels, Counter>,
    reconcile_errors: Family<ControllerLabels, Counter>,
    reconcile_time: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    active_workers: Family<ControllerLabels, Gauge>,
    max_concurrent: Family<ControllerLabels, Gauge>,
    queue_depth: Family<QueueLabels, Gauge>,
    queue_duration: Family<QueueLabels, Histogram, fn() -> Histogram>,
}

impl ControllerRuntime {
    fn register(registry: &mut Registry) -> Self {
        Self {
            reconcile_total: registered(
                registry,
                "controller_runtime_reconcile",
                "Reconciles per plugin (controller) and result: success, error, requeue_after",
                Family::default(),
            ),
            reconcile_errors: registered(
                registry,
                "controller_runtime_reconcile_errors",
                "Reconciles that failed, per plugin",
                Family::default(),
            ),
            reconcile_time: registered(
                registry,
                "controller_runtime_reconcile_time_seconds",
                "Time of one reconcile (plugin call and API requests), per plugin",
                Family::<ControllerLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                    reconcile_histogram,
                ),
            ),
            active_workers: registered(
                registry,
                "controller_runtime_active_workers",
                "Reconciles running now, per plugin",
                Family::default(),
            ),
            max_concurrent: registered(
                registry,
                "controller_runtime_max_concurrent_reconciles",
                "The most reconciles a plugin runs at once",
                Family::default(),
            ),
            queue_depth: registered(
                registry,
                "workqueue_depth",
                "Objects waiting to be reconciled (now or after a delay), per plugin",
                Family::default(),
            ),
            // The reconcile buckets, not controller-runtime's decades: a
            // bucket edge at 1 s answers "is the p99 wait within a second"
            // exactly.
            queue_duration: registered(
                registry,
                "workqueue_queue_duration_seconds",
                "How long an object waited in the queue past its due time before its reconcile started, per plugin",
                Family::<QueueLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                    reconcile_histogram,
                ),
            ),
        }
    }
}

/// What only this host has: plugin loads, the sandbox's traps and
/// timeouts, the shared cache.
struct HostFamilies {
    plugin_loads: Family<PluginLabels, Counter>,
    reload_failures: Family<FileLabels, Counter>,
    traps: Family<ControllerLabels, Counter>,
    timeouts: Family<ControllerLabels, Counter>,
    cache_objects: Family<KindLabels, Gauge>,
    shadow_reconciles: Family<ShadowLabels, Gauge>,
    loops: Family<ControllerLabels, Counter>,
    journal_bytes: Family<JournalLabels, Gauge>,
    journal_entries: Gauge,
}

/// Which part of the decision journal a gauge tells.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JournalLabels {
    /// `entries` (`--journal-max-mib`) or `cases` (`--journal-cases-mib`).
    part: &'static str,
}

impl HostFamilies {
    fn register(registry: &mut Registry) -> Self {
        Self {
            plugin_loads: registered(
                registry,
                "reconciler_host_plugin_loads",
                "Plugin versions loaded or reloaded into service, per plugin",
                Family::default(),
            ),
            reload_failures: registered(
                registry,
                "reconciler_host_plugin_reload_failures",
                "Plugin versions refused (broken, conflicting, or kinds not watchable), per file",
                Family::default(),
            ),
            traps: registered(
                registry,
                "reconciler_host_sandbox_traps",
                "Reconciles a plugin ended by trapping (a panic, or its memory cap)",
                Family::default(),
            ),
            timeouts: registered(
                registry,
                "reconciler_host_sandbox_timeouts",
                "Reconciles stopped at the plugin's deadline",
                Family::default(),
            ),
            cache_objects: registered(
                registry,
                "reconciler_host_cache_objects",
                "Objects in the shared cache, per kind",
                Family::default(),
            ),
            shadow_reconciles: registered(
                registry,
                "reconciler_host_shadow_reconciles",
                "Reconciles the current candidate of a plugin ran in shadow, per outcome: agreed, differed, failed, shed (not run, the host under pressure); a new candidate starts at zero",
                Family::default(),
            ),
            loops: registered(
                registry,
                "reconciler_reconcile_loops",
                "Reconcile loops found (an object reconciled again and again, each time writing the same field back or sending a value the API server stores otherwise), per controller; each counted once per --loop-window",
                Family::default(),
            ),
            journal_bytes: registered(
                registry,
                "reconciler_journal_bytes",
                "Bytes the decision journal holds, as its budgets count them: part=entries against --journal-max-mib, part=cases (last inputs, explain --as-case) against --journal-cases-mib",
                Family::default(),
            ),
            journal_entries: registered(
                registry,
                "reconciler_journal_entries",
                "Reconciles the decision journal holds, over every object",
                Gauge::default(),
            ),
        }
    }
}

/// The member clusters: reconciles in each, and each one's state.
struct ClusterFamilies {
    reconciles: Family<ClusterResultLabels, Counter>,
    engaged: Family<ClusterLabels, Gauge>,
    ready: Family<ClusterLabels, Gauge>,
    last_error: Family<ClusterLabels, Gauge>,
    objects: Family<ClusterLabels, Gauge>,
    paused: Family<ClusterLabels, Gauge>,
}

impl ClusterFamilies {
    fn register(registry: &mut Registry) -> Self {
        Self {
            reconciles: registered(
                registry,
                "reconciler_host_cluster_reconciles",
                "Reconciles per member cluster, plugin and result (the controller_runtime_ families sum over clusters)",
                Family::default(),
            ),
            engaged: registered(
                registry,
                "reconciler_host_cluster_engaged",
                "1 for each engaged member cluster",
                Family::default(),
            ),
            ready: registered(
                registry,
                "reconciler_host_cluster_ready",
                "1 when a member cluster answers and every plugin meant for it serves",
                Family::default(),
            ),
            last_error: registered(
                registry,
                "reconciler_host_cluster_last_error_timestamp_seconds",
                "When a member cluster last failed (unreachable, or a plugin that could not start there)",
                Family::default(),
            ),
            objects: registered(
                registry,
                "reconciler_host_cluster_cache_objects",
                "Objects cached for a member cluster",
                Family::default(),
            ),
            paused: registered(
                registry,
                "reconciler_host_cluster_paused",
                "1 while a member cluster is paused: it has more objects than --member-cache-max-objects",
                Family::default(),
            ),
        }
    }

    /// Sets the gauges from `clusters`, the members engaged now.
    fn set(&self, clusters: &[crate::fleet::MemberStatus]) {
        // Disengaged members must not linger either.
        for family in [
            &self.engaged,
            &self.ready,
            &self.last_error,
            &self.objects,
            &self.paused,
        ] {
            family.clear();
        }
        for member in clusters {
            let labels = ClusterLabels {
                cluster: member.name.clone(),
            };
            self.engaged.get_or_create(&labels).set(1);
            self.ready
                .get_or_create(&labels)
                .set(i64::from(member.ready));
            if let Some(at) = member
                .last_error_at
                .as_deref()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            {
                self.last_error.get_or_create(&labels).set(at.timestamp());
            }
            self.objects
                .get_or_create(&labels)
                .set(i64::try_from(member.objects_cached).unwrap_or(i64::MAX));
            self.paused
                .get_or_create(&labels)
                .set(i64::from(member.paused.is_some()));
        }
    }
}

/// The shard ring as this replica sees it (`run --sharding`).
struct ShardFamilies {
    replicas: Gauge,
    keys: Family<ShardKeyLabels, Gauge>,
    moves: Family<ShardMoveLabels, Counter>,
    rebalances: Counter,
}

impl ShardFamilies {
    fn register(registry: &mut Registry) -> Self {
        Self {
            replicas: registered(
                registry,
                "reconciler_host_shard_replicas",
                "Live replicas in the shard ring, as this replica sees it (run --sharding)",
                Gauge::default(),
            ),
            keys: registered(
                registry,
                "reconciler_host_shard_keys",
                "Primaries of this replica: owned (reconciled here), arriving (waiting for their old owner to settle), leaving (given up, still reconciling)",
                Family::default(),
            ),
            moves: registered(
                registry,
                "reconciler_host_shard_keys_moved",
                "Primaries that moved to this replica (in) or away from it (out) on rebalances",
                Family::default(),
            ),
            rebalances: registered(
                registry,
                "reconciler_host_shard_rebalances",
                "Changes of the shard ring this replica saw",
                Counter::default(),
            ),
        }
    }
}

pub struct Metrics {
    registry: Registry,
    runtime: ControllerRuntime,
    host: HostFamilies,
    clusters: ClusterFamilies,
    shards: ShardFamilies,
    /// Encoding reads every family; one scrape at a time keeps gauges that
    /// are refreshed just before it consistent.
    scrape: Mutex<()>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every family, registered in the order a scrape lists them.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let runtime = ControllerRuntime::register(&mut registry);
        let host = HostFamilies::register(&mut registry);
        let clusters = ClusterFamilies::register(&mut registry);
        let shards = ShardFamilies::register(&mut registry);
        Self {
            registry,
            runtime,
            host,
            clusters,
            shards,
            scrape: Mutex::new(()),
        }
    }

    /// Takes in the shard ring's state after a rebalance or a settle.
    pub fn shards(&self, status: &crate::sharding::coordinator::ShardsStatus) {
        let shards = &self.shards;
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        shards.replicas.set(gauge(status.members.len()));
        for (state, n) in [
            ("owned", status.keys_owned),
            ("arriving", status.keys_arriving),
            ("leaving", status.keys_leaving),
        ] {
            shards
                .keys
                .get_or_create(&ShardKeyLabels { state })
                .set(gauge(n));
        }
        // The status counts from start; the counters catch up to it.
        for (direction, total) in [
            ("in", status.moved_in_total),
            ("out", status.moved_out_total),
        ] {
            let counter = shards.moves.get_or_create(&ShardMoveLabels { direction });
            counter.inc_by(total.saturating_sub(counter.get()));
        }
        shards.rebalances.inc_by(
            status
                .rebalances_total
                .saturating_sub(shards.rebalances.get()),
        );
    }

    /// Counts one finished reconcile in member `cluster` that took `took`.
    pub fn reconciled_in(&self, cluster: &str, record: &ReconcileRecord, took: Duration) {
        if let Some(result) = result_of(record) {
            self.clusters
                .reconciles
                .get_or_create(&ClusterResultLabels {
                    cluster: cluster.to_string(),
                    controller: record.plugin.clone(),
                    result,
                })
                .inc();
        }
        self.reconciled(record, took);
    }

    /// Counts one finished reconcile that took `took`.
    pub fn reconciled(&self, record: &ReconcileRecord, took: Duration) {
        let controller = ControllerLabels {
            controller: record.plugin.clone(),
        };
        let Some(result) = result_of(record) else {
            // Never started: not a reconcile.
            return;
        };
        if let Outcome::Failed { reason, .. } = &record.outcome {
            self.runtime
                .reconcile_errors
                .get_or_create(&controller)
                .inc();
            match reason.as_str() {
                "Trap" | "MemoryLimit" => {
                    self.host.traps.get_or_create(&controller).inc();
                }
                "Timeout" => {
                    self.host.timeouts.get_or_create(&controller).inc();
                }
                _ => {}
            }
        }
        self.runtime
            .reconcile_total
            .get_or_create(&ResultLabels {
                controller: controller.controller.clone(),
                result,
            })
            .inc();
        self.runtime
            .reconcile_time
            .get_or_create(&controller)
            .observe(took.as_secs_f64());
        self.runtime
            .queue_duration
            .get_or_create(&QueueLabels {
                name: controller.controller.clone(),
                controller: controller.controller,
            })
            .observe(record.waited_millis.max(0) as f64 / 1000.0);
    }

    /// Counts what a rescan of the plugins directory did.
    pub fn reloaded(&self, events: &[ReloadEvent]) {
        for event in events {
            match event {
                ReloadEvent::Loaded { name, .. } | ReloadEvent::Reloaded { name, .. } => {
                    self.host
                        .plugin_loads
                        .get_or_create(&PluginLabels {
                            plugin: name.clone(),
                        })
                        .inc();
                }
                ReloadEvent::Failed { file, .. } => {
                    let file = file
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    self.host
                        .reload_failures
                        .get_or_create(&FileLabels { file })
                        .inc();
                }
                ReloadEvent::Unloaded { .. }
                | ReloadEvent::CandidateLoaded { .. }
                | ReloadEvent::CandidateUnloaded { .. } => {}
            }
        }
    }

    /// The Prometheus text exposition, after setting the gauges from the
    /// state of the moment.
    pub fn encode(&self, queues: &[QueueStats], cache: &[(KindRef, usize)]) -> String {
        self.encode_with_clusters(queues, cache, &[])
    }

    /// Sets the shadow gauges from the book's counts: `(plugin, candidate
    /// content hash, counts)` per plugin with a candidate.
    pub fn set_shadow_counts(
        &self,
        counts: &[(String, String, crate::engine::shadow_book::ShadowCounts)],
    ) {
        let family = &self.host.shadow_reconciles;
        family.clear();
        for (plugin, sha, c) in counts {
            for (outcome, n) in [
                ("agreed", c.agreed),
                ("differed", c.differed),
                ("failed", c.failed),
                ("shed", c.shed),
            ] {
                family
                    .get_or_create(&ShadowLabels {
                        plugin: plugin.clone(),
                        candidate: sha.chars().take(12).collect(),
                        outcome,
                    })
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
    }

    /// Brings the loop counters up to `counts`, the loops found so far per
    /// plugin.
    pub fn set_loop_counts(&self, counts: &std::collections::BTreeMap<String, u64>) {
        for (plugin, n) in counts {
            let counter = self.host.loops.get_or_create(&ControllerLabels {
                controller: plugin.clone(),
            });
            counter.inc_by(n.saturating_sub(counter.get()));
        }
    }

    /// Sets the journal's gauges to what it holds now.
    pub fn set_journal_usage(&self, usage: crate::engine::journal::Usage) {
        let gauge = |part| {
            self.host
                .journal_bytes
                .get_or_create(&JournalLabels { part })
        };
        gauge("entries").set(i64::try_from(usage.entry_bytes).unwrap_or(i64::MAX));
        gauge("cases").set(i64::try_from(usage.case_bytes).unwrap_or(i64::MAX));
        self.host
            .journal_entries
            .set(i64::try_from(usage.entries).unwrap_or(i64::MAX));
    }

    /// [`Self::encode`], with the member clusters' gauges.
    pub fn encode_with_clusters(
        &self,
        queues: &[QueueStats],
        cache: &[(KindRef, usize)],
        clusters: &[crate::fleet::MemberStatus],
    ) -> String {
        let _one_at_a_time = self.scrape.lock().unwrap_or_else(|e| e.into_inner());
        self.clusters.set(clusters);
        let runtime = &self.runtime;
        // Unloaded plugins and emptied kinds must not linger.
        runtime.active_workers.clear();
        runtime.max_concurrent.clear();
        runtime.queue_depth.clear();
        self.host.cache_objects.clear();
        for queue in queues {
            let controller = ControllerLabels {
                controller: queue.plugin.clone(),
            };
            let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
            runtime
                .active_workers
                .get_or_create(&controller)
                .set(gauge(queue.in_flight));
            runtime
                .max_concurrent
                .get_or_create(&controller)
                .set(gauge(queue.concurrency));
            runtime
                .queue_depth
                .get_or_create(&QueueLabels {
                    name: queue.plugin.clone(),
                    controller: queue.plugin.clone(),
                })
                .set(gauge(queue.depth));
        }
        for (kind, count) in cache {
            self.host
                .cache_objects
                .get_or_create(&KindLabels {
                    group: kind.group.clone(),
                    version: kind.version.clone(),
                    kind: kind.kind.clone(),
                })
                .set(i64::try_from(*count).unwrap_or(i64::MAX));
        }
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// controller-runtime's `result` label of a finished reconcile; `None` for
/// one that never started.
fn result_of(record: &ReconcileRecord) -> Option<&'static str> {
    match &record.outcome {
        Outcome::Applied {
            requeue_after: Some(_),
            ..
        } => Some("requeue_after"),
        Outcome::Applied { .. } | Outcome::Gone => Some("success"),
        Outcome::Failed { .. } => Some("error"),
        Outcome::Unloaded => None,
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::engine::work_queue::PrimaryKey;

    fn record(plugin: &str, outcome: Outcome) -> ReconcileRecord {
        ReconcileRecord {
            at_millis: 0,
            cluster: "local".into(),
            plugin: plugin.into(),
            kind: "PodSet".into(),
            object: PrimaryKey {
                namespace: Some("default".into()),
                name: "web".into(),
            },
            outcome,
            waited_millis: 250,
        }
    }

    fn failed(reason: &str) -> Outcome {
        Outcome::Failed {
            reason: reason.into(),
            message: "m".into(),
            failures: 1,
            retry_in: Duration::from_secs(1),
        }
    }

    #[test]
    fn member_clusters_have_their_own_gauges_and_reconcile_counts() {
        let metrics = Metrics::new();
        let applied = Outcome::Applied {
            changes: vec![],
            requeue_after: None,
        };
        metrics.reconciled_in("east", &record("podset", applied), Duration::from_millis(3));
        metrics.reconciled_in(
            "west",
            &record("podset", failed("Trap")),
            Duration::from_millis(3),
        );
        let member = |name: &str, ready: bool, error_at: Option<&str>| crate::fleet::MemberStatus {
            name: name.into(),
            source: "test".into(),
            server: "https://127.0.0.1".into(),
            labels: Default::default(),
            engaged_since: "2026-01-01T00:00:00Z".into(),
            ready,
            last_error: error_at.map(|_| "unreachable".into()),
            last_error_at: error_at.map(Into::into),
            objects_cached: 12,
            plugins_running: vec![],
            plugins_waiting: Default::default(),
            paused: (!ready).then(|| "cluster west paused".into()),
        };
        let clusters = [
            member("east", true, None),
            member("west", false, Some("2026-01-01T00:01:00Z")),
        ];
        let text = metrics.encode_with_clusters(&[], &[], &clusters);
        for line in [
            "reconciler_host_cluster_reconciles_total{cluster=\"east\",controller=\"podset\",result=\"success\"} 1",
            "reconciler_host_cluster_reconciles_total{cluster=\"west\",controller=\"podset\",result=\"error\"} 1",
            "reconciler_host_cluster_engaged{cluster=\"west\"} 1",
            "reconciler_host_cluster_ready{cluster=\"east\"} 1",
            "reconciler_host_cluster_ready{cluster=\"west\"} 0",
            "reconciler_host_cluster_last_error_timestamp_seconds{cluster=\"west\"} 1767225660",
            "reconciler_host_cluster_cache_objects{cluster=\"east\"} 12",
            "reconciler_host_cluster_paused{cluster=\"east\"} 0",
            "reconciler_host_cluster_paused{cluster=\"west\"} 1",
            "controller_runtime_reconcile_total{controller=\"podset\",result=\"success\"} 1",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        // A member disengaged since the last scrape is gone from the gauges.
        let text = metrics.encode_with_clusters(&[], &[], &clusters[..1]);
        assert!(
            !text.contains("reconciler_host_cluster_engaged{cluster=\"west\"}"),
            "{text}"
        );
    }

    #[test]
    fn reconciles_are_counted_under_controller_runtime_names() {
        let metrics = Metrics::new();
        let applied = Outcome::Applied {
            changes: vec![],
            requeue_after: None,
        };
        metrics.reconciled(&record("podset", applied), Duration::from_millis(3));
        metrics.reconciled(&record("podset", failed("Timeout")), Duration::from_secs(1));
        metrics.reconciled(&record("podset", failed("Trap")), Duration::from_millis(1));
        let text = metrics.encode(
            &[QueueStats {
                plugin: "podset".into(),
                depth: 2,
                in_flight: 1,
                concurrency: 4,
            }],
            &[(KindRef::new("apps", "v1", "Deployment"), 7)],
        );
        for line in [
            "controller_runtime_reconcile_total{controller=\"podset\",result=\"success\"} 1",
            "controller_runtime_reconcile_total{controller=\"podset\",result=\"error\"} 2",
            "controller_runtime_reconcile_errors_total{controller=\"podset\"} 2",
            "controller_runtime_reconcile_time_seconds_count{controller=\"podset\"} 3",
            "controller_runtime_reconcile_time_seconds_bucket{le=\"0.005\",controller=\"podset\"} 2",
            "workqueue_queue_duration_seconds_count{name=\"podset\",controller=\"podset\"} 3",
            "workqueue_queue_duration_seconds_bucket{le=\"0.2\",name=\"podset\",controller=\"podset\"} 0",
            "workqueue_queue_duration_seconds_bucket{le=\"0.25\",name=\"podset\",controller=\"podset\"} 3",
            "reconciler_host_sandbox_timeouts_total{controller=\"podset\"} 1",
            "reconciler_host_sandbox_traps_total{controller=\"podset\"} 1",
            "workqueue_depth{name=\"podset\",controller=\"podset\"} 2",
            "controller_runtime_active_workers{controller=\"podset\"} 1",
            "controller_runtime_max_concurrent_reconciles{controller=\"podset\"} 4",
            "reconciler_host_cache_objects{group=\"apps\",version=\"v1\",kind=\"Deployment\"} 7",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }

    #[test]
    fn gauges_of_unloaded_plugins_disappear_and_reloads_are_counted() {
        let metrics = Metrics::new();
        let queue = QueueStats {
            plugin: "old".into(),
            depth: 1,
            in_flight: 0,
            concurrency: 1,
        };
        assert!(
            metrics
                .encode(&[queue], &[])
                .contains("workqueue_depth{name=\"old\"")
        );
        metrics.reloaded(&[
            ReloadEvent::Loaded {
                file: PathBuf::from("plugins/podset.wasm"),
                name: "podset".into(),
                version: "1".into(),
                sha256: "ab".into(),
            },
            ReloadEvent::Failed {
                file: PathBuf::from("plugins/broken.wasm"),
                reason: "not a component".into(),
                retrying: false,
            },
        ]);
        let text = metrics.encode(&[], &[]);
        assert!(!text.contains("workqueue_depth{name=\"old\""), "{text}");
        assert!(
            text.contains("reconciler_host_plugin_loads_total{plugin=\"podset\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("reconciler_host_plugin_reload_failures_total{file=\"broken.wasm\"} 1"),
            "{text}"
        );
    }
}
