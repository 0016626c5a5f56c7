//! The Wasm OCI artifact: what a pushed plugin looks like in a registry.
//!
//! The CNCF Wasm artifact layout: an OCI image manifest whose config has the
//! media type `application/vnd.wasm.config.v0+json` (the component's
//! imports and exports, so a registry UI or `oras` can tell what it is) and
//! exactly one `application/wasm` layer, the component itself. Pulling also
//! accepts Kubewarden's layout (`application/vnd.wasm.content.layer.v1+wasm`
//! with its `application/vnd.wasm.config.v1+json` config), which Wasm users
//! on Kubernetes already publish.

use oci_client::manifest::{OciDescriptor, OciImageManifest};
use serde::{Deserialize, Serialize};

/// The CNCF Wasm artifact's config.
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// The CNCF Wasm artifact's one layer.
pub const WASM_LAYER: &str = "application/wasm";
/// Kubewarden's policy config.
pub const KUBEWARDEN_CONFIG: &str = "application/vnd.wasm.config.v1+json";
/// Kubewarden's policy layer.
pub const KUBEWARDEN_LAYER: &str = "application/vnd.wasm.content.layer.v1+wasm";

/// Layer media types a pulled plugin may have.
pub const ACCEPTED_LAYERS: [&str; 2] = [WASM_LAYER, KUBEWARDEN_LAYER];

/// `application/vnd.wasm.config.v0+json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WasmConfig {
    /// RFC 3339; left out by default so that pushing the same component
    /// twice gives the same digest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    pub architecture: String,
    pub os: String,
    pub layer_digests: Vec<String>,
    pub component: ComponentInterfaces,
}

/// What a component imports and exports, by interface name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComponentInterfaces {
    pub exports: Vec<String>,
    pub imports: Vec<String>,
}

impl From<crate::plugin::sandbox::ComponentInterfaces> for ComponentInterfaces {
    fn from(found: crate::plugin::sandbox::ComponentInterfaces) -> Self {
        Self {
            exports: found.exports,
            imports: found.imports,
        }
    }
}

impl WasmConfig {
    pub fn new(layer_digest: String, component: ComponentInterfaces) -> Self {
        Self {
            created: None,
            author: None,
            architecture: "wasm".into(),
            os: "wasip2".into(),
            layer_digests: vec![layer_digest],
            component,
        }
    }
}

/// Why a manifest is not a plugin this host runs.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ArtifactError {
    #[error(
        "it has {0} layers; a plugin artifact has exactly one (the component), as `reconciler-host push` makes it"
    )]
    LayerCount(usize),
    #[error(
        "its layer has media type {0:?}, not {WASM_LAYER:?} (or Kubewarden's {KUBEWARDEN_LAYER:?}): it is not a Wasm component artifact"
    )]
    LayerType(String),
    #[error("its layer is {size} bytes, more than the {cap}-byte cap (--registry-max-mib)")]
    TooLarge { size: i64, cap: u64 },
}

/// The component's layer of `manifest`, if `manifest` is a plugin artifact
/// no larger than `cap` bytes.
pub fn component_layer(
    manifest: &OciImageManifest,
    cap: u64,
) -> Result<&OciDescriptor, ArtifactError> {
    let [layer] = manifest.layers.as_slice() else {
        return Err(ArtifactError::LayerCount(manifest.layers.len()));
    };
    if !ACCEPTED_LAYERS.contains(&layer.media_type.as_str()) {
        return Err(ArtifactError::LayerType(layer.media_type.clone()));
    }
    if layer.size < 0 || layer.size as u64 > cap {
        return Err(ArtifactError::TooLarge {
            size: layer.size,
            cap,
        });
    }
    Ok(layer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(layers: &[(&str, i64)]) -> OciImageManifest {
        OciImageManifest {
            layers: layers
                .iter()
                .map(|(media_type, size)| OciDescriptor {
                    media_type: media_type.to_string(),
                    digest: "sha256:00".into(),
                    size: *size,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn one_wasm_layer_of_either_layout_is_a_plugin() {
        assert!(component_layer(&manifest(&[(WASM_LAYER, 10)]), 10).is_ok());
        assert!(component_layer(&manifest(&[(KUBEWARDEN_LAYER, 10)]), 10).is_ok());
    }

    #[test]
    fn images_several_layers_and_oversized_layers_are_refused() {
        let image = "application/vnd.oci.image.layer.v1.tar+gzip";
        let refused = |layers: &[(&str, i64)]| component_layer(&manifest(layers), 10).unwrap_err();
        assert_eq!(
            refused(&[(image, 10)]),
            ArtifactError::LayerType(image.into())
        );
        assert_eq!(
            refused(&[(WASM_LAYER, 1), (WASM_LAYER, 1)]),
            ArtifactError::LayerCount(2)
        );
        assert_eq!(refused(&[]), ArtifactError::LayerCount(0));
        assert_eq!(
            refused(&[(WASM_LAYER, 11)]),
            ArtifactError::TooLarge { size: 11, cap: 10 }
        );
    }

    #[test]
    fn the_config_is_the_cncf_layout() {
        let config = WasmConfig::new(
            "sha256:ab".into(),
            ComponentInterfaces {
                exports: vec!["reconciler:plugin/reconciler@0.3.0".into()],
                imports: vec!["wasi:io/streams@0.2.0".into()],
            },
        );
        let json = serde_json::to_value(&config).unwrap();
        assert_eq!(json["architecture"], "wasm");
        assert_eq!(json["os"], "wasip2");
        assert_eq!(json["layerDigests"][0], "sha256:ab");
        assert_eq!(
            json["component"]["exports"][0],
            "reconciler:plugin/reconciler@0.3.0"
        );
        assert!(json.get("created").is_none());
    }
}
