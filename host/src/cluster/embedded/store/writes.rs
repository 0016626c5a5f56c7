//! The store's writes, as a client calls them: server-side apply of an
//! object and of its status, delete, and adding or removing one finalizer.
//!
//! Why here: each write checks and merges (see [`super::prepared_apply`]
//! and [`super::admission`]), changes the object the one way objects change
//! ([`super::changes`]), then runs the garbage collector before it returns,
//! so a caller sees the whole cascade the write caused.

use std::collections::BTreeMap;

use reconciler_contract::object_meta::MetadataField;
use serde_json::{Value, json};

use super::admission::check_depth;
use super::errors::{StoreError, conflict, invalid, not_found, require_finalizer, require_manager};
use super::prepared_apply::{PreparedApply, create_merge};
use super::state::EmbeddedStore;
use crate::cluster::backend::{ObjectKey, Propagation};
use crate::cluster::clock::rfc3339;
use crate::cluster::embedded::crd_schema;
use crate::cluster::embedded::field_set::{FieldPath, Manager, Merge, Operation, Segment};
use crate::cluster::embedded::namespace_object::{is_namespace, set_defaults};
use crate::cluster::embedded::object_metadata::{
    bump_generation, finalizers, is_deleting, metadata_mut, with_finalizer,
};

/// The manager recorded for finalizers added with [`EmbeddedStore::add_finalizer`].
pub const FINALIZER_MANAGER: &str = "embedded-cluster/finalizers";

/// What an apply did.
#[derive(Debug, Clone, PartialEq)]
pub struct ApplyOutcome {
    /// The object as stored (for an apply that completed a deletion, its
    /// last state).
    pub object: Value,
    pub created: bool,
    /// False when the apply changed nothing.
    pub changed: bool,
}

impl EmbeddedStore {
    /// Server-side apply of `object` by `field_manager`; creates the object
    /// if it does not exist. `force` takes over fields other managers own.
    pub fn apply(
        &mut self,
        object: Value,
        field_manager: &str,
        force: bool,
        now_millis: i64,
    ) -> Result<ApplyOutcome, StoreError> {
        let prepared = PreparedApply::new(object, field_manager, force, false)?;
        self.apply_prepared(prepared, now_millis)
    }

    /// [`Self::apply`] of what [`PreparedApply::new`] made ready.
    pub fn apply_prepared(
        &mut self,
        prepared: PreparedApply,
        now_millis: i64,
    ) -> Result<ApplyOutcome, StoreError> {
        let PreparedApply {
            key: given,
            field_manager,
            force,
            config,
            creation,
        } = prepared;
        let key = self.key_to_store(given.clone())?;
        require_manager(&key, &field_manager)?;
        self.check_applied(&key, &config)?;
        let manager = Manager::new(&field_manager, Operation::Apply);
        let outcome = match self.objects.get(&key) {
            // Merged in advance onto an object of the same key, or here.
            None => {
                let merge = match creation {
                    Some(merge) if key == given => merge,
                    _ => create_merge(&key, &config, &manager)?,
                };
                self.create(&key, merge, now_millis)
            }
            Some(_) => self.update(&key, &config, &manager, force),
        };
        self.run_gc(now_millis);
        outcome
    }

    /// Server-side apply of `.status` by `field_manager`: its status fields
    /// become exactly `status`; other managers' status fields are kept. It
    /// always takes over what it sets (status writers are the controllers
    /// that own the object's status) and never bumps generation.
    pub fn apply_status(
        &mut self,
        key: &ObjectKey,
        status: Value,
        field_manager: &str,
        resource_version: Option<&str>,
        now_millis: i64,
    ) -> Result<Value, StoreError> {
        if !status.is_object() {
            return Err(invalid(key, "status must be a JSON object"));
        }
        require_manager(key, field_manager)?;
        let key = &self.scoped(key);
        let entry = self.objects.get(key).ok_or_else(|| not_found(key))?;
        let stored = entry.object();
        if let Some(expected) = resource_version {
            let current = stored
                .metadata_field("resourceVersion")
                .and_then(Value::as_str);
            if current != Some(expected) {
                return Err(StoreError::Conflict {
                    key: key.to_string(),
                    message: format!(
                        "the object has been modified (resourceVersion {} is not {expected}); please apply your changes to the latest version and try again",
                        current.unwrap_or("none")
                    ),
                });
            }
        }
        let manager = Manager::new(field_manager, Operation::ApplyStatus);
        let config = json!({ "status": status });
        self.check_applied(key, &config)?;
        let merge = entry
            .ownership()
            .apply(&stored, &config, &manager, true)
            .map_err(|c| conflict(key, &c))?;
        let mut merged = merge.object;
        if merged != stored {
            self.admit_custom(key, &mut merged, Some(&stored), crd_schema::admit_status)?;
        }
        let object = if merged == stored {
            self.set_ownership(key, merge.ownership);
            stored
        } else {
            check_depth(key, &merged)?;
            self.replace(key, merged, Some(merge.ownership))
        };
        self.run_gc(now_millis);
        Ok(object)
    }

    /// Deletes an object with the given propagation. Already gone is fine.
    /// With finalizers it is only marked (deletionTimestamp) and stays until
    /// they are all removed.
    pub fn delete(
        &mut self,
        key: &ObjectKey,
        propagation: Propagation,
        now_millis: i64,
    ) -> Result<(), StoreError> {
        let key = &self.scoped(key);
        self.delete_now(key, propagation, now_millis);
        self.run_gc(now_millis);
        Ok(())
    }

