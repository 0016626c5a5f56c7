//! Plugin objects among `dev`'s and `simulate`'s object files.
//!
//! The embedded cluster has no registry client of its own; the Plugins
//! seeded into it are read here instead, with the keys their verification
//! names taken from the Secrets and ConfigMaps seeded beside them, and
//! served as `--plugin` references are: resolved, verified and pulled at
//! start, under the same rules as on a cluster.

use base64::Engine as _;
use serde_json::Value;

use super::kind::{GROUP, KIND, VERSION};
use super::spec::{PluginSpec, ValidSpec};
use crate::registry::{TrustPolicy, TrustedKey};

/// A Plugin object read from files: its name, spec and trust policy.
#[derive(Debug)]
pub struct PluginObject {
    pub name: String,
    pub spec: ValidSpec,
    pub policy: TrustPolicy,
}

fn is_plugin(object: &Value) -> bool {
    object["apiVersion"] == format!("{GROUP}/{VERSION}") && object["kind"] == KIND
}

/// Every Plugin among `objects`, or why one cannot be served (naming it).
pub fn plugin_objects(objects: &[Value]) -> Vec<Result<PluginObject, String>> {
    objects
        .iter()
        .filter(|o| is_plugin(o))
        .map(|object| {
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or("(unnamed)")
                .to_string();
            let spec: PluginSpec = serde_json::from_value(object["spec"].clone())
                .map_err(|e| format!("Plugin {name}: spec: {e}"))?;
            let spec = spec.validate().map_err(|e| format!("Plugin {name}: {e}"))?;
            let policy = policy_of(&spec, objects).map_err(|e| format!("Plugin {name}: {e}"))?;
            Ok(PluginObject { name, spec, policy })
        })
        .collect()
}

fn policy_of(spec: &ValidSpec, objects: &[Value]) -> Result<TrustPolicy, String> {
    let mut policy = TrustPolicy::default();
    let Some(verification) = &spec.raw.verification else {
        return Ok(policy);
    };
    if !verification.keyless.is_empty() {
        return Err(
            "spec.verification.keyless needs a trust root, which dev and simulate are not given; verify with publicKeys here"
                .into(),
        );
    }
    for key in &verification.public_keys {
        let location = key.location();
        let (kind, data_key) = (location.kind, location.data_key);
        let name = format!("{kind} {} key {data_key}", location.name);
        let holder = objects
            .iter()
            .find(|o| {
                o["kind"] == kind
                    && o["apiVersion"] == "v1"
                    && o["metadata"]["name"] == location.name
            })
            .ok_or_else(|| format!("{kind} {} is not among the objects", location.name))?;
        let pem = match (
            holder["stringData"][data_key].as_str(),
            holder["data"][data_key].as_str(),
        ) {
            (Some(text), _) => text.as_bytes().to_vec(),
            (None, Some(text)) if kind == "ConfigMap" => text.as_bytes().to_vec(),
            (None, Some(encoded)) => base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| format!("{name}: not base64: {e}"))?,
            (None, None) => return Err(format!("{name} does not exist")),
        };
        policy
            .keys
            .push(TrustedKey::from_pem(name, &pem).map_err(|e| e.to_string())?);
    }
    Ok(policy)
}

/// The Plugin objects of `dev`'s object files, followed as the files
/// change: a new or edited Plugin (or key) is pulled and served, a removed
/// one stops serving, and one that fails keeps its last good version, as on
/// a cluster.
pub struct ObjectPlugins {
    options: crate::registry::RegistryOptions,
    cache: crate::registry::ArtifactCache,
    served: crate::registry::served_files::ServedFiles,
    /// What each Plugin was last pulled for (spec and keys).
    seen: std::collections::BTreeMap<String, String>,
    failures: u64,
}

impl ObjectPlugins {
    pub fn new(
        options: crate::registry::RegistryOptions,
        cache: crate::registry::ArtifactCache,
    ) -> std::io::Result<Self> {
        let served = crate::registry::served_files::ServedFiles::new(cache.dir())?;
        Ok(Self {
            options,
            cache,
            served,
            seen: std::collections::BTreeMap::new(),
            failures: 0,
        })
    }

    /// Where their files are served from.
    pub fn dir(&self) -> &std::path::Path {
        self.served
            .dir()
            .expect("ServedFiles::new made the directory")
    }

    /// Plugin objects that could not be served so far.
    pub fn failures(&self) -> u64 {
        self.failures
    }

