//! One reconcile, through the stages in order:
//! 1. read the primary from the cache (gone, or outside the plugin's
//!    selector: forget it) ([`primary`](super::primary));
//! 2. add the plugin's finalizer if it declares one and it is missing, and
//!    under sharding label the primary with its bucket;
//! 3. call the plugin in a fresh sandbox with the primary and its children
//!    ([`call`](super::call));
//! 4. validate: the scope rule per response, and the shard label on every
//!    child it owns ([`scope_rules`](super::scope_rules));
//! 5. plan: ownerReferences, no-op skips, pruning, status diff, finalizer
//!    ([`plan`](super::plan));
//! 6. apply in order (objects, deletions, status, events, finalizer last)
//!    ([`apply`](super::apply));
//! 7. settle in the queue: requeue as asked, or back off on any failure (a
//!    panic of the host included, caught here), with a Warning Event on the
//!    primary ([`queues`](super::queues)). The next attempt starts again
//!    from the cache, never from the half-done state.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use reconciler_contract::{EventType, PluginMetadata};
use tracing::Instrument;

use super::apply::Applier;
use super::call::{PluginCalls, Shown};
use super::cause::Causes;
use super::controllers::Controller;
use super::decision_notes::Notes;
use super::failure::Failure;
use super::journal::Entry;
use super::loop_watch::LoopFound;
use super::plan::{self, Observed, Plan, has_finalizer, uid_of};
use super::primary::Primary;
use super::queues::{Done, Queues};
use super::record::{Change, Outcome, ReconcileRecord};
use super::shadow_book::CandidateId;
use super::shadow_job::{Seen, ShadowJob};
use super::shadow_reads::KeptReads;
use super::shard_labelling::ShardLabelling;
use super::shard_selection;
use super::shared::Shared;
use super::work_queue::PrimaryKey;
use crate::cluster::{ClusterBackend, EventRecord, ObjectKey};
use crate::plugin::candidates::PrimaryRef;
use crate::plugin::{LoadedPlugin, ValidResponse};
use crate::support::panic_guard::catch_panic;

/// The stages a reconcile goes through, borrowed from the engine.
pub struct Reconciler<'a, B: ClusterBackend> {
    pub shared: &'a Shared<B>,
    pub queues: &'a Queues,
    pub calls: &'a PluginCalls,
    pub shards: Option<&'a ShardLabelling>,
}

