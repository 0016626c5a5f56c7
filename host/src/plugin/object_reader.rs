//! What the cache import reads from.

use reconciler_sdk::KindRef;
use reconciler_sdk::contract::Projection;
use reconciler_sdk::memory_cache::MemoryCache;

/// The host cache as one reconcile sees it. The runtime enforces that the
/// plugin asks only for kinds it declared (same-namespace read kinds only in
/// the primary's namespace), and picks the projection from its metadata;
/// implementations just answer.
pub trait ObjectReader: Send + Sync {
    /// One object as JSON.
    fn get(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
        projection: Projection,
    ) -> Option<String>;
    /// Objects as JSON, ordered by namespace then name; `Err` for a selector
    /// that does not parse.
    fn list(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        selector: &str,
        projection: Projection,
    ) -> Result<Vec<String>, String>;
}

impl ObjectReader for MemoryCache {
    fn get(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        name: &str,
        projection: Projection,
    ) -> Option<String> {
        self.get_json(kind, namespace, name, projection)
    }

    fn list(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        selector: &str,
        projection: Projection,
    ) -> Result<Vec<String>, String> {
        self.list_json(kind, namespace, selector, projection)
    }
}
