//! The synchronous core of the embedded cluster: objects, versions, field
//! ownership, finalizers and the change log.
//!
//! Why it exists: `dev`, `simulate` and the tests run the engine against an
//! in-memory cluster, so that cluster must behave like a real API server in
//! everything a controller can observe, or behaviour seen locally would not
//! hold in a real cluster. The async wrapper turns this store into a
//! `ClusterBackend`; keeping the store synchronous and free of I/O makes it
//! exact, immediate and testable on its own.
//!
//! Guarantees:
//! - Objects are keyed by kind, namespace and name and kept in a `BTreeMap`,
//!   so lists come sorted by namespace then name.
//! - The server owns `uid`, `resourceVersion`, `generation`,
//!   `creationTimestamp`, `deletionTimestamp`, `deletionGracePeriodSeconds`
//!   and `managedFields`; what a client sends for them is ignored.
//! - `resourceVersion` is one counter for the whole store, bumped on every
//!   change of any object (deletions included). `generation` starts at 1 and
//!   is bumped when anything outside `metadata` and `status` changes, and once
//!   when the object is marked for deletion (as a real server does). A call
//!   that changes nothing changes nothing: no new version, no event. An apply
//!   that only shares or moves ownership of fields, without changing a value,
//!   is not a change either (a real server would bump the version for its
//!   managedFields, which the store does not expose).
//! - Apply is server-side apply (see [`super::field_set`]); `status` sent to
//!   the main resource is ignored, as for kinds with a status subresource.
//!   Ownership stays inside the store: returned objects carry no
//!   `managedFields`.
//! - Deletion honours finalizers and propagation (see
//!   [`super::garbage_collector`]); all of it happens inside the call.
//! - Scope is the kind's, as an API server serves it (see
//!   [`super::kind_scopes`]: built-in kinds, and the CRDs stored here): a
//!   cluster-scoped object is stored without a namespace (one sent with it is
//!   dropped), and an object of a namespaced kind must name its namespace.
//! - Deleting a Namespace object terminates the namespace (see
//!   [`super::namespaces`]): its objects are deleted, nothing new can be
//!   created in it meanwhile, and it goes once it is empty.
//! - An object may have one controller ownerReference at most, and
//!   ownerReferences merge by uid under server-side apply, as the API server
//!   validates and merges them.
//! - Objects are kept as JSON text (see [`Entry`]), so one nested deeper than
//!   serde_json reads back (127 levels) is refused, as the engine's cache
//!   refuses it.
//! - Every change is logged as a [`StoreEvent`] in the order it happened.
//! - Everything is deterministic: uids come from a counter and timestamps from
//!   the caller's clock, so the same calls give byte-identical objects.
//! - Bounded: at most `max_objects` objects ([`StoreError::Full`] past that),
//!   and at most [`EVENT_LOG_LIMIT`] undrained events; older ones are dropped
//!   and counted in [`EmbeddedStore::dropped_events`], so a consumer can tell
//!   it missed changes and relist.
//!
//! Known bounds versus a real API server:
//! - Schemas only from CRDs: a custom resource whose CRD is stored is
//!   checked, pruned, defaulted and validated by its version's schema (see
//!   [`super::crd_schema`]); built-in kinds are not registered, so any
//!   apiVersion/kind is served, versions are not converted (an object
//!   applied as `v1` and `v1beta1` is two objects), built-ins are not
//!   defaulted (but a Namespace's finalizer and phase, see
//!   [`super::namespaces`]), and of them only the metadata the store relies
//!   on is validated (name, namespace, labels, annotations, finalizers,
//!   ownerReferences).
//! - Namespaces need not exist: an object may be created in a namespace
//!   that has no Namespace object.
//! - `resourceVersion` in an apply is ignored rather than used as a
//!   precondition, and there is no admission, quota or RBAC.
//! - An object whose only owners never existed is kept; a real garbage
//!   collector would delete it shortly after it is created.

use reconciler_contract::object_meta::MetadataField;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use reconciler_contract::KindRef;
use reconciler_contract::json_depth::{unreadable_at, value_depth};
use serde_json::{Map, Value, json};

use super::crd_schema::{self, CrdSchemas, CrdVersions};
use super::field_set::{FieldConflict, FieldPath, Manager, Merge, Operation, Ownership, Segment};
use super::gc_tasks::{FOREGROUND_FINALIZER, GcTask};
use super::kind_scopes::{CrdScope, KindScopes, is_crd};
use super::namespace_object::{
    drop_server_fields, is_namespace, is_namespace_object, namespace_finalizers, set_defaults,
};
use super::object_metadata::{
    bump_generation, finalizers, is_deleting, metadata_mut, uid_of, with_finalizer,
};
use super::packed_ownership::PackedOwnership;
use crate::cluster::backend::{KindScope, ObjectKey, Propagation, WatchEventType};
use crate::cluster::clock::rfc3339;

/// Undrained events kept at most; older ones are dropped first.
pub const EVENT_LOG_LIMIT: usize = 100_000;

/// The manager recorded for finalizers added with [`EmbeddedStore::add_finalizer`].
pub const FINALIZER_MANAGER: &str = "embedded-cluster/finalizers";

/// Metadata the server owns; a client's values for these are ignored.
const SERVER_METADATA: &[&str] = &[
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// Why a store call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("{key} not found")]
    NotFound { key: String },
    #[error("{key} is invalid: {message}")]
    Invalid { key: String, message: String },
    #[error("conflict on {key}: {message}")]
    Conflict { key: String, message: String },
    #[error("the embedded cluster is full: it holds at most {limit} objects")]
    Full { limit: usize },
    /// A create in a namespace whose Namespace object is being deleted.
    #[error(
        "{key} is forbidden: unable to create new content in namespace {namespace} because it is being terminated"
    )]
    NamespaceTerminating { key: String, namespace: String },
}

/// One change to one object: its new state, or for `Deleted` its last one.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreEvent {
    pub event_type: WatchEventType,
    pub object: Value,
    /// `object` as the store keeps it, for an Added or Modified event: the
    /// engine's cache keeps the same text instead of writing it out again.
    pub json: Option<Arc<str>>,
}

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

/// One stored object with its field ownership.
///
/// The object is kept as its JSON text and parsed when read: parsed, each
/// map of an object costs a whole B-tree node, so a Deployment takes about
/// eight times the memory of its text, and the store holds every object
/// while a call reads one or two of them. What the garbage collector reads
/// on every change of a dependent (its ownerReferences) is kept parsed.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    /// Shared with the watch events of this version, and through them with
    /// the engine's cache.
    text: Arc<str>,
    pub(super) owners: Box<[OwnerRef]>,
    ownership: PackedOwnership,
    /// Marked for deletion: what a create in its namespace (when it is a
    /// Namespace) asks, answered without parsing it.
    pub(super) deleting: bool,
    /// Deleted in the foreground and held until its blocking dependents are
    /// gone: what garbage collection asks of an owner each time one of its
    /// dependents changes, answered without parsing the owner.
    pub(super) waits_for_dependents: bool,
}

impl Entry {
    fn new(object: &Value, ownership: &Ownership) -> Self {
        Self {
            text: object.to_string().into(),
            owners: owner_refs(object).into_boxed_slice(),
            ownership: PackedOwnership::pack(ownership),
            deleting: is_deleting(object),
            waits_for_dependents: is_deleting(object)
                && finalizers(object).contains(&FOREGROUND_FINALIZER),
        }
    }

    fn owner_uids(&self) -> Vec<String> {
        self.owners.iter().map(|r| r.uid.clone()).collect()
    }

