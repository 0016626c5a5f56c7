//! Plain Rust mirrors of the WIT contract (`wit/reconciler.wit`).
//!
//! Both sides of the boundary speak these types: the guest glue converts the
//! generated bindings into them, the host converts its own bindings into them,
//! and the native test harness uses them directly. Keeping one set of types
//! means a plugin tested natively sees exactly what it sees inside the host.
//!
//! They serialise to the YAML a Kubernetes user expects (`apiVersion`, `kind`,
//! camelCase), which is what `reconciler-host inspect` and golden cases show.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The contract version the host and its guests speak: the WIT package version.
pub const CONTRACT_VERSION: &str = "0.2.3";
/// The WIT package name, without version.
pub const CONTRACT_PACKAGE: &str = "reconciler:plugin";

/// A Kubernetes group-version-kind. The core group is the empty string.
///
/// Serialises as `{apiVersion, kind}`, the way a manifest names a kind.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KindRef {
    pub group: String,
    pub version: String,
    pub kind: String,
}

impl KindRef {
    pub fn new(
        group: impl Into<String>,
        version: impl Into<String>,
        kind: impl Into<String>,
    ) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
        }
    }

    /// The kind of a k8s-openapi type (or any type implementing `Resource`).
    pub fn of<K: k8s_openapi::Resource>() -> Self {
        Self::new(K::GROUP, K::VERSION, K::KIND)
    }

    /// Parses an `apiVersion` (`apps/v1`, or `v1` for the core group) and a kind.
    pub fn from_api_version(api_version: &str, kind: &str) -> Self {
        match api_version.split_once('/') {
            Some((group, version)) => Self::new(group, version, kind),
            None => Self::new("", api_version, kind),
        }
    }

    /// The `apiVersion` field value for this kind.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether `other` is this kind in any version: the versions one CRD
    /// (or built-in group) serves are views of the same objects, so whoever
    /// reconciles, owns or finalizes one version does so for all of them.
    pub fn same_group_kind(&self, other: &KindRef) -> bool {
        self.group == other.group && self.kind == other.kind
    }

    /// The kind of a JSON object, from its `apiVersion` and `kind` fields.
    pub fn of_object(object: &serde_json::Value) -> Option<Self> {
        let api_version = object.get("apiVersion")?.as_str()?;
        let kind = object.get("kind")?.as_str()?;
        Some(Self::from_api_version(api_version, kind))
    }
}

impl fmt::Display for KindRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.api_version(), self.kind)
    }
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct KindRefWire {
    api_version: String,
    kind: String,
}

impl Serialize for KindRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        KindRefWire {
            api_version: self.api_version(),
            kind: self.kind.clone(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for KindRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let wire = KindRefWire::deserialize(d)?;
        Ok(Self::from_api_version(&wire.api_version, &wire.kind))
    }
}

/// How an event on an object of a read kind finds its primary object.
/// In YAML: `{rule: label, key: podset}`, `{rule: sameName}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "rule", content = "key")]
pub enum MapRule {
    /// The label with this key holds the primary object's name.
    Label(String),
    /// The annotation with this key holds the primary object's name.
    Annotation(String),
    /// The primary has the same name as the read object.
    SameName,
    /// Events on this kind never trigger a reconcile.
    None,
}

/// A kind the plugin reads through the cache without owning it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadKind {
    #[serde(flatten)]
    pub kind: KindRef,
    pub maps_by: MapRule,
    #[serde(default)]
    pub metadata_only: bool,
    /// Reads of this kind stay in the primary's namespace.
    #[serde(default)]
    pub same_namespace: bool,
}

/// The plugin's requests of its sandbox and scheduling; `None` means the
/// host's default.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hints {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_reconciles: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit_mib: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_kib: Option<u32>,
    /// Events one response may carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_events: Option<u32>,
    /// Objects one response may apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_applies: Option<u32>,
    /// Objects one response may delete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_deletes: Option<u32>,
}

