//! Keeping one Plugin's source served: resolve, verify, pull, serve, and
//! say how it went.
//!
//! A new digest replaces the one serving only once it has been verified,
//! pulled whole and loaded; until then, and whenever any step fails, the
//! last good digest keeps serving and the status says why the new one does
//! not. A version the directory refuses is taken back out of the served
//! file, so a restart serves the last good one too. Failures are retried
//! with backoff (5 s doubling to 5 min), a signature not yet pushed among
//! them; a digest refused for what it is (a signature that does not
//! verify, content, load) is not pulled again until the spec changes,
//! the trust policy changes or the source names another digest.
//!
//! A digest serves under the trust it was admitted with: the policies
//! (the host's `--require-signatures`, the Plugin's `spec.verification`,
//! keys by content) and the repository its signatures were read from.
//! When any of these changes (verification added, a key rotated in its
//! Secret, the source moved to another repository holding the same digest)
//! the serving digest is verified again before anything settles; one that
//! fails stops serving, and the last good digest that passes the new policy
//! serves instead, or nothing.

mod canary_steps;
mod waiting;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};
use tokio::sync::watch;

use super::api_error::api_error_text;
use super::conditions::{self, PluginResourceStatus, State};
use super::rollout_status::Role;
use super::shared::Shared;
use super::spec::ValidSpec;
use crate::plugin::hot_reload::PluginStatus;
use crate::registry::client::Pulled;
use crate::registry::fetch::{fetch_digest, resolve, signers_text};
use crate::registry::signatures::Signer;
use crate::registry::trust::{Admission, Requirements};
use crate::registry::{Credentials, Digest, RegistryClient, TrustPolicy, VerifyError};

const FIRST_BACKOFF: Duration = Duration::from_secs(5);
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// How often a settled follower without `spec.interval` reads its keys
/// again, so a key rotated in its Secret or ConfigMap is noticed without
/// an edit of the Plugin. Only the API server is asked unless they changed.
const POLICY_RECHECK: Duration = Duration::from_secs(30);
/// How many earlier digests are kept to fall back to.
const HISTORY: usize = 4;
/// How often a candidate's follower writes its shadow counts, when they
/// changed.
const SHADOW_REPORT: Duration = Duration::from_secs(5);

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
    /// A candidate's follower in a canary rollout: the rollout's plan.
    pub canary: Option<super::canary::CanaryPlan>,
    /// The Plugin's `status.rollout.canary` as last seen; kept current
    /// without waking the follower (it is read at each report).
    pub observed_canary: Option<super::canary::CanaryRecord>,
}

#[derive(Clone, Debug)]
struct Serving {
    digest: Digest,
    component: PathBuf,
    /// The component's SHA-256 (hex), checked when it loads.
    sha256: String,
    signers: Vec<Signer>,
    /// The trust it was admitted under.
    admitted: Admission,
    /// What the directory reported when it loaded.
    entry: PluginStatus,
    /// The conditions it was served with, set again when a failure of a
    /// newer digest is over.
    verified: State,
    loaded: State,
}

/// A valid spec with the registry access and trust it asks for: what the
/// steps of an attempt work with.
struct SpecAccess<'a> {
    spec: &'a ValidSpec,
    client: RegistryClient,
    credentials: Credentials,
    requirements: Requirements,
    /// The trust a digest is admitted under now.
    admission: Admission,
}

impl SpecAccess<'_> {
    /// Verifies `digest` of the spec's source under its requirements.
    async fn verify(&self, digest: &Digest) -> Result<Vec<Signer>, VerifyError> {
        let reference = &self.spec.reference;
        let auth = self.client.auth_for(reference, Some(&self.credentials));
        self.requirements
            .verify(self.client.options(), reference, digest, &auth)
            .await
    }
}

/// A verified digest's signers, the trust it was verified under, and its
/// Verified condition.
struct Admitted {
    signers: Vec<Signer>,
    admission: Admission,
    verified: State,
}

/// The outcome of one attempt, for the next wait.
enum Attempt {
    Settled,
    Failed,
}