    /// Who owns which of the object's fields.
    pub(super) fn ownership(&self) -> Ownership {
        self.ownership.unpack()
    }

    /// The stored object, parsed.
    pub(super) fn object(&self) -> Value {
        parse_stored(&self.text)
    }

    /// The stored object's text.
    pub(super) fn json(&self) -> &Arc<str> {
        &self.text
    }
}

/// Parses text the store wrote from a `Value`. It always parses: the store
/// refuses objects nested past what serde_json reads back ([`check_depth`]).
fn parse_stored(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// An in-memory API server's storage. See the module documentation.
#[derive(Debug, Clone)]
pub struct EmbeddedStore {
    objects: BTreeMap<ObjectKey, Entry>,
    /// uid -> key of every stored object.
    uids: BTreeMap<String, ObjectKey>,
    /// (owner uid, stored object with an ownerReference to it): one flat
    /// set, as most owners have one dependent, and a set per owner would
    /// cost a whole B-tree node for it.
    dependents: BTreeSet<(String, ObjectKey)>,
    max_objects: usize,
    resource_version: u64,
    created: u64,
    events: VecDeque<StoreEvent>,
    event_limit: usize,
    dropped_events: u64,
    /// Garbage-collection work left by the current call.
    pending: VecDeque<GcTask>,
    /// Which kinds are cluster-scoped, learned from stored CRDs too.
    scopes: KindScopes,
    /// The structural schemas of the stored CRDs' kinds.
    schemas: CrdSchemas,
    /// How many objects each namespace holds, to tell when a terminating
    /// namespace is empty.
    per_namespace: BTreeMap<String, usize>,
}

impl EmbeddedStore {
    /// An empty store that holds at most `max_objects` objects.
    pub fn new(max_objects: usize) -> Self {
        Self {
            objects: BTreeMap::new(),
            uids: BTreeMap::new(),
            dependents: BTreeSet::new(),
            max_objects,
            resource_version: 0,
            created: 0,
            events: VecDeque::new(),
            event_limit: EVENT_LOG_LIMIT,
            dropped_events: 0,
            pending: VecDeque::new(),
            scopes: KindScopes::default(),
            schemas: CrdSchemas::default(),
            per_namespace: BTreeMap::new(),
        }
    }

    /// Keeps at most `limit` undrained events instead of [`EVENT_LOG_LIMIT`].
    pub fn with_event_limit(mut self, limit: usize) -> Self {
        self.event_limit = limit;
        self
    }

    pub fn get(&self, key: &ObjectKey) -> Option<Value> {
        let key = self.scoped(key);
        self.objects.get(&key).map(Entry::object)
    }

    /// Whether objects of `kind` live in a namespace: built-in kinds as an
    /// API server serves them, custom kinds as their stored CRD says, and
    /// kinds the embedded cluster knows nothing about as namespaced.
    pub fn kind_scope(&self, kind: &KindRef) -> KindScope {
        self.scopes.scope_of(kind)
    }

    /// `key` as the store keys it: without a namespace for a cluster-scoped
    /// kind, whatever the caller gave.
    fn scoped(&self, key: &ObjectKey) -> ObjectKey {
        let mut key = key.clone();
        if self.kind_scope(&key.kind) == KindScope::Cluster {
            key.namespace = None;
        }
        key
    }

    /// The key an applied object is stored under; an object of a
    /// namespaced kind without a namespace is refused.
    fn key_to_store(&self, key: ObjectKey) -> Result<ObjectKey, StoreError> {
        if self.kind_scope(&key.kind) == KindScope::Namespaced && key.namespace.is_none() {
            let message = format!(
                "metadata.namespace: Required value: {} is namespaced (the embedded cluster serves a custom kind as namespaced unless a CustomResourceDefinition with scope: Cluster is applied for it first)",
                key.kind
            );
            return Err(invalid(&key, &message));
        }
        Ok(self.scoped(&key))
    }

    /// Every object of `kind`, sorted by namespace (cluster-scoped first),
    /// then name.
    pub fn list(&self, kind: &KindRef) -> Vec<Value> {
        self.entries_of(kind)
            .map(|(_, entry)| entry.object())
            .collect()
    }

    /// The objects of `kind` in [`Self::list`]'s order, by key and as the
    /// text the store keeps.
    pub fn list_json<'a>(
        &'a self,
        kind: &KindRef,
    ) -> impl Iterator<Item = (&'a ObjectKey, &'a Arc<str>)> + 'a {
        self.entries_of(kind)
            .map(|(key, entry)| (key, entry.json()))
    }

    fn entries_of<'a>(
        &'a self,
        kind: &KindRef,
    ) -> impl Iterator<Item = (&'a ObjectKey, &'a Entry)> + 'a {
        let first = ObjectKey {
            kind: kind.clone(),
            namespace: None,
            name: String::new(),
        };
        let kind = kind.clone();
        self.objects
            .range(first..)
            .take_while(move |(key, _)| key.kind == kind)
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// The most recent resourceVersion handed out (0 before any change).
    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }

    /// How many events were dropped because nobody drained them in time.
    pub fn dropped_events(&self) -> u64 {
        self.dropped_events
    }

    /// Every change since the last drain, oldest first.
    pub fn drain_events(&mut self) -> Vec<StoreEvent> {
        self.events.drain(..).collect()
    }

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

    /// Whether an object is stored under `key` (as this store scopes it).
    pub fn contains(&self, key: &ObjectKey) -> bool {
        self.objects.contains_key(&self.scoped(key))
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

    /// What the API server does with an object before storing it, beyond
    /// its own fields: one controller reference at most; a custom resource
    /// pruned, defaulted and validated by its CRD's schema; for a CRD a
    /// scope that is valid and unchanged and schemas that compile (returned,
    /// to learn once stored).
    fn admit(
        &self,
        key: &ObjectKey,
        object: &mut Value,
        old: Option<&Value>,
    ) -> Result<Option<LearnedCrd>, StoreError> {
        check_depth(key, object)?;
        check_single_controller(object).map_err(|message| invalid(key, &message))?;
        self.admit_custom(key, object, old, crd_schema::admit)?;
        if !is_crd(&key.kind) {
            return Ok(None);
        }
        let crd = CrdScope::of(object).map_err(|message| invalid(key, &message))?;
        self.scopes
            .check(&crd)
            .map_err(|message| invalid(key, &message))?;
        let versions = CrdVersions::of(object, &crd.group, &crd.kind)
            .map_err(|message| invalid(key, &message))?;
        Ok(Some((crd, versions)))
    }

    /// The schema's part of [`Self::admit`], for kinds a stored CRD
    /// describes: `admission` is [`crd_schema::admit`], or
    /// [`crd_schema::admit_status`] for a write of the status.
    fn admit_custom(
        &self,
        key: &ObjectKey,
        object: &mut Value,
        old: Option<&Value>,
        admission: SchemaAdmission,
    ) -> Result<(), StoreError> {
        let Some(schema) = self.schemas.of(&key.kind) else {
            return Ok(());
        };
        let pruned = admission(&schema, object, old).map_err(|message| invalid(key, &message))?;
        if !pruned.is_empty() {
            tracing::info!(
                object = %key,
                fields = %pruned.join(", "),
                "fields the CustomResourceDefinition does not declare were pruned, as the API server prunes them"
            );
        }
        Ok(())
    }

    /// Refuses an apply whose fields the kind's schema does not accept, as
    /// the API server refuses it before merging.
    fn check_applied(&self, key: &ObjectKey, applied: &Value) -> Result<(), StoreError> {
        let Some(schema) = self.schemas.of(&key.kind) else {
            return Ok(());
        };
        let what = format!(
            "{}/{}; {}, Kind={}",
            key.namespace.as_deref().unwrap_or(""),
            key.name,
            key.kind.api_version(),
            key.kind.kind
        );
        crd_schema::check_applied(&schema, &what, applied).map_err(|message| invalid(key, &message))
    }

    /// Remembers what a CRD just stored says about its kind.
    fn learn(&mut self, crd: Option<LearnedCrd>) {
        if let Some((scope, versions)) = crd {
            self.scopes.learn(scope);
            self.schemas.learn(versions);
        }
    }

    /// Objects stored in `namespace` now.
    pub(super) fn count_in(&self, namespace: &str) -> usize {
        self.per_namespace.get(namespace).copied().unwrap_or(0)
    }

    /// The keys of every object stored in `namespace`, in key order.
    pub(super) fn keys_in(&self, namespace: &str) -> Vec<ObjectKey> {
        self.objects
            .keys()
            .filter(|k| k.namespace.as_deref() == Some(namespace))
            .cloned()
            .collect()
    }

    fn set_ownership(&mut self, key: &ObjectKey, ownership: Ownership) {
        if let Some(entry) = self.objects.get_mut(key) {
            entry.ownership = PackedOwnership::pack(&ownership);
        }
    }

    /// The next resourceVersion.
    fn next_version(&mut self) -> Value {
        self.resource_version += 1;
        Value::String(self.resource_version.to_string())
    }

    /// Stores a new object: stamps its resourceVersion, indexes it, logs Added.
    fn insert(&mut self, key: &ObjectKey, mut object: Value, ownership: Ownership) -> Value {
        let version = self.next_version();
        metadata_mut(&mut object).insert("resourceVersion".into(), version);
        if let Some(uid) = uid_of(&object) {
            self.uids.insert(uid.to_string(), key.clone());
        }
        let entry = Entry::new(&object, &ownership);
        let owners = entry.owner_uids();
        self.index_owners(key, &owners);
        if !owners.is_empty() {
            self.pending.push_back(GcTask::Adopted(key.clone()));
        }
        if let Some(ns) = &key.namespace {
            *self.per_namespace.entry(ns.clone()).or_default() += 1;
        }
        let json = entry.text.clone();
        self.objects.insert(key.clone(), entry);
        self.push_event(WatchEventType::Added, object.clone(), Some(json));
        object
    }

    /// Stores a changed object: stamps a new resourceVersion, re-indexes its
    /// owners, forgets ownership of fields it no longer has, logs Modified.
    /// `ownership` replaces the current one when given.
    pub(super) fn replace(
        &mut self,
        key: &ObjectKey,
        mut object: Value,
        ownership: Option<Ownership>,
    ) -> Value {
        let version = self.next_version();
        metadata_mut(&mut object).insert("resourceVersion".into(), version);
        let Some(entry) = self.objects.get_mut(key) else {
            return object;
        };
        let mut ownership = match ownership {
            Some(ownership) => ownership,
            None => entry.ownership(),
        };
        ownership.prune(&object);
        let old = std::mem::replace(entry, Entry::new(&object, &ownership));
        let json = entry.text.clone();
        if old.owners != entry.owners {
            let new_refs = entry.owners.clone();
            self.reindex_owners(key, &old.owners, &new_refs);
        }
        self.push_event(WatchEventType::Modified, object.clone(), Some(json));
        object
    }

    /// Stores a changed object, or, if it is being deleted and has no
    /// finalizers left, removes it with that as its last state (logging only
    /// Deleted, as a real server does). Returns the stored or last state.
    pub(super) fn replace_or_finish(
        &mut self,
        key: &ObjectKey,
        object: Value,
        ownership: Option<Ownership>,
    ) -> Value {
        if is_deleting(&object) && !held_by_finalizers(&object) {
            self.remove_as(key, Some(object)).unwrap_or(Value::Null)
        } else {
            self.replace(key, object, ownership)
        }
    }

    /// Removes an object; see [`Self::remove_as`].
    pub(super) fn remove(&mut self, key: &ObjectKey) -> Option<Value> {
        self.remove_as(key, None)
    }

    /// Removes an object: its last state (`last_state`, or what is stored)
    /// gets a new resourceVersion and is logged as Deleted; its owners and
    /// dependents are queued for the garbage collector. Returns that state.
    fn remove_as(&mut self, key: &ObjectKey, last_state: Option<Value>) -> Option<Value> {
        let entry = self.objects.remove(key)?;
        let stored = match last_state {
            Some(state) => state,
            None => entry.object(),
        };
        if let Some(ns) = &key.namespace {
            if let Some(count) = self.per_namespace.get_mut(ns) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    self.per_namespace.remove(ns);
                }
            }
            self.pending.push_back(GcTask::FinishNamespace(ns.clone()));
        }
        let owners = entry.owner_uids();
        self.unindex_owners(key, &owners);
        self.pending
            .extend(owners.into_iter().map(GcTask::ReleaseForeground));
        if let Some(uid) = uid_of(&stored) {
            self.uids.remove(uid);
            self.pending
                .extend(self.dependents_of(uid).into_iter().map(GcTask::Settle));
        }
        let mut object = stored;
        let version = self.next_version();
        metadata_mut(&mut object).insert("resourceVersion".into(), version);
        self.push_event(WatchEventType::Deleted, object.clone(), None);
        Some(object)
    }

    pub(super) fn entry(&self, key: &ObjectKey) -> Option<&Entry> {
        self.objects.get(key)
    }

    /// The key of the stored object with this uid.
    pub(super) fn key_of_uid(&self, uid: &str) -> Option<&ObjectKey> {
        self.uids.get(uid)
    }

    /// Stored objects with an ownerReference to `uid`, in key order.
    pub(super) fn dependents_of(&self, uid: &str) -> Vec<ObjectKey> {
        self.dependents_iter(uid).cloned().collect()
    }

    pub(super) fn has_dependents(&self, uid: &str) -> bool {
        self.dependents_iter(uid).next().is_some()
    }

    fn dependents_iter<'a>(&'a self, uid: &'a str) -> impl Iterator<Item = &'a ObjectKey> + 'a {
        let first = ObjectKey {
            kind: KindRef::new("", "", ""),
            namespace: None,
            name: String::new(),
        };
        self.dependents
            .range((uid.to_string(), first)..)
            .take_while(move |(owner, _)| owner == uid)
            .map(|(_, key)| key)
    }

    pub(super) fn enqueue(&mut self, task: GcTask) {
        self.pending.push_back(task);
    }

    pub(super) fn next_task(&mut self) -> Option<GcTask> {
        self.pending.pop_front()
    }

    fn index_owners(&mut self, key: &ObjectKey, owners: &[String]) {
        for uid in owners {
            self.dependents.insert((uid.clone(), key.clone()));
        }
    }

    fn unindex_owners(&mut self, key: &ObjectKey, owners: &[String]) {
        for uid in owners {
            self.dependents.remove(&(uid.clone(), key.clone()));
        }
    }

    /// Re-indexes after ownerReferences changed. Owners that lost or changed
    /// a reference may have been waiting for it (foreground deletion); new
    /// references may point at an owner that is being deleted.
    fn reindex_owners(&mut self, key: &ObjectKey, old: &[OwnerRef], new: &[OwnerRef]) {
        let old_uids: Vec<String> = old.iter().map(|r| r.uid.clone()).collect();
        let new_uids: Vec<String> = new.iter().map(|r| r.uid.clone()).collect();
        self.unindex_owners(key, &old_uids);
        self.index_owners(key, &new_uids);
        if new_uids.iter().any(|uid| !old_uids.contains(uid)) {
            self.pending.push_back(GcTask::Adopted(key.clone()));
        }
        self.pending
            .extend(old_uids.into_iter().map(GcTask::ReleaseForeground));
    }

    fn push_event(&mut self, event_type: WatchEventType, object: Value, json: Option<Arc<str>>) {
        while self.events.len() >= self.event_limit.max(1) {
            self.events.pop_front();
            self.dropped_events += 1;
        }
        self.events.push_back(StoreEvent {
            event_type,
            object,
            json,
        });
    }
}

