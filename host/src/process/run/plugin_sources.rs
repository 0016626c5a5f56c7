//! Where the plugins `run` serves come from: its plugins directory,
//! watched; the files pulled from registries (--plugin references and
//! Plugin resources), served beside it; and the one plugin set admission
//! is published to. Admission may serve before this replica reconciles
//! anything, so the directory is followed into a standby until the
//! engine takes it over.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::mpsc;

use super::abort_on_drop::AbortOnDrop;
use super::config::{RunConfig, ShardingConfig};
use crate::admission::plugin_set::AdmissionPlugins;
use crate::admission::shard_labels::ShardLabels;
use crate::plugin::Sandbox;
use crate::plugin::background_reload::BackgroundReload;
use crate::plugin::candidates::Candidates;
use crate::plugin::hot_reload::PluginDirectory;
use crate::plugin::standby::Standby;
use crate::process::http_server::HostStatus;
use crate::registry::served_files::ServedFiles;
use crate::support::dir_watch::{DirWatch, watch_dir};
use crate::support::duty_holder::DutyHolder;

/// The plugins directory and what serves beside it, before anything runs
/// them.
pub(super) struct PluginSources {
    /// The plugin set admission serves from.
    pub admission: Arc<AdmissionPlugins>,
    /// Where pulled plugins are served from.
    pub served: Arc<ServedFiles>,
    pub directory: PluginDirectory,
    /// A rescan of the directory is due.
    pub changes: mpsc::UnboundedReceiver<()>,
    /// Asks for a rescan (a pulled plugin arrived).
    pub rescan: mpsc::UnboundedSender<()>,
    /// Keeps the directory watched.
    pub watch: Option<DirWatch>,
}

impl PluginSources {
    /// One plugin set for the engine and admission: the directory loads
    /// each version once and publishes what serves to admission.
    pub(super) fn open(config: &RunConfig, sandbox: &Arc<Sandbox>) -> anyhow::Result<Self> {
        let admission = Arc::new(admission_plugins(config.sharding.as_ref()));
        let served = Arc::new(ServedFiles::new_or_refusing(config.pulled.cache.dir()));
        let mut directory = PluginDirectory::new(&config.plugins_dir, sandbox.clone())
            .publishing_to(admission.clone());
        if let Some(dir) = served.dir() {
            directory = directory.also_serving(dir);
        }
        let (plugins_tx, changes) = mpsc::unbounded_channel();
        let rescan = plugins_tx.clone();
        let watch = watch_dir(&config.plugins_dir, plugins_tx);
        Ok(Self {
            admission,
            served,
            directory,
            changes,
            rescan,
            watch,
        })
    }
}

/// The plugin set admission serves from.
fn admission_plugins(sharding: Option<&ShardingConfig>) -> AdmissionPlugins {
    match sharding {
        None => AdmissionPlugins::new(),
        // New primaries of this cluster get their bucket at creation, when
        // admission is served (the fleet's members have no webhook).
        Some(sharding) => {
            let by = sharding.by;
            AdmissionPlugins::with_shard_labels(ShardLabels::new(
                Arc::new(move |key| by.label_value(crate::fleet::sources::LOCAL, key)),
                sharding.pods_follow,
            ))
        }
    }
}

/// The plugins directory until the engine starts: followed into a standby
/// while admission serves, or untouched without admission.
pub(super) enum BeforeEngine {
    Unstarted(PluginDirectory, mpsc::UnboundedReceiver<()>),
    Standby(BackgroundReload),
}

impl BeforeEngine {
    /// The directory and its changes, for the engine to take over.
    pub(super) async fn into_directory(
        self,
    ) -> anyhow::Result<(PluginDirectory, mpsc::UnboundedReceiver<()>)> {
        match self {
            Self::Unstarted(plugins, changes) => Ok((plugins, changes)),
            Self::Standby(reloads) => reloads
                .stop()
                .await
                .context("the plugins directory's reloads ended before the engine started"),
        }
    }
}

/// Every replica serves admission, leader or not: before the election,
/// the directory serves into a standby (no engine yet), followed as it
/// changes, and is handed to the engine once this replica leads.
pub(super) async fn serve_admission(
    config: &mut RunConfig,
    sandbox: &Arc<Sandbox>,
    client: &kube::Client,
    mut plugins: PluginDirectory,
    changes: mpsc::UnboundedReceiver<()>,
    admission_plugins: &Arc<AdmissionPlugins>,
    duties: &DutyHolder,
) -> anyhow::Result<BeforeEngine> {
    let Some(admission) = config.admission.take() else {
        return Ok(BeforeEngine::Unstarted(plugins, changes));
    };
    let host = Arc::new(Standby::new());
    plugins.sync(&host).await;
    crate::admission::service::start(
        sandbox.clone(),
        client.clone(),
        admission_plugins.clone(),
        admission,
        duties.clone(),
    )
    .await
    .context("admission")?;
    Ok(BeforeEngine::Standby(BackgroundReload::start(
        plugins, host, changes, None,
    )))
}

/// Where pulled plugins go: the files they are served as, the rescan
/// that loads them, and the candidates a canary rollout gives a share.
pub(super) struct PulledInto {
    pub served: Arc<ServedFiles>,
    pub rescan: mpsc::UnboundedSender<()>,
    pub candidates: Arc<Candidates>,
}

/// Starts following --plugin references and (unless told not to) Plugin
/// resources; dropping the handle stops them.
pub(super) fn start_pulled(
    config: &RunConfig,
    status: &Arc<HostStatus>,
    into: PulledInto,
    client: kube::Client,
    sandbox: &Arc<Sandbox>,
    writes_status: DutyHolder,
) -> Option<AbortOnDrop> {
    let pulled = &config.pulled;
    if pulled.references.is_empty() && !pulled.watch_resources {
        return None;
    }
    let feed = status.plugins_feed();
    let load_timeout = Duration::from_secs(u64::from(sandbox.limits().load_timeout_secs) + 10);
    let shared = Arc::new(crate::plugin_resources::Shared::on(
        client.clone(),
        |api, recorder| crate::plugin_resources::Shared {
            client,
            api,
            options: pulled.options.clone(),
            cache: pulled.cache.clone(),
            served: into.served,
            reload: into.rescan,
            feed,
            namespace: pulled.namespace.clone(),
            trust_root: pulled.trust_root.clone(),
            required: pulled.required.clone(),
            allowed_registries: pulled.allowed_registries.clone(),
            recorder,
            load_timeout,
            writes_status,
            shadow: status.shadow.clone(),
            candidates: into.candidates,
        },
    ));
    let references = pulled.references.clone();
    let verify = pulled.verify_keys.clone();
    let watch = pulled.watch_resources.then(|| pulled.selector.clone());
    Some(AbortOnDrop(tokio::spawn(async move {
        crate::plugin_resources::follow(shared, references, verify, watch).await
    })))
}