pub struct Follower {
    shared: Arc<Shared>,
    role: Role,
    /// The served file's name (without `.wasm`).
    file_name: String,
    /// What logs call it: `Plugin podset` or the reference.
    label: String,
    serving: Option<Serving>,
    /// Digests that served before the one serving, oldest first.
    history: Vec<Serving>,
    /// Digests refused for what they are, each at a generation and trust.
    refused: Vec<(Digest, i64, Admission)>,
    status: PluginResourceStatus,
    written: Option<PluginResourceStatus>,
    /// The shadow counts last written (a candidate's follower).
    shadow_written: Option<(
        String,
        crate::engine::shadow_book::ShadowCounts,
        crate::engine::shadow_book::DecidedCounts,
    )>,
    /// Where the canary rollout stands, as this replica last wrote or read it.
    canary: Option<super::canary::CanaryRecord>,
    /// The candidate and step this replica has watched since when, as the
    /// one that writes the rollout's state.
    canary_watch: Option<(String, usize, i64)>,
}

impl Follower {
    pub fn new(shared: Arc<Shared>, file_name: String, label: String) -> Self {
        Self {
            shared,
            role: Role::Serving,
            file_name,
            label,
            serving: None,
            history: Vec::new(),
            refused: Vec::new(),
            status: PluginResourceStatus::default(),
            written: None,
            shadow_written: None,
            canary: None,
            canary_watch: None,
        }
    }

    /// A follower of a Plugin's `spec.rollout.candidate`, served as a
    /// candidate file (`file_name` ends in `.candidate`): its status goes
    /// under `status.rollout`, beside what it found in shadow.
    pub fn candidate(shared: Arc<Shared>, file_name: String, label: String) -> Self {
        Self {
            role: Role::Candidate,
            ..Self::new(shared, file_name, label)
        }
    }