impl<B: ClusterBackend> Reconciler<'_, B> {
    /// Runs one reconcile of `key` for `plugin` and does its queue
    /// bookkeeping, whatever happens: a panic of the host is a failed
    /// reconcile, retried. With it comes the shadow of the reconcile, when
    /// the plugin has a candidate, to be run once the record is out.
    pub async fn reconcile(
        &self,
        plugin: &str,
        key: PrimaryKey,
    ) -> (ReconcileRecord, Option<ShadowJob>) {
        match catch_panic(self.reconcile_once(plugin, key.clone())).await {
            Ok(done) => done,
            Err(panic) => (self.after_panic(plugin, key, &panic), None),
        }
    }

    /// The record of a reconcile that panicked outside the plugin call's
    /// own guard; its bookkeeping, unless it was done before the panic.
    fn after_panic(&self, plugin: &str, key: PrimaryKey, panic: &str) -> ReconcileRecord {
        let now = self.shared.now();
        let message = format!(
            "the host panicked while reconciling this object ({panic}); it is retried: this is a bug of reconciler-host, please report it"
        );
        tracing::error!(plugin, object = %key, "{message}");
        let (kind, failures) = match self.shared.controllers.get(plugin) {
            Some(controller) => {
                let kind = controller.plugin().metadata().primary.kind.clone();
                let failures = self
                    .queues
                    .settle_panic(&mut controller.state().queue, &key, now);
                (kind, failures)
            }
            None => (String::new(), 1),
        };
        ReconcileRecord {
            at_millis: now,
            cluster: self.shared.cluster.name.clone(),
            plugin: plugin.to_string(),
            kind,
            object: key,
            waited_millis: 0,
            outcome: Outcome::Failed {
                reason: "HostPanic".to_string(),
                message,
                failures,
                retry_in: self.queues.backoff.delay(failures),
            },
        }
    }

    async fn reconcile_once(
        &self,
        plugin: &str,
        key: PrimaryKey,
    ) -> (ReconcileRecord, Option<ShadowJob>) {
        let Some(controller) = self.shared.controllers.get(plugin) else {
            let record = ReconcileRecord {
                at_millis: self.shared.now(),
                cluster: self.shared.cluster.name.clone(),
                plugin: plugin.to_string(),
                kind: String::new(),
                object: key,
                outcome: Outcome::Unloaded,
                waited_millis: 0,
            };
            return (record, None);
        };
        let loaded = controller.plugin();
        let metadata = loaded.metadata();
        let (causes, waited_millis) = {
            let mut state = controller.state();
            let causes = state.queue.take_causes(&key);
            (causes, state.queue.take_wait(&key).unwrap_or(0))
        };
        // `object_name`, not `name`: JSON logs already give the span's own
        // name under that key.
        let span = tracing::info_span!(
            "reconcile",
            plugin,
            kind = %metadata.primary.kind,
            namespace = key.namespace.as_deref().unwrap_or(""),
            object_name = %key.name,
            cluster = %self.shared.cluster.name,
            digest = %loaded.sha256().get(..12).unwrap_or(loaded.sha256()),
            trigger = %causes,
            outcome = tracing::field::Empty,
        );
        let at_millis = self.shared.now();
        let mut shadow = None;
        let mut decided_by = None;
        let mut notes = Notes::default();
        let result = catch_panic(
            self.run(&controller, &loaded, &key, &mut shadow, &mut decided_by, &mut notes)
                .instrument(span.clone()),
        )
        .await
            .unwrap_or_else(|panic| {
                Err(Failure::new(
                    "HostPanic",
                    format!(
                        "the host panicked while reconciling this object ({panic}); nothing more of it was applied and it is retried: this is a bug of reconciler-host, please report it"
                    ),
                ))
            });
        let now = self.shared.now();
        let settled = self
            .queues
            .settle(&mut controller.state().queue, &key, result, now);
        let record = ReconcileRecord {
            at_millis,
            cluster: self.shared.cluster.name.clone(),
            plugin: plugin.to_string(),
            kind: metadata.primary.kind.clone(),
            object: key,
            outcome: settled.outcome,
            waited_millis,
        };
        span.record("outcome", record.outcome.word());
        let found = self.file(&loaded, &record, &causes, notes, now - at_millis);
        self.log(&span, &record, settled.rate_limited);
        if let Some(candidate) = decided_by {
            self.count_decided(&candidate, &record, now - at_millis);
        }
        if let Outcome::Failed {
            reason, message, ..
        } = &record.outcome
        {
            self.warn_on_primary(metadata, &record.object, reason, message)
                .await;
        }
        if let Some(found) = found.filter(|f| f.new) {
            span.in_scope(|| tracing::warn!("reconcile loop: {}", found.message));
            self.warn_on_primary(metadata, &record.object, "ReconcileLoop", &found.message)
                .await;
        }
        (record, shadow)
    }

    /// Files `record` in the journal, with what queued it and what it noted,
    /// and looks for a loop it completes; the loop found.
    fn file(
        &self,
        loaded: &LoadedPlugin,
        record: &ReconcileRecord,
        causes: &Causes,
        mut notes: Notes,
        took_millis: i64,
    ) -> Option<LoopFound> {
        let metadata = loaded.metadata();
        let journal = &self.shared.journal;
        let mut entry = Entry::of(
            record,
            causes,
            &metadata.version,
            loaded.sha256(),
            took_millis,
            Some(&notes),
        );
        let primary_key = ObjectKey::new(
            metadata.primary.clone(),
            record.object.namespace.as_deref(),
            &record.object.name,
        );
        let found = journal.loops.observe(
            &record.plugin,
            &metadata.field_manager(),
            &primary_key.to_string(),
            record.at_millis,
            causes,
            &notes.writes,
        );
        if let Some(found) = &found {
            entry.reconcile_loop = Some(found.message.clone());
        }
        journal.record(record, entry, notes.case.take());
        found
    }

    /// Counts a reconcile a canary candidate decided for, as its rollout's
    /// gate judges it.
    fn count_decided(&self, candidate: &LoadedPlugin, record: &ReconcileRecord, took_millis: i64) {
        let metadata = candidate.metadata();
        let id = CandidateId {
            plugin: &record.plugin,
            version: &metadata.version,
            sha256: candidate.sha256(),
        };
        let failed = matches!(record.outcome, Outcome::Failed { .. });
        let took = Duration::from_millis(took_millis.max(0).unsigned_abs());
        self.shared
            .shadow
            .record_decided(&id, failed, took, record.at_millis + took_millis);
    }

    /// Logs `record` in the reconcile's span, and a requeue asked for too
    /// soon as the rate-limited one it became.
    fn log(&self, span: &tracing::Span, record: &ReconcileRecord, rate_limited: Option<Duration>) {
        span.in_scope(|| match &record.outcome {
            Outcome::Failed { .. } => tracing::warn!("{record}"),
            _ => tracing::debug!("{record}"),
        });
        if let (
            Some(asked),
            Outcome::Applied {
                requeue_after: Some(delay),
                ..
            },
        ) = (rate_limited, &record.outcome)
        {
            span.in_scope(|| {
                tracing::debug!(
                    "asked to requeue after {} ms, below the {} ms floor: rate-limited to {} ms (doubling while it keeps asking too soon)",
                    asked.as_millis(),
                    self.queues.requeue.floor.as_millis(),
                    delay.as_millis()
                )
            });
        }
    }

    /// The body of a reconcile. `Ok(None)`: the primary is gone. `Err`:
    /// nothing more of it is applied. Once the plugin has answered,
    /// `shadow` holds the job of its candidate, if it has one; when a
    /// canary's candidate decided instead of the serving version,
    /// `decided_by` holds it.
    async fn run(
        &self,
        controller: &Controller,
        serving: &Arc<LoadedPlugin>,
        key: &PrimaryKey,
        shadow: &mut Option<ShadowJob>,
        decided_by: &mut Option<Arc<LoadedPlugin>>,
        notes: &mut Notes,
    ) -> Result<Option<Done>, Failure> {
        let noting = self.shared.journal.is_on() || self.shared.journal.loops.is_on();
        let cache = &self.shared.cache;
        let selectors = &self.shared.scope.selectors;
        let Some(mut primary) = Primary::read(cache, selectors, serving.metadata(), key) else {
            return Ok(None);
        };
        let canary = self.canary_deciding(serving, &primary);
        if let Some(candidate) = &canary {
            tracing::debug!(
                candidate = %candidate.metadata().version,
                "the canary's candidate decides for this primary"
            );
        }
        *decided_by = canary.clone();
        let plugin = canary.as_ref().unwrap_or(serving);
        let metadata = plugin.metadata();
        let mut changes = Vec::new();
        self.add_finalizer(metadata, &mut primary, &mut changes)
            .await?;
        let bucket = self.label_primary(&mut primary).await;
        let shown = Arc::new(Shown::of(cache, &primary.object, &metadata.owns));
        let now_millis = self.shared.now();
        let candidate = match canary {
            Some(_) => None,
            None => self.shared.candidate_of(plugin.name()),
        };
        let kept = candidate
            .as_ref()
            .map(|_| Arc::new(KeptReads::new(self.shared.cache.clone())));
        let called = self
            .calls
            .call(
                self.shared,
                controller,
                plugin,
                &primary,
                &shown,
                now_millis,
                kept.clone(),
                noting.then_some(&mut *notes),
            )
            .await;
        if let (Some(candidate), Some(kept)) = (candidate, kept) {
            let seen = Seen {
                primary: &primary,
                shown: &shown,
                bucket: bucket.as_deref(),
                now_millis,
                reads: kept,
            };
            let cache = &self.shared.cache;
            *shadow = Some(ShadowJob::new(cache, plugin, &candidate, seen, &called));
        }
        let mut response = called?;
        self.validate(&primary, &mut response, bucket.as_deref())?;
        let superseded_finalizers = controller.state().superseded_finalizers.clone();
        let plan = self.plan(
            controller,
            metadata,
            &primary,
            &shown,
            &superseded_finalizers,
            response,
        )?;
        let applier = Applier {
            shared: self.shared,
            metadata,
            primary: &primary,
            applied: &controller.applied,
            superseded_finalizers: &superseded_finalizers,
            changes,
            writes: noting.then_some(&mut notes.writes),
        };
        applier.apply(plan).await.map(Some)
    }

    /// The candidate, when a canary rollout gives it this primary and its
    /// kinds are watched (a candidate declaring other kinds is run in
    /// shadow first, which watches them, so it never decides blind).
    fn canary_deciding(
        &self,
        serving: &LoadedPlugin,
        primary: &Primary,
    ) -> Option<Arc<LoadedPlugin>> {
        let of = PrimaryRef {
            namespace: primary.key.namespace.as_deref(),
            name: &primary.key.name,
            object: &primary.object,
        };
        let cluster = &self.shared.cluster.labels;
        let candidate = self
            .shared
            .candidates
            .deciding_for(serving.name(), of, cluster)?;
        let watched = candidate.metadata().owns == serving.metadata().owns
            || self.shared.candidate_kinds_watched(candidate.sha256());
        watched.then_some(candidate)
    }

    /// Adds the plugin's finalizer to a live primary missing it. The
    /// stored object is kept, so the status precondition later names the
    /// version this write made.
    async fn add_finalizer(
        &self,
        metadata: &PluginMetadata,
        primary: &mut Primary,
        changes: &mut Vec<Change>,
    ) -> Result<(), Failure> {
        let Some(finalizer) = &metadata.finalizer else {
            return Ok(());
        };
        if primary.deleting || has_finalizer(&primary.object, finalizer) {
            return Ok(());
        }
        let stored = self
            .shared
            .backend
            .add_finalizer(&primary.object_key, finalizer)
            .await
            .map_err(|e| Failure::backend("adding the finalizer", e))?;
        primary.stored(stored);
        changes.push(Change::FinalizerAdded(finalizer.clone()));
        Ok(())
    }

    /// Under sharding, the primary's bucket, with the primary labelled with
    /// it when it is live and not labelled so yet; or, of a kind with two
    /// roles (`shard_selection`), with the label taken off when it carries
    /// its own bucket, which only its role as a primary gave it (what its
    /// role as a child gave it goes with the next apply of its parent).
    async fn label_primary(&self, primary: &mut Primary) -> Option<String> {
        let shards = self.shards?;
        let bucket = shards.bucket_of(&primary.key);
        let label = shard_selection::label_of(&primary.object);
        let served = self.shared.controllers.plugins();
        let labelled = shards.labels_primaries(
            &primary.object_key.kind,
            served.iter().map(|p| p.metadata()),
        );
        let wanted = match (labelled, label == Some(bucket.as_str())) {
            (true, false) => Some(Some(bucket.as_str())),
            (false, true) => Some(None),
            _ => None,
        };
        if !primary.deleting
            && let Some(wanted) = wanted
            && let Some(stored) = shards
                .label_primary(
                    &*self.shared.backend,
                    &primary.object,
                    &primary.object_key,
                    wanted,
                )
                .await
        {
            primary.stored(stored);
        }
        Some(bucket)
    }

    /// The checks of a response the runtime cannot make alone (the scope
    /// rule needs the cluster's kind scopes), and the shard label on every
    /// child it owns.
    pub(super) fn validate(
        &self,
        primary: &Primary,
        response: &mut ValidResponse,
        bucket: Option<&str>,
    ) -> Result<(), Failure> {
        self.shared
            .kind_scopes
            .check_response(primary.key.namespace.as_deref(), response)
            .map_err(|e| Failure::new("InvalidResponse", e.to_string()))?;
        if let (Some(bucket), Some(shards)) = (bucket, self.shards) {
            let served = self.shared.controllers.plugins();
            shards.label_children(response, bucket, served.iter().map(|p| p.metadata()));
        }
        Ok(())
    }

    /// The calls that realise `response`, given what the plugin was shown
    /// and what it applied before.
    pub(super) fn plan(
        &self,
        controller: &Controller,
        metadata: &PluginMetadata,
        primary: &Primary,
        shown: &Shown,
        superseded_finalizers: &BTreeSet<String>,
        response: ValidResponse,
    ) -> Result<Plan, Failure> {
        let cache = &self.shared.cache;
        let current = |k: &ObjectKey| shown.current(cache, k);
        // Looked up per object, not copied: it holds every object this
        // plugin ever applied.
        let last_applied = |k: &ObjectKey| controller.applied.get(k);
        let observed = Observed {
            metadata,
            primary: &primary.object,
            children: &shown.children,
            current: &current,
            last_applied: &last_applied,
            superseded_finalizers,
        };
        plan::plan(&observed, response).map_err(|e| Failure::new(e.reason(), e.to_string()))
    }

    /// A Warning Event on the primary for a failed reconcile.
    async fn warn_on_primary(
        &self,
        metadata: &PluginMetadata,
        key: &PrimaryKey,
        reason: &str,
        message: &str,
    ) {
        let primary_key = ObjectKey::new(
            metadata.primary.clone(),
            key.namespace.as_deref(),
            &key.name,
        );
        let record = EventRecord {
            regarding_uid: self
                .shared
                .cache
                .get(&primary_key)
                .as_ref()
                .and_then(uid_of),
            regarding: primary_key,
            event_type: EventType::Warning,
            reason: reason.to_string(),
            message: message.to_string(),
            reporting_controller: metadata.field_manager(),
        };
        if let Err(e) = self.shared.record_event(record).await {
            tracing::warn!(plugin = %metadata.name, object = %key, "cannot record the failure as an Event: {e}");
        }
    }
}
