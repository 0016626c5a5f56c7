//! AdmissionReview (`admission.k8s.io/v1`) in and out.
//!
//! The API server sends a review about one object; the host finds the
//! plugin the webhook path names, checks that the object is of that
//! plugin's primary kind (a plugin never sees another kind's objects, even
//! if a webhook configuration were edited to send them), runs the phase the
//! path names, and answers with the verdict, the warnings and, when
//! defaulting changed the object, a base64 JSON patch.

use base64::Engine as _;
use reconciler_contract::{AdmissionRequest, KindRef, Operation, UserInfo};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::plugin::{AdmissionDecision, AdmissionPhase, LoadedPlugin};

/// The part of an AdmissionReview's request the host reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewRequest {
    pub uid: String,
    pub kind: GroupVersionKind,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    pub operation: Operation,
    #[serde(default)]
    pub user_info: UserInfo,
    /// Kept as the text it came as: the plugin gets text, and a parsed
    /// tree of a hostile object (many small numbers) is ten times its size.
    #[serde(default)]
    pub object: Option<Box<RawValue>>,
    #[serde(default)]
    pub old_object: Option<Box<RawValue>>,
    #[serde(default)]
    pub dry_run: Option<bool>,
}

#[derive(Debug, Deserialize)]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: String,
    pub version: String,
    pub kind: String,
}

#[derive(Debug, Deserialize)]
struct Review {
    request: Option<ReviewRequest>,
}

/// Why a review could not be answered with a verdict.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("not an AdmissionReview: {0}")]
    Malformed(String),
    #[error("the AdmissionReview has no request")]
    NoRequest,
}

/// Parses the body of a webhook call.
pub fn parse(body: &[u8]) -> Result<ReviewRequest, ReviewError> {
    let review: Review =
        serde_json::from_slice(body).map_err(|e| ReviewError::Malformed(e.to_string()))?;
    review.request.ok_or(ReviewError::NoRequest)
}

/// `namespace/name` of the reviewed object, for logs and messages.
fn object_name(request: &ReviewRequest) -> String {
    format!(
        "{}/{}",
        request.namespace.as_deref().unwrap_or_default(),
        request.name.as_deref().unwrap_or_default()
    )
}

/// The decision for a parsed review. `plugin` is the one the path names,
/// or none when no loaded plugin has that name (removed since the webhook
/// was registered): that is a failure, answered by denying, since the
/// webhook's own failure policy does not apply to an answer.
pub fn decide(
    request: &ReviewRequest,
    plugin: Option<&LoadedPlugin>,
    plugin_name: &str,
    phase: AdmissionPhase,
    now_millis: i64,
) -> AdmissionDecision {
    let refuse = |message: String| AdmissionDecision {
        allowed: false,
        message: Some(message.clone()),
        warnings: Vec::new(),
        patch: Vec::new(),
        failure: Some(message),
    };
    let Some(plugin) = plugin else {
        return refuse(format!(
            "reconciler-host serves no plugin named {plugin_name}: it was removed, or its webhook configuration is stale"
        ));
    };
    let kind = KindRef::new(
        &request.kind.group,
        &request.kind.version,
        &request.kind.kind,
    );
    if kind != plugin.metadata().primary {
        return refuse(format!(
            "plugin {plugin_name} serves admission only for its primary kind {}, not {}",
            plugin.metadata().primary,
            kind
        ));
    }
    let admission = AdmissionRequest {
        operation: request.operation,
        object: request.object.as_ref().map(|o| o.get().to_string()),
        old_object: request.old_object.as_ref().map(|o| o.get().to_string()),
        user_info: request.user_info.clone(),
        dry_run: request.dry_run.unwrap_or(false),
    };
    plugin.admit_in(
        phase,
        admission,
        &request.uid,
        &object_name(request),
        now_millis,
    )
}

/// The AdmissionReview the host answers with.
pub fn response(uid: &str, decision: &AdmissionDecision) -> Value {
    let mut response = json!({"uid": uid, "allowed": decision.allowed});
    if !decision.allowed {
        response["status"] = json!({
            "code": 403,
            "message": decision.message.clone().unwrap_or_default(),
        });
    }
    if !decision.warnings.is_empty() {
        response["warnings"] = json!(decision.warnings);
    }
    if decision.allowed && !decision.patch.is_empty() {
        let patch = serde_json::to_vec(&decision.patch).unwrap_or_default();
        response["patchType"] = json!("JSONPatch");
        response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(patch));
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_review_request_is_read_with_what_the_plugin_needs() {
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "kind": {"group": "example.com", "version": "v1alpha1", "kind": "KubernetesCluster"},
                "resource": {"group": "example.com", "version": "v1alpha1", "resource": "kubernetesclusters"},
                "name": "prod", "namespace": "default", "operation": "UPDATE",
                "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
                "object": {"spec": {"masters": 5}}, "oldObject": {"spec": {"masters": 3}}, "dryRun": true}});
        let request = parse(body.to_string().as_bytes()).unwrap();
        assert_eq!(request.uid, "u-1");
        assert_eq!(request.operation, Operation::Update);
        assert_eq!(request.user_info.username, "alice");
        assert_eq!(request.dry_run, Some(true));
        assert_eq!(object_name(&request), "default/prod");
    }

    #[test]
    fn garbage_is_not_a_review() {
        assert!(matches!(parse(b"{"), Err(ReviewError::Malformed(_))));
        assert!(matches!(parse(b"{}"), Err(ReviewError::NoRequest)));
    }

    #[test]
    fn a_denial_carries_the_message_and_a_patch_is_base64_json_patch() {
        let denied = AdmissionDecision {
            allowed: false,
            message: Some("no".into()),
            warnings: vec!["careful".into()],
            patch: vec![json!({"op": "add", "path": "/spec/x", "value": 1})],
            failure: None,
        };
        let r = response("u-1", &denied);
        assert_eq!(r["response"]["uid"], "u-1");
        assert_eq!(r["response"]["allowed"], false);
        assert_eq!(r["response"]["status"]["message"], "no");
        assert_eq!(r["response"]["warnings"], json!(["careful"]));
        assert!(
            r["response"].get("patch").is_none(),
            "a denial is never patched"
        );

        let patched = AdmissionDecision {
            allowed: true,
            ..denied
        };
        let r = response("u-2", &patched);
        assert_eq!(r["response"]["patchType"], "JSONPatch");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(r["response"]["patch"].as_str().unwrap())
            .unwrap();
        let ops: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(ops, json!([{"op": "add", "path": "/spec/x", "value": 1}]));
    }
}
