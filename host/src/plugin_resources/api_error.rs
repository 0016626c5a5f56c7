//! Kubernetes API failures told in one line, for the Plugins' status and
//! Events and the fleet's member Events, which readers see in
//! `kubectl describe`: a whole status object would bury what went wrong.

/// A kube error as one short line: the API server's own message for an
/// API error, not the whole status object.
pub(crate) fn api_error_text(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    }
}
