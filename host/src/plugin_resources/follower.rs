//! Keeping one Plugin's source served: resolve, verify, pull, serve, and
//! say how it went.
//!
//! A new digest replaces the one serving only once it has been verified,
//! pulled whole and loaded; until then, and whenever any step fails, the
//! last good digest keeps serving and the status says why the new one does
//! not. A version the directory refuses is taken back out of the served
//! file, so a restart serves the last good one too. Failures are retried
//! with backoff (5 s doubling to 5 min); a digest refused for what it is
//! (signature, content, load) is not pulled again until the spec changes
//! or the source names another digest.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};
use tokio::sync::watch;

use super::Shared;
use super::conditions::{self, PluginResourceStatus, State};
use super::spec::ValidSpec;
use crate::plugin::hot_reload::PluginStatus;
use crate::registry::fetch::{FetchError, fetch_digest, resolve};
use crate::registry::{Credentials, Digest, RegistryClient, TrustPolicy};

const FIRST_BACKOFF: Duration = Duration::from_secs(5);
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// What a follower is asked to serve.
#[derive(Clone, Debug)]
pub struct Desired {
    pub generation: i64,
    pub spec: Result<ValidSpec, String>,
    /// The Plugin whose status and Events tell the story; `None` for a
    /// `--plugin` reference, which only logs.
    pub object: Option<ObjectReference>,
    /// The keys a `--plugin` reference must be signed by (`--verify-key`);
    /// a Plugin's come from its spec.
    pub policy: Option<TrustPolicy>,
}

#[derive(Clone, Debug)]
struct Serving {
    digest: Digest,
    component: PathBuf,
    /// The conditions it was served with, set again when a failure of a
    /// newer digest is over.
    verified: State,
    loaded: State,
}

/// The outcome of one attempt, for the next wait.
enum Attempt {
    Settled,
    Failed,
}

pub struct Follower {
    shared: Arc<Shared>,
    /// The served file's name (without `.wasm`).
    file_name: String,
    /// What logs call it: `Plugin podset` or the reference.
    label: String,
    serving: Option<Serving>,
    /// A digest refused for what it is, at this generation.
    refused: Option<(Digest, i64)>,
    status: PluginResourceStatus,
    written: Option<PluginResourceStatus>,
}

impl Follower {
    pub fn new(shared: Arc<Shared>, file_name: String, label: String) -> Self {
        Self {
            shared,
            file_name,
            label,
            serving: None,
            refused: None,
            status: PluginResourceStatus::default(),
            written: None,
        }
    }

    /// Follows `desired` until it becomes `None` (the Plugin was deleted),
    /// then stops serving the file.
    pub async fn run(mut self, mut desired: watch::Receiver<Option<Desired>>) {
        let mut backoff = FIRST_BACKOFF;
        loop {
            let Some(current) = desired.borrow_and_update().clone() else {
                break;
            };
            let attempt = self.attempt(&current).await;
            self.publish(&current).await;
            let wait = match attempt {
                Attempt::Settled => {
                    backoff = FIRST_BACKOFF;
                    current.spec.as_ref().ok().and_then(|s| s.interval)
                }
                Attempt::Failed => {
                    // Never later than the interval: a tag fixed upstream
                    // is picked up as fast as a tag moved.
                    let interval = current.spec.as_ref().ok().and_then(|s| s.interval);
                    let wait = interval.map_or(backoff, |i| backoff.min(i));
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    Some(wait)
                }
            };
            let sleep = async {
                match wait {
                    Some(wait) => tokio::time::sleep(wait).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = desired.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    backoff = FIRST_BACKOFF;
                }
                _ = sleep => {}
            }
        }
        if let Err(e) = self.shared.served.remove(&self.file_name) {
            tracing::warn!("{}: cannot stop serving its file: {e}", self.label);
        }
        let _ = self.shared.reload.send(());
        tracing::info!(
            "{} is gone: its controller stops (its objects are left as they are)",
            self.label
        );
    }

