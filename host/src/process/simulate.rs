//! `simulate`: plugins against the embedded cluster on a virtual clock.
//!
//! The run is a single, deterministic sequence: the next reconcile is always
//! the earliest ready one (ties by plugin, then object), time moves only
//! when nothing is ready, and the cluster's uids, resourceVersions and
//! timestamps derive from the sequence and the clock. So the same plugins and
//! the same input print byte-identical output, which makes a simulation a
//! test.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use reconciler_contract::Operation;
use serde_json::Value;

use crate::admission::{GateOutcome, admit_object};
use crate::cluster::embedded::builtins::{BuiltinChange, BuiltinConfig, group_changes};
use crate::cluster::embedded::{EmbeddedCluster, RecordedEvent};
use crate::cluster::{Clock, ClusterBackend, VirtualClock};
use crate::engine::{Engine, ReconcileRecord};
use crate::golden::duration_text::format_duration;
use crate::golden::recorder::{CaseRecorder, RecordOptions};
use crate::plugin::LoadedPlugin;

/// How a simulation is run.
#[derive(Clone, Debug)]
pub struct SimulationConfig {
    /// The virtual time at the start, epoch millis.
    pub start_millis: i64,
    /// How far the clock may move to fire requeues; zero runs only until
    /// nothing is ready.
    pub advance: Duration,
    /// Reconciles of one object at one instant before it is reported as
    /// never settling.
    pub max_rounds: u32,
    /// Reconciles in the whole run, a bound on runaway simulations.
    pub max_reconciles: usize,
    /// Write every reconcile as a golden case under this directory.
    pub record: Option<RecordOptions>,
    /// Play the built-in controllers (Deployments, ReplicaSets, Pods, Jobs)
    /// with these settings; `None` shows plugins only what they wrote.
    pub builtins: Option<BuiltinConfig>,
}

impl Default for SimulationConfig {
    fn default() -> Self {
        Self {
            start_millis: reconciler_contract::DEFAULT_NOW_MILLIS,
            advance: Duration::ZERO,
            max_rounds: 20,
            max_reconciles: 100_000,
            record: None,
            builtins: None,
        }
    }
}

