//! Where member clusters come from, followed at runtime: the cluster the
//! host runs in (`local`), Secrets in the host's namespace labelled
//! `reconciler-host.io/cluster` (the label's value names the member; the
//! kubeconfig under `kubeconfig`, or `value` as Cluster API writes it),
//! Cluster API's `<cluster>-kubeconfig` Secrets (`--cluster-api`), and one
//! kubeconfig file per member in `--clusters-dir`.
//!
//! Every source reports its whole set of members; the [`Engagements`] keep
//! the fleet equal to their union: a new member is engaged, one whose
//! kubeconfig changed (rotated credentials, a new address) is engaged
//! anew, one no source names any more is disengaged. A kubeconfig that does
//! not make a client is reported and retried when its source changes.
//!
//! Trust: the Secret sources are off unless `run` asks for them, and what
//! they hold is input, not configuration. Their kubeconfigs may not run
//! commands, read files or drop TLS verification unless the operator allows
//! it ([`kubeconfig_trust`](super::kubeconfig_trust)), and a name the
//! operator's own sources give (local, `--clusters-dir`) is never taken
//! over by a Secret: a clash is refused and said on the losing Secret.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use tokio::sync::mpsc;

use super::Fleet;
use super::kubeconfig_trust::{self, KubeconfigTrust, Widening};
use super::member::{Identity, Probe};
use super::selection::{CLUSTER_LABEL, FILE_LABEL};
use crate::cluster::kubernetes::KubernetesBackend;
use crate::cluster::kubernetes::relist_watch::{Change, relist_watch};

/// The label that makes a Secret a member's kubeconfig.
pub const SECRET_LABEL: &str = CLUSTER_LABEL;
/// The label Cluster API puts on the Secrets it maintains.
pub const CAPI_CLUSTER_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// The name of the member the host runs in.
pub const LOCAL: &str = reconciler_contract::LOCAL_CLUSTER;

/// How long building a member's client may take: with `exec` allowed, a
/// credential command runs then, and one that hangs must not hold the
/// member's source for ever.
pub const CREDENTIAL_TIMEOUT: Duration = Duration::from_secs(30);

/// Which source a member came from, most trusted first: the first in this
/// order keeps a name two sources give, so what the operator wrote (the
/// host's own cluster, `--clusters-dir`) is never taken over by what anyone
/// who may write a Secret wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SourceKind {
    Local,
    Files,
    ClusterApi,
    Secrets,
}

impl SourceKind {
    /// What a kubeconfig from this source may ask of the host.
    fn trust(self, secrets_allow: &std::collections::BTreeSet<Widening>) -> KubeconfigTrust {
        match self {
            SourceKind::Local | SourceKind::Files => KubeconfigTrust::Operator,
            SourceKind::ClusterApi | SourceKind::Secrets => {
                KubeconfigTrust::FromCluster(secrets_allow.clone())
            }
        }
    }
}

/// One member as its source describes it.
#[derive(Clone, Debug)]
pub struct Described {
    pub identity: Identity,
    /// The kubeconfig, or `None` for the local member (the host's client).
    pub kubeconfig: Option<String>,
    /// The Secret it came from, which engagements are announced on.
    pub secret: Option<ObjectReference>,
    /// Within its source, the earlier keeps a name two give: a Secret's
    /// creation time (then its name), a file's name.
    pub order: String,
}

/// Events on the source Secrets, so `kubectl describe secret` says what the
/// host made of each: engaged, engaged anew, disengaged, refused and why.
#[derive(Clone)]
struct Announcer {
    recorder: Recorder,
}

impl Announcer {
    fn new(client: kube::Client) -> Self {
        let reporter = Reporter {
            controller: "reconciler-host".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            recorder: Recorder::new(client, reporter),
        }
    }

    /// Publishes beside the engagements: an Event never holds them up, and
    /// one that cannot be written is a debug line.
    fn announce(
        &self,
        secret: Option<&ObjectReference>,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        let Some(secret) = secret.cloned() else {
            return;
        };
        let recorder = self.recorder.clone();
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note),
            action: reason.into(),
            secondary: None,
        };
        tokio::spawn(async move {
            if let Err(e) = recorder.publish(&event, &secret).await {
                tracing::debug!("cannot record an Event on Secret {:?}: {e}", secret.name);
            }
        });
    }
}

