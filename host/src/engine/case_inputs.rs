//! The inputs of a reconcile, kept so `explain --as-case` can write it as a
//! golden case later: made at every reconcile, read rarely, so they are
//! kept as the texts the cache already holds (shared, not copied), and the
//! case is made only when asked for.

use std::sync::Arc;

use reconciler_contract::{ClusterInfo, KindRef};
use serde_json::Value;

use super::primary::Primary;
use crate::golden::recorder::{CaseParts, case_from, case_name};
use crate::plugin::{DesiredObject, ValidResponse, WriteRole};

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
    answer: Result<KeptAnswer, String>,
}

/// A plugin's answer as kept: its objects and status written out, a tenth
/// of the memory of the parsed trees, and one allocation to free each
/// rather than one per node.
#[derive(Debug)]
struct KeptAnswer {
    apply: Vec<(KindRef, WriteRole, String)>,
    status: Option<String>,
    /// The rest, small: deletes, Events, the requeue, finalized.
    rest: ValidResponse,
}

impl KeptAnswer {
    fn of(response: &ValidResponse) -> Self {
        let text = |v: &Value| serde_json::to_string(v).unwrap_or_default();
        Self {
            apply: response
                .apply
                .iter()
                .map(|d| (d.kind.clone(), d.role, text(&d.object)))
                .collect(),
            status: response
                .status
                .as_ref()
                .and_then(|s| serde_json::to_string(s).ok()),
            rest: ValidResponse {
                apply: Vec::new(),
                delete: response.delete.clone(),
                status: None,
                events: response.events.clone(),
                requeue_after: response.requeue_after,
                finalized: response.finalized,
            },
        }
    }

    fn size(&self) -> usize {
        let events: usize = self
            .rest
            .events
            .iter()
            .map(|e| e.reason.len() + e.message.len() + 64)
            .sum();
        self.apply
            .iter()
            .map(|(_, _, t)| t.len() + 64)
            .sum::<usize>()
            + self.status.as_ref().map_or(0, String::len)
            + self.rest.delete.len() * 128
            + events
            + 128
    }

    /// The answer parsed back; `None` if a text no longer parses (never:
    /// they were written from values).
    fn response(&self) -> Option<ValidResponse> {
        let apply = self
            .apply
            .iter()
            .map(|(kind, role, text)| {
                Some(DesiredObject {
                    kind: kind.clone(),
                    role: *role,
                    object: serde_json::from_str(text).ok()?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        let status = match &self.status {
            Some(text) => Some(serde_json::from_str(text).ok()?),
            None => None,
        };
        Some(ValidResponse {
            apply,
            status,
            ..self.rest.clone()
        })
    }
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
    /// The inputs of `given`: the primary's text is the one the plugin was
    /// given, shared.
    pub fn of(given: Given<'_>) -> Self {
        let key = &given.primary.object_key;
        let primary = given.primary.json.clone();
        let answer = given.answer.map(KeptAnswer::of);
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
        }
    }

    /// About what they cost: the texts (counted whole, though the cache may
    /// share them) and the answer.
    pub fn size(&self) -> usize {
        self.primary.len()
            + self.children.iter().map(|c| c.len()).sum::<usize>()
            + self.reads.iter().map(String::len).sum::<usize>()
            + self
                .answer
                .as_ref()
                .map_or_else(String::len, KeptAnswer::size)
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
        let answer = match &self.answer {
            Ok(kept) => Ok(kept.response()?),
            Err(error) => Err(error.clone()),
        };
        let parts = CaseParts {
            plugin: &self.plugin,
            version: &self.version,
            primary: &primary,
            objects,
            now_millis: self.now_millis,
            cluster: &self.cluster,
            answer: answer.as_ref().map_err(Clone::clone),
        };
        let (_, case) = case_from(parts, "the decision journal", false)?;
        serde_json::to_string(&case).ok()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use reconciler_contract::types::{Event, EventType};
    use serde_json::json;

    use super::*;

    #[test]
    fn a_kept_answer_reads_back_as_the_plugin_gave_it_and_counts_its_text() {
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"replicas": 3, "template": {"spec": {"containers": [{"image": "nginx:1"}]}}}});
        let status = json!({"podNames": ["web-1", "web-2"], "ratio": 1.5});
        let response = ValidResponse {
            apply: vec![DesiredObject {
                kind: KindRef::new("apps", "v1", "Deployment"),
                role: WriteRole::Owned,
                object: deployment.clone(),
            }],
            delete: Vec::new(),
            status: status.as_object().cloned(),
            events: vec![Event {
                event_type: EventType::Normal,
                reason: "Scaled".into(),
                message: "to 3".into(),
            }],
            requeue_after: Some(Duration::from_secs(30)),
            finalized: false,
        };
        let kept = KeptAnswer::of(&response);
        assert_eq!(kept.response(), Some(response));
        let text = deployment.to_string().len() + status.to_string().len();
        assert!(kept.size() >= text, "{} < {text}", kept.size());
        assert!(kept.size() < 2 * text + 512, "{}", kept.size());
    }
}
