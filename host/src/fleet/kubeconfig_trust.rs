//! What a member's kubeconfig may ask of the host, by who wrote it.
//!
//! A kubeconfig is not only an address and a credential: it can name a
//! command to run (`exec`, an `auth-provider`'s `cmd-path`), files to read
//! (`tokenFile`, `client-certificate`, `client-key`,
//! `certificate-authority`), and ways to drop the server's authentication
//! (`insecure-skip-tls-verify`, an `http://` server). Whoever writes it then
//! gets the host's process, its files (the service-account token among
//! them) and its network position.
//!
//! So the kubeconfigs the host reads from the cluster (labelled Secrets,
//! Cluster API's) are input, not configuration: they may carry only inline
//! credentials for a TLS-verified server, unless the operator widens that
//! per feature (`run --cluster-secrets-allow`). Files in `--clusters-dir`
//! are the operator's own and may use everything kube supports.
//!
//! Every entry of the kubeconfig is checked, not only the current
//! context's: a refusal names each entry and what it asked for, so the
//! writer can fix all of them at once.

use std::collections::BTreeSet;
use std::fmt;

use kube::config::Kubeconfig;

/// One thing a kubeconfig can ask of the host beyond inline credentials for
/// a verified TLS server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub enum Widening {
    /// `users[].user.exec`: run a credential command in the host (given up
    /// after 30 s).
    Exec,
    /// `users[].user.auth-provider`: a provider that may run `cmd-path` or
    /// send the kubeconfig's secrets to an identity provider it names.
    AuthProvider,
    /// `tokenFile`, `client-certificate`, `client-key`,
    /// `certificate-authority`: read a file of the host's.
    Files,
    /// `insecure-skip-tls-verify`: send credentials to whoever answers.
    Insecure,
    /// An `http://` server: credentials in clear text.
    Http,
}

impl Widening {
    /// The name `--cluster-secrets-allow` takes.
    pub fn flag_value(self) -> &'static str {
        match self {
            Widening::Exec => "exec",
            Widening::AuthProvider => "auth-provider",
            Widening::Files => "files",
            Widening::Insecure => "insecure",
            Widening::Http => "http",
        }
    }
}

/// Who wrote a kubeconfig, and so what it may ask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KubeconfigTrust {
    /// The operator's own file (`--clusters-dir`): everything kube supports.
    Operator,
    /// Read from the cluster (a Secret): inline credentials for a verified
    /// TLS server, plus what the operator allowed.
    FromCluster(BTreeSet<Widening>),
}

/// One entry of a kubeconfig that asks for something not allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub widening: Widening,
    /// Where it is: `users[admin].exec`, `clusters[prod].server`.
    pub place: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.widening {
            Widening::Exec => "runs a command in the host",
            Widening::AuthProvider => "uses an auth provider (which can run a command)",
            Widening::Files => "reads a file of the host's",
            Widening::Insecure => "skips verifying the server's certificate",
            Widening::Http => "sends credentials over plain http",
        };
        write!(f, "{} {what}", self.place)
    }
}

/// Everything a kubeconfig asked for and may not have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused(pub Vec<Refusal>);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let items: Vec<String> = self.0.iter().map(Refusal::to_string).collect();
        let flags: BTreeSet<&str> = self.0.iter().map(|r| r.widening.flag_value()).collect();
        write!(
            f,
            "a kubeconfig read from the cluster may hold only inline credentials for an https server it verifies, and this one asks for more: {}; the host's operator can allow it with --cluster-secrets-allow {}",
            items.join("; "),
            flags.into_iter().collect::<Vec<_>>().join(",")
        )
    }
}

impl std::error::Error for Refused {}

