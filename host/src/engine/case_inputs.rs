//! The inputs of a reconcile, kept so `explain --as-case` can write it as a
//! golden case later: made at every reconcile, read rarely, so they are
//! kept as the texts the cache already holds (shared, not copied), and the
//! case is made only when asked for.

use std::sync::Arc;

use reconciler_contract::ClusterInfo;
use reconciler_contract::memory_cache::resource_version_of;
use serde_json::Value;

use super::primary::Primary;
use super::shared_cache::SharedCache;
use crate::golden::recorder::{CaseParts, case_from, case_name};
use crate::plugin::ValidResponse;

/// How many times its text a parsed JSON tree takes in memory.
const TREE_OVER_TEXT: usize = 10;

/// What one reconcile's plugin call was given and answered.
#[derive(Debug)]
pub struct CaseInputs {
    pub plugin: String,
    pub version: String,
    /// The case file's name (without `.yaml`).
    pub name: String,
    primary: Arc<str>,
    children: Vec<Arc<str>>,
    /// The texts the plugin's reads returned.
    reads: Vec<String>,
    now_millis: i64,
    cluster: ClusterInfo,
    answer: Result<ValidResponse, String>,
    answer_bytes: usize,
}

/// What a call was given and answered, as the reconcile has it.
pub struct Given<'a> {
    pub plugin: &'a str,
    pub version: &'a str,
    pub primary: &'a Primary,
    /// The texts of the children it was shown.
    pub children: &'a [Arc<str>],
    pub reads: Vec<String>,
    pub now_millis: i64,
    pub cluster: &'a ClusterInfo,
    pub answer: Result<&'a ValidResponse, String>,
}

impl CaseInputs {
    /// The inputs of `given`, the primary's text taken from `cache` when it
    /// holds the version the plugin was given.
    pub fn of(cache: &SharedCache, given: Given<'_>) -> Self {
        let object = &given.primary.object;
        let key = &given.primary.object_key;
        let primary = cache
            .json_of(key)
            .filter(|text| same_version(text, object))
            .unwrap_or_else(|| object.to_string().into());
        let answer = given.answer.cloned();
        // Held as parsed trees, which take about ten times their text (a
        // Pod: ~3 KiB against ~30 KiB, `cluster::backend`): counted so, or
        // the budget would hold several times what it says.
        let answer_bytes = match &answer {
            Ok(response) => {
                let objects: usize = response.apply.iter().map(|d| approx_len(&d.object)).sum();
                let status: usize = response
                    .status
                    .as_ref()
                    .map_or(0, |s| s.iter().map(|(k, v)| k.len() + approx_len(v)).sum());
                (objects + status) * TREE_OVER_TEXT + 256
            }
            Err(error) => error.len(),
        };
        Self {
            plugin: given.plugin.to_string(),
            version: given.version.to_string(),
            name: case_name(key, given.cluster),
            primary,
            children: given.children.to_vec(),
            reads: given.reads,
            now_millis: given.now_millis,
            cluster: given.cluster.clone(),
            answer,
            answer_bytes,
        }
    }

    /// About what they cost: the texts (counted whole, though the cache may
    /// share them) and the answer.
    pub fn size(&self) -> usize {
        self.primary.len()
            + self.children.iter().map(|c| c.len()).sum::<usize>()
            + self.reads.iter().map(String::len).sum::<usize>()
            + self.answer_bytes
            + self.plugin.len()
            + self.version.len()
            + self.name.len()
            + 256
    }

    /// Inputs of a primary `primary` that answered an empty response,
    /// for tests of what keeps them.
    #[cfg(test)]
    pub fn answered_nothing(plugin: &str, primary: &Value, cluster: &str) -> Self {
        let key = crate::cluster::ObjectKey::of(primary).expect("a primary with a name");
        let cluster = ClusterInfo::named(cluster);
        Self {
            plugin: plugin.to_string(),
            version: "0.1.0".into(),
            name: case_name(&key, &cluster),
            primary: primary.to_string().into(),
            children: Vec::new(),
            reads: Vec::new(),
            now_millis: 0,
            cluster,
            answer: Err("asked to fail".into()),
            answer_bytes: 13,
        }
    }

    /// The golden case, as JSON, Secret values redacted.
    pub fn case(&self) -> Option<String> {
        let parse = |text: &str| serde_json::from_str::<Value>(text).ok();
        let primary = parse(&self.primary)?;
        let objects = self
            .children
            .iter()
            .map(|c| parse(c))
            .chain(self.reads.iter().map(|r| parse(r)))
            .collect::<Option<Vec<Value>>>()?;
        let parts = CaseParts {
            plugin: &self.plugin,
            version: &self.version,
            primary: &primary,
            objects,
            now_millis: self.now_millis,
            cluster: &self.cluster,
            answer: self.answer.as_ref().map_err(Clone::clone),
        };
        let (_, case) = case_from(parts, "the decision journal", false)?;
        serde_json::to_string(&case).ok()
    }
}

fn same_version(text: &str, object: &Value) -> bool {
    let Some(version) = resource_version_of(object) else {
        return false;
    };
    // The cached text names its version near its start; parsing it whole
    // would cost what keeping the text saves.
    text.contains(&format!("\"resourceVersion\":\"{version}\""))
}

/// About how many bytes `value` takes written out, without writing it.
fn approx_len(value: &Value) -> usize {
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        Value::Array(items) => items.iter().map(approx_len).sum::<usize>() + items.len() + 2,
        Value::Object(map) => {
            map.iter()
                .map(|(k, v)| k.len() + 4 + approx_len(v))
                .sum::<usize>()
                + 2
        }
    }
}