/// What the sources follow.
#[derive(Clone, Debug)]
pub struct SourceOptions {
    pub local: bool,
    /// The host's namespace: where kubeconfig Secrets are read.
    pub namespace: String,
    pub secrets: bool,
    pub cluster_api: bool,
    /// What kubeconfigs from Secrets may ask beyond inline credentials for
    /// a verified TLS server (`--cluster-secrets-allow`).
    pub secrets_allow: std::collections::BTreeSet<Widening>,
    pub clusters_dir: Option<PathBuf>,
    /// The request deadline of members' clients (as `run`'s own client).
    pub request_timeout: Option<Duration>,
    /// Each member's client's own request rate.
    pub member_rate: Option<crate::cluster::kubernetes::client_rate_limit::RateLimit>,
    /// How long a disengaged member's reconciles in flight may finish.
    pub drain: Duration,
}

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
        let local = Described {
            identity: Identity {
                name: LOCAL.into(),
                labels: BTreeMap::from([(CLUSTER_LABEL.to_string(), LOCAL.to_string())]),
                source: "local".into(),
                server: "the cluster the host runs in".into(),
            },
            kubeconfig: None,
            secret: None,
            order: String::new(),
        };
        let _ = tx.send((SourceKind::Local, vec![local]));
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
        while let Some((kind, members)) = reports.recv().await {
            engagements.report(kind, members);
            engagements
                .apply(&fleet, &local, &options, &announcer)
                .await;
        }
    })
}

/// What a member was engaged from: its source, kubeconfig, identity and
/// Secret.
type EngagedFrom = (
    SourceKind,
    Option<String>,
    Identity,
    Option<ObjectReference>,
);

/// The members each source names, and what the fleet was given for each.
#[derive(Default)]
struct Engagements {
    by_source: BTreeMap<SourceKind, Vec<Described>>,
    /// Engaged (or refused) members: the source and kubeconfig they were
    /// engaged from, so only a change engages again.
    engaged: BTreeMap<String, EngagedFrom>,
    /// Name clashes already reported: the losing source's description of
    /// the name and the source that kept it.
    clashes: BTreeMap<(String, String), String>,
}

impl Engagements {
    fn report(&mut self, kind: SourceKind, mut members: Vec<Described>) {
        members.sort_by(|a, b| a.order.cmp(&b.order));
        self.by_source.insert(kind, members);
    }

    /// Says each claim on a name that [`union`] refused, once while it
    /// lasts: in the log, and on its Secret.
    fn report_clashes(&mut self, clashes: Vec<Clash>, announcer: &Announcer) {
        let mut now = BTreeMap::new();
        for clash in clashes {
            let name = &clash.refused.identity.name;
            let key = (name.clone(), clash.refused.identity.source.clone());
            if self.clashes.get(&key) != Some(&clash.kept_by) {
                let note = format!(
                    "cluster {name} is already given by {}: {} is not used for it; rename one of them",
                    clash.kept_by, clash.refused.identity.source
                );
                tracing::warn!(cluster = %name, "{note}");
                announcer.announce(clash.refused.secret.as_ref(), true, "NameTaken", note);
            }
            now.insert(key, clash.kept_by);
        }
        self.clashes = now;
    }

