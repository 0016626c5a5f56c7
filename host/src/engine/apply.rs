//! The apply stage: a plan carried out against the cluster, in order.
//!
//! Objects first, then deletions, then the status, then Events, and the
//! finalizer last, so a failure midway never releases the finalizer early;
//! a failure after some writes says which ones reached the cluster
//! ([`Failure::partial`]), and the next attempt starts again from the
//! cache, never from the half-done state. Two answers of the cluster are
//! not failures: a status written against a primary that changed since it
//! was read is left to the reconcile of the newer object, and a deleting
//! primary whose cleanup cannot create objects in its terminating
//! namespace has its finalizers released rather than holding the
//! namespace's deletion for ever.

use std::collections::BTreeSet;

use reconciler_contract::PluginMetadata;
use reconciler_contract::memory_cache::resource_version_of;

use super::controllers::Applied;
use super::decision_notes::{WriteResult, Written};
use super::failure::Failure;
use super::plan::{DeleteReason, Plan, PlannedApply, PlannedDelete, has_finalizer, uid_of};
use super::primary::Primary;
use super::queues::Done;
use super::record::Change;
use super::shared::Shared;
use crate::cluster::{BackendError, ClusterBackend, EventRecord, ObjectKey, Propagation};

/// One plan being applied, and the changes made so far.
pub struct Applier<'a, B: ClusterBackend> {
    pub shared: &'a Shared<B>,
    pub metadata: &'a PluginMetadata,
    pub primary: &'a Primary,
    /// What the plugin last applied, kept up to date with each write.
    pub applied: &'a Applied,
    /// Finalizers of earlier versions the plugin answers for.
    pub superseded_finalizers: &'a BTreeSet<String>,
    /// What the reconcile changed before the plan (a finalizer added).
    pub changes: Vec<Change>,
    /// What the API server did with each write, when the journal is on.
    pub writes: Option<&'a mut Vec<Written>>,
}

/// How soon a reconcile whose status met a newer primary runs again.
const STALE_STATUS_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

