//! The objects directory of `dev`, followed: a file created, changed or
//! removed becomes exactly the creates, updates and deletes it means, each
//! passed by the plugins that serve admission, as a real API server would.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use reconciler_contract::Operation;
use serde_json::Value;

use super::stamp::now_millis;
use crate::admission::{GateOutcome, admit_object, admit_write};
use crate::cluster::ObjectKey;
use crate::cluster::embedded::EmbeddedCluster;
use crate::cluster::embedded::kind_scopes::is_crd;
use crate::process::manifests::{manifest_files, read_objects};

/// The objects of a manifest directory as last read, per file, so a rescan
/// turns into exactly the creates, updates and deletes that happened.
#[derive(Default)]
pub struct ManifestDir {
    files: BTreeMap<PathBuf, Vec<(ObjectKey, Value)>>,
}

impl ManifestDir {
    /// Reads `dir` again and applies the differences to `cluster`; returns a
    /// line per change (or per unreadable file).
    pub fn sync(&mut self, dir: &Path, cluster: &EmbeddedCluster) -> Vec<String> {
        self.sync_admitted(dir, cluster, &[])
    }

    /// [`Self::sync`], running each create, update and delete past the
    /// plugin of `plugins` that serves admission for the object's kind: a
    /// denied change is reported and not made (editing the file retries it),
    /// a defaulted object is stored defaulted.
    pub fn sync_admitted(
        &mut self,
        dir: &Path,
        cluster: &EmbeddedCluster,
        plugins: &[Arc<crate::plugin::LoadedPlugin>],
    ) -> Vec<String> {
        let mut lines = Vec::new();
        let files = manifest_files(dir).unwrap_or_default();
        let mut seen = BTreeMap::new();
        for file in &files {
            match read_objects(file) {
                Ok(objects) => {
                    let keyed = objects
                        .into_iter()
                        .filter_map(|o| Some((ObjectKey::of(&o)?, o)))
                        .collect();
                    seen.insert(file.clone(), keyed);
                }
                Err(e) => {
                    // Keep what the file held before: a half-saved file must
                    // not delete its objects.
                    lines.push(format!("error: {e}"));
                    if let Some(old) = self.files.get(file) {
                        seen.insert(file.clone(), old.clone());
                    }
                }
            }
        }
        let old: BTreeMap<ObjectKey, Value> = self.files.values().flatten().cloned().collect();
        let new: BTreeMap<ObjectKey, Value> = seen.values().flatten().cloned().collect();
        // CRDs first: the scope they give their kinds decides how those
        // kinds' objects are stored.
        let (crds, others): (Vec<_>, Vec<_>) = new.iter().partition(|(key, _)| is_crd(&key.kind));
        for (key, object) in crds.into_iter().chain(others) {
            if old.get(key) == Some(object) {
                continue;
            }
            let verb = if old.contains_key(key) {
                "updated"
            } else {
                "created"
            };
            let stored = cluster.get_as_user(key);
            let outcome = admit_write(plugins, object, stored.as_ref(), now_millis());
            if let Some(line) = outcome.report(&key.to_string()) {
                lines.push(line);
            }
            let object = match outcome {
                GateOutcome::Denied { .. } => continue,
                GateOutcome::Admitted { object, .. } => object,
                GateOutcome::NotCovered => object.clone(),
            };
            match cluster.apply_as_user(object) {
                Ok(_) => lines.push(format!("{verb} {key} from {}", dir.display())),
                Err(e) => lines.push(format!("error: cannot apply {key}: {e}")),
            }
        }
        for key in old.keys().filter(|k| !new.contains_key(*k)) {
            let Some(stored) = cluster.get_as_user(key) else {
                // Never stored (its create was denied): nothing to delete.
                continue;
            };
            let outcome = admit_object(
                plugins,
                Operation::Delete,
                None,
                Some(&stored),
                now_millis(),
            );
            if let Some(line) = outcome.report(&key.to_string()) {
                lines.push(line);
            }
            if matches!(outcome, GateOutcome::Denied { .. }) {
                continue;
            }
            match cluster.delete_as_user(key) {
                Ok(()) => lines.push(format!("deleted {key} (its file changed or is gone)")),
                Err(e) => lines.push(format!("error: cannot delete {key}: {e}")),
            }
        }
        self.files = seen;
        lines
    }
}

#[cfg(test)]
mod tests {
    use reconciler_contract::KindRef;

    use super::*;
    use crate::cluster::VirtualClock;

    fn config_map(size: u32) -> String {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: default}}\ndata: {{size: \"{size}\"}}\n"
        )
    }

    #[test]
    fn file_changes_become_creates_updates_and_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let cluster = EmbeddedCluster::new(Arc::new(VirtualClock::at(0)));
        let key = ObjectKey::new(
            KindRef::new("", "v1", "ConfigMap"),
            Some("default"),
            "settings",
        );
        let get = |c: &EmbeddedCluster| {
            c.objects()
                .into_iter()
                .find(|o| ObjectKey::of(o).as_ref() == Some(&key))
        };
        let mut manifests = ManifestDir::default();
        let file = dir.path().join("settings.yaml");

        std::fs::write(&file, config_map(1)).unwrap();
        let lines = manifests.sync(dir.path(), &cluster);
        assert!(
            lines[0].starts_with("created ConfigMap default/settings"),
            "{lines:?}"
        );
        assert!(
            manifests.sync(dir.path(), &cluster).is_empty(),
            "nothing changed, nothing applied"
        );

        std::fs::write(&file, config_map(2)).unwrap();
        let lines = manifests.sync(dir.path(), &cluster);
        assert!(
            lines[0].starts_with("updated ConfigMap default/settings"),
            "{lines:?}"
        );
        assert_eq!(get(&cluster).unwrap()["data"]["size"], "2");

        // A half-saved file is an error, and its objects stay.
        std::fs::write(&file, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name").unwrap();
        let lines = manifests.sync(dir.path(), &cluster);
        assert!(lines[0].starts_with("error: "), "{lines:?}");
        assert!(get(&cluster).is_some());

        std::fs::remove_file(&file).unwrap();
        let lines = manifests.sync(dir.path(), &cluster);
        assert!(
            lines[0].starts_with("deleted ConfigMap default/settings"),
            "{lines:?}"
        );
        assert!(get(&cluster).is_none());
    }
}
