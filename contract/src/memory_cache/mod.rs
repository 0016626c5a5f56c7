//! An in-memory object cache with the semantics of the host's cache import.
//!
//! The native test harness serves a plugin's `get`/`list` calls from it, and
//! `reconciler-host test` serves the compiled plugin from the same type, so a
//! golden case and a native test observe identical results: same ordering,
//! same selector rules, same way of finding a primary's children.

mod entry;
mod object_fields;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Bound, Deref};
use std::sync::Arc;

use serde_json::Value;

pub use self::entry::PreparedEntry;
use self::entry::{Entry, EntryKey, EntryKeyParts};
use self::object_fields::{controller_refs, is_metadata_only, metadata_only_json};
pub use self::object_fields::{
    finalizers_of, is_controlled_by, is_deleting, labels_of, metadata_only, name_of, namespace_of,
    resource_version_of,
};
use crate::json_depth::{nesting_depth, unreadable_at};
pub use crate::list_pages::{ListBounds, ListJsonError};
use crate::list_pages::{ListCursor, ListPage, page_through};
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

    /// Adds or replaces the object [`Self::prepare`] made ready; the text
    /// of the one it replaced, which a caller telling what changed would
    /// otherwise have to look up before.
    pub fn insert_prepared(&mut self, prepared: PreparedEntry) -> Option<Arc<str>> {
        let PreparedEntry { key, entry } = prepared;
        // Most writes (a status, a spec) leave the labels as they were:
        // their index entries stay.
        let replaced = match self.entries.remove(&key) {
            Some(old) if old.labels == entry.labels => Some(old.json),
            Some(old) => {
                self.index_labels(&key, &old, false);
                self.index_labels(&key, &entry, true);
                Some(old.json)
            }
            None => {
                self.index_labels(&key, &entry, true);
                None
            }
        };
        self.entries.insert(key, entry);
        replaced
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

/// The objects of `kind` in `namespace` (all when `None`) matching
/// `selector`, as JSON text in namespace and name order, within `bounds`.
/// `hold` gives the cache for one page (a lock guard, say) and is called
/// again for each next page, so writers go between pages.
pub fn list_json_paged<C: Deref<Target = MemoryCache>>(
    mut hold: impl FnMut() -> C,
    kind: &KindRef,
    namespace: Option<&str>,
    selector: &str,
    projection: Projection,
    bounds: ListBounds,
) -> Result<Vec<String>, ListJsonError> {
    let selector =
        LabelSelector::parse(selector).map_err(|e| ListJsonError::Selector(e.to_string()))?;
    page_through(selector.cost(), bounds, |page| {
        hold().list_page(kind, namespace, &selector, projection, page)
    })
}

#[cfg(test)]
mod list_paged_tests;
#[cfg(test)]
mod tests;
