//! Errors from a client's credentials, told without the credentials.
//!
//! kube's exec-plugin errors carry the command's Debug form (its arguments
//! and every environment variable the kubeconfig set) and the command's
//! whole output; its parse errors can quote what the command printed. A
//! credential command prints credentials, and a kubeconfig's `env` is where
//! secrets are handed to it, so any of those texts in a log line, an Event
//! or `/clusters` publishes them to whoever can read those. Every client the
//! host builds turns kube's auth errors into a [`CredentialError`] first
//! ([`credential_text`] at construction, [`hide_credentials`] on every
//! request): the exit status and a bounded, single-line excerpt of the
//! command's stderr (where such commands explain themselves), never its
//! environment, arguments or stdout.

use std::fmt;

use kube::client::AuthError;

/// The most of a credential command's stderr an error quotes.
pub const STDERR_EXCERPT_CHARS: usize = 240;

/// A client's credentials failed; the text is safe to log and publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialError(pub String);

impl fmt::Display for CredentialError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CredentialError {}

/// What went wrong with a client's credentials, without them.
pub fn credential_text(error: &AuthError) -> String {
    let text = match error {
        AuthError::AuthExecRun { out, .. } => {
            let stderr = excerpt(&out.stderr);
            if stderr.is_empty() {
                format!("the credential command failed ({})", out.status)
            } else {
                format!("the credential command failed ({}): {stderr}", out.status)
            }
        }
        AuthError::AuthExecStart(e) => format!("the credential command did not start: {e}"),
        AuthError::MissingCommand => "the kubeconfig's exec names no command".into(),
        AuthError::ExecPluginFailed => {
            "the credential command's answer has no status (no credentials)".into()
        }
        AuthError::ExecMissingClusterInfo => {
            "the kubeconfig's exec asks for cluster info the kubeconfig does not give".into()
        }
        AuthError::ReadTokenFile(e, path) => {
            format!("cannot read the token file {}: {e}", path.display())
        }
        AuthError::MalformedTokenExpirationDate(_) => {
            "the credential's expiration date is not a date".into()
        }
        AuthError::InvalidBasicAuth(_) | AuthError::InvalidBearerToken(_) => {
            "the credentials are not valid in an HTTP header".into()
        }
        // These quote what a command printed or the provider's settings:
        // only their kind is safe to tell.
        AuthError::AuthExecParse(_) => {
            "the credential command's output is not an ExecCredential".into()
        }
        AuthError::AuthExec(_) | AuthError::ParseTokenKey(_) => {
            "the credential command or auth provider failed (its output is withheld: it may hold credentials)".into()
        }
        _ => "the client's credentials failed (details withheld: they may hold credentials)"
            .into(),
    };
    format!("credentials: {text}")
}

/// The first line-worth of `bytes`: control characters folded into
/// spaces, at most [`STDERR_EXCERPT_CHARS`] characters.
fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let folded: String = text
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(STDERR_EXCERPT_CHARS + 1)
        .collect();
    if folded.chars().count() > STDERR_EXCERPT_CHARS {
        let cut: String = folded.chars().take(STDERR_EXCERPT_CHARS).collect();
        format!("{cut}...")
    } else {
        folded
    }
}

/// For a client's middleware: an auth error becomes a [`CredentialError`];
/// every other error passes unchanged.
pub fn hide_credentials(error: tower::BoxError) -> tower::BoxError {
    match error.downcast::<AuthError>() {
        Ok(auth) => Box::new(CredentialError(credential_text(&auth))),
        Err(other) => other,
    }
}

/// A kube error with any auth error in it told by [`credential_text`].
pub fn kube_error_text(error: &kube::Error) -> String {
    match error {
        kube::Error::Auth(auth) => credential_text(auth),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt as _;
    use std::process::{ExitStatus, Output};

    use super::*;

    #[test]
    fn a_failed_command_tells_its_status_and_stderr_never_its_command_env_or_stdout() {
        let error = AuthError::AuthExecRun {
            cmd: "\"/bin/get-token\" \"--key\" \"arg-secret\" SECRET=\"env-secret\"".into(),
            out: Box::new(Output {
                status: ExitStatus::from_raw(3 << 8),
                stdout: b"{\"status\":{\"token\":\"stdout-secret\"}}".to_vec(),
                stderr: b"token endpoint refused us\nsecond line".to_vec(),
            }),
        };
        // What kube would have said.
        assert!(error.to_string().contains("env-secret"));
        let text = credential_text(&error);
        assert_eq!(
            text,
            "credentials: the credential command failed (exit status: 3): token endpoint refused us second line"
        );
        let hidden = hide_credentials(Box::new(error));
        assert!(hidden.is::<CredentialError>());
        assert_eq!(hidden.to_string(), text);
    }

    #[test]
    fn stderr_is_cut_to_a_bounded_excerpt() {
        let error = AuthError::AuthExecRun {
            cmd: String::new(),
            out: Box::new(Output {
                status: ExitStatus::from_raw(1 << 8),
                stdout: Vec::new(),
                stderr: "x".repeat(10_000).into_bytes(),
            }),
        };
        let text = credential_text(&error);
        assert!(text.len() < STDERR_EXCERPT_CHARS + 80, "{text}");
        assert!(text.ends_with("..."), "{text}");
    }

    #[test]
    fn errors_that_quote_a_commands_output_say_only_their_kind() {
        let error = AuthError::AuthExec("Result is not a string \"leaked-token\"".into());
        assert!(!credential_text(&error).contains("leaked-token"));
        let other: tower::BoxError = Box::new(std::io::Error::other("connection refused"));
        assert_eq!(hide_credentials(other).to_string(), "connection refused");
    }
}