/// What a simulation did and where it ended.
pub struct SimulationReport {
    pub start_millis: i64,
    pub records: Vec<ReconcileRecord>,
    pub events: Vec<RecordedEvent>,
    pub objects: Vec<Value>,
    /// Set when a plugin never settled: which plugin, which object.
    pub unsettled: Option<String>,
    /// Plugins the engine refused to serve, each `FILE: why` (a primary kind
    /// or a name another plugin took first, a namespaced primary owning a
    /// cluster-scoped kind); the others ran without them.
    pub refused: Vec<String>,
    /// What the built-in controllers did, each after how many of `records`.
    pub builtin_changes: Vec<(usize, BuiltinChange)>,
    /// What admission said of the seeded objects: denied ones (not stored)
    /// and defaulted ones, a line each.
    pub admission: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SimulationError {
    // The source follows in the error chain (`{:#}`), not in this message.
    #[error("cannot seed {object}")]
    Seed {
        object: String,
        source: crate::cluster::BackendError,
    },
    #[error("cannot record into {}: {source}", dir.display())]
    Record {
        dir: PathBuf,
        source: std::io::Error,
    },
}

/// Seeds `objects` (CustomResourceDefinitions first, so the cluster knows
/// which custom kinds are cluster-scoped before their objects arrive), then
/// runs `plugins` until nothing changes, or until the virtual clock has
/// advanced by `config.advance`, firing requeues on the way. As `dev` does,
/// a plugin the engine refuses (a primary kind or a name already taken, a
/// kind it may not own) is reported by file in [`SimulationReport::refused`]
/// and the others run.
pub async fn simulate(
    plugins: Vec<Arc<LoadedPlugin>>,
    objects: Vec<Value>,
    config: &SimulationConfig,
) -> Result<(SimulationReport, Arc<EmbeddedCluster>), SimulationError> {
    let clock = VirtualClock::at(config.start_millis);
    let mut cluster = EmbeddedCluster::new(Arc::new(clock.clone()));
    if let Some(builtins) = &config.builtins {
        cluster = cluster.with_builtin_controllers(builtins.clone());
    }
    let cluster = Arc::new(cluster);
    let (crds, others): (Vec<Value>, Vec<Value>) = objects.into_iter().partition(is_crd_object);
    let mut admission = Vec::new();
    for object in crds.into_iter().chain(others) {
        let key = crate::cluster::ObjectKey::of(&object);
        let name = key.as_ref().map(|k| k.to_string()).unwrap_or_default();
        // As on a cluster, the plugin serving admission for the kind admits
        // the object first: denied, it is reported and not stored.
        let stored = key.as_ref().and_then(|k| cluster.get_as_user(k));
        let operation = if stored.is_some() {
            Operation::Update
        } else {
            Operation::Create
        };
        let outcome = admit_object(
            &plugins,
            operation,
            Some(&object),
            stored.as_ref(),
            clock.now_millis(),
        );
        if let Some(line) = outcome.report(&name) {
            admission.push(line);
        }
        let object = match outcome {
            GateOutcome::Denied { .. } => continue,
            GateOutcome::Admitted { object, .. } => object,
            GateOutcome::NotCovered => object,
        };
        cluster
            .apply_as_user(object)
            .map_err(|source| SimulationError::Seed {
                object: name,
                source,
            })?;
    }
    let mut engine = Engine::empty(cluster.clone(), Arc::new(clock.clone()));
    if let Some(record) = &config.record {
        let recorder =
            CaseRecorder::new(record, "simulate").map_err(|source| SimulationError::Record {
                dir: record.dir.clone(),
                source,
            })?;
        engine = engine.with_recorder(Arc::new(recorder));
    }
    let mut refused = Vec::new();
    for plugin in plugins {
        if let Err(e) = engine.add_plugin(plugin.clone()).await {
            refused.push(format!("{}: {e}", plugin.path().display()));
        }
    }
    // What the built-ins did to the seed objects comes first.
    let seeded = cluster.take_builtin_changes();
    let mut report = run_with_builtins(&engine, &clock, config, Some(&cluster)).await;
    report.builtin_changes = seeded
        .into_iter()
        .map(|c| (0, c))
        .chain(std::mem::take(&mut report.builtin_changes))
        .collect();
    let report = SimulationReport {
        start_millis: config.start_millis,
        events: cluster.events(),
        objects: cluster.objects(),
        refused,
        admission,
        ..report
    };
    Ok((report, cluster))
}

fn is_crd_object(object: &Value) -> bool {
    reconciler_contract::KindRef::of_object(object)
        .is_some_and(|kind| crate::cluster::embedded::kind_scopes::is_crd(&kind))
}

/// Drives an engine on a virtual clock until it settles.
pub async fn run<B: ClusterBackend>(
    engine: &Engine<B>,
    clock: &VirtualClock,
    config: &SimulationConfig,
) -> SimulationReport {
    run_with_builtins(engine, clock, config, None).await
}

/// [`run`], with the built-in controllers of `cluster` on the same clock:
/// their delays are due times like the engine's requeues, and at one
/// instant they act before the reconciles.
pub async fn run_with_builtins<B: ClusterBackend>(
    engine: &Engine<B>,
    clock: &VirtualClock,
    config: &SimulationConfig,
    cluster: Option<&EmbeddedCluster>,
) -> SimulationReport {
    let end = config.start_millis + i64::try_from(config.advance.as_millis()).unwrap_or(i64::MAX);
    let mut records = Vec::new();
    let mut builtin_changes = Vec::new();
    let mut rounds: HashMap<(String, String, i64), u32> = HashMap::new();
    let mut unsettled = None;
    loop {
        if let Some(cluster) = cluster {
            if cluster
                .next_builtin_due()
                .is_some_and(|at| at <= clock.now_millis())
            {
                cluster.run_builtins();
            }
            builtin_changes.extend(
                cluster
                    .take_builtin_changes()
                    .into_iter()
                    .map(|c| (records.len(), c)),
            );
        }
        engine.pump();
        if let Some((plugin, key)) = engine.next_ready() {
            let now = clock.now_millis();
            let round = rounds
                .entry((plugin.clone(), key.to_string(), now))
                .or_insert(0);
            *round += 1;
            let record = engine.reconcile(&plugin, key).await;
            if *round > config.max_rounds || records.len() >= config.max_reconciles {
                unsettled = Some(format!(
                    "plugin {plugin} never settles on {} {}: reconciled {} times at {} without the clock moving (last: {record})",
                    record.kind,
                    record.object,
                    round,
                    offset(config.start_millis, now),
                ));
                records.push(record);
                break;
            }
            records.push(record);
            continue;
        }
        let builtin_due = cluster.and_then(EmbeddedCluster::next_builtin_due);
        let next = match (engine.next_wakeup(), builtin_due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match next {
            Some(at) if at <= end => clock.set(at.max(clock.now_millis())),
            _ => break,
        }
    }
    // Advancing by a duration ends at that time, even if nothing was due.
    if unsettled.is_none() && clock.now_millis() < end {
        clock.set(end);
    }
    // Repeated Events show every occurrence, not the last count written.
    engine.flush_events(true).await;
    SimulationReport {
        start_millis: config.start_millis,
        records,
        events: Vec::new(),
        objects: Vec::new(),
        admission: Vec::new(),
        unsettled,
        refused: Vec::new(),
        builtin_changes,
    }
}

/// `+1m30s`: a time relative to the start of the simulation.
pub fn offset(start_millis: i64, at_millis: i64) -> String {
    let d = Duration::from_millis(u64::try_from(at_millis - start_millis).unwrap_or(0));
    format!("+{}", format_duration(d))
}

impl SimulationReport {
    /// The built-in controllers' changes made before reconcile `index`, a
    /// line per instant and kind of change, marked apart from reconciles.
    fn render_changes_before<'a>(
        &self,
        index: usize,
        changes: &mut std::iter::Peekable<impl Iterator<Item = &'a (usize, BuiltinChange)>>,
        out: &mut String,
    ) {
        let mut batch: Vec<BuiltinChange> = Vec::new();
        let flush = |batch: &mut Vec<BuiltinChange>, out: &mut String| {
            if let Some(first) = batch.first() {
                let at = offset(self.start_millis, first.at_millis);
                for line in group_changes(batch) {
                    out.push_str(&format!("[{at}]   (cluster) {line}\n"));
                }
            }
            batch.clear();
        };
        while let Some((_, change)) = changes.next_if(|(before, _)| *before <= index) {
            if batch
                .first()
                .is_some_and(|f| f.at_millis != change.at_millis)
            {
                flush(&mut batch, out);
            }
            batch.push(change.clone());
        }
        flush(&mut batch, out);
    }

    /// The report as text: reconciles, Events, then the objects as YAML.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if !self.admission.is_empty() {
            out.push_str("# admission\n");
            for line in &self.admission {
                out.push_str(line);
                out.push('\n');
            }
            out.push('\n');
        }
        out.push_str("# reconciles\n");
        let mut changes = self.builtin_changes.iter().peekable();
        for (i, r) in self.records.iter().enumerate() {
            self.render_changes_before(i, &mut changes, &mut out);
            out.push_str(&format!(
                "[{}] {r}\n",
                offset(self.start_millis, r.at_millis)
            ));
        }
        self.render_changes_before(usize::MAX, &mut changes, &mut out);
        if let Some(why) = &self.unsettled {
            out.push_str(&format!("NOT SETTLED: {why}\n"));
        }
        out.push_str("\n# events\n");
        for e in &self.events {
            let r = &e.record;
            // A repeated Event is one line with its count, as `kubectl get
            // events` shows it.
            let repeats = e
                .series
                .map(|s| {
                    format!(
                        " x{} (last {})",
                        s.count,
                        offset(self.start_millis, s.last_observed_millis)
                    )
                })
                .unwrap_or_default();
            out.push_str(&format!(
                "[{}] {} {} {}: {} ({}){repeats}\n",
                offset(self.start_millis, e.at_millis),
                r.event_type,
                r.reason,
                r.regarding,
                r.message,
                r.reporting_controller
            ));
        }
        out.push_str("\n# objects\n");
        for object in &self.objects {
            out.push_str("---\n");
            out.push_str(
                &serde_yaml_ng::to_string(object)
                    .unwrap_or_else(|e| format!("# cannot print: {e}\n")),
            );
        }
        out
    }
}
