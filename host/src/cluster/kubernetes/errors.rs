//! Turns Kubernetes API failures into `BackendError`s.
//!
//! The engine decides whether to retry from the error's kind alone, so the
//! mapping has to be exact about which failures are worth retrying. A 403 is
//! only actionable if it says which RBAC rule is missing; the API server's
//! message does not always say that in a form an operator can paste into a
//! Role, so every request carries a `Request` describing what was asked and
//! the Forbidden message is built from it.

use crate::cluster::backend::BackendError;

/// What a request asked for, in RBAC terms.
#[derive(Clone, Debug)]
pub(crate) struct Request<'a> {
    /// The RBAC verb: get, list, watch, patch, create, delete.
    pub verb: &'static str,
    /// The API group; empty for the core group.
    pub group: &'a str,
    /// The resource (plural), with `/status` for the status subresource.
    pub resource: String,
    pub namespace: Option<&'a str>,
    /// The object the request was about, for messages (`Deployment default/web`).
    pub target: String,
}

impl Request<'_> {
    /// The rule a Role (or ClusterRole) needs for this request.
    pub fn rbac_rule(&self) -> String {
        let scope = match self.namespace {
            Some(ns) => format!("in namespace \"{ns}\""),
            None => "cluster-wide".to_string(),
        };
        format!(
            "verb \"{}\" on resource \"{}\" in API group \"{}\" {scope}",
            self.verb, self.resource, self.group
        )
    }
}

/// Maps a kube client error for `request` to the engine's error kinds.
pub(crate) fn map(err: kube::Error, request: &Request<'_>) -> BackendError {
    match err {
        kube::Error::Api(status) if is_namespace_terminating(&status) => {
            BackendError::NamespaceTerminating {
                key: request.target.clone(),
                namespace: request.namespace.unwrap_or_default().to_string(),
            }
        }
        kube::Error::Api(status) => from_status(status.code, &status.message, request),
        kube::Error::Discovery(e) => BackendError::UnknownKind {
            kind: format!("{} ({e})", request.target),
        },
        kube::Error::SerdeError(e) => BackendError::Invalid {
            key: request.target.clone(),
            message: format!("unreadable response: {e}"),
        },
        kube::Error::BuildRequest(e) => BackendError::Invalid {
            key: request.target.clone(),
            message: format!("cannot build request: {e}"),
        },
        kube::Error::Service(e) if e.is::<tower::timeout::error::Elapsed>() => {
            BackendError::Transient(format!(
                "{} {}: the API server did not answer within the request timeout (--request-timeout-secs)",
                request.verb, request.target
            ))
        }
        // Transport, timeouts, TLS, token refresh, broken streams: all of these
        // may succeed on a later attempt.
        other => BackendError::Transient(format!("{} {}: {other}", request.verb, request.target)),
    }
}

/// A 403 for a create in a namespace being deleted: not an RBAC problem,
/// and retrying cannot help. The API server says so in a cause.
fn is_namespace_terminating(status: &kube::core::Status) -> bool {
    status.code == 403
        && status
            .details
            .as_ref()
            .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating"))
}

/// What the shard fence's policy says when it refuses a write
/// (`process/rbac/fence.rs` writes it into every refusal).
pub const SHARD_FENCE_REFUSAL: &str = "refused by the reconciler-host shard fence";

/// Maps an HTTP status code (from a response or a watch error event).
pub(crate) fn from_status(code: u16, message: &str, request: &Request<'_>) -> BackendError {
    let key = request.target.clone();
    let message = message.to_string();
    match code {
        409 => BackendError::Conflict { key, message },
        // Not RBAC: the published ring does not name this replica for the
        // object's bucket yet (a move it waits for) or any more (a replica
        // that lost it); a later attempt, on a newer map, may land.
        403 if message.contains(SHARD_FENCE_REFUSAL) => BackendError::Transient(format!(
            "{} {}: the API server's shard fence does not let this replica write it now ({message})",
            request.verb, request.target
        )),
        403 => BackendError::Forbidden {
            message: format!(
                "{} {}: the service account lacks RBAC permission for {} ({message})",
                request.verb,
                request.target,
                request.rbac_rule()
            ),
        },
        401 => BackendError::Forbidden {
            message: format!("{} {}: unauthorized ({message})", request.verb, key),
        },
        404 => BackendError::NotFound { key },
        400 | 422 => BackendError::Invalid { key, message },
        408 | 410 | 429 => BackendError::Transient(format!("{key}: {code} {message}")),
        c if c >= 500 => BackendError::Transient(format!("{key}: {code} {message}")),
        _ => BackendError::Invalid {
            key,
            message: format!("{code} {message}"),
        },
    }
}

/// The HTTP status code of an API error, if it is one.
pub(crate) fn code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Request<'static> {
        Request {
            verb: "patch",
            group: "apps",
            resource: "deployments".into(),
            namespace: Some("team"),
            target: "Deployment team/web".into(),
        }
    }

    #[test]
    fn status_codes_map_to_error_kinds() {
        let r = request();
        assert!(matches!(
            from_status(409, "x", &r),
            BackendError::Conflict { .. }
        ));
        assert!(matches!(
            from_status(422, "x", &r),
            BackendError::Invalid { .. }
        ));
        assert!(matches!(
            from_status(400, "x", &r),
            BackendError::Invalid { .. }
        ));
        assert!(matches!(
            from_status(404, "x", &r),
            BackendError::NotFound { .. }
        ));
        for transient in [429, 500, 503, 504, 410] {
            assert!(
                matches!(from_status(transient, "x", &r), BackendError::Transient(_)),
                "{transient}"
            );
        }
    }

    #[test]
    fn a_shard_fence_refusal_is_retried_not_taken_for_rbac() {
        let refusal = format!(
            "ValidatingAdmissionPolicy 'reconciler-host.shard-fence' with binding 'reconciler-host.shard-fence' denied request: {SHARD_FENCE_REFUSAL}: u/p may not write bucket 0a1"
        );
        let BackendError::Transient(message) = from_status(403, &refusal, &request()) else {
            panic!("not transient");
        };
        assert!(
            message.contains("shard fence") && message.contains("bucket 0a1"),
            "{message}"
        );
    }

    #[test]
    fn forbidden_names_the_missing_rule() {
        let BackendError::Forbidden { message } = from_status(403, "denied", &request()) else {
            panic!("not forbidden");
        };
        for part in ["\"patch\"", "\"deployments\"", "\"apps\"", "\"team\""] {
            assert!(message.contains(part), "{message} lacks {part}");
        }
    }
}
