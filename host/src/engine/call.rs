//! The call stage: the plugin called with its primary and children.
//!
//! One snapshot of the children ([`Shown`]): what the plugin is shown is
//! what it may delete and what is pruned, each by the uid seen here, and
//! the request is the cache's text, not the parsed objects written out
//! again. The call takes a slot of the sandbox's instance pool, shared
//! fairly between plugins ([`call_slots`](super::call_slots)), and runs on
//! the worker or a blocking thread as
//! [`call_placement`](super::call_placement) decides. With `--record`, its
//! reads go through a reader that keeps what it returned, and the call is
//! written as a golden case.

use std::borrow::Cow;
use std::sync::Arc;

use reconciler_contract::{KindRef, ReconcileRequest};
use serde_json::Value;
use tracing::Instrument as _;

use super::call_placement::Placed;
use super::call_slots::CallSlots;
use super::case_inputs::{CaseInputs, Given};
use super::controllers::Controller;
use super::decision_notes::Notes;
use super::failure::Failure;
use super::primary::Primary;
use super::shadow_reads::KeptReads;
use super::shared::Shared;
use super::shared_cache::SharedCache;
use crate::cluster::{ClusterBackend, ObjectKey};
use crate::golden::recorder::{CaseRecorder, Recording, RecordingReader};
use crate::plugin::{LoadedPlugin, ObjectReader, ReconcileInput, ValidResponse};

/// The children a plugin is shown for one reconcile, parsed and as the
/// cache's text.
pub struct Shown {
    pub children: Vec<Value>,
    json: Vec<Arc<str>>,
}

impl Shown {
    /// The children's texts, as the cache holds them.
    pub fn texts(&self) -> &[Arc<str>] {
        &self.json
    }

    /// The children of `primary` of the kinds in `owns`, as cached now.
    pub fn of(cache: &SharedCache, primary: &Value, owns: &[KindRef]) -> Self {
        let (children, json) = cache.children_with_json(primary, owns).into_iter().unzip();
        Self { children, json }
    }

    /// The request a plugin is sent for `primary` with these children: the
    /// cache's text, as it was when they were shown.
    pub fn request(&self, primary: &Primary) -> ReconcileRequest {
        ReconcileRequest {
            primary: primary.json.to_string(),
            children: self.json.iter().map(|json| json.to_string()).collect(),
            deleting: primary.deleting,
        }
    }

    /// The object `key` names as cached now: a child the plugin was shown
    /// is current if the cache still holds the very text it was parsed
    /// from, with no second parse.
    pub fn current<'a>(&'a self, cache: &SharedCache, key: &ObjectKey) -> Option<Cow<'a, Value>> {
        let json = cache.json_of(key)?;
        match self.json.iter().position(|c| Arc::ptr_eq(c, &json)) {
            Some(i) => Some(Cow::Borrowed(&self.children[i])),
            None => cache.get(key).map(Cow::Owned),
        }
    }
}

/// The sandbox's instance pool and, with `--record`, where calls are
/// written as golden cases.
pub struct PluginCalls {
    /// Calls at once, shared by all plugins.
    pub slots: Arc<CallSlots>,
    pub recorder: Option<Arc<CaseRecorder>>,
}

impl Default for PluginCalls {
    fn default() -> Self {
        Self {
            // No pool given: bounded by each plugin's concurrency only.
            slots: CallSlots::new(usize::MAX / 2),
            recorder: None,
        }
    }
}

