//! What the cache import reads from.

use reconciler_sdk::KindRef;
use reconciler_sdk::memory_cache::MemoryCache;

/// The host cache as one reconcile sees it. The runtime enforces that the
/// plugin asks only for kinds it declared; implementations just answer.
pub trait ObjectReader: Send + Sync {
    /// One object as JSON.
    fn get(&self, kind: &KindRef, namespace: Option<&str>, name: &str) -> Option<String>;
    /// Objects as JSON, ordered by namespace then name; `Err` for a selector
    /// that does not parse.
    fn list(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        selector: &str,
    ) -> Result<Vec<String>, String>;
}

impl ObjectReader for MemoryCache {
    fn get(&self, kind: &KindRef, namespace: Option<&str>, name: &str) -> Option<String> {
        self.get_json(kind, namespace, name)
    }

    fn list(
        &self,
        kind: &KindRef,
        namespace: Option<&str>,
        selector: &str,
    ) -> Result<Vec<String>, String> {
        self.list_json(kind, namespace, selector)
    }
}