    async fn apply(
        &mut self,
        fleet: &Fleet<KubernetesBackend>,
        local: &kube::Client,
        options: &SourceOptions,
        announcer: &Announcer,
    ) {
        let (union, clashes) = union(&self.by_source);
        self.report_clashes(clashes, announcer);
        let gone: Vec<String> = self
            .engaged
            .keys()
            .filter(|name| !union.contains_key(*name))
            .cloned()
            .collect();
        for name in gone {
            let secret = self
                .engaged
                .remove(&name)
                .and_then(|(_, _, _, secret)| secret);
            fleet.disengage(&name, options.drain).await;
            announcer.announce(
                secret.as_ref(),
                false,
                "Disengaged",
                format!("cluster {name} is no longer served: its source no longer names it"),
            );
        }
        for (name, (kind, described)) in union {
            let unchanged = self
                .engaged
                .get(&name)
                .is_some_and(|(k, config, identity, _)| {
                    *k == kind && *config == described.kubeconfig && *identity == described.identity
                });
            if unchanged {
                continue;
            }
            self.engaged.insert(
                name.clone(),
                (
                    kind,
                    described.kubeconfig.clone(),
                    described.identity.clone(),
                    described.secret.clone(),
                ),
            );
            let client = match &described.kubeconfig {
                None => Ok((local.clone(), described.identity.server.clone())),
                Some(text) => {
                    client_for(
                        text,
                        &kind.trust(&options.secrets_allow),
                        options.request_timeout,
                        options.member_rate,
                    )
                    .await
                }
            };
            match client {
                Ok((client, server)) => {
                    let again = fleet.identities().contains_key(&name);
                    let identity = Identity {
                        server: server.clone(),
                        ..described.identity
                    };
                    let backend = Arc::new(KubernetesBackend::new(client.clone()));
                    let probe =
                        probe_of(client, announcer.clone(), described.secret.clone(), &name);
                    let announce: super::Announce = {
                        let (announcer, secret) = (announcer.clone(), described.secret.clone());
                        Arc::new(move |warning, reason, note| {
                            announcer.announce(secret.as_ref(), warning, reason, note)
                        })
                    };
                    let hooks = super::Hooks {
                        probe: Some(probe),
                        announce: Some(announce),
                    };
                    fleet.engage(identity, backend, hooks, options.drain);
                    let (reason, what) = if again {
                        ("Reengaged", "engaged anew, its kubeconfig changed")
                    } else {
                        ("Engaged", "engaged")
                    };
                    announcer.announce(
                        described.secret.as_ref(),
                        false,
                        reason,
                        format!("cluster {name} {what}: {server}"),
                    );
                }
                Err(why) => {
                    // A member already serving keeps its previous client:
                    // a broken rotation must not stop a working cluster.
                    let serving = fleet.identities().contains_key(&name);
                    let reason = match why {
                        EngageError::Refused(_) => "Refused",
                        EngageError::NoClient(_) => "EngageFailed",
                    };
                    announcer.announce(
                        described.secret.as_ref(),
                        true,
                        reason,
                        format!("cannot engage cluster {name}: {why}"),
                    );
                    tracing::warn!(
                        cluster = %name,
                        source = %described.identity.source,
                        "cannot engage cluster {name} from {}: {why}{}",
                        described.identity.source,
                        if serving { "; it keeps serving with its previous kubeconfig" } else { "" }
                    );
                }
            }
        }
    }
}

