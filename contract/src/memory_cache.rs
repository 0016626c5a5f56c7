//! An in-memory object cache with the semantics of the host's cache import.
//!
//! The native test harness serves a plugin's `get`/`list` calls from it, and
//! `reconciler-host test` serves the compiled plugin from the same type, so a
//! golden case and a native test observe identical results: same ordering,
//! same selector rules, same way of finding a primary's children.

use crate::object_meta::MetadataField;
use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;

use serde_json::Value;

use crate::json_depth::{nesting_depth, unreadable_at};
pub use crate::list_pages::{ListBounds, list_json_paged};
use crate::list_pages::{ListCursor, ListPage};
use crate::selector::LabelSelector;
use crate::types::{KindRef, Projection, ReconcileRequest};

/// Objects kept sorted by kind, namespace and name, each as JSON text with
/// its labels and controller extracted once at insert: a `list` filters
/// without parsing and answers by copying text, which is what crosses the
/// boundary.
///
/// Text, not a parsed `Value`: a parsed Pod takes several times the memory
/// of its text (every string, map node and number boxed), and a host caches
/// thousands of objects but reads few of them per reconcile; those are
/// parsed when read.
#[derive(Clone, Debug, Default)]
pub struct MemoryCache {
    entries: BTreeMap<EntryKey, Entry>,
    /// Every label of every object: a `list` with a `key=value`
    /// requirement reads the objects carrying that label instead of every
    /// object of the kind (a PodSet's two Pods among thousands).
    by_label: BTreeSet<LabelKey>,
}

/// Kind, `key=value`, namespace, name: in the cache's order per label.
type LabelKey = (KindRef, Box<str>, Option<String>, String);

/// How many objects one label may select before a `list` looks for a
/// narrower one among its selector's other `key=value` requirements.
const NARROW_ENOUGH: usize = 64;

/// Kind, namespace, name: the cache's order and the contract's.
type EntryKey = (KindRef, Option<String>, String);

/// An entry's key as borrowed parts: how a read looks an object up without
/// building an owned key (its kind's three strings, its namespace and its
/// name) each time. Ordered as [`EntryKey`] is.
trait EntryKeyParts {
    fn parts(&self) -> (&KindRef, Option<&str>, &str);
}

impl EntryKeyParts for EntryKey {
    fn parts(&self) -> (&KindRef, Option<&str>, &str) {
        (&self.0, self.1.as_deref(), &self.2)
    }
}

impl EntryKeyParts for (&KindRef, Option<&str>, &str) {
    fn parts(&self) -> (&KindRef, Option<&str>, &str) {
        *self
    }
}

impl<'a> Borrow<dyn EntryKeyParts + 'a> for EntryKey {
    fn borrow(&self) -> &(dyn EntryKeyParts + 'a) {
        self
    }
}

impl PartialEq for dyn EntryKeyParts + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn EntryKeyParts + '_ {}

impl PartialOrd for dyn EntryKeyParts + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn EntryKeyParts + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        self.parts().cmp(&other.parts())
    }
}

/// An object checked and made ready to insert ([`MemoryCache::prepare`]).
pub struct PreparedEntry {
    key: EntryKey,
    entry: Entry,
}

#[derive(Clone, Debug)]
struct Entry {
    labels: BTreeMap<String, String>,
    json: Arc<str>,
    /// The [`Projection::MetadataOnly`] form; the same text as `json` for
    /// objects that are metadata only already. Made at insert, not when
    /// first read: a read happens inside a plugin's call, whose time limit
    /// is the plugin's and must not pay for the host's work.
    metadata_json: Arc<str>,
    /// Controller ownerReferences, to find a primary's children unparsed.
    controllers: Box<[OwnerRef]>,
    /// `metadata.resourceVersion`, to tell a watch event of the version
    /// already held (the host caches what its own writes return before
    /// their events arrive) without serialising the object again.
    resource_version: Option<Box<str>>,
}

#[derive(Clone, Debug)]
struct OwnerRef {
    kind: Option<String>,
    name: Option<String>,
    uid: Option<String>,
}

impl Entry {
    /// Whether the object held has nothing but apiVersion, kind and
    /// metadata: `insert` then shares one text for both projections.
    fn is_metadata_only(&self) -> bool {
        Arc::ptr_eq(&self.json, &self.metadata_json)
    }

    fn text(&self, projection: Projection) -> String {
        match projection {
            Projection::Full => self.json.to_string(),
            Projection::MetadataOnly => self.metadata_json.to_string(),
        }
    }

    /// The object, parsed. `insert` keeps only text that parses back, so
    /// `None` never happens; it is not a panic all the same, as the text
    /// came from a plugin or a cluster.
    fn value(&self) -> Option<Value> {
        serde_json::from_str(&self.json).ok()
    }

    /// [`is_controlled_by`], from what was extracted at insert.
    fn is_controlled_by(&self, owner: &Value) -> bool {
        self.controllers.iter().any(|r| r.points_at(owner))
    }
}

