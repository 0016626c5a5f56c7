//! What a plugin can observe during one reconcile, beyond its primary object.

use serde::de::DeserializeOwned;

use crate::error::Error;
use reconciler_contract::{ClusterInfo, KindRef, LogLevel};

/// The host's side of the boundary, as the SDK sees it.
///
/// Inside Wasm it is backed by the WIT imports; in native tests by
/// [`crate::testing::Harness`]. Plugins never implement it; they use
/// [`Context`].
pub trait HostApi {
    fn get(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, String>;
    fn list(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        selector: &str,
    ) -> Result<Vec<String>, String>;
    fn now_millis(&self) -> i64;
    fn cluster(&self) -> ClusterInfo;
    fn log(&self, level: LogLevel, message: &str, fields: &[(String, String)]);
}

/// Read access to the cluster as the host's cache holds it, the owned
/// children observed for this primary, the clock and the log.
///
/// Everything is parsed lazily and only into the type you ask for: list Pods
/// as [`crate::PartialObject`] when names and labels are all you need, and the
/// rest of each Pod is skipped rather than built.
pub struct Context<'a> {
    host: &'a dyn HostApi,
    children: &'a [String],
    deleting: bool,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct TypeHeader {
    api_version: String,
    kind: String,
}

impl<'a> Context<'a> {
    pub(crate) fn new(host: &'a dyn HostApi, children: &'a [String], deleting: bool) -> Self {
        Self {
            host,
            children,
            deleting,
        }
    }

    /// True when the primary has a deletionTimestamp: clean up, then return
    /// [`crate::Response::finalized`].
    pub fn deleting(&self) -> bool {
        self.deleting
    }

    /// The host's clock (virtual in tests and simulations).
    pub fn now(&self) -> k8s_openapi::jiff::Timestamp {
        k8s_openapi::jiff::Timestamp::from_millisecond(self.host.now_millis())
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
    }

    /// The cluster this object lives in: `local` for the host's own (and
    /// in `simulate`, `test` and the harness unless told otherwise), or the
    /// member cluster's name, with its source's labels. Everything else the
    /// reconcile sees and does stays within this cluster; ask only to
    /// decide differently per cluster:
    ///
    /// ```ignore
    /// let replicas = match ctx.cluster().label("tier") {
    ///     Some("production") => spec.size,
    ///     _ => 1,
    /// };
    /// ```
    pub fn cluster(&self) -> ClusterInfo {
        self.host.cluster()
    }

    /// Owned children of kind `K` that the host observed for this primary.
    pub fn children<K>(&self) -> Result<Vec<K>, Error>
    where
        K: k8s_openapi::Resource + DeserializeOwned,
    {
        self.children_of_kind(&KindRef::of::<K>())
    }

    /// Owned children of `kind`, parsed as `T` (for custom kinds).
    pub fn children_of_kind<T: DeserializeOwned>(&self, kind: &KindRef) -> Result<Vec<T>, Error> {
        let mut out = Vec::new();
        for child in self.children {
            let header: TypeHeader =
                serde_json::from_str(child).map_err(|e| Error::parse("a child object", e))?;
            if KindRef::from_api_version(&header.api_version, &header.kind) == *kind {
                out.push(
                    serde_json::from_str(child)
                        .map_err(|e| Error::parse(&format!("a {kind} child"), e))?,
                );
            }
        }
        Ok(out)
    }

    /// One object of kind `K` from the cache.
    pub fn get<K>(&self, namespace: Option<&str>, name: &str) -> Result<Option<K>, Error>
    where
        K: k8s_openapi::Resource + DeserializeOwned,
    {
        self.get_as(&KindRef::of::<K>(), namespace, name)
    }

    /// One object of `kind` from the cache, parsed as `T`.
    pub fn get_as<T: DeserializeOwned>(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<T>, Error> {
        let found = self.host.get(kind, namespace, name).map_err(Error::Host)?;
        found
            .map(|json| {
                serde_json::from_str(&json).map_err(|e| Error::parse(&format!("{kind} {name}"), e))
            })
            .transpose()
    }

    /// Objects of kind `K` matching a label selector (`""` for all).
    pub fn list<K>(&self, namespace: Option<&str>, selector: &str) -> Result<Vec<K>, Error>
    where
        K: k8s_openapi::Resource + DeserializeOwned,
    {
        self.list_as(&KindRef::of::<K>(), namespace, selector)
    }

    /// Objects of `kind` matching a label selector, each parsed as `T`: use
    /// [`crate::PartialObject`] to read only metadata.
    pub fn list_as<T: DeserializeOwned>(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        selector: &str,
    ) -> Result<Vec<T>, Error> {
        let items = self
            .host
            .list(kind, namespace, selector)
            .map_err(Error::Host)?;
        items
            .iter()
            .map(|json| {
                serde_json::from_str(json).map_err(|e| Error::parse(&format!("a listed {kind}"), e))
            })
            .collect()
    }

    /// A structured log entry, tagged by the host with plugin and object.
    pub fn log(&self, level: LogLevel, message: &str, fields: &[(&str, &str)]) {
        let fields: Vec<(String, String)> = fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.host.log(level, message, &fields);
    }

    pub fn info(&self, message: &str) {
        self.log(LogLevel::Info, message, &[]);
    }

    pub fn warn(&self, message: &str) {
        self.log(LogLevel::Warn, message, &[]);
    }
}
