//! Runs the serving version and a candidate over the same primaries with
//! the same inputs: one snapshot of the objects, one clock reading, one
//! cluster, and the same random streams (the candidate draws what the
//! serving version would). Each version finds its children by its own
//! declared kinds, as the host would serve it.

use std::sync::Arc;

use reconciler_contract::memory_cache::MemoryCache;
use reconciler_contract::object_meta::MetadataField;
use reconciler_contract::{ClusterInfo, KindRef};
use serde_json::Value;

use super::compare::{Decision, Difference, compare};
use crate::golden::runner::expectation_of;
use crate::plugin::{LoadedPlugin, ReconcileInput};

/// What the two versions decided for one primary.
#[derive(Debug)]
pub struct PrimaryPlan {
    /// `namespace/name` (or `name`).
    pub object: String,
    pub serving: Decision,
    pub candidate: Decision,
    pub differences: Vec<Difference>,
}

/// The objects both versions read: every primary of the serving version's
/// kind is planned.
pub struct Snapshot {
    cache: Arc<MemoryCache>,
    primaries: Vec<Value>,
}

impl Snapshot {
    /// `objects` as one cache. An object the cache cannot hold (no name, no
    /// kind) is skipped and named in the returned list.
    pub fn of(objects: Vec<Value>, primary: &KindRef) -> (Self, Vec<String>) {
        let mut cache = MemoryCache::new();
        let mut primaries = Vec::new();
        let mut skipped = Vec::new();
        for object in objects {
            if KindRef::of_object(&object).as_ref() == Some(primary) {
                primaries.push(object.clone());
            }
            if let Err(e) = cache.insert(object) {
                skipped.push(e.to_string());
            }
        }
        primaries.sort_by_key(object_name);
        let snapshot = Self {
            cache: Arc::new(cache),
            primaries,
        };
        (snapshot, skipped)
    }

    pub fn primaries(&self) -> usize {
        self.primaries.len()
    }
}

/// Both versions over every primary of `snapshot`, at `now_millis`.
/// Refuses versions of different primary kinds: they are not two versions
/// of one plugin.
pub fn plan(
    serving: &LoadedPlugin,
    candidate: &LoadedPlugin,
    snapshot: &Snapshot,
    now_millis: i64,
    cluster: Arc<ClusterInfo>,
) -> anyhow::Result<Vec<PrimaryPlan>> {
    let (s, c) = (serving.metadata(), candidate.metadata());
    if s.primary != c.primary {
        anyhow::bail!(
            "the candidate {} reconciles {} {}, the serving version {} reconciles {} {}: not two versions of one plugin",
            c.name,
            c.primary.api_version(),
            c.primary.kind,
            s.name,
            s.primary.api_version(),
            s.primary.kind
        );
    }
    Ok(snapshot
        .primaries
        .iter()
        .map(|primary| {
            let decide = |plugin: &LoadedPlugin| -> Decision {
                plugin
                    .reconcile(input(plugin, snapshot, primary, now_millis, &cluster))
                    .map(expectation_of)
                    .map_err(|e| e.to_string())
            };
            let (serving, candidate) = (decide(serving), decide(candidate));
            let differences = compare(&serving, &candidate);
            PrimaryPlan {
                object: object_name(primary),
                serving,
                candidate,
                differences,
            }
        })
        .collect())
}

fn input(
    plugin: &LoadedPlugin,
    snapshot: &Snapshot,
    primary: &Value,
    now_millis: i64,
    cluster: &Arc<ClusterInfo>,
) -> ReconcileInput {
    ReconcileInput {
        request: snapshot.cache.request_for(primary, &plugin.metadata().owns),
        primary_namespace: primary
            .metadata_field("namespace")
            .and_then(Value::as_str)
            .map(str::to_string),
        object: object_name(primary),
        reader: snapshot.cache.clone(),
        now_millis,
        cluster: cluster.clone(),
    }
}

fn object_name(object: &Value) -> String {
    let field = |f: &str| {
        object
            .metadata_field(f)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    match field("namespace") {
        "" => field("name").to_string(),
        ns => format!("{ns}/{}", field("name")),
    }
}