impl OwnerRef {
    /// By uid when both sides have one, otherwise by kind and name.
    fn points_at(&self, owner: &Value) -> bool {
        let owner_uid = owner.metadata_field("uid").and_then(Value::as_str);
        match (self.uid.as_deref(), owner_uid) {
            (Some(a), Some(b)) => a == b,
            _ => {
                self.kind.as_deref() == owner.get("kind").and_then(Value::as_str)
                    && self.name.as_deref() == name_of(owner)
            }
        }
    }
}

fn controller_refs(object: &Value) -> Box<[OwnerRef]> {
    let text = |r: &Value, field: &str| r.get(field).and_then(Value::as_str).map(str::to_string);
    object
        .metadata_field("ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
                .map(|r| OwnerRef {
                    kind: text(r, "kind"),
                    name: text(r, "name"),
                    uid: text(r, "uid"),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// An object the cache cannot hold, named by its position or name.
#[derive(Debug, thiserror::Error)]
#[error("object {what} cannot be cached: {reason}")]
pub struct CacheError {
    pub what: String,
    pub reason: String,
}

/// The most JSON text one [`MemoryCache::list_json`] builds: 256 MiB, the
/// host's default ceiling on a plugin's memory. A list that long could reach
/// no plugin; building it would only cost the host the memory.
pub const LIST_JSON_MAX_BYTES: usize = 256 << 20;

/// Why [`MemoryCache::list_json_within`] returned no list.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ListJsonError {
    /// The label selector does not parse.
    #[error("{0}")]
    Selector(String),
    /// The matching objects' text passes the maximum; `listed` objects fit.
    #[error(
        "the list passes {} MiB of JSON after {listed} objects: list with a narrower label selector or a namespace",
        max_bytes.div_ceil(1024 * 1024)
    )]
    TooLarge { listed: usize, max_bytes: usize },
    /// The list examined as many objects as its bounds allow for its
    /// selector before finishing (`ListBounds::max_work`).
    #[error(
        "the list examined {examined} objects, all its bounds allow: list with a narrower label selector or a namespace"
    )]
    TooMuchWork { examined: usize },
    /// The list did not finish before its deadline.
    #[error(
        "the list did not finish before the call's deadline, after examining {examined} objects: list with a narrower label selector or a namespace"
    )]
    PastDeadline { examined: usize },
}

/// `metadata.name` of a JSON object.
pub fn name_of(object: &Value) -> Option<&str> {
    object.metadata_field("name")?.as_str()
}

/// `metadata.resourceVersion` of a JSON object.
pub fn resource_version_of(object: &Value) -> Option<&str> {
    object.metadata_field("resourceVersion")?.as_str()
}

/// `metadata.namespace` of a JSON object.
pub fn namespace_of(object: &Value) -> Option<&str> {
    object.metadata_field("namespace")?.as_str()
}

