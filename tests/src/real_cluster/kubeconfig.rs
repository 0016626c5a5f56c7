//! Kubeconfigs for a host that must see the cluster differently from the
//! test: through a relay (another server address), or as a service account
//! (a bearer token instead of the test's own credentials).
//!
//! Each is derived from the current context of a kubeconfig the test
//! already uses (`KUBECONFIG`, or its own control plane's), so the server's
//! CA comes along and the host verifies the server as the test does.

use std::path::Path;

use anyhow::{Context as _, Result};
use kube::config::{AuthInfo, Cluster, Kubeconfig};
use serde_json::{Value, json};

/// The cluster and user of the current context of `source`, or of
/// `KUBECONFIG` (the files it lists, merged, as kubectl reads them) when
/// `source` is `None`. File paths in them are absolute.
fn current(source: Option<&Path>) -> Result<(Cluster, AuthInfo)> {
    let described = match source {
        Some(path) => path.display().to_string(),
        None => "KUBECONFIG".to_string(),
    };
    let config = match source {
        Some(path) => Kubeconfig::read_from(path),
        None => Kubeconfig::read(),
    }
    .with_context(|| format!("reading {described}"))?;
    let context_name = config
        .current_context
        .as_deref()
        .with_context(|| format!("{described} has no current-context"))?;
    let context = config
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.clone())
        .with_context(|| format!("{described}: no context {context_name}"))?;
    let cluster = config
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.clone())
        .with_context(|| format!("{described}: no cluster {}", context.cluster))?;
    let user = match &context.user {
        Some(name) => config
            .auth_infos
            .iter()
            .find(|u| &u.name == name)
            .and_then(|u| u.auth_info.clone())
            .with_context(|| format!("{described}: no user {name}"))?,
        None => AuthInfo::default(),
    };
    Ok((cluster, user))
}

fn write(path: &Path, cluster: &Cluster, user: Value) -> Result<()> {
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": serde_json::to_value(cluster)?}],
        "users": [{"name": "e2e", "user": user}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e"}}],
        "current-context": "e2e",
    });
    let text = serde_yaml_ng::to_string(&config)?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Writes to `path` the current context of `source` (see [`current`]) with
/// `server` as the API server's URL: same credentials, same CA.
pub fn with_server(source: Option<&Path>, server: &str, path: &Path) -> Result<()> {
    let (mut cluster, user) = current(source)?;
    cluster.server = Some(server.to_string());
    write(path, &cluster, serde_json::to_value(&user)?)
}

/// Writes to `path` the cluster of the current context of `source` (see
/// [`current`]) with a user authenticated by `token` alone.
pub fn with_token(source: Option<&Path>, token: &str, path: &Path) -> Result<()> {
    let (cluster, _) = current(source)?;
    write(path, &cluster, json!({"token": token}))
}

/// A kubeconfig for `plane` authenticating as `user` in `group` with a
/// client certificate minted now from its CA (what rotating credentials,
/// or giving a member less privilege, looks like).
pub fn minted(plane: &super::OwnControlPlane, user: &str, group: &str) -> Result<String> {
    use base64::Engine as _;
    let pki = plane.state_dir().join("pki");
    let work = tempfile::tempdir()?;
    let key = work.path().join("client.key");
    let csr = work.path().join("client.csr");
    let crt = work.path().join("client.crt");
    let run = |args: &[&str]| -> Result<()> {
        let out = std::process::Command::new("openssl")
            .args(args)
            .output()
            .context("running openssl")?;
        anyhow::ensure!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    };
    let path = |p: &Path| p.to_string_lossy().into_owned();
    run(&["genrsa", "-out", &path(&key), "2048"])?;
    run(&[
        "req",
        "-new",
        "-key",
        &path(&key),
        "-subj",
        &format!("/O={group}/CN={user}"),
        "-out",
        &path(&csr),
    ])?;
    // Version 3, with the usage a client certificate states: rustls
    // refuses a bare version 1 certificate.
    let extensions = work.path().join("client.ext");
    std::fs::write(
        &extensions,
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n",
    )?;
    run(&[
        "x509",
        "-req",
        "-in",
        &path(&csr),
        "-CA",
        &path(&pki.join("ca.crt")),
        "-CAkey",
        &path(&pki.join("ca.key")),
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        &path(&extensions),
        "-out",
        &path(&crt),
    ])?;
    let text = std::fs::read_to_string(plane.kubeconfig())?;
    let mut config: Value = serde_yaml_ng::from_str(&text)?;
    let b64 = |p: &Path| -> Result<String> {
        Ok(base64::engine::general_purpose::STANDARD.encode(std::fs::read(p)?))
    };
    for user_entry in config["users"]
        .as_array_mut()
        .context("users in the kubeconfig")?
    {
        user_entry["user"] = json!({
            "client-certificate-data": b64(&crt)?,
            "client-key-data": b64(&key)?,
        });
    }
    Ok(serde_yaml_ng::to_string(&config)?)
}

#[cfg(test)]
mod tests {
    use kube::config::Kubeconfig;

    use super::*;

    const SOURCE: &str = "apiVersion: v1
kind: Config
clusters:
- name: other
  cluster:
    server: https://10.0.0.9:6443
- name: test
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority: ca.crt
users:
- name: admin
  user:
    client-certificate-data: Y2VydA==
    client-key-data: a2V5
contexts:
- name: other
  context: {cluster: other, user: admin}
- name: test
  context: {cluster: test, user: admin}
current-context: test
";

    /// The cluster and user of the written file's current context.
    fn written(path: &Path) -> (Cluster, Value) {
        let config = Kubeconfig::read_from(path).unwrap();
        let user = serde_json::to_value(&config.auth_infos[0].auth_info).unwrap();
        (config.clusters[0].cluster.clone().unwrap(), user)
    }

    #[test]
    fn a_relay_keeps_the_credentials_and_the_ca_of_the_current_context() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("config");
        std::fs::write(&source, SOURCE).unwrap();
        let out = dir.path().join("relayed");
        with_server(Some(&source), "https://127.0.0.1:9999", &out).unwrap();
        let (cluster, user) = written(&out);
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:9999"));
        // Relative to the source's directory, as kubectl reads it.
        let ca = dir.path().join("ca.crt");
        assert_eq!(cluster.certificate_authority.as_deref(), ca.to_str());
        assert_eq!(user["client-certificate-data"], "Y2VydA==");
        assert_eq!(user["client-key-data"], "a2V5");
    }

    #[test]
    fn a_token_user_keeps_the_cluster_and_nothing_of_the_user() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("config");
        std::fs::write(&source, SOURCE).unwrap();
        let out = dir.path().join("token");
        with_token(Some(&source), "abc.def", &out).unwrap();
        let (cluster, user) = written(&out);
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(user, json!({"token": "abc.def"}));
    }
}
