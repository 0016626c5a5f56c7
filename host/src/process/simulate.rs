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

use serde_json::Value;

use crate::admission::{GateOutcome, admit_write};
use crate::cluster::embedded::builtins::{BuiltinChange, BuiltinConfig, group_changes};
use crate::cluster::embedded::{EmbeddedCluster, RecordedEvent};
use crate::cluster::{Clock, ClusterBackend, VirtualClock};
use tokio::sync::mpsc;

use crate::engine::shadow_book::ShadowBook;
use crate::engine::{Engine, ReconcileRecord};
use crate::golden::recorder::{CaseRecorder, RecordOptions};
use crate::plugin::LoadedPlugin;
use crate::plugin::candidates::Candidates;
use crate::process::canary_files::FileRollouts;
use crate::support::duration_text::format_duration;
use reconciler_contract::ClusterInfo;

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
    /// Candidates run in shadow beside their plugins (`NAME.candidate.wasm`).
    pub candidates: Arc<Candidates>,
    /// Their canary rollouts (`NAME.rollout.yaml`), stepped on the clock.
    pub rollouts: Option<FileRollouts>,
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
            candidates: Candidates::new(),
            rollouts: None,
        }
    }
}

/// What a simulation did and where it ended.
pub struct SimulationReport {
    pub start_millis: i64,
    /// Every reconcile, in order; each names its cluster.
    pub records: Vec<ReconcileRecord>,
    /// Each cluster at the end, in the order given.
    pub clusters: Vec<ClusterEnd>,
    /// Set when a plugin never settled: which plugin, which object.
    pub unsettled: Option<String>,
    /// Plugins the engine refused to serve, each `FILE: why` (a primary kind
    /// or a name another plugin took first, a namespaced primary owning a
    /// cluster-scoped kind); the others ran without them.
    pub refused: Vec<String>,
    /// What the built-in controllers did, each after how many of `records`,
    /// in which cluster.
    pub builtin_changes: Vec<(usize, String, BuiltinChange)>,
    /// What admission said of the seeded objects: denied ones (not stored)
    /// and defaulted ones, a line each.
    pub admission: Vec<String>,
    /// What candidates in shadow found, each line after how many of
    /// `records` (the reconcile it shadows).
    pub shadow: Vec<(usize, String)>,
    /// What canary rollouts did, each before how many of `records`, at
    /// what time.
    pub rollouts: Vec<(usize, i64, String)>,
}

/// One cluster of a simulation as it ended.
pub struct ClusterEnd {
    pub name: String,
    pub events: Vec<RecordedEvent>,
    pub objects: Vec<Value>,
}

impl SimulationReport {
    /// Every cluster's objects at the end, cluster after cluster.
    pub fn objects(&self) -> Vec<Value> {
        self.clusters
            .iter()
            .flat_map(|c| c.objects.iter().cloned())
            .collect()
    }
}

/// One embedded cluster to simulate: what it is called (and the labels its
/// plugins are told), and the objects it starts from.
pub struct SimulatedCluster {
    pub info: ClusterInfo,
    pub objects: Vec<Value>,
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
    let local = SimulatedCluster {
        info: ClusterInfo::local(),
        objects,
    };
    let (report, mut clusters) = simulate_clusters(plugins, vec![local], config).await?;
    Ok((report, clusters.remove(0)))
}