/// Whether a JSON object has a deletionTimestamp: it is being deleted.
pub fn is_deleting(object: &Value) -> bool {
    object
        .metadata_field("deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

/// `metadata.finalizers` of a JSON object (string entries only), in order.
pub fn finalizers_of(object: &Value) -> Vec<&str> {
    object
        .metadata_field("finalizers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// `metadata.labels` of a JSON object (string values only).
pub fn labels_of(object: &Value) -> BTreeMap<String, String> {
    object
        .metadata_field("labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

impl MemoryCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces an object (matched by kind, namespace and name).
    pub fn insert(&mut self, object: Value) -> Result<(), CacheError> {
        self.insert_with_json(&object, None)
    }

    /// [`Self::insert`], keeping `json` as the object's text when given: it
    /// must be `object` written out (`object.to_string()`), as a store that
    /// keeps objects as text has it. Debug builds check that.
    pub fn insert_with_json(
        &mut self,
        object: &Value,
        json: Option<Arc<str>>,
    ) -> Result<(), CacheError> {
        self.insert_prepared(Self::prepare(object, json)?);
        Ok(())
    }

    /// The work of [`Self::insert_with_json`] that needs no cache: checking
    /// the object and making its texts and index keys. A cache shared
    /// behind a lock does it before taking the lock for
    /// [`Self::insert_prepared`], so readers wait only for the insert.
    pub fn prepare(object: &Value, json: Option<Arc<str>>) -> Result<PreparedEntry, CacheError> {
        let what = name_of(object).unwrap_or("(unnamed)").to_string();
        let fail = |reason: &str| CacheError {
            what: what.clone(),
            reason: reason.to_string(),
        };
        let kind = KindRef::of_object(object)
            .ok_or_else(|| fail("apiVersion and kind must be strings"))?;
        let name = name_of(object)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| fail("metadata.name must be a non-empty string"))?;
        let key = (
            kind,
            namespace_of(object).map(str::to_string),
            name.to_string(),
        );
        let json: Arc<str> = match json {
            Some(json) => {
                debug_assert_eq!(*json, object.to_string(), "the text of another object");
                json
            }
            None => object.to_string().into(),
        };
        // Stored text must parse back: a value nested past serde_json's
        // recursion limit would be accepted here and unreadable later.
        if let Some(why) = unreadable_at(nesting_depth(&json)) {
            return Err(fail(&why));
        }
        let metadata_json = metadata_only_json(object);
        let metadata_json = if *metadata_json == *json {
            json.clone()
        } else {
            metadata_json.into()
        };
        let entry = Entry {
            labels: labels_of(object),
            json,
            metadata_json,
            controllers: controller_refs(object),
            resource_version: resource_version_of(object).map(Box::from),
        };
        Ok(PreparedEntry { key, entry })
    }

    /// Adds or replaces the object [`Self::prepare`] made ready.
    pub fn insert_prepared(&mut self, prepared: PreparedEntry) {
        let PreparedEntry { key, entry } = prepared;
        // Most writes (a status, a spec) leave the labels as they were:
        // their index entries stay.
        match self.entries.remove(&key) {
            Some(old) if old.labels == entry.labels => {}
            Some(old) => {
                self.index_labels(&key, &old, false);
                self.index_labels(&key, &entry, true);
            }
            None => self.index_labels(&key, &entry, true),
        }
        self.entries.insert(key, entry);
    }

    /// Whether the cache holds this object at its resourceVersion already,
    /// so inserting it would change nothing. Objects without a
    /// resourceVersion are never held: nothing tells their versions apart.
    /// Nor is a whole object whose version is held as metadata only (a
    /// kind's watch widened from metadata to whole objects lists the same
    /// versions again), or the other way round.
    pub fn holds_version(&self, object: &Value) -> bool {
        let Some(version) = resource_version_of(object) else {
            return false;
        };
        let (Some(kind), Some(name)) = (KindRef::of_object(object), name_of(object)) else {
            return false;
        };
        self.entry(&kind, namespace_of(object), name)
            .is_some_and(|e| {
                e.resource_version.as_deref() == Some(version)
                    && e.is_metadata_only() == is_metadata_only(object)
            })
    }

    /// Removes an object; whether it was there.
    pub fn remove(&mut self, kind: &KindRef, namespace: Option<&str>, name: &str) -> bool {
        let key = (kind, namespace, name);
        match self.entries.remove_entry(&key as &dyn EntryKeyParts) {
            Some((key, old)) => {
                self.index_labels(&key, &old, false);
                true
            }
            None => false,
        }
    }

    fn index_labels(&mut self, key: &EntryKey, entry: &Entry, add: bool) {
        for (k, v) in &entry.labels {
            let label = label_key(key, k, v);
            if add {
                self.by_label.insert(label);
            } else {
                self.by_label.remove(&label);
            }
        }
    }

    /// The objects of `kind` in `namespace` (all when `None`) carrying the
    /// label `key=value`, in namespace and name order, after `after`.
    fn with_label<'a>(
        &'a self,
        kind: &KindRef,
        label: &str,
        namespace: Option<&str>,
        after: Option<&ListCursor>,
    ) -> impl Iterator<Item = (&'a EntryKey, &'a Entry)> + 'a {
        self.labelled(kind, label, namespace, after)
            .filter_map(|(k, _, ns, name)| {
                let key = (k, ns.as_deref(), name.as_str());
                self.entries.get_key_value(&key as &dyn EntryKeyParts)
            })
    }

    /// The index entries behind [`Self::with_label`]: one bounded range of
    /// the index, so walking or counting them compares no keys but at its
    /// two ends. (A list counts up to [`NARROW_ENOUGH`] of them for each
    /// `key=value` of its selector, on every reconcile that lists.)
    fn labelled<'a>(
        &'a self,
        kind: &KindRef,
        label: &str,
        namespace: Option<&str>,
        after: Option<&ListCursor>,
    ) -> std::collections::btree_set::Range<'a, LabelKey> {
        let start: LabelKey = (
            kind.clone(),
            label.into(),
            after
                .map(|cursor| cursor.namespace.clone())
                .unwrap_or_else(|| namespace.map(str::to_string)),
            after.map(|cursor| cursor.name.clone()).unwrap_or_default(),
        );
        // The first key past the last one wanted: the namespace's
        // successor ("ns" then "ns\0") or, across namespaces, the label's.
        let end: LabelKey = match namespace {
            Some(ns) => (
                kind.clone(),
                label.into(),
                Some(format!("{ns}\0")),
                String::new(),
            ),
            None => (
                kind.clone(),
                format!("{label}\0").into(),
                None,
                String::new(),
            ),
        };
        if start >= end {
            // A cursor from past the range: nothing is left after it.
            return self.by_label.range(end.clone()..end);
        }
        let start = match after {
            Some(_) => Bound::Excluded(start),
            None => Bound::Included(start),
        };
        self.by_label.range((start, Bound::Excluded(end)))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many objects of each kind are held.
    pub fn counts_by_kind(&self) -> Vec<(KindRef, usize)> {
        let mut counts: Vec<(KindRef, usize)> = Vec::new();
        for (kind, _, _) in self.entries.keys() {
            match counts.last_mut() {
                Some((counted, n)) if counted == kind => *n += 1,
                _ => counts.push((kind.clone(), 1)),
            }
        }
        counts
    }

    /// Every object, parsed, in the cache's order.
    pub fn iter(&self) -> impl Iterator<Item = Value> + '_ {
        self.entries.values().filter_map(Entry::value)
    }

    /// The entries of one kind, in namespace and name order.
    fn of_kind<'a>(
        &'a self,
        kind: &KindRef,
    ) -> impl Iterator<Item = (&'a EntryKey, &'a Entry)> + 'a {
        self.of_kind_after(kind, None)
    }

    /// [`Self::of_kind`] after `after`.
    fn of_kind_after<'a>(
        &'a self,
        kind: &KindRef,
        after: Option<&ListCursor>,
    ) -> impl Iterator<Item = (&'a EntryKey, &'a Entry)> + 'a {
        let start = match after {
            Some(cursor) => {
                Bound::Excluded((kind.clone(), cursor.namespace.clone(), cursor.name.clone()))
            }
            None => Bound::Included((kind.clone(), None, String::new())),
        };
        let kind = kind.clone();
        self.entries
            .range((start, Bound::Unbounded))
            .take_while(move |((k, _, _), _)| *k == kind)
    }

    fn entry(&self, kind: &KindRef, namespace: Option<&str>, name: &str) -> Option<&Entry> {
        let key = (kind, namespace, name);
        self.entries.get(&key as &dyn EntryKeyParts)
    }

    /// Whether an object of that name is held.
    pub fn contains(&self, kind: &KindRef, namespace: Option<&str>, name: &str) -> bool {
        self.entry(kind, namespace, name).is_some()
    }

    /// One object, parsed.
    pub fn get(&self, kind: &KindRef, namespace: Option<&str>, name: &str) -> Option<Value> {
        self.entry(kind, namespace, name).and_then(Entry::value)
    }

    /// One object's text, unparsed: the same `Arc` as long as the object
    /// is unchanged, so a caller holding a parsed copy of that text can
    /// tell it is current without parsing again.
    pub fn json(&self, kind: &KindRef, namespace: Option<&str>, name: &str) -> Option<Arc<str>> {
        self.entry(kind, namespace, name).map(|e| e.json.clone())
    }

    /// One object, parsed, and the text it was parsed from: what a request
    /// sends, without serialising the object again.
    pub fn get_with_json(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<(Value, Arc<str>)> {
        let entry = self.entry(kind, namespace, name)?;
        Some((entry.value()?, entry.json.clone()))
    }

    /// Objects of `kind`, in `namespace` (all namespaces when `None`), whose
    /// labels match `selector`; ordered by namespace, then name; parsed.
    pub fn list<'a>(
        &'a self,
        kind: &KindRef,
        namespace: Option<&'a str>,
        selector: &'a LabelSelector,
    ) -> impl Iterator<Item = Value> + 'a {
        self.select(kind, namespace, selector)
            .filter_map(|(_, e)| e.value())
    }

    /// The namespace and name of each object of `kind` whose labels match
    /// `selector`, from the index alone: nothing is parsed.
    pub fn names(&self, kind: &KindRef, selector: &LabelSelector) -> Vec<(Option<String>, String)> {
        self.select(kind, None, selector)
            .map(|((_, namespace, name), _)| (namespace.clone(), name.clone()))
            .collect()
    }

    fn select<'a>(
        &'a self,
        kind: &KindRef,
        namespace: Option<&'a str>,
        selector: &'a LabelSelector,
    ) -> impl Iterator<Item = (&'a EntryKey, &'a Entry)> + 'a {
        self.candidates(kind, namespace, selector, None)
            .filter(move |(_, e)| selector.matches(&e.labels))
    }

    /// The objects a list by `selector` must examine, after `after`: those
    /// of `kind` (in `namespace`) carrying the selector's narrowest
    /// `key=value` label, or every one of `kind` in `namespace` when it has
    /// none. Either way in namespace and name order, so a list can stop
    /// after any object and go on from there.
    fn candidates<'a>(
        &'a self,
        kind: &KindRef,
        namespace: Option<&'a str>,
        selector: &'a LabelSelector,
        after: Option<&ListCursor>,
    ) -> Box<dyn Iterator<Item = (&'a EntryKey, &'a Entry)> + 'a> {
        // The narrowest `key=value` requirement, counted up to a bound.
        let narrowest = selector
            .equalities()
            .map(|(k, v)| {
                let label = format!("{k}={v}");
                let count = self
                    .labelled(kind, &label, namespace, None)
                    .take(NARROW_ENOUGH + 1)
                    .count();
                (count, label)
            })
            .min_by_key(|(count, _)| *count);
        match narrowest {
            Some((_, label)) => Box::new(self.with_label(kind, &label, namespace, after)),
            None => Box::new(
                self.of_kind_after(kind, after)
                    .filter(move |((_, ns, _), _)| {
                        namespace.is_none_or(|wanted| ns.as_deref() == Some(wanted))
                    }),
            ),
        }
    }

    /// Goes on with `page`: examines up to `page.examine` more objects,
    /// adding those that match to it. False once no object is left.
    pub(crate) fn list_page(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        selector: &LabelSelector,
        projection: Projection,
        page: &mut ListPage,
    ) -> Result<bool, ListJsonError> {
        let after = page.after.take();
        let mut last = None;
        let mut examined = 0;
        for ((_, ns, name), entry) in self
            .candidates(kind, namespace, selector, after.as_ref())
            .take(page.examine)
        {
            examined += 1;
            last = Some((ns, name));
            if !selector.matches(&entry.labels) {
                continue;
            }
            let text = match projection {
                Projection::Full => &entry.json,
                Projection::MetadataOnly => &entry.metadata_json,
            };
            page.add(text)?;
        }
        page.examined += examined;
        page.after = last.map(|(ns, name)| ListCursor {
            namespace: ns.clone(),
            name: name.clone(),
        });
        Ok(examined == page.examine)
    }

    /// [`Self::get`] as the cache import answers it: JSON text.
    pub fn get_json(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
        projection: Projection,
    ) -> Option<String> {
        self.entry(kind, namespace, name)
            .map(|e| e.text(projection))
    }

    /// [`Self::list`] as the cache import answers it: the selector in string
    /// form, JSON text out, a clear error for a malformed selector, and
    /// never more than [`LIST_JSON_MAX_BYTES`] of text.
    pub fn list_json(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        selector: &str,
        projection: Projection,
    ) -> Result<Vec<String>, String> {
        self.list_json_within(kind, namespace, selector, projection, LIST_JSON_MAX_BYTES)
            .map_err(|e| e.to_string())
    }

    /// [`Self::list_json`], stopping as soon as the text passes `max_bytes`:
    /// the host's cache import builds a list on the host before the
    /// plugin's memory cap can apply, so it must not build one the plugin
    /// could never take.
    pub fn list_json_within(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        selector: &str,
        projection: Projection,
        max_bytes: usize,
    ) -> Result<Vec<String>, ListJsonError> {
        let bounds = ListBounds::bytes(max_bytes);
        list_json_paged(|| self, kind, namespace, selector, projection, bounds)
    }

    /// The request the host sends for `primary`: its owned children from this
    /// cache, and `deleting` from its deletionTimestamp.
    pub fn request_for(&self, primary: &Value, owns: &[KindRef]) -> ReconcileRequest {
        ReconcileRequest {
            primary: primary.to_string(),
            children: self
                .children(primary, owns)
                .map(|e| e.json.to_string())
                .collect(),
            deleting: is_deleting(primary),
        }
    }

    /// The owned children of `primary`: objects of one of the `owns` kinds
    /// whose controller ownerReference points at it (by uid when both sides
    /// have one, otherwise by kind and name); parsed. A namespaced primary's
    /// children are in its namespace; a cluster-scoped primary's may be in
    /// any namespace, or none (an ownerReference names no namespace, so a
    /// namespaced object may be owned by a cluster-scoped one).
    pub fn children_of<'a>(
        &'a self,
        primary: &'a Value,
        owns: &[KindRef],
    ) -> impl Iterator<Item = Value> + 'a {
        self.children(primary, owns).filter_map(Entry::value)
    }

    /// Children in the contract's order: kind, then namespace, then name.
    fn children<'a>(
        &'a self,
        primary: &'a Value,
        owns: &[KindRef],
    ) -> impl Iterator<Item = &'a Entry> + 'a {
        let mut kinds = owns.to_vec();
        kinds.sort();
        kinds.dedup();
        let namespace = namespace_of(primary);
        kinds.into_iter().flat_map(move |kind| {
            let in_namespace: Vec<&'a Entry> = match namespace {
                // One namespace: a range of the map, not the whole kind.
                Some(ns) => {
                    let start = (kind.clone(), Some(ns.to_string()), String::new());
                    self.entries
                        .range(start..)
                        .take_while(|((k, n, _), _)| *k == kind && n.as_deref() == Some(ns))
                        .map(|(_, e)| e)
                        .collect()
                }
                None => self.of_kind(&kind).map(|(_, e)| e).collect(),
            };
            in_namespace
                .into_iter()
                .filter(move |e| e.is_controlled_by(primary))
        })
    }
}

