//! A member's client from its kubeconfig: the one place a kubeconfig a
//! source gave turns into a connection, so the trust checks, the
//! credential command's timeout and the withholding of the parser's words
//! cannot be skipped by any source.

use std::time::Duration;

use crate::cluster::kubernetes::client_rate_limit::RateLimit;
use crate::fleet::kubeconfig_trust::{self, KubeconfigTrust};

/// How long building a member's client may take: with `exec` allowed, a
/// credential command runs then, and one that hangs must not hold the
/// member's source for ever.
pub const CREDENTIAL_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a member's kubeconfig gave no client.
#[derive(Debug, thiserror::Error)]
pub enum EngageError {
    /// It asks for what its source may not (a command, a file, no TLS).
    #[error(transparent)]
    Refused(#[from] kubeconfig_trust::Refused),
    /// It does not make a client; the text is free of its credentials.
    #[error("{0}")]
    NoClient(String),
}

/// A client for a kubeconfig, and the server it names, if `trust` lets the
/// kubeconfig ask what it asks.
///
/// Building the client runs the kubeconfig's credential command, if it has
/// one (and may: see [`KubeconfigTrust`]); that happens on a blocking thread
/// and is given up after [`CREDENTIAL_TIMEOUT`], so a command that hangs
/// holds neither the async workers nor the other members. No command is
/// interactive: a host has no one to answer it, and its stderr is kept out
/// of the host's own.
pub async fn client_for(
    kubeconfig: &str,
    trust: &KubeconfigTrust,
    request_timeout: Option<Duration>,
    rate: Option<RateLimit>,
) -> Result<(kube::Client, String), EngageError> {
    let mut parsed = kube::config::Kubeconfig::from_yaml(kubeconfig).map_err(|e| {
        EngageError::NoClient(match trust {
            KubeconfigTrust::Operator => format!("not a kubeconfig: {e}"),
            // A parser's message can quote the value it tripped on, and a
            // Secret's values are credentials; its Events are read by more
            // people than the Secret itself.
            KubeconfigTrust::FromCluster(_) => "not a kubeconfig: it does not parse as one (the parser's words are withheld, as they can quote the Secret's values; check it with `kubectl --kubeconfig FILE version`)".into(),
        })
    })?;
    kubeconfig_trust::check(&parsed, trust)?;
    for user in parsed
        .auth_infos
        .iter_mut()
        .filter_map(|u| u.auth_info.as_mut())
    {
        if let Some(exec) = user.exec.as_mut() {
            exec.interactive_mode = Some(kube::config::ExecInteractiveMode::Never);
        }
    }
    let config =
        kube::Config::from_custom_kubeconfig(parsed, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| {
                EngageError::NoClient(format!("the kubeconfig does not configure a client: {e}"))
            })?;
    let server = config.cluster_url.to_string();
    let build = tokio::task::spawn_blocking(move || {
        crate::cluster::kubernetes::api_client::limited_client_from_config(
            config,
            request_timeout,
            rate,
        )
        .map_err(|e| EngageError::NoClient(format!("{e:#}")))
    });
    let client = match tokio::time::timeout(CREDENTIAL_TIMEOUT, build).await {
        Ok(Ok(built)) => built?,
        Ok(Err(e)) => {
            return Err(EngageError::NoClient(format!(
                "building its client failed: {e}"
            )));
        }
        Err(_) => {
            return Err(EngageError::NoClient(format!(
                "its credential command did not finish within {} s",
                CREDENTIAL_TIMEOUT.as_secs()
            )));
        }
    };
    Ok((client, server))
}

#[cfg(test)]
mod tests {

    use super::*;

    #[tokio::test]
    async fn a_kubeconfig_that_configures_no_client_is_refused_saying_why() {
        let Err(err) =
            client_for("not: [a kubeconfig", &KubeconfigTrust::Operator, None, None).await
        else {
            panic!("a client from a broken kubeconfig");
        };
        assert!(err.to_string().contains("not a kubeconfig"), "{err}");
        // From a Secret, the parser's words (which can quote a value) are
        // withheld.
        let quoting = "clusters: {token-abc123: [";
        let Err(err) = client_for(
            quoting,
            &KubeconfigTrust::FromCluster(Default::default()),
            None,
            None,
        )
        .await
        else {
            panic!("a client from a broken kubeconfig");
        };
        let text = err.to_string();
        assert!(
            text.contains("not a kubeconfig") && !text.contains("abc123"),
            "{text}"
        );
        let empty = "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n";
        let Err(err) = client_for(empty, &KubeconfigTrust::Operator, None, None).await else {
            panic!("a client from an empty kubeconfig");
        };
        assert!(
            err.to_string().contains("does not configure a client"),
            "{err}"
        );
    }
}