/// One ownerReference, as far as garbage collection cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct OwnerRef {
    pub(super) uid: String,
    pub(super) block_owner_deletion: bool,
}

pub(super) fn owner_refs(object: &Value) -> Vec<OwnerRef> {
    let refs = object
        .metadata_field("ownerReferences")
        .and_then(Value::as_array);
    refs.into_iter()
        .flatten()
        .filter_map(|r| {
            let uid = r.get("uid")?.as_str()?.to_string();
            let block_owner_deletion = r
                .get("blockOwnerDeletion")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            Some(OwnerRef {
                uid,
                block_owner_deletion,
            })
        })
        .collect()
}

/// Whether finalizers still hold the object: its own, or for a Namespace
/// the ones in its spec that wait for its content to go.
pub(super) fn held_by_finalizers(object: &Value) -> bool {
    !finalizers(object).is_empty() || !namespace_finalizers(object).is_empty()
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
fn format_uid(n: u64) -> String {
    format!(
        "{:08x}-0000-4000-8000-{:012x}",
        n >> 48,
        n & 0xffff_ffff_ffff
    )
}

/// What a new object starts as before its first apply is merged in.
/// An apply checked, and for an object not stored yet merged, before the
/// store is locked: a create's merge needs nothing from the store, so it
/// need not hold up every other write.
pub struct PreparedApply {
    key: ObjectKey,
    field_manager: String,
    force: bool,
    config: Value,
    /// The create's merge, made when the caller expects the object to be new.
    creation: Option<Merge>,
}

impl PreparedApply {
    pub fn new(
        object: Value,
        field_manager: &str,
        force: bool,
        expect_create: bool,
    ) -> Result<Self, StoreError> {
        let key = validate_object(&object)?;
        let config = main_config(object);
        let creation = if expect_create && !field_manager.trim().is_empty() {
            let manager = Manager::new(field_manager, Operation::Apply);
            Some(create_merge(&key, &config, &manager)?)
        } else {
            None
        };
        Ok(Self {
            key,
            field_manager: field_manager.to_string(),
            force,
            config,
            creation,
        })
    }
}

/// A create is an apply onto an object holding nothing but its identity.
fn create_merge(key: &ObjectKey, config: &Value, manager: &Manager) -> Result<Merge, StoreError> {
    Ownership::default()
        .apply(&skeleton(key), config, manager, true)
        .map_err(|c| conflict(key, &c))
}

fn skeleton(key: &ObjectKey) -> Value {
    let mut meta = Map::new();
    meta.insert("name".into(), Value::String(key.name.clone()));
    if let Some(namespace) = &key.namespace {
        meta.insert("namespace".into(), Value::String(namespace.clone()));
    }
    json!({ "apiVersion": key.kind.api_version(), "kind": key.kind.kind, "metadata": meta })
}

/// The fields an apply to the main resource sets: everything except the
/// object's identity, server-owned metadata and status.
fn main_config(object: Value) -> Value {
    let namespace_object = is_namespace_object(&object);
    let mut config = object;
    if let Value::Object(map) = &mut config {
        for field in ["apiVersion", "kind", "status"] {
            map.remove(field);
        }
        if let Some(Value::Object(meta)) = map.get_mut("metadata") {
            for field in ["name", "namespace"].iter().chain(SERVER_METADATA) {
                meta.remove(*field);
            }
            if meta.is_empty() {
                map.remove("metadata");
            }
        }
    }
    if namespace_object {
        drop_server_fields(&mut config);
    }
    config
}

/// A CRD's scope and schemas, checked, to learn once it is stored.
type LearnedCrd = (CrdScope, CrdVersions);

/// How a write of a custom resource is pruned, defaulted and validated.
type SchemaAdmission =
    fn(&crd_schema::Schema, &mut Value, Option<&Value>) -> Result<Vec<String>, String>;

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

/// Refuses an object nested deeper than its JSON text could be read back
/// (the store keeps text, see [`Entry`]).
fn check_depth(key: &ObjectKey, object: &Value) -> Result<(), StoreError> {
    match unreadable_at(value_depth(object)) {
        Some(why) => Err(invalid(key, &why)),
        None => Ok(()),
    }
}

fn not_found(key: &ObjectKey) -> StoreError {
    StoreError::NotFound {
        key: key.to_string(),
    }
}

fn invalid(key: &ObjectKey, message: &str) -> StoreError {
    StoreError::Invalid {
        key: key.to_string(),
        message: message.to_string(),
    }
}

fn conflict(key: &ObjectKey, conflicts: &[FieldConflict]) -> StoreError {
    let fields: Vec<String> = conflicts.iter().map(ToString::to_string).collect();
    let message = format!(
        "apply would change fields owned by others: {}; apply with force to take them over",
        fields.join("; ")
    );
    StoreError::Conflict {
        key: key.to_string(),
        message,
    }
}

fn require_manager(key: &ObjectKey, field_manager: &str) -> Result<(), StoreError> {
    if field_manager.trim().is_empty() {
        return Err(invalid(key, "a field manager is required"));
    }
    Ok(())
}

fn require_finalizer(key: &ObjectKey, finalizer: &str) -> Result<(), StoreError> {
    if finalizer.trim().is_empty() {
        return Err(invalid(key, "a finalizer must be a non-empty string"));
    }
    Ok(())
}

/// Checks what the store relies on and returns the object's key. Errors name
/// the offending field.
fn validate_object(object: &Value) -> Result<ObjectKey, StoreError> {
    let fail = |message: String| StoreError::Invalid {
        key: describe(object),
        message,
    };
    if !object.is_object() {
        return Err(fail("an object must be a JSON object".into()));
    }
    let api_version = non_empty_str(object.get("apiVersion"))
        .ok_or_else(|| fail("apiVersion must be a non-empty string".into()))?;
    if !valid_api_version(api_version) {
        return Err(fail(format!(
            "apiVersion {api_version:?} must be `version` or `group/version`"
        )));
    }
    non_empty_str(object.get("kind"))
        .ok_or_else(|| fail("kind must be a non-empty string".into()))?;
    let meta = object
        .get("metadata")
        .and_then(Value::as_object)
        .ok_or_else(|| fail("metadata must be a JSON object".into()))?;
    let name = non_empty_str(meta.get("name"))
        .ok_or_else(|| fail("metadata.name must be a non-empty string".into()))?;
    if !is_dns1123_subdomain(name) {
        return Err(fail(format!(
            "metadata.name {name:?} must be a DNS-1123 subdomain: at most 253 lowercase letters, digits, '-' and '.', each dot-separated part starting and ending with a letter or digit"
        )));
    }
    match meta.get("namespace") {
        None | Some(Value::Null) => {}
        Some(Value::String(ns)) if is_dns1123_label(ns) => {}
        Some(other) => {
            return Err(fail(format!(
                "metadata.namespace {other} must be a DNS-1123 label: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"
            )));
        }
    }
    validate_metadata_fields(meta).map_err(fail)?;
    ObjectKey::of(object)
        .ok_or_else(|| fail("apiVersion, kind and metadata.name are required".into()))
}

fn validate_metadata_fields(meta: &Map<String, Value>) -> Result<(), String> {
    for field in ["labels", "annotations"] {
        match meta.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) if map.values().all(|v| v.is_string() || v.is_null()) => {}
            Some(_) => return Err(format!("metadata.{field} must map keys to strings")),
        }
    }
    match meta.get("finalizers") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) if items.iter().all(|f| non_empty_str(Some(f)).is_some()) => {}
        Some(_) => return Err("metadata.finalizers must be a list of non-empty strings".into()),
    }
    match meta.get("ownerReferences") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Array(refs)) => {
            refs.iter()
                .enumerate()
                .try_for_each(|(i, r)| validate_owner_ref(i, r))?;
            let mut uids = BTreeSet::new();
            match refs
                .iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str))
                .find(|uid| !uids.insert(*uid))
            {
                Some(uid) => Err(format!(
                    "metadata.ownerReferences: duplicate entries for key [uid={uid:?}]"
                )),
                None => Ok(()),
            }
        }
        Some(_) => Err("metadata.ownerReferences must be a list".into()),
    }
}