fn label_key(key: &EntryKey, k: &str, v: &str) -> LabelKey {
    (
        key.0.clone(),
        format!("{k}={v}").into(),
        key.1.clone(),
        key.2.clone(),
    )
}

/// Whether an object has no members but `apiVersion`, `kind` and
/// `metadata`: it is its own [`metadata_only`] form, but for managedFields.
fn is_metadata_only(object: &Value) -> bool {
    object.as_object().is_some_and(|members| {
        members
            .keys()
            .all(|k| matches!(k.as_str(), "apiVersion" | "kind" | "metadata"))
    })
}

/// `apiVersion`, `kind` and `metadata` of an object, without managedFields
/// (bookkeeping of the API server that no plugin decides on).
pub fn metadata_only(object: &Value) -> Value {
    let mut metadata = object.get("metadata").cloned().unwrap_or_default();
    if let Some(m) = metadata.as_object_mut() {
        m.remove("managedFields");
    }
    serde_json::json!({
        "apiVersion": object.get("apiVersion"),
        "kind": object.get("kind"),
        "metadata": metadata,
    })
}

/// The text of [`metadata_only`], written from the object as it is rather
/// than from a copy of its metadata: the cache makes it for every object it
/// takes in.
fn metadata_only_json(object: &Value) -> String {
    /// `metadata` without `managedFields`.
    struct Metadata<'a>(Option<&'a Value>);
    impl serde::Serialize for Metadata<'_> {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeMap;
            match self.0 {
                Some(Value::Object(members)) => {
                    let kept = members.iter().filter(|(k, _)| *k != "managedFields");
                    let mut map = serializer.serialize_map(None)?;
                    for (k, v) in kept {
                        map.serialize_entry(k, v)?;
                    }
                    map.end()
                }
                Some(other) => other.serialize(serializer),
                None => serializer.serialize_unit(),
            }
        }
    }
    /// In the order of `metadata_only`'s map: apiVersion, kind, metadata.
    #[derive(serde::Serialize)]
    struct MetadataOnly<'a> {
        #[serde(rename = "apiVersion")]
        api_version: Option<&'a Value>,
        kind: Option<&'a Value>,
        metadata: Metadata<'a>,
    }
    let projection = MetadataOnly {
        api_version: object.get("apiVersion"),
        kind: object.get("kind"),
        metadata: Metadata(object.get("metadata")),
    };
    let json = serde_json::to_string(&projection).unwrap_or_default();
    debug_assert_eq!(json, metadata_only(object).to_string());
    json
}

