//! The reconciler-host checkout a project is written against: the project
//! takes its SDK, WIT and pinned tool versions from it, so it never pins
//! other versions than the SDK's.

use std::path::{Path, PathBuf};

use super::error::ScaffoldError;

/// A reconciler-host checkout: where a project's SDK, WIT and pinned tool
/// versions come from.
#[derive(Clone, Debug)]
pub struct Checkout(PathBuf);

impl Checkout {
    pub fn at(dir: &Path) -> Result<Self, ScaffoldError> {
        let has = |p: &str| dir.join(p).exists();
        let complete = has("plugins/sdk/Cargo.toml")
            && has("sdk-python/pyproject.toml")
            && has("sdk-js/package.json")
            && has("wit/reconciler.wit");
        if !complete {
            return Err(ScaffoldError::NotACheckout(dir.to_path_buf()));
        }
        let absolute = std::path::absolute(dir).map_err(|e| ScaffoldError::Write {
            path: dir.to_path_buf(),
            source: e,
        })?;
        Ok(Self(absolute))
    }

    /// The checkout this binary was built from, if it is still there.
    pub fn of_this_build() -> Option<Self> {
        let host = Path::new(env!("CARGO_MANIFEST_DIR"));
        Self::at(host.parent()?).ok()
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The Python build tools the SDK pins (`sdk-python/requirements-build.txt`).
    pub(super) fn python_pins(&self) -> Result<Vec<String>, ScaffoldError> {
        let path = self.0.join("sdk-python/requirements-build.txt");
        let text = std::fs::read_to_string(&path).map_err(|e| ScaffoldError::Pins {
            path: path.clone(),
            why: e.to_string(),
        })?;
        Ok(text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .collect())
    }

    /// The componentize-js version the SDK pins (`sdk-js/package.json`).
    pub(super) fn componentize_js(&self) -> Result<String, ScaffoldError> {
        let path = self.0.join("sdk-js/package.json");
        let bad = |why: String| ScaffoldError::Pins {
            path: path.clone(),
            why,
        };
        let text = std::fs::read_to_string(&path).map_err(|e| bad(e.to_string()))?;
        let manifest: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        manifest["devDependencies"]["@bytecodealliance/componentize-js"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| bad("no devDependencies.@bytecodealliance/componentize-js".into()))
    }
}
