//! Registry credentials from docker config files.
//!
//! The format `docker login` writes (`~/.docker/config.json`, or
//! `$DOCKER_CONFIG/config.json`) and Kubernetes keeps in
//! `kubernetes.io/dockerconfigjson` Secrets: `auths` maps a registry to a
//! base64 `user:password` (or separate `username` and `password`). Keys
//! may be written as URLs (`https://host/v1/`), so a registry is matched by
//! its host and port alone. Credential helpers (`credsStore`,
//! `credHelpers`) run programs, which a controller in a pod cannot: they
//! are reported and skipped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;

/// Credentials by registry host, from any number of docker configs; the
/// first config naming a registry wins.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    by_registry: BTreeMap<String, (String, String)>,
}

#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("{source_name} is not a docker config: {error}")]
    Json {
        source_name: String,
        error: serde_json::Error,
    },
    #[error("{source_name}: the credentials of {registry} are not base64 of user:password")]
    Auth {
        source_name: String,
        registry: String,
    },
}

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, DockerAuth>,
    #[serde(default, rename = "credsStore")]
    creds_store: Option<String>,
    #[serde(default, rename = "credHelpers")]
    cred_helpers: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct DockerAuth {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

impl Credentials {
    /// The user's docker config: `$DOCKER_CONFIG/config.json`, else
    /// `~/.docker/config.json`; none when there is no such file.
    pub fn from_user_config() -> Result<Self, CredentialsError> {
        let Some(path) = user_config_path() else {
            return Ok(Self::default());
        };
        match std::fs::read(&path) {
            Ok(bytes) => {
                let mut credentials = Self::default();
                credentials.add_docker_config(&path.display().to_string(), &bytes)?;
                Ok(credentials)
            }
            Err(_) => Ok(Self::default()),
        }
    }

    /// Adds the registries of one docker config (`config.json`, a Secret's
    /// `.dockerconfigjson`, or the older `.dockercfg`, which is the `auths`
    /// map alone). `source_name` names it in errors.
    pub fn add_docker_config(
        &mut self,
        source_name: &str,
        bytes: &[u8],
    ) -> Result<(), CredentialsError> {
        let json = |error| CredentialsError::Json {
            source_name: source_name.to_string(),
            error,
        };
        let value: serde_json::Value = serde_json::from_slice(bytes).map_err(json)?;
        let config: DockerConfig = if value.get("auths").is_some()
            || value.get("credsStore").is_some()
            || value.get("credHelpers").is_some()
        {
            serde_json::from_value(value).map_err(json)?
        } else {
            DockerConfig {
                auths: serde_json::from_value(value).map_err(json)?,
                creds_store: None,
                cred_helpers: BTreeMap::new(),
            }
        };
        if let Some(store) = &config.creds_store {
            tracing::info!(
                "{source_name}: credsStore {store:?} is not used (credential helpers are not run); only `auths` entries are"
            );
        }
        for registry in config.cred_helpers.keys() {
            tracing::info!(
                "{source_name}: the credential helper for {registry} is not run; only `auths` entries are used"
            );
        }
        for (key, auth) in config.auths {
            let registry = registry_host(&key);
            let pair = match (auth.username, auth.password, auth.auth) {
                (Some(user), Some(password), _) => (user, password),
                (_, _, Some(encoded)) if !encoded.is_empty() => {
                    decode(&encoded).ok_or_else(|| CredentialsError::Auth {
                        source_name: source_name.to_string(),
                        registry: registry.clone(),
                    })?
                }
                _ => continue,
            };
            self.by_registry.entry(registry).or_insert(pair);
        }
        Ok(())
    }

    /// The credentials for `registry` (`host[:port]`), or anonymous.
    pub fn auth_for(&self, registry: &str) -> RegistryAuth {
        match self.by_registry.get(registry) {
            Some((user, password)) => RegistryAuth::Basic(user.clone(), password.clone()),
            None => RegistryAuth::Anonymous,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.by_registry.is_empty()
    }
}

fn user_config_path() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG") {
        return Some(Path::new(&dir).join("config.json"));
    }
    std::env::var_os("HOME").map(|home| Path::new(&home).join(".docker").join("config.json"))
}

/// `https://index.docker.io/v1/` -> `index.docker.io`; `host:5000` stays.
fn registry_host(key: &str) -> String {
    let without_scheme = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    without_scheme
        .split('/')
        .next()
        .unwrap_or(without_scheme)
        .to_string()
}

fn decode(encoded: &str) -> Option<(String, String)> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(auth: RegistryAuth) -> Option<(String, String)> {
        match auth {
            RegistryAuth::Basic(u, p) => Some((u, p)),
            _ => None,
        }
    }

    #[test]
    fn auths_match_by_host_and_port_whatever_the_key_spelling() {
        let mut c = Credentials::default();
        let encoded = base64::engine::general_purpose::STANDARD.encode("alice:s3cret:with:colons");
        let config = format!(
            r#"{{"auths": {{"https://registry.example:5000/v1/": {{"auth": "{encoded}"}},
                "other.example": {{"username": "bob", "password": "pw"}}}}}}"#
        );
        c.add_docker_config("config.json", config.as_bytes())
            .unwrap();
        assert_eq!(
            basic(c.auth_for("registry.example:5000")),
            Some(("alice".into(), "s3cret:with:colons".into()))
        );
        assert_eq!(
            basic(c.auth_for("other.example")),
            Some(("bob".into(), "pw".into()))
        );
        assert_eq!(basic(c.auth_for("registry.example")), None);
    }

    #[test]
    fn the_older_dockercfg_form_and_the_first_source_win() {
        let mut c = Credentials::default();
        c.add_docker_config(
            "a",
            br#"{"r.example": {"username": "first", "password": "1"}}"#,
        )
        .unwrap();
        c.add_docker_config(
            "b",
            br#"{"auths": {"r.example": {"username": "second", "password": "2"}}}"#,
        )
        .unwrap();
        assert_eq!(
            basic(c.auth_for("r.example")),
            Some(("first".into(), "1".into()))
        );
    }

    #[test]
    fn a_broken_config_names_its_source() {
        let mut c = Credentials::default();
        let e = c
            .add_docker_config("secret default/pull", b"{not json")
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("secret default/pull is not a docker config"),
            "{e}"
        );
        let e = c
            .add_docker_config(
                "secret default/pull",
                br#"{"auths": {"r.example": {"auth": "%%%"}}}"#,
            )
            .unwrap_err();
        assert!(e.to_string().contains("r.example"), "{e}");
    }
}