/// [`simulate`] over several embedded clusters on one virtual clock, as a
/// host serving member clusters runs every plugin on each: one cache and
/// engine per cluster, nothing shared between them but the plugins and the
/// clock. At one instant the clusters take turns in the order given, so the
/// run stays a single deterministic sequence. Returns the clusters in that
/// order.
pub async fn simulate_clusters(
    plugins: Vec<Arc<LoadedPlugin>>,
    clusters: Vec<SimulatedCluster>,
    config: &SimulationConfig,
) -> Result<(SimulationReport, Vec<Arc<EmbeddedCluster>>), SimulationError> {
    let clock = VirtualClock::at(config.start_millis);
    let recorder = match &config.record {
        Some(record) => Some(Arc::new(CaseRecorder::new(record, "simulate").map_err(
            |source| SimulationError::Record {
                dir: record.dir.clone(),
                source,
            },
        )?)),
        None => None,
    };
    let several = clusters.len() > 1;
    let mut members = Vec::new();
    let mut admission = Vec::new();
    let mut refused = Vec::new();
    // One reconcile at a time: a shadow call never waits for a pause.
    let book = Arc::new(ShadowBook::default().pausing(Duration::ZERO));
    let mut shadow_lines = book.tap();
    for SimulatedCluster { info, objects } in clusters {
        let mut cluster = EmbeddedCluster::new(Arc::new(clock.clone()));
        if let Some(builtins) = &config.builtins {
            cluster = cluster.with_builtin_controllers(builtins.clone());
        }
        let cluster = Arc::new(cluster);
        let named = |line: &str| match several {
            true => format!("{}: {line}", info.name),
            false => line.to_string(),
        };
        for line in seed(&cluster, &plugins, objects, &clock)? {
            admission.push(named(&line));
        }
        let mut engine = Engine::empty(cluster.clone(), Arc::new(clock.clone()))
            .with_cluster(info.clone())
            .with_shadow(config.candidates.clone(), book.clone());
        if let Some(recorder) = &recorder {
            engine = engine.with_recorder(recorder.clone());
        }
        for plugin in &plugins {
            if let Err(e) = engine.add_plugin(plugin.clone()).await {
                refused.push(named(&format!("{}: {e}", plugin.path().display())));
            }
        }
        members.push(Member {
            name: info.name,
            engine,
            cluster,
        });
    }
    // What the built-ins did to the seed objects comes first.
    let mut seeded = Vec::new();
    for member in &members {
        for change in member.cluster.take_builtin_changes() {
            seeded.push((0, member.name.clone(), change));
        }
    }
    let turns: Vec<Turn<'_, EmbeddedCluster>> = members
        .iter()
        .map(|m| Turn {
            name: &m.name,
            engine: &m.engine,
            cluster: Some(&m.cluster),
        })
        .collect();
    let mut rollouts = config.rollouts.clone();
    let shadowing = Shadowing {
        lines: &mut shadow_lines,
        book: &book,
        rollouts: rollouts.as_mut(),
    };
    let mut report = run_turns(&turns, &clock, config, Some(shadowing)).await;
    seeded.append(&mut report.builtin_changes);
    let report = SimulationReport {
        start_millis: config.start_millis,
        clusters: members
            .iter()
            .map(|m| ClusterEnd {
                name: m.name.clone(),
                events: m.cluster.events(),
                objects: m.cluster.objects(),
            })
            .collect(),
        builtin_changes: seeded,
        refused,
        admission,
        ..report
    };
    Ok((report, members.into_iter().map(|m| m.cluster).collect()))
}

/// One simulated cluster while it runs.
struct Member {
    name: String,
    engine: Engine<EmbeddedCluster>,
    cluster: Arc<EmbeddedCluster>,
}

/// Admits and stores `objects` in `cluster`, CRDs first; returns what
/// admission said.
fn seed(
    cluster: &EmbeddedCluster,
    plugins: &[Arc<LoadedPlugin>],
    objects: Vec<Value>,
    clock: &VirtualClock,
) -> Result<Vec<String>, SimulationError> {
    let (crds, others): (Vec<Value>, Vec<Value>) = objects.into_iter().partition(is_crd_object);
    let mut admission = Vec::new();
    for object in crds.into_iter().chain(others) {
        let key = crate::cluster::ObjectKey::of(&object);
        let name = key.as_ref().map(|k| k.to_string()).unwrap_or_default();
        // As on a cluster, the plugin serving admission for the kind admits
        // the object first: denied, it is reported and not stored.
        let stored = key.as_ref().and_then(|k| cluster.get_as_user(k));
        let outcome = admit_write(plugins, &object, stored.as_ref(), clock.now_millis());
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
    Ok(admission)
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
    let name = engine.cluster().name.clone();
    let turn = Turn {
        name: &name,
        engine,
        cluster,
    };
    run_turns(&[turn], clock, config, None).await
}

/// One cluster's engine, and its built-in controllers if they play.
struct Turn<'a, B: ClusterBackend> {
    name: &'a str,
    engine: &'a Engine<B>,
    cluster: Option<&'a EmbeddedCluster>,
}