impl Hints {
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// A kind of change of one object. In YAML: `generation`, `labels`,
/// `annotations`, `any`, `{fields: [status.readyReplicas]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Change {
    /// Any change at all: what a kind not named gets.
    Any,
    /// `metadata.generation` moved, or `metadata.deletionTimestamp`
    /// appeared. On kinds without a generation (ConfigMaps, Secrets):
    /// anything outside `metadata` and `status` changed.
    Generation,
    /// `metadata.labels` changed.
    Labels,
    /// `metadata.annotations` changed.
    Annotations,
    /// The value at one of these dotted paths changed, appeared or went.
    Fields(Vec<String>),
}

/// The changes of objects of `kind` that wake their primary: any one of
/// `wake_on`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KindTrigger {
    #[serde(flatten)]
    pub kind: KindRef,
    pub wake_on: Vec<Change>,
}

/// What a plugin is and what it may touch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginMetadata {
    pub name: String,
    pub version: String,
    pub primary: KindRef,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owns: Vec<KindRef>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reads: Vec<ReadKind>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writes: Vec<KindRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalizer: Option<String>,
    #[serde(default, skip_serializing_if = "Hints::is_default")]
    pub hints: Hints,
    /// Which changes of which kinds wake a primary (WIT `triggers`, 0.2.3);
    /// a kind not named is woken by any change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub triggers: Vec<KindTrigger>,
}

impl PluginMetadata {
    /// The changes of `kind` that wake a primary; `None`: any change.
    pub fn trigger_of(&self, kind: &KindRef) -> Option<&[Change]> {
        self.triggers
            .iter()
            .find(|t| &t.kind == kind)
            .map(|t| t.wake_on.as_slice())
    }

    /// Every kind the plugin declared, in any role: the kinds it may read
    /// through the cache.
    pub fn declared_kinds(&self) -> impl Iterator<Item = &KindRef> {
        std::iter::once(&self.primary)
            .chain(&self.owns)
            .chain(self.reads.iter().map(|r| &r.kind))
            .chain(&self.writes)
    }

    pub fn declares(&self, kind: &KindRef) -> bool {
        self.declared_kinds().any(|k| k == kind)
    }

    /// The cache import's access rule: only declared kinds may be read.
    pub fn check_readable(&self, kind: &KindRef) -> Result<(), String> {
        if self.declares(kind) {
            Ok(())
        } else {
            Err(format!(
                "plugin {:?} did not declare {kind}: add it to owns, reads or writes in its metadata to read it",
                self.name
            ))
        }
    }

    /// The cache import's rules for one `get` or `list` of `kind` in
    /// `namespace` (`None`: every namespace), made while reconciling a
    /// primary in `primary_namespace` (`None`: a cluster-scoped primary).
    /// The kind must be declared; a read kind declared same-namespace may be
    /// read only in the primary's namespace. Returns the namespace to read:
    /// for such a kind, none means the primary's.
    pub fn check_read<'a>(
        &self,
        kind: &KindRef,
        namespace: Option<&'a str>,
        primary_namespace: Option<&'a str>,
    ) -> Result<Option<&'a str>, String> {
        self.check_readable(kind)?;
        let confined = self
            .reads
            .iter()
            .any(|r| r.same_namespace && &r.kind == kind);
        match (confined, primary_namespace, namespace) {
            (false, _, namespace) | (true, None, namespace) => Ok(namespace),
            (true, Some(primary), None) => Ok(Some(primary)),
            (true, Some(primary), Some(asked)) if asked == primary => Ok(Some(asked)),
            (true, Some(primary), Some(asked)) => Err(format!(
                "plugin {:?} declared {kind} a same-namespace read kind, so it reads it only in its primary's namespace {primary:?}, not in {asked:?}: declare it with `reads` instead of `reads_in_namespace` (sameNamespace: false) to read across namespaces",
                self.name
            )),
        }
    }

    /// How the cache import returns objects of `kind` to this plugin.
    pub fn projection_of(&self, kind: &KindRef) -> Projection {
        if self
            .reads
            .iter()
            .any(|r| r.metadata_only && &r.kind == kind)
        {
            Projection::MetadataOnly
        } else {
            Projection::Full
        }
    }

    pub fn owns_kind(&self, kind: &KindRef) -> bool {
        self.owns.contains(kind)
    }

    pub fn writes_kind(&self, kind: &KindRef) -> bool {
        self.writes.contains(kind)
    }

    /// The field manager the host applies this plugin's objects with.
    pub fn field_manager(&self) -> String {
        format!("reconciler-host/{}", self.name)
    }
}

