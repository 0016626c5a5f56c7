//! `dev --clusters N` / `--cluster-objects DIR`: the laptop loop over
//! several embedded clusters, served as `run` serves member clusters.
//!
//! Each member is an embedded cluster engaged in a [`Fleet`], the same
//! per-cluster unit `run` starts for every cluster a hub names: its own
//! cache, queues, reconcile slots and dispatch loop, every plugin of the
//! plugins directory on each. Files change every cluster that reads them
//! (the shared objects directory) or only their own (a member's
//! directory). Every line names its cluster.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::config::{DevConfig, MemberSeed};
use super::embedded::{seed_crds, start_embedded};
use super::manifest_dir::ManifestDir;
use super::plugins::{DevShadow, follow_object_plugins, say_if_none_serve, serve_plugins};
use super::stamp::stamp;
use super::tables::clusters_table;

use crate::cluster::embedded::EmbeddedCluster;
use crate::cluster::embedded::builtins::group_changes;
use crate::cluster::{Clock, RealClock};
use crate::engine::{Engine, ReconcileRecord};
use crate::fleet::Fleet;
use crate::fleet::member::{Identity, Settings};
use crate::fleet::selection::PluginClusters;
use crate::golden::recorder::CaseRecorder;
use crate::plugin::Sandbox;
use crate::plugin::background_reload::BackgroundReload;
use crate::support::dir_watch::watch_dir;

/// How often the loop looks for built-in changes and for quiet.
const TICK: Duration = Duration::from_millis(100);
/// Quiet ticks in a row that count as settled: a change a member's loop
/// has taken off its watch but not yet queued shows up within them.
const QUIET_TICKS: u32 = 3;

/// One member while `dev` runs.
struct Member {
    name: String,
    cluster: Arc<EmbeddedCluster>,
    engine: Arc<Engine<EmbeddedCluster>>,
    /// `--objects`, as this member last applied it.
    shared: ManifestDir,
    /// Its own directory, as last applied.
    own: Option<(PathBuf, ManifestDir)>,
}

/// Runs the dev loop over `members` until Ctrl-C (or until settled, if
/// asked). Returns how many plugin versions were refused.
pub(super) async fn run(
    sandbox: Arc<Sandbox>,
    mut config: DevConfig,
    members: Vec<MemberSeed>,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<u64> {
    let mut shadow = DevShadow::new(&config.plugins_dir);
    let (fleet, mut finished) = member_fleet(&sandbox, &config, &shadow)?;
    let plugins = serve_plugins(sandbox, &mut config, fleet.as_ref(), &shadow, out).await?;
    let mut running = engage(&fleet, &config, members, out).await?;
    for member in &mut running {
        for line in member.sync(&config.objects_dir, &fleet.plugins()) {
            writeln!(out, "{}", stamp(&line))?;
        }
    }
    say_if_none_serve(&fleet.plugins(), &config.plugins_dir, out)?;

    // File changes arrive from the watcher threads; keep the watchers alive.
    let (fs_tx, mut fs_rx) = mpsc::unbounded_channel();
    let mut watches = vec![watch_dir(&config.objects_dir, fs_tx.clone())];
    for member in &running {
        if let Some((dir, _)) = &member.own {
            watches.push(watch_dir(dir, fs_tx.clone()));
        }
    }
    let (plugins_tx, plugins_rx) = mpsc::unbounded_channel();
    let rescan = plugins_tx.clone();
    let _plugins_watch = watch_dir(&config.plugins_dir, plugins_tx);
    let mut failures = plugins.failures();
    let mut reloads = BackgroundReload::start(plugins, fleet.clone(), plugins_rx, None);
    let engines: Vec<(String, Arc<Engine<EmbeddedCluster>>)> = running
        .iter()
        .map(|m| (m.name.clone(), m.engine.clone()))
        .collect();
    let mut table_shown = String::new();
    let mut quiet_ticks = 0;
    let mut tick = tokio::time::interval(TICK);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);

    loop {
        tokio::select! {
            Some((name, record)) = finished.recv() => {
                writeln!(out, "{}", stamp(&format!("{name}: {record}")))?;
                quiet_ticks = 0;
            }
            update = reloads.next() => {
                for event in &update.events {
                    writeln!(out, "{}", stamp(&event.to_string()))?;
                }
                failures = update.failures;
                quiet_ticks = 0;
            }
            Some(()) = fs_rx.recv() => {
                while fs_rx.try_recv().is_ok() {}
                follow_object_plugins(&mut config, &rescan, out).await?;
                for member in &mut running {
                    for line in member.sync(&config.objects_dir, &fleet.plugins()) {
                        writeln!(out, "{}", stamp(&line))?;
                    }
                }
                quiet_ticks = 0;
            }
            _ = tick.tick() => {
                // Shadow lines come at the tick: a quiet member waits for them.
                if write_builtin_changes(&running, out)?
                    || shadow.tick(RealClock.now_millis(), out)?
                    || !quiet(&fleet, &running)
                    || shadow.book.pending() > 0
                {
                    quiet_ticks = 0;
                    continue;
                }
                quiet_ticks += 1;
                if quiet_ticks == QUIET_TICKS {
                    let table = clusters_table(&engines);
                    if table != table_shown {
                        write!(out, "{table}")?;
                        table_shown = table;
                    }
                    if config.until_settled {
                        break;
                    }
                }
            }
            _ = &mut ctrl_c => {
                writeln!(out, "stopping: waiting for {} reconcile(s) in flight", fleet.in_flight())?;
                break;
            }
        }
    }
    drop(watches);
    // In-flight reconciles finish (each is bounded by its plugin deadline).
    fleet.stop_all(Duration::from_secs(15)).await;
    while let Ok((name, record)) = finished.try_recv() {
        writeln!(out, "{}", stamp(&format!("{name}: {record}")))?;
    }
    shadow.finish(out).await?;
    Ok(failures + config.object_plugins.as_ref().map_or(0, |p| p.failures()))
}