    /// Follows `desired` until it becomes `None` (the Plugin was deleted),
    /// then stops serving the file.
    pub async fn run(mut self, mut desired: watch::Receiver<Option<Desired>>) {
        let mut backoff = FIRST_BACKOFF;
        // The next wake-up only reads the trust policy again (no interval).
        let mut recheck_only = false;
        let mut last = None;
        loop {
            let Some(current) = desired.borrow_and_update().clone() else {
                break;
            };
            last = Some(current.clone());
            let attempt = self.attempt(&current, !recheck_only).await;
            self.publish(&current).await;
            let mut policy_wake = false;
            let wait = match attempt {
                Attempt::Settled => {
                    backoff = FIRST_BACKOFF;
                    let interval = current.spec.as_ref().ok().and_then(|s| s.interval);
                    policy_wake = interval.is_none();
                    Some(interval.unwrap_or(POLICY_RECHECK))
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
            match self.wait(&mut desired, wait, &current).await {
                Woke::Closed => break,
                Woke::Changed => {
                    backoff = FIRST_BACKOFF;
                    recheck_only = false;
                }
                Woke::Slept => recheck_only = policy_wake,
            }
        }
        if let Err(e) = self.shared.served.remove(&self.file_name) {
            tracing::warn!("{}: cannot stop serving its file: {e}", self.label);
        }
        if self.role == Role::Candidate {
            self.end_canary();
            self.clear_rollout(last.as_ref()).await;
        }
        let _ = self.shared.reload.send(());
        tracing::info!(
            "{} is gone: its controller stops (its objects are left as they are)",
            self.label
        );
    }

    /// One pass: the serving digest checked against the trust in force,
    /// then (when `resolve_source`, or when nothing serves) the source
    /// resolved and a new digest verified, pulled and loaded.
    async fn attempt(&mut self, desired: &Desired, resolve_source: bool) -> Attempt {
        self.status.observed_generation = desired.generation;
        let access = match self.spec_access(desired).await {
            Ok(access) => access,
            Err(failed) => return failed,
        };
        if let Some(failed) = self.readmit(desired, &access).await {
            return failed;
        }
        if !resolve_source && self.serving.is_some() {
            return Attempt::Settled;
        }
        let digest = match self.resolve_digest(desired, &access).await {
            Ok(digest) => digest,
            Err(failed) => return failed,
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
        if self.is_refused(&digest, desired.generation, &access.admission) {
            return Attempt::Failed;
        }
        self.status.latest_digest = Some(digest.to_string());
        let (pulled, signers) = match self.pull(desired, &access, &digest).await {
            Ok(fetched) => fetched,
            Err(failed) => return failed,
        };
        let verified = verified_state(&digest, &signers, desired);
        self.set(desired, "Verified", verified.clone()).await;
        let admitted = Admitted {
            signers,
            admission: access.admission,
            verified,
        };
        self.install(desired, digest, pulled, admitted).await
    }

    /// The spec, if valid and in an allowed registry, with the registry
    /// access and trust it asks for; otherwise the failed attempt.
    async fn spec_access<'d>(&mut self, desired: &'d Desired) -> Result<SpecAccess<'d>, Attempt> {
        let spec = match &desired.spec {
            Ok(spec) => spec,
            Err(why) => {
                return Err(self
                    .fail(desired, "Ready", "InvalidSpec", why.clone())
                    .await);
            }
        };
        if let Err(why) = self.shared.registry_allowed(spec) {
            return Err(self
                .fail(desired, "Loaded", "RegistryNotAllowed", why)
                .await);
        }
        match self.shared.access(spec, desired.policy.as_ref()).await {
            Ok((client, credentials, requirements)) => Ok(SpecAccess {
                spec,
                admission: requirements.admission(&spec.reference),
                client,
                credentials,
                requirements,
            }),
            Err(why) => Err(self
                .fail(desired, "Verified", "VerificationUnavailable", why)
                .await),
        }
    }

    /// The digest the source names now.
    async fn resolve_digest(
        &mut self,
        desired: &Desired,
        access: &SpecAccess<'_>,
    ) -> Result<Digest, Attempt> {
        // Only when nothing serves may a tag fall back to the digest it
        // named last (a restart while the registry is down); otherwise an
        // outage is reported, not hidden.
        match resolve(
            &access.client,
            &self.shared.cache,
            &access.spec.reference,
            Some(&access.credentials),
            self.serving.is_none(),
        )
        .await
        {
            Ok((digest, _)) => Ok(digest),
            Err(e) => Err(self
                .fail(desired, "Loaded", e.reason(), e.to_string())
                .await),
        }
    }

    /// Verifies and pulls `digest`; a digest refused for what it is (not
    /// for an unreachable registry) is remembered as refused.
    async fn pull(
        &mut self,
        desired: &Desired,
        access: &SpecAccess<'_>,
        digest: &Digest,
    ) -> Result<(Pulled, Vec<Signer>), Attempt> {
        let fetched = fetch_digest(
            &access.client,
            &self.shared.cache,
            &access.requirements,
            &access.spec.reference,
            digest,
            Some(&access.credentials),
        )
        .await;
        let e = match fetched {
            Ok(fetched) => return Ok(fetched),
            Err(e) => e,
        };
        if !e.may_pass_later() {
            self.refuse(digest, desired.generation, &access.admission);
        }
        let condition = if e.is_verification() {
            "Verified"
        } else {
            "Loaded"
        };
        Err(self
            .fail(desired, condition, e.reason(), e.to_string())
            .await)
    }

    /// Loads the pulled `digest` and, once the directory serves it, makes
    /// it what serves (the one before kept to fall back to); one that does
    /// not load is refused, unless it only waits for its kinds.
    async fn install(
        &mut self,
        desired: &Desired,
        digest: Digest,
        pulled: Pulled,
        admitted: Admitted,
    ) -> Attempt {
        // What was checked against the manifest is what must load.
        let file_sha = pulled.sha256.clone();
        let entry = match self.load(&pulled.path, &file_sha).await {
            Ok(entry) => entry,
            Err((reason, message, waiting)) => {
                if !waiting {
                    self.refuse(&digest, desired.generation, &admitted.admission);
                    self.restore();
                }
                let reason: &'static str = reason;
                return self
                    .fail(desired, "Loaded", reason, format!("{digest}: {message}"))
                    .await;
            }
        };
        let loaded = loaded_state(&digest, &entry);
        if let Some(previous) = self.serving.take() {
            self.remember(previous);
        }
        self.history.retain(|s| s.digest != digest);
        self.serve(Serving {
            digest: digest.clone(),
            component: pulled.path.clone(),
            sha256: file_sha.clone(),
            signers: admitted.signers,
            admitted: admitted.admission,
            entry,
            verified: admitted.verified,
            loaded: loaded.clone(),
        });
        self.status.latest_digest = None;
        self.status.last_error = None;
        tracing::info!("{}: {}", self.label, loaded.message);
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

    fn is_refused(&self, digest: &Digest, generation: i64, admission: &Admission) -> bool {
        self.refused
            .iter()
            .any(|(d, g, a)| d == digest && *g == generation && a == admission)
    }

    /// Remembers that `digest` failed for what it is under this generation
    /// and trust; refusals under others are forgotten (they may pass now).
    fn refuse(&mut self, digest: &Digest, generation: i64, admission: &Admission) {
        self.refused
            .retain(|(d, g, a)| d != digest && *g == generation && a == admission);
        self.refused
            .push((digest.clone(), generation, admission.clone()));
    }

    /// Keeps `earlier` to fall back to, the most recent last.
    fn remember(&mut self, earlier: Serving) {
        self.history.retain(|s| s.digest != earlier.digest);
        self.history.push(earlier);
        if self.history.len() > HISTORY {
            self.history.remove(0);
        }
    }

    /// Makes `serving` what serves, in memory and in the status.
    fn serve(&mut self, serving: Serving) {
        self.status.digest = Some(serving.digest.to_string());
        self.status.signer = (!serving.signers.is_empty()).then(|| signers_text(&serving.signers));
        self.status.plugin_name = serving.entry.name.clone();
        self.status.plugin_version = serving.entry.version.clone();
        self.status.primary_kind = serving.entry.kinds.as_ref().map(|k| k.primary.clone());
        self.serving = Some(serving);
    }

    /// Checks the serving digest against the trust in force when it was
    /// admitted under another; on failure it stops serving, the last good
    /// digest that passes serves instead (or nothing), and the failure is
    /// the attempt's outcome.
    async fn readmit(&mut self, desired: &Desired, access: &SpecAccess<'_>) -> Option<Attempt> {
        let admission = &access.admission;
        let serving = self.serving.clone()?;
        if serving.admitted == *admission {
            return None;
        }
        match access.verify(&serving.digest).await {
            Ok(signers) => {
                let verified = verified_state(&serving.digest, &signers, desired);
                tracing::info!(
                    "{}: the trust policy changed; {} still meets it",
                    self.label,
                    serving.digest
                );
                self.serve(Serving {
                    signers,
                    admitted: admission.clone(),
                    verified: verified.clone(),
                    ..serving
                });
                self.set(desired, "Verified", verified).await;
                None
            }
            Err(e) => {
                self.refuse(&serving.digest, desired.generation, admission);
                self.serving = None;
                self.remember(serving.clone());
                let fallback = self.fall_back(desired, access).await;
                let instead = match &fallback {
                    Some(digest) => {
                        format!("{digest}, the last good digest that does, serves instead")
                    }
                    None => "nothing of this Plugin serves".to_string(),
                };
                if fallback.is_none() {
                    self.status.digest = None;
                    self.status.signer = None;
                    self.restore();
                }
                let message = format!(
                    "{} no longer meets the trust policy and stops serving ({instead}): {e}",
                    serving.digest
                );
                Some(self.fail(desired, "Verified", e.reason(), message).await)
            }
        }
    }

    /// Serves the most recent earlier digest that verifies under
    /// `requirements` and whose cached component is still intact; which
    /// one, if any.
    async fn fall_back(&mut self, desired: &Desired, access: &SpecAccess<'_>) -> Option<Digest> {
        let admission = &access.admission;
        let candidates: Vec<Serving> = self
            .history
            .iter()
            .rev()
            .filter(|s| !self.is_refused(&s.digest, desired.generation, admission))
            .cloned()
            .collect();
        for candidate in candidates {
            let Ok(signers) = access.verify(&candidate.digest).await else {
                continue;
            };
            if !self
                .shared
                .cache
                .is_intact(&candidate.digest, &candidate.sha256)
            {
                continue;
            }
            let Ok(entry) = self.load(&candidate.component, &candidate.sha256).await else {
                continue;
            };
            let verified = verified_state(&candidate.digest, &signers, desired);
            let loaded = loaded_state(&candidate.digest, &entry);
            tracing::warn!("{}: falling back to {}", self.label, candidate.digest);
            self.history.retain(|s| s.digest != candidate.digest);
            self.serve(Serving {
                signers,
                admitted: admission.clone(),
                entry,
                verified,
                loaded: loaded.clone(),
                ..candidate.clone()
            });
            self.set(desired, "Loaded", loaded).await;
            return Some(candidate.digest);
        }
        None
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
                if entry.waiting_for_serving {
                    return Err(("WaitingForServingVersion", error.clone(), true));
                }
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
            let patch = self.role.status_patch(status_patch(&self.status));
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
                    api_error_text(&e)
                ),
            }
        }
    }

    async fn event(&self, desired: &Desired, type_: EventType, reason: &str, note: &str) {
        self.publish_event(desired, type_, self.role.reason(reason), note)
            .await
    }

    /// An Event on the Plugin with `reason` as given (a rollout's own
    /// Events are not told apart by role: they are about the rollout).
    async fn publish_event(&self, desired: &Desired, type_: EventType, reason: String, note: &str) {
        let Some(object) = &desired.object else {
            return;
        };
        let event = Event {
            type_,
            reason: reason.clone(),
            note: Some(note.chars().take(1000).collect()),
            action: "Serve".into(),
            secondary: None,
        };
        if let Err(e) = self.shared.recorder.publish(&event, object).await {
            tracing::warn!(
                "{}: cannot record Event {reason}: {}",
                self.label,
                api_error_text(&e)
            );
        }
    }
}