/// What of an object crosses the boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Projection {
    /// The whole object.
    Full,
    /// `apiVersion`, `kind` and `metadata` only: for read kinds declared
    /// metadata-only, so a plugin listing Pods for their names does not pay
    /// for their specs and statuses.
    MetadataOnly,
}

/// The label that names a cluster among its source's labels: the one every
/// cluster carries, `local` included.
pub const CLUSTER_NAME_LABEL: &str = "reconciler-host.io/cluster";
/// The name of the cluster the host runs in (and of the one cluster of
/// `simulate`, `test` and a single-cluster `dev`).
pub const LOCAL_CLUSTER: &str = "local";

/// The cluster a reconcile runs in (WIT `cluster.cluster-info`, 0.2.2): its
/// name and the labels its source carries, which always include
/// [`CLUSTER_NAME_LABEL`] with the name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterInfo {
    pub name: String,
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
}

impl ClusterInfo {
    /// A cluster named `name` whose only label is its name.
    pub fn named(name: &str) -> Self {
        Self {
            name: name.to_string(),
            labels: std::collections::BTreeMap::from([(
                CLUSTER_NAME_LABEL.to_string(),
                name.to_string(),
            )]),
        }
    }

    /// The cluster the host runs in.
    pub fn local() -> Self {
        Self::named(LOCAL_CLUSTER)
    }

    /// `name` with `labels`, the name label added (a source's own
    /// `reconciler-host.io/cluster` label is the name already).
    pub fn with_labels(name: &str, labels: std::collections::BTreeMap<String, String>) -> Self {
        let mut info = Self::named(name);
        info.labels.extend(labels);
        info.labels
            .insert(CLUSTER_NAME_LABEL.to_string(), name.to_string());
        info
    }

    /// One label's value.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }
}

impl Default for ClusterInfo {
    fn default() -> Self {
        Self::local()
    }
}

/// Everything the host observed for one primary object (JSON text).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReconcileRequest {
    pub primary: String,
    pub children: Vec<String>,
    pub deleting: bool,
}

/// An owned object to delete.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EventType {
    Normal,
    Warning,
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        })
    }
}

/// A Kubernetes Event to record on the primary object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    #[serde(rename = "type")]
    pub event_type: EventType,
    pub reason: String,
    pub message: String,
}

/// The desired state a plugin returns (JSON text for objects and status).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReconcileResponse {
    pub apply: Vec<String>,
    pub delete: Vec<ObjectRef>,
    pub status: Option<String>,
    pub events: Vec<Event>,
    pub requeue_after_ms: Option<u64>,
    pub finalized: bool,
}

impl ReconcileResponse {
    /// Total bytes of JSON text in the response: what the output cap limits.
    pub fn text_len(&self) -> usize {
        self.apply.iter().map(String::len).sum::<usize>()
            + self.status.as_ref().map_or(0, String::len)
            + self
                .events
                .iter()
                .map(|e| e.reason.len() + e.message.len())
                .sum::<usize>()
            + self
                .delete
                .iter()
                .map(|d| d.name.len() + d.kind.len() + d.api_version.len())
                .sum::<usize>()
    }
}

/// Log levels of the `log` import.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

