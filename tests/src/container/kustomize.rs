//! deploy/'s kustomization, pinned and rendered as `kustomize edit set
//! image NAME=NEWNAME@DIGEST` and `kubectl apply -k` would: the pieces of
//! kustomize that deploy/ uses (`resources` and `images`), and a refusal of
//! any other field, so that deploy/ growing a feature this does not
//! render fails the test instead of rendering something else.

use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::Deserialize as _;
use serde_json::{Value, json};

const KNOWN_FIELDS: [&str; 4] = ["apiVersion", "kind", "resources", "images"];

fn kustomization(dir: &Path) -> Result<Value> {
    let path = dir.join("kustomization.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let value: Value = serde_yaml_ng::from_str(&text)?;
    if let Some(unknown) = value
        .as_object()
        .context("a kustomization is a mapping")?
        .keys()
        .find(|k| !KNOWN_FIELDS.contains(&k.as_str()))
    {
        bail!(
            "{} uses `{unknown}`, which this test's rendering does not know",
            path.display()
        );
    }
    Ok(value)
}

/// `kustomize edit set image NAME=NEW_NAME@DIGEST` in `dir`: the `images`
/// entry for `name` names the image by digest.
pub fn set_image(dir: &Path, name: &str, new_name: &str, digest: &str) -> Result<()> {
    let mut value = kustomization(dir)?;
    let images = value["images"]
        .as_array_mut()
        .context("deploy/'s kustomization has no `images` to pin the image in")?;
    let entry = images
        .iter_mut()
        .find(|i| i["name"] == name)
        .with_context(|| format!("no `images` entry for {name}"))?;
    *entry = json!({"name": name, "newName": new_name, "digest": digest});
    std::fs::write(
        dir.join("kustomization.yaml"),
        serde_yaml_ng::to_string(&value)?,
    )?;
    Ok(())
}

/// Every object `kubectl apply -k dir` would apply, in order.
pub fn render(dir: &Path) -> Result<Vec<Value>> {
    let value = kustomization(dir)?;
    let images = value["images"].as_array().cloned().unwrap_or_default();
    let mut objects = Vec::new();
    for resource in value["resources"].as_array().into_iter().flatten() {
        let file = dir.join(resource.as_str().context("a resource is a path")?);
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        for document in serde_yaml_ng::Deserializer::from_str(&text) {
            let mut object = Value::deserialize(document)
                .with_context(|| format!("parsing {}", file.display()))?;
            if object.is_null() {
                continue;
            }
            for container in containers(&mut object) {
                if let Some(image) = container["image"].as_str() {
                    container["image"] = json!(set(image, &images));
                }
            }
            objects.push(object);
        }
    }
    Ok(objects)
}

fn containers(object: &mut Value) -> Vec<&mut Value> {
    // Not by indexing, which would add the path to objects without it.
    let Some(spec) = object
        .pointer_mut("/spec/template/spec")
        .and_then(Value::as_object_mut)
    else {
        return Vec::new();
    };
    spec.iter_mut()
        .filter(|(k, _)| *k == "containers" || *k == "initContainers")
        .flat_map(|(_, v)| v.as_array_mut().into_iter().flatten())
        .collect()
}

/// An image reference with kustomize's `images` rules applied: an entry
/// whose `name` is the reference's name replaces the name (`newName`),
/// the tag (`newTag`) or both tag and digest (`digest`).
fn set(image: &str, images: &[Value]) -> String {
    let (name, tail) = match image
        .find('@')
        .or_else(|| image.rfind(':').filter(|at| !image[*at..].contains('/')))
    {
        Some(at) => image.split_at(at),
        None => (image, ""),
    };
    let Some(entry) = images.iter().find(|i| i["name"] == name) else {
        return image.to_string();
    };
    let name = entry["newName"].as_str().unwrap_or(name);
    if let Some(digest) = entry["digest"].as_str() {
        return format!("{name}@{digest}");
    }
    match entry["newTag"].as_str() {
        Some(tag) => format!("{name}:{tag}"),
        None => format!("{name}{tail}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_entries_rename_retag_and_pin() {
        let images = [
            json!({"name": "reconciler-host", "newTag": "dev"}),
            json!({"name": "registry:5000/other", "newName": "mirror/other", "digest": "sha256:ab"}),
        ];
        assert_eq!(set("reconciler-host", &images), "reconciler-host:dev");
        assert_eq!(set("reconciler-host:old", &images), "reconciler-host:dev");
        assert_eq!(
            set("registry:5000/other:1", &images),
            "mirror/other@sha256:ab"
        );
        assert_eq!(set("untouched:1", &images), "untouched:1");
    }
}