/// Why a member's kubeconfig gave no client.
#[derive(Debug, thiserror::Error)]
pub enum EngageError {
    /// It asks for what its source may not (a command, a file, no TLS).
    #[error(transparent)]
    Refused(#[from] kubeconfig_trust::Refused),
    /// It does not make a client; the text is free of its credentials.
    #[error("{0}")]
    NoClient(String),
}

/// A claim on a member's name that a more trusted (or, within one source,
/// earlier) claim holds.
#[derive(Debug)]
struct Clash {
    refused: Described,
    /// The source that keeps the name.
    kept_by: String,
}

/// The member each name stands for: the most trusted source's, then the
/// earliest within a source; and every other claim on a name.
fn union(
    by_source: &BTreeMap<SourceKind, Vec<Described>>,
) -> (BTreeMap<String, (SourceKind, Described)>, Vec<Clash>) {
    let mut union: BTreeMap<String, (SourceKind, Described)> = BTreeMap::new();
    let mut clashes = Vec::new();
    for (kind, members) in by_source {
        for described in members {
            match union.get(&described.identity.name) {
                Some((_, kept)) => clashes.push(Clash {
                    refused: described.clone(),
                    kept_by: kept.identity.source.clone(),
                }),
                None => {
                    union.insert(described.identity.name.clone(), (*kind, described.clone()));
                }
            }
        }
    }
    (union, clashes)
}

/// A client for a kubeconfig, and the server it names, if `trust` lets the
/// kubeconfig ask what it asks.
///
/// Building the client runs the kubeconfig's credential command, if it has
/// one (and may: see [`KubeconfigTrust`]); that happens on a blocking thread
/// and is given up after [`CREDENTIAL_TIMEOUT`], so a command that hangs
/// holds neither the async workers nor the other members. No command is
/// interactive: a host has no one to answer it, and its stderr is kept out
/// of the host's own.
pub async fn client_for(
    kubeconfig: &str,
    trust: &KubeconfigTrust,
    request_timeout: Option<Duration>,
    rate: Option<crate::cluster::kubernetes::client_rate_limit::RateLimit>,
) -> Result<(kube::Client, String), EngageError> {
    let mut parsed = kube::config::Kubeconfig::from_yaml(kubeconfig).map_err(|e| {
        EngageError::NoClient(match trust {
            KubeconfigTrust::Operator => format!("not a kubeconfig: {e}"),
            // A parser's message can quote the value it tripped on, and a
            // Secret's values are credentials; its Events are read by more
            // people than the Secret itself.
            KubeconfigTrust::FromCluster(_) => "not a kubeconfig: it does not parse as one (the parser's words are withheld, as they can quote the Secret's values; check it with `kubectl --kubeconfig FILE version`)".into(),
        })
    })?;
    kubeconfig_trust::check(&parsed, trust)?;
    for user in parsed
        .auth_infos
        .iter_mut()
        .filter_map(|u| u.auth_info.as_mut())
    {
        if let Some(exec) = user.exec.as_mut() {
            exec.interactive_mode = Some(kube::config::ExecInteractiveMode::Never);
        }
    }
    let config =
        kube::Config::from_custom_kubeconfig(parsed, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| {
                EngageError::NoClient(format!("the kubeconfig does not configure a client: {e}"))
            })?;
    let server = config.cluster_url.to_string();
    let build = tokio::task::spawn_blocking(move || {
        crate::cluster::kubernetes::api_client::limited_client_from_config(
            config,
            request_timeout,
            rate,
        )
        .map_err(|e| EngageError::NoClient(format!("{e:#}")))
    });
    let client = match tokio::time::timeout(CREDENTIAL_TIMEOUT, build).await {
        Ok(Ok(built)) => built?,
        Ok(Err(e)) => {
            return Err(EngageError::NoClient(format!(
                "building its client failed: {e}"
            )));
        }
        Err(_) => {
            return Err(EngageError::NoClient(format!(
                "its credential command did not finish within {} s",
                CREDENTIAL_TIMEOUT.as_secs()
            )));
        }
    };
    Ok((client, server))
}

/// Asks the API server its version: what a member's health probe does.
/// A member whose probe fails or answers again after failing says so on
/// its source Secret (Unreachable, Reachable), once per change.
fn probe_of(
    client: kube::Client,
    announcer: Announcer,
    secret: Option<ObjectReference>,
    name: &str,
) -> Probe {
    let reachable = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let name = name.to_string();
    Arc::new(move || {
        let (client, announcer, secret, reachable, name) = (
            client.clone(),
            announcer.clone(),
            secret.clone(),
            reachable.clone(),
            name.clone(),
        );
        Box::pin(async move {
            let result = match client.apiserver_version().await {
                // Any answer, an error status included, is a server that answers.
                Ok(_) | Err(kube::Error::Api(_)) => Ok(()),
                Err(e) => Err(crate::plugin_resources::api_error_text(&e)),
            };
            let now = result.is_ok();
            if reachable.swap(now, std::sync::atomic::Ordering::SeqCst) != now {
                let (warning, reason, note) = match &result {
                    Ok(()) => (
                        false,
                        "Reachable",
                        format!("cluster {name} answers again: its reconciles resume"),
                    ),
                    Err(why) => (
                        true,
                        "Unreachable",
                        format!(
                            "cluster {name} does not answer; its reconciles wait until it does: {why}"
                        ),
                    ),
                };
                announcer.announce(secret.as_ref(), warning, reason, note);
            }
            result
        })
    })
}

/// Follows the kubeconfig Secrets of one kind of source.
async fn follow_secrets(
    api: Api<Secret>,
    kind: SourceKind,
    tx: mpsc::UnboundedSender<(SourceKind, Vec<Described>)>,
) {
    let label = match kind {
        SourceKind::ClusterApi => CAPI_CLUSTER_LABEL,
        _ => SECRET_LABEL,
    };
    let config = watcher::Config::default().labels(label);
    // By Secret name: two Secrets may claim one member, and the
    // engagements decide which keeps it.
    let mut members: BTreeMap<String, Described> = BTreeMap::new();
    let report = |members: &BTreeMap<String, Described>| {
        let _ = tx.send((kind, members.values().cloned().collect()));
    };
    let warn = |e: &watcher::Error| {
        tracing::warn!("cannot watch cluster kubeconfig Secrets ({label}): {e}; retrying");
    };
    relist_watch(api, config, warn, |change| {
        match change {
            Change::Relisted(secrets) => {
                members = secrets
                    .iter()
                    .filter_map(|secret| {
                        let described = described_secret(secret, kind)?;
                        Some((secret.metadata.name.clone().unwrap_or_default(), described))
                    })
                    .collect();
            }
            Change::Applied(secret) => {
                // A Secret that stopped describing a member (its data gone)
                // is removed.
                let secret_name = secret.metadata.name.clone().unwrap_or_default();
                match described_secret(&secret, kind) {
                    Some(described) => members.insert(secret_name, described),
                    None => members.remove(&secret_name),
                };
            }
            Change::Deleted(secret) => {
                members.remove(&secret.metadata.name.clone().unwrap_or_default());
            }
        }
        report(&members);
    })
    .await;
}

fn secret_source(name: &str) -> String {
    format!("secret {name}")
}

/// The member a Secret describes, if it holds a kubeconfig under a valid
/// member name; otherwise a warning naming the Secret says what is wrong.
fn described_secret(secret: &Secret, kind: SourceKind) -> Option<Described> {
    let secret_name = secret.metadata.name.clone().unwrap_or_default();
    let labels: BTreeMap<String, String> = secret.metadata.labels.clone().unwrap_or_default();
    let name = match kind {
        SourceKind::ClusterApi => {
            let cluster = labels.get(CAPI_CLUSTER_LABEL)?;
            // Cluster API labels several Secrets of a cluster; the
            // kubeconfig is `<cluster>-kubeconfig`.
            if secret_name != format!("{cluster}-kubeconfig") {
                return None;
            }
            cluster.clone()
        }
        _ => labels.get(SECRET_LABEL)?.clone(),
    };
    if let Err(why) = valid_member_name(&name) {
        tracing::warn!("Secret {secret_name} names cluster {name:?}, which is not usable: {why}");
        return None;
    }
    // `local` means the cluster the host runs in, whether or not it is
    // served: `--plugin-clusters` and sharding rely on it.
    if name == LOCAL {
        tracing::warn!(
            "Secret {secret_name} names cluster {LOCAL}, which is reserved for the cluster the host runs in: it is not used"
        );
        return None;
    }
    let data = secret.data.as_ref();
    let bytes = data
        .and_then(|d| d.get("kubeconfig").or_else(|| d.get("value")))
        .map(|b| b.0.clone());
    let Some(bytes) = bytes else {
        tracing::warn!(
            "Secret {secret_name} names cluster {name} but holds no kubeconfig (key `kubeconfig`, or `value`)"
        );
        return None;
    };
    let Ok(kubeconfig) = String::from_utf8(bytes) else {
        tracing::warn!("Secret {secret_name}: its kubeconfig is not UTF-8 text");
        return None;
    };
    let mut member_labels = labels;
    member_labels.insert(CLUSTER_LABEL.into(), name.clone());
    let created = secret
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    Some(Described {
        identity: Identity {
            name,
            labels: member_labels,
            source: secret_source(&secret_name),
            server: String::new(),
        },
        kubeconfig: Some(kubeconfig),
        secret: Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Secret".into()),
            name: secret.metadata.name.clone(),
            namespace: secret.metadata.namespace.clone(),
            uid: secret.metadata.uid.clone(),
            ..ObjectReference::default()
        }),
        // RFC 3339 times of one precision sort as text.
        order: format!("{created} {secret_name}"),
    })
}

