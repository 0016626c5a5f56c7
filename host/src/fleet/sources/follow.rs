//! The follow loop: starts every source `run` asks for and feeds what each
//! reports, in turn, to the engagements, so the fleet changes one report
//! at a time and never from two places at once.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use tokio::sync::mpsc;

use super::announcer::Announcer;
use super::described::{Described, SourceKind};
use super::engagements::{Engagements, Engaging};
use super::files::{follow_dir, read_dir_members};
use super::local::local_member;
use super::options::SourceOptions;
use super::secrets::follow_secrets;
use crate::cluster::kubernetes::KubernetesBackend;
use crate::fleet::Fleet;

/// Starts following every source of `options` into `fleet`; the handle
/// stops them when dropped.
pub fn follow(
    fleet: Arc<Fleet<KubernetesBackend>>,
    local: kube::Client,
    options: SourceOptions,
) -> tokio::task::JoinHandle<()> {
    let (tx, mut reports) = mpsc::unbounded_channel::<(SourceKind, Vec<Described>)>();
    let mut tasks = tokio::task::JoinSet::new();
    if options.local {
        let _ = tx.send((SourceKind::Local, vec![local_member()]));
    }
    // The operator's files are read before any Secret can be: a Secret
    // must not hold a name the files give, not even until they are read.
    if let Some(dir) = &options.clusters_dir {
        let _ = tx.send((SourceKind::Files, read_dir_members(dir)));
    }
    if options.secrets {
        let api: Api<Secret> = Api::namespaced(local.clone(), &options.namespace);
        tasks.spawn(follow_secrets(api, SourceKind::Secrets, tx.clone()));
    }
    if options.cluster_api {
        let api: Api<Secret> = Api::namespaced(local.clone(), &options.namespace);
        tasks.spawn(follow_secrets(api, SourceKind::ClusterApi, tx.clone()));
    }
    if let Some(dir) = options.clusters_dir.clone() {
        tasks.spawn(follow_dir(dir, tx.clone()));
    }
    drop(tx);
    tokio::spawn(async move {
        let _tasks = tasks;
        let mut engagements = Engagements::default();
        let announcer = Announcer::new(local.clone());
        let to = Engaging {
            fleet: &fleet,
            local: &local,
            options: &options,
            announcer: &announcer,
        };
        while let Some((kind, members)) = reports.recv().await {
            engagements.report(kind, members);
            engagements.apply(&to).await;
        }
    })
}