/// The fleet the members are engaged in, recording if asked, and the
/// reconciles it finishes, named by cluster, for the loop to print.
fn member_fleet(
    sandbox: &Sandbox,
    config: &DevConfig,
    shadow: &DevShadow,
) -> anyhow::Result<(Arc<Fleet<EmbeddedCluster>>, Finished)> {
    let (finished_tx, finished) = mpsc::unbounded_channel::<(String, ReconcileRecord)>();
    let recorder = match &config.record {
        Some(record) => Some(Arc::new(CaseRecorder::new(record, "dev").map_err(|e| {
            anyhow::anyhow!("cannot record into {}: {e}", record.dir.display())
        })?)),
        None => None,
    };
    let settings = Settings {
        instances: sandbox.reconcile_instances(),
        recorder,
        on_finished: Some(Arc::new(move |name: &str, record: &ReconcileRecord, _| {
            let _ = finished_tx.send((name.to_string(), record.clone()));
        })),
        candidates: shadow.candidates.clone(),
        shadow: shadow.book.clone(),
        journal: config.journal.clone(),
        ..Settings::default()
    };
    let fleet = Arc::new(Fleet::<EmbeddedCluster>::new(
        PluginClusters::default(),
        settings,
    ));
    Ok((fleet, finished))
}

/// Reconciles finished in any member, with the member's name.
type Finished = mpsc::UnboundedReceiver<(String, ReconcileRecord)>;

/// Starts an embedded cluster per seed, with the CRDs, and engages it in
/// `fleet`, one after the other: each member's plugins serve before the
/// next starts.
async fn engage(
    fleet: &Fleet<EmbeddedCluster>,
    config: &DevConfig,
    members: Vec<MemberSeed>,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<Vec<Member>> {
    let mut running = Vec::new();
    for seed in members {
        let name = seed.info.name.clone();
        let cluster = start_embedded(config);
        if let Some(dir) = &config.crds_dir {
            for line in seed_crds(dir, &cluster) {
                writeln!(out, "{}", stamp(&format!("{name}: {line}")))?;
            }
        }
        let identity = Identity {
            name: name.clone(),
            labels: seed.info.labels.clone(),
            source: "embedded".into(),
            server: "embedded".into(),
        };
        fleet.engage(
            identity,
            cluster.clone(),
            crate::fleet::Hooks::default(),
            Duration::ZERO,
        );
        // Its plugins are in place before its objects arrive, so those
        // that serve admission admit them.
        fleet.wait_aligned(&name, Duration::from_secs(60)).await;
        let engine = fleet
            .engine(&name)
            .ok_or_else(|| anyhow::anyhow!("cluster {name} stopped while starting"))?;
        running.push(Member {
            name,
            cluster,
            engine,
            shared: ManifestDir::default(),
            own: seed.objects_dir.map(|dir| (dir, ManifestDir::default())),
        });
    }
    Ok(running)
}

/// Prints what the built-in controllers changed in each member since the
/// last tick, naming the member; whether there was anything.
fn write_builtin_changes(
    members: &[Member],
    out: &mut (dyn Write + Send),
) -> std::io::Result<bool> {
    let mut changed = false;
    for member in members {
        for line in group_changes(&member.cluster.take_builtin_changes()) {
            writeln!(
                out,
                "{}",
                stamp(&format!("  (cluster {}) {line}", member.name))
            )?;
            changed = true;
        }
    }
    Ok(changed)
}

impl Member {
    /// Applies what changed in the shared objects and in its own
    /// directory; a line per change, naming the cluster.
    fn sync(
        &mut self,
        shared: &std::path::Path,
        plugins: &[Arc<crate::plugin::LoadedPlugin>],
    ) -> Vec<String> {
        let mut lines = self.shared.sync_admitted(shared, &self.cluster, plugins);
        if let Some((dir, own)) = &mut self.own {
            lines.extend(own.sync_admitted(dir, &self.cluster, plugins));
        }
        lines
            .into_iter()
            .map(|line| format!("{}: {line}", self.name))
            .collect()
    }
}

/// Nothing runs, nothing is due now, and no built-in controller is about
/// to act, in any member.
fn quiet(fleet: &Fleet<EmbeddedCluster>, members: &[Member]) -> bool {
    let now = RealClock.now_millis();
    fleet.in_flight() == 0
        && members.iter().all(|m| {
            m.engine.next_wakeup().is_none_or(|at| at > now)
                && m.cluster.next_builtin_due().is_none_or(|at| at > now)
        })
}
