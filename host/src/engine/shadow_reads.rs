//! The reads of a serving call, kept so its candidate in shadow reads the
//! same: the candidate runs after the serving reconcile has applied (and
//! the cluster may have moved on), so a candidate that asks what the
//! serving version asked is answered what the serving version was, and
//! only what the serving version never asked comes from the cache as it is
//! when the candidate runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use reconciler_contract::memory_cache::{ListBounds, ListJsonError};

use crate::plugin::object_reader::within_bytes;
use crate::plugin::{GetRequest, ListRequest, ObjectReader};

/// A reader that keeps each answer it gave, by the question.
pub struct KeptReads {
    inner: Arc<dyn ObjectReader>,
    answers: Mutex<HashMap<String, Answer>>,
}

#[derive(Clone)]
enum Answer {
    Get(Option<String>),
    List(Vec<String>),
}

fn get_key(request: &GetRequest<'_>) -> String {
    format!("get {request:?}")
}

fn list_key(request: &ListRequest<'_>) -> String {
    format!("list {request:?}")
}

impl KeptReads {
    pub fn new(inner: Arc<dyn ObjectReader>) -> Self {
        Self {
            inner,
            answers: Mutex::default(),
        }
    }

    fn answers(&self) -> MutexGuard<'_, HashMap<String, Answer>> {
        self.answers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn answered(&self, key: &str) -> Option<Answer> {
        self.answers().get(key).cloned()
    }
}

impl ObjectReader for KeptReads {
    fn get(&self, request: &GetRequest<'_>) -> Option<String> {
        let found = self.inner.get(request);
        self.answers()
            .insert(get_key(request), Answer::Get(found.clone()));
        found
    }

    fn list(&self, request: &ListRequest<'_>) -> Result<Vec<String>, String> {
        let listed = self.inner.list(request)?;
        self.answers()
            .insert(list_key(request), Answer::List(listed.clone()));
        Ok(listed)
    }

    fn list_within(
        &self,
        request: &ListRequest<'_>,
        bounds: ListBounds,
    ) -> Result<Vec<String>, ListJsonError> {
        let listed = self.inner.list_within(request, bounds)?;
        self.answers()
            .insert(list_key(request), Answer::List(listed.clone()));
        Ok(listed)
    }
}

/// What a candidate reads through: the serving call's answers where it
/// asks the same, the cache otherwise.
pub struct ReplayedReads {
    pub kept: Arc<KeptReads>,
}

impl ObjectReader for ReplayedReads {
    fn get(&self, request: &GetRequest<'_>) -> Option<String> {
        match self.kept.answered(&get_key(request)) {
            Some(Answer::Get(found)) => found,
            _ => self.kept.inner.get(request),
        }
    }

    fn list(&self, request: &ListRequest<'_>) -> Result<Vec<String>, String> {
        match self.kept.answered(&list_key(request)) {
            Some(Answer::List(listed)) => Ok(listed),
            _ => self.kept.inner.list(request),
        }
    }

    fn list_within(
        &self,
        request: &ListRequest<'_>,
        bounds: ListBounds,
    ) -> Result<Vec<String>, ListJsonError> {
        let Some(Answer::List(listed)) = self.kept.answered(&list_key(request)) else {
            return self.kept.inner.list_within(request, bounds);
        };
        // The candidate's own bound holds, whatever the serving one was.
        within_bytes(listed, bounds.max_bytes)
    }
}

#[cfg(test)]
mod tests {
    use reconciler_contract::memory_cache::MemoryCache;
    use reconciler_contract::{KindRef, Projection};
    use serde_json::json;

    use super::*;

    #[test]
    fn a_candidate_reads_what_the_serving_call_read_even_after_the_cache_moved_on() {
        let pod = |name: &str| {
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "uid": name}})
        };
        let mut before = MemoryCache::new();
        before.insert(pod("a")).unwrap();
        let kept = Arc::new(KeptReads::new(Arc::new(before)));
        let kind = KindRef::new("", "v1", "Pod");
        let list = ListRequest {
            kind: &kind,
            namespace: Some("default"),
            selector: "",
            projection: Projection::Full,
        };
        assert_eq!(kept.list(&list).unwrap().len(), 1);
        // The cache has moved on: the replay still answers the serving
        // call's list, and asks the cache only what was never asked.
        let mut after = MemoryCache::new();
        after.insert(pod("a")).unwrap();
        after.insert(pod("b")).unwrap();
        let moved = Arc::new(KeptReads {
            inner: Arc::new(after),
            answers: Mutex::new(kept.answers().clone()),
        });
        let replay = ReplayedReads { kept: moved };
        assert_eq!(replay.list(&list).unwrap().len(), 1);
        let get = GetRequest {
            kind: &kind,
            namespace: Some("default"),
            name: "b",
            projection: Projection::Full,
        };
        assert!(replay.get(&get).is_some());
        let tight = ListBounds {
            max_bytes: 3,
            max_work: usize::MAX,
            deadline: None,
        };
        assert!(matches!(
            replay.list_within(&list, tight),
            Err(ListJsonError::TooLarge { listed: 0, .. })
        ));
    }
}