    /// Adds `finalizer` if it is not there. Refused while the object is
    /// being deleted, as a real server refuses new finalizers then.
    pub fn add_finalizer(
        &mut self,
        key: &ObjectKey,
        finalizer: &str,
        now_millis: i64,
    ) -> Result<Value, StoreError> {
        require_finalizer(key, finalizer)?;
        let key = &self.scoped(key);
        let entry = self.objects.get(key).ok_or_else(|| not_found(key))?;
        let stored = entry.object();
        if finalizers(&stored).contains(&finalizer) {
            return Ok(stored);
        }
        if is_deleting(&stored) {
            return Err(invalid(
                key,
                &format!("no new finalizers can be added while it is being deleted: {finalizer}"),
            ));
        }
        let mut ownership = entry.ownership();
        let object = with_finalizer(&stored, finalizer);
        ownership.claim(
            Manager::new(FINALIZER_MANAGER, Operation::Update),
            finalizer_path(finalizer),
        );
        let stored = self.replace(key, object, Some(ownership));
        self.run_gc(now_millis);
        Ok(stored)
    }

    /// Removes exactly `finalizer`, never another entry. Removing the last
    /// finalizer of an object being deleted removes the object.
    pub fn remove_finalizer(
        &mut self,
        key: &ObjectKey,
        finalizer: &str,
        now_millis: i64,
    ) -> Result<(), StoreError> {
        require_finalizer(key, finalizer)?;
        let key = &self.scoped(key);
        if !self.objects.contains_key(key) {
            return Err(not_found(key));
        }
        self.release_finalizer(key, finalizer);
        self.run_gc(now_millis);
        Ok(())
    }

    fn create(
        &mut self,
        key: &ObjectKey,
        merge: Merge,
        now_millis: i64,
    ) -> Result<ApplyOutcome, StoreError> {
        if self.objects.len() >= self.max_objects {
            return Err(StoreError::Full {
                limit: self.max_objects,
            });
        }
        self.refuse_in_terminating_namespace(key)?;
        let mut object = merge.object;
        let crd = self.admit(key, &mut object, None)?;
        self.created += 1;
        let meta = metadata_mut(&mut object);
        meta.insert("uid".into(), Value::String(format_uid(self.created)));
        meta.insert("generation".into(), json!(1));
        meta.insert(
            "creationTimestamp".into(),
            Value::String(rfc3339(now_millis)),
        );
        if is_namespace(key) {
            set_defaults(&mut object);
        }
        let object = self.insert(key, object, merge.ownership);
        self.learn(crd);
        Ok(ApplyOutcome {
            object,
            created: true,
            changed: true,
        })
    }

    fn update(
        &mut self,
        key: &ObjectKey,
        config: &Value,
        manager: &Manager,
        force: bool,
    ) -> Result<ApplyOutcome, StoreError> {
        let entry = self.objects.get(key).ok_or_else(|| not_found(key))?;
        let stored = entry.object();
        let merge = entry
            .ownership()
            .apply(&stored, config, manager, force)
            .map_err(|c| conflict(key, &c))?;
        let mut crd = None;
        let mut object = merge.object;
        let unchanged = object == stored || {
            refuse_new_finalizers(key, &stored, &object)?;
            crd = self.admit(key, &mut object, Some(&stored))?;
            object == stored
        };
        if unchanged {
            self.set_ownership(key, merge.ownership);
            return Ok(ApplyOutcome {
                object: stored,
                created: false,
                changed: false,
            });
        }
        if spec_changed(&stored, &object) {
            bump_generation(&mut object);
        }
        let object = self.replace_or_finish(key, object, Some(merge.ownership));
        self.learn(crd);
        Ok(ApplyOutcome {
            object,
            created: false,
            changed: true,
        })
    }
}

fn finalizer_path(finalizer: &str) -> FieldPath {
    FieldPath::new(vec![
        Segment::Field("metadata".into()),
        Segment::Field("finalizers".into()),
        Segment::Entry(finalizer.to_string()),
    ])
}

/// Whether anything outside apiVersion, kind, metadata and status differs.
fn spec_changed(before: &Value, after: &Value) -> bool {
    fn spec(object: &Value) -> BTreeMap<&String, &Value> {
        let fields = object.as_object().into_iter().flatten();
        fields
            .filter(|(name, _)| {
                !matches!(name.as_str(), "apiVersion" | "kind" | "metadata" | "status")
            })
            .collect()
    }
    spec(before) != spec(after)
}

/// A uid shaped like a version-4 UUID, from the store's creation counter.
pub(super) fn format_uid(n: u64) -> String {
    format!(
        "{:08x}-0000-4000-8000-{:012x}",
        n >> 48,
        n & 0xffff_ffff_ffff
    )
}

fn refuse_new_finalizers(key: &ObjectKey, before: &Value, after: &Value) -> Result<(), StoreError> {
    if !is_deleting(before) {
        return Ok(());
    }
    let old = finalizers(before);
    let added: Vec<&str> = finalizers(after)
        .into_iter()
        .filter(|f| !old.contains(f))
        .collect();
    if added.is_empty() {
        return Ok(());
    }
    let message = format!(
        "no new finalizers can be added while it is being deleted: {}",
        added.join(", ")
    );
    Err(invalid(key, &message))
}