/// Follows `dir`: one kubeconfig file per member, named by the file's
/// name up to its first dot.
async fn follow_dir(dir: PathBuf, tx: mpsc::UnboundedSender<(SourceKind, Vec<Described>)>) {
    let (changes_tx, mut changes) = mpsc::unbounded_channel();
    let _watch = crate::support::dir_watch::watch_dir(&dir, changes_tx);
    loop {
        let _ = tx.send((SourceKind::Files, read_dir_members(&dir)));
        if changes.recv().await.is_none() {
            return;
        }
        while changes.try_recv().is_ok() {}
    }
}

/// The members the files of `dir` describe, in file name order (two files
/// may name one member: the first keeps it); unreadable files are named in
/// a warning and left out.
pub fn read_dir_members(dir: &Path) -> Vec<Described> {
    let mut members = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            tracing::warn!("cannot read --clusters-dir {}: {e}", dir.display());
            return members;
        }
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    for file in files {
        let file_name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let name = file_name.split('.').next().unwrap_or_default().to_string();
        if let Err(why) = valid_member_name(&name) {
            tracing::warn!(
                "{}: cluster name {name:?} is not usable: {why}",
                file.display()
            );
            continue;
        }
        let kubeconfig = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(e) => {
                tracing::warn!("cannot read {}: {e}", file.display());
                continue;
            }
        };
        let labels = BTreeMap::from([
            (CLUSTER_LABEL.to_string(), name.clone()),
            (FILE_LABEL.to_string(), file_name.clone()),
        ]);
        members.push(Described {
            identity: Identity {
                name,
                labels,
                source: format!("file {}", file.display()),
                server: String::new(),
            },
            kubeconfig: Some(kubeconfig),
            secret: None,
            order: file_name,
        });
    }
    members
}