/// Runs every engine of `turns` on one clock until all settle: at each
/// instant the built-ins that are due act first, then the ready reconciles,
/// cluster by cluster in the order of `turns`; the clock moves only when
/// no cluster has anything ready.
async fn run_turns<B: ClusterBackend>(
    turns: &[Turn<'_, B>],
    clock: &VirtualClock,
    config: &SimulationConfig,
    mut shadowing: Option<Shadowing<'_>>,
) -> SimulationReport {
    let mut shadow = Vec::new();
    let mut rollouts = Vec::new();
    let end = config.start_millis + i64::try_from(config.advance.as_millis()).unwrap_or(i64::MAX);
    let mut records = Vec::new();
    let mut builtin_changes = Vec::new();
    let mut rounds: HashMap<(String, String, String, i64), u32> = HashMap::new();
    let mut unsettled = None;
    'run: loop {
        if let Some(shadowing) = shadowing.as_mut() {
            let now = clock.now_millis();
            for line in shadowing.step_rollouts(&config.candidates, now) {
                rollouts.push((records.len(), now, line));
            }
        }
        for turn in turns {
            if let Some(cluster) = turn.cluster {
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
                        .map(|c| (records.len(), turn.name.to_string(), c)),
                );
            }
        }
        for turn in turns {
            turn.engine.pump();
            let Some((plugin, key)) = turn.engine.next_ready() else {
                continue;
            };
            let now = clock.now_millis();
            let round = rounds
                .entry((turn.name.to_string(), plugin.clone(), key.to_string(), now))
                .or_insert(0);
            *round += 1;
            let record = turn.engine.reconcile(&plugin, key).await;
            let prefix = (turns.len() > 1).then_some(turn.name);
            take_shadow_lines(
                shadowing.as_mut().map(|s| &mut *s.lines),
                prefix,
                records.len(),
                &mut shadow,
            );
            if *round > config.max_rounds || records.len() >= config.max_reconciles {
                let cluster = match turns.len() {
                    1 => String::new(),
                    _ => format!(" in cluster {}", turn.name),
                };
                unsettled = Some(format!(
                    "plugin {plugin} never settles on {} {}{cluster}: reconciled {} times at {} without the clock moving (last: {record})",
                    record.kind,
                    record.object,
                    round,
                    offset(config.start_millis, now),
                ));
                records.push(record);
                break 'run;
            }
            records.push(record);
            continue 'run;
        }
        let step_due = shadowing.as_ref().and_then(Shadowing::next_due);
        let next = next_due(turns).into_iter().chain(step_due).min();
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
    for turn in turns {
        turn.engine.flush_events(true).await;
    }
    SimulationReport {
        start_millis: config.start_millis,
        records,
        clusters: Vec::new(),
        admission: Vec::new(),
        unsettled,
        refused: Vec::new(),
        builtin_changes,
        shadow,
        rollouts,
    }
}

/// What a simulation's candidates tell and steer: the lines of their
/// shadow runs, the book they count in, and their canary rollouts.
struct Shadowing<'a> {
    lines: &'a mut mpsc::UnboundedReceiver<String>,
    book: &'a ShadowBook,
    rollouts: Option<&'a mut FileRollouts>,
}

impl Shadowing<'_> {
    /// Steps the canary rollouts at `now`; what happened, as lines.
    fn step_rollouts(&mut self, candidates: &Candidates, now: i64) -> Vec<String> {
        match self.rollouts.as_mut() {
            Some(files) => files.step(candidates, self.book, now),
            None => Vec::new(),
        }
    }

    /// When a rollout's next step is due.
    fn next_due(&self) -> Option<i64> {
        self.rollouts.as_ref().and_then(|r| r.next_due())
    }
}