    async fn attempt(&mut self, desired: &Desired) -> Attempt {
        let generation = desired.generation;
        self.status.observed_generation = generation;
        let spec = match &desired.spec {
            Ok(spec) => spec,
            Err(why) => {
                return self
                    .fail(desired, "Ready", "InvalidSpec", why.clone())
                    .await;
            }
        };
        let (client, credentials, policy) =
            match self.shared.access(spec, desired.policy.as_ref()).await {
                Ok(access) => access,
                Err(why) => {
                    return self
                        .fail(desired, "Verified", "VerificationUnavailable", why)
                        .await;
                }
            };
        // Only when nothing serves may a tag fall back to the digest it
        // named last (a restart while the registry is down); otherwise an
        // outage is reported, not hidden.
        let (digest, _) = match resolve(
            &client,
            &self.shared.cache,
            &spec.reference,
            Some(&credentials),
            self.serving.is_none(),
        )
        .await
        {
            Ok(resolved) => resolved,
            Err(e) => {
                return self
                    .fail(desired, "Loaded", e.reason(), e.to_string())
                    .await;
            }
        };
        if let Some(serving) = self.serving.clone()
            && serving.digest == digest
        {
            self.status.latest_digest = None;
            self.status.last_error = None;
            self.set(desired, "Verified", serving.verified).await;
            self.set(desired, "Loaded", serving.loaded).await;
            return Attempt::Settled;
        }
        if self
            .refused
            .as_ref()
            .is_some_and(|(d, g)| *d == digest && *g == generation)
        {
            return Attempt::Failed;
        }
        self.status.latest_digest = Some(digest.to_string());
        let (pulled, signer) = match fetch_digest(
            &client,
            &self.shared.cache,
            &policy,
            &spec.reference,
            &digest,
            Some(&credentials),
        )
        .await
        {
            Ok(fetched) => fetched,
            Err(e) => {
                if !matches!(
                    &e,
                    FetchError::Registry(crate::registry::RegistryError::Unreachable { .. })
                ) {
                    self.refused = Some((digest.clone(), generation));
                }
                let condition = if e.is_verification() {
                    "Verified"
                } else {
                    "Loaded"
                };
                return self
                    .fail(desired, condition, e.reason(), e.to_string())
                    .await;
            }
        };
        let verified = match &signer {
            Some(signer) => State::yes(
                "SignatureVerified",
                format!("{digest} is signed by {signer}"),
            ),
            None => State::yes(
                "NotRequired",
                "spec.verification is not set: the plugin runs unsigned",
            ),
        };
        self.set(desired, "Verified", verified.clone()).await;
        let file_sha = match std::fs::read(&pulled.path) {
            Ok(bytes) => crate::plugin::sandbox::content_hash(&bytes),
            Err(e) => {
                return self
                    .fail(
                        desired,
                        "Loaded",
                        "PullFailed",
                        format!("cannot read the pulled plugin: {e}"),
                    )
                    .await;
            }
        };
        match self.load(&pulled.path, &file_sha).await {
            Ok(entry) => {
                self.serving = Some(Serving {
                    digest: digest.clone(),
                    component: pulled.path.clone(),
                    verified,
                    loaded: State::unknown("", ""),
                });
                self.status.digest = Some(digest.to_string());
                self.status.latest_digest = None;
                self.status.signer = signer.map(|s| s.to_string());
                self.status.plugin_name = entry.name.clone();
                self.status.plugin_version = entry.version.clone();
                self.status.primary_kind = entry.kinds.as_ref().map(|k| k.primary.clone());
                self.status.last_error = None;
                let loaded = State::yes(
                    "Loaded",
                    format!(
                        "{} {} serves {} from {digest}",
                        entry.name.as_deref().unwrap_or("?"),
                        entry.version.as_deref().unwrap_or("?"),
                        entry
                            .kinds
                            .as_ref()
                            .map(|k| k.primary.as_str())
                            .unwrap_or("?")
                    ),
                );
                tracing::info!("{}: {}", self.label, loaded.message);
                if let Some(serving) = &mut self.serving {
                    serving.loaded = loaded.clone();
                }
                // Every new digest serving is an Event, an upgrade too
                // (Loaded to Loaded is no transition of the condition).
                if !conditions::set(
                    &mut self.status.conditions,
                    "Loaded",
                    &loaded,
                    desired.generation,
                    &now(),
                ) {
                    self.event(desired, EventType::Normal, "Loaded", &loaded.message)
                        .await;
                } else {
                    self.event(desired, EventType::Normal, &loaded.reason, &loaded.message)
                        .await;
                }
                Attempt::Settled
            }
            Err((reason, message, waiting)) => {
                if !waiting {
                    self.refused = Some((digest.clone(), generation));
                    self.restore();
                }
                let reason: &'static str = reason;
                self.fail(desired, "Loaded", reason, format!("{digest}: {message}"))
                    .await
            }
        }
    }