/// Whether `object` has a controller ownerReference to `owner`.
pub fn is_controlled_by(object: &Value, owner: &Value) -> bool {
    controller_refs(object).iter().any(|r| r.points_at(owner))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::json_depth::READABLE_DEPTH;

    fn pod(ns: &str, name: &str, app: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": ns, "name": name, "labels": {"app": app}}})
    }

    /// Three `app=web` Pods over namespaces a and b, one `app=db` in a.
    fn web_and_db_pods() -> MemoryCache {
        let mut cache = MemoryCache::new();
        for p in [
            pod("a", "z", "web"),
            pod("a", "b", "web"),
            pod("b", "c", "web"),
            pod("a", "d", "db"),
        ] {
            cache.insert(p).unwrap();
        }
        cache
    }

    #[test]
    fn list_filters_by_kind_namespace_and_selector_in_name_order() {
        let cache = web_and_db_pods();
        let kind = KindRef::new("", "v1", "Pod");
        let web = LabelSelector::parse("app=web").unwrap();
        let everything = LabelSelector::everything();
        let names: Vec<_> = cache
            .list(&kind, Some("a"), &web)
            .filter_map(|o| name_of(&o).map(str::to_string))
            .collect();
        assert_eq!(names, ["b", "z"]);
        let all: Vec<_> = cache
            .list(&kind, None, &everything)
            .filter_map(|o| name_of(&o).map(str::to_string))
            .collect();
        assert_eq!(all, ["b", "d", "z", "c"]);
        assert!(cache.get(&kind, Some("b"), "c").is_some());
        assert!(cache.get(&kind, Some("a"), "c").is_none());
    }

    /// A lookup by borrowed parts must order keys exactly as the map does,
    /// or it would miss objects the map holds.
    #[test]
    fn borrowed_keys_order_as_owned_keys_and_find_every_entry() {
        let kinds = [
            KindRef::new("", "v1", "Pod"),
            KindRef::new("apps", "v1", "Deployment"),
            KindRef::new("apps", "v1beta1", "Deployment"),
            KindRef::new("", "v1", "Namespace"),
        ];
        let mut keys: Vec<EntryKey> = Vec::new();
        for kind in &kinds {
            for namespace in [None, Some(""), Some("a"), Some("a-b"), Some("b")] {
                for name in ["", "x", "x.y", "y"] {
                    keys.push((
                        kind.clone(),
                        namespace.map(str::to_string),
                        name.to_string(),
                    ));
                }
            }
        }
        let mut by_owned = keys.clone();
        by_owned.sort();
        let mut by_parts = keys.clone();
        by_parts.sort_by(|a, b| Ord::cmp(a as &dyn EntryKeyParts, b as &dyn EntryKeyParts));
        assert_eq!(by_owned, by_parts);

        let mut cache = MemoryCache::new();
        for (kind, namespace, name) in keys.iter().filter(|k| !k.2.is_empty()) {
            let mut object = json!({"apiVersion": kind.api_version(), "kind": kind.kind,
                "metadata": {"name": name}});
            if let Some(ns) = namespace {
                object["metadata"]["namespace"] = json!(ns);
            }
            cache.insert(object).unwrap();
        }
        for (kind, namespace, name) in keys.iter().filter(|k| !k.2.is_empty()) {
            let found = cache.get(kind, namespace.as_deref(), name).unwrap();
            assert_eq!(found["metadata"]["name"], json!(name));
            assert_eq!(namespace_of(&found), namespace.as_deref());
        }
        assert!(cache.get(&kinds[0], Some("c"), "x").is_none());
        assert!(cache.remove(&kinds[1], Some("a"), "x.y"));
        assert!(!cache.remove(&kinds[1], Some("a"), "x.y"));
        assert!(cache.get(&kinds[1], Some("a"), "x.y").is_none());
    }

    #[test]
    fn names_are_those_a_list_with_the_same_selector_gives() {
        let mut cache = web_and_db_pods();
        cache
            .insert(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "a", "name": "web"}}))
            .unwrap();
        let kind = KindRef::new("", "v1", "Pod");
        for selector in ["app=web", "app!=web", "app in (db)", ""] {
            let selector = LabelSelector::parse(selector).unwrap();
            let listed: Vec<(Option<String>, String)> = cache
                .list(&kind, None, &selector)
                .map(|o| {
                    (
                        namespace_of(&o).map(str::to_string),
                        name_of(&o).unwrap().to_string(),
                    )
                })
                .collect();
            assert_eq!(cache.names(&kind, &selector), listed);
        }
        let web = LabelSelector::parse("app=web").unwrap();
        let n = |ns: &str, name: &str| (Some(ns.to_string()), name.to_string());
        assert_eq!(
            cache.names(&kind, &web),
            [n("a", "b"), n("a", "z"), n("b", "c")]
        );
    }

    #[test]
    fn a_bounded_list_stops_once_its_text_passes_the_maximum() {
        let mut cache = MemoryCache::new();
        for name in ["a", "b", "c"] {
            cache.insert(pod("ns", name, "web")).unwrap();
        }
        let kind = KindRef::new("", "v1", "Pod");
        let one = cache
            .get_json(&kind, Some("ns"), "a", Projection::Full)
            .unwrap()
            .len();
        let two = cache
            .list_json_within(&kind, None, "", Projection::Full, 2 * one)
            .unwrap_err();
        assert_eq!(
            two,
            ListJsonError::TooLarge {
                listed: 2,
                max_bytes: 2 * one
            }
        );
        let all = cache
            .list_json_within(&kind, None, "app=web", Projection::Full, 3 * one)
            .unwrap();
        assert_eq!(
            all,
            cache
                .list_json(&kind, None, "app=web", Projection::Full)
                .unwrap()
        );
        assert!(matches!(
            cache.list_json_within(&kind, None, "app in (", Projection::Full, 1),
            Err(ListJsonError::Selector(_))
        ));
    }

    #[test]
    fn a_list_by_label_follows_relabels_and_removals() {
        let mut cache = MemoryCache::new();
        let kind = KindRef::new("", "v1", "Pod");
        for i in 0..200 {
            cache.insert(pod("a", &format!("p{i:03}"), "web")).unwrap();
        }
        cache.insert(pod("b", "other-ns", "db")).unwrap();
        cache.insert(pod("a", "p007", "db")).unwrap();
        cache.insert(pod("a", "p100", "db")).unwrap();
        cache.remove(&kind, Some("a"), "p100");
        let names = |selector: &str, ns: Option<&str>| -> Vec<String> {
            let selector = LabelSelector::parse(selector).unwrap();
            cache
                .list(&kind, ns, &selector)
                .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(names("app=db", Some("a")), ["p007"]);
        assert_eq!(names("app in (db)", None), ["p007", "other-ns"]);
        assert_eq!(names("app=web", Some("a")).len(), 198);
        assert!(!names("app=web", Some("a")).contains(&"p007".to_string()));
        assert_eq!(names("app=db,app!=db", None), Vec::<String>::new());
        assert_eq!(names("app=nothing", None), Vec::<String>::new());
    }

    /// The label index is read as one range per label and namespace: the
    /// names that sort right next to them (a namespace or a value that
    /// begins with the same letters) stay outside it.
    #[test]
    fn a_list_by_label_keeps_to_its_namespace_and_value_beside_their_neighbours() {
        let mut cache = MemoryCache::new();
        let kind = KindRef::new("", "v1", "Pod");
        for ns in ["a", "a-b", "ab", "b"] {
            for app in ["web", "web2", "we"] {
                cache.insert(pod(ns, &format!("{app}-1"), app)).unwrap();
                cache.insert(pod(ns, &format!("{app}-2"), app)).unwrap();
            }
        }
        let listed = |selector: &str, ns: Option<&str>| -> Vec<String> {
            let selector = LabelSelector::parse(selector).unwrap();
            cache
                .list(&kind, ns, &selector)
                .map(|p| format!("{}/{}", namespace_of(&p).unwrap(), name_of(&p).unwrap()))
                .collect()
        };
        assert_eq!(listed("app=web", Some("a")), ["a/web-1", "a/web-2"]);
        assert_eq!(listed("app=we", Some("ab")), ["ab/we-1", "ab/we-2"]);
        assert_eq!(
            listed("app=web", None),
            [
                "a/web-1",
                "a/web-2",
                "a-b/web-1",
                "a-b/web-2",
                "ab/web-1",
                "ab/web-2",
                "b/web-1",
                "b/web-2"
            ]
        );
        assert_eq!(listed("app=web", Some("c")), Vec::<String>::new());
        // Resumed after an object, as the next page of a list is.
        let after = |ns: Option<&str>, cursor: (&str, &str)| -> Vec<String> {
            let cursor = ListCursor {
                namespace: Some(cursor.0.to_string()),
                name: cursor.1.to_string(),
            };
            cache
                .with_label(&kind, "app=web", ns, Some(&cursor))
                .map(|((_, ns, name), _)| format!("{}/{name}", ns.as_deref().unwrap()))
                .collect()
        };
        assert_eq!(after(Some("a"), ("a", "web-1")), ["a/web-2"]);
        assert_eq!(after(Some("a"), ("a", "web-2")), Vec::<String>::new());
        assert_eq!(
            after(None, ("a-b", "web-2")),
            ["ab/web-1", "ab/web-2", "b/web-1", "b/web-2"]
        );
        // A cursor from past the namespace: nothing after it, and no panic.
        assert_eq!(after(Some("a"), ("b", "web-1")), Vec::<String>::new());
    }

    #[test]
    fn the_held_version_is_told_by_resource_version_and_relists_keep_labels() {
        let mut cache = MemoryCache::new();
        let kind = KindRef::new("", "v1", "Pod");
        let mut v5 = pod("a", "p", "web");
        v5["metadata"]["resourceVersion"] = json!("5");
        assert!(!cache.holds_version(&v5), "nothing held yet");
        cache.insert(v5.clone()).unwrap();
        assert!(cache.holds_version(&v5));
        let mut v6 = v5.clone();
        v6["metadata"]["resourceVersion"] = json!("6");
        v6["status"] = json!({"phase": "Running"});
        assert!(!cache.holds_version(&v6), "a newer version is not held");
        // Same labels, new content: still listed by its label, as v6.
        cache.insert(v6.clone()).unwrap();
        let web = LabelSelector::parse("app=web").unwrap();
        let listed: Vec<Value> = cache.list(&kind, Some("a"), &web).collect();
        assert_eq!(listed, [v6.clone()]);
        assert!(!cache.holds_version(&v5), "the old version is gone");
        // The same version whole after metadata only (a watch widened).
        let mut whole = pod("a", "r", "web");
        whole["metadata"]["resourceVersion"] = json!("9");
        whole["spec"] = json!({"containers": [{"image": "busybox"}]});
        cache.insert(metadata_only(&whole)).unwrap();
        assert!(cache.holds_version(&metadata_only(&whole)));
        assert!(!cache.holds_version(&whole), "held as metadata only");
        cache.insert(whole.clone()).unwrap();
        assert!(cache.holds_version(&whole));
        assert!(!cache.holds_version(&metadata_only(&whole)), "held whole");
        // Without a resourceVersion nothing tells versions apart.
        let bare = pod("a", "q", "web");
        cache.insert(bare.clone()).unwrap();
        assert!(!cache.holds_version(&bare));
    }

    #[test]
    fn metadata_only_text_is_the_projection_written_out() {
        let objects = [
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p",
                "managedFields": [{"manager": "m"}], "labels": {"a": "b"}}, "spec": {"x": 1}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
            json!({"kind": "Pod", "spec": {}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": "odd"}),
            json!({"metadata": {"managedFields": []}}),
        ];
        for object in objects {
            assert_eq!(
                metadata_only_json(&object),
                metadata_only(&object).to_string(),
                "{object}"
            );
        }
    }

    #[test]
    fn insert_replaces_the_same_object_and_refuses_nameless_ones() {
        let mut cache = MemoryCache::new();
        cache.insert(pod("a", "p", "web")).unwrap();
        cache.insert(pod("a", "p", "db")).unwrap();
        assert_eq!(cache.len(), 1);
        let err = cache
            .insert(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}}))
            .unwrap_err();
        assert!(err.to_string().contains("metadata.name"), "{err}");
    }

    #[test]
    fn an_object_too_deep_to_read_back_is_refused_not_stored() {
        let mut cache = MemoryCache::new();
        let mut deep = json!({});
        // With the object and its `status`, READABLE_DEPTH + 1 levels.
        for _ in 0..READABLE_DEPTH - 1 {
            deep = json!({ "a": deep });
        }
        let mut object = pod("a", "p", "web");
        object["status"] = deep;
        let err = cache.insert(object).unwrap_err();
        assert!(err.to_string().contains("nested 128 levels deep"), "{err}");
        assert!(
            cache
                .get(&KindRef::new("", "v1", "Pod"), Some("a"), "p")
                .is_none()
        );
    }

    #[test]
    fn children_are_found_by_controller_owner_reference() {
        let owner = json!({"apiVersion": "x/v1", "kind": "Set", "metadata": {"namespace": "a", "name": "s", "uid": "u1"}});
        let owned = |name: &str, uid: &str, controller: bool| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"namespace": "a", "name": name,
                "ownerReferences": [{"apiVersion": "x/v1", "kind": "Set", "name": "s", "uid": uid, "controller": controller}]}})
        };
        let mut cache = MemoryCache::new();
        cache.insert(owned("mine", "u1", true)).unwrap();
        cache.insert(owned("old-owner", "u0", true)).unwrap();
        cache.insert(owned("not-controller", "u1", false)).unwrap();
        let owns = [KindRef::new("apps", "v1", "Deployment")];
        let names: Vec<_> = cache
            .children_of(&owner, &owns)
            .filter_map(|o| name_of(&o).map(str::to_string))
            .collect();
        assert_eq!(names, ["mine"]);
    }
}