/// The earliest time an engine's requeue or a built-in controller is due.
fn next_due<B: ClusterBackend>(turns: &[Turn<'_, B>]) -> Option<i64> {
    turns
        .iter()
        .flat_map(|t| {
            [
                t.engine.next_wakeup(),
                t.cluster.and_then(EmbeddedCluster::next_builtin_due),
            ]
        })
        .flatten()
        .min()
}

/// The shadow lines told since the last call, each to follow record
/// `index`, named by cluster (`prefix`) when there are several.
fn take_shadow_lines(
    lines: Option<&mut mpsc::UnboundedReceiver<String>>,
    prefix: Option<&str>,
    index: usize,
    shadow: &mut Vec<(usize, String)>,
) {
    let Some(lines) = lines else {
        return;
    };
    while let Ok(line) = lines.try_recv() {
        let line = match prefix {
            Some(cluster) => format!("{cluster}: {line}"),
            None => line,
        };
        shadow.push((index + 1, line));
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
        changes: &mut std::iter::Peekable<impl Iterator<Item = &'a (usize, String, BuiltinChange)>>,
        out: &mut String,
    ) {
        let mut batch: Vec<BuiltinChange> = Vec::new();
        let mut batch_cluster = "";
        let flush = |batch: &mut Vec<BuiltinChange>, cluster: &str, out: &mut String| {
            if let Some(first) = batch.first() {
                let at = offset(self.start_millis, first.at_millis);
                let who = match self.several_clusters() {
                    true => format!("cluster {cluster}"),
                    false => "cluster".to_string(),
                };
                for line in group_changes(batch) {
                    out.push_str(&format!("[{at}]   ({who}) {line}\n"));
                }
            }
            batch.clear();
        };
        while let Some((_, cluster, change)) = changes.next_if(|(before, _, _)| *before <= index) {
            if batch
                .first()
                .is_some_and(|f| f.at_millis != change.at_millis || batch_cluster != cluster)
            {
                flush(&mut batch, batch_cluster, out);
            }
            batch_cluster = cluster;
            batch.push(change.clone());
        }
        flush(&mut batch, batch_cluster, out);
    }

    /// Whether lines must name their cluster.
    fn several_clusters(&self) -> bool {
        self.clusters.len() > 1
    }

    /// `east: ` before a line when there are several clusters.
    fn cluster_prefix(&self, cluster: &str) -> String {
        match self.several_clusters() {
            true => format!("{cluster}: "),
            false => String::new(),
        }
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
        let mut shadow = self.shadow.iter().peekable();
        let mut rollouts = self.rollouts.iter().peekable();
        for (i, r) in self.records.iter().enumerate() {
            self.render_changes_before(i, &mut changes, &mut out);
            while let Some((_, at, line)) = rollouts.next_if(|(before, _, _)| *before <= i) {
                let at = offset(self.start_millis, *at);
                out.push_str(&format!("[{at}] {line}\n"));
            }
            let at = offset(self.start_millis, r.at_millis);
            out.push_str(&format!("[{at}] {}{r}\n", self.cluster_prefix(&r.cluster)));
            while let Some((_, line)) = shadow.next_if(|(after, _)| *after == i + 1) {
                out.push_str(&format!("[{at}] {line}\n"));
            }
        }
        self.render_changes_before(usize::MAX, &mut changes, &mut out);
        for (_, at, line) in rollouts {
            let at = offset(self.start_millis, *at);
            out.push_str(&format!("[{at}] {line}\n"));
        }
        if let Some(why) = &self.unsettled {
            out.push_str(&format!("NOT SETTLED: {why}\n"));
        }
        out.push_str("\n# events\n");
        let events = self
            .clusters
            .iter()
            .flat_map(|c| c.events.iter().map(move |e| (c.name.as_str(), e)));
        for (cluster, e) in events {
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
                "[{}] {}{} {} {}: {} ({}){repeats}\n",
                offset(self.start_millis, e.at_millis),
                self.cluster_prefix(cluster),
                r.event_type,
                r.reason,
                r.regarding,
                r.message,
                r.reporting_controller
            ));
        }
        out.push_str("\n# objects\n");
        let objects = self
            .clusters
            .iter()
            .flat_map(|c| c.objects.iter().map(move |o| (c.name.as_str(), o)));
        for (cluster, object) in objects {
            match self.several_clusters() {
                true => out.push_str(&format!("--- # cluster {cluster}\n")),
                false => out.push_str("---\n"),
            }
            out.push_str(
                &serde_yaml_ng::to_string(object)
                    .unwrap_or_else(|e| format!("# cannot print: {e}\n")),
            );
        }
        out
    }
}