    /// Serves `component` and waits for the directory's verdict on it.
    async fn load(
        &mut self,
        component: &std::path::Path,
        file_sha: &str,
    ) -> Result<PluginStatus, (&'static str, String, bool)> {
        let mut feed = self.shared.feed.clone();
        feed.borrow_and_update();
        let file = match self.shared.served.place(&self.file_name, component) {
            Ok(file) => file,
            Err(e) => {
                return Err((
                    "LoadFailed",
                    format!("cannot serve the pulled file: {e}"),
                    false,
                ));
            }
        };
        let _ = self.shared.reload.send(());
        let file_text = file.display().to_string();
        let deadline = tokio::time::sleep(self.shared.load_timeout);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                changed = feed.changed() => {
                    if changed.is_err() {
                        return Err(("LoadFailed", "the host is stopping".into(), true));
                    }
                }
                _ = &mut deadline => {
                    return Err(("LoadFailed", format!("not loaded within {} s", self.shared.load_timeout.as_secs()), true));
                }
            }
            let entry = feed
                .borrow_and_update()
                .iter()
                .find(|p| p.file == file_text)
                .cloned();
            let Some(entry) = entry else { continue };
            if entry.sha256.as_deref() == Some(file_sha) {
                return Ok(entry);
            }
            if let Some(error) = &entry.last_reload_error {
                let reason = conditions::load_reason(error, entry.waiting_for_kinds);
                return Err((reason, error.clone(), entry.waiting_for_kinds));
            }
        }
    }

    /// Puts the last good version back in the served file (or removes the
    /// file when none was good), so a restart serves what serves now.
    fn restore(&self) {
        let result = match &self.serving {
            Some(serving) => self
                .shared
                .served
                .place(&self.file_name, &serving.component)
                .map(|_| ()),
            None => self.shared.served.remove(&self.file_name),
        };
        if let Err(e) = result {
            tracing::warn!("{}: cannot put the last good version back: {e}", self.label);
        }
        let _ = self.shared.reload.send(());
    }

    async fn fail(
        &mut self,
        desired: &Desired,
        condition: &'static str,
        reason: &str,
        message: String,
    ) -> Attempt {
        // Once per new message: a retry that fails the same way is quiet.
        if self.status.last_error.as_deref() == Some(message.as_str()) {
            tracing::debug!("{}: still {message}", self.label);
        } else {
            tracing::warn!(
                "{}: {message}{}",
                self.label,
                match &self.serving {
                    Some(s) => format!(" ({} keeps serving)", s.digest.short()),
                    None => " (nothing of it serves yet; retried with backoff)".into(),
                }
            );
        }
        self.status.last_error = Some(message.clone());
        self.set(desired, condition, State::no(reason, message))
            .await;
        Attempt::Failed
    }

    async fn set(&mut self, desired: &Desired, condition: &'static str, state: State) {
        if conditions::set(
            &mut self.status.conditions,
            condition,
            &state,
            desired.generation,
            &now(),
        ) {
            let kind = if state.ok == Some(false) {
                EventType::Warning
            } else {
                EventType::Normal
            };
            self.event(desired, kind, &state.reason, &state.message)
                .await;
        }
    }

    /// Derives Ready, then writes status and an Event per transition.
    async fn publish(&mut self, desired: &Desired) {
        let generation = desired.generation;
        let failing = self
            .status
            .conditions
            .iter()
            .find(|c| {
                c.status == "False" && c.type_ != "Ready" && c.observed_generation == generation
            })
            .map(|c| (c.reason.clone(), c.message.clone()));
        let ready_now = self
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .cloned();
        let ready = match (&self.serving, failing, &self.status.last_error) {
            (Some(s), None, None) => State::yes("Serving", format!("{} serves", s.digest)),
            (Some(s), _, Some(error)) => State::yes(
                "ServingLastGood",
                format!(
                    "{} keeps serving; the source's latest failed: {error}",
                    s.digest
                ),
            ),
            (Some(s), Some((_, message)), None) => State::yes(
                "ServingLastGood",
                format!("{} keeps serving: {message}", s.digest),
            ),
            (None, Some((reason, message)), _) => State::no(&reason, message),
            (None, None, Some(error)) => State::no(
                ready_now
                    .as_ref()
                    .map(|c| c.reason.as_str())
                    .filter(|r| *r != "Serving")
                    .unwrap_or("NotServing"),
                error.clone(),
            ),
            (None, None, None) => State::unknown("Pending", "not resolved yet"),
        };
        let changed = conditions::set(
            &mut self.status.conditions,
            "Ready",
            &ready,
            generation,
            &now(),
        );
        let was_false = ready_now.as_ref().is_some_and(|c| c.status == "False");
        // With several replicas sharding, one writes Plugins' status and
        // Events; the others keep theirs in memory, unwritten, so whichever
        // takes the duties over writes it at its next pass.
        if !self.shared.writes_status.holds() {
            return;
        }
        if changed
            || (was_false
                && ready.ok == Some(false)
                && ready_now
                    .as_ref()
                    .is_some_and(|c| c.message != ready.message))
        {
            let kind = if ready.ok == Some(true) && ready.reason == "Serving" {
                EventType::Normal
            } else {
                EventType::Warning
            };
            self.event(desired, kind, &ready.reason, &ready.message)
                .await;
        }
        if self.written.as_ref() == Some(&self.status) {
            return;
        }
        if let Some(object) = &desired.object
            && let Some(name) = &object.name
        {
            let patch = serde_json::json!({ "status": self.status });
            match self
                .shared
                .api
                .patch_status(
                    name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => self.written = Some(self.status.clone()),
                Err(e) => tracing::warn!(
                    "{}: cannot write its status: {}",
                    self.label,
                    super::api_error_text(&e)
                ),
            }
        }
    }

    async fn event(&self, desired: &Desired, type_: EventType, reason: &str, note: &str) {
        let Some(object) = &desired.object else {
            return;
        };
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note.chars().take(1000).collect()),
            action: "Serve".into(),
            secondary: None,
        };
        if let Err(e) = self.shared.recorder.publish(&event, object).await {
            tracing::warn!(
                "{}: cannot record Event {reason}: {}",
                self.label,
                super::api_error_text(&e)
            );
        }
    }
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now())
        .to_string()
}

/// Reads what a spec's access needs from the cluster.
pub(super) type Access = (RegistryClient, Credentials, TrustPolicy);