impl PluginCalls {
    /// Calls `plugin` (the version `controller` serves) for `primary`,
    /// showing it `shown`, at `now_millis`: its response, checked by the
    /// runtime. Its reads go through `kept` when given (a candidate will be
    /// answered the same).
    #[allow(clippy::too_many_arguments)]
    pub async fn call<B: ClusterBackend>(
        &self,
        shared: &Shared<B>,
        controller: &Controller,
        plugin: &Arc<LoadedPlugin>,
        primary: &Primary,
        shown: &Shown,
        now_millis: i64,
        kept: Option<Arc<KeptReads>>,
        notes: Option<&mut Notes>,
    ) -> Result<ValidResponse, Failure> {
        let metadata = plugin.metadata();
        let request = shown.request(primary);
        let base: Arc<dyn ObjectReader> = match kept {
            Some(kept) => kept,
            None => shared.cache.clone(),
        };
        let reads = (self.recorder.is_some() || notes.is_some())
            .then(|| Arc::new(RecordingReader::new(base.clone())));
        let reader: Arc<dyn ObjectReader> = match &reads {
            Some(reads) => reads.clone(),
            None => base,
        };
        let input = ReconcileInput {
            request,
            primary_namespace: primary.key.namespace.clone(),
            object: primary.key.to_string(),
            reader,
            now_millis,
            cluster: shared.cluster.clone(),
        };
        let slot = self
            .slots
            .acquire(&metadata.name, controller.concurrency())
            .await;
        let call_span = tracing::info_span!(
            "plugin_call",
            plugin = %metadata.name,
            version = %metadata.version
        );
        let (answer, placed) = controller
            .placement
            .reconcile(plugin, input, slot)
            .instrument(call_span)
            .await
            .map_err(|e| Failure::new("HostError", format!("the plugin call panicked: {e}")))?;
        if placed == Placed::WorkerThenBlocking {
            tracing::debug!(
                "the call ran past the brief budget on the worker and was made again on a blocking thread"
            );
        }
        if let Some(reads) = &reads {
            let recording = Recording {
                plugin: &metadata.name,
                version: &metadata.version,
                primary: &primary.object,
                children: &shown.children,
                reads,
                now_millis,
                cluster: &shared.cluster,
                answer: answer.as_ref(),
            };
            if let Some(recorder) = &self.recorder {
                recorder.record(&recording);
            }
            if let Some(notes) = notes {
                notes.reads = reads.reads_made();
                if shared.journal.keeps_cases() {
                    let given = Given {
                        plugin: &metadata.name,
                        version: &metadata.version,
                        primary,
                        children: shown.texts(),
                        reads: reads.take_texts(),
                        now_millis,
                        cluster: &shared.cluster,
                        answer: answer.as_ref().map_err(ToString::to_string),
                    };
                    notes.case = Some(CaseInputs::of(given));
                }
            }
        }
        answer.map_err(|e| Failure::new(e.reason(), e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::cluster::{WatchEvent, WatchEventType};

    #[test]
    fn a_child_unchanged_since_it_was_shown_is_not_parsed_again_and_a_changed_one_is_read_afresh() {
        let cache = SharedCache::new();
        let primary = json!({"apiVersion": "example.com/v1", "kind": "PodSet",
            "metadata": {"name": "web", "namespace": "default", "uid": "p-1"}});
        let pod = |name: &str, image: &str| {
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "uid": format!("u-{name}"),
                    "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "PodSet",
                        "name": "web", "uid": "p-1", "controller": true}]},
                "spec": {"image": image}})
        };
        for name in ["a", "b"] {
            cache.observe(&WatchEvent::new(WatchEventType::Added, pod(name, "v1")));
        }
        let shown = Shown::of(&cache, &primary, &[KindRef::new("", "v1", "Pod")]);
        assert_eq!(shown.children.len(), 2);
        cache.observe(&WatchEvent::new(WatchEventType::Modified, pod("b", "v2")));
        let key = |name: &str| ObjectKey::new(KindRef::new("", "v1", "Pod"), Some("default"), name);
        assert!(matches!(
            shown.current(&cache, &key("a")),
            Some(Cow::Borrowed(_))
        ));
        match shown.current(&cache, &key("b")) {
            Some(Cow::Owned(b)) => assert_eq!(b["spec"]["image"], "v2"),
            other => panic!("read afresh: {other:?}"),
        }
        assert!(shown.current(&cache, &key("never")).is_none());
    }
}