    /// Brings the served files in line with the Plugins among `objects`;
    /// a line for each change or failure, and whether a file changed.
    pub async fn sync(&mut self, objects: &[Value]) -> (Vec<String>, bool) {
        let (mut lines, mut changed) = (Vec::new(), false);
        let mut present = std::collections::BTreeSet::new();
        for plugin in plugin_objects(objects) {
            let plugin = match plugin {
                Ok(plugin) => plugin,
                Err(why) => {
                    // A Plugin broken in the file keeps what served.
                    if let Some(name) = why
                        .strip_prefix("Plugin ")
                        .and_then(|r| r.split(':').next())
                    {
                        present.insert(name.to_string());
                    }
                    self.failures += 1;
                    lines.push(format!("error: {why}"));
                    continue;
                }
            };
            present.insert(plugin.name.clone());
            let fingerprint = plugin.fingerprint();
            if self.seen.get(&plugin.name) == Some(&fingerprint) {
                continue;
            }
            let fetched = plugin.fetch(&self.options, &self.cache).await;
            match fetched.map_err(|e| e.to_string()).and_then(|f| {
                self.served
                    .place(&format!("plugin-{}", plugin.name), &f.path)
                    .map(|_| f)
                    .map_err(|e| format!("cannot serve it: {e}"))
            }) {
                Ok(fetched) => {
                    lines.push(format!("Plugin {}: {fetched}", plugin.name));
                    self.seen.insert(plugin.name.clone(), fingerprint);
                    changed = true;
                }
                Err(why) => {
                    self.failures += 1;
                    lines.push(format!(
                        "error: Plugin {}: {why} (whatever served keeps serving)",
                        plugin.name
                    ));
                }
            }
        }
        let gone: Vec<String> = self
            .seen
            .keys()
            .filter(|n| !present.contains(*n))
            .cloned()
            .collect();
        for name in gone {
            self.seen.remove(&name);
            if let Err(e) = self.served.remove(&format!("plugin-{name}")) {
                lines.push(format!("error: Plugin {name}: cannot stop serving it: {e}"));
            } else {
                lines.push(format!("Plugin {name} is gone: its plugin stops"));
                changed = true;
            }
        }
        (lines, changed)
    }
}

impl PluginObject {
    /// Resolves, verifies (with the keys beside it) and pulls its source.
    pub async fn fetch(
        &self,
        options: &crate::registry::RegistryOptions,
        cache: &crate::registry::ArtifactCache,
    ) -> Result<crate::registry::fetch::FetchedPlugin, crate::registry::fetch::FetchError> {
        let client = crate::registry::RegistryClient::new(self.spec.registry_options(options));
        crate::registry::fetch::fetch_once(&client, cache, &self.policy, &self.spec.reference, None)
            .await
    }

    /// What the Plugin is pulled for: its spec and the keys it trusts.
    pub fn fingerprint(&self) -> String {
        let mut text = self.spec.raw.source.clone();
        text.push_str(&format!("{:?}", self.spec.raw));
        for key in &self.policy.keys {
            text.push_str(&key.name);
            text.push_str(&String::from_utf8_lossy(key.pem()));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plugins_take_their_keys_from_the_objects_beside_them() {
        let (_, public) = crate::registry::signatures::generate_key_pair(b"").unwrap();
        let objects = vec![
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "keys"},
                   "data": {"cosign.pub": base64::engine::general_purpose::STANDARD.encode(&public)}}),
            json!({"apiVersion": "reconciler-host.io/v1alpha1", "kind": "Plugin", "metadata": {"name": "podset"},
                   "spec": {"source": "oci://127.0.0.1:5000/podset:1",
                            "verification": {"publicKeys": [{"secretRef": {"name": "keys"}}]}}}),
            json!({"apiVersion": "reconciler-host.io/v1alpha1", "kind": "Plugin", "metadata": {"name": "broken"},
                   "spec": {"source": "oci://127.0.0.1:5000/x:1",
                            "verification": {"publicKeys": [{"configMapRef": {"name": "missing"}}]}}}),
            json!({"apiVersion": "example.com/v1alpha1", "kind": "PodSet", "metadata": {"name": "a"}}),
        ];
        let found = plugin_objects(&objects);
        assert_eq!(found.len(), 2);
        let podset = found[0].as_ref().unwrap();
        assert_eq!(
            (podset.name.as_str(), podset.policy.keys.len()),
            ("podset", 1)
        );
        let broken = found[1].as_ref().unwrap_err();
        assert!(
            broken.starts_with("Plugin broken: ConfigMap missing is not among the objects"),
            "{broken}"
        );
    }
}