/// At most one ownerReference may say `controller: true`; the message is
/// the API server's.
fn check_single_controller(object: &Value) -> Result<(), String> {
    let refs = object
        .metadata_field("ownerReferences")
        .and_then(Value::as_array);
    let controllers: Vec<String> = refs
        .into_iter()
        .flatten()
        .filter(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .map(|r| {
            let field = |f: &str| r.get(f).and_then(Value::as_str).unwrap_or("").to_string();
            format!("{}/{}", field("kind"), field("name"))
        })
        .collect();
    match controllers.as_slice() {
        [] | [_] => Ok(()),
        [first, rest @ ..] => Err(format!(
            "metadata.ownerReferences: Invalid value: {controllers:?}: Only one reference can have Controller set to true. Found \"true\" in references for {first} and {}",
            rest.join(" and ")
        )),
    }
}

fn validate_owner_ref(index: usize, reference: &Value) -> Result<(), String> {
    for field in ["apiVersion", "kind", "name", "uid"] {
        if non_empty_str(reference.get(field)).is_none() {
            return Err(format!(
                "metadata.ownerReferences[{index}].{field} must be a non-empty string"
            ));
        }
    }
    Ok(())
}

fn non_empty_str(value: Option<&Value>) -> Option<&str> {
    value.and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn valid_api_version(api_version: &str) -> bool {
    let mut parts = api_version.split('/');
    let valid = parts
        .by_ref()
        .take(2)
        .all(|p| !p.is_empty() && !p.contains(char::is_whitespace));
    valid && parts.next().is_none()
}

/// A best-effort name for an object that may not be valid, for errors.
fn describe(object: &Value) -> String {
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("object");
    let name = object
        .metadata_field("name")
        .and_then(Value::as_str)
        .unwrap_or("(unnamed)");
    match object.metadata_field("namespace").and_then(Value::as_str) {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// Lowercase letters, digits and '-', starting and ending alphanumeric.
fn is_dns1123_label_part(part: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let (Some(first), Some(last)) = (part.chars().next(), part.chars().last()) else {
        return false;
    };
    alnum(first) && alnum(last) && part.chars().all(|c| alnum(c) || c == '-')
}

fn is_dns1123_label(name: &str) -> bool {
    name.len() <= 63 && is_dns1123_label_part(name)
}

fn is_dns1123_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns1123_label_part)
}

#[cfg(test)]
pub(super) mod tests {
    use serde_json::json;

    use super::*;
    use reconciler_contract::json_depth::READABLE_DEPTH;

    const T0: i64 = 1_700_000_000_000;

    fn deployment(name: &str, spec: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"}, "spec": spec})
    }

    fn key(kind: &str, api_version: &str, name: &str) -> ObjectKey {
        ObjectKey::new(
            KindRef::from_api_version(api_version, kind),
            Some("default"),
            name,
        )
    }

    fn deployment_key(name: &str) -> ObjectKey {
        key("Deployment", "apps/v1", name)
    }

    /// A create merged before the store is locked stores what a plain apply
    /// stores, fields and their owners alike; merged for a key the store
    /// then scopes differently (a namespace sent with a cluster-scoped
    /// object), the merge is made again for the stored key.
    #[test]
    fn a_create_merged_in_advance_stores_what_an_apply_stores() {
        let namespace_sent = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "shop", "namespace": "default", "labels": {"a": "b"}}});
        for object in [
            deployment(
                "web",
                json!({"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}),
            ),
            namespace_sent,
        ] {
            let mut plain = EmbeddedStore::new(10);
            let applied = plain.apply(object.clone(), "m", false, T0).unwrap();
            let mut prepared = EmbeddedStore::new(10);
            let made = PreparedApply::new(object.clone(), "m", false, true).unwrap();
            assert!(made.creation.is_some());
            let applied_prepared = prepared.apply_prepared(made, T0).unwrap();
            assert_eq!(applied_prepared, applied);
            let key = ObjectKey::of(&applied.object).unwrap();
            assert_eq!(
                prepared.entry(&key).unwrap().ownership(),
                plain.entry(&key).unwrap().ownership()
            );
            let namespace = applied_prepared.object.pointer("/metadata/namespace");
            if key.kind.kind == "Namespace" {
                assert_eq!(namespace, None, "a Namespace is stored without one");
            } else {
                assert_eq!(namespace, Some(&json!("default")));
            }
        }
    }

    fn store_with(objects: &[Value]) -> EmbeddedStore {
        let mut store = EmbeddedStore::new(100);
        for object in objects {
            store.apply(object.clone(), "test", false, T0).unwrap();
        }
        store.drain_events();
        store
    }

    fn meta<'a>(object: &'a Value, field: &str) -> &'a Value {
        &object["metadata"][field]
    }

    /// `Added web`, `Deleted web-1`: an event log as a test reads it.
    pub(in crate::cluster::embedded) fn summary(events: &[StoreEvent]) -> Vec<String> {
        events
            .iter()
            .map(|e| {
                format!(
                    "{:?} {}",
                    e.event_type,
                    e.object["metadata"]["name"].as_str().unwrap_or("?")
                )
            })
            .collect()
    }

    /// `{"spec": {"x": {"x": ... 1}}}` nested `levels` deep in all.
    fn nested_deployment(name: &str, levels: usize) -> Value {
        let mut value = json!(1);
        for _ in 0..levels - 1 {
            value = json!({ "x": value });
        }
        deployment(name, value)
    }

    #[test]
    fn objects_nested_too_deep_to_read_back_are_refused() {
        let mut store = EmbeddedStore::new(100);
        let deep = nested_deployment("deep", READABLE_DEPTH + 3);
        let err = store.apply(deep, "podset", true, T0).unwrap_err();
        assert!(
            err.to_string()
                .contains("nested 130 levels deep, more than the 127"),
            "{err}"
        );
        assert!(store.get(&deployment_key("deep")).is_none());
        assert!(store.drain_events().is_empty());

        let fits = nested_deployment("fits", READABLE_DEPTH);
        store.apply(fits.clone(), "podset", true, T0).unwrap();
        let stored = store.get(&deployment_key("fits")).unwrap();
        assert_eq!(stored["spec"], fits["spec"]);
    }

    #[test]
    fn create_sets_server_owned_metadata() {
        let mut store = EmbeddedStore::new(10);
        let mut object = deployment("web", json!({"replicas": 1}));
        object["metadata"]["uid"] = json!("client-uid");
        object["metadata"]["resourceVersion"] = json!("999");
        object["metadata"]["managedFields"] = json!([{"manager": "x"}]);
        let outcome = store.apply(object, "test", false, T0).unwrap();
        assert!(outcome.created && outcome.changed);
        let web = &outcome.object;
        assert_eq!(meta(web, "uid"), "00000000-0000-4000-8000-000000000001");
        assert_eq!(meta(web, "resourceVersion"), "1");
        assert_eq!(meta(web, "generation"), 1);
        assert_eq!(meta(web, "creationTimestamp"), "2023-11-14T22:13:20Z");
        assert!(
            web["metadata"].get("managedFields").is_none(),
            "ownership stays inside the store"
        );
        assert_eq!(store.get(&deployment_key("web")), Some(web.clone()));
        assert_eq!(summary(&store.drain_events()), ["Added web"]);
    }

    #[test]
    fn invalid_objects_are_refused_naming_the_field() {
        let mut store = EmbeddedStore::new(10);
        let err = store
            .apply(deployment("Web_1", json!({})), "test", false, T0)
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::Invalid { message, .. } if message.starts_with("metadata.name \"Web_1\"")),
            "{err}"
        );
        let err = store
            .apply(
                json!({"kind": "Deployment", "metadata": {"name": "web"}}),
                "test",
                false,
                T0,
            )
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("apiVersion must be a non-empty string"),
            "{err}"
        );
        let mut bad_ns = deployment("web", json!({}));
        bad_ns["metadata"]["namespace"] = json!("Default");
        assert!(
            store
                .apply(bad_ns, "test", false, T0)
                .unwrap_err()
                .to_string()
                .contains("metadata.namespace")
        );
        assert!(store.is_empty());
        assert!(store.drain_events().is_empty());
    }

    #[test]
    fn reapplying_the_same_fields_changes_nothing() {
        let mut store = store_with(&[deployment("web", json!({"replicas": 1}))]);
        let before = store.get(&deployment_key("web"));
        let outcome = store
            .apply(
                deployment("web", json!({"replicas": 1})),
                "test",
                false,
                T0 + 5_000,
            )
            .unwrap();
        assert!(!outcome.created && !outcome.changed);
        assert_eq!(Some(outcome.object), before);
        assert!(store.drain_events().is_empty());
        assert_eq!(store.resource_version(), 1);
    }

    #[test]
    fn spec_changes_bump_generation_but_label_changes_do_not() {
        let mut store = store_with(&[deployment("web", json!({"replicas": 1}))]);
        let scaled = store
            .apply(deployment("web", json!({"replicas": 3})), "test", false, T0)
            .unwrap()
            .object;
        assert_eq!(
            (
                meta(&scaled, "generation"),
                meta(&scaled, "resourceVersion")
            ),
            (&json!(2), &json!("2"))
        );

        let mut labelled = deployment("web", json!({"replicas": 3}));
        labelled["metadata"]["labels"] = json!({"team": "a"});
        let labelled = store.apply(labelled, "test", false, T0).unwrap().object;
        assert_eq!(
            (
                meta(&labelled, "generation"),
                meta(&labelled, "resourceVersion")
            ),
            (&json!(2), &json!("3"))
        );
        assert_eq!(
            summary(&store.drain_events()),
            ["Modified web", "Modified web"]
        );
    }

    #[test]
    fn a_dropped_field_is_removed_but_another_managers_field_stays() {
        let mut store = store_with(&[deployment("web", json!({"replicas": 1, "paused": false}))]);
        store
            .apply(
                deployment("web", json!({"minReadySeconds": 5})),
                "autoscaler",
                false,
                T0,
            )
            .unwrap();
        let web = store
            .apply(deployment("web", json!({"replicas": 1})), "test", false, T0)
            .unwrap()
            .object;
        assert_eq!(web["spec"], json!({"replicas": 1, "minReadySeconds": 5}));
    }

    #[test]
    fn a_shared_field_survives_until_its_last_owner_drops_it() {
        let mut store = store_with(&[deployment("web", json!({"replicas": 2}))]);
        store
            .apply(
                deployment("web", json!({"replicas": 2})),
                "other",
                false,
                T0,
            )
            .unwrap();
        let web = store
            .apply(deployment("web", json!({})), "test", false, T0)
            .unwrap()
            .object;
        assert_eq!(web["spec"]["replicas"], 2);
        let web = store
            .apply(deployment("web", json!({})), "other", false, T0)
            .unwrap()
            .object;
        assert_eq!(
            web["spec"],
            json!({}),
            "the empty spec each manager sets is kept"
        );
    }

    #[test]
    fn conflicting_apply_fails_without_force_and_takes_over_with_it() {
        let mut store = store_with(&[deployment("web", json!({"replicas": 1}))]);
        let err = store
            .apply(
                deployment("web", json!({"replicas": 5})),
                "autoscaler",
                false,
                T0,
            )
            .unwrap_err();
        let StoreError::Conflict { key, message } = &err else {
            panic!("{err}")
        };
        assert_eq!(key, "Deployment default/web");
        assert!(
            message.contains("spec.replicas is owned by field manager \"test\""),
            "{message}"
        );
        assert!(
            store.drain_events().is_empty(),
            "a failed apply changes nothing"
        );

        let web = store
            .apply(
                deployment("web", json!({"replicas": 5})),
                "autoscaler",
                true,
                T0,
            )
            .unwrap()
            .object;
        assert_eq!(web["spec"]["replicas"], 5);
        // The field moved: the first manager now conflicts in turn.
        assert!(
            store
                .apply(deployment("web", json!({"replicas": 1})), "test", false, T0)
                .is_err()
        );
    }

    #[test]
    fn status_is_written_only_through_apply_status() {
        let mut store = store_with(&[deployment("web", json!({"replicas": 1}))]);
        let mut with_status = deployment("web", json!({"replicas": 1}));
        with_status["status"] = json!({"readyReplicas": 9});
        let outcome = store.apply(with_status, "test", false, T0).unwrap();
        assert!(!outcome.changed && outcome.object.get("status").is_none());

        let key = deployment_key("web");
        let web = store
            .apply_status(
                &key,
                json!({"readyReplicas": 1, "phase": "Up"}),
                "ctl",
                None,
                T0,
            )
            .unwrap();
        assert_eq!(
            (meta(&web, "generation"), meta(&web, "resourceVersion")),
            (&json!(1), &json!("2"))
        );
        store
            .apply_status(&key, json!({"conditions": []}), "other", None, T0)
            .unwrap();
        let web = store
            .apply_status(&key, json!({"readyReplicas": 1}), "ctl", None, T0)
            .unwrap();
        assert_eq!(web["status"], json!({"readyReplicas": 1, "conditions": []}));
        let same = store
            .apply_status(&key, json!({"readyReplicas": 1}), "ctl", None, T0)
            .unwrap();
        assert_eq!(same, web, "an unchanged status is not a change");
        assert_eq!(store.drain_events().len(), 3);
        assert!(matches!(
            store.apply_status(&key, json!("up"), "ctl", None, T0),
            Err(StoreError::Invalid { .. })
        ));
        let missing = deployment_key("gone");
        assert!(matches!(
            store.apply_status(&missing, json!({}), "ctl", None, T0),
            Err(StoreError::NotFound { .. })
        ));
    }

    #[test]
    fn delete_with_a_finalizer_waits_until_it_is_removed() {
        let mut store = store_with(&[deployment("web", json!({}))]);
        let key = deployment_key("web");
        store
            .add_finalizer(&key, "example.com/cleanup", T0)
            .unwrap();
        store
            .add_finalizer(&key, "example.com/cleanup", T0)
            .unwrap();
        store
            .delete(&key, Propagation::Background, T0 + 1_000)
            .unwrap();
        let web = store.get(&key).unwrap().clone();
        assert_eq!(meta(&web, "deletionTimestamp"), "2023-11-14T22:13:21Z");
        assert_eq!(meta(&web, "deletionGracePeriodSeconds"), 0);
        assert_eq!(
            meta(&web, "generation"),
            2,
            "marking for deletion bumps generation once"
        );
        store
            .delete(&key, Propagation::Background, T0 + 9_000)
            .unwrap();
        assert_eq!(
            store.get(&key),
            Some(web.clone()),
            "a second delete changes nothing"
        );

        let err = store
            .add_finalizer(&key, "example.com/late", T0)
            .unwrap_err();
        assert!(matches!(err, StoreError::Invalid { .. }), "{err}");
        store
            .apply(
                deployment("web", json!({"paused": true})),
                "test",
                false,
                T0,
            )
            .unwrap();

        store
            .remove_finalizer(&key, "example.com/cleanup", T0)
            .unwrap();
        assert!(store.get(&key).is_none());
        let events = store.drain_events();
        assert_eq!(
            summary(&events),
            [
                "Modified web",
                "Modified web",
                "Modified web",
                "Deleted web"
            ]
        );
        let last = &events[3].object;
        assert!(last["metadata"].get("finalizers").is_none());
        assert_eq!(
            last["spec"]["paused"], true,
            "Deleted carries the last state"
        );
        assert_eq!(
            store.delete(&key, Propagation::Background, T0),
            Ok(()),
            "already gone is fine"
        );
    }

    #[test]
    fn remove_finalizer_leaves_other_controllers_finalizers() {
        let mut store = store_with(&[deployment("web", json!({}))]);
        let key = deployment_key("web");
        store.add_finalizer(&key, "a.io/one", T0).unwrap();
        store.add_finalizer(&key, "b.io/two", T0).unwrap();
        store.delete(&key, Propagation::Background, T0).unwrap();
        store.remove_finalizer(&key, "a.io/one", T0).unwrap();
        store.remove_finalizer(&key, "a.io/one", T0).unwrap();
        assert_eq!(
            meta(&store.get(&key).unwrap(), "finalizers"),
            &json!(["b.io/two"])
        );
        assert_eq!(
            store.drain_events().len(),
            4,
            "two adds, the mark, one removal"
        );
    }

    #[test]
    fn an_applied_finalizer_list_does_not_drop_added_finalizers() {
        let mut with_finalizer = deployment("web", json!({}));
        with_finalizer["metadata"]["finalizers"] = json!(["a.io/applied"]);
        let mut store = store_with(&[with_finalizer.clone()]);
        let key = deployment_key("web");
        store.add_finalizer(&key, "b.io/added", T0).unwrap();
        assert!(
            !store
                .apply(with_finalizer, "test", false, T0)
                .unwrap()
                .changed
        );
        let web = store
            .apply(deployment("web", json!({})), "test", false, T0)
            .unwrap()
            .object;
        assert_eq!(meta(&web, "finalizers"), &json!(["b.io/added"]));
    }

    #[test]
    fn an_unknown_object_is_not_found_for_finalizers() {
        let mut store = EmbeddedStore::new(1);
        let key = deployment_key("nope");
        assert_eq!(
            store.add_finalizer(&key, "a.io/x", T0),
            Err(StoreError::NotFound {
                key: "Deployment default/nope".into()
            })
        );
        assert!(matches!(
            store.remove_finalizer(&key, "a.io/x", T0),
            Err(StoreError::NotFound { .. })
        ));
    }

    #[test]
    fn lists_are_sorted_by_namespace_then_name_and_per_kind() {
        let mut store = EmbeddedStore::new(10);
        for (ns, name) in [("b", "x"), ("a", "z"), ("a", "y")] {
            let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}});
            store.apply(object, "test", false, T0).unwrap();
        }
        store
            .apply(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}),
                "test",
                false,
                T0,
            )
            .unwrap();
        let names: Vec<_> = store
            .list(&KindRef::new("", "v1", "ConfigMap"))
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    o["metadata"]["namespace"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(names, ["a/y", "a/z", "b/x"]);
        assert_eq!(store.list(&KindRef::new("", "v1", "Namespace")).len(), 1);
        assert!(store.list(&KindRef::new("", "v1", "Secret")).is_empty());
    }

    #[test]
    fn the_store_refuses_to_grow_past_its_limit() {
        let mut store = EmbeddedStore::new(2);
        store
            .apply(deployment("a", json!({})), "test", false, T0)
            .unwrap();
        store
            .apply(deployment("b", json!({})), "test", false, T0)
            .unwrap();
        let err = store
            .apply(deployment("c", json!({})), "test", false, T0)
            .unwrap_err();
        assert_eq!(err, StoreError::Full { limit: 2 });
        assert_eq!(store.len(), 2);
        assert!(
            store
                .apply(deployment("a", json!({"replicas": 2})), "test", false, T0)
                .unwrap()
                .changed,
            "updates still work"
        );
        store
            .delete(&deployment_key("a"), Propagation::Background, T0)
            .unwrap();
        assert!(
            store
                .apply(deployment("c", json!({})), "test", false, T0)
                .unwrap()
                .created
        );
    }

    #[test]
    fn the_event_log_keeps_the_newest_events_when_nobody_drains() {
        let mut store = EmbeddedStore::new(10).with_event_limit(3);
        for replicas in 0..5 {
            store
                .apply(
                    deployment("web", json!({"replicas": replicas})),
                    "test",
                    false,
                    T0,
                )
                .unwrap();
        }
        let events = store.drain_events();
        let replicas: Vec<_> = events
            .iter()
            .map(|e| e.object["spec"]["replicas"].clone())
            .collect();
        assert_eq!(replicas, [json!(2), json!(3), json!(4)]);
        assert_eq!(store.dropped_events(), 2);
    }

    #[test]
    fn a_recreated_object_gets_a_new_uid() {
        let mut store = store_with(&[deployment("web", json!({}))]);
        let key = deployment_key("web");
        store.delete(&key, Propagation::Background, T0).unwrap();
        let again = store
            .apply(deployment("web", json!({})), "test", false, T0)
            .unwrap()
            .object;
        assert_eq!(meta(&again, "uid"), "00000000-0000-4000-8000-000000000002");
    }

    #[test]
    fn identical_call_sequences_give_byte_identical_objects() {
        fn run() -> String {
            let mut store = EmbeddedStore::new(10);
            let mut owner = deployment("web", json!({"replicas": 1}));
            owner["metadata"]["labels"] = json!({"b": "2", "a": "1"});
            let owner = store.apply(owner, "test", false, T0).unwrap().object;
            let mut child = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-1", "namespace": "default"}});
            child["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": owner["metadata"]["uid"], "blockOwnerDeletion": true}]);
            store.apply(child, "test", false, T0 + 1).unwrap();
            store
                .apply_status(
                    &deployment_key("web"),
                    json!({"ready": 1}),
                    "ctl",
                    None,
                    T0 + 2,
                )
                .unwrap();
            store
                .add_finalizer(&deployment_key("web"), "a.io/x", T0 + 3)
                .unwrap();
            store
                .delete(&deployment_key("web"), Propagation::Foreground, T0 + 4)
                .unwrap();
            let objects: Vec<Value> = store.list(&KindRef::new("apps", "v1", "Deployment"));
            let events: Vec<Value> = store
                .drain_events()
                .into_iter()
                .map(|e| json!([format!("{:?}", e.event_type), e.object]))
                .collect();
            serde_json::to_string(&json!({"objects": objects, "events": events})).unwrap()
        }
        assert_eq!(run(), run());
    }

    #[test]
    fn names_and_versions_are_validated_like_the_api() {
        assert!(is_dns1123_subdomain("web-1.example"));
        assert!(!is_dns1123_subdomain("web..1"));
        assert!(!is_dns1123_subdomain("-web"));
        assert!(!is_dns1123_subdomain(&"a".repeat(254)));
        assert!(is_dns1123_label("team-a") && !is_dns1123_label("team.a"));
        assert!(valid_api_version("v1") && valid_api_version("apps/v1"));
        assert!(!valid_api_version("a/b/c") && !valid_api_version("/v1"));
        assert_eq!(
            format_uid(0x1_0000_0000_0002),
            "00000001-0000-4000-8000-000000000002"
        );
    }

    fn with_owner(mut object: Value, kind: &str, name: &str, uid: &str, controller: bool) -> Value {
        let reference = json!({"apiVersion": "example.com/v1", "kind": kind, "name": name,
            "uid": uid, "controller": controller});
        object["metadata"]["ownerReferences"] = json!([reference]);
        object
    }

    fn owner_uids_of(object: &Value) -> Vec<&str> {
        object["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["uid"].as_str())
            .collect()
    }

    #[test]
    fn owner_references_applied_by_two_managers_merge_by_uid() {
        let mut store = store_with(&[with_owner(
            deployment("web", json!({})),
            "Keeper",
            "k",
            "uid-k",
            true,
        )]);
        let web = store
            .apply(
                with_owner(deployment("web", json!({})), "Watcher", "w", "uid-w", false),
                "watcher",
                false,
                T0,
            )
            .unwrap()
            .object;
        assert_eq!(owner_uids_of(&web), ["uid-k", "uid-w"]);
        let web = store
            .apply(deployment("web", json!({})), "watcher", false, T0)
            .unwrap()
            .object;
        assert_eq!(
            owner_uids_of(&web),
            ["uid-k"],
            "dropping its reference removes only its own"
        );
    }

    #[test]
    fn a_second_controller_reference_is_refused_and_nothing_is_stored() {
        let mut store = store_with(&[with_owner(
            deployment("web", json!({})),
            "Keeper",
            "victim",
            "uid-k",
            true,
        )]);
        let before = store.get(&deployment_key("web"));
        let err = store
            .apply(
                with_owner(
                    deployment("web", json!({"replicas": 99})),
                    "Probe",
                    "hijack",
                    "uid-p",
                    true,
                ),
                "probe",
                true,
                T0,
            )
            .unwrap_err();
        let StoreError::Invalid { key, message } = &err else {
            panic!("{err}")
        };
        assert_eq!(key, "Deployment default/web");
        assert!(
            message.ends_with(
                "Only one reference can have Controller set to true. Found \"true\" in references for Keeper/victim and Probe/hijack"
            ),
            "{message}"
        );
        assert!(message.starts_with("metadata.ownerReferences: Invalid value: "));
        assert_eq!(store.get(&deployment_key("web")), before);
        assert!(store.drain_events().is_empty(), "nothing changed");

        // Two controllers in one object are refused on create too.
        let mut twice = deployment("new", json!({}));
        twice["metadata"]["ownerReferences"] = json!([
            {"apiVersion": "v1", "kind": "A", "name": "a", "uid": "1", "controller": true},
            {"apiVersion": "v1", "kind": "B", "name": "b", "uid": "2", "controller": true}
        ]);
        assert!(matches!(
            store.apply(twice, "test", false, T0),
            Err(StoreError::Invalid { .. })
        ));
        assert!(store.get(&deployment_key("new")).is_none());
    }

    #[test]
    fn duplicate_owner_reference_uids_are_refused() {
        let mut store = EmbeddedStore::new(10);
        let mut object = deployment("web", json!({}));
        object["metadata"]["ownerReferences"] = json!([
            {"apiVersion": "v1", "kind": "A", "name": "a", "uid": "1"},
            {"apiVersion": "v1", "kind": "A", "name": "b", "uid": "1"}
        ]);
        let err = store.apply(object, "test", false, T0).unwrap_err();
        assert!(
            err.to_string()
                .contains("metadata.ownerReferences: duplicate entries for key [uid=\"1\"]"),
            "{err}"
        );
    }

    #[test]
    fn a_cluster_scoped_object_is_stored_without_its_namespace() {
        let mut store = EmbeddedStore::new(10);
        let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "reader", "namespace": "team"}, "rules": []});
        let stored = store.apply(role, "test", false, T0).unwrap().object;
        assert!(stored["metadata"].get("namespace").is_none(), "{stored}");
        let kind = KindRef::new("rbac.authorization.k8s.io", "v1", "ClusterRole");
        let unscoped = ObjectKey::new(kind.clone(), None, "reader");
        assert_eq!(store.get(&unscoped), Some(stored.clone()));
        // A key that names a namespace reaches the same object.
        let namespaced = ObjectKey::new(kind.clone(), Some("team"), "reader");
        assert_eq!(store.get(&namespaced), Some(stored.clone()));
        assert_eq!(store.list(&kind), [stored]);
        store
            .delete(&namespaced, Propagation::Background, T0)
            .unwrap();
        assert!(store.is_empty());
    }

    #[test]
    fn an_object_of_a_namespaced_kind_must_name_its_namespace() {
        let mut store = EmbeddedStore::new(10);
        let mut object = deployment("web", json!({}));
        object["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("namespace");
        let err = store.apply(object, "test", false, T0).unwrap_err();
        assert!(
            err.to_string()
                .contains("metadata.namespace: Required value: apps/v1 Deployment is namespaced"),
            "{err}"
        );
        assert!(store.is_empty());
    }

    #[test]
    fn a_stored_crd_makes_its_kind_cluster_scoped() {
        let mut store = EmbeddedStore::new(10);
        let tenant = KindRef::new("example.com", "v1", "Tenant");
        assert_eq!(store.kind_scope(&tenant), KindScope::Namespaced);
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "tenants.example.com"},
            "spec": {"group": "example.com", "names": {"kind": "Tenant", "plural": "tenants"},
                     "scope": "Cluster", "versions": [{"name": "v1", "served": true, "storage": true}]}});
        store.apply(crd.clone(), "test", false, T0).unwrap();
        assert_eq!(store.kind_scope(&tenant), KindScope::Cluster);
        let object = json!({"apiVersion": "example.com/v1", "kind": "Tenant",
            "metadata": {"name": "acme", "namespace": "default"}});
        let stored = store.apply(object, "test", false, T0).unwrap().object;
        assert!(stored["metadata"].get("namespace").is_none());
        assert!(store.get(&ObjectKey::new(tenant, None, "acme")).is_some());

        // Its scope cannot change, and a CRD without one is refused.
        let mut flipped = crd.clone();
        flipped["spec"]["scope"] = json!("Namespaced");
        let err = store.apply(flipped, "test", true, T0).unwrap_err();
        assert!(err.to_string().contains("field is immutable"), "{err}");
        let mut unscoped = crd;
        unscoped["metadata"]["name"] = json!("gadgets.example.com");
        unscoped["spec"]["names"]["kind"] = json!("Gadget");
        unscoped["spec"].as_object_mut().unwrap().remove("scope");
        let err = store.apply(unscoped, "test", false, T0).unwrap_err();
        assert!(
            err.to_string().contains("spec.scope: Required value"),
            "{err}"
        );
    }
}