impl<B: ClusterBackend> Applier<'_, B> {
    /// Applies `plan`; what it changed, and the requeue the plugin asked
    /// for.
    pub async fn apply(mut self, plan: Plan) -> Result<Done, Failure> {
        let manager = self.metadata.field_manager();
        let refused_in_terminating = self.objects(plan.applies, &manager).await?;
        self.deletes(plan.deletes).await?;
        if let Some(status) = plan.status
            && !self.status(status, &manager).await?
        {
            // Not left to the newer version's watch event: it may have
            // come while this reconcile ran from an older copy, and a
            // status never written would stay wrong until the object
            // changes again.
            let soon = plan
                .requeue_after
                .map_or(STALE_STATUS_RETRY, |asked| asked.min(STALE_STATUS_RETRY));
            return Ok(self.done(Some(soon)));
        }
        for event in plan.events {
            self.event(event, &manager).await;
        }
        let release = self.finalizers_to_release(plan.remove_finalizers, refused_in_terminating);
        for finalizer in release {
            self.shared
                .backend
                .remove_finalizer(&self.primary.object_key, &finalizer)
                .await
                .map_err(|e| self.failure("removing the finalizer", e))?;
            self.changes.push(Change::FinalizerRemoved(finalizer));
        }
        Ok(self.done(plan.requeue_after))
    }

    fn done(self, requeue_after: Option<std::time::Duration>) -> Done {
        Done {
            changes: self.changes,
            requeue_after,
        }
    }

    fn failure(&self, step: &str, e: BackendError) -> Failure {
        Failure::partial(step, e, &self.changes)
    }

    /// Applies each object; returns the creates a terminating namespace
    /// refused while the primary was deleting (a deleting primary in a
    /// namespace being deleted: nothing new can be created there, so a
    /// cleanup that needs new objects can never run).
    async fn objects(
        &mut self,
        applies: Vec<PlannedApply>,
        manager: &str,
    ) -> Result<Vec<ObjectKey>, Failure> {
        let mut refused_in_terminating = Vec::new();
        for apply in applies {
            // Only when noted: what was held and a copy of what is sent;
            // nothing when nothing was held (a create needs no comparison).
            let noted = self.writes.is_some().then(|| {
                let before = self.shared.cache.get(&apply.key);
                before.map(|before| (apply.object.clone(), before))
            });
            match self.shared.backend.apply(apply.object, manager, true).await {
                Ok(stored) => {
                    if let Some(held) = &noted {
                        let written = match held {
                            Some((sent, before)) => Written::applied(
                                "apply",
                                apply.key.clone(),
                                Some(before),
                                sent,
                                &stored,
                            ),
                            None => Written::created("apply", apply.key.clone()),
                        };
                        self.note(written);
                    }
                }
                Err(BackendError::NamespaceTerminating { .. }) if self.primary.deleting => {
                    refused_in_terminating.push(apply.key);
                    continue;
                }
                Err(e) => {
                    self.note_refused("apply", &apply.key, &e);
                    return Err(self.failure(&format!("applying {}", apply.key), e));
                }
            }
            self.applied.insert(apply.key.clone(), apply.fingerprint);
            self.changes.push(if apply.creates {
                Change::Created(apply.key)
            } else {
                Change::Updated(apply.key)
            });
        }
        Ok(refused_in_terminating)
    }

    /// Notes one write's result, when the reconcile notes them.
    fn note(&mut self, written: Written) {
        if let Some(writes) = self.writes.as_deref_mut() {
            writes.push(written);
        }
    }

    fn note_refused(&mut self, verb: &'static str, object: &ObjectKey, e: &BackendError) {
        self.note(Written {
            verb,
            object: object.clone(),
            result: WriteResult::Refused(e.to_string()),
        });
    }

    async fn deletes(&mut self, deletes: Vec<PlannedDelete>) -> Result<(), Failure> {
        for delete in deletes {
            let deleted = self
                .shared
                .backend
                .delete(&delete.key, Propagation::Background, delete.uid.as_deref())
                .await;
            if let Err(e) = deleted {
                self.note_refused("delete", &delete.key, &e);
                return Err(self.failure(&format!("deleting {}", delete.key), e));
            }
            self.note(Written {
                verb: "delete",
                object: delete.key.clone(),
                result: WriteResult::Done,
            });
            self.applied.remove(&delete.key);
            self.changes.push(match delete.reason {
                DeleteReason::Pruned => Change::Pruned(delete.key),
                DeleteReason::Requested => Change::Deleted(delete.key),
            });
        }
        Ok(())
    }

    /// Writes the status against the version of the primary read; `false`
    /// when that version is no longer current, and nothing more of this
    /// reconcile is done.
    async fn status(&mut self, status: serde_json::Value, manager: &str) -> Result<bool, Failure> {
        let primary = self.primary;
        let sent = self.writes.is_some().then(|| status.clone());
        let written = self
            .shared
            .backend
            .apply_status(
                &primary.object_key,
                status,
                manager,
                resource_version_of(&primary.object),
            )
            .await;
        match written {
            Ok(stored) => {
                if let Some(sent) = &sent {
                    let written = Written::status_applied(
                        primary.object_key.clone(),
                        &primary.object,
                        sent,
                        &stored,
                    );
                    self.note(written);
                }
                // The cache takes the stored primary now, not when its
                // watch event comes: a reconcile starting before that
                // would otherwise write its status against the old
                // resourceVersion and be refused.
                self.shared.cache.observe_written(stored, &primary.object);
                self.changes.push(Change::StatusUpdated);
                Ok(true)
            }
            // The primary changed since it was read (or was deleted and
            // made again under its name): this status describes an older
            // object. A reconcile of the new one, soon, decides afresh.
            Err(BackendError::Conflict { .. }) => {
                self.changes.push(Change::StatusStale);
                Ok(false)
            }
            Err(e) => {
                self.note_refused("apply status", &primary.object_key, &e);
                Err(self.failure("updating the status", e))
            }
        }
    }

    /// Records one of the plugin's Events on the primary. One that cannot
    /// be recorded is not worth failing a reconcile that already changed
    /// the cluster.
    async fn event(&mut self, event: reconciler_contract::Event, manager: &str) {
        let record = EventRecord {
            regarding: self.primary.object_key.clone(),
            regarding_uid: uid_of(&self.primary.object),
            event_type: event.event_type,
            reason: event.reason.clone(),
            message: event.message.clone(),
            reporting_controller: manager.to_string(),
        };
        if let Err(e) = self.shared.record_event(record).await {
            tracing::warn!("cannot record event {}: {e}", event.reason);
        }
        self.changes.push(Change::Event {
            event_type: event.event_type,
            reason: event.reason,
            message: event.message,
        });
    }

    /// The finalizers to remove: those the plan releases and, when a
    /// cleanup can never run (its creates refused by a terminating
    /// namespace), every finalizer this plugin answers for, its own and
    /// superseded ones.
    fn finalizers_to_release(
        &mut self,
        mut release: Vec<String>,
        refused_in_terminating: Vec<ObjectKey>,
    ) -> Vec<String> {
        if refused_in_terminating.is_empty() {
            return release;
        }
        let ours = self.metadata.finalizer.iter();
        for finalizer in ours.chain(self.superseded_finalizers) {
            if has_finalizer(&self.primary.object, finalizer) && !release.contains(finalizer) {
                release.push(finalizer.clone());
            }
        }
        let refused: Vec<String> = refused_in_terminating
            .iter()
            .map(ToString::to_string)
            .collect();
        // No Event: a terminating namespace refuses new Events too.
        tracing::warn!(
            "namespace {} is being deleted and refuses new objects ({}); the cleanup cannot create them, so the finalizers [{}] are removed to let the deletion finish",
            self.primary.key.namespace.as_deref().unwrap_or(""),
            refused.join(", "),
            release.join(", "),
        );
        self.changes.push(Change::RefusedInTerminatingNamespace(
            refused_in_terminating,
        ));
        release
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use reconciler_contract::{Event, EventType, KindRef};
    use serde_json::{Value, json};

    use super::*;
    use crate::cluster::embedded::EmbeddedCluster;
    use crate::cluster::{VirtualClock, WatchEvent, WatchEventType};
    use crate::engine::scope::{PrimarySelectors, ServeScope};
    use crate::engine::work_queue::PrimaryKey;
    use crate::plugin::WriteRole;

    fn config_map(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default"}})
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new(KindRef::new("", "v1", "ConfigMap"), Some("default"), name)
    }

    /// An engine's shared parts over an embedded cluster holding the
    /// primary `web` (a ConfigMap, as any kind will do), read as a
    /// reconcile reads it.
    async fn serving_web() -> (Shared<EmbeddedCluster>, PluginMetadata, Primary) {
        let cluster = EmbeddedCluster::new(Arc::new(VirtualClock::at(0)));
        let stored = cluster
            .apply(config_map("web"), "user", true)
            .await
            .unwrap();
        let shared = Shared::new(
            Arc::new(cluster),
            Arc::new(VirtualClock::at(0)),
            ServeScope::default(),
        );
        shared
            .cache
            .observe(&WatchEvent::new(WatchEventType::Added, stored));
        let metadata = PluginMetadata::new("web", "1", KindRef::new("", "v1", "ConfigMap"));
        let primary_key = PrimaryKey::new(Some("default"), "web");
        let primary = Primary::read(
            &shared.cache,
            &PrimarySelectors::default(),
            &metadata,
            &primary_key,
        )
        .unwrap();
        (shared, metadata, primary)
    }

    fn plan() -> Plan {
        Plan {
            applies: vec![PlannedApply {
                key: key("web-settings"),
                object: config_map("web-settings"),
                role: WriteRole::Owned,
                creates: true,
                fingerprint: 7,
            }],
            status: Some(json!({"ready": true})),
            events: vec![Event {
                event_type: EventType::Normal,
                reason: "Configured".into(),
                message: "settings written".into(),
            }],
            requeue_after: Some(std::time::Duration::from_secs(60)),
            ..Plan::default()
        }
    }

    /// Applies `plan()` for the plugin `web`, which applied nothing before.
    async fn apply(
        shared: &Shared<EmbeddedCluster>,
        metadata: &PluginMetadata,
        primary: &Primary,
    ) -> (Done, Applied) {
        let applied = Applied::default();
        let applier = Applier {
            shared,
            metadata,
            primary,
            applied: &applied,
            superseded_finalizers: &BTreeSet::new(),
            changes: vec![],
            writes: None,
        };
        let done = applier.apply(plan()).await.unwrap();
        (done, applied)
    }

    #[tokio::test]
    async fn a_plan_is_applied_in_order_and_what_was_applied_remembered() {
        let (shared, metadata, primary) = serving_web().await;
        let (done, applied) = apply(&shared, &metadata, &primary).await;
        assert_eq!(
            done.changes,
            vec![
                Change::Created(key("web-settings")),
                Change::StatusUpdated,
                Change::Event {
                    event_type: EventType::Normal,
                    reason: "Configured".into(),
                    message: "settings written".into(),
                },
            ]
        );
        assert_eq!(done.requeue_after, Some(std::time::Duration::from_secs(60)));
        assert_eq!(applied.get(&key("web-settings")), Some(7));
        let cluster = &shared.backend;
        assert!(cluster.get(&key("web-settings")).await.unwrap().is_some());
        let cached = shared.cache.get(&key("web")).unwrap();
        assert_eq!(cached["status"], json!({"ready": true}), "cached at once");
        assert_eq!(cluster.events().len(), 1);
    }

    #[tokio::test]
    async fn a_status_for_a_primary_changed_since_it_was_read_ends_the_reconcile_there() {
        let (shared, metadata, primary) = serving_web().await;
        let mut changed = config_map("web");
        changed["data"] = json!({"edited": "by hand"});
        shared.backend.apply(changed, "user", true).await.unwrap();
        let (done, _) = apply(&shared, &metadata, &primary).await;
        assert_eq!(
            done.changes,
            vec![Change::Created(key("web-settings")), Change::StatusStale]
        );
        assert_eq!(
            done.requeue_after,
            Some(STALE_STATUS_RETRY),
            "reconciled again soon, whatever the watch brings"
        );
        assert!(
            shared.backend.events().is_empty(),
            "nothing after the status"
        );
    }
}
