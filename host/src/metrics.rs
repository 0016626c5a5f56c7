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
use prometheus_client::registry::Registry;
use reconciler_contract::KindRef;

use crate::engine::{Outcome, QueueStats, ReconcileRecord};
use crate::hot_reload::ReloadEvent;

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
struct FileLabels {
    file: String,
}

/// controller-runtime's reconcile time buckets, in seconds.
const RECONCILE_BUCKETS: [f64; 20] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0,
    10.0, 30.0, 60.0,
];

fn reconcile_histogram() -> Histogram {
    Histogram::new(RECONCILE_BUCKETS)
}

pub struct Metrics {
    registry: Registry,
    reconcile_total: Family<ResultLabels, Counter>,
    reconcile_errors: Family<ControllerLabels, Counter>,
    reconcile_time: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    active_workers: Family<ControllerLabels, Gauge>,
    max_concurrent: Family<ControllerLabels, Gauge>,
    queue_depth: Family<QueueLabels, Gauge>,
    plugin_loads: Family<PluginLabels, Counter>,
    reload_failures: Family<FileLabels, Counter>,
    traps: Family<ControllerLabels, Counter>,
    timeouts: Family<ControllerLabels, Counter>,
    cache_objects: Family<KindLabels, Gauge>,
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
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let reconcile_total = Family::default();
        registry.register(
            "controller_runtime_reconcile",
            "Reconciles per plugin (controller) and result: success, error, requeue_after",
            reconcile_total.clone(),
        );
        let reconcile_errors = Family::default();
        registry.register(
            "controller_runtime_reconcile_errors",
            "Reconciles that failed, per plugin",
            reconcile_errors.clone(),
        );
        let reconcile_time =
            Family::<ControllerLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                reconcile_histogram,
            );
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Time of one reconcile (plugin call and API requests), per plugin",
            reconcile_time.clone(),
        );
        let active_workers = Family::default();
        registry.register(
            "controller_runtime_active_workers",
            "Reconciles running now, per plugin",
            active_workers.clone(),
        );
        let max_concurrent = Family::default();
        registry.register(
            "controller_runtime_max_concurrent_reconciles",
            "The most reconciles a plugin runs at once",
            max_concurrent.clone(),
        );
        let queue_depth = Family::default();
        registry.register(
            "workqueue_depth",
            "Objects waiting to be reconciled (now or after a delay), per plugin",
            queue_depth.clone(),
        );
        let plugin_loads = Family::default();
        registry.register(
            "reconciler_host_plugin_loads",
            "Plugin versions loaded or reloaded into service, per plugin",
            plugin_loads.clone(),
        );
        let reload_failures = Family::default();
        registry.register(
            "reconciler_host_plugin_reload_failures",
            "Plugin versions refused (broken, conflicting, or kinds not watchable), per file",
            reload_failures.clone(),
        );
        let traps = Family::default();
        registry.register(
            "reconciler_host_sandbox_traps",
            "Reconciles a plugin ended by trapping (a panic, or its memory cap)",
            traps.clone(),
        );
        let timeouts = Family::default();
        registry.register(
            "reconciler_host_sandbox_timeouts",
            "Reconciles stopped at the plugin's deadline",
            timeouts.clone(),
        );
        let cache_objects = Family::default();
        registry.register(
            "reconciler_host_cache_objects",
            "Objects in the shared cache, per kind",
            cache_objects.clone(),
        );
        Self {
            registry,
            reconcile_total,
            reconcile_errors,
            reconcile_time,
            active_workers,
            max_concurrent,
            queue_depth,
            plugin_loads,
            reload_failures,
            traps,
            timeouts,
            cache_objects,
            scrape: Mutex::new(()),
        }
    }

    /// Counts one finished reconcile that took `took`.
    pub fn reconciled(&self, record: &ReconcileRecord, took: Duration) {
        let controller = ControllerLabels {
            controller: record.plugin.clone(),
        };
        let result = match &record.outcome {
            Outcome::Applied {
                requeue_after: Some(_),
                ..
            } => "requeue_after",
            Outcome::Applied { .. } | Outcome::Gone => "success",
            Outcome::Failed { reason, .. } => {
                self.reconcile_errors.get_or_create(&controller).inc();
                match reason.as_str() {
                    "Trap" | "MemoryLimit" => {
                        self.traps.get_or_create(&controller).inc();
                    }
                    "Timeout" => {
                        self.timeouts.get_or_create(&controller).inc();
                    }
                    _ => {}
                }
                "error"
            }
            // Never started: not a reconcile.
            Outcome::Unloaded => return,
        };
        self.reconcile_total
            .get_or_create(&ResultLabels {
                controller: controller.controller.clone(),
                result,
            })
            .inc();
        self.reconcile_time
            .get_or_create(&controller)
            .observe(took.as_secs_f64());
    }

    /// Counts what a rescan of the plugins directory did.
    pub fn reloaded(&self, events: &[ReloadEvent]) {
        for event in events {
            match event {
                ReloadEvent::Loaded { name, .. } | ReloadEvent::Reloaded { name, .. } => {
                    self.plugin_loads
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
                    self.reload_failures
                        .get_or_create(&FileLabels { file })
                        .inc();
                }
                ReloadEvent::Unloaded { .. } => {}
            }
        }
    }

    /// The Prometheus text exposition, after setting the gauges from the
    /// state of the moment.
    pub fn encode(&self, queues: &[QueueStats], cache: &[(KindRef, usize)]) -> String {
        let _one_at_a_time = self.scrape.lock().unwrap_or_else(|e| e.into_inner());
        // Unloaded plugins and emptied kinds must not linger.
        self.active_workers.clear();
        self.max_concurrent.clear();
        self.queue_depth.clear();
        self.cache_objects.clear();
        for queue in queues {
            let controller = ControllerLabels {
                controller: queue.plugin.clone(),
            };
            let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
            self.active_workers
                .get_or_create(&controller)
                .set(gauge(queue.in_flight));
            self.max_concurrent
                .get_or_create(&controller)
                .set(gauge(queue.concurrency));
            self.queue_depth
                .get_or_create(&QueueLabels {
                    name: queue.plugin.clone(),
                    controller: queue.plugin.clone(),
                })
                .set(gauge(queue.depth));
        }
        for (kind, count) in cache {
            self.cache_objects
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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::engine::work_queue::PrimaryKey;

    fn record(plugin: &str, outcome: Outcome) -> ReconcileRecord {
        ReconcileRecord {
            at_millis: 0,
            plugin: plugin.into(),
            kind: "PodSet".into(),
            object: PrimaryKey {
                namespace: Some("default".into()),
                name: "web".into(),
            },
            outcome,
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
