//! Reading Kubernetes objects from YAML files, as `kubectl apply -f` does:
//! a file or a directory of `*.yaml`/`*.yml`/`*.json` files, several
//! documents per file, and `kind: List` wrappers.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

/// A document that is not an object the host can use, named by file and
/// position.
#[derive(Debug, thiserror::Error)]
#[error("{}: document {index}: {reason}", file.display())]
pub struct ManifestError {
    pub file: PathBuf,
    pub index: usize,
    pub reason: String,
}

/// The manifest files at `path`: the file itself, or the YAML and JSON files
/// directly in the directory, sorted.
pub fn manifest_files(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_manifest(p) && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

pub fn is_manifest(path: &Path) -> bool {
    let hidden = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_none_or(|n| n.starts_with('.'));
    !hidden
        && path
            .extension()
            .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
}

/// The objects of one file, in order. Empty documents are skipped.
pub fn read_objects(file: &Path) -> Result<Vec<Value>, ManifestError> {
    let fail = |index: usize, reason: String| ManifestError {
        file: file.to_path_buf(),
        index,
        reason,
    };
    let text = std::fs::read_to_string(file).map_err(|e| fail(0, format!("cannot read: {e}")))?;
    let mut objects = Vec::new();
    for (i, document) in serde_yaml_ng::Deserializer::from_str(&text).enumerate() {
        let index = i + 1;
        let value = Value::deserialize(document).map_err(|e| fail(index, e.to_string()))?;
        if value.is_null() {
            continue;
        }
        if value.get("kind").and_then(Value::as_str) == Some("List") {
            let items = value
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for item in items {
                objects.push(check(item).map_err(|r| fail(index, r))?);
            }
        } else {
            objects.push(check(value).map_err(|r| fail(index, r))?);
        }
    }
    Ok(objects)
}

fn check(object: Value) -> Result<Value, String> {
    let has = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    };
    if !object.is_object() {
        return Err("not a mapping".into());
    }
    if !has("/apiVersion") || !has("/kind") {
        return Err("needs apiVersion and kind".into());
    }
    if !has("/metadata/name") {
        return Err("needs metadata.name".into());
    }
    Ok(object)
}

/// Every object under `path`, with the file each came from.
pub fn read_all(path: &Path) -> Result<Vec<(PathBuf, Value)>, anyhow::Error> {
    let mut out = Vec::new();
    for file in
        manifest_files(path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?
    {
        for object in read_objects(&file)? {
            out.push((file.clone(), object));
        }
    }
    Ok(out)
}

/// The CustomResourceDefinitions under `path` (`dev --crds`, `simulate
/// --crds`). Anything else there is refused naming its file: a CRD
/// directory that also held objects would seed them by surprise.
pub fn read_crds(path: &Path) -> Result<Vec<Value>, anyhow::Error> {
    let mut crds = Vec::new();
    for (file, object) in read_all(path)? {
        let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        if kind != "CustomResourceDefinition" || !api_version.starts_with("apiextensions.k8s.io/") {
            anyhow::bail!(
                "{}: {api_version} {kind} is not a CustomResourceDefinition (apiextensions.k8s.io/v1); the CRD directory holds CRDs only, objects belong with --objects",
                file.display()
            );
        }
        crds.push(object);
    }
    Ok(crds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_multi_document_files_and_lists_naming_bad_documents() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("objects.yaml");
        std::fs::write(
            &file,
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: b}}\n",
        )
        .unwrap();
        let names: Vec<_> = read_objects(&file)
            .unwrap()
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["a", "b"]);
        std::fs::write(
            &file,
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\nkind: ConfigMap\n",
        )
        .unwrap();
        let err = read_objects(&file).unwrap_err().to_string();
        assert!(
            err.contains("objects.yaml: document 2: needs apiVersion and kind"),
            "{err}"
        );
    }

    #[test]
    fn a_crd_directory_holds_crds_only() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("crd.yaml"),
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: tenants.example.com}\n",
        )
        .unwrap();
        assert_eq!(read_crds(dir.path()).unwrap().len(), 1);
        std::fs::write(
            dir.path().join("stray.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
        )
        .unwrap();
        let err = read_crds(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("stray.yaml: v1 ConfigMap is not a CustomResourceDefinition"),
            "{err}"
        );
    }
}