/// A member's name is a label value (selectors name it): 1 to 63
/// characters, alphanumerics, `-`, `_` and `.`, starting and ending
/// alphanumeric.
pub fn valid_member_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err("a cluster name is 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit".into())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::ObjectMeta;

    use super::*;

    fn secret(name: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("hub".into()),
                uid: Some(format!("uid-{name}")),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Secret::default()
        }
    }

    #[test]
    fn a_labelled_secret_names_its_member_and_carries_its_labels() {
        let s = secret(
            "member-east",
            &[(SECRET_LABEL, "east"), ("env", "prod")],
            &[("kubeconfig", "apiVersion: v1")],
        );
        let d = described_secret(&s, SourceKind::Secrets).unwrap();
        assert_eq!(d.identity.name, "east");
        assert_eq!(d.identity.labels["env"], "prod");
        assert_eq!(d.identity.labels[CLUSTER_LABEL], "east");
        assert_eq!(d.identity.source, "secret member-east");
        assert_eq!(d.kubeconfig.as_deref(), Some("apiVersion: v1"));
        assert_eq!(d.secret.unwrap().uid.as_deref(), Some("uid-member-east"));
        // Cluster API's key works too.
        let s = secret("m", &[(SECRET_LABEL, "west")], &[("value", "kc")]);
        assert_eq!(
            described_secret(&s, SourceKind::Secrets)
                .unwrap()
                .kubeconfig
                .as_deref(),
            Some("kc")
        );
    }

    #[test]
    fn secrets_without_a_usable_name_or_kubeconfig_describe_no_member() {
        let no_data = secret("m", &[(SECRET_LABEL, "east")], &[]);
        assert!(described_secret(&no_data, SourceKind::Secrets).is_none());
        let reserved = secret("m", &[(SECRET_LABEL, LOCAL)], &[("kubeconfig", "x")]);
        assert!(described_secret(&reserved, SourceKind::Secrets).is_none());
        let bad_name = secret("m", &[(SECRET_LABEL, "-east")], &[("kubeconfig", "x")]);
        assert!(described_secret(&bad_name, SourceKind::Secrets).is_none());
        // Cluster API labels several Secrets of a cluster: only
        // `<cluster>-kubeconfig` is its kubeconfig.
        let ca = secret(
            "prod-ca",
            &[(CAPI_CLUSTER_LABEL, "prod")],
            &[("value", "x")],
        );
        assert!(described_secret(&ca, SourceKind::ClusterApi).is_none());
        let kubeconfig = secret(
            "prod-kubeconfig",
            &[(CAPI_CLUSTER_LABEL, "prod")],
            &[("value", "x")],
        );
        let d = described_secret(&kubeconfig, SourceKind::ClusterApi).unwrap();
        assert_eq!(d.identity.name, "prod");
    }

    #[test]
    fn a_clusters_directory_names_members_by_file_and_skips_what_it_cannot_use() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("east.kubeconfig"), "east-config").unwrap();
        std::fs::write(dir.path().join("west.prod.yaml"), "west-config").unwrap();
        std::fs::write(dir.path().join(".hidden.yaml"), "x").unwrap();
        std::fs::write(dir.path().join("-bad.yaml"), "x").unwrap();
        let members = read_dir_members(dir.path());
        assert_eq!(
            members
                .iter()
                .map(|d| d.identity.name.as_str())
                .collect::<Vec<_>>(),
            ["east", "west"],
            "{members:?}"
        );
        let west = &members[1];
        assert_eq!(west.kubeconfig.as_deref(), Some("west-config"));
        assert_eq!(
            west.identity.labels,
            BTreeMap::from([
                (CLUSTER_LABEL.to_string(), "west".to_string()),
                (FILE_LABEL.to_string(), "west.prod.yaml".to_string()),
            ])
        );
    }

    #[tokio::test]
    async fn a_kubeconfig_that_configures_no_client_is_refused_saying_why() {
        let Err(err) =
            client_for("not: [a kubeconfig", &KubeconfigTrust::Operator, None, None).await
        else {
            panic!("a client from a broken kubeconfig");
        };
        assert!(err.to_string().contains("not a kubeconfig"), "{err}");
        // From a Secret, the parser's words (which can quote a value) are
        // withheld.
        let quoting = "clusters: {token-abc123: [";
        let Err(err) = client_for(
            quoting,
            &KubeconfigTrust::FromCluster(Default::default()),
            None,
            None,
        )
        .await
        else {
            panic!("a client from a broken kubeconfig");
        };
        let text = err.to_string();
        assert!(
            text.contains("not a kubeconfig") && !text.contains("abc123"),
            "{text}"
        );
        let empty = "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n";
        let Err(err) = client_for(empty, &KubeconfigTrust::Operator, None, None).await else {
            panic!("a client from an empty kubeconfig");
        };
        assert!(
            err.to_string().contains("does not configure a client"),
            "{err}"
        );
    }

    fn member(name: &str, source: &str, order: &str) -> Described {
        Described {
            identity: Identity {
                name: name.into(),
                labels: BTreeMap::new(),
                source: source.into(),
                server: String::new(),
            },
            kubeconfig: Some(format!("config of {source}")),
            secret: None,
            order: order.into(),
        }
    }

    #[test]
    fn the_operators_sources_keep_a_name_a_secret_also_gives() {
        let mut engagements = Engagements::default();
        // Reported in any order, Secrets first.
        engagements.report(
            SourceKind::Secrets,
            vec![
                member("prod", "secret takeover", "2026-02-01T00:00:00Z takeover"),
                member("local", "secret local", "2026-01-01T00:00:00Z local"),
                member("east", "secret east-new", "2026-03-01T00:00:00Z east-new"),
                member("east", "secret east", "2026-01-01T00:00:00Z east"),
            ],
        );
        engagements.report(
            SourceKind::ClusterApi,
            vec![member("prod", "secret prod-kubeconfig", "x")],
        );
        engagements.report(
            SourceKind::Files,
            vec![member("prod", "file prod.yaml", "prod.yaml")],
        );
        engagements.report(SourceKind::Local, vec![member("local", "local", "")]);
        let (union, clashes) = union(&engagements.by_source);
        let kept: Vec<(&str, &str)> = union
            .iter()
            .map(|(name, (_, d))| (name.as_str(), d.identity.source.as_str()))
            .collect();
        assert_eq!(
            kept,
            [
                ("east", "secret east"),
                ("local", "local"),
                ("prod", "file prod.yaml"),
            ]
        );
        let refused: Vec<(&str, &str)> = clashes
            .iter()
            .map(|c| (c.refused.identity.source.as_str(), c.kept_by.as_str()))
            .collect();
        assert_eq!(
            refused,
            [
                ("secret prod-kubeconfig", "file prod.yaml"),
                ("secret local", "local"),
                ("secret takeover", "file prod.yaml"),
                ("secret east-new", "secret east"),
            ]
        );
    }
}