/// Checks every cluster and user entry of `kubeconfig` against `trust`.
pub fn check(kubeconfig: &Kubeconfig, trust: &KubeconfigTrust) -> Result<(), Refused> {
    let KubeconfigTrust::FromCluster(allowed) = trust else {
        return Ok(());
    };
    let mut refusals = Vec::new();
    let mut refuse = |widening: Widening, place: String| {
        if !allowed.contains(&widening) {
            refusals.push(Refusal { widening, place });
        }
    };
    for named in &kubeconfig.clusters {
        let Some(cluster) = &named.cluster else {
            continue;
        };
        let at = |field: &str| format!("clusters[{}].{field}", named.name);
        if let Some(server) = &cluster.server
            && !server
                .trim_start()
                .to_ascii_lowercase()
                .starts_with("https://")
        {
            refuse(Widening::Http, at("server"));
        }
        if cluster.insecure_skip_tls_verify == Some(true) {
            refuse(Widening::Insecure, at("insecure-skip-tls-verify"));
        }
        if cluster.certificate_authority.is_some() {
            refuse(Widening::Files, at("certificate-authority"));
        }
    }
    for named in &kubeconfig.auth_infos {
        let Some(user) = &named.auth_info else {
            continue;
        };
        let at = |field: &str| format!("users[{}].{field}", named.name);
        if user.exec.is_some() {
            refuse(Widening::Exec, at("exec"));
        }
        if user.auth_provider.is_some() {
            refuse(Widening::AuthProvider, at("auth-provider"));
        }
        for (field, set) in [
            ("tokenFile", user.token_file.is_some()),
            ("client-certificate", user.client_certificate.is_some()),
            ("client-key", user.client_key.is_some()),
        ] {
            if set {
                refuse(Widening::Files, at(field));
            }
        }
    }
    if refusals.is_empty() {
        Ok(())
    } else {
        Err(Refused(refusals))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INLINE: &str = "
apiVersion: v1
kind: Config
clusters:
- name: prod
  cluster:
    server: https://prod.example:6443
    certificate-authority-data: Q0E=
users:
- name: admin
  user:
    token: abc
contexts:
- name: prod
  context: {cluster: prod, user: admin}
current-context: prod
";

    fn parsed(text: &str) -> Kubeconfig {
        Kubeconfig::from_yaml(text).unwrap()
    }

    fn from_cluster(allowed: &[Widening]) -> KubeconfigTrust {
        KubeconfigTrust::FromCluster(allowed.iter().copied().collect())
    }

    #[test]
    fn inline_credentials_for_a_verified_server_pass() {
        assert_eq!(check(&parsed(INLINE), &from_cluster(&[])), Ok(()));
    }

    #[test]
    fn every_widening_is_refused_by_name_and_place_unless_allowed() {
        let hostile = "
apiVersion: v1
kind: Config
clusters:
- name: prod
  cluster:
    server: https://prod.example:6443
    insecure-skip-tls-verify: true
    certificate-authority: /etc/ssl/ca.pem
- name: plain
  cluster:
    server: http://plain.example
users:
- name: stealer
  user:
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
    client-certificate: /c.pem
    client-key: /c.key
- name: runner
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: /bin/sh
    auth-provider:
      name: gcp
      config: {cmd-path: /bin/sh}
contexts: []
";
        let Err(refused) = check(&parsed(hostile), &from_cluster(&[])) else {
            panic!("a hostile kubeconfig passed");
        };
        let places: Vec<(Widening, &str)> = refused
            .0
            .iter()
            .map(|r| (r.widening, r.place.as_str()))
            .collect();
        assert_eq!(
            places,
            [
                (
                    Widening::Insecure,
                    "clusters[prod].insecure-skip-tls-verify"
                ),
                (Widening::Files, "clusters[prod].certificate-authority"),
                (Widening::Http, "clusters[plain].server"),
                (Widening::Files, "users[stealer].tokenFile"),
                (Widening::Files, "users[stealer].client-certificate"),
                (Widening::Files, "users[stealer].client-key"),
                (Widening::Exec, "users[runner].exec"),
                (Widening::AuthProvider, "users[runner].auth-provider"),
            ]
        );
        let text = refused.to_string();
        assert!(
            text.contains("--cluster-secrets-allow auth-provider,exec,files,http,insecure"),
            "{text}"
        );
        // Each opt-in lifts its own refusals only.
        let Err(refused) = check(
            &parsed(hostile),
            &from_cluster(&[Widening::Exec, Widening::Files]),
        ) else {
            panic!("refusals vanished");
        };
        let left: BTreeSet<Widening> = refused.0.iter().map(|r| r.widening).collect();
        assert_eq!(
            left,
            BTreeSet::from([Widening::Insecure, Widening::Http, Widening::AuthProvider])
        );
        // The operator's own files may use everything.
        assert_eq!(check(&parsed(hostile), &KubeconfigTrust::Operator), Ok(()));
    }
}