/// Builder-style construction, so a plugin's `metadata()` reads as a declaration.
impl PluginMetadata {
    pub fn new(name: impl Into<String>, version: impl Into<String>, primary: KindRef) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            primary,
            owns: Vec::new(),
            reads: Vec::new(),
            writes: Vec::new(),
            finalizer: None,
            hints: Hints::default(),
            triggers: Vec::new(),
        }
    }

    /// Declares which changes of objects of `kind` (the primary, an owned
    /// kind or a mapped read kind) wake their primary: any one of
    /// `changes`. Without it, every change does.
    pub fn wake_on(mut self, kind: KindRef, changes: impl IntoIterator<Item = Change>) -> Self {
        self.triggers.push(KindTrigger {
            kind,
            wake_on: changes.into_iter().collect(),
        });
        self
    }

    /// Declares an owned child kind.
    pub fn owns(mut self, kind: KindRef) -> Self {
        self.owns.push(kind);
        self
    }

    /// Declares a read kind, how its events map to a primary, and whether only
    /// its metadata is needed. The plugin may read it in any namespace.
    pub fn reads(mut self, kind: KindRef, maps_by: MapRule, metadata_only: bool) -> Self {
        self.reads.push(ReadKind {
            kind,
            maps_by,
            metadata_only,
            same_namespace: false,
        });
        self
    }

    /// Declares a read kind like [`Self::reads`], confined to the primary's
    /// namespace: reading it in another namespace is an error.
    pub fn reads_in_namespace(
        mut self,
        kind: KindRef,
        maps_by: MapRule,
        metadata_only: bool,
    ) -> Self {
        self.reads.push(ReadKind {
            kind,
            maps_by,
            metadata_only,
            same_namespace: true,
        });
        self
    }

    /// Declares a kind the plugin patches without owning it.
    pub fn writes(mut self, kind: KindRef) -> Self {
        self.writes.push(kind);
        self
    }

    pub fn finalizer(mut self, finalizer: impl Into<String>) -> Self {
        self.finalizer = Some(finalizer.into());
        self
    }

    pub fn hints(mut self, hints: Hints) -> Self {
        self.hints = hints;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> KindRef {
        KindRef::new("", "v1", "Pod")
    }

    fn confined() -> PluginMetadata {
        PluginMetadata::new("podset", "1", KindRef::new("example.com", "v1", "PodSet"))
            .reads_in_namespace(pod(), MapRule::Label("podset".into()), true)
            .reads(KindRef::new("", "v1", "Secret"), MapRule::None, false)
    }

    #[test]
    fn a_same_namespace_read_kind_is_read_only_in_the_primarys_namespace() {
        let m = confined();
        assert_eq!(
            m.check_read(&pod(), Some("team-a"), Some("team-a")),
            Ok(Some("team-a"))
        );
        assert_eq!(
            m.check_read(&pod(), None, Some("team-a")),
            Ok(Some("team-a")),
            "no namespace means the primary's, not every namespace"
        );
        let err = m
            .check_read(&pod(), Some("kube-system"), Some("team-a"))
            .unwrap_err();
        assert!(
            err.contains("v1 Pod a same-namespace read kind")
                && err.contains("\"team-a\"")
                && err.contains("\"kube-system\""),
            "{err}"
        );
    }

    #[test]
    fn other_read_kinds_and_cluster_scoped_primaries_read_across_namespaces() {
        let m = confined();
        let secret = KindRef::new("", "v1", "Secret");
        assert_eq!(
            m.check_read(&secret, Some("other"), Some("team-a")),
            Ok(Some("other"))
        );
        assert_eq!(m.check_read(&secret, None, Some("team-a")), Ok(None));
        assert_eq!(m.check_read(&pod(), Some("other"), None), Ok(Some("other")));
        assert_eq!(m.check_read(&pod(), None, None), Ok(None));
        assert!(
            m.check_read(&KindRef::new("", "v1", "Node"), None, None)
                .unwrap_err()
                .contains("did not declare v1 Node")
        );
    }

    #[test]
    fn same_namespace_is_part_of_the_serialised_metadata() {
        let text = serde_json::to_string(&confined()).unwrap();
        assert!(text.contains("\"sameNamespace\":true"), "{text}");
        let back: PluginMetadata = serde_json::from_str(&text).unwrap();
        assert_eq!(back, confined());
        let old: ReadKind = serde_json::from_str(
            r#"{"apiVersion": "v1", "kind": "Pod", "mapsBy": {"rule": "none"}}"#,
        )
        .unwrap();
        assert!(!old.same_namespace, "absent means across namespaces");
    }
}
