//! `dev` over one embedded cluster: an engine of its own, dispatched by
//! this loop, which also prints each reconcile and what the built-in
//! controllers did in between.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::config::DevConfig;
use super::embedded::{seed_crds, start_embedded};
use super::manifest_dir::ManifestDir;
use super::plugins::{DevShadow, follow_object_plugins, say_if_none_serve, serve_plugins};
use super::stamp::{now_millis, stamp};
use super::tables::primaries_table;
use crate::cluster::RealClock;
use crate::cluster::embedded::EmbeddedCluster;
use crate::cluster::embedded::builtins::group_changes;
use crate::engine::Engine;
use crate::engine::dispatch::{Dispatcher, Wake};
use crate::golden::recorder::CaseRecorder;
use crate::plugin::Sandbox;
use crate::plugin::background_reload::BackgroundReload;
use crate::support::dir_watch::watch_dir;

/// Runs the dev loop over one cluster until Ctrl-C (or until settled, if
/// asked). Returns how many plugin versions were refused.
pub(super) async fn run(
    sandbox: Arc<Sandbox>,
    mut config: DevConfig,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<u64> {
    let cluster = start_embedded(&config);
    if let Some(dir) = &config.crds_dir {
        for line in seed_crds(dir, &cluster) {
            writeln!(out, "{}", stamp(&line))?;
        }
    }
    let mut shadow = DevShadow::new(&config.plugins_dir);
    let engine = dev_engine(&cluster, &sandbox, &config, &shadow)?;
    let plugins = serve_plugins(sandbox, &mut config, engine.as_ref(), &shadow, out).await?;
    // Objects after plugins: the plugins that serve admission admit them.
    let mut manifests = ManifestDir::default();
    for line in manifests.sync_admitted(&config.objects_dir, &cluster, &engine.plugins()) {
        writeln!(out, "{}", stamp(&line))?;
    }
    say_if_none_serve(&engine.plugins(), &config.plugins_dir, out)?;

    // File changes arrive from the watcher threads; keep the watchers alive.
    let (fs_tx, mut fs_rx) = mpsc::unbounded_channel();
    let _objects_watch = watch_dir(&config.objects_dir, fs_tx);
    let (plugins_tx, plugins_rx) = mpsc::unbounded_channel();
    let rescan = plugins_tx.clone();
    let _plugins_watch = watch_dir(&config.plugins_dir, plugins_tx);
    // Later plugin files load beside the loop, which keeps serving.
    let mut failures = plugins.failures();
    let mut reloads = BackgroundReload::start(plugins, engine.clone(), plugins_rx, None);
    let mut dispatcher = Dispatcher::new(engine.clone());
    let mut table_shown = String::new();
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);

    loop {
        while let Some(record) = dispatcher.try_finished() {
            writeln!(out, "{}", stamp(&record.to_string()))?;
        }
        shadow.tick(now_millis(), out)?;
        // After the reconciles whose writes they answered: while some run,
        // their records bring the changes with them.
        if dispatcher.outstanding() == 0 {
            write_builtin_changes(&cluster, out)?;
        }
        let changes = dispatcher.dispatch();
        if dispatcher.outstanding() == 0 && changes == 0 && shadow.book.pending() == 0 {
            let table = primaries_table(&engine);
            if table != table_shown {
                write!(out, "{table}")?;
                table_shown = table;
            }
            if config.until_settled && engine.next_wakeup().is_none_or(|at| at > now_millis()) {
                break;
            }
        }
        tokio::select! {
            woke = dispatcher.wake() => {
                if let Wake::Finished(record) = woke {
                    writeln!(out, "{}", stamp(&record.to_string()))?;
                    write_builtin_changes(&cluster, out)?;
                }
            }
            update = reloads.next() => {
                for event in &update.events {
                    writeln!(out, "{}", stamp(&event.to_string()))?;
                }
                failures = update.failures;
            }
            Some(line) = shadow.lines.recv() => writeln!(out, "{}", stamp(&line))?,
            () = cluster.builtin_changes_ready(), if config.builtins.is_some() && dispatcher.outstanding() == 0 => {}
            Some(()) = fs_rx.recv() => {
                while fs_rx.try_recv().is_ok() {}
                follow_object_plugins(&mut config, &rescan, out).await?;
                for line in manifests.sync_admitted(&config.objects_dir, &cluster, &engine.plugins()) {
                    writeln!(out, "{}", stamp(&line))?;
                }
            }
            _ = &mut ctrl_c => {
                writeln!(out, "stopping: waiting for {} reconcile(s) in flight", dispatcher.outstanding())?;
                break;
            }
        }
    }
    // In-flight reconciles finish (each is bounded by its plugin deadline).
    let (records, _) = dispatcher.drain(Duration::from_secs(15), || true).await;
    for record in records {
        writeln!(out, "{}", stamp(&record.to_string()))?;
    }
    shadow.finish(out).await?;
    Ok(failures + config.object_plugins.as_ref().map_or(0, |p| p.failures()))
}

/// The engine of `dev` over one cluster: the sandbox's pool, the shadow's
/// candidates and book, and a recorder when asked.
fn dev_engine(
    cluster: &Arc<EmbeddedCluster>,
    sandbox: &Sandbox,
    config: &DevConfig,
    shadow: &DevShadow,
) -> anyhow::Result<Arc<Engine<EmbeddedCluster>>> {
    let mut engine = Engine::empty(cluster.clone(), Arc::new(RealClock))
        .with_instance_pool(sandbox.reconcile_instances())
        .with_shadow(shadow.candidates.clone(), shadow.book.clone())
        .with_journal(config.journal.clone());
    if let Some(record) = &config.record {
        let recorder = CaseRecorder::new(record, "dev")
            .map_err(|e| anyhow::anyhow!("cannot record into {}: {e}", record.dir.display()))?;
        engine = engine.with_recorder(Arc::new(recorder));
    }
    Ok(Arc::new(engine))
}

/// The built-in controllers' changes since the last call, quieter than a
/// reconcile: indented, marked `(cluster)`, a line per kind of change
/// naming every object it touched.
fn write_builtin_changes(
    cluster: &EmbeddedCluster,
    out: &mut (dyn Write + Send),
) -> std::io::Result<()> {
    for line in group_changes(&cluster.take_builtin_changes()) {
        writeln!(out, "{}", stamp(&format!("  (cluster) {line}")))?;
    }
    Ok(())
}