/// Why a follower's wait ended (see `waiting`).
enum Woke {
    /// What it follows changed.
    Changed,
    /// The wait was over.
    Slept,
    /// The Plugin is gone: its sender was dropped.
    Closed,
}

/// `status` as a merge patch: what is no longer set is written as null, so
/// a Plugin that stops serving no longer shows the digest it served.
fn status_patch(status: &PluginResourceStatus) -> serde_json::Value {
    let mut patch = serde_json::to_value(status).unwrap_or_default();
    if let Some(fields) = patch.as_object_mut() {
        for field in [
            "digest",
            "latestDigest",
            "pluginName",
            "pluginVersion",
            "primaryKind",
            "signer",
            "lastError",
        ] {
            fields.entry(field).or_insert(serde_json::Value::Null);
        }
    }
    patch
}

/// The Verified condition of `digest` checked by `signers`: Unknown when
/// nothing was checked, never True.
fn verified_state(digest: &Digest, signers: &[Signer], desired: &Desired) -> State {
    if signers.is_empty() {
        let why = if desired.object.is_some() {
            "the Plugin sets no spec.verification"
        } else {
            "no --verify-key is given"
        };
        State::unknown(
            "NotChecked",
            format!(
                "no signature of {digest} was checked: {why} and the host allows unsigned plugins (run --require-signatures to require them)"
            ),
        )
    } else {
        State::yes(
            "SignatureVerified",
            format!("{digest} is signed by {}", signers_text(signers)),
        )
    }
}

fn loaded_state(digest: &Digest, entry: &PluginStatus) -> State {
    State::yes(
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
    )
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now())
        .to_string()
}
